//! A configuration for the tests to vary.

use crate::{Config, Tuning};

/// 4096 channels of 10-bit samples, wideband, 8-bit dithered output, default tuning.
pub(crate) fn cfg() -> Config {
    Config {
        channels: 4096,
        taps: 16,
        sample_bits: 10,
        spectra_per_heap: 256,
        output_bits: 8,
        dither: true,
        decimation: 1,
        ddc_taps: 0,
        nb_points: 0,
        tuning: Tuning::default(),
    }
}

/// [`cfg`] at `channels` with the two passes' column groups and tile as given (0: default).
pub(crate) fn wide(channels: usize, fused_fir_columns: usize, fused_tile: usize) -> Config {
    Config {
        channels,
        tuning: Tuning {
            fused_fir_columns,
            fused_tile,
            ..Tuning::default()
        },
        ..cfg()
    }
}

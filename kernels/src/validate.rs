//! What the kernels assume of a configuration, checked before it is compiled, and the error
//! that says what is wrong.

use crate::launch::{DDC_SET_MAX, MAX_DDC_OUTPUTS, POSTPROC_TILE};
use crate::{Config, Tuning};

/// A configuration the kernels cannot run, with a sentence saying why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the kernels need a power of two of at least 16 channels, not {0}")]
    Channels(usize),
    #[error("the kernels need at least one tap")]
    NoTaps,
    #[error("the kernels read 8, 10, 12 or 16-bit samples, not {0}")]
    SampleBits(u32),
    #[error("spectra per heap must be positive")]
    NoSpectraPerHeap,
    #[error("the kernels write 8 or 4-bit output, not {0}")]
    OutputBits(u32),
    #[error("the kernels decimate by 8, 16 or 32 (1: wideband), not {0}")]
    Decimation(usize),
    #[error("a narrowband output needs at least one DDC tap")]
    NoDdcTaps,
    #[error(
        "a narrowband PFB of {channels} channels has {} or {} points, not {points}",
        channels,
        2 * channels
    )]
    NbPoints { channels: usize, points: usize },
    // Boxed: the tuning is large, and every `Result` carries the error's size.
    #[error("bad pfb_fir tuning {0:?}: batch >= 1, block a power of two up to 1024")]
    PfbFirTuning(Box<Tuning>),
    #[error("postproc rows must divide {tile}, not {0}", tile = POSTPROC_TILE)]
    PostprocRows(usize),
    #[error("fused_fir takes 4, 8 or 16 columns a group, not {0}")]
    FirColumns(usize),
    #[error("fused_fir can load at most a batch's {batch} sample pairs ahead, not {ahead}")]
    FirAhead { batch: usize, ahead: usize },
    #[error("fused_post prefetches rows at most 4 steps ahead, not {0}")]
    PostPrefetch(usize),
    #[error(
        "fused_fir's blocks take at most 512 threads: {columns} columns of {groups} groups is more"
    )]
    FirThreads { columns: usize, groups: usize },
    #[error("the two passes split their FFT into at least 16 or 32 rows, not {0}")]
    MinRows(usize),
    #[error("the two passes split their FFT into at most 32 or 64 rows, not {0}")]
    MaxRows(usize),
    #[error("fused_post's tile takes a power of two of values up to 32768, not {0}")]
    PostTile(usize),
    #[error(
        "ddc_set takes 4 or 8 warps and spans of 8192 or 16384 samples, not {warps} and {span}"
    )]
    DdcSetShape { warps: usize, span: usize },
    #[error(
        "ddc_set's {warps} warps need at least {needed} outputs a block at D {decimation}: a span \
         of {span} samples gives {outputs}"
    )]
    DdcSetBlock {
        warps: usize,
        needed: usize,
        decimation: usize,
        span: usize,
        outputs: usize,
    },
    #[error("ddc outputs per thread must be odd and at most {most}, not {0}", most = MAX_DDC_OUTPUTS)]
    DdcOutputs(usize),
    #[error("a DDC set needs an output")]
    EmptyDdcSet,
    #[error(
        "a DDC set takes 1 to {most} narrowband outputs of samples exact in float16",
        most = DDC_SET_MAX
    )]
    DdcSetOutputs,
}

impl Config {
    /// Checks what the kernels assume, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.channels.is_power_of_two() || self.channels < 16 {
            return Err(ConfigError::Channels(self.channels));
        }
        if self.taps == 0 {
            return Err(ConfigError::NoTaps);
        }
        if !spead::samples::SAMPLE_BITS.contains(&self.sample_bits) {
            return Err(ConfigError::SampleBits(self.sample_bits));
        }
        if self.spectra_per_heap == 0 {
            return Err(ConfigError::NoSpectraPerHeap);
        }
        if self.output_bits != 8 && self.output_bits != 4 {
            return Err(ConfigError::OutputBits(self.output_bits));
        }
        if ![1, 8, 16, 32].contains(&self.decimation) {
            return Err(ConfigError::Decimation(self.decimation));
        }
        if self.decimation > 1 && self.ddc_taps == 0 {
            return Err(ConfigError::NoDdcTaps);
        }
        if self.decimation > 1 && ![self.channels, 2 * self.channels].contains(&self.nb_points) {
            return Err(ConfigError::NbPoints {
                channels: self.channels,
                points: self.nb_points,
            });
        }
        let t = &self.tuning;
        if t.fir_batch == 0 || !t.fir_block.is_power_of_two() || t.fir_block > 1024 {
            return Err(ConfigError::PfbFirTuning(Box::new(*t)));
        }
        if t.postproc_rows == 0 || !POSTPROC_TILE.is_multiple_of(t.postproc_rows) {
            return Err(ConfigError::PostprocRows(t.postproc_rows));
        }
        if ![0, 4, 8, 16].contains(&t.fused_fir_columns) {
            return Err(ConfigError::FirColumns(t.fused_fir_columns));
        }
        if t.fused_fir_ahead.is_some_and(|k| k > t.fir_batch) {
            return Err(ConfigError::FirAhead {
                batch: t.fir_batch,
                ahead: self.fused_fir_ahead(),
            });
        }
        if t.fused_post_prefetch.is_some_and(|k| k > 4) {
            return Err(ConfigError::PostPrefetch(self.fused_post_prefetch()));
        }
        if self.fused() && self.fused_split().0 * self.fused_columns() > 512 {
            return Err(ConfigError::FirThreads {
                columns: self.fused_columns(),
                groups: self.fused_split().0,
            });
        }
        if ![0, 16, 32].contains(&t.fused_min_r) {
            return Err(ConfigError::MinRows(t.fused_min_r));
        }
        if ![0, 32, 64].contains(&t.fused_max_r) {
            return Err(ConfigError::MaxRows(t.fused_max_r));
        }
        if t.fused_tile != 0 && (!t.fused_tile.is_power_of_two() || t.fused_tile > 32768) {
            return Err(ConfigError::PostTile(t.fused_tile));
        }
        if ![4, 8].contains(&t.ddc_mma_warps) || ![8192, 16384].contains(&t.ddc_set_span) {
            return Err(ConfigError::DdcSetShape {
                warps: t.ddc_mma_warps,
                span: t.ddc_set_span,
            });
        }
        if self.decimation > 1
            && !(t.ddc_set_span / self.decimation).is_multiple_of(64 * t.ddc_mma_warps)
        {
            return Err(ConfigError::DdcSetBlock {
                warps: t.ddc_mma_warps,
                needed: 64 * t.ddc_mma_warps,
                decimation: self.decimation,
                span: t.ddc_set_span,
                outputs: t.ddc_set_span / self.decimation,
            });
        }
        if t.ddc_outputs.is_multiple_of(2) || t.ddc_outputs > MAX_DDC_OUTPUTS {
            return Err(ConfigError::DdcOutputs(t.ddc_outputs));
        }
        Ok(())
    }
}

/// Checks that one `ddc_set` module can serve `outputs`, and gives the first of them.
pub(crate) fn ddc_set_outputs<'a>(outputs: &[&'a Config]) -> Result<&'a Config, ConfigError> {
    let Some(first) = outputs.first() else {
        return Err(ConfigError::EmptyDdcSet);
    };
    if outputs.len() > DDC_SET_MAX || outputs.iter().any(|c| !c.ddc_mma()) {
        return Err(ConfigError::DdcSetOutputs);
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cfg, wide};

    #[test]
    fn validation() {
        assert!(cfg().validate().is_ok());
        assert!(Config {
            channels: 1000,
            ..cfg()
        }
        .validate()
        .is_err());
        assert!(Config {
            channels: 8,
            ..cfg()
        }
        .validate()
        .is_err());
        assert!(Config {
            sample_bits: 9,
            ..cfg()
        }
        .validate()
        .is_err());
        assert!(Config {
            output_bits: 2,
            ..cfg()
        }
        .validate()
        .is_err());
        // The two passes' launch shapes: columns 4, 8 or 16 (at most 512 threads), tiles a power
        // of two. Three passes where told so.
        let three_pass = Config {
            channels: 65536,
            tuning: Tuning {
                fused_max_channels: 32768,
                ..Tuning::default()
            },
            ..cfg()
        };
        assert!(three_pass.validate().is_ok());
        assert!(wide(65536, 8, 0).validate().is_ok());
        assert!(wide(65536, 16, 0).validate().is_ok(), "R = 32: 512 threads");
        let mut r64 = wide(65536, 16, 0);
        r64.tuning.fused_max_r = 64;
        assert!(r64.validate().is_err(), "R = 64: 1024 threads");
        r64.tuning.fused_max_r = 48;
        assert!(r64.validate().is_err());
        let mut c = wide(4096, 0, 0);
        c.tuning.fused_min_r = 24;
        assert!(c.validate().is_err());
        assert!(wide(4096, 12, 0).validate().is_err());
        assert!(wide(4096, 0, 3000).validate().is_err());
    }
}

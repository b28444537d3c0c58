//! The configuration a module is compiled for, and the sizes that follow from it alone.

use crate::launch::UNZIP;
use crate::Tuning;

/// What a compiled module is specialised for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub channels: usize,
    pub taps: usize,
    pub sample_bits: u32,
    pub spectra_per_heap: usize,
    /// Bits per output component: 8, or 4 (packed two to a byte).
    pub output_bits: u32,
    /// Whether `postproc` adds the output dither (keys per spectrum from the host).
    pub dither: bool,
    /// 1 for a wideband output; a narrowband output's DDC decimation, the subsampling S (8, 16
    /// or 32): its decimation D, or 2D without discard.
    pub decimation: usize,
    /// A narrowband output's DDC filter length L (unused for wideband).
    pub ddc_taps: usize,
    /// A narrowband output's PFB points P: 2n keeping the centre half of its bins, n keeping them
    /// all (without discard); 0 for wideband.
    pub nb_points: usize,
    pub tuning: Tuning,
}

impl Config {
    /// Points of each cuFFT transform.
    pub fn fft_len(&self) -> usize {
        self.channels / UNZIP
    }

    /// Threads per block of `pfb_fir` (one per column pair; a block never straddles spectra).
    pub fn fir_block(&self) -> usize {
        self.channels.min(self.tuning.fir_block)
    }

    /// A narrowband output's unzip factor: its FFT is `nb_unzip` transforms of P / `nb_unzip`
    /// points per spectrum (1 or 4).
    pub fn nb_unzip(&self) -> usize {
        if self.nb_points >= self.tuning.nb_unzip_from {
            UNZIP
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::cfg;

    #[test]
    fn pfb_fir_blocks_never_take_more_than_the_channels() {
        assert_eq!(
            Config {
                channels: 16,
                ..cfg()
            }
            .fir_block(),
            16
        );
    }
}

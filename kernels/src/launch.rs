//! Launch shapes that the host and the kernels share: each must match its `.cu` source.

// The three wideband passes.
/// The n-point complex FFT is split into `UNZIP` FFTs of n / UNZIP points (cuFFT) and
/// UNZIP-point FFTs in the post-processing kernel (paper, section 4.2).
pub const UNZIP: usize = 4;

/// Post-processing block: `POSTPROC_TILE` column pairs x `POSTPROC_TILE` spectra, run by
/// `POSTPROC_TILE` x [`Tuning::postproc_rows`](crate::Tuning::postproc_rows) threads. Must match `postproc.cu`.
pub const POSTPROC_TILE: usize = 32;

// The two wideband passes.
/// The fewest channels the two-pass wideband kernels take (their R x A split needs A >= 128).
pub const FUSED_MIN_CHANNELS: usize = 1024;
/// Threads per block of `fused_post` where A <= 1024 (two blocks an SM); where A = 2048, A / 4
/// (one block an SM).
pub(crate) const FUSED_POST_THREADS: usize = 256;
/// The fewest values in a `fused_post` block's output tile (2A channels x spectra per block)
/// unless [`Tuning::fused_tile`](crate::Tuning::fused_tile) says otherwise: 32 KB at 8 bits. Where A = 1024 it takes 16384
/// (64 KB), so that each channel's run is 8 spectra, 32 bytes: shorter runs write part of a
/// device-memory sector each, and measured 12-20% slower.
pub(crate) const FUSED_TILE: usize = 8192;
/// Words of each (spectrum, column group) a `fused_fir` tensor copy brings
/// ([`Tuning::fused_fir_tma`](crate::Tuning::fused_fir_tma)): the 6 to 9 its 8 columns span at 10 to 16 bits from any word,
/// from the word before rounded down to 16 bytes.
pub const FIR_TMA_WORDS: usize = 12;

// The narrowband kernels.
/// The most outputs one `ddc_set` launch serves.
pub const DDC_SET_MAX: usize = 8;
/// Threads per block of the narrowband kernels but `ddc` (their `__launch_bounds__`).
pub const NARROWBAND_BLOCK: usize = 256;
/// Threads per block of `ddc`.
pub const DDC_BLOCK: usize = 128;
/// Spectra each `nb_fir` thread computes (sliding its window while the delay holds).
pub const NB_FIR_RUN: usize = 64;
/// `nb_postproc`'s block: `NB_POST_TILE` channels x `NB_POST_TILE` spectra, run by
/// `NB_POST_TILE` x `NB_POST_ROWS` threads. Must match `narrowband.cu`.
pub const NB_POST_TILE: usize = 32;
pub const NB_POST_ROWS: usize = 8;
/// Taps per phase for which a `ddc` thread holds samples in registers at once.
pub(crate) const DDC_TILE: usize = 16;
/// The most outputs per `ddc` thread (its accumulators and samples are registers).
pub(crate) const MAX_DDC_OUTPUTS: usize = 15;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::POSTPROC;

    #[test]
    fn tile_constant_matches_the_source() {
        assert!(POSTPROC.contains(&format!("#define PP_TILE {POSTPROC_TILE}\n")));
    }
}

//! CUDA C sources of the F-engine kernels, specialised per configuration.
//!
//! [`source`] prepends the configuration as `#define`s to the kernels, so that NVRTC compiles one
//! module per configuration with every loop bound and index a compile-time constant. The sources
//! are self-contained (no includes), as NVRTC needs.
//!
//! - `pfb_fir`: unpacks the packed samples, applies the per-spectrum window offset (coarse delay)
//!   and the PFB FIR, and writes float32 in the order the unzipped FFT reads.
//! - (cuFFT: batched complex FFTs of [`Config::fft_len`] points, done by the host crate.)
//! - `postproc`: twiddles and 4-point FFTs (the rest of the unzipped FFT), the real-FFT fix-up, fine
//!   delay, fringe phase, gain, dither, quantisation to 8 or 4 bits with saturation counts, and
//!   the transpose into heap layout through shared memory.
//! - `input_power`: the input sensors, the chunk's integer sum of squares and full-scale samples
//!   per polarisation (after `pfb_fir`'s `load_pair`, which it reuses).
//! - `fused_fir` and `fused_post` ([`Tuning::fused`], the default from 1024 channels up): the
//!   wideband output in two passes instead of three, the FFT our own (n = R x A: the R-point FFTs
//!   after the FIR, the A-point ones before the post-processing).
//! - Narrowband outputs ([`Config::decimation`] > 1) add `ddc` (mix, low-pass filter and
//!   subsample by S), `nb_fir` (the complex PFB), cuFFT's P-point complex transforms and
//!   `nb_postproc` (the bins kept, delay, gain, dither, quantisation): with discard S = D and the
//!   centre half of P = 2n bins, without S = 2D and all of P = n ([`Config::nb_points`]).

/// A module's text: its `#define`s, then the CUDA C files it needs.
mod assemble;
/// [`Config`], what a module is specialised for.
mod config;
/// The narrowband DDC's kernel choice, launch shapes and taps table.
mod ddc;
/// The `#define`s a configuration produces.
mod defines;
/// The CUDA C files and their kernels' names.
mod embedded;
/// The two wideband passes' FFT split and launch shapes.
mod fused;
/// Launch shapes shared with the kernels.
mod launch;
#[cfg(test)]
mod testing;
/// [`Tuning`] and its measured defaults.
mod tuning;
/// [`Config::validate`] and [`ConfigError`].
mod validate;

pub use assemble::{ddc_set_source, source};
pub use config::Config;
pub use embedded::{
    DDC_KERNEL, DDC_SET_KERNEL, FUSED_FIR_KERNEL, FUSED_POST_KERNEL, INPUT_POWER_KERNEL,
    NB_FIR_KERNEL, NB_POSTPROC_KERNEL, PFB_FIR_KERNEL, POSTPROC_KERNEL,
};
pub use fused::fused_split;
pub use launch::{
    DDC_BLOCK, DDC_SET_MAX, FIR_TMA_WORDS, FUSED_MIN_CHANNELS, NARROWBAND_BLOCK, NB_FIR_RUN,
    NB_POST_ROWS, NB_POST_TILE, POSTPROC_TILE, UNZIP,
};
pub use tuning::Tuning;
pub use validate::ConfigError;

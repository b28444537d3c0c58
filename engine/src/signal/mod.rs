//! Signal maths shared by every backend, fixed in docs/signal-path.md (formulas and
//! conventions).
//!
//! - [`weights`]: PFB weights and the channel response they imply.
//! - [`unpack`]: packed digitiser samples to numbers and back.
//! - [`delay`]: the delay model, per-spectrum placement in the span, and validity.
//! - [`dither`]: the counter-based output dither.
//! - [`quantise`]: dither, rounding and clamping to 8 or 4 bits, 4-bit packing.
//! - [`gain`]: the default per-channel gain.
//! - [`power`]: the input sensors (sum of squares, full-scale samples, rms in dBFS).
//! - [`ddc`]: the narrowband output's mixer and decimating low-pass filter.
//! - [`narrowband`]: the narrowband outputs' geometry, delay mapping and float64 channeliser.
//! - [`no_discard`]: the no-discard (VLBI) narrowband output's remez DDC filter and its figures.
//! - [`half_rows`]: the two-pass CUDA kernels with float16 rows, modelled in float64.

pub mod ddc;
pub mod delay;
pub mod dither;
pub mod gain;
pub mod half_rows;
pub mod narrowband;
pub mod no_discard;
pub mod power;
pub mod quantise;
pub mod unpack;
pub mod weights;

/// A bad argument to one of the signal functions, with a sentence saying what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SignalError(pub String);

pub type Result<T> = std::result::Result<T, SignalError>;

/// Shorthand for an `Err` carrying a formatted sentence.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::signal::SignalError(format!($($arg)*)))
    };
}
pub(crate) use bail;

//! Backends: the signal path from packed input samples to 8-bit output heaps.
//!
//! A backend is built once per input geometry and list of output geometries ([`InputGeometry`],
//! [`OutputGeometry`]: kernels compiled, FFT plans made, buffers sized) and then processes a
//! stream of [`Frame`]s with no allocation. The engine owns everything around it: which samples
//! arrived, which spectra are valid, the delay model, and sending. A backend only computes.
//!
//! # Outputs
//! One input feeds from 1 to [`MAX_OUTPUTS`] outputs, each with its own channels, taps, filter
//! design, output bits and dither ([`channelisations`] checks them), wideband or narrowband (a
//! [`Ddc`] before a complex PFB, mixing with each frame's [`OutputFrame::mixer`]). A backend reads (unpacks,
//! uploads) each frame's input once and measures its input sensors once, then channelises it once
//! per output with that output's delays, gains and timestamp, into that output's
//! [`OutputFrame`]. Every backend serves any such list; the CUDA backend uploads the input once
//! and runs each output's kernels on it.
//!
//! # The span
//! Per polarisation the backend keeps a contiguous *span* of samples: the last
//! [`InputGeometry::overlap_samples`] samples of the previous span, followed by the frame's new
//! chunk of [`InputGeometry::chunk_samples`] samples. Every PFB window of the frame lies inside the
//! span (paper, Fig. 2), at the per-spectrum offset the engine computed from the coarse delay.
//!
//! # Pipelining
//! [`Backend::submit`] hands a frame over and may return before the work is done;
//! [`Backend::wait`] returns the oldest submitted frame once its output is ready. Up to
//! [`Backend::max_in_flight`] frames may be submitted before a `wait`, which lets the CUDA backend
//! keep host-to-device copies, kernels and device-to-host copies busy at once. Synchronous backends
//! do the work in `submit` and report `max_in_flight() == 1` ([`Synchronous`]).

use num_complex::Complex32;

#[cfg(test)]
pub(crate) mod conformance;
pub mod cpu;
pub mod cuda;
mod frame;
mod geometry;
pub mod null;
pub mod reference;
mod synchronous;

pub use frame::{Frame, HostBuffer, InputFrame, OutputFrame, SpectrumDelay};
pub use geometry::{Bins, Channelisation, Ddc, InputGeometry, OutputGeometry, OutputKind};
pub use synchronous::{Process, Synchronous};

/// Errors a backend reports. Never a panic: an engine must be able to fall back or say why.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot run on this host (no CUDA driver, no device, ...).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The geometry is not one this backend supports.
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    /// A device or library call failed.
    #[error("{0}")]
    Device(String),
    /// The caller broke the protocol (wait with nothing in flight, wrong buffer size, ...).
    #[error("misuse: {0}")]
    Misuse(String),
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// Number of polarisations: fixed by the wire formats.
pub const POLS: usize = 2;

/// The signal path. See the module documentation for the protocol.
pub trait Backend: Send {
    /// Short name for logs and metrics: "reference", "cpu", "cuda", "null".
    fn name(&self) -> &'static str;
    fn input(&self) -> &InputGeometry;
    /// The outputs, in the engine's output order.
    fn outputs(&self) -> &[OutputGeometry];
    /// Allocates a frame whose buffers suit this backend (pinned memory for CUDA).
    fn alloc_frame(&self) -> Result<Frame>;
    /// Sets the complex gain per channel of one polarisation of one output (`gains.len()` is that
    /// output's channels), for frames submitted from now on.
    fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) -> Result<()>;
    /// Hands a frame over. Frames are processed in submission order; each frame's span starts with
    /// the previous frame's last `overlap_samples` samples.
    fn submit(&mut self, frame: Frame) -> Result<()>;
    /// Returns the oldest submitted frame with each output's `heaps` and `saturated` filled, or
    /// `None` when nothing is in flight.
    fn wait(&mut self) -> Result<Option<Frame>>;
    /// Frames that may be submitted before the oldest must be waited for.
    fn max_in_flight(&self) -> usize;
}

/// Most outputs one backend serves from its input.
pub const MAX_OUTPUTS: usize = 8;

/// Each output's channelisation of `input`, checked: from 1 to [`MAX_OUTPUTS`] outputs, each valid
/// with this input (chunk a whole number of its heaps, overlap enough for its taps).
pub fn channelisations(
    input: InputGeometry,
    outputs: &[OutputGeometry],
) -> Result<Vec<Channelisation>> {
    if outputs.is_empty() {
        return Err(BackendError::Unsupported(
            "no outputs asked for: a backend needs at least one output".into(),
        ));
    }
    if outputs.len() > MAX_OUTPUTS {
        return Err(BackendError::Unsupported(format!(
            "{} outputs asked for: a backend serves at most {MAX_OUTPUTS} outputs from one input",
            outputs.len()
        )));
    }
    outputs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let g = Channelisation::new(input, *o);
            g.validate().map_err(|e| {
                // With one output the sentence needs no number (the same as [`single_output`]'s).
                BackendError::Unsupported(if outputs.len() == 1 {
                    e.0
                } else {
                    format!("output {k}: {e}")
                })
            })?;
            Ok(g)
        })
        .collect()
}

/// The checks every backend makes on `set_gains`.
pub(crate) fn check_gains(
    outputs: &[OutputGeometry],
    output: usize,
    pol: usize,
    gains: &[Complex32],
) -> Result<()> {
    let Some(o) = outputs.get(output) else {
        return Err(BackendError::Misuse(format!(
            "output {output} does not exist ({} outputs)",
            outputs.len()
        )));
    };
    if pol >= POLS {
        return Err(BackendError::Misuse(format!(
            "polarisation must be 0 or 1, not {pol}"
        )));
    }
    if gains.len() != o.channels {
        return Err(BackendError::Misuse(format!(
            "{} gains for {} channels",
            gains.len(),
            o.channels
        )));
    }
    if let Some(k) = gains
        .iter()
        .position(|v| !(v.re.is_finite() && v.im.is_finite()))
    {
        return Err(BackendError::Misuse(format!(
            "gain of channel {k} is not finite: {}",
            gains[k]
        )));
    }
    Ok(())
}

//! The device side of the backend: a ring of per-frame slots, the span ring, the streams, and one
//! frame's work.
//!
//! Frame `seq` uses slot `seq % SLOTS` for everything that must outlive the compute stream's turn
//! (its place in the span ring, the input sensors' counters, each output's delays, gains and
//! heaps). The input is copied in once per frame whatever the number of outputs; each output
//! ([`OutputStage`]) computes from the frame's span.
//! The streams overlap:
//! - host-to-device, at the highest priority: the chunk, after the last frame's chunk in the span
//!   ring ([`SpanRing`]: where the ring wraps, the last span's tail first copied in as this span's
//!   overlap, device to device: a kernel, which the outputs' kernels must not crowd out), each
//!   output's delays and gains;
//! - compute: the first output's `pfb_fir` (or DDC and complex FIR), cuFFT, post-processing
//!   (kernels only, so that it never queues behind a large PCIe copy on a copy engine); each
//!   further output on a lane of its own, forked from compute and joined back, so that outputs
//!   bound by different things (bandwidth, shared memory, arithmetic) run side by side; the
//!   narrowband outputs' DDCs in one launch (`ddc_set`) on a lane of their own, which those
//!   outputs' lanes wait for;
//! - device-to-host: each output's heaps and counters (then cleared for the slot's next use);
//! - sensors: `input_power` over the new chunk, beside the FIR (it only reads the span).
//!
//! Events order them: the copy in waits until the ring's stretch it writes and the slot's
//! parameters are no longer read (compute of frame seq - SLOTS + 1, see [`SpanRing`]; the overlap
//! copy that reads the last span's tail is earlier on the copy-in stream itself); compute waits
//! for the copy in and for the slot's previous output to have left; the copy out waits for compute
//! (which has joined the lanes).
//!
//! Modules: [`span_ring`] (the input's spans), [`slot`] (what a frame owns until it is waited for),
//! [`setup`] (streams, lanes, events and buffers, and the start-up costs), [`submit`] (copy in,
//! copy out, waiting for a frame), [`compute`] (the compute and sensors streams' part of a frame),
//! [`bench_support`] (hooks for the benchmark).

mod bench_support;
mod compute;
mod setup;
mod slot;
mod span_ring;
mod submit;

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use num_complex::Complex32;

use super::ddc_set::DdcSet;
use super::device::driver;
use super::output::OutputStage;
use crate::backend::{InputGeometry, Result};
use slot::Slot;
use span_ring::SpanRing;

pub(crate) use bench_support::{nominal_delays, StageMarks};
pub use setup::Startup;
pub(crate) use span_ring::SpanView;

/// Frames in flight: one being copied in, one computed, one copied out, and one more so that a late
/// `wait` (host jitter) does not leave the copy-in stream idle.
pub(crate) const IN_FLIGHT: usize = 4;
/// One more slot than frames in flight: frame seq + 1 reads frame seq's span for its overlap.
const SLOTS: usize = IN_FLIGHT + 1;
/// Frames a span ring holds at least: its wrap copy costs 1/8 of a frame's overlap copy.
const RING_FRAMES: usize = 8;

pub(crate) struct Pipeline {
    pub input: InputGeometry,
    pub ctx: Arc<CudaContext>,
    pub h2d: Arc<CudaStream>,
    pub compute: Arc<CudaStream>,
    pub d2h: Arc<CudaStream>,
    /// The input sensors' kernel, beside the compute stream.
    pub sensors: Arc<CudaStream>,
    /// In the engine's output order.
    pub outputs: Vec<OutputStage>,
    /// Each output's stream: the compute stream for the first (and for all unless
    /// [`kernels::Tuning::concurrent_outputs`]), else one of its own, forked from the compute
    /// stream after the frame's overlap and joined back before the frame counts as computed.
    lanes: Vec<Arc<CudaStream>>,
    forked: CudaEvent,
    joined: Vec<CudaEvent>,
    /// The narrowband outputs' DDCs in one launch (on the tensor cores), on a lane of its own
    /// (the compute stream unless outputs run concurrently); its members' lanes wait for it.
    ddc_set: Option<(DdcSet, Arc<CudaStream>, CudaEvent)>,
    slots: Vec<Slot>,
    ring: SpanRing,
    /// Sequence number of the next frame.
    seq: u64,
    pub startup: Startup,
}

impl Pipeline {
    pub(super) fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the CUDA context"))
    }

    /// Gains of output `output` for frames enqueued from now on (validated by the caller).
    pub(super) fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) {
        self.outputs[output].set_gains(pol, gains);
    }

    /// Waits for all four streams (used before freeing buffers a copy may still touch).
    pub(super) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        for s in [&self.h2d, &self.compute, &self.d2h, &self.sensors] {
            s.synchronize().map_err(driver("synchronising a stream"))?;
        }
        Ok(())
    }
}

//! The CUDA backend: NVRTC-compiled kernels and cuFFT, loaded at run time through cudarc.
//!
//! Per frame (paper, sections 3 and 4): the chunk is copied into the span after the previous
//! span's tail; `pfb_fir` unpacks the samples and filters them, writing the even/odd samples as
//! complex values transposed for a 4-way unzipped FFT; cuFFT does the batched n/4-point complex
//! FFTs; `postproc` finishes the FFT (twiddles, 4-point FFTs, real-FFT fix-up), applies fine delay,
//! fringe phase and gain, quantises (ties to even, saturation counted per complex value) and
//! transposes into heap layout. Copies in, compute and copies out run on three streams so that
//! consecutive frames overlap ([`pipeline`]).
//!
//! On a host without CUDA, [`CudaBackend::new`] returns [`BackendError::Unavailable`]; nothing here
//! panics for want of a library.

pub mod bench;
mod compile;
mod device;
mod fft;
mod layout;
mod pipeline;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use num_complex::Complex32;

use super::{
    check_gains, single_output, Backend, BackendError, Channelisation, Frame, HostBuffer,
    InputFrame, InputGeometry, OutputFrame, OutputGeometry, Result,
};
use device::PinnedAlloc;
use pipeline::{Pipeline, IN_FLIGHT};

pub use compile::compile_cubin;
pub use device::{missing_libraries, probe};
pub use kernels::Tuning;
pub use pipeline::Startup;

/// Whether the CUDA backend can run here (libraries load, a GPU is present): for `--backend auto`.
pub fn cuda_available() -> bool {
    probe(0).is_ok()
}

/// The CUDA backend. See the module documentation.
pub struct CudaBackend {
    pipeline: Pipeline,
    /// Submitted frames, oldest first, with their slots.
    in_flight: VecDeque<(usize, Frame)>,
}

impl CudaBackend {
    /// Compiles the kernels for GPU `gpu_index`, plans the FFT and allocates every buffer, once.
    /// One output, as every backend today.
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry], gpu_index: usize) -> Result<Self> {
        Self::with_tuning(single_output(input, outputs)?, gpu_index, Tuning::default())
    }

    /// As [`Self::new`] for one output's channelisation, with launch shapes other than the
    /// defaults (for the benchmark).
    pub fn with_tuning(geometry: Channelisation, gpu_index: usize, tuning: Tuning) -> Result<Self> {
        geometry.validate().map_err(BackendError::Unsupported)?;
        probe(gpu_index)?;
        let ctx = device::context(gpu_index)?;
        let pipeline = Pipeline::new(ctx, geometry, tuning)?;
        Ok(Self {
            pipeline,
            in_flight: VecDeque::with_capacity(IN_FLIGHT),
        })
    }

    /// The one output's channelisation it computes.
    pub fn channelisation(&self) -> Channelisation {
        self.pipeline.geometry
    }

    /// What start-up cost: compile, plan and allocation times, device memory.
    pub fn startup(&self) -> Startup {
        self.pipeline.startup
    }

    /// The GPU's name and compute capability, for logs.
    pub fn device_name(&self) -> String {
        let ctx = &self.pipeline.ctx;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        match ctx.compute_capability() {
            Ok((major, minor)) => format!("{name} (sm_{major}{minor})"),
            Err(_) => name,
        }
    }

    fn pinned(&self, len: usize) -> Result<HostBuffer> {
        Ok(PinnedAlloc::new(&self.pipeline.ctx, len)?.into_host_buffer())
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn input(&self) -> &InputGeometry {
        &self.pipeline.geometry.input
    }

    fn outputs(&self) -> &[OutputGeometry] {
        std::slice::from_ref(&self.pipeline.geometry.output)
    }

    fn alloc_frame(&self) -> Result<Frame> {
        let g = &self.pipeline.geometry;
        Ok(Frame {
            input: InputFrame {
                timestamp: 0,
                chunk: [self.pinned(g.chunk_bytes())?, self.pinned(g.chunk_bytes())?],
                power: None,
            },
            outputs: vec![OutputFrame::new(g, self.pinned(g.output_bytes())?)],
        })
    }

    fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) -> Result<()> {
        check_gains(self.outputs(), output, pol, gains)?;
        self.pipeline.set_gains(pol, gains);
        Ok(())
    }

    /// Frames from [`Backend::alloc_frame`] are pinned and copied asynchronously; ordinary host
    /// frames work too, with copies that block the caller.
    fn submit(&mut self, mut frame: Frame) -> Result<()> {
        if self.in_flight.len() >= IN_FLIGHT {
            return Err(BackendError::Misuse(format!(
                "{IN_FLIGHT} frames already in flight: wait first"
            )));
        }
        frame.check(self.input(), self.outputs())?;
        let slot = self.pipeline.enqueue(&mut frame)?;
        self.in_flight.push_back((slot, frame));
        Ok(())
    }

    fn wait(&mut self) -> Result<Option<Frame>> {
        let Some((slot, mut frame)) = self.in_flight.pop_front() else {
            return Ok(None);
        };
        let counters = self.pipeline.finish(slot)?;
        frame.outputs[0].saturated = counters.saturated;
        frame.input.power = Some(counters.power);
        Ok(Some(frame))
    }

    fn max_in_flight(&self) -> usize {
        IN_FLIGHT
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Copies may still be writing into in-flight frames' host buffers: let them finish before
        // the frames are freed. Nothing to report an error to here.
        let _ = self.pipeline.synchronize();
    }
}

//! The CUDA backend: NVRTC-compiled kernels and cuFFT, loaded at run time through cudarc.
//!
//! Per frame (paper, sections 3 and 4): the chunk is copied into the span after the previous
//! span's tail, once whatever the number of outputs; for each output `pfb_fir` unpacks the
//! samples and filters them, writing the even/odd samples as
//! complex values transposed for a 4-way unzipped FFT; cuFFT does the batched n/4-point complex
//! FFTs; `postproc` finishes the FFT (twiddles, 4-point FFTs, real-FFT fix-up), applies fine delay,
//! fringe phase and gain, quantises (ties to even, saturation counted per complex value) and
//! transposes into heap layout. A narrowband output mixes, filters and subsamples on the tensor
//! cores (`ddc_set`, one launch for all of a frame's narrowband outputs), then runs a complex PFB,
//! cuFFT and `nb_postproc`. Copies in, compute and copies out run on streams of their own so that
//! consecutive frames overlap, and outputs beyond the first on lanes of their own so that they
//! overlap each other (`pipeline`).
//!
//! On a host without CUDA, [`CudaBackend::new`] returns [`BackendError::Unavailable`]; nothing here
//! panics for want of a library.

pub mod bench;
mod compile;
mod ddc_set;
mod device;
mod fft;
mod fused;
mod layout;
mod narrowband;
mod output;
mod pipeline;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use num_complex::Complex32;

use super::{
    channelisations, check_gains, Backend, BackendError, Channelisation, Frame, HostBuffer,
    InputFrame, InputGeometry, OutputFrame, OutputGeometry, Result,
};
use device::PinnedAlloc;
use pipeline::{Pipeline, IN_FLIGHT};

pub use compile::compile_cubin;
pub use device::{missing_libraries, probe};
pub use fused::word_map;
pub use kernels::Tuning;
pub use pipeline::Startup;

/// Whether the CUDA backend can run here (libraries load, a GPU is present): for `--backend auto`.
pub fn cuda_available() -> bool {
    probe(0).is_ok()
}

/// The CUDA backend. See the module documentation.
pub struct CudaBackend {
    pipeline: Pipeline,
    outputs: Vec<OutputGeometry>,
    /// Submitted frames, oldest first, with their slots.
    in_flight: VecDeque<(usize, Frame)>,
}

impl CudaBackend {
    /// Compiles the kernels for GPU `gpu_index`, plans the FFTs and allocates every buffer, once,
    /// for every output of `input`.
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry], gpu_index: usize) -> Result<Self> {
        Self::with_tuning(
            &channelisations(input, outputs)?,
            gpu_index,
            Tuning::default(),
        )
    }

    /// As [`Self::new`], with `tuning`'s launch shapes and precision
    /// ([`Tuning::half_rows`]).
    pub fn with_outputs(
        input: InputGeometry,
        outputs: &[OutputGeometry],
        gpu_index: usize,
        tuning: Tuning,
    ) -> Result<Self> {
        Self::with_tuning(&channelisations(input, outputs)?, gpu_index, tuning)
    }

    /// As [`Self::new`] for the outputs' channelisations (of one input), with launch shapes other
    /// than the defaults (for the benchmark).
    pub fn with_tuning(
        outputs: &[Channelisation],
        gpu_index: usize,
        tuning: Tuning,
    ) -> Result<Self> {
        let Some(first) = outputs.first() else {
            return Err(BackendError::Unsupported("no outputs asked for".into()));
        };
        for g in outputs {
            if g.input != first.input {
                return Err(BackendError::Misuse(
                    "every output must share the one input".into(),
                ));
            }
            g.validate()
                .map_err(|e| BackendError::Unsupported(e.into()))?;
        }
        probe(gpu_index)?;
        let ctx = device::context(gpu_index)?;
        let pipeline = Pipeline::new(ctx, outputs, tuning)?;
        Ok(Self {
            pipeline,
            outputs: outputs.iter().map(|g| g.output).collect(),
            in_flight: VecDeque::with_capacity(IN_FLIGHT),
        })
    }

    /// Output `k`'s channelisation.
    pub fn channelisation(&self, k: usize) -> Channelisation {
        self.pipeline.outputs[k].geometry
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
        &self.pipeline.input
    }

    fn outputs(&self) -> &[OutputGeometry] {
        &self.outputs
    }

    fn alloc_frame(&self) -> Result<Frame> {
        let chunk = self.pipeline.input.chunk_bytes();
        Ok(Frame {
            input: InputFrame {
                timestamp: 0,
                chunk: [self.pinned(chunk)?, self.pinned(chunk)?],
                power: None,
            },
            outputs: self
                .pipeline
                .outputs
                .iter()
                .map(|o| {
                    Ok(OutputFrame::new(
                        &o.geometry,
                        self.pinned(o.geometry.output_bytes())?,
                    ))
                })
                .collect::<Result<_>>()?,
        })
    }

    fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) -> Result<()> {
        check_gains(self.outputs(), output, pol, gains)?;
        self.pipeline.set_gains(output, pol, gains);
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
        self.pipeline.finish(slot, &mut frame)?;
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

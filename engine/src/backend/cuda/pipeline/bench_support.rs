//! What the benchmark needs of the pipeline: timing events between stages, device-resident
//! frames computed without copies, and nominal delays.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent};

use super::{Pipeline, SLOTS};
use crate::backend::cuda::device::driver;
use crate::backend::{Channelisation, Frame, Result, POLS};

/// Benchmark timing events of one frame: start, after the overlap copy, after the first output's
/// first stage and FFT, end; and per output (on its lane), its start, after its first stage, after
/// its FFT, its end.
pub(crate) struct StageMarks(pub [CudaEvent; 5], pub Vec<[CudaEvent; 4]>);

impl StageMarks {
    pub(in crate::backend::cuda) fn new(ctx: &Arc<CudaContext>, outputs: usize) -> Result<Self> {
        let ev = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("creating a timing event"))
        };
        let per_output = (0..outputs)
            .map(|_| Ok([ev()?, ev()?, ev()?, ev()?]))
            .collect::<Result<_>>()?;
        Ok(Self([ev()?, ev()?, ev()?, ev()?, ev()?], per_output))
    }
}

impl Pipeline {
    /// Input samples per polarisation per frame.
    pub(in crate::backend::cuda) fn chunk_samples(&self) -> usize {
        self.input.chunk_samples
    }

    /// Bytes of device memory each compute stage reads plus writes, per frame (nominal: every
    /// input read once, every output written once): the ring's overlap copy (one frame in
    /// [`Self::ring_frames`]), then the FIR, FFT and post-processing summed over the outputs.
    pub(in crate::backend::cuda) fn stage_bytes(&self) -> [f64; 4] {
        let overlap = (2 * POLS * self.ring.overlap) as f64 / self.ring.frames as f64;
        let mut b = [overlap, 0.0, 0.0, 0.0];
        for stage in &self.outputs {
            for (total, x) in b[1..].iter_mut().zip(stage.stage_bytes()) {
                *total += x;
            }
        }
        b
    }

    /// Copies `chunks` (packed, one per pol) into every place of the span ring and sets nominal
    /// delays (offset overlap - (T-1) 2n + m 2n, no fine delay) in every slot, for compute-only
    /// timing ([`Self::enqueue_bench_frame`]).
    pub(in crate::backend::cuda) fn load_for_bench(&mut self, chunks: [&[u8]; POLS]) -> Result<()> {
        self.bind()?;
        let geometries: Vec<_> = self.outputs.iter().map(|o| o.geometry.output).collect();
        let mut frame = Frame::new_host(&self.input, &geometries);
        for (chunk, src) in frame.input.chunk.iter_mut().zip(chunks) {
            chunk.copy_from_slice(src);
        }
        for (out, stage) in frame.outputs.iter_mut().zip(&self.outputs) {
            nominal_delays(&stage.geometry, out);
        }
        // Consecutive frames, as the engine sends them (a narrowband output's DDC then makes only
        // what the last frame did not), at least one more than slots so that each slot follows
        // another, and through the whole ring.
        let frames = (SLOTS + 1).max(self.ring.frames);
        for f in 0..frames {
            let slot = f % SLOTS;
            let span_start = (f * self.input.chunk_samples) as u64;
            for (stage, out) in self.outputs.iter_mut().zip(&frame.outputs) {
                stage.stage_params(slot, out, span_start);
            }
            self.copy_in(slot, f as u64, &frame)?;
        }
        self.synchronize()
    }

    /// The compute of bench frame `i` (after [`Self::load_for_bench`]): slot i mod SLOTS, at
    /// frame i's place in the ring, with the overlap copy on the compute stream where frame i is
    /// at the ring's start, as the copy in would make it.
    pub(in crate::backend::cuda) fn enqueue_bench_frame(
        &mut self,
        i: usize,
        marks: Option<&StageMarks>,
    ) -> Result<()> {
        let slot = i % SLOTS;
        self.slots[slot].at = self.ring.place(i as u64);
        self.enqueue_compute(slot, true, marks)
    }

    /// Whether bench frame `i` is at the span ring's start (copies its overlap).
    pub(in crate::backend::cuda) fn bench_frame_copies(&self, i: usize) -> bool {
        self.ring.place(i as u64) == 0
    }

    /// Chunks in the span ring: one frame in this many copies its overlap.
    pub(in crate::backend::cuda) fn ring_frames(&self) -> usize {
        self.ring.frames
    }

    pub(in crate::backend::cuda) fn slots(&self) -> usize {
        SLOTS
    }
}

/// Delays that place spectrum m's window at overlap - lag + m step with lag the window less one
/// step (rounded up to the DDC's grid, the subsampling): no delay, the output's nominal position
/// (for benchmarks).
pub(crate) fn nominal_delays(g: &Channelisation, out: &mut crate::backend::OutputFrame) {
    let lag = (g.window() - g.step()).next_multiple_of(g.output.subsampling());
    for delays in &mut out.delays {
        for (m, d) in delays.iter_mut().enumerate() {
            d.offset = (g.input.overlap_samples - lag + m * g.step()) as u32;
        }
    }
    // A quarter of the sample rate: any word computes at the same speed.
    out.mixer = 1 << 30;
}

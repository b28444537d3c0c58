//! A narrowband output's device work: its DDC (the filter, the taps for the frame's mixer word,
//! the subsampled buffer and which of its samples carry over from the last frame), then the
//! complex PFB FIR over the DDC's output and the post-processing that keeps the bins the output
//! sends. [`super::output::OutputStage`] holds one for a narrowband output. Both kinds run the
//! same kernels, told apart by their configuration: with discard the DDC subsamples by S = D and
//! the PFB has P = 2n points, the centre half kept; without (katgpucbf's VLBI mode) S = 2D and
//! P = n, every bin kept ([`crate::backend::Bins`]). The module's `DECIMATION` is S and its
//! `NB_POINTS` P ([`kernels::Config`]).

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream, LaunchConfig, PushKernelArg};

use super::compile::NarrowbandKernels;
use super::ddc_set::DdcOut;
use super::device::{check, driver, DeviceBuffer};
use super::output::FrameArgs;
use super::pipeline::SpanView;
use crate::backend::{BackendError, Channelisation, Ddc, OutputFrame, Result, POLS};
use crate::signal::ddc;

/// What a narrowband output's DDC buffer holds after the frames enqueued so far: the subsampled
/// samples [range) of the span that starts at ADC time `span_start`, for mixer word `word`.
#[derive(Clone, Copy, Debug)]
struct Made {
    span_start: u64,
    word: u32,
    range: (u32, u32),
}

/// The DDC's arguments for one slot's frame.
#[derive(Clone, Copy, Debug, Default)]
struct DdcSlot {
    /// The mixer phase at the span's first sample and over S samples, for the frame's mixer word
    /// (the `ddc` kernel's arguments).
    phase0: u32,
    phase_step: u32,
    /// The subsampled samples the DDC makes, [first, end): those the frame's windows read, but
    /// the ones the last frame made (first a multiple of 4, so that each sum is grouped alike
    /// whichever block makes it).
    range: (u32, u32),
    /// Those the last frame made: copied within the DDC buffer, (from, to, count).
    carry: Option<(u32, u32, u32)>,
}

/// What a narrowband output adds to the common stage: its DDC filter and the DDC's output.
pub(super) struct NarrowbandStage {
    /// The DDC filter h, float64: the per-frame taps are h times the mixer over them.
    filter: Vec<f64>,
    /// [pol][samples] complex: the span mixed, filtered and subsampled.
    buf: DeviceBuffer,
    /// Subsampled samples per polarisation: every grid point j (span offset jS) whose L taps lie
    /// in the span.
    samples: u32,
    /// The module's configuration: the subsampling S (its `decimation`), the PFB's points P,
    /// which DDC kernel, how it reads its taps.
    cfg: kernels::Config,
    /// The taps z_k as the kernel reads them for the mixer word they were made for, and the
    /// kernel's scale for them: made again only when the centre moves.
    taps: (u32, Vec<u8>, f32),
    /// What `buf` holds once the enqueued frames are computed (they run in order on the
    /// output's stream).
    made: Option<Made>,
    /// Frames that copied DDC outputs from the last (for the tests).
    carries: u64,
    /// One per slot.
    slots: Vec<DdcSlot>,
}

impl NarrowbandStage {
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        g: &Channelisation,
        d: Ddc,
        cfg: &kernels::Config,
        slots: usize,
    ) -> Result<Self> {
        let samples = (g.span_samples() - d.taps) / d.subsampling() + 1;
        Ok(Self {
            filter: d
                .filter()
                .map_err(|e| BackendError::Unsupported(e.to_string()))?,
            buf: DeviceBuffer::new(ctx, POLS * samples * 8)?,
            samples: u32::try_from(samples).map_err(|_| {
                BackendError::Unsupported("the span is too long for the DDC".into())
            })?,
            cfg: cfg.clone(),
            taps: (0, Vec::new(), 1.0),
            made: None,
            carries: 0,
            slots: vec![DdcSlot::default(); slots],
        })
    }

    /// The output's configuration (the `ddc_set` builds from it).
    pub(super) fn config(&self) -> &kernels::Config {
        &self.cfg
    }

    /// Frames whose DDC copied outputs the last frame made.
    #[cfg(test)]
    pub(super) fn carries(&self) -> u64 {
        self.carries
    }

    /// z_k = h_k exp(-2 pi i phase(k)) for mixer word `word`, computed in float64, in the DDC
    /// kernel's table ([`kernels::Config::ddc_taps_table`]).
    fn taps_bytes(&mut self, word: u32) -> &[u8] {
        if self.taps.0 != word || self.taps.1.is_empty() {
            let z: Vec<(f64, f64)> = (self.filter.iter().enumerate())
                .map(|(k, &h)| {
                    let z = ddc::mixer(k as u64, word) * h;
                    (z.re, z.im)
                })
                .collect();
            let (table, scale) = self.cfg.ddc_taps_table(&z);
            self.taps = (word, table, scale);
        }
        &self.taps.1
    }

    /// Stages the DDC of `frame` in slot `slot`: its taps for the frame's mixer word into `taps`
    /// (the slot's staging memory), its phases, and which subsampled samples it makes and which it
    /// copies from the last frame's. `span_start` is the ADC timestamp of the span's first sample.
    pub(super) fn stage(
        &mut self,
        slot: usize,
        g: &Channelisation,
        frame: &OutputFrame,
        span_start: u64,
        taps: &mut [u8],
    ) {
        let word = frame.mixer;
        let subsampling = self.cfg.decimation;
        let mut s = DdcSlot {
            phase0: ddc::mixer_phase(span_start, word),
            phase_step: ddc::mixer_phase(subsampling as u64, word),
            ..DdcSlot::default()
        };
        let table = self.taps_bytes(word);
        taps[..table.len()].copy_from_slice(table);
        // Window starts are multiples of S (checked with the frame); each window is T P
        // subsampled samples.
        let starts = frame
            .delays
            .iter()
            .flatten()
            .map(|d| d.offset / subsampling as u32);
        let (lo, hi) = starts.fold((u32::MAX, 0), |(lo, hi), j| (lo.min(j), hi.max(j)));
        let window = (g.output.taps * self.cfg.nb_points) as u32;
        let (lo, hi) = match lo > hi {
            true => (0, 0),
            false => (lo & !3, hi.saturating_add(window).min(self.samples)),
        };
        // The span moves on by a chunk each frame; where this one follows the last with the
        // same mixer word, the DDC outputs they share are copied, not made again.
        let shift = (g.input.chunk_samples / subsampling) as u32;
        let follows = |p: &Made| {
            p.word == word && p.span_start.wrapping_add(g.input.chunk_samples as u64) == span_start
        };
        s.range = (lo, hi);
        if let Some(p) = self.made.filter(|p| lo < hi && follows(p)) {
            // The last frame made [p.lo, p.hi) of its span: [p.lo - shift, p.hi - shift) here.
            let end = p.range.1.saturating_sub(shift).min(hi);
            let whole = p.range.0 <= lo.saturating_add(shift);
            // The copy's ranges must not overlap (they do not unless a chunk is shorter than a
            // window).
            if whole && end > lo && end - lo <= shift {
                s.carry = Some((lo + shift, lo, end - lo));
                s.range = (end & !3, hi);
                self.carries += 1;
            }
        }
        self.made = (lo < hi).then_some(Made {
            span_start,
            word,
            range: (lo, hi),
        });
        self.slots[slot] = s;
    }

    /// Copies the DDC outputs the slot's frame shares with the last (see `stage`), on `stream`.
    fn copy_carry(&self, slot: usize, stream: &CudaStream) -> Result<()> {
        let Some((from, to, count)) = self.slots[slot].carry else {
            return Ok(());
        };
        for pol in 0..POLS {
            let at = |j: u32| self.buf.at(8 * (pol * self.samples as usize + j as usize));
            // SAFETY: both ranges lie inside this pol's samples (from + count is at most the last
            // frame's end) and do not overlap (count <= from - to).
            check(
                unsafe {
                    sys::cuMemcpyDtoDAsync_v2(
                        at(to),
                        at(from),
                        8 * count as usize,
                        stream.cu_stream(),
                    )
                },
                "copying the DDC outputs two frames share",
            )?;
        }
        Ok(())
    }

    /// The first stage on `stream`: the DDC (unless the frame's `ddc_set` makes it), then the
    /// complex PFB FIR over its output into the FFT's input.
    pub(super) fn enqueue_first_stage(
        &self,
        k: &NarrowbandKernels,
        slot: usize,
        a: &FrameArgs,
        span: SpanView,
        stream: &CudaStream,
    ) -> Result<()> {
        self.launch_ddc(k, slot, a, span, stream)?;
        self.launch_fir(k, a, stream)
    }

    /// The span mixed, filtered and subsampled into the DDC buffer.
    fn launch_ddc(
        &self,
        k: &NarrowbandKernels,
        slot: usize,
        a: &FrameArgs,
        span: SpanView,
        stream: &CudaStream,
    ) -> Result<()> {
        // On the tensor cores the frame's `ddc_set` makes it (with the carry before it).
        let Some(ddc) = &k.ddc else {
            return Ok(());
        };
        self.copy_carry(slot, stream)?;
        let s = &self.slots[slot];
        if s.range.0 >= s.range.1 {
            return Ok(());
        }
        let (taps, ddc_out) = (a.ddc_taps, self.buf.ptr());
        let span_samples = a.span_samples as u64;
        let mut launch = stream.launch_builder(ddc);
        launch
            .arg(&span.ptr)
            .arg(&span.stride_words)
            .arg(&taps)
            .arg(&ddc_out)
            .arg(&self.samples)
            .arg(&s.range.0)
            .arg(&s.range.1)
            .arg(&span_samples)
            .arg(&s.phase0)
            .arg(&s.phase_step);
        let shape = LaunchConfig {
            grid_dim: (
                (s.range.1 - s.range.0).div_ceil(self.cfg.ddc_outputs_per_block() as u32),
                POLS as u32,
                1,
            ),
            block_dim: (kernels::DDC_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: argument types and order match ddc; the DDC buffer holds `samples` per pol; the
        // span (a multiple of 8 samples, padded by 2 words) covers every group read.
        unsafe { launch.launch(shape) }.map_err(driver("launching ddc"))?;
        Ok(())
    }

    /// This output's part of the frame's `ddc_set` (its carry copy enqueued on `stream`, the
    /// set's), or None where its DDC is not in a set or makes nothing this frame. `taps` is the
    /// slot's taps table on the device.
    pub(super) fn ddc_set_part(
        &self,
        slot: usize,
        taps: sys::CUdeviceptr,
        stream: &CudaStream,
    ) -> Result<Option<DdcOut>> {
        if !self.cfg.ddc_mma() {
            return Ok(None);
        }
        self.copy_carry(slot, stream)?;
        let s = &self.slots[slot];
        if s.range.0 >= s.range.1 {
            return Ok(None);
        }
        Ok(Some(DdcOut {
            taps,
            out: self.buf.ptr(),
            samples: self.samples,
            first: s.range.0,
            end: s.range.1,
            phase0: s.phase0,
            phase_step: s.phase_step,
            scale: self.taps.2,
        }))
    }

    /// The complex PFB FIR over the DDC's output into the FFT's input.
    fn launch_fir(&self, k: &NarrowbandKernels, a: &FrameArgs, stream: &CudaStream) -> Result<()> {
        let points = self.cfg.nb_points as u32;
        let (ddc_out, samples) = (self.buf.ptr(), self.samples);
        let mut fir = stream.launch_builder(&k.fir);
        fir.arg(&ddc_out)
            .arg(&samples)
            .arg(&a.offsets)
            .arg(&a.weights)
            .arg(&a.fft)
            .arg(&a.m);
        // SAFETY: argument types and order match nb_fir; offsets are at most max_offset (checked),
        // so every window lies among the DDC's samples.
        let runs = a.m.div_ceil(kernels::NB_FIR_RUN as u32);
        unsafe { fir.launch(narrowband_shape(points, runs, POLS as u32)) }
            .map_err(driver("launching nb_fir"))?;
        Ok(())
    }

    /// Post-processing of the FFT's output into the slot's heaps: the bins kept, n of P, a
    /// thread for each value of k1 < P/4 (2 channels each with discard, 4 without).
    pub(super) fn launch_postproc(
        &self,
        k: &NarrowbandKernels,
        a: &FrameArgs,
        stream: &CudaStream,
    ) -> Result<()> {
        let mut post = stream.launch_builder(&k.postproc);
        post.arg(&a.fft)
            .arg(&a.twiddles)
            .arg(&a.gains)
            .arg(&a.rotation)
            .arg(&a.out)
            .arg(&a.saturated)
            .arg(&a.m);
        // SAFETY: argument types and order match nb_postproc; buffers sized for the geometry.
        let tile = kernels::NB_POST_TILE as u32;
        let columns = self.cfg.nb_points as u32 / 4; // k1 < P/4
        let shape = LaunchConfig {
            grid_dim: (columns.div_ceil(tile), a.m.div_ceil(tile), 1),
            block_dim: (tile * kernels::NB_POST_ROWS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        unsafe { post.launch(shape) }.map_err(driver("launching nb_postproc"))?;
        Ok(())
    }

    /// Bytes the first stage reads plus writes per frame: the span read once, the subsampled
    /// stream written once and read once (the FIR slides its window), the FFT's input (`spectra`
    /// bytes per polarisation) written.
    pub(super) fn first_stage_bytes(&self, g: &Channelisation, spectra: f64) -> f64 {
        let span = g.span_samples() * g.input.sample_bits as usize / 8;
        let ddc = self.samples as f64 * 8.0;
        POLS as f64 * (span as f64 + 2.0 * ddc + spectra)
    }
}

/// One thread per x (blocks of [`kernels::NARROWBAND_BLOCK`]), grid y by z.
fn narrowband_shape(x: u32, y: u32, z: u32) -> LaunchConfig {
    let block = kernels::NARROWBAND_BLOCK as u32;
    LaunchConfig {
        grid_dim: (x.div_ceil(block), y, z),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

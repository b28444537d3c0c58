//! One output's device work: its compiled kernels, FFT plan, weights and twiddles, and per slot its
//! parameters (delays, dither keys, gains) and its heaps. The pipeline ([`super::pipeline`]) runs
//! every output's stages on its lane (the compute stream, or one of its own), over the slot's one
//! copy of the input.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaStream, LaunchConfig, PushKernelArg};
use num_complex::Complex32;

use super::compile::{CompileTimes, Kernels};
use super::ddc_set::DdcOut;
use super::device::{check, driver, DeviceBuffer, PinnedAlloc};
use super::fft::FftPlan;
use super::fused::{FusedArgs, FusedRun};
use super::layout::{self, twiddle_table, ParamLayout, Shapes};
use super::pipeline::SpanView;
use crate::backend::{BackendError, Channelisation, OutputFrame, Result, POLS};
use crate::signal::{ddc, gain, half_rows};

/// Bytes of saturation counters after each slot's heaps: u64 per polarisation.
const SAT_BYTES: usize = 8 * POLS;

/// What one output keeps per slot until the slot's frame is waited for.
struct OutputSlot {
    params: DeviceBuffer,
    /// Host image of `params`, copied in by the host-to-device stream.
    staging: PinnedAlloc,
    /// Which version of the gains `params` holds.
    gains_version: u64,
    /// Heaps, then the saturation counters.
    output: DeviceBuffer,
    saturated: PinnedAlloc,
    /// A narrowband output's mixer phase at the span's first sample and over D samples, for the
    /// frame's mixer word (the `ddc` kernel's arguments).
    phase0: u32,
    phase_step: u32,
    /// The subsampled samples the DDC makes, [first, end): those the frame's windows read, but
    /// the ones the last frame made (first a multiple of 4, so that each sum is grouped alike
    /// whichever block makes it).
    ddc_range: (u32, u32),
    /// Those the last frame made: copied within the DDC buffer, (from, to, count).
    ddc_carry: Option<(u32, u32, u32)>,
    /// The frame's key for the float16 rows' stochastic rounding (`half_rows::frame_key`).
    row_key: u32,
}

/// What a narrowband output's DDC buffer holds after the frames enqueued so far: the subsampled
/// samples [range) of the span that starts at ADC time `span_start`, for mixer word `word`.
#[derive(Clone, Copy, Debug)]
struct Made {
    span_start: u64,
    word: u32,
    range: (u32, u32),
}

/// What a narrowband output adds: its DDC filter and the DDC's output.
struct NarrowbandStage {
    /// The DDC filter h, float64: the per-frame taps are h times the mixer over them.
    filter: Vec<f64>,
    /// [pol][samples] complex: the span mixed, filtered and subsampled.
    buf: DeviceBuffer,
    /// Subsampled samples per polarisation: every grid point j (span offset jD) whose L taps lie
    /// in the span.
    samples: u32,
    /// The module's configuration: the decimation, which DDC kernel, how it reads its taps.
    cfg: kernels::Config,
    /// The taps z_k as the kernel reads them for the mixer word they were made for, and the
    /// kernel's scale for them: made again only when the centre moves.
    taps: (u32, Vec<u8>, f32),
    /// What `buf` holds once the enqueued frames are computed (they run in order on the
    /// output's stream).
    made: Option<Made>,
    /// Frames that copied DDC outputs from the last (for the tests).
    carries: u64,
}

impl NarrowbandStage {
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
}

/// Copies the DDC outputs the slot's frame shares with the last (see `stage_params`), on `stream`.
fn copy_carry(nb: &NarrowbandStage, s: &OutputSlot, stream: &CudaStream) -> Result<()> {
    let Some((from, to, count)) = s.ddc_carry else {
        return Ok(());
    };
    for pol in 0..POLS {
        let at = |j: u32| nb.buf.at(8 * (pol * nb.samples as usize + j as usize));
        // SAFETY: both ranges lie inside this pol's samples (from + count is at most the last
        // frame's end) and do not overlap (count <= from - to).
        check(
            unsafe {
                sys::cuMemcpyDtoDAsync_v2(at(to), at(from), 8 * count as usize, stream.cu_stream())
            },
            "copying the DDC outputs two frames share",
        )?;
    }
    Ok(())
}

/// One output's kernels, plan, constant tables and per-slot buffers.
pub(crate) struct OutputStage {
    pub geometry: Channelisation,
    pub kernels: Kernels,
    pub compile: CompileTimes,
    pub fft_plan_ms: f64,
    /// cuFFT's plan; none for the two-pass wideband kernels, whose FFT is their own.
    plan: Option<FftPlan>,
    weights: DeviceBuffer,
    /// exp(-i pi k / n) for k < n, then W_n^{j k1} = exp(-2 pi i j k1 / n) as [j - 1][k1], k1 < n/4.
    twiddles: DeviceBuffer,
    /// W_n^t for t < n (the two-pass kernels' FFT twiddles; none for three passes).
    wn: Option<DeviceBuffer>,
    /// The two-pass kernels and their rows, where the output runs them.
    fused: Option<FusedRun>,
    /// [pol][spectrum][UNZIP][FFT_LEN] complex: FIR output, transformed in place (a token
    /// allocation for the two-pass kernels, whose rows are the [`FusedRun`]'s).
    fft_buf: DeviceBuffer,
    layout: ParamLayout,
    shapes: Shapes,
    gains: [Vec<Complex32>; POLS],
    gains_version: u64,
    slots: Vec<OutputSlot>,
    narrowband: Option<NarrowbandStage>,
}

impl OutputStage {
    /// Compiles the output's kernels, plans its FFT on `compute` and allocates `slots` slots.
    pub fn new(
        ctx: &Arc<CudaContext>,
        compute: &Arc<CudaStream>,
        geometry: Channelisation,
        tuning: kernels::Tuning,
        slots: usize,
    ) -> Result<Self> {
        let g = geometry;
        // The DDC on the tensor cores (mma.sync, float16) needs sm_80 or later, the bulk
        // prefetch of fused_post's rows sm_90.
        let (major, _) = ctx
            .compute_capability()
            .map_err(driver("reading the compute capability"))?;
        let tuning = kernels::Tuning {
            ddc_mma: tuning.ddc_mma && major >= 8,
            fused_fir_tma: tuning.fused_fir_tma && major >= 9,
            fused_post_prefetch: if major >= 9 {
                tuning.fused_post_prefetch
            } else {
                Some(0)
            },
            ..tuning
        };
        let cfg = kernels::Config {
            channels: g.output.channels,
            taps: g.output.taps,
            sample_bits: g.input.sample_bits,
            spectra_per_heap: g.output.spectra_per_heap,
            output_bits: g.output.bits,
            dither: g.output.dither.is_some(),
            decimation: g.output.decimation(),
            ddc_taps: g.output.ddc.map_or(0, |d| d.taps),
            tuning,
        };
        let shapes = Shapes::new(&g, &cfg)?;
        let (mut kernels, compile) = Kernels::build(ctx, &cfg)?;
        let t_plan = Instant::now();
        let m = g.spectra_per_frame();
        // Wideband: the n-point complex FFT of the real 2n-point one, unzipped by 4; narrowband:
        // a 2n-point complex FFT, unzipped by 4 where it is large.
        let (fft_len, fft_batch) = match g.output.ddc {
            None => (cfg.fft_len(), POLS * m * kernels::UNZIP),
            Some(_) => (
                2 * g.output.channels / cfg.nb_unzip(),
                POLS * m * cfg.nb_unzip(),
            ),
        };
        let plan = match cfg.fused() {
            true => None,
            false => Some(FftPlan::new(ctx, fft_len, fft_batch, compute)?),
        };
        let fft_plan_ms = t_plan.elapsed().as_secs_f64() * 1e3;
        let w64 = g
            .output
            .weights()
            .map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let w32: Vec<u8> = w64.iter().flat_map(|&w| (w as f32).to_ne_bytes()).collect();
        let weights = upload(ctx, &w32, "uploading the PFB weights")?;
        let twiddles = upload(
            ctx,
            &twiddle_table(g.output.channels),
            "uploading the twiddles",
        )?;
        let wn = match cfg.fused() {
            true => Some(upload(
                ctx,
                &layout::wn_table(g.output.channels),
                "uploading the FFT twiddles",
            )?),
            false => None,
        };
        let fused = match kernels.fused.take() {
            Some(k) => {
                let row_scale = match tuning.half_rows {
                    true => half_rows::row_scale(
                        &w64,
                        g.output.channels,
                        g.input.sample_bits,
                        cfg.fused_split().0,
                    ) as f32,
                    false => 1.0,
                };
                Some(FusedRun::new(
                    ctx,
                    k,
                    &cfg,
                    m,
                    tuning.fused_chunk,
                    row_scale,
                )?)
            }
            None => None,
        };
        let fft_buf = match fused {
            Some(_) => DeviceBuffer::new(ctx, 8)?,
            None => DeviceBuffer::new(ctx, fft_len * fft_batch * 8)?,
        };
        let narrowband = match g.output.ddc {
            None => None,
            Some(d) => {
                let samples = (g.span_samples() - d.taps) / d.decimation + 1;
                Some(NarrowbandStage {
                    filter: ddc::ddc_filter(d.decimation, d.taps)
                        .map_err(|e| BackendError::Unsupported(e.to_string()))?,
                    buf: DeviceBuffer::new(ctx, POLS * samples * 8)?,
                    samples: u32::try_from(samples).map_err(|_| {
                        BackendError::Unsupported("the span is too long for the DDC".into())
                    })?,
                    cfg: cfg.clone(),
                    taps: (0, Vec::new(), 1.0),
                    made: None,
                    carries: 0,
                })
            }
        };
        let layout = ParamLayout::new(&g, &cfg);
        let slots = (0..slots)
            .map(|_| {
                Ok(OutputSlot {
                    params: DeviceBuffer::new(ctx, layout.total)?,
                    staging: PinnedAlloc::new(ctx, layout.total)?,
                    gains_version: u64::MAX,
                    // Zeroed for the counters; after each frame the copy out clears them.
                    output: DeviceBuffer::zeroed(ctx, g.output_bytes() + SAT_BYTES)?,
                    saturated: PinnedAlloc::new(ctx, SAT_BYTES)?,
                    phase0: 0,
                    phase_step: 0,
                    ddc_range: (0, 0),
                    ddc_carry: None,
                    row_key: 0,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let gains = std::array::from_fn(|_| {
            gain::default_gains(g.output.channels, g.input.sample_bits, g.output.bits)
        });
        Ok(Self {
            geometry: g,
            kernels,
            compile,
            fft_plan_ms,
            plan,
            weights,
            twiddles,
            wn,
            fused,
            fft_buf,
            layout,
            shapes,
            gains,
            gains_version: 0,
            slots,
            narrowband,
        })
    }

    /// Frames whose DDC copied outputs the last frame made (0 for wideband).
    #[cfg(test)]
    pub fn ddc_carries(&self) -> u64 {
        self.narrowband.as_ref().map_or(0, |nb| nb.carries)
    }

    pub fn fft_work_bytes(&self) -> usize {
        self.plan.as_ref().map_or(0, |p| p.work_bytes)
    }

    /// Gains for frames enqueued from now on (validated by the caller).
    pub fn set_gains(&mut self, pol: usize, gains: &[Complex32]) {
        self.gains[pol].copy_from_slice(gains);
        self.gains_version += 1;
    }

    /// Writes the frame's delays and dither keys (a narrowband output's DDC taps for the frame's
    /// mixer word; the gains, if they changed) into the slot's staging memory. `span_start` is the
    /// ADC timestamp of the span's first sample. The slot's previous copy in has finished: its
    /// frame was waited for before this one came.
    pub fn stage_params(&mut self, slot: usize, frame: &OutputFrame, span_start: u64) {
        let (l, g) = (self.layout, self.geometry);
        let m = g.spectra_per_frame();
        let stale = self.slots[slot].gains_version != self.gains_version;
        self.slots[slot].row_key = half_rows::frame_key(frame.timestamp);
        if let Some(nb) = &mut self.narrowband {
            let s = &mut self.slots[slot];
            let word = frame.mixer;
            s.phase0 = ddc::mixer_phase(span_start, word);
            s.phase_step = ddc::mixer_phase(nb.cfg.decimation as u64, word);
            let taps = nb.taps_bytes(word);
            s.staging.as_mut_slice()[l.ddc_taps..l.ddc_taps + taps.len()].copy_from_slice(taps);
            // Window starts are multiples of D (checked with the frame); each window is T 2n
            // subsampled samples.
            let starts = frame
                .delays
                .iter()
                .flatten()
                .map(|d| d.offset / nb.cfg.decimation as u32);
            let (lo, hi) = starts.fold((u32::MAX, 0), |(lo, hi), j| (lo.min(j), hi.max(j)));
            let window = (g.output.taps * 2 * g.output.channels) as u32;
            let (lo, hi) = match lo > hi {
                true => (0, 0),
                false => (lo & !3, hi.saturating_add(window).min(nb.samples)),
            };
            // The span moves on by a chunk each frame; where this one follows the last with the
            // same mixer word, the DDC outputs they share are copied, not made again.
            let shift = (g.input.chunk_samples / nb.cfg.decimation) as u32;
            let follows = |p: &Made| {
                p.word == word
                    && p.span_start.wrapping_add(g.input.chunk_samples as u64) == span_start
            };
            s.ddc_carry = None;
            s.ddc_range = (lo, hi);
            if let Some(p) = nb.made.filter(|p| lo < hi && follows(p)) {
                // The last frame made [p.lo, p.hi) of its span: [p.lo - shift, p.hi - shift) here.
                let end = p.range.1.saturating_sub(shift).min(hi);
                let whole = p.range.0 <= lo.saturating_add(shift);
                // The copy's ranges must not overlap (they do not unless a chunk is shorter
                // than a window).
                if whole && end > lo && end - lo <= shift {
                    s.ddc_carry = Some((lo + shift, lo, end - lo));
                    s.ddc_range = (end & !3, hi);
                    nb.carries += 1;
                }
            }
            nb.made = (lo < hi).then_some(Made {
                span_start,
                word,
                range: (lo, hi),
            });
        }
        let s = &mut self.slots[slot];
        // Wideband gains carry the 1/2 of the real-FFT fix-up; narrowband's FFT is complex.
        let scale = if self.narrowband.is_some() { 1.0 } else { 0.5 };
        let st = s.staging.as_mut_slice();
        for pol in 0..POLS {
            let d = &frame.delays[pol];
            let offs = &mut st[l.offsets + 4 * pol * m..l.offsets + 4 * (pol + 1) * m];
            for (b, s) in offs.chunks_exact_mut(4).zip(d) {
                b.copy_from_slice(&s.offset.to_ne_bytes());
            }
            let rot = &mut st[l.rotation + 16 * pol * m..l.rotation + 16 * (pol + 1) * m];
            for (spectrum, (b, s)) in rot.chunks_exact_mut(16).zip(d).enumerate() {
                // e^{ip} in float64: exact for any phase, however many turns it has wound up.
                let (sin, cos) = (s.phase as f64).sin_cos();
                // The dither key rides in the second float's bits (the kernel reads them back
                // with __float_as_uint).
                let key = g.dither_key(frame.timestamp, spectrum).unwrap_or(0);
                for (i, v) in [s.fine, f32::from_bits(key), cos as f32, sin as f32]
                    .into_iter()
                    .enumerate()
                {
                    b[4 * i..4 * i + 4].copy_from_slice(&v.to_bits().to_ne_bytes());
                }
            }
        }
        if stale {
            let gains = &mut st[l.gains..l.total];
            for (b, g) in gains.chunks_exact_mut(8).zip(self.gains.iter().flatten()) {
                b[..4].copy_from_slice(&(scale * g.re).to_ne_bytes());
                b[4..].copy_from_slice(&(scale * g.im).to_ne_bytes());
            }
        }
    }

    /// Enqueues the copy of the slot's staged parameters (the gains too if they changed).
    pub fn copy_params(&mut self, slot: usize, h2d: &CudaStream) -> Result<()> {
        let s = &mut self.slots[slot];
        let bytes = if s.gains_version != self.gains_version {
            self.layout.total
        } else {
            self.layout.per_frame
        };
        // SAFETY: staging and params are both `layout.total` bytes.
        check(
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    s.params.ptr(),
                    s.staging.as_ptr() as *const _,
                    bytes,
                    h2d.cu_stream(),
                )
            },
            "copying delays to the device",
        )?;
        s.gains_version = self.gains_version;
        Ok(())
    }

    /// The output's compute on `stream` over the slot's span: the first stage (wideband: the
    /// PFB FIR; narrowband: DDC, then the complex PFB FIR), the FFT, post-processing. `mark(i)` is
    /// called after the first stage (2) and after the FFT (3), for the benchmark's stage timing.
    pub fn enqueue_compute(
        &self,
        slot: usize,
        span: SpanView,
        stream: &CudaStream,
        mark: &dyn Fn(usize) -> Result<()>,
    ) -> Result<()> {
        let s = &self.slots[slot];
        let m = self.geometry.spectra_per_frame() as u32;
        if let (Some(run), Some(wn)) = (&self.fused, &self.wn) {
            let g = &self.geometry;
            let args = FusedArgs {
                span,
                offsets: s.params.at(self.layout.offsets),
                weights: self.weights.ptr(),
                wn: wn.ptr(),
                fixup: self.twiddles.ptr(),
                gains: s.params.at(self.layout.gains),
                rotation: s.params.at(self.layout.rotation),
                out: s.output.ptr(),
                saturated: s.output.at(g.output_bytes()),
                row_key: s.row_key,
            };
            // fused_fir is the first stage and fused_post the last, with no FFT between (chunked,
            // they overlap: both count as the first stage).
            return run.enqueue(&args, m, stream, &|| {
                mark(2)?;
                mark(3)
            });
        }
        match &self.narrowband {
            None => self.launch_fir(s, m, span, stream)?,
            Some(nb) => {
                self.launch_ddc(nb, s, span, stream)?;
                self.launch_nb_fir(nb, s, m, stream)?;
            }
        }
        mark(2)?;
        if let Some(plan) = &self.plan {
            plan.forward(self.fft_buf.ptr())?;
        }
        mark(3)?;
        self.launch_postproc(s, m, stream)
    }

    /// Wideband: the real PFB FIR over the span into the FFT's input.
    fn launch_fir(
        &self,
        s: &OutputSlot,
        m: u32,
        span: SpanView,
        stream: &CudaStream,
    ) -> Result<()> {
        let offsets = s.params.at(self.layout.offsets);
        let (weights, fft) = (self.weights.ptr(), self.fft_buf.ptr());
        let per_thread = self.shapes.fir_spectra_per_thread;
        let mut fir = stream.launch_builder(&self.kernels.fir);
        fir.arg(&span.ptr)
            .arg(&span.stride_words)
            .arg(&offsets)
            .arg(&weights)
            .arg(&fft)
            .arg(&m)
            .arg(&per_thread);
        // SAFETY: argument types and order match pfb_fir; every buffer is sized for the geometry.
        unsafe { fir.launch(self.shapes.fir) }.map_err(driver("launching pfb_fir"))?;
        Ok(())
    }

    /// Narrowband: the span mixed, filtered and subsampled into the DDC buffer.
    fn launch_ddc(
        &self,
        nb: &NarrowbandStage,
        s: &OutputSlot,
        span: SpanView,
        stream: &CudaStream,
    ) -> Result<()> {
        // On the tensor cores the frame's `ddc_set` makes it (with the carry before it).
        let Some(ddc) = &self.narrowband_kernels()?.ddc else {
            return Ok(());
        };
        copy_carry(nb, s, stream)?;
        if s.ddc_range.0 >= s.ddc_range.1 {
            return Ok(());
        }
        let (taps, ddc_out) = (s.params.at(self.layout.ddc_taps), nb.buf.ptr());
        let span_samples = self.geometry.span_samples() as u64;
        let mut launch = stream.launch_builder(ddc);
        launch
            .arg(&span.ptr)
            .arg(&span.stride_words)
            .arg(&taps)
            .arg(&ddc_out)
            .arg(&nb.samples)
            .arg(&s.ddc_range.0)
            .arg(&s.ddc_range.1)
            .arg(&span_samples)
            .arg(&s.phase0)
            .arg(&s.phase_step);
        let shape = LaunchConfig {
            grid_dim: (
                (s.ddc_range.1 - s.ddc_range.0).div_ceil(nb.cfg.ddc_outputs_per_block() as u32),
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
    /// set's), or None where its DDC is not in a set or makes nothing this frame.
    pub fn enqueue_ddc_set_part(&self, slot: usize, stream: &CudaStream) -> Result<Option<DdcOut>> {
        let Some(nb) = self.narrowband.as_ref().filter(|nb| nb.cfg.ddc_mma()) else {
            return Ok(None);
        };
        let s = &self.slots[slot];
        copy_carry(nb, s, stream)?;
        if s.ddc_range.0 >= s.ddc_range.1 {
            return Ok(None);
        }
        Ok(Some(DdcOut {
            taps: s.params.at(self.layout.ddc_taps),
            out: nb.buf.ptr(),
            samples: nb.samples,
            first: s.ddc_range.0,
            end: s.ddc_range.1,
            phase0: s.phase0,
            phase_step: s.phase_step,
            scale: nb.taps.2,
        }))
    }

    /// Registers a thread of the FIR and post-processing kernels this output runs: `fused_fir`
    /// and `fused_post` on two passes, else `pfb_fir` and `postproc`.
    pub fn registers(&self) -> (Option<i32>, Option<i32>) {
        let (fir, post) = match &self.fused {
            Some(run) => (&run.kernels().fir, &run.kernels().post),
            None => (&self.kernels.fir, &self.kernels.postproc),
        };
        (
            super::compile::registers(fir),
            super::compile::registers(post),
        )
    }

    /// A narrowband output's configuration (the `ddc_set` builds from it).
    pub fn narrowband_config(&self) -> Option<&kernels::Config> {
        self.narrowband.as_ref().map(|nb| &nb.cfg)
    }

    /// Narrowband: the complex PFB FIR over the DDC's output into the FFT's input.
    fn launch_nb_fir(
        &self,
        nb: &NarrowbandStage,
        s: &OutputSlot,
        m: u32,
        stream: &CudaStream,
    ) -> Result<()> {
        let k = self.narrowband_kernels()?;
        let points = 2 * self.geometry.output.channels as u32;
        let (offsets, weights, fft) = (
            s.params.at(self.layout.offsets),
            self.weights.ptr(),
            self.fft_buf.ptr(),
        );
        let (ddc_out, samples) = (nb.buf.ptr(), nb.samples);
        let mut fir = stream.launch_builder(&k.fir);
        fir.arg(&ddc_out)
            .arg(&samples)
            .arg(&offsets)
            .arg(&weights)
            .arg(&fft)
            .arg(&m);
        // SAFETY: argument types and order match nb_fir; offsets are at most max_offset (checked),
        // so every window lies among the DDC's samples.
        let runs = m.div_ceil(kernels::NB_FIR_RUN as u32);
        unsafe { fir.launch(narrowband_shape(points, runs, POLS as u32)) }
            .map_err(driver("launching nb_fir"))?;
        Ok(())
    }

    /// Post-processing of the FFT's output into the slot's heaps (the wideband or the
    /// narrowband kernel).
    fn launch_postproc(&self, s: &OutputSlot, m: u32, stream: &CudaStream) -> Result<()> {
        let g = &self.geometry;
        let fft = self.fft_buf.ptr();
        let (gains, rotation) = (
            s.params.at(self.layout.gains),
            s.params.at(self.layout.rotation),
        );
        let (out, sat) = (s.output.ptr(), s.output.at(g.output_bytes()));
        if self.narrowband.is_some() {
            let k = self.narrowband_kernels()?;
            let twiddles = self.twiddles.ptr();
            let mut post = stream.launch_builder(&k.postproc);
            post.arg(&fft)
                .arg(&twiddles)
                .arg(&gains)
                .arg(&rotation)
                .arg(&out)
                .arg(&sat)
                .arg(&m);
            // SAFETY: argument types and order match nb_postproc; buffers sized for the geometry.
            let tile = kernels::NB_POST_TILE as u32;
            let shape = LaunchConfig {
                grid_dim: (
                    (g.output.channels as u32 / 2).div_ceil(tile),
                    m.div_ceil(tile),
                    1,
                ),
                block_dim: (tile * kernels::NB_POST_ROWS as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            unsafe { post.launch(shape) }.map_err(driver("launching nb_postproc"))?;
        } else {
            let twiddles = self.twiddles.ptr();
            let mut post = stream.launch_builder(&self.kernels.postproc);
            post.arg(&fft)
                .arg(&twiddles)
                .arg(&gains)
                .arg(&rotation)
                .arg(&out)
                .arg(&sat)
                .arg(&m);
            // SAFETY: argument types and order match postproc; buffers sized for the geometry.
            unsafe { post.launch(self.shapes.postproc) }.map_err(driver("launching postproc"))?;
        }
        Ok(())
    }

    fn narrowband_kernels(&self) -> Result<&super::compile::NarrowbandKernels> {
        self.kernels
            .narrowband
            .as_ref()
            .ok_or_else(|| BackendError::Misuse("not a narrowband output".into()))
    }

    /// Enqueues the copy of the slot's heaps into `heaps` and of its saturation counters, then
    /// clears the counters.
    ///
    /// # Safety
    /// `heaps` must be valid for [`Channelisation::output_bytes`] bytes until the stream has
    /// finished the copy.
    pub unsafe fn copy_out(&self, slot: usize, heaps: *mut u8, d2h: &CudaStream) -> Result<()> {
        let s = &self.slots[slot];
        let bytes = self.geometry.output_bytes();
        let d2h = d2h.cu_stream();
        // SAFETY: the caller vouches for `heaps`; the counters are SAT_BYTES after the heaps.
        unsafe {
            check(
                sys::cuMemcpyDtoHAsync_v2(heaps as *mut _, s.output.ptr(), bytes, d2h),
                "copying output to the host",
            )?;
            check(
                sys::cuMemcpyDtoHAsync_v2(
                    s.saturated.as_ptr() as *mut _,
                    s.output.at(bytes),
                    SAT_BYTES,
                    d2h,
                ),
                "copying saturation counts to the host",
            )?;
            // Cleared here, not on the compute stream: keeps copy-engine work off it.
            check(
                sys::cuMemsetD8Async(s.output.at(bytes), 0, SAT_BYTES, d2h),
                "clearing the saturation counters",
            )
        }
    }

    /// The slot's saturation counts, once its copy out has finished.
    pub fn saturated(&self, slot: usize) -> [u64; POLS] {
        let b = self.slots[slot].saturated.as_slice();
        std::array::from_fn(|p| {
            u64::from_ne_bytes(b[8 * p..8 * p + 8].try_into().unwrap_or([0; 8]))
        })
    }

    /// Bytes of device memory the FIR, the FFT and the post-processing read plus write per frame
    /// (nominal: every input read once, every output written once).
    /// For a narrowband output the first stage is the DDC and the complex FIR: the span read
    /// once, the subsampled stream written once and read once (the FIR slides its window), the
    /// FFT's input written. The two passes count as the first stage: 10.25 B per sample.
    pub fn stage_bytes(&self) -> [f64; 3] {
        let g = &self.geometry;
        let pols = POLS as f64;
        let points = g.output.channels * if self.narrowband.is_some() { 2 } else { 1 };
        let spectra = (g.spectra_per_frame() * points * 8) as f64;
        let fir = match &self.narrowband {
            None => pols * (g.chunk_bytes() as f64 + spectra),
            Some(nb) => {
                let span = g.span_samples() * g.input.sample_bits as usize / 8;
                let ddc = nb.samples as f64 * 8.0;
                pols * (span as f64 + 2.0 * ddc + spectra)
            }
        };
        let fft = 2.0 * pols * spectra;
        let post = match self.narrowband {
            None => pols * spectra,
            // Only the centre half of the bins is read.
            Some(_) => pols * spectra / 2.0,
        } + g.output_bytes() as f64;
        match &self.fused {
            // The rows are written once and read once, 8 or 4 bytes a value (float16 rows).
            Some(run) => {
                let rows = pols * spectra / 8.0 * run.row_bytes() as f64;
                let (fir, post) = (
                    pols * g.chunk_bytes() as f64 + rows,
                    rows + g.output_bytes() as f64,
                );
                match run.chunked() {
                    true => [fir + post, 0.0, 0.0],
                    false => [fir, 0.0, post],
                }
            }
            None => [fir, fft, post],
        }
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

/// A device copy of `bytes` (synchronous: set-up only).
pub(crate) fn upload(ctx: &Arc<CudaContext>, bytes: &[u8], what: &str) -> Result<DeviceBuffer> {
    let buf = DeviceBuffer::new(ctx, bytes.len())?;
    // SAFETY: synchronous copy into a buffer of exactly this size.
    check(
        unsafe { sys::cuMemcpyHtoD_v2(buf.ptr(), bytes.as_ptr() as *const _, bytes.len()) },
        what,
    )?;
    Ok(buf)
}

//! One output's device work: its compiled kernels, FFT plan, weights and twiddles, and per slot its
//! parameters (delays, dither keys, gains) and its heaps. The pipeline ([`super::pipeline`]) runs
//! every output's stages on its lane (the compute stream, or one of its own), over the slot's one
//! copy of the input. What only one kind of output does is chosen once, when the stage is built
//! ([`KindStage`]): a wideband output's real PFB (three passes, or the two-pass kernels) is here,
//! a narrowband output's DDC and complex PFB in [`super::narrowband`].

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaStream, PushKernelArg};
use num_complex::Complex32;

use super::compile::NarrowbandKernels;
use super::compile::{CompileTimes, Kernels};
use super::ddc_set::DdcOut;
use super::device::{check, driver, DeviceBuffer, PinnedAlloc};
use super::fft::FftPlan;
use super::fused::{FusedArgs, FusedRun};
use super::layout::{self, twiddle_table, ParamLayout, Shapes};
use super::narrowband::NarrowbandStage;
use super::pipeline::SpanView;
use crate::backend::{BackendError, Channelisation, OutputFrame, OutputKind, Result, POLS};
use crate::signal::{gain, half_rows};

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
    /// The frame's key for the float16 rows' stochastic rounding (`half_rows::frame_key`).
    row_key: u32,
}

/// What only one kind of output keeps on the device, chosen by its [`OutputKind`].
enum KindStage {
    Wideband,
    /// Boxed: it is large, and there is one per output.
    Narrowband(Box<NarrowbandStage>),
}

/// The device pointers and sizes a frame's kernels of one output take (one slot's).
pub(super) struct FrameArgs {
    pub offsets: sys::CUdeviceptr,
    pub rotation: sys::CUdeviceptr,
    pub gains: sys::CUdeviceptr,
    pub ddc_taps: sys::CUdeviceptr,
    pub weights: sys::CUdeviceptr,
    pub twiddles: sys::CUdeviceptr,
    pub fft: sys::CUdeviceptr,
    pub out: sys::CUdeviceptr,
    pub saturated: sys::CUdeviceptr,
    pub span_samples: usize,
    /// Spectra per frame.
    pub m: u32,
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
    kind: KindStage,
}

impl OutputStage {
    /// Compiles the output's kernels, plans its FFT on `compute` and allocates `slots` slots.
    pub(super) fn new(
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
            // The DDC's own decimation: D, or 2D without discard.
            decimation: g.output.subsampling(),
            ddc_taps: match g.output.kind {
                OutputKind::Wideband => 0,
                OutputKind::Narrowband(d) => d.taps,
            },
            nb_points: match g.output.kind {
                OutputKind::Wideband => 0,
                OutputKind::Narrowband(d) => d.points(g.output.channels),
            },
            tuning,
        };
        let shapes = Shapes::new(&g, &cfg)?;
        let (mut kernels, compile) = Kernels::build(ctx, &cfg)?;
        let t_plan = Instant::now();
        let m = g.spectra_per_frame();
        // Wideband: the n-point complex FFT of the real 2n-point one, unzipped by 4; narrowband:
        // a P-point complex FFT (2n, or n without discard), unzipped by 4 where it is large.
        let (fft_len, fft_batch) = match g.output.kind {
            OutputKind::Wideband => (cfg.fft_len(), POLS * m * kernels::UNZIP),
            OutputKind::Narrowband(_) => {
                (cfg.nb_points / cfg.nb_unzip(), POLS * m * cfg.nb_unzip())
            }
        };
        // The two passes are wideband's alone (`kernels::Config::fused`): a narrowband output of
        // either kind, with discard or without, runs the DDC (on the tensor cores in the frame's
        // `ddc_set` where its samples allow), `nb_fir`, cuFFT and `nb_postproc`.
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
        let kind = match g.output.kind {
            OutputKind::Wideband => KindStage::Wideband,
            OutputKind::Narrowband(d) => {
                KindStage::Narrowband(Box::new(NarrowbandStage::new(ctx, &g, d, &cfg, slots)?))
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
            kind,
        })
    }

    /// Frames whose DDC copied outputs the last frame made (0 for wideband).
    #[cfg(test)]
    pub(super) fn ddc_carries(&self) -> u64 {
        match &self.kind {
            KindStage::Wideband => 0,
            KindStage::Narrowband(nb) => nb.carries(),
        }
    }

    pub(super) fn fft_work_bytes(&self) -> usize {
        self.plan.as_ref().map_or(0, |p| p.work_bytes)
    }

    /// Gains for frames enqueued from now on (validated by the caller).
    pub(super) fn set_gains(&mut self, pol: usize, gains: &[Complex32]) {
        self.gains[pol].copy_from_slice(gains);
        self.gains_version += 1;
    }

    /// Writes the frame's delays and dither keys (a narrowband output's DDC taps for the frame's
    /// mixer word; the gains, if they changed) into the slot's staging memory. `span_start` is the
    /// ADC timestamp of the span's first sample. The slot's previous copy in has finished: its
    /// frame was waited for before this one came.
    pub(super) fn stage_params(&mut self, slot: usize, frame: &OutputFrame, span_start: u64) {
        let (l, g) = (self.layout, self.geometry);
        let m = g.spectra_per_frame();
        let stale = self.slots[slot].gains_version != self.gains_version;
        self.slots[slot].row_key = half_rows::frame_key(frame.timestamp);
        let s = &mut self.slots[slot];
        // Wideband gains carry the 1/2 of the real-FFT fix-up; narrowband's FFT is complex.
        let scale = match &mut self.kind {
            KindStage::Wideband => 0.5,
            KindStage::Narrowband(nb) => {
                let taps = &mut s.staging.as_mut_slice()[l.ddc_taps..l.gains];
                nb.stage(slot, &g, frame, span_start, taps);
                1.0
            }
        };
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
    pub(super) fn copy_params(&mut self, slot: usize, h2d: &CudaStream) -> Result<()> {
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

    /// The device pointers and sizes of slot `slot`'s frame.
    fn frame_args(&self, slot: usize) -> FrameArgs {
        let (s, g, l) = (&self.slots[slot], &self.geometry, &self.layout);
        FrameArgs {
            offsets: s.params.at(l.offsets),
            rotation: s.params.at(l.rotation),
            gains: s.params.at(l.gains),
            ddc_taps: s.params.at(l.ddc_taps),
            weights: self.weights.ptr(),
            twiddles: self.twiddles.ptr(),
            fft: self.fft_buf.ptr(),
            out: s.output.ptr(),
            saturated: s.output.at(g.output_bytes()),
            span_samples: g.span_samples(),
            m: g.spectra_per_frame() as u32,
        }
    }

    /// The output's compute on `stream` over the slot's span: the first stage (wideband: the
    /// PFB FIR; narrowband: DDC, then the complex PFB FIR), the FFT, post-processing. `mark(i)` is
    /// called after the first stage (2) and after the FFT (3), for the benchmark's stage timing.
    pub(super) fn enqueue_compute(
        &self,
        slot: usize,
        span: SpanView,
        stream: &CudaStream,
        mark: &dyn Fn(usize) -> Result<()>,
    ) -> Result<()> {
        let a = self.frame_args(slot);
        if let (Some(run), Some(wn)) = (&self.fused, &self.wn) {
            let args = FusedArgs {
                span,
                offsets: a.offsets,
                weights: a.weights,
                wn: wn.ptr(),
                fixup: a.twiddles,
                gains: a.gains,
                rotation: a.rotation,
                out: a.out,
                saturated: a.saturated,
                row_key: self.slots[slot].row_key,
            };
            // fused_fir is the first stage and fused_post the last, with no FFT between (chunked,
            // they overlap: both count as the first stage).
            return run.enqueue(&args, a.m, stream, &|| {
                mark(2)?;
                mark(3)
            });
        }
        match &self.kind {
            KindStage::Wideband => self.launch_fir(&a, span, stream)?,
            KindStage::Narrowband(nb) => {
                nb.enqueue_first_stage(self.narrowband_kernels()?, slot, &a, span, stream)?
            }
        }
        mark(2)?;
        if let Some(plan) = &self.plan {
            plan.forward(self.fft_buf.ptr())?;
        }
        mark(3)?;
        match &self.kind {
            KindStage::Wideband => self.launch_postproc(&a, stream),
            KindStage::Narrowband(nb) => nb.launch_postproc(self.narrowband_kernels()?, &a, stream),
        }
    }

    /// Wideband: the real PFB FIR over the span into the FFT's input.
    fn launch_fir(&self, a: &FrameArgs, span: SpanView, stream: &CudaStream) -> Result<()> {
        let per_thread = self.shapes.fir_spectra_per_thread;
        let mut fir = stream.launch_builder(&self.kernels.fir);
        fir.arg(&span.ptr)
            .arg(&span.stride_words)
            .arg(&a.offsets)
            .arg(&a.weights)
            .arg(&a.fft)
            .arg(&a.m)
            .arg(&per_thread);
        // SAFETY: argument types and order match pfb_fir; every buffer is sized for the geometry.
        unsafe { fir.launch(self.shapes.fir) }.map_err(driver("launching pfb_fir"))?;
        Ok(())
    }

    /// Wideband: post-processing of the FFT's output into the slot's heaps.
    fn launch_postproc(&self, a: &FrameArgs, stream: &CudaStream) -> Result<()> {
        let mut post = stream.launch_builder(&self.kernels.postproc);
        post.arg(&a.fft)
            .arg(&a.twiddles)
            .arg(&a.gains)
            .arg(&a.rotation)
            .arg(&a.out)
            .arg(&a.saturated)
            .arg(&a.m);
        // SAFETY: argument types and order match postproc; buffers sized for the geometry.
        unsafe { post.launch(self.shapes.postproc) }.map_err(driver("launching postproc"))?;
        Ok(())
    }

    /// This output's part of the frame's `ddc_set` (its carry copy enqueued on `stream`, the
    /// set's), or None where it is not narrowband, its DDC is not in a set or makes nothing this
    /// frame.
    pub(super) fn enqueue_ddc_set_part(
        &self,
        slot: usize,
        stream: &CudaStream,
    ) -> Result<Option<DdcOut>> {
        match &self.kind {
            KindStage::Wideband => Ok(None),
            KindStage::Narrowband(nb) => {
                let taps = self.slots[slot].params.at(self.layout.ddc_taps);
                nb.ddc_set_part(slot, taps, stream)
            }
        }
    }

    /// Registers a thread of the FIR and post-processing kernels this output runs: `fused_fir`
    /// and `fused_post` on two passes, else `pfb_fir` and `postproc`.
    pub(super) fn registers(&self) -> (Option<i32>, Option<i32>) {
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
    pub(super) fn narrowband_config(&self) -> Option<&kernels::Config> {
        match &self.kind {
            KindStage::Wideband => None,
            KindStage::Narrowband(nb) => Some(nb.config()),
        }
    }

    fn narrowband_kernels(&self) -> Result<&NarrowbandKernels> {
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
    pub(super) unsafe fn copy_out(
        &self,
        slot: usize,
        heaps: *mut u8,
        d2h: &CudaStream,
    ) -> Result<()> {
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
    pub(super) fn saturated(&self, slot: usize) -> [u64; POLS] {
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
    pub(super) fn stage_bytes(&self) -> [f64; 3] {
        let g = &self.geometry;
        let pols = POLS as f64;
        let (points, fir) = match &self.kind {
            KindStage::Wideband => (g.output.channels, None),
            KindStage::Narrowband(nb) => (nb.config().nb_points, Some(nb)),
        };
        let spectra = (g.spectra_per_frame() * points * 8) as f64;
        let fir = match fir {
            None => pols * (g.chunk_bytes() as f64 + spectra),
            Some(nb) => nb.first_stage_bytes(g, spectra),
        };
        let fft = 2.0 * pols * spectra;
        // Only the n bins kept are read: the centre half of 2n, or all of n without discard.
        let read = g.output.channels as f64 / points as f64;
        let post = pols * spectra * read + g.output_bytes() as f64;
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

//! The device side of the backend: a ring of per-frame slots, three streams, and one frame's work.
//!
//! Frame `seq` uses slot `seq % SLOTS` for everything that must outlive the compute stream's turn
//! (the span, the delays and gains, the output). Three streams overlap:
//! - host-to-device: the previous span's tail copied in as this span's overlap (device to device),
//!   the chunk after it, the delays and gains;
//! - compute: `pfb_fir`, cuFFT, `postproc` (kernels only, so that it never queues behind a large
//!   PCIe copy on a copy engine);
//! - device-to-host: the output and the counters (then cleared for the slot's next use);
//! - sensors: `input_power` over the new chunk, beside the FIR (it only reads the span).
//!
//! Events order them: the copy in waits until the slot's span and parameters are no longer read
//! (compute of frame seq - SLOTS + 1; the overlap copy that reads the slot's tail is earlier on the
//! copy-in stream itself); compute waits for the copy in and for the slot's previous output to
//! have left; the copy out waits for compute.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream, LaunchConfig, PushKernelArg};
use num_complex::Complex32;

use super::compile::{CompileTimes, Kernels};
use super::device::{check, driver, memory_info, DeviceBuffer, PinnedAlloc};
use super::fft::FftPlan;
use super::layout::{twiddle_table, ParamLayout, Shapes};
use crate::backend::{BackendError, Channelisation, Frame, Result, POLS};
use crate::signal::gain;
use crate::signal::power::InputPower;

/// Frames in flight: one being copied in, one computed, one copied out, and one more so that a late
/// `wait` (host jitter) does not leave the copy-in stream idle.
pub(crate) const IN_FLIGHT: usize = 4;
/// One more slot than frames in flight: frame seq + 1 reads frame seq's span for its overlap.
const SLOTS: usize = IN_FLIGHT + 1;
/// Bytes of counters after each slot's output, u64 per polarisation: saturated output values, the
/// input's sum of squares, its full-scale samples.
const SAT_BYTES: usize = 3 * 8 * POLS;
/// Threads per block of `input_power` (its `__launch_bounds__`), and most blocks per polarisation.
const POWER_BLOCK: u32 = 256;
const POWER_BLOCKS: u32 = 512;

/// A frame's counters, read back with its output.
pub struct Counters {
    pub saturated: [u64; POLS],
    pub power: [InputPower; POLS],
}

/// Everything frame `seq` owns on the device until it is waited for.
struct Slot {
    /// [pol][span_stride] packed samples: overlap, then chunk, then padding.
    span: DeviceBuffer,
    params: DeviceBuffer,
    /// Host image of `params`, copied in by the host-to-device stream.
    staging: PinnedAlloc,
    /// Which version of the gains `params` holds.
    gains_version: u64,
    /// Output heaps, then the saturation counters.
    output: DeviceBuffer,
    saturated: PinnedAlloc,
    copied_in: CudaEvent,
    computed: CudaEvent,
    /// The input sensors' kernel has read the chunk and written its counters.
    measured: CudaEvent,
    copied_out: CudaEvent,
}

/// Start-up costs, for the benchmark and logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Startup {
    pub compile: CompileTimes,
    pub fft_plan_ms: f64,
    pub alloc_ms: f64,
    pub total_ms: f64,
    /// Device memory taken by this backend (free memory before minus after), including cuFFT's work area.
    pub device_bytes: usize,
    pub fft_work_bytes: usize,
    pub fir_registers: Option<i32>,
    pub postproc_registers: Option<i32>,
}

/// Events that split one frame's compute into its stages, for timing.
pub(crate) struct StageMarks(pub [CudaEvent; 5]);

impl StageMarks {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let ev = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("creating a timing event"))
        };
        Ok(Self([ev()?, ev()?, ev()?, ev()?, ev()?]))
    }
}

pub(crate) struct Pipeline {
    pub geometry: Channelisation,
    pub ctx: Arc<CudaContext>,
    pub h2d: Arc<CudaStream>,
    pub compute: Arc<CudaStream>,
    pub d2h: Arc<CudaStream>,
    /// The input sensors' kernel, beside the compute stream.
    pub sensors: Arc<CudaStream>,
    kernels: Kernels,
    plan: FftPlan,
    weights: DeviceBuffer,
    /// exp(-i pi k / n) for k < n, then W_n^{j k1} = exp(-2 pi i j k1 / n) as [j - 1][k1], k1 < n/4.
    twiddles: DeviceBuffer,
    /// [pol][spectrum][UNZIP][FFT_LEN] complex: FIR output, transformed in place.
    fft_buf: DeviceBuffer,
    slots: Vec<Slot>,
    layout: ParamLayout,
    shapes: Shapes,
    /// Bytes per polarisation in a slot's span buffer (a multiple of 256, with room for the
    /// FIR's two-word reads past the last sample).
    span_stride: usize,
    gains: [Vec<Complex32>; POLS],
    gains_version: u64,
    /// Sequence number of the next frame.
    seq: u64,
    pub startup: Startup,
}

impl Pipeline {
    pub fn new(
        ctx: Arc<CudaContext>,
        geometry: Channelisation,
        tuning: kernels::Tuning,
    ) -> Result<Self> {
        let t_start = Instant::now();
        let g = geometry;
        let cfg = kernels::Config {
            channels: g.output.channels,
            taps: g.output.taps,
            sample_bits: g.input.sample_bits,
            spectra_per_heap: g.output.spectra_per_heap,
            output_bits: g.output.bits,
            dither: g.output.dither.is_some(),
            tuning,
        };
        let shapes = Shapes::new(&g, &cfg)?;
        let (free_before, _) = memory_info(&ctx)?;
        let (kernels, compile) = Kernels::build(&ctx, &cfg)?;
        let h2d = ctx
            .new_stream()
            .map_err(driver("creating the host-to-device stream"))?;
        let compute = ctx
            .new_stream()
            .map_err(driver("creating the compute stream"))?;
        let d2h = ctx
            .new_stream()
            .map_err(driver("creating the device-to-host stream"))?;
        let sensors = ctx
            .new_stream()
            .map_err(driver("creating the input sensors' stream"))?;

        let t_plan = Instant::now();
        let m = g.spectra_per_frame();
        let plan = FftPlan::new(&ctx, cfg.fft_len(), POLS * m * kernels::UNZIP, &compute)?;
        let fft_plan_ms = t_plan.elapsed().as_secs_f64() * 1e3;

        let t_alloc = Instant::now();
        let w64 = g
            .output
            .weights()
            .map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let w32: Vec<u8> = w64.iter().flat_map(|&w| (w as f32).to_ne_bytes()).collect();
        let weights = upload(&ctx, &w32, "uploading the PFB weights")?;
        let twiddles = upload(
            &ctx,
            &twiddle_table(g.output.channels),
            "uploading the twiddles",
        )?;
        let fft_buf = DeviceBuffer::new(&ctx, POLS * m * g.output.channels * 8)?;
        let span_stride =
            (g.span_samples() * g.input.sample_bits as usize / 8 + 8).div_ceil(256) * 256;
        let layout = ParamLayout::new(&g);
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            let event = |flags| {
                ctx.new_event(Some(flags))
                    .map_err(driver("creating an event"))
            };
            slots.push(Slot {
                // Zeroed: the first frame's overlap is silence, as in the reference backend.
                span: DeviceBuffer::zeroed(&ctx, POLS * span_stride)?,
                params: DeviceBuffer::new(&ctx, layout.total)?,
                staging: PinnedAlloc::new(&ctx, layout.total)?,
                gains_version: u64::MAX,
                // Zeroed for the counters; after each frame the copy out clears them.
                output: DeviceBuffer::zeroed(&ctx, g.output_bytes() + SAT_BYTES)?,
                saturated: PinnedAlloc::new(&ctx, SAT_BYTES)?,
                copied_in: event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
                computed: event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
                measured: event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
                // Blocking: `wait` sleeps rather than spins, leaving the CPU to the network threads.
                copied_out: event(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC)?,
            });
        }
        ctx.synchronize()
            .map_err(driver("setting up device memory"))?;
        let alloc_ms = t_alloc.elapsed().as_secs_f64() * 1e3;
        let (free_after, _) = memory_info(&ctx)?;

        let startup = Startup {
            compile,
            fft_plan_ms,
            alloc_ms,
            total_ms: t_start.elapsed().as_secs_f64() * 1e3,
            device_bytes: free_before.saturating_sub(free_after),
            fft_work_bytes: plan.work_bytes,
            fir_registers: super::compile::registers(&kernels.fir),
            postproc_registers: super::compile::registers(&kernels.postproc),
        };
        let gains = [
            gain::default_gains(g.output.channels, g.input.sample_bits, g.output.bits),
            gain::default_gains(g.output.channels, g.input.sample_bits, g.output.bits),
        ];
        Ok(Self {
            shapes,
            geometry: g,
            ctx,
            h2d,
            compute,
            d2h,
            sensors,
            kernels,
            plan,
            weights,
            twiddles,
            fft_buf,
            slots,
            layout,
            span_stride,
            gains,
            gains_version: 0,
            seq: 0,
            startup,
        })
    }

    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the CUDA context"))
    }

    /// Gains for frames enqueued from now on (validated by the caller).
    pub fn set_gains(&mut self, pol: usize, gains: &[Complex32]) {
        self.gains[pol].copy_from_slice(gains);
        self.gains_version += 1;
    }

    fn span_bytes(&self) -> usize {
        self.geometry.span_samples() * self.geometry.input.sample_bits as usize / 8
    }

    fn overlap_bytes(&self) -> usize {
        self.geometry.input.overlap_samples * self.geometry.input.sample_bits as usize / 8
    }

    /// Enqueues all of `frame`'s work (copy in, compute, copy out) as the next frame of the
    /// stream; returns its slot. The caller must not have more than [`IN_FLIGHT`] frames
    /// unfinished, must keep `frame`'s buffers alive and untouched until [`Self::finish`], and must
    /// have checked the frame against the geometry.
    pub fn enqueue(&mut self, frame: &mut Frame) -> Result<usize> {
        self.bind()?;
        let seq = self.seq;
        let slot = (seq % SLOTS as u64) as usize;
        self.stage_params(slot, frame);
        self.copy_in(slot, frame)?;
        self.enqueue_sensors(slot)?;
        self.enqueue_compute(slot, false, None)?;
        self.copy_out(slot, frame.outputs[0].heaps.as_mut_ptr())?;
        self.seq += 1;
        Ok(slot)
    }

    /// Waits for the frame in `slot` to have left the device; returns its counters.
    pub fn finish(&self, slot: usize) -> Result<Counters> {
        self.bind()?;
        let s = &self.slots[slot];
        s.copied_out
            .synchronize()
            .map_err(driver("waiting for a frame"))?;
        let b = s.saturated.as_slice();
        let word = |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
        Ok(Counters {
            saturated: std::array::from_fn(word),
            power: std::array::from_fn(|p| InputPower {
                sum_squares: word(POLS + p),
                full_scale: word(2 * POLS + p),
            }),
        })
    }

    /// Writes the frame's delays (and the gains, if they changed) into the slot's staging memory.
    /// The slot's previous copy in has finished: its frame was waited for before this one came.
    fn stage_params(&mut self, slot: usize, frame: &Frame) {
        let l = self.layout;
        let m = self.geometry.spectra_per_frame();
        let stale = self.slots[slot].gains_version != self.gains_version;
        let st = self.slots[slot].staging.as_mut_slice();
        let first = frame.outputs[0].timestamp;
        for pol in 0..POLS {
            let d = &frame.outputs[0].delays[pol];
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
                let key = self.geometry.dither_key(first, spectrum).unwrap_or(0);
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
                b[..4].copy_from_slice(&(0.5 * g.re).to_ne_bytes());
                b[4..].copy_from_slice(&(0.5 * g.im).to_ne_bytes());
            }
        }
    }

    fn copy_in(&mut self, slot: usize, frame: &Frame) -> Result<()> {
        let (overlap, chunk, stride) = (
            self.overlap_bytes(),
            self.geometry.chunk_bytes(),
            self.span_stride,
        );
        let stale = self.slots[slot].gains_version != self.gains_version;
        let next = &self.slots[(slot + 1) % SLOTS];
        // The span's previous frame (seq - SLOTS) and its reader (seq - SLOTS + 1) are done with it.
        self.h2d
            .wait(&next.computed)
            .map_err(driver("ordering the copy in"))?;
        // ... and the slot's own input measure (on its own stream) has read it.
        self.h2d
            .wait(&self.slots[slot].measured)
            .map_err(driver("ordering the copy in after the input measure"))?;
        // The span starts with the previous span's tail (written earlier on this same stream).
        if self.seq > 0 {
            self.copy_overlap(slot, &self.h2d)?;
        }
        let s = &self.slots[slot];
        let h2d = self.h2d.cu_stream();
        for pol in 0..POLS {
            // SAFETY: `chunk` bytes fit after the overlap in this pol's span; the host buffer is the
            // frame's chunk, kept alive by the caller until the frame is finished.
            check(
                unsafe {
                    sys::cuMemcpyHtoDAsync_v2(
                        s.span.at(pol * stride + overlap),
                        frame.input.chunk[pol].as_ptr() as *const _,
                        chunk,
                        h2d,
                    )
                },
                "copying a chunk to the device",
            )?;
        }
        let bytes = if stale {
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
                    h2d,
                )
            },
            "copying delays to the device",
        )?;
        s.copied_in
            .record(&self.h2d)
            .map_err(driver("recording the copy in"))?;
        self.slots[slot].gains_version = self.gains_version;
        Ok(())
    }

    /// The compute stream's part of a frame: FIR, FFT, post-processing; with `carry` (benchmark
    /// only) the overlap copy first, to time it. With `marks`, records an event between stages.
    pub fn enqueue_compute(
        &self,
        slot: usize,
        carry: bool,
        marks: Option<&StageMarks>,
    ) -> Result<()> {
        let g = &self.geometry;
        let s = &self.slots[slot];
        let mark = |i: usize| -> Result<()> {
            match marks {
                Some(m) => m.0[i]
                    .record(&self.compute)
                    .map_err(driver("recording a timing event")),
                None => Ok(()),
            }
        };
        self.compute
            .wait(&s.copied_in)
            .map_err(driver("ordering compute after the copy in"))?;
        // The slot's previous output has left the device.
        self.compute
            .wait(&s.copied_out)
            .map_err(driver("ordering compute after the copy out"))?;
        mark(0)?;
        if carry {
            self.copy_overlap(slot, &self.compute)?;
        }
        mark(1)?;

        let m = g.spectra_per_frame() as u32;
        let (span, span_words) = (s.span.ptr(), (self.span_stride / 4) as u64);
        let offsets = s.params.at(self.layout.offsets);
        let (weights, fft) = (self.weights.ptr(), self.fft_buf.ptr());
        let per_thread = self.shapes.fir_spectra_per_thread;
        let mut fir = self.compute.launch_builder(&self.kernels.fir);
        fir.arg(&span)
            .arg(&span_words)
            .arg(&offsets)
            .arg(&weights)
            .arg(&fft)
            .arg(&m)
            .arg(&per_thread);
        // SAFETY: argument types and order match pfb_fir; every buffer is sized for the geometry.
        unsafe { fir.launch(self.shapes.fir) }.map_err(driver("launching pfb_fir"))?;
        mark(2)?;

        self.plan.forward(fft)?;
        mark(3)?;

        let gains = s.params.at(self.layout.gains);
        let rotation = s.params.at(self.layout.rotation);
        let twiddles = self.twiddles.ptr();
        let (out, sat) = (s.output.ptr(), s.output.at(g.output_bytes()));
        let mut post = self.compute.launch_builder(&self.kernels.postproc);
        post.arg(&fft)
            .arg(&twiddles)
            .arg(&gains)
            .arg(&rotation)
            .arg(&out)
            .arg(&sat)
            .arg(&m);
        // SAFETY: argument types and order match postproc; every buffer is sized for the geometry.
        unsafe { post.launch(self.shapes.postproc) }.map_err(driver("launching postproc"))?;
        mark(4)?;
        s.computed
            .record(&self.compute)
            .map_err(driver("recording compute"))
    }

    /// Copies the previous slot's span tail to the head of `slot`'s span, on `stream`.
    fn copy_overlap(&self, slot: usize, stream: &CudaStream) -> Result<()> {
        let overlap = self.overlap_bytes();
        if overlap == 0 {
            return Ok(());
        }
        let (s, prev) = (&self.slots[slot], &self.slots[(slot + SLOTS - 1) % SLOTS]);
        let tail = self.span_bytes() - overlap;
        for pol in 0..POLS {
            let off = pol * self.span_stride;
            // SAFETY: both ranges lie inside their spans; different buffers.
            check(
                unsafe {
                    sys::cuMemcpyDtoDAsync_v2(
                        s.span.at(off),
                        prev.span.at(off + tail),
                        overlap,
                        stream.cu_stream(),
                    )
                },
                "copying the overlap",
            )?;
        }
        Ok(())
    }

    /// The input sensors' kernel, on a stream of its own: it only reads the new chunk, so it runs
    /// beside the FIR (which leaves DRAM bandwidth idle) instead of after it. It waits for the
    /// copy in and for the slot's counters to have been read out and cleared.
    fn enqueue_sensors(&self, slot: usize) -> Result<()> {
        let g = &self.geometry;
        let s = &self.slots[slot];
        for (event, what) in [
            (&s.copied_in, "the copy in"),
            (&s.copied_out, "the copy out"),
        ] {
            self.sensors.wait(event).map_err(driver(what))?;
        }
        let (span, span_words) = (s.span.ptr(), (self.span_stride / 4) as u64);
        // The input sensors read the new chunk, which follows the overlap in the span.
        let (first_pair, pairs) = (
            (g.input.overlap_samples / 2) as u64,
            (g.chunk_samples() / 2) as u64,
        );
        let sums = s.output.at(g.output_bytes());
        let blocks = pairs
            .div_ceil(8 * POWER_BLOCK as u64)
            .min(POWER_BLOCKS as u64) as u32;
        let mut power = self.sensors.launch_builder(&self.kernels.input_power);
        power
            .arg(&span)
            .arg(&span_words)
            .arg(&first_pair)
            .arg(&pairs)
            .arg(&sums);
        let shape = LaunchConfig {
            grid_dim: (blocks.max(1), POLS as u32, 1),
            block_dim: (POWER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: argument types and order match input_power; the pairs lie in the span and the
        // counters after the output.
        unsafe { power.launch(shape) }.map_err(driver("launching input_power"))?;
        s.measured
            .record(&self.sensors)
            .map_err(driver("recording the input measure"))
    }

    fn copy_out(&self, slot: usize, output: *mut u8) -> Result<()> {
        let s = &self.slots[slot];
        let d2h = self.d2h.cu_stream();
        for event in [&s.computed, &s.measured] {
            self.d2h
                .wait(event)
                .map_err(driver("ordering the copy out"))?;
        }
        let bytes = self.geometry.output_bytes();
        // SAFETY: `output` is the frame's output buffer of `bytes` bytes (checked by the caller),
        // kept alive until the frame is finished; the counters are SAT_BYTES after the output.
        unsafe {
            check(
                sys::cuMemcpyDtoHAsync_v2(output as *mut _, s.output.ptr(), bytes, d2h),
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
            )?;
        }
        s.copied_out
            .record(&self.d2h)
            .map_err(driver("recording the copy out"))
    }

    /// Waits for all four streams (used before freeing buffers a copy may still touch).
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        for s in [&self.h2d, &self.compute, &self.d2h, &self.sensors] {
            s.synchronize().map_err(driver("synchronising a stream"))?;
        }
        Ok(())
    }

    // ---- for the benchmark ----

    /// Bytes of device memory each compute stage reads plus writes, per frame (nominal: every
    /// input read once, every output written once).
    pub fn stage_bytes(&self) -> [f64; 4] {
        let g = &self.geometry;
        let pols = POLS as f64;
        let overlap = 2.0 * pols * self.overlap_bytes() as f64;
        let fir = pols
            * (g.chunk_bytes() as f64 + (g.spectra_per_frame() * g.output.channels * 8) as f64);
        let fft = 2.0 * pols * (g.spectra_per_frame() * g.output.channels * 8) as f64;
        let post =
            pols * (g.spectra_per_frame() * g.output.channels * 8) as f64 + g.output_bytes() as f64;
        [overlap, fir, fft, post]
    }

    /// Copies `chunks` (packed, one per pol) into every slot's span and sets nominal delays
    /// (offset overlap - (T-1) 2n + m 2n, no fine delay) in every slot, for compute-only timing.
    pub fn load_for_bench(&mut self, chunks: [&[u8]; POLS]) -> Result<()> {
        self.bind()?;
        let g = self.geometry;
        let mut frame = Frame::new_host(&g.input, &[g.output]);
        let lag = (g.output.taps - 1) * g.step();
        for ((chunk, delays), src) in frame
            .input
            .chunk
            .iter_mut()
            .zip(&mut frame.outputs[0].delays)
            .zip(chunks)
        {
            chunk.copy_from_slice(src);
            for (m, d) in delays.iter_mut().enumerate() {
                d.offset = (g.input.overlap_samples - lag + m * g.step()) as u32;
            }
        }
        for slot in 0..SLOTS {
            self.stage_params(slot, &frame);
            self.copy_in(slot, &frame)?;
        }
        self.synchronize()
    }

    pub fn slots(&self) -> usize {
        SLOTS
    }
}

/// A device copy of `bytes` (synchronous: set-up only).
fn upload(ctx: &Arc<CudaContext>, bytes: &[u8], what: &str) -> Result<DeviceBuffer> {
    let buf = DeviceBuffer::new(ctx, bytes.len())?;
    // SAFETY: synchronous copy into a buffer of exactly this size.
    check(
        unsafe { sys::cuMemcpyHtoD_v2(buf.ptr(), bytes.as_ptr() as *const _, bytes.len()) },
        what,
    )?;
    Ok(buf)
}

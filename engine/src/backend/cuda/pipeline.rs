//! The device side of the backend: a ring of per-frame slots, the streams, and one frame's work.
//!
//! Frame `seq` uses slot `seq % SLOTS` for everything that must outlive the compute stream's turn
//! (the span, each output's delays, gains and heaps). The input is copied in once per frame
//! whatever the number of outputs; each output ([`OutputStage`]) computes from the slot's span.
//! The streams overlap:
//! - host-to-device, at the highest priority: the previous span's tail copied in as this span's
//!   overlap (device to device: a kernel, which the outputs' kernels must not crowd out), the
//!   chunk after it, each output's delays and gains;
//! - compute: the first output's `pfb_fir` (or DDC and complex FIR), cuFFT, post-processing
//!   (kernels only, so that it never queues behind a large PCIe copy on a copy engine); each
//!   further output on a lane of its own, forked from compute and joined back, so that outputs
//!   bound by different things (bandwidth, shared memory, arithmetic) run side by side; the
//!   narrowband outputs' DDCs in one launch (`ddc_set`) on a lane of their own, which those
//!   outputs' lanes wait for;
//! - device-to-host: each output's heaps and counters (then cleared for the slot's next use);
//! - sensors: `input_power` over the new chunk, beside the FIR (it only reads the span).
//!
//! Events order them: the copy in waits until the slot's span and parameters are no longer read
//! (compute of frame seq - SLOTS + 1; the overlap copy that reads the slot's tail is earlier on the
//! copy-in stream itself); compute waits for the copy in and for the slot's previous output to
//! have left; the copy out waits for compute (which has joined the lanes).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream, LaunchConfig, PushKernelArg};
use num_complex::Complex32;

use super::compile::CompileTimes;
use super::ddc_set::DdcSet;
use super::device::{check, driver, memory_info, DeviceBuffer, PinnedAlloc};
use super::output::OutputStage;
use crate::backend::{Channelisation, Frame, InputGeometry, Result, POLS};
use crate::signal::power::InputPower;

/// Frames in flight: one being copied in, one computed, one copied out, and one more so that a late
/// `wait` (host jitter) does not leave the copy-in stream idle.
pub(crate) const IN_FLIGHT: usize = 4;
/// One more slot than frames in flight: frame seq + 1 reads frame seq's span for its overlap.
const SLOTS: usize = IN_FLIGHT + 1;
/// Bytes of the input sensors' counters, u64 per polarisation: the sum of squares, then the
/// full-scale samples.
const SENSOR_BYTES: usize = 2 * 8 * POLS;
/// Threads per block of `input_power` (its `__launch_bounds__`), and most blocks per polarisation.
const POWER_BLOCK: u32 = 256;
const POWER_BLOCKS: u32 = 512;

/// Everything frame `seq` owns on the device, apart from its outputs' buffers, until it is waited
/// for.
struct Slot {
    /// [pol][span_stride] packed samples: overlap, then chunk, then padding.
    span: DeviceBuffer,
    /// The input sensors' counters, and their host copy.
    sensors: DeviceBuffer,
    sensors_host: PinnedAlloc,
    copied_in: CudaEvent,
    computed: CudaEvent,
    /// The input sensors' kernel has read the chunk and written its counters.
    measured: CudaEvent,
    copied_out: CudaEvent,
}

/// Start-up costs, for the benchmark and logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Startup {
    /// Summed over the outputs.
    pub compile: CompileTimes,
    pub fft_plan_ms: f64,
    pub alloc_ms: f64,
    pub total_ms: f64,
    /// Device memory taken by this backend (free memory before minus after), including cuFFT's work area.
    pub device_bytes: usize,
    pub fft_work_bytes: usize,
    /// The first output's kernels.
    pub fir_registers: Option<i32>,
    pub postproc_registers: Option<i32>,
}

/// Benchmark timing events of one frame: start, after the overlap copy, after the first output's
/// first stage and FFT, end; and per output (on its lane), its start, after its first stage, after
/// its FFT, its end.
pub(crate) struct StageMarks(pub [CudaEvent; 5], pub Vec<[CudaEvent; 4]>);

impl StageMarks {
    pub fn new(ctx: &Arc<CudaContext>, outputs: usize) -> Result<Self> {
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
    /// Bytes per polarisation in a slot's span buffer (a multiple of 256, with room for the
    /// FIR's two-word reads past the last sample).
    span_stride: usize,
    /// Sequence number of the next frame.
    seq: u64,
    pub startup: Startup,
}

impl Pipeline {
    /// Builds every output's stage (`outputs` validated, all of one input) and the slots.
    pub fn new(
        ctx: Arc<CudaContext>,
        outputs: &[Channelisation],
        tuning: kernels::Tuning,
    ) -> Result<Self> {
        let t_start = Instant::now();
        let input = outputs
            .first()
            .ok_or_else(|| crate::backend::BackendError::Misuse("no outputs".into()))?
            .input;
        let (free_before, _) = memory_info(&ctx)?;
        let stream = |what| ctx.new_stream().map_err(driver(what));
        // The copy in runs first among equals: its overlap copy is a kernel, which the outputs'
        // kernels on several streams would otherwise crowd out, holding back the next frame.
        let (_, first) = cudarc::driver::result::stream::get_priority_range()
            .map_err(driver("reading the stream priorities"))?;
        let h2d = ctx
            .new_stream_with_priority(first)
            .map_err(driver("creating the host-to-device stream"))?;
        let compute = stream("creating the compute stream")?;
        let d2h = stream("creating the device-to-host stream")?;
        let sensors = stream("creating the input sensors' stream")?;

        let lanes = (0..outputs.len())
            .map(|k| match k > 0 && tuning.concurrent_outputs {
                true => stream("creating an output's stream"),
                false => Ok(compute.clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        let sync_event = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(driver("creating an event"))
        };
        let forked = sync_event()?;
        let joined = lanes.iter().map(|_| sync_event()).collect::<Result<_>>()?;
        let stages = outputs
            .iter()
            .zip(&lanes)
            .map(|(g, lane)| OutputStage::new(&ctx, lane, *g, tuning, SLOTS))
            .collect::<Result<Vec<_>>>()?;

        let ddc_set = match DdcSet::new(&ctx, &stages)? {
            None => None,
            Some(set) => {
                let lane = match tuning.concurrent_outputs {
                    true => stream("creating the DDC set's stream")?,
                    false => compute.clone(),
                };
                Some((set, lane, sync_event()?))
            }
        };

        let t_alloc = Instant::now();
        let span_stride =
            (input.span_samples() * input.sample_bits as usize / 8 + 8).div_ceil(256) * 256;
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            let event = |flags| {
                ctx.new_event(Some(flags))
                    .map_err(driver("creating an event"))
            };
            slots.push(Slot {
                // Zeroed: the first frame's overlap is silence, as in the reference backend.
                span: DeviceBuffer::zeroed(&ctx, POLS * span_stride)?,
                // Zeroed; after each frame the copy out clears them.
                sensors: DeviceBuffer::zeroed(&ctx, SENSOR_BYTES)?,
                sensors_host: PinnedAlloc::new(&ctx, SENSOR_BYTES)?,
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

        let first = &stages[0].kernels;
        let startup = Startup {
            compile: {
                let set = ddc_set.iter().map(|(s, ..)| s.compile);
                let all: Vec<CompileTimes> = stages.iter().map(|o| o.compile).chain(set).collect();
                CompileTimes {
                    nvrtc_ms: all.iter().map(|c| c.nvrtc_ms).sum(),
                    load_ms: all.iter().map(|c| c.load_ms).sum(),
                }
            },
            fft_plan_ms: stages.iter().map(|o| o.fft_plan_ms).sum(),
            alloc_ms,
            total_ms: t_start.elapsed().as_secs_f64() * 1e3,
            device_bytes: free_before.saturating_sub(free_after),
            fft_work_bytes: stages.iter().map(|o| o.fft_work_bytes()).sum(),
            fir_registers: super::compile::registers(&first.fir),
            postproc_registers: super::compile::registers(&first.postproc),
        };
        Ok(Self {
            input,
            ctx,
            h2d,
            compute,
            d2h,
            sensors,
            outputs: stages,
            lanes,
            forked,
            joined,
            ddc_set,
            slots,
            span_stride,
            seq: 0,
            startup,
        })
    }

    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the CUDA context"))
    }

    /// Gains of output `output` for frames enqueued from now on (validated by the caller).
    pub fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) {
        self.outputs[output].set_gains(pol, gains);
    }

    fn span_bytes(&self) -> usize {
        self.input.span_samples() * self.input.sample_bits as usize / 8
    }

    fn overlap_bytes(&self) -> usize {
        self.input.overlap_samples * self.input.sample_bits as usize / 8
    }

    /// Enqueues all of `frame`'s work (copy in, compute, copy out) as the next frame of the
    /// stream; returns its slot. The caller must not have more than [`IN_FLIGHT`] frames
    /// unfinished, must keep `frame`'s buffers alive and untouched until [`Self::finish`], and must
    /// have checked the frame against the geometry.
    pub fn enqueue(&mut self, frame: &mut Frame) -> Result<usize> {
        self.bind()?;
        let slot = (self.seq % SLOTS as u64) as usize;
        let span_start = frame
            .input
            .timestamp
            .wrapping_sub(self.input.overlap_samples as u64);
        for (stage, out) in self.outputs.iter_mut().zip(&frame.outputs) {
            stage.stage_params(slot, out, span_start);
        }
        self.copy_in(slot, frame)?;
        self.enqueue_sensors(slot)?;
        self.enqueue_compute(slot, false, None)?;
        self.copy_out(slot, frame)?;
        self.seq += 1;
        Ok(slot)
    }

    /// Waits for the frame in `slot` to have left the device; fills its saturation counts and
    /// input sensors.
    pub fn finish(&self, slot: usize, frame: &mut Frame) -> Result<()> {
        self.bind()?;
        let s = &self.slots[slot];
        s.copied_out
            .synchronize()
            .map_err(driver("waiting for a frame"))?;
        for (stage, out) in self.outputs.iter().zip(&mut frame.outputs) {
            out.saturated = stage.saturated(slot);
        }
        let b = s.sensors_host.as_slice();
        let word = |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
        frame.input.power = Some(std::array::from_fn(|p| InputPower {
            sum_squares: word(p),
            full_scale: word(POLS + p),
        }));
        Ok(())
    }

    fn copy_in(&mut self, slot: usize, frame: &Frame) -> Result<()> {
        let (overlap, chunk, stride) = (
            self.overlap_bytes(),
            self.input.chunk_bytes(),
            self.span_stride,
        );
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
        for pol in 0..POLS {
            // SAFETY: `chunk` bytes fit after the overlap in this pol's span; the host buffer is the
            // frame's chunk, kept alive by the caller until the frame is finished.
            check(
                unsafe {
                    sys::cuMemcpyHtoDAsync_v2(
                        s.span.at(pol * stride + overlap),
                        frame.input.chunk[pol].as_ptr() as *const _,
                        chunk,
                        self.h2d.cu_stream(),
                    )
                },
                "copying a chunk to the device",
            )?;
        }
        for stage in &mut self.outputs {
            stage.copy_params(slot, &self.h2d)?;
        }
        self.slots[slot]
            .copied_in
            .record(&self.h2d)
            .map_err(driver("recording the copy in"))
    }

    /// The compute stream's part of a frame: every output's FIR, FFT, post-processing (each on
    /// its lane); with `carry` (benchmark only) the overlap copy first, to time it. With `marks`,
    /// records an event between stages (the FIR and FFT marks are the first output's) and around
    /// each output's, on its lane.
    pub fn enqueue_compute(
        &self,
        slot: usize,
        carry: bool,
        marks: Option<&StageMarks>,
    ) -> Result<()> {
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
        let (span, span_words) = (s.span.ptr(), (self.span_stride / 4) as u64);
        let own = |lane: &Arc<CudaStream>| !Arc::ptr_eq(lane, &self.compute);
        let own_lane = |k: usize| own(&self.lanes[k]);
        let set_lane = self.ddc_set.as_ref().map(|(_, lane, _)| lane);
        if self.lanes.iter().chain(set_lane).any(own) {
            self.forked
                .record(&self.compute)
                .map_err(driver("forking the outputs' streams"))?;
        }
        if let Some((set, lane, done)) = &self.ddc_set {
            if own(lane) {
                lane.wait(&self.forked)
                    .map_err(driver("ordering the DDCs after the overlap"))?;
            }
            set.enqueue(&self.outputs, slot, span, span_words, lane)?;
            done.record(lane).map_err(driver("recording the DDCs"))?;
        }
        for (k, stage) in self.outputs.iter().enumerate() {
            let lane = &self.lanes[k];
            if own_lane(k) {
                lane.wait(&self.forked)
                    .map_err(driver("ordering an output after the overlap"))?;
            }
            let record = |i: usize| -> Result<()> {
                match marks.and_then(|m| m.1.get(k)) {
                    Some(ev) => ev[i]
                        .record(lane)
                        .map_err(driver("recording a timing event")),
                    None => Ok(()),
                }
            };
            record(0)?;
            if let Some((set, set_lane, done)) = &self.ddc_set {
                if set.members.contains(&k) && !Arc::ptr_eq(set_lane, lane) {
                    lane.wait(done)
                        .map_err(driver("ordering an output after its DDC"))?;
                }
            }
            let m = |i: usize| -> Result<()> {
                if k == 0 {
                    mark(i)?;
                }
                record(i - 1)
            };
            stage.enqueue_compute(slot, span, span_words, lane, &m)?;
            record(3)?;
            if own_lane(k) {
                self.joined[k]
                    .record(lane)
                    .map_err(driver("recording an output's compute"))?;
                self.compute
                    .wait(&self.joined[k])
                    .map_err(driver("joining the outputs' streams"))?;
            }
        }
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
            (self.input.overlap_samples / 2) as u64,
            (self.input.chunk_samples / 2) as u64,
        );
        let sums = s.sensors.ptr();
        let blocks = pairs
            .div_ceil(8 * POWER_BLOCK as u64)
            .min(POWER_BLOCKS as u64) as u32;
        // Every output's module holds the same input_power (one input): the first's serves.
        let mut power = self
            .sensors
            .launch_builder(&self.outputs[0].kernels.input_power);
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
        // counters are SENSOR_BYTES.
        unsafe { power.launch(shape) }.map_err(driver("launching input_power"))?;
        s.measured
            .record(&self.sensors)
            .map_err(driver("recording the input measure"))
    }

    fn copy_out(&self, slot: usize, frame: &mut Frame) -> Result<()> {
        let s = &self.slots[slot];
        for event in [&s.computed, &s.measured] {
            self.d2h
                .wait(event)
                .map_err(driver("ordering the copy out"))?;
        }
        for (stage, out) in self.outputs.iter().zip(&mut frame.outputs) {
            // SAFETY: the frame's heaps were checked against the output's geometry by the caller,
            // who keeps them alive until the frame is finished.
            unsafe { stage.copy_out(slot, out.heaps.as_mut_ptr(), &self.d2h)? };
        }
        let d2h = self.d2h.cu_stream();
        // SAFETY: both sensor buffers are SENSOR_BYTES.
        unsafe {
            check(
                sys::cuMemcpyDtoHAsync_v2(
                    s.sensors_host.as_ptr() as *mut _,
                    s.sensors.ptr(),
                    SENSOR_BYTES,
                    d2h,
                ),
                "copying the input sensors to the host",
            )?;
            check(
                sys::cuMemsetD8Async(s.sensors.ptr(), 0, SENSOR_BYTES, d2h),
                "clearing the input sensors",
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

    /// Input samples per polarisation per frame.
    pub fn chunk_samples(&self) -> usize {
        self.input.chunk_samples
    }

    /// Bytes of device memory each compute stage reads plus writes, per frame (nominal: every
    /// input read once, every output written once): the overlap copy, then the FIR, FFT and
    /// post-processing summed over the outputs.
    pub fn stage_bytes(&self) -> [f64; 4] {
        let overlap = 2.0 * POLS as f64 * self.overlap_bytes() as f64;
        let mut b = [overlap, 0.0, 0.0, 0.0];
        for stage in &self.outputs {
            for (total, x) in b[1..].iter_mut().zip(stage.stage_bytes()) {
                *total += x;
            }
        }
        b
    }

    /// Copies `chunks` (packed, one per pol) into every slot's span and sets nominal delays
    /// (offset overlap - (T-1) 2n + m 2n, no fine delay) in every slot, for compute-only timing.
    pub fn load_for_bench(&mut self, chunks: [&[u8]; POLS]) -> Result<()> {
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
        // what the last frame did not), slot 0 twice so that it too follows another.
        for f in 0..=SLOTS {
            let slot = f % SLOTS;
            let span_start = (f * self.input.chunk_samples) as u64;
            for (stage, out) in self.outputs.iter_mut().zip(&frame.outputs) {
                stage.stage_params(slot, out, span_start);
            }
            self.copy_in(slot, &frame)?;
        }
        self.synchronize()
    }

    pub fn slots(&self) -> usize {
        SLOTS
    }
}

/// Delays that place spectrum m's window at overlap - lag + m step with lag the window less one
/// step (rounded up to the decimation): no delay, the output's nominal position (for benchmarks).
pub(crate) fn nominal_delays(g: &Channelisation, out: &mut crate::backend::OutputFrame) {
    let lag = (g.window() - g.step()).next_multiple_of(g.output.decimation());
    for delays in &mut out.delays {
        for (m, d) in delays.iter_mut().enumerate() {
            d.offset = (g.input.overlap_samples - lag + m * g.step()) as u32;
        }
    }
    // A quarter of the sample rate: any word computes at the same speed.
    out.mixer = 1 << 30;
}

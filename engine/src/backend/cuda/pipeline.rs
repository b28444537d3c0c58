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
/// Frames a span ring holds at least: its wrap copy costs 1/8 of a frame's overlap copy.
const RING_FRAMES: usize = 8;
/// Bytes of the input sensors' counters, u64 per polarisation: the sum of squares, then the
/// full-scale samples.
const SENSOR_BYTES: usize = 2 * 8 * POLS;
/// Threads per block of `input_power` (its `__launch_bounds__`), and most blocks per polarisation.
const POWER_BLOCK: u32 = 256;
const POWER_BLOCKS: u32 = 512;

/// Everything frame `seq` owns on the device, apart from its outputs' buffers, until it is waited
/// for.
struct Slot {
    /// The frame's chunk position in the span ring.
    at: usize,
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
    /// Registers a thread of the first output's FIR and post-processing kernels, those that run:
    /// `fused_fir` and `fused_post` on two passes, else `pfb_fir` and `postproc`.
    pub fir_registers: Option<i32>,
    pub postproc_registers: Option<i32>,
}

/// A frame's span on the device, as the kernels take it: its first word, the words from one
/// polarisation's row to the next, and the words of the span (reads past it are padding or
/// another frame's samples, which feed nothing stored).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanView {
    pub ptr: sys::CUdeviceptr,
    pub stride_words: u64,
    pub words: u64,
}

/// The spans of consecutive frames without a copy per frame. One buffer holds, per polarisation,
/// the overlap and then `frames` chunks: frame f's chunk follows frame f - 1's, so the samples
/// before it are already its overlap. Only a frame at the ring's start has its overlap copied in,
/// from the tail of the last span (device to device), so the copy costs 1/`frames` of a frame on
/// average. Every span starts on a word: a chunk is a whole number of heaps, at least 32 samples.
///
/// The ring holds at least SLOTS + ceil(overlap / chunk) chunks, so a write touches only samples
/// that frame seq - SLOTS + 1 or earlier read (the chunks within an overlap's reach of the written
/// stretch, one turn of the ring back), which the copy in already waits for.
struct SpanRing {
    /// [pol][row] packed samples: overlap, `frames` chunks, padding.
    buffer: DeviceBuffer,
    frames: usize,
    /// Bytes per polarisation (a multiple of 256, with room for the kernels' two-word reads past
    /// the last sample).
    row: usize,
    overlap: usize,
    chunk: usize,
}

impl SpanRing {
    fn new(ctx: &Arc<CudaContext>, input: &InputGeometry) -> Result<Self> {
        let bytes = |samples: usize| samples * input.sample_bits as usize / 8;
        let (overlap, chunk) = (bytes(input.overlap_samples), input.chunk_bytes());
        // The kernels index a frame's span (overlap and chunk) with 32-bit sample offsets.
        let span = input.overlap_samples + input.chunk_samples;
        if span > u32::MAX as usize {
            return Err(crate::backend::BackendError::Misuse(format!(
                "a frame's span of {span} samples (overlap and chunk) is more than the CUDA \
                 kernels' 32-bit sample offsets reach ({}); use fewer heaps a frame",
                u32::MAX
            )));
        }
        if !chunk.is_multiple_of(4) {
            return Err(crate::backend::BackendError::Misuse(format!(
                "a chunk of {chunk} bytes is not a whole number of 32-bit words"
            )));
        }
        let frames = RING_FRAMES.max(SLOTS + input.overlap_samples.div_ceil(input.chunk_samples));
        let row = (overlap + frames * chunk + 8).div_ceil(256) * 256;
        Ok(Self {
            // Zeroed: the first frame's overlap is silence, as in the reference backend.
            buffer: DeviceBuffer::zeroed(ctx, POLS * row)?,
            frames,
            row,
            overlap,
            chunk,
        })
    }

    /// Frame `seq`'s chunk position in the ring.
    fn place(&self, seq: u64) -> usize {
        (seq % self.frames as u64) as usize
    }

    /// The span whose chunk is at `at`.
    fn view(&self, at: usize) -> SpanView {
        SpanView {
            ptr: self.buffer.at(at * self.chunk),
            stride_words: (self.row / 4) as u64,
            words: (self.overlap + self.chunk).div_ceil(4) as u64,
        }
    }

    /// Where pol `pol`'s chunk at `at` goes.
    fn chunk_ptr(&self, at: usize, pol: usize) -> sys::CUdeviceptr {
        self.buffer
            .at(pol * self.row + self.overlap + at * self.chunk)
    }

    /// Where `at` is the ring's start, copies the tail of the last span (at the ring's end) to
    /// the ring's head, on `stream`.
    fn copy_overlap(&self, at: usize, stream: &CudaStream) -> Result<()> {
        if at != 0 || self.overlap == 0 {
            return Ok(());
        }
        for pol in 0..POLS {
            let row = pol * self.row;
            // SAFETY: both ranges lie inside the row and do not overlap (the tail starts
            // frames * chunk >= overlap bytes in).
            check(
                unsafe {
                    sys::cuMemcpyDtoDAsync_v2(
                        self.buffer.at(row),
                        self.buffer.at(row + self.frames * self.chunk),
                        self.overlap,
                        stream.cu_stream(),
                    )
                },
                "copying the overlap",
            )?;
        }
        Ok(())
    }
}

/// Benchmark timing events of one frame: start, after the overlap copy, after the first output's
/// first stage and FFT, end; and per output (on its lane), its start, after its first stage, after
/// its FFT, its end.
pub(crate) struct StageMarks(pub [CudaEvent; 5], pub Vec<[CudaEvent; 4]>);

impl StageMarks {
    pub(super) fn new(ctx: &Arc<CudaContext>, outputs: usize) -> Result<Self> {
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
    ring: SpanRing,
    /// Sequence number of the next frame.
    seq: u64,
    pub startup: Startup,
}

impl Pipeline {
    /// Builds every output's stage (`outputs` validated, all of one input) and the slots.
    pub(super) fn new(
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
        let ring = SpanRing::new(&ctx, &input)?;
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            let event = |flags| {
                ctx.new_event(Some(flags))
                    .map_err(driver("creating an event"))
            };
            slots.push(Slot {
                at: 0,
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

        let (fir_registers, postproc_registers) = stages[0].registers();
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
            fir_registers,
            postproc_registers,
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
            ring,
            seq: 0,
            startup,
        })
    }

    pub(super) fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the CUDA context"))
    }

    /// Gains of output `output` for frames enqueued from now on (validated by the caller).
    pub(super) fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) {
        self.outputs[output].set_gains(pol, gains);
    }

    /// Enqueues all of `frame`'s work (copy in, compute, copy out) as the next frame of the
    /// stream; returns its slot. The caller must not have more than [`IN_FLIGHT`] frames
    /// unfinished, must keep `frame`'s buffers alive and untouched until [`Self::finish`], and must
    /// have checked the frame against the geometry.
    pub(super) fn enqueue(&mut self, frame: &mut Frame) -> Result<usize> {
        self.bind()?;
        let slot = (self.seq % SLOTS as u64) as usize;
        let span_start = frame
            .input
            .timestamp
            .wrapping_sub(self.input.overlap_samples as u64);
        for (stage, out) in self.outputs.iter_mut().zip(&frame.outputs) {
            stage.stage_params(slot, out, span_start);
        }
        self.copy_in(slot, self.seq, frame)?;
        self.enqueue_sensors(slot)?;
        self.enqueue_compute(slot, false, None)?;
        self.copy_out(slot, frame)?;
        self.seq += 1;
        Ok(slot)
    }

    /// Waits for the frame in `slot` to have left the device; fills its saturation counts and
    /// input sensors.
    pub(super) fn finish(&self, slot: usize, frame: &mut Frame) -> Result<()> {
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

    /// Copies frame `seq`'s chunk (and, at the ring's start, its overlap) into the ring,
    /// and its outputs' parameters into `slot`.
    fn copy_in(&mut self, slot: usize, seq: u64, frame: &Frame) -> Result<()> {
        let at = self.ring.place(seq);
        self.slots[slot].at = at;
        let next = &self.slots[(slot + 1) % SLOTS];
        // The ring's stretch this frame writes was last read by frame seq - SLOTS + 1 or earlier
        // (see SpanRing), as were the slot's parameters (frame seq - SLOTS).
        self.h2d
            .wait(&next.computed)
            .map_err(driver("ordering the copy in"))?;
        // ... and the slot's own input measure (on its own stream) has read it.
        self.h2d
            .wait(&self.slots[slot].measured)
            .map_err(driver("ordering the copy in after the input measure"))?;
        // The span starts with the previous span's tail (written earlier on this same stream).
        if seq > 0 {
            self.ring.copy_overlap(at, &self.h2d)?;
        }
        for pol in 0..POLS {
            // SAFETY: the chunk fits at its place in this pol's row; the host buffer is the
            // frame's chunk, kept alive by the caller until the frame is finished.
            check(
                unsafe {
                    sys::cuMemcpyHtoDAsync_v2(
                        self.ring.chunk_ptr(at, pol),
                        frame.input.chunk[pol].as_ptr() as *const _,
                        self.input.chunk_bytes(),
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
    /// its lane); with `carry` (benchmark only) the ring's overlap copy first where the frame
    /// starts a buffer, to time it. With `marks`,
    /// records an event between stages (the FIR and FFT marks are the first output's) and around
    /// each output's, on its lane.
    pub(super) fn enqueue_compute(
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
            self.ring.copy_overlap(s.at, &self.compute)?;
        }
        mark(1)?;
        let span = self.ring.view(s.at);
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
            set.enqueue(&self.outputs, slot, span, lane)?;
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
            stage.enqueue_compute(slot, span, lane, &m)?;
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
        let span = self.ring.view(s.at);
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
            .arg(&span.ptr)
            .arg(&span.stride_words)
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
    pub(super) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        for s in [&self.h2d, &self.compute, &self.d2h, &self.sensors] {
            s.synchronize().map_err(driver("synchronising a stream"))?;
        }
        Ok(())
    }

    // ---- for the benchmark ----

    /// Input samples per polarisation per frame.
    pub(super) fn chunk_samples(&self) -> usize {
        self.input.chunk_samples
    }

    /// Bytes of device memory each compute stage reads plus writes, per frame (nominal: every
    /// input read once, every output written once): the ring's overlap copy (one frame in
    /// [`Self::ring_frames`]), then the FIR, FFT and post-processing summed over the outputs.
    pub(super) fn stage_bytes(&self) -> [f64; 4] {
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
    pub(super) fn load_for_bench(&mut self, chunks: [&[u8]; POLS]) -> Result<()> {
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
    pub(super) fn enqueue_bench_frame(
        &mut self,
        i: usize,
        marks: Option<&StageMarks>,
    ) -> Result<()> {
        let slot = i % SLOTS;
        self.slots[slot].at = self.ring.place(i as u64);
        self.enqueue_compute(slot, true, marks)
    }

    /// Whether bench frame `i` is at the span ring's start (copies its overlap).
    pub(super) fn bench_frame_copies(&self, i: usize) -> bool {
        self.ring.place(i as u64) == 0
    }

    /// Chunks in the span ring: one frame in this many copies its overlap.
    pub(super) fn ring_frames(&self) -> usize {
        self.ring.frames
    }

    pub(super) fn slots(&self) -> usize {
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

//! The CUDA backend's benchmark: GPU-only kernel times and throughput, the whole backend fed
//! through PCIe from pinned memory, and start-up costs, each beside the ceiling measured in the same
//! run (device-to-device copy; host-to-device, device-to-host and both at once).

use std::io::Write;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};

use super::device::{check, driver, DeviceBuffer, PinnedAlloc};
use super::pipeline::{nominal_delays, StageMarks};
use super::{CudaBackend, Tuning};
use crate::backend::{
    Backend, BackendError, Channelisation, InputGeometry, OutputGeometry, OutputKind, Result, POLS,
};

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub channels: Vec<usize>,
    pub taps: usize,
    pub sample_bits: u32,
    /// Output bits (8 or 4) and whether the output is dithered.
    pub output_bits: u32,
    pub dither: bool,
    pub spectra_per_heap: usize,
    /// New samples per polarisation per frame (rounded to whole heaps).
    pub chunk_samples: usize,
    /// Timed repetitions of the GPU-only pass (median reported).
    pub iterations: usize,
    /// Frames pushed through the whole backend (after warm-up).
    pub frames: usize,
    pub gpu_index: usize,
    /// Launch shapes to compare at `variant_channels` (GPU only); empty for none.
    pub variants: Vec<Tuning>,
    pub variant_channels: usize,
    /// Chunk sizes (samples per pol) at which to repeat (b) at `variant_channels`; empty for none.
    pub e2e_chunks: Vec<usize>,
    /// Narrowband outputs (channels, decimation) computed beside each wideband one in (a), (b)
    /// and (c), from the same input: the figures are then the whole set's.
    pub narrowband: Vec<(usize, usize)>,
    /// Outputs per `ddc` thread to compare for the set at `variant_channels` (GPU only, needs
    /// narrowband outputs); empty for none.
    pub ddc_variants: Vec<usize>,
    /// The launch choices of tables (a) to (c).
    pub tuning: Tuning,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            channels: vec![1024, 4096, 8192, 32768, 65536],
            taps: 16,
            sample_bits: 10,
            output_bits: 8,
            dither: false,
            spectra_per_heap: 256,
            chunk_samples: 1 << 26,
            iterations: 20,
            frames: 120,
            gpu_index: 0,
            variants: Vec::new(),
            variant_channels: 32768,
            e2e_chunks: Vec::new(),
            narrowband: Vec::new(),
            ddc_variants: Vec::new(),
            tuning: Tuning::default(),
        }
    }
}

/// One channel count's results.
#[derive(Clone, Debug, Default)]
pub struct BenchRow {
    pub channels: usize,
    /// µs per frame: the overlap copy (the span ring's, amortised over its frames), then the
    /// median FIR, FFT, post-processing, and total (the median frame plus the amortised copy).
    pub stage_us: [f64; 5],
    /// Median µs per frame of each output's first stage, FFT and post-processing (wideband: FIR;
    /// narrowband: DDC and complex FIR), timed on the output's stream.
    pub output_us: Vec<[f64; 3]>,
    /// Bytes each of the four stages moves per frame.
    pub stage_bytes: [f64; 4],
    /// GPU-only throughput, Gsample/s per polarisation.
    pub gpu_gsps: f64,
    /// Device-memory bandwidth achieved over the whole GPU-only pass, GB/s.
    pub gpu_gbps: f64,
    /// Whole backend through PCIe, Gsample/s per polarisation.
    pub e2e_gsps: f64,
    /// Milliseconds between frames coming back: min, median, max.
    pub e2e_interval_ms: [f64; 3],
    pub startup_ms: f64,
    pub startup: super::Startup,
}

/// Ceilings measured in the same run, GB/s.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read plus written.
    pub d2d: f64,
    /// Device memory written alone (a memset): the ceiling of a kernel that mostly writes.
    pub d_write: f64,
    pub h2d: f64,
    pub d2h: f64,
    /// Both directions at once: (host to device, device to host).
    pub both: (f64, f64),
}

fn geometry(opts: &BenchOptions, channels: usize) -> Channelisation {
    let heap_samples = opts.spectra_per_heap * 2 * channels;
    let heaps_per_frame = (opts.chunk_samples / heap_samples).max(1);
    Channelisation::new(
        InputGeometry {
            sample_bits: opts.sample_bits,
            chunk_samples: heaps_per_frame * heap_samples,
            // Room for the FIR's history and 2048 samples of coarse delay either way.
            overlap_samples: (opts.taps - 1) * 2 * channels + 4096,
        },
        OutputGeometry {
            channels,
            taps: opts.taps,
            spectra_per_heap: opts.spectra_per_heap,
            bits: opts.output_bits,
            filter: Default::default(),
            dither: opts.dither.then_some(1),
            kind: OutputKind::Wideband,
        },
    )
}

/// The wideband output of `channels` channels and the options' narrowband outputs, on one input
/// whose overlap holds every output's window (and 2048 samples of coarse delay either way). A
/// narrowband output's heaps are at most a frame long.
fn output_set(opts: &BenchOptions, channels: usize) -> Vec<Channelisation> {
    let wide = geometry(opts, channels);
    let chunk = wide.input.chunk_samples;
    let mut outputs = vec![wide.output];
    for &(n, decimation) in &opts.narrowband {
        let step = 2 * n * decimation;
        outputs.push(OutputGeometry {
            channels: n,
            spectra_per_heap: opts.spectra_per_heap.min(chunk / step).max(1),
            kind: OutputKind::Narrowband(crate::backend::Ddc::new(decimation)),
            ..wide.output
        });
    }
    let overlap = outputs
        .iter()
        .map(|o| o.window() - o.step() + 4096)
        .max()
        .unwrap_or(0)
        .next_multiple_of(256);
    let input = InputGeometry {
        overlap_samples: overlap,
        ..wide.input
    };
    outputs
        .into_iter()
        .map(|o| Channelisation::new(input, o))
        .collect()
}

/// Which kernels run the wideband output, for the bench's header.
fn wideband_kernels(t: &kernels::Tuning) -> String {
    let three = "three passes (pfb_fir, cuFFT, postproc)";
    if !t.fused {
        return three.to_string();
    }
    let rows = if t.half_rows { ", float16 rows" } else { "" };
    let two = match t.fused_chunk {
        0 => format!("two passes (fused_fir in the fir column, fused_post in post{rows})"),
        k => format!("two passes in chunks of {k} spectra{rows} (fir column: both)"),
    };
    let sizes = match t.fused_max_channels {
        usize::MAX => format!("from {} channels", kernels::FUSED_MIN_CHANNELS),
        max => format!("from {} to {max} channels", kernels::FUSED_MIN_CHANNELS),
    };
    format!("{two} {sizes}, else {three}")
}

/// A short description of the narrowband outputs, for the report.
fn narrowband_label(opts: &BenchOptions) -> String {
    if opts.narrowband.is_empty() {
        return String::new();
    }
    let list: Vec<String> = opts
        .narrowband
        .iter()
        .map(|(n, d)| format!("{n} ch / D {d}"))
        .collect();
    format!(" + narrowband {}", list.join(", "))
}

/// Pseudo-random packed bytes (splitmix64; every bit pattern is a valid sample): never zeros,
/// which can run faster than real data.
fn random_bytes(state: &mut u64, len: usize) -> Vec<u8> {
    let mut next = || {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&next().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn timing_event(ctx: &std::sync::Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(driver("creating a timing event"))
}

fn elapsed_ms(a: &CudaEvent, b: &CudaEvent) -> Result<f64> {
    a.elapsed_ms(b)
        .map(f64::from)
        .map_err(driver("reading a timing event"))
}

/// Runs the benchmark, writing tables to `out` as it goes.
pub fn run(opts: &BenchOptions, out: &mut dyn Write) -> Result<(Ceilings, Vec<BenchRow>)> {
    let io = |e: std::io::Error| BackendError::Device(format!("writing the report: {e}"));
    let mut rng = 7u64;
    let mut rows = Vec::new();
    let mut ceilings = Ceilings::default();
    for (i, &channels) in opts.channels.iter().enumerate() {
        let set = output_set(opts, channels);
        let g = set[0];
        let t0 = Instant::now();
        let mut backend = CudaBackend::with_tuning(&set, opts.gpu_index, opts.tuning)?;
        let startup_ms = t0.elapsed().as_secs_f64() * 1e3;
        if i == 0 {
            writeln!(
                out,
                "device: {}; output {}-bit, dither {}; outputs: wideband{}; wideband kernels: {}",
                backend.device_name(),
                opts.output_bits,
                if opts.dither { "on" } else { "off" },
                narrowband_label(opts),
                wideband_kernels(&opts.tuning)
            )
            .map_err(io)?;
            ceilings = measure_ceilings(&backend.pipeline.ctx)?;
            writeln!(
                out,
                "ceilings: device copy {:.0} GB/s (read + write), device write {:.0} GB/s; host-to-device {:.1} GB/s, device-to-host {:.1} GB/s, both at once {:.1} + {:.1} GB/s",
                ceilings.d2d, ceilings.d_write, ceilings.h2d, ceilings.d2h, ceilings.both.0, ceilings.both.1
            )
            .map_err(io)?;
        }
        let chunks: [Vec<u8>; POLS] =
            std::array::from_fn(|_| random_bytes(&mut rng, g.chunk_bytes()));
        let mut row = gpu_only(&mut backend, [&chunks[0], &chunks[1]], opts.iterations)?;
        (row.e2e_gsps, row.e2e_interval_ms) =
            end_to_end(&mut backend, [&chunks[0], &chunks[1]], opts.frames)?;
        row.startup_ms = startup_ms;
        row.startup = backend.startup();
        rows.push(row);
        drop(backend);
    }
    report(opts, &ceilings, &rows, out).map_err(io)?;
    if !opts.variants.is_empty() {
        let g = geometry(opts, opts.variant_channels);
        let chunks: [Vec<u8>; POLS] =
            std::array::from_fn(|_| random_bytes(&mut rng, g.chunk_bytes()));
        writeln!(
            out,
            "\n(d) launch shapes at {} channels (µs per frame)",
            g.output.channels
        )
        .map_err(io)?;
        writeln!(
            out,
            "{:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>11}",
            "batch", "block", "rows", "fir", "post", "total", "Gsps/pol"
        )
        .map_err(io)?;
        for t in &opts.variants {
            let mut backend = CudaBackend::with_tuning(&[g], opts.gpu_index, *t)?;
            let r = gpu_only(&mut backend, [&chunks[0], &chunks[1]], opts.iterations)?;
            writeln!(
                out,
                "{:>6} {:>6} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>11.1}",
                t.fir_batch,
                t.fir_block,
                t.postproc_rows,
                r.stage_us[1],
                r.stage_us[3],
                r.stage_us[4],
                r.gpu_gsps
            )
            .map_err(io)?;
        }
    }
    if !opts.ddc_variants.is_empty() && !opts.narrowband.is_empty() {
        let set = output_set(opts, opts.variant_channels);
        let chunks: [Vec<u8>; POLS] =
            std::array::from_fn(|_| random_bytes(&mut rng, set[0].chunk_bytes()));
        writeln!(
            out,
            "\n(f) variants: the defaults (DDC on the tensor cores, blocks of 4 warps over 8192 \
             samples; outputs on streams of their own), all outputs on one stream (serial), DDC \
             blocks of 8 warps over 16384 samples (16k 8w), DDC on the FMA pipe with C outputs per \
             thread (fma C); wideband {} channels{} (µs per frame; each output's first stage: \
             DDC + complex FIR)",
            opts.variant_channels,
            narrowband_label(opts)
        )
        .map_err(io)?;
        writeln!(
            out,
            "{:>8} {:>9} {:>11}  first stages",
            "variant", "total", "Gsps/pol"
        )
        .map_err(io)?;
        let base = Tuning::default();
        let mut variants = vec![
            ("default".to_string(), base),
            (
                "serial".to_string(),
                Tuning {
                    concurrent_outputs: false,
                    ..base
                },
            ),
            (
                "16k 8w".to_string(),
                Tuning {
                    ddc_mma_warps: 8,
                    ddc_set_span: 16384,
                    ..base
                },
            ),
        ];
        variants.extend(opts.ddc_variants.iter().map(|&ddc_outputs| {
            let t = Tuning {
                ddc_mma: false,
                ddc_outputs,
                ..base
            };
            (format!("fma {ddc_outputs}"), t)
        }));
        for (name, t) in variants {
            let mut backend = CudaBackend::with_tuning(&set, opts.gpu_index, t)?;
            let r = gpu_only(&mut backend, [&chunks[0], &chunks[1]], opts.iterations)?;
            let firsts: Vec<String> = r
                .output_us
                .iter()
                .skip(1)
                .map(|t| format!("{:.0}", t[0]))
                .collect();
            writeln!(
                out,
                "{:>8} {:>9.1} {:>11.1}  {}",
                name,
                r.stage_us[4],
                r.gpu_gsps,
                firsts.join(" ")
            )
            .map_err(io)?;
        }
    }
    if !opts.e2e_chunks.is_empty() {
        writeln!(
            out,
            "\n(e) whole backend at {} channels against frame size",
            opts.variant_channels
        )
        .map_err(io)?;
        writeln!(
            out,
            "{:>14} {:>10} {:>11}",
            "Msample/frame", "MiB/frame", "Gsps/pol"
        )
        .map_err(io)?;
        for &chunk in &opts.e2e_chunks {
            let o = BenchOptions {
                chunk_samples: chunk,
                ..opts.clone()
            };
            let g = geometry(&o, o.variant_channels);
            let chunks: [Vec<u8>; POLS] =
                std::array::from_fn(|_| random_bytes(&mut rng, g.chunk_bytes()));
            let mut backend = CudaBackend::new(g.input, &[g.output], o.gpu_index)?;
            let (gsps, _) = end_to_end(&mut backend, [&chunks[0], &chunks[1]], o.frames)?;
            let mib = (2 * g.chunk_bytes() + g.output_bytes()) as f64 / (1 << 20) as f64;
            writeln!(
                out,
                "{:>14.1} {:>10.0} {:>11.2}",
                g.chunk_samples() as f64 / 1e6,
                mib,
                gsps
            )
            .map_err(io)?;
        }
    }
    Ok((ceilings, rows))
}

/// (a): the compute stream alone on device-resident data, events between stages.
fn gpu_only(
    backend: &mut CudaBackend,
    chunks: [&[u8]; POLS],
    iterations: usize,
) -> Result<BenchRow> {
    let p = &mut backend.pipeline;
    p.load_for_bench(chunks)?;
    let marks: Vec<StageMarks> = (0..iterations.max(1))
        .map(|_| StageMarks::new(&p.ctx, p.outputs.len()))
        .collect::<Result<_>>()?;
    // Warm-up: first launches load code and fill caches.
    for i in 0..p.slots() {
        p.enqueue_bench_frame(i, None)?;
    }
    // Consecutive frames from the ring's start: one in ring_frames copies its overlap.
    for (i, m) in marks.iter().enumerate() {
        p.enqueue_bench_frame(i, Some(m))?;
    }
    p.compute
        .synchronize()
        .map_err(driver("running the GPU-only pass"))?;
    let (mut copies, mut frames) = (Vec::new(), Vec::new());
    // FIR, FFT, post-processing: between consecutive marks.
    let mut stages: [Vec<f64>; 3] = Default::default();
    for (i, m) in marks.iter().enumerate() {
        if p.bench_frame_copies(i) {
            copies.push(elapsed_ms(&m.0[0], &m.0[1])? * 1e3);
        }
        for (s, times) in stages.iter_mut().enumerate() {
            times.push(elapsed_ms(&m.0[s + 1], &m.0[s + 2])? * 1e3);
        }
        frames.push(elapsed_ms(&m.0[1], &m.0[4])? * 1e3);
    }
    // The overlap copy is amortised over the ring's frames; the rest is the median frame.
    let overlap = median(copies) / p.ring_frames() as f64;
    let [fir, fft, post] = stages.map(median);
    let stage_us = [overlap, fir, fft, post, overlap + median(frames)];
    let mut output_us = Vec::with_capacity(p.outputs.len());
    for k in 0..p.outputs.len() {
        let mut times: [Vec<f64>; 3] = Default::default();
        for m in &marks {
            let ev = &m.1[k];
            for (s, t) in times.iter_mut().enumerate() {
                t.push(elapsed_ms(&ev[s], &ev[s + 1])? * 1e3);
            }
        }
        output_us.push(times.map(median));
    }
    let stage_bytes = p.stage_bytes();
    let samples = p.chunk_samples() as f64;
    Ok(BenchRow {
        channels: p.outputs[0].geometry.output.channels,
        stage_us,
        output_us,
        stage_bytes,
        gpu_gsps: samples / stage_us[4] * 1e-3,
        gpu_gbps: stage_bytes.iter().sum::<f64>() / stage_us[4] * 1e-3,
        ..Default::default()
    })
}

/// (b): the whole backend fed from pinned frames, `max_in_flight` frames in flight.
/// Returns (Gsample/s per pol, [min, median, max] ms between consecutive frames coming back).
fn end_to_end(
    backend: &mut CudaBackend,
    chunks: [&[u8]; POLS],
    frames: usize,
) -> Result<(f64, [f64; 3])> {
    let depth = backend.max_in_flight();
    let samples = backend.input().chunk_samples;
    let mut free = Vec::with_capacity(depth);
    for _ in 0..depth {
        let mut f = backend.alloc_frame()?;
        for (chunk, src) in f.input.chunk.iter_mut().zip(chunks) {
            chunk.copy_from_slice(src);
        }
        for (k, out) in f.outputs.iter_mut().enumerate() {
            nominal_delays(&backend.channelisation(k), out);
        }
        free.push(f);
    }
    let warm = depth;
    let mut t_start = None;
    let mut last = Instant::now();
    let mut intervals = Vec::with_capacity(frames);
    let mut done = 0usize;
    let mut submitted = 0usize;
    while done < warm + frames {
        while submitted < warm + frames {
            let Some(f) = free.pop() else { break };
            backend.submit(f)?;
            submitted += 1;
        }
        let f = backend
            .wait()?
            .ok_or_else(|| BackendError::Device("no frame in flight".into()))?;
        done += 1;
        let now = Instant::now();
        if done > warm {
            intervals.push((now - last).as_secs_f64() * 1e3);
        }
        last = now;
        if done == warm {
            t_start = Some(now);
        }
        free.push(f);
    }
    let secs = t_start
        .map(|t| t.elapsed().as_secs_f64())
        .unwrap_or(f64::NAN);
    intervals.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| {
        intervals
            .get(((intervals.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Ok((
        (frames * samples) as f64 / secs * 1e-9,
        [pick(0.0), pick(0.5), pick(1.0)],
    ))
}

/// Device copy and PCIe bandwidths, measured now.
fn measure_ceilings(ctx: &std::sync::Arc<CudaContext>) -> Result<Ceilings> {
    const BYTES: usize = 512 << 20;
    const REPS: usize = 8;
    let a = DeviceBuffer::new(ctx, BYTES)?;
    let b = DeviceBuffer::new(ctx, BYTES)?;
    let host_in = PinnedAlloc::new(ctx, BYTES)?;
    let host_out = PinnedAlloc::new(ctx, BYTES)?;
    let s1 = ctx.new_stream().map_err(driver("creating a stream"))?;
    let s2 = ctx.new_stream().map_err(driver("creating a stream"))?;
    let d2d = timed(ctx, &s1, REPS, |s| {
        // SAFETY: two distinct device buffers of BYTES bytes.
        check(
            unsafe { sys::cuMemcpyDtoDAsync_v2(b.ptr(), a.ptr(), BYTES, s.cu_stream()) },
            "device copy",
        )
    })?;
    let d_write = timed(ctx, &s1, REPS, |s| {
        // SAFETY: a device buffer of BYTES bytes. Not zeros: no path may treat them specially.
        check(
            unsafe { sys::cuMemsetD32Async(b.ptr(), 0x5a5a_5a5a, BYTES / 4, s.cu_stream()) },
            "device memset",
        )
    })?;
    let h2d = timed(ctx, &s1, REPS, |s| {
        // SAFETY: pinned and device buffers of BYTES bytes.
        check(
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    a.ptr(),
                    host_in.as_ptr() as *const _,
                    BYTES,
                    s.cu_stream(),
                )
            },
            "host-to-device copy",
        )
    })?;
    let d2h = timed(ctx, &s1, REPS, |s| {
        // SAFETY: pinned and device buffers of BYTES bytes.
        check(
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    host_out.as_ptr() as *mut _,
                    b.ptr(),
                    BYTES,
                    s.cu_stream(),
                )
            },
            "device-to-host copy",
        )
    })?;
    // Both at once: each direction on its own stream, timed by its own events.
    let (e0, e1, e2, e3) = (
        timing_event(ctx)?,
        timing_event(ctx)?,
        timing_event(ctx)?,
        timing_event(ctx)?,
    );
    let start = timing_event(ctx)?;
    start.record(&s1).map_err(driver("recording"))?;
    s2.wait(&start).map_err(driver("ordering"))?;
    e0.record(&s1).map_err(driver("recording"))?;
    e2.record(&s2).map_err(driver("recording"))?;
    for _ in 0..REPS {
        // SAFETY: as above; the two directions touch different buffers.
        unsafe {
            check(
                sys::cuMemcpyHtoDAsync_v2(
                    a.ptr(),
                    host_in.as_ptr() as *const _,
                    BYTES,
                    s1.cu_stream(),
                ),
                "host-to-device copy",
            )?;
            check(
                sys::cuMemcpyDtoHAsync_v2(
                    host_out.as_ptr() as *mut _,
                    b.ptr(),
                    BYTES,
                    s2.cu_stream(),
                ),
                "device-to-host copy",
            )?;
        }
    }
    e1.record(&s1).map_err(driver("recording"))?;
    e3.record(&s2).map_err(driver("recording"))?;
    let gb = (REPS * BYTES) as f64 * 1e-9;
    let both = (
        gb / (elapsed_ms(&e0, &e1)? * 1e-3),
        gb / (elapsed_ms(&e2, &e3)? * 1e-3),
    );
    Ok(Ceilings {
        d2d: 2.0 * d2d,
        d_write,
        h2d,
        d2h,
        both,
    })
}

/// GB/s of `reps` runs of `op` (each moving 512 MiB one way) on `stream`, after one warm-up.
fn timed(
    ctx: &std::sync::Arc<CudaContext>,
    stream: &std::sync::Arc<CudaStream>,
    reps: usize,
    op: impl Fn(&CudaStream) -> Result<()>,
) -> Result<f64> {
    op(stream)?;
    let (a, b) = (timing_event(ctx)?, timing_event(ctx)?);
    a.record(stream).map_err(driver("recording"))?;
    for _ in 0..reps {
        op(stream)?;
    }
    b.record(stream).map_err(driver("recording"))?;
    Ok((reps * (512 << 20)) as f64 * 1e-9 / (elapsed_ms(&a, &b)? * 1e-3))
}

fn report(
    opts: &BenchOptions,
    c: &Ceilings,
    rows: &[BenchRow],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    writeln!(
        out,
        "\n(a) GPU only, {} taps, {}-bit, ~{} Msample per pol per frame, median of {} (µs per frame)",
        opts.taps,
        opts.sample_bits,
        opts.chunk_samples >> 20,
        opts.iterations
    )?;
    writeln!(
        out,
        "{:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>8}",
        "channels", "overlap", "fir", "fft", "post", "total", "Gsps/pol", "GB/s", "% copy"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>9.0} {:>7.0}%",
            r.channels,
            r.stage_us[0],
            r.stage_us[1],
            r.stage_us[2],
            r.stage_us[3],
            r.stage_us[4],
            r.gpu_gsps,
            r.gpu_gbps,
            100.0 * r.gpu_gbps / c.d2d
        )?;
    }
    if !opts.narrowband.is_empty() {
        writeln!(
            out,
            "    per output (µs, on its own stream: outputs overlap, so these do not add up to the \
             total): first stage (wideband FIR; narrowband DDC + FIR) / fft / post:"
        )?;
        for r in rows {
            let names = std::iter::once(format!("wideband {}", r.channels)).chain(
                opts.narrowband
                    .iter()
                    .map(|(n, d)| format!("narrowband {n} D {d}")),
            );
            for (name, t) in names.zip(&r.output_us) {
                writeln!(
                    out,
                    "{:>28} {:>9.1} {:>9.1} {:>9.1}",
                    name, t[0], t[1], t[2]
                )?;
            }
        }
    }
    writeln!(out, "    per-kernel GB/s (fir / fft / post):")?;
    for r in rows {
        let bw = |i: usize| r.stage_bytes[i] / r.stage_us[i] * 1e-3;
        writeln!(
            out,
            "{:>8} {:>9.0} {:>9.0} {:>9.0}",
            r.channels,
            bw(1),
            bw(2),
            bw(3)
        )?;
    }
    // PCIe bound: 2 pols x bits/8 bytes in and 2 bytes out per sample per pol. The link is full
    // duplex, so each direction is bounded by its own rate with both busy (docs/performance.md:
    // R <= host-to-device / input bytes); the slower of the two decides.
    let in_per = POLS as f64 * opts.sample_bits as f64 / 8.0;
    let out_per = POLS as f64;
    let bound = (c.both.0 / in_per).min(c.both.1 / out_per);
    writeln!(
        out,
        "\n(b) whole backend from pinned memory through PCIe ({} frames in flight); PCIe bound {:.1} Gsps/pol (min of {:.1} GB/s in / {:.2} B and {:.1} GB/s out / {:.0} B per sample, both directions busy)",
        super::IN_FLIGHT,
        bound,
        c.both.0,
        in_per,
        c.both.1,
        out_per
    )?;
    writeln!(
        out,
        "{:>8} {:>11} {:>10} {:>10} {:>8}   frame ms min/med/max",
        "channels", "Gsps/pol", "in GB/s", "out GB/s", "% bound"
    )?;
    for r in rows {
        let [lo, med, hi] = r.e2e_interval_ms;
        writeln!(
            out,
            "{:>8} {:>11.2} {:>10.1} {:>10.1} {:>7.0}%   {:.2}/{:.2}/{:.2}",
            r.channels,
            r.e2e_gsps,
            r.e2e_gsps * in_per,
            r.e2e_gsps * 2.0,
            100.0 * r.e2e_gsps / bound,
            lo,
            med,
            hi
        )?;
    }
    writeln!(out, "\n(c) start-up (ms) and device memory (MiB)")?;
    writeln!(
        out,
        "{:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9}",
        "channels", "new()", "nvrtc", "load", "plan", "alloc", "device", "fft work", "regs f/p"
    )?;
    for r in rows {
        let s = &r.startup;
        writeln!(
            out,
            "{:>8} {:>8.0} {:>8.0} {:>8.1} {:>8.1} {:>8.0} {:>10.0} {:>9.0} {:>5}/{}",
            r.channels,
            r.startup_ms,
            s.compile.nvrtc_ms,
            s.compile.load_ms,
            s.fft_plan_ms,
            s.alloc_ms,
            mib(s.device_bytes),
            mib(s.fft_work_bytes),
            s.fir_registers.unwrap_or(-1),
            s.postproc_registers.unwrap_or(-1)
        )?;
    }
    Ok(())
}

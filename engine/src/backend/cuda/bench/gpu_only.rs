//! Table (a): the compute stream alone on device-resident data, events between stages.

use std::io::Write;

use super::timing::{elapsed_ms, median};
use super::{BenchOptions, BenchRow, Ceilings};
use crate::backend::cuda::device::driver;
use crate::backend::cuda::pipeline::StageMarks;
use crate::backend::cuda::CudaBackend;
use crate::backend::{Result, POLS};

/// (a): the compute stream alone on device-resident data, events between stages.
pub(super) fn gpu_only(
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

/// Writes table (a): per-stage times, throughput and bandwidth; per output where there are
/// narrowband outputs; per-kernel bandwidth.
pub(super) fn write_table(
    opts: &BenchOptions,
    c: &Ceilings,
    rows: &[BenchRow],
    out: &mut dyn Write,
) -> std::io::Result<()> {
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
                    .map(|nb| format!("narrowband {}", nb.label())),
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
    Ok(())
}

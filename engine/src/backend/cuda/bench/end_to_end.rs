//! Tables (b) and (e): the whole backend fed from pinned frames through PCIe.

use std::io::Write;
use std::time::Instant;

use super::options::geometry;
use super::{random_bytes, report_error, BenchOptions, BenchRow, Ceilings};
use crate::backend::cuda::pipeline::nominal_delays;
use crate::backend::cuda::{CudaBackend, IN_FLIGHT};
use crate::backend::{Backend, BackendError, Result, POLS};

/// (b): the whole backend fed from pinned frames, `max_in_flight` frames in flight.
/// Returns (Gsample/s per pol, [min, median, max] ms between consecutive frames coming back).
pub(super) fn end_to_end(
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

/// Writes table (b): throughput against the PCIe bound, and the time between frames.
pub(super) fn write_table(
    opts: &BenchOptions,
    c: &Ceilings,
    rows: &[BenchRow],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    // PCIe bound: 2 pols x bits/8 bytes in and 2 bytes out per sample per pol. The link is full
    // duplex, so each direction is bounded by its own rate with both busy (docs/performance.md:
    // R <= host-to-device / input bytes); the slower of the two decides.
    let in_per = POLS as f64 * opts.sample_bits as f64 / 8.0;
    let out_per = POLS as f64;
    let bound = (c.both.0 / in_per).min(c.both.1 / out_per);
    writeln!(
        out,
        "\n(b) whole backend from pinned memory through PCIe ({} frames in flight); PCIe bound {:.1} Gsps/pol (min of {:.1} GB/s in / {:.2} B and {:.1} GB/s out / {:.0} B per sample, both directions busy)",
        IN_FLIGHT,
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
    Ok(())
}

/// Table (e): the whole backend at `variant_channels` against frame size.
pub(super) fn frame_sizes(opts: &BenchOptions, rng: &mut u64, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "\n(e) whole backend at {} channels against frame size",
        opts.variant_channels
    )
    .map_err(report_error)?;
    writeln!(
        out,
        "{:>14} {:>10} {:>11}",
        "Msample/frame", "MiB/frame", "Gsps/pol"
    )
    .map_err(report_error)?;
    for &chunk in &opts.e2e_chunks {
        let o = BenchOptions {
            chunk_samples: chunk,
            ..opts.clone()
        };
        let g = geometry(&o, o.variant_channels);
        let chunks: [Vec<u8>; POLS] = std::array::from_fn(|_| random_bytes(rng, g.chunk_bytes()));
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
        .map_err(report_error)?;
    }
    Ok(())
}

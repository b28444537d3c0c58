//! The CUDA backend's benchmark: GPU-only kernel times and throughput, the whole backend fed
//! through PCIe from pinned memory, and start-up costs, each beside the ceiling measured in the same
//! run (device-to-device copy; host-to-device, device-to-host and both at once).
//!
//! Modules: `options` (what to measure, and the geometries it makes), `ceilings` (device copy,
//! device write, PCIe), `gpu_only` (table (a)), `end_to_end` (tables (b) and (e)), `startup`
//! (table (c)), `variants` (tables (d) and (f)).

mod ceilings;
mod end_to_end;
mod gpu_only;
mod options;
mod startup;
mod timing;
mod variants;

use std::io::Write;
use std::time::Instant;

use crate::backend::cuda::CudaBackend;
use crate::backend::{BackendError, Result, POLS};
use options::{narrowband_label, output_set, wideband_kernels};

pub use ceilings::Ceilings;
pub use options::BenchOptions;

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
    pub startup: crate::backend::cuda::Startup,
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

/// The error of a report that could not be written.
fn report_error(e: std::io::Error) -> BackendError {
    BackendError::Device(format!("writing the report: {e}"))
}

/// Runs the benchmark, writing tables to `out` as it goes.
pub fn run(opts: &BenchOptions, out: &mut dyn Write) -> Result<(Ceilings, Vec<BenchRow>)> {
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
            .map_err(report_error)?;
            ceilings = ceilings::measure(&backend.pipeline.ctx)?;
            writeln!(
                out,
                "ceilings: device copy {:.0} GB/s (read + write), device write {:.0} GB/s; host-to-device {:.1} GB/s, device-to-host {:.1} GB/s, both at once {:.1} + {:.1} GB/s",
                ceilings.d2d, ceilings.d_write, ceilings.h2d, ceilings.d2h, ceilings.both.0, ceilings.both.1
            )
            .map_err(report_error)?;
        }
        let chunks: [Vec<u8>; POLS] =
            std::array::from_fn(|_| random_bytes(&mut rng, g.chunk_bytes()));
        let mut row = gpu_only::gpu_only(&mut backend, [&chunks[0], &chunks[1]], opts.iterations)?;
        (row.e2e_gsps, row.e2e_interval_ms) =
            end_to_end::end_to_end(&mut backend, [&chunks[0], &chunks[1]], opts.frames)?;
        row.startup_ms = startup_ms;
        row.startup = backend.startup();
        rows.push(row);
        drop(backend);
    }
    report(opts, &ceilings, &rows, out).map_err(report_error)?;
    if !opts.variants.is_empty() {
        variants::launch_shapes(opts, &mut rng, out)?;
    }
    if !opts.ddc_variants.is_empty() && !opts.narrowband.is_empty() {
        variants::ddc_variants(opts, &mut rng, out)?;
    }
    if !opts.e2e_chunks.is_empty() {
        end_to_end::frame_sizes(opts, &mut rng, out)?;
    }
    Ok((ceilings, rows))
}

/// Tables (a) to (c).
fn report(
    opts: &BenchOptions,
    c: &Ceilings,
    rows: &[BenchRow],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    gpu_only::write_table(opts, c, rows, out)?;
    end_to_end::write_table(opts, c, rows, out)?;
    startup::write_table(rows, out)
}

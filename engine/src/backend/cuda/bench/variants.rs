//! Tables (d) and (f): GPU-only times of other launch choices.

use std::io::Write;

use super::gpu_only::gpu_only;
use super::options::{geometry, narrowband_label, output_set};
use super::{random_bytes, report_error, BenchOptions};
use crate::backend::cuda::{CudaBackend, Tuning};
use crate::backend::{Result, POLS};

/// Table (d): launch shapes of the wideband kernels at `variant_channels`.
pub(super) fn launch_shapes(opts: &BenchOptions, rng: &mut u64, out: &mut dyn Write) -> Result<()> {
    let g = geometry(opts, opts.variant_channels);
    let chunks: [Vec<u8>; POLS] = std::array::from_fn(|_| random_bytes(rng, g.chunk_bytes()));
    writeln!(
        out,
        "\n(d) launch shapes at {} channels (µs per frame)",
        g.output.channels
    )
    .map_err(report_error)?;
    writeln!(
        out,
        "{:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>11}",
        "batch", "block", "rows", "fir", "post", "total", "Gsps/pol"
    )
    .map_err(report_error)?;
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
        .map_err(report_error)?;
    }
    Ok(())
}

/// Table (f): the narrowband set's variants (serial outputs, DDC block shapes, the FMA DDC) at
/// `variant_channels`.
pub(super) fn ddc_variants(opts: &BenchOptions, rng: &mut u64, out: &mut dyn Write) -> Result<()> {
    let set = output_set(opts, opts.variant_channels);
    let chunks: [Vec<u8>; POLS] = std::array::from_fn(|_| random_bytes(rng, set[0].chunk_bytes()));
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
    .map_err(report_error)?;
    writeln!(
        out,
        "{:>8} {:>9} {:>11}  first stages",
        "variant", "total", "Gsps/pol"
    )
    .map_err(report_error)?;
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
        .map_err(report_error)?;
    }
    Ok(())
}

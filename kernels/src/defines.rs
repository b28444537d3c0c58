//! The `#define`s a configuration produces: every loop bound and index the kernels take as a
//! compile-time constant, in the order the module's text lists them.

use crate::launch::{DDC_BLOCK, DDC_TILE, FIR_TMA_WORDS, NB_FIR_RUN, UNZIP};
use crate::Config;

/// A `#define`'s name and value.
pub(crate) type Define = (&'static str, String);

/// The `#define`s of `cfg`'s module: those every module has, then the two wideband passes' where
/// it runs them.
pub(crate) fn module(cfg: &Config) -> Vec<Define> {
    let mut defines = vec![
        ("CHANNELS", cfg.channels.to_string()),
        ("TAPS", cfg.taps.to_string()),
        ("SAMPLE_BITS", cfg.sample_bits.to_string()),
        ("UNZIP", UNZIP.to_string()),
        ("SPECTRA_PER_HEAP", cfg.spectra_per_heap.to_string()),
        ("FIR_BLOCK", cfg.fir_block().to_string()),
        ("FIR_BATCH", cfg.tuning.fir_batch.to_string()),
        ("PP_ROWS", cfg.tuning.postproc_rows.to_string()),
        ("OUT_BITS", cfg.output_bits.to_string()),
        ("DITHER", u32::from(cfg.dither).to_string()),
        ("DECIMATION", cfg.decimation.to_string()),
        ("DDC_TAPS", cfg.ddc_taps.to_string()),
        ("DDC_OUTPUTS", cfg.tuning.ddc_outputs.to_string()),
        ("DDC_BLOCK", DDC_BLOCK.to_string()),
        ("DDC_TILE", DDC_TILE.to_string()),
        ("NB_POINTS", cfg.nb_points.to_string()),
        ("NB_UNZIP", cfg.nb_unzip().to_string()),
        ("NB_RUN", NB_FIR_RUN.to_string()),
    ];
    if cfg.fused() {
        defines.extend(fused(cfg));
    }
    defines
}

/// The two wideband passes' `#define`s (fused.cu).
fn fused(cfg: &Config) -> [Define; 16] {
    let (r, a) = cfg.fused_split();
    [
        ("F_R", r.to_string()),
        ("F_A", a.to_string()),
        ("F_C", cfg.fused_columns().to_string()),
        ("F_SB", cfg.fused_post_spectra().0.to_string()),
        ("F_M", cfg.fused_post_spectra().1.to_string()),
        ("F2_THREADS", cfg.fused_post_threads().to_string()),
        ("ROW_HALF", u32::from(cfg.tuning.half_rows).to_string()),
        (
            "FIR_WORD_STEPS",
            u32::from(cfg.fused_fir_word_steps()).to_string(),
        ),
        ("FIR_AHEAD", cfg.fused_fir_ahead().to_string()),
        ("FIR_TMA", u32::from(cfg.fused_fir_tma()).to_string()),
        ("FIR_TMA_WORDS", FIR_TMA_WORDS.to_string()),
        ("POST_PREFETCH", cfg.fused_post_prefetch().to_string()),
        (
            "POST_ROW_SYNC",
            u32::from(cfg.tuning.fused_post_row_sync).to_string(),
        ),
        ("POST_GATHER", cfg.fused_post_gather().to_string()),
        ("POST_AHEAD", u32::from(cfg.fused_post_ahead()).to_string()),
        ("POST_EARLY", cfg.fused_post_early().to_string()),
    ]
}

/// The `#define`s of the `ddc_set` module for `outputs`, of which `first` is the first: the
/// input's sample width and the tuning are taken from it.
pub(crate) fn ddc_set(first: &Config, outputs: &[&Config]) -> Vec<Define> {
    vec![
        ("SAMPLE_BITS", first.sample_bits.to_string()),
        ("UNZIP", UNZIP.to_string()),
        ("DDC_SET_N", outputs.len().to_string()),
        ("DDC_MMA_WARPS", first.tuning.ddc_mma_warps.to_string()),
        ("DDC_SET_SPAN", first.tuning.ddc_set_span.to_string()),
        ("DDC_SET_CASES", ddc_set_cases(outputs)),
        (
            "DDC_SET_RAW",
            outputs
                .iter()
                .map(|c| c.mma_raw_words())
                .max()
                .unwrap_or(0)
                .to_string(),
        ),
    ]
}

/// The `switch` cases by which a `ddc_set` block picks its output's DDC.
fn ddc_set_cases(outputs: &[&Config]) -> String {
    // Outputs of one decimation and filter length go in pairs: a pair shares its A fragments.
    let shape = |c: &Config| (c.decimation, c.taps_per_phase());
    let mut partner: Vec<Option<usize>> = vec![None; outputs.len()];
    let mut paired = vec![false; outputs.len()];
    for k in 0..outputs.len() {
        if paired[k] {
            continue;
        }
        if let Some(j) =
            (k + 1..outputs.len()).find(|&j| !paired[j] && shape(outputs[j]) == shape(outputs[k]))
        {
            (partner[k], paired[j]) = (Some(j), true);
        }
    }
    outputs
        .iter()
        .enumerate()
        .map(|(k, c)| match (paired[k], partner[k]) {
            (true, _) => format!("case {k}: break; "),
            (false, j) => format!(
                "case {k}: ddc_block<{}, {}, {k}, {}>(raw, xs, stretch, pol, set); break; ",
                c.decimation,
                c.taps_per_phase(),
                j.map_or(-1, |j| j as i64)
            ),
        })
        .collect()
}

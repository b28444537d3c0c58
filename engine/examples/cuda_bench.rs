//! Runs the CUDA backend's benchmark (`fengine::backend::cuda::bench`) until the CLI has
//! `fengine bench --backend cuda`.
//!
//!     cargo run --release -p fengine --example cuda_bench -- [channels,...] [taps] [bits] \
//!         [output bits: 8|4] [dither: 0|1] [narrowband outputs: CHANNELS:D[:PASS],...]
//!
//! A narrowband output CHANNELS:8:PASS is one without discard, PASS its pass band's fraction of
//! the band (8192:8:0.598 is katgpucbf's VLBI case).

use fengine::backend::cuda::bench::{run, BenchOptions};
use fengine::backend::cuda::Tuning;

fn main() {
    let mut opts = BenchOptions::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(list) = args.first() {
        opts.channels = list.split(',').filter_map(|c| c.parse().ok()).collect();
    }
    if let Some(t) = args.get(1).and_then(|t| t.parse().ok()) {
        opts.taps = t;
    }
    if let Some(b) = args.get(2).and_then(|b| b.parse().ok()) {
        opts.sample_bits = b;
    }
    if let Some(b) = args.get(3).and_then(|b| b.parse().ok()) {
        opts.output_bits = b;
    }
    if let Some(d) = args.get(4) {
        opts.dither = d == "1";
    }
    if let Some(list) = args.get(5) {
        opts.narrowband = match list.split(',').map(str::parse).collect() {
            Ok(v) => v,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        };
    }
    // FENGINE_BENCH_VARIANTS=1 also compares launch shapes at 32768 channels.
    if std::env::var_os("FENGINE_BENCH_VARIANTS").is_some() {
        let t = |fir_batch, fir_block, postproc_rows| Tuning {
            fir_batch,
            fir_block,
            postproc_rows,
            ..Tuning::default()
        };
        opts.variants = vec![
            t(16, 128, 4),
            t(8, 128, 4),
            t(24, 128, 4),
            t(32, 128, 4),
            t(16, 64, 4),
            t(16, 128, 8),
            t(16, 128, 2),
        ];
    }
    // FENGINE_BENCH_DDC=5,7,9 also compares the DDC on the tensor cores with the FMA one at 5, 7 and
    // 9 outputs per thread, for the narrowband set.
    if let Ok(list) = std::env::var("FENGINE_BENCH_DDC") {
        opts.ddc_variants = list.split(',').filter_map(|c| c.parse().ok()).collect();
    }
    // FENGINE_BENCH_SERIAL=1 runs every output on the one compute stream in (a) to (c).
    if std::env::var_os("FENGINE_BENCH_SERIAL").is_some() {
        opts.tuning.concurrent_outputs = false;
    }
    // FENGINE_BENCH_THREE_PASS=1 runs the wideband output in three passes (pfb_fir, cuFFT,
    // postproc), the fallback, rather than two (fused_fir, fused_post).
    if std::env::var_os("FENGINE_BENCH_THREE_PASS").is_some() {
        opts.tuning.fused = false;
    }
    // FENGINE_BENCH_HALF=1 keeps the two passes' rows in float16, at every size from 1024
    // channels (`--fft-precision half`).
    if std::env::var_os("FENGINE_BENCH_HALF").is_some() {
        opts.tuning.half_rows = true;
    }
    // FENGINE_BENCH_CHUNK=128 runs the two passes in chunks of 128 spectra.
    if let Some(k) = env_number("FENGINE_BENCH_CHUNK") {
        opts.tuning.fused_chunk = k;
    }
    // FENGINE_BENCH_POST_GATHER=4: fused_post reads 4 channels' operands of a row together, before
    // it stores any of their values (unset: 8, 4 or 1 by A).
    if let Some(k) = env_number("FENGINE_BENCH_POST_GATHER") {
        opts.tuning.fused_post_gather = k;
    }
    // FENGINE_BENCH_POST_AHEAD=0 or 1: and the next ones' before it works on those (unset: below
    // A = 512).
    if let Some(k) = env_number("FENGINE_BENCH_POST_AHEAD") {
        opts.tuning.fused_post_ahead = Some(k != 0);
    }
    // FENGINE_BENCH_POST_EARLY=8: fused_post issues 8 of a step's 16 row loads during the step
    // before, ahead of its post-processing (unset: 0 to 16 by A and the rows' precision).
    if let Some(k) = env_number("FENGINE_BENCH_POST_EARLY") {
        opts.tuning.fused_post_early = Some(k);
    }
    // FENGINE_BENCH_FIR_SPECTRA=64: fused_fir blocks of 64 spectra.
    if let Some(k) = env_number("FENGINE_BENCH_FIR_SPECTRA") {
        opts.tuning.fused_fir_spectra = k;
    }
    // FENGINE_BENCH_TILE=16384: fused_post's tile of 16384 values.
    if let Some(k) = env_number("FENGINE_BENCH_TILE") {
        opts.tuning.fused_tile = k;
    }
    // FENGINE_BENCH_MAX_R=64: the two passes' split takes up to 64 rows (A = 1024 at 65536).
    if let Some(k) = env_number("FENGINE_BENCH_MAX_R") {
        opts.tuning.fused_max_r = k;
    }
    // FENGINE_BENCH_MIN_R=32: the two passes' split takes at least 32 rows where A stays >= 64
    // (A = 128 at 4096 channels, 512 at 16384).
    if let Some(k) = env_number("FENGINE_BENCH_MIN_R") {
        opts.tuning.fused_min_r = k;
    }
    // FENGINE_BENCH_FIR_COLUMNS=8: fused_fir blocks of 8 columns a group.
    if let Some(k) = env_number("FENGINE_BENCH_FIR_COLUMNS") {
        opts.tuning.fused_fir_columns = k;
    }
    // FENGINE_BENCH_WORD_STEPS=0 or 1: a sliding fused_fir batch loads each pair from its own
    // offset, or at word steps from one (unset: word steps at R = 16 only).
    if let Some(k) = env_number("FENGINE_BENCH_WORD_STEPS") {
        opts.tuning.fused_fir_word_steps = Some(k != 0);
    }
    // FENGINE_BENCH_FIR_AHEAD=0..16: a sliding fused_fir batch's first that many sample pairs
    // are loaded while the batch before is transformed (unset: 4 at R = 16 where tensor copies do
    // not take the batch, else 0).
    if let Some(k) = env_number("FENGINE_BENCH_FIR_AHEAD") {
        opts.tuning.fused_fir_ahead = Some(k);
    }
    // FENGINE_BENCH_FIR_TMA=0: a sliding fused_fir batch's samples by loads of each thread, not
    // by one tensor copy a block (which needs sm_90 and no pairs ahead: by default R >= 32, and
    // R = 16 from A = 512 or with float16 rows).
    if let Some(k) = env_number("FENGINE_BENCH_FIR_TMA") {
        opts.tuning.fused_fir_tma = k != 0;
    }
    // FENGINE_BENCH_POST_PREFETCH=0..4: fused_post has each step's rows prefetched into L2 that
    // many of its steps ahead (0: none).
    if let Some(k) = env_number("FENGINE_BENCH_POST_PREFETCH") {
        opts.tuning.fused_post_prefetch = Some(k);
    }
    // FENGINE_BENCH_ROW_SYNC=0: every fused_post barrier its group's, not each transform's own
    // between its FFT stages (version 15).
    if let Some(k) = env_number("FENGINE_BENCH_ROW_SYNC") {
        opts.tuning.fused_post_row_sync = k != 0;
    }
    // FENGINE_BENCH_FRAMES=1 also repeats the PCIe test for several frame sizes.
    if std::env::var_os("FENGINE_BENCH_FRAMES").is_some() {
        opts.e2e_chunks = vec![1 << 24, 1 << 25, 1 << 26, 1 << 27];
    }
    if let Err(e) = run(&opts, &mut std::io::stdout()) {
        eprintln!("cuda_bench: {e}");
        std::process::exit(1);
    }
}

/// The number an environment variable holds, if it is set to one.
fn env_number(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.parse().ok()
}

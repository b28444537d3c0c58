//! The demo's engine and dsim driven over katcp: the pipeline in containers (dsim and the CPU
//! engine with `--katcp 0.0.0.0:7147`, as compose runs them), and `harness watch` in a container
//! of its own given `katcp://` URLs for both, the engine's counters from its HTTP front's
//! Prometheus metrics (katgpucbf's names), its output's geometry from the command line (a katcp
//! engine has no status) and the tone from `--tone` (a katcp dsim does not say it). The run must
//! be as clean as the demo's over HTTP: no gap, heaps at the rate, the tone in its channel in
//! every interval, no counter moved.

use acceptance::{
    at_rate, Pipeline, Session, CHANNELS, OUTPUT, OUTPUT_STEP, RATE, SPECTRA_PER_HEAP, SUBSTREAMS,
    TAPS, TONE_HZ,
};
use anyhow::Result;

const SECONDS: u32 = 20;

#[test]
fn the_harness_drives_the_demos_engine_and_dsim_over_katcp() -> Result<()> {
    let Some(session) = Session::start("katcp") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let (dsim, engine, metrics) = (p.dsim_katcp_url(), p.engine_katcp_url(), p.engine_url());
    let (channels, taps, spectra) = (
        CHANNELS.to_string(),
        TAPS.to_string(),
        SPECTRA_PER_HEAP.to_string(),
    );
    let tone = format!("{TONE_HZ}:0.5");
    let w = p
        .start_watch_args(
            "harness-katcp",
            &[
                "--dsim-url",
                &dsim,
                "--engine-url",
                &engine,
                "--engine-metrics-url",
                &metrics,
                "--dst",
                OUTPUT,
                "--channels",
                &channels,
                "--taps",
                &taps,
                "--spectra-per-heap",
                &spectra,
                "--tone",
                &tone,
            ],
            SECONDS,
        )?
        .finish()?;
    let s = &w.summary;
    let ctx = || w.context(&p);
    assert_eq!(w.exit_code, 0, "harness watch over katcp failed: {}", ctx());
    assert_eq!(s["ok"], true, "{}", ctx());
    assert_eq!(w.u64_at("/substreams"), SUBSTREAMS as u64, "{}", ctx());
    for field in ["gaps", "late", "duplicates", "incomplete"] {
        assert_eq!(
            w.u64_at(&format!("/sequence/{field}")),
            0,
            "{field}: {}",
            ctx()
        );
    }
    let expected = SECONDS as f64 * RATE / OUTPUT_STEP as f64 * SUBSTREAMS as f64;
    let heaps = w.u64_at("/heaps") as f64;
    assert!(
        at_rate(heaps, expected, 0.95),
        "{heaps} heaps in {SECONDS} s, expected about {expected:.0}: {}",
        ctx()
    );
    // The tone (RATE/8) in channel n/4, in every interval checked.
    let tone_channel = TONE_HZ * 2.0 * CHANNELS as f64 / RATE;
    let c = &s["content"];
    assert_eq!(
        c["expected_channel"].as_f64(),
        Some(tone_channel),
        "{}",
        ctx()
    );
    let checked = c["checked"].as_u64().unwrap();
    assert!(checked >= SECONDS as u64 - 5, "{}", ctx());
    assert_eq!(c["matched"].as_u64(), Some(checked), "{}", ctx());
    // The engine's counters, read under katgpucbf's names, did not move.
    for counter in ["missing_input", "skipped_output"] {
        assert_eq!(s["engine"][counter].as_f64(), Some(0.0), "{}", ctx());
    }
    println!(
        "over katcp: {heaps} heaps on {SUBSTREAMS} substreams in {:.1} s (expected about \
         {expected:.0}), gaps 0, tone in channel {tone_channel} in {checked}/{checked} intervals",
        s["duration_s"].as_f64().unwrap()
    );
    Ok(())
}

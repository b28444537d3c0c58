//! (1) The demo pipeline (dsim -> engine, CPU backend -> harness watch, the demo's configuration)
//! runs 30 s with zero gaps, at the rate asked for, with the tone in the right channel.

use acceptance::{Pipeline, Session, CHANNELS, OUTPUT_STEP, RATE, SUBSTREAMS, TONE_HZ};
use anyhow::Result;

#[test]
fn demo_runs_30_s_with_zero_gaps_and_the_tone_channel() -> Result<()> {
    let Some(session) = Session::start("demo") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let w = p.start_watch(30)?.finish()?;
    let s = &w.summary;
    let ctx = || w.context(&p);

    assert_eq!(w.exit_code, 0, "harness watch failed: {}", ctx());
    assert_eq!(s["ok"], true, "{}", ctx());
    assert_eq!(w.u64_at("/substreams"), SUBSTREAMS as u64, "{}", ctx());
    for field in [
        "gaps",
        "late",
        "duplicates",
        "misaligned",
        "incomplete",
        "resyncs",
    ] {
        assert_eq!(
            w.u64_at(&format!("/sequence/{field}")),
            0,
            "{field}: {}",
            ctx()
        );
    }
    assert_eq!(w.u64_at("/malformed"), 0, "{}", ctx());
    // 30 s at the rate: every substream gets RATE / OUTPUT_STEP heaps a second.
    let expected = 30.0 * RATE / OUTPUT_STEP as f64 * SUBSTREAMS as f64;
    let heaps = w.u64_at("/heaps") as f64;
    assert!(
        heaps > 0.95 * expected && heaps < 1.05 * expected,
        "{heaps} heaps in 30 s, expected about {expected:.0}: {}",
        ctx()
    );
    let rate = s["sample_rate"].as_f64().unwrap();
    assert!(
        (rate / RATE - 1.0).abs() < 0.03,
        "received {rate} sample/s: {}",
        ctx()
    );

    // The tone: channel TONE_HZ / (RATE / 2n), told by dsim's /status, strongest in every
    // interval checked, on both polarisations.
    let tone_channel = TONE_HZ * 2.0 * CHANNELS as f64 / RATE;
    let c = &s["content"];
    assert_eq!(
        c["expected_channel"].as_f64(),
        Some(tone_channel),
        "{}",
        ctx()
    );
    let checked = c["checked"].as_u64().unwrap();
    assert!(
        checked >= 25,
        "content checked in only {checked} intervals: {}",
        ctx()
    );
    assert_eq!(c["matched"].as_u64(), Some(checked), "{}", ctx());
    for pol in 0..2 {
        assert_eq!(
            c["last_peaks"][pol]["channel"].as_f64(),
            Some(tone_channel),
            "pol{pol}: {}",
            ctx()
        );
    }
    // And the engine agrees: nothing missing on input, nothing skipped on output.
    assert_eq!(
        s["engine"]["missing_input"].as_f64(),
        Some(0.0),
        "{}",
        ctx()
    );
    assert_eq!(
        s["engine"]["skipped_output"].as_f64(),
        Some(0.0),
        "{}",
        ctx()
    );
    println!(
        "demo: {heaps} heaps in {:.1} s, {:.4} Gsample/s, tone in channel {tone_channel} in \
         {checked}/{checked} intervals",
        s["duration_s"].as_f64().unwrap(),
        rate / 1e9
    );
    Ok(())
}

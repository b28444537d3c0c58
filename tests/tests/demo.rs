//! (1) The demo pipeline (dsim -> engine, CPU backend -> harness watch, the demo's configuration:
//! a wideband and a narrowband output, each watched by a harness of its own as compose's `demo`
//! and `demo-nb` watch them) runs 30 s with zero gaps on both outputs, at the rate asked for,
//! with the tone in the channel each output's kind and shape predict.

use acceptance::{
    at_rate, Outputs, Pipeline, Session, Watch, CHANNELS, NB_CENTRE_HZ, NB_CHANNELS, NB_DECIMATION,
    NB_NAME, NB_OUTPUT_STEP, NB_SUBSTREAMS, OUTPUT_STEP, RATE, SUBSTREAMS, TONE_HZ,
};
use anyhow::Result;

/// How long each watch runs (both at once).
const SECONDS: u32 = 30;

#[test]
fn demo_runs_30_s_with_zero_gaps_and_the_tone_channel() -> Result<()> {
    let Some(session) = Session::start("demo") else {
        return Ok(());
    };
    let p = Pipeline::start_with(&session, Outputs::WithNarrowband)?;
    let wide = p.start_watch_output("wideband", SECONDS)?;
    let narrow = p.start_watch_output(NB_NAME, SECONDS)?;
    let (wide, narrow) = (wide.finish()?, narrow.finish()?);

    // Wideband: channel k is centred on k RATE / 2n, so the tone (RATE/8) is in channel n/4.
    check_output(
        &p,
        &wide,
        "wideband",
        SUBSTREAMS,
        OUTPUT_STEP,
        TONE_HZ * 2.0 * CHANNELS as f64 / RATE,
    );
    // Narrowband: channel c is centred on f_c + (c - n/2) RATE / 2Dn (f_c = 2.25 MHz is exactly
    // a mixer word's, 9/64 of RATE), so the tone, RATE/64 below the centre, is in channel n/4;
    // its heaps step 2nD samples, D times a wideband heap of as many channels.
    let nb_width = RATE / (2.0 * NB_DECIMATION as f64 * NB_CHANNELS as f64);
    check_output(
        &p,
        &narrow,
        NB_NAME,
        NB_SUBSTREAMS,
        NB_OUTPUT_STEP,
        NB_CHANNELS as f64 / 2.0 + (TONE_HZ - NB_CENTRE_HZ) / nb_width,
    );
    Ok(())
}

/// One output's watch: clean for its whole length, its heaps at the rate (each of its
/// `substreams` gets RATE / `step` heaps a second), the tone strongest in `tone_channel` in
/// every interval checked on both polarisations, the engine's counters still.
fn check_output(
    p: &Pipeline,
    w: &Watch,
    output: &str,
    substreams: usize,
    step: u64,
    tone_channel: f64,
) {
    let s = &w.summary;
    let ctx = || format!("output {output}: {}", w.context(p));

    assert_eq!(w.exit_code, 0, "harness watch failed: {}", ctx());
    assert_eq!(s["ok"], true, "{}", ctx());
    assert_eq!(s["output"].as_str(), Some(output), "{}", ctx());
    assert_eq!(w.u64_at("/substreams"), substreams as u64, "{}", ctx());
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
    let expected = SECONDS as f64 * RATE / step as f64 * substreams as f64;
    let heaps = w.u64_at("/heaps") as f64;
    assert!(
        at_rate(heaps, expected, 0.95),
        "{heaps} heaps in {SECONDS} s, expected about {expected:.0}: {}",
        ctx()
    );
    let rate = s["sample_rate"].as_f64().unwrap();
    assert!(
        at_rate(rate, RATE, 0.97),
        "received {rate} sample/s: {}",
        ctx()
    );

    // The tone, told by dsim's /status, strongest in every interval checked, on both
    // polarisations.
    let c = &s["content"];
    assert_eq!(
        c["expected_channel"].as_f64(),
        Some(tone_channel),
        "{}",
        ctx()
    );
    let checked = c["checked"].as_u64().unwrap();
    assert!(
        checked >= SECONDS as u64 - 5,
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
    // And the engine agrees: nothing missing on input, nothing of this output skipped.
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
        "demo, output {output}: {heaps} heaps on {substreams} substreams in {:.1} s (expected \
         about {expected:.0}), {:.4} Gsample/s, gaps 0, tone in channel {tone_channel} in \
         {checked}/{checked} intervals",
        s["duration_s"].as_f64().unwrap(),
        rate / 1e9
    );
}

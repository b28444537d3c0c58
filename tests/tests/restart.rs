//! (3) The engine container is restarted mid-stream and its output resumes cleanly. The harness
//! watches throughout: before the stop the stream is clean; the only holes lie between the last
//! heap before the stop and the point where the restarted engine has settled; from there on it
//! is clean again for the rest of the watch. Throughout: no duplicate, late, misaligned or
//! malformed heaps and no resync (the timestamps carry on from the ADC clock, on the same
//! lattice), and the tone in the right channel whenever data flowed.

use std::time::{Duration, Instant};

use acceptance::http::default_output;
use acceptance::{Pipeline, Session, OUTPUT_STEP, RATE, SUBSTREAMS};
use anyhow::Result;

#[test]
fn engine_restart_mid_stream_resumes_cleanly() -> Result<()> {
    let Some(session) = Session::start("restart") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let watch = p.watch_receiving(40)?;
    std::thread::sleep(Duration::from_secs(6));

    // The newest output heap before the stop: holes may start only after it.
    let before = default_output(&p.engine_http()?.engine_status()?)?.last_timestamp;
    let down = Instant::now();
    p.engine.stop_with_timeout(Some(10))?; // SIGTERM, then SIGKILL after 10 s
    std::thread::sleep(Duration::from_secs(2));
    p.engine.start()?;
    // The published port is new after a restart: engine_http() asks again.
    let settled = p.wait_engine_settled(Duration::from_secs(60))?;
    let outage = down.elapsed().as_secs_f64();
    let status = p.engine_http()?.engine_status()?;
    assert!(
        status.uptime_s < outage + 5.0,
        "the engine did not restart: {status:#?}"
    );

    let w = watch.finish()?;
    let s = &w.summary;
    // The restarted engine's own account (input rejects by reason, queues), for a failure.
    let end = p.engine_http()?.engine_status()?;
    let ctx = || {
        format!(
            "last output before the stop {before}, engine settled at {settled}\n{}",
            w.context_with_engine(&p, &end, 45)
        )
    };
    for field in ["late", "duplicates", "misaligned", "resyncs"] {
        assert_eq!(
            w.u64_at(&format!("/sequence/{field}")),
            0,
            "{field}: {}",
            ctx()
        );
    }
    assert_eq!(w.u64_at("/malformed"), 0, "{}", ctx());
    let subs = s["per_substream"].as_array().unwrap();
    assert_eq!(subs.len(), SUBSTREAMS, "{}", ctx());
    let mut hole_s = 0.0;
    for (i, sub) in subs.iter().enumerate() {
        let first = sub["first_timestamp"].as_u64().unwrap();
        let newest = sub["newest_timestamp"].as_u64().unwrap();
        let ranges = sub["missing"].as_array().unwrap();
        assert!(
            !ranges.is_empty(),
            "substream {i}: no hole at all: {}",
            ctx()
        );
        let mut missing = 0;
        for r in ranges {
            let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
            assert!(
                a > before && b <= settled + OUTPUT_STEP,
                "substream {i}: hole [{a}, {b}) outside the restart: {}",
                ctx()
            );
            missing += (b - a) / OUTPUT_STEP;
        }
        let (a, b) = (
            ranges[0][0].as_u64().unwrap(),
            ranges[ranges.len() - 1][1].as_u64().unwrap(),
        );
        hole_s = (b - a) as f64 / RATE;
        assert!(
            first < a,
            "substream {i}: nothing before the stop: {}",
            ctx()
        );
        // Everything else arrived, and a good stretch of it after the restart.
        let span = (newest - first) / OUTPUT_STEP + 1;
        let received = sub["sequence"]["received"].as_u64().unwrap();
        assert_eq!(received, span - missing, "substream {i}: {}", ctx());
        let clean_after = (newest.saturating_sub(settled)) as f64 / RATE;
        assert!(
            clean_after > 10.0,
            "substream {i}: only {clean_after:.1} s after the engine settled: {}",
            ctx()
        );
    }
    // The tone, before and after. The harness judges the strongest channel once a second among
    // the heaps it sampled; in the second the engine stops, and the one it starts sending again,
    // only some substreams may have been sampled, so the tone's channel may be absent: those
    // two intervals may miss the tone. Every other interval must have it in its channel.
    let c = &s["content"];
    let checked = c["checked"].as_u64().unwrap();
    let matched = c["matched"].as_u64().unwrap();
    assert!(checked >= 25, "{}", ctx());
    assert!(
        matched + 2 >= checked,
        "the tone was right in {matched} of {checked}: {}",
        ctx()
    );
    for pol in 0..2 {
        assert_eq!(
            c["last_peaks"][pol]["channel"].as_f64(),
            c["expected_channel"].as_f64(),
            "pol{pol}: {}",
            ctx()
        );
    }
    // The failures: the hole, and at most those two intervals.
    for f in s["failures"].as_array().unwrap() {
        let f = f.as_str().unwrap();
        assert!(
            f.contains("gaps") || f.contains("no tone") || f.contains("not the tone's"),
            "unexpected failure {f:?}: {}",
            ctx()
        );
    }
    println!(
        "restart: engine down and back in {outage:.1} s; the holes span {hole_s:.1} s of stream \
         around it in every substream; clean before and after; tone right in {matched} of \
         {checked} intervals"
    );
    Ok(())
}

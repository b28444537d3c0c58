//! (8) Faults mid-stream, with the harness watching throughout:
//! 1. dsim duplicates, reorders (within two heaps), corrupts and truncates packets of one
//!    polarisation, then the other polarisation falls silent for 10 s and comes back. The engine
//!    counts each fault under its reason, exactly as many as dsim injected; only the corrupted,
//!    truncated and silent heaps are lost, and the engine skips exactly the output heaps that
//!    needed them.
//! 2. dsim's container is restarted: its timestamps jump back to zero. The same engine process
//!    follows the new stream (a resync on each polarisation), and the output is clean again,
//!    with the tone in its channel, for the rest of the watch.
//!
//! Throughout: no duplicate, late or misaligned output heap, nothing malformed, the engine never
//! restarts.

use std::time::{Duration, Instant};

use acceptance::http::default_output;
use acceptance::{
    affected_output_heaps, Pipeline, Session, HEAP_SAMPLES, OUTPUT_STEP, RATE, SUBSTREAMS,
};
use anyhow::{Context, Result};
use fgpu_api::engine::Status;
use serde_json::{json, Value};

/// A pol's reject count for `reason` (an absent reason counts 0).
fn rejected(s: &Status, pol: usize, reason: &str) -> u64 {
    s.input.pols[pol].rejected.get(reason).copied().unwrap_or(0)
}

#[test]
fn faults_and_a_dsim_restart_mid_stream() -> Result<()> {
    let Some(session) = Session::start("mid-stream") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let watch = p.watch_receiving(45)?;
    let engine = p.engine_http()?;
    let before = engine.engine_status()?;
    let since_before = Instant::now();

    // 1. Faults, from 3 s ahead. Heap k has timestamp k * HEAP_SAMPLES.
    let dsim = p.dsim_http()?;
    let now = dsim.get_json("/status")?["timestamp"]
        .as_u64()
        .context("dsim timestamp")?;
    let per_s = (RATE / HEAP_SAMPLES as f64) as u64;
    let k0 = now / HEAP_SAMPLES + 3 * per_s;
    let apart = per_s / 10; // separate output gaps
    let duplicate = [k0, k0 + 40];
    let reorder: Vec<u64> = (k0 + apart..k0 + apart + 40).step_by(4).collect();
    let corrupt = vec![k0 + 2 * apart, k0 + 3 * apart];
    let truncate = vec![k0 + 4 * apart, k0 + 5 * apart, k0 + 5 * apart + 1];
    let silent = [k0 + per_s, k0 + 11 * per_s];
    let reply = dsim.put_json(
        "/faults",
        &json!({
            "pol0": {"duplicate": {"ranges": [duplicate]}, "corrupt": {"heaps": corrupt},
                     "reorder": {"heaps": reorder, "window": 2}, "truncate": {"heaps": truncate}},
            "pol1": {"drop": {"ranges": [silent]}},
        }),
    )?;
    eprintln!("PUT /faults -> {reply}");

    // Until the engine's output is well past the silence.
    let past = (silent[1] + per_s) * HEAP_SAMPLES;
    acceptance::wait_until(Duration::from_secs(40), "output past the faults", || {
        Ok(default_output(&engine.engine_status()?)?.last_timestamp > past)
    })?;
    std::thread::sleep(Duration::from_secs(1));
    let injected = dsim.get_json("/status")?["pols"].clone();
    let faulted = engine.engine_status()?;
    let n = |pol: usize, kind: &str| injected[pol]["faults_injected"][kind].as_u64().unwrap_or(0);
    let ctx = |what: &str| {
        format!(
            "{what}\ndsim: {injected:#}\nengine input: {:#?}",
            faulted.input
        )
    };
    assert_eq!(
        (
            n(0, "duplicated"),
            n(0, "reordered"),
            n(0, "corrupted"),
            n(0, "truncated")
        ),
        (40, reorder.len() as u64, 2, 3),
        "{}",
        ctx("dsim injected")
    );
    let silent_heaps = silent[1] - silent[0];
    assert_eq!(n(1, "dropped"), silent_heaps, "{}", ctx("dsim dropped"));
    for (reason, count) in [
        ("duplicate", 40),
        ("bad_magic", 2),
        ("payload_length_mismatch", 3),
    ] {
        assert_eq!(
            rejected(&faulted, 0, reason) - rejected(&before, 0, reason),
            count,
            "{}",
            ctx(reason)
        );
    }
    for pol in 0..2 {
        assert_eq!(
            rejected(&faulted, pol, "too_old"),
            rejected(&before, pol, "too_old"),
            "{}",
            ctx("nothing reordered was too old")
        );
    }
    let lost0 = faulted.input.pols[0].heaps_missing - before.input.pols[0].heaps_missing;
    let lost1 = faulted.input.pols[1].heaps_missing - before.input.pols[1].heaps_missing;
    assert_eq!(
        (lost0, lost1),
        (5, silent_heaps),
        "{}",
        ctx("heaps missing")
    );
    let mut lost: Vec<u64> = corrupt.iter().chain(&truncate).copied().collect();
    lost.extend(silent[0]..silent[1]);
    let phase = default_output(&faulted)?.last_timestamp % OUTPUT_STEP;
    let expected = affected_output_heaps(&lost, phase).len() * SUBSTREAMS;
    let skipped = default_output(&faulted)?.heaps_skipped - default_output(&before)?.heaps_skipped;
    assert_eq!(skipped, expected as u64, "{}", ctx("output heaps skipped"));
    println!(
        "mid-stream faults: 40 duplicates, 2 corrupt, 3 truncated counted by reason, {} heaps \
         reordered without loss, pol1 silent {silent_heaps} heaps (10 s); {} output heaps \
         skipped as predicted",
        reorder.len(),
        expected / SUBSTREAMS
    );

    // 2. dsim restarted: timestamps from zero.
    let down = Instant::now();
    p.dsim.stop_with_timeout(Some(10))?;
    std::thread::sleep(Duration::from_secs(1));
    p.dsim.start()?;
    let settled = p.wait_engine_settled(Duration::from_secs(40))?;
    let outage = down.elapsed().as_secs_f64();
    assert!(
        settled < past,
        "the engine's output did not jump back with dsim's timestamps: {settled}"
    );

    let w = watch.finish()?;
    let s = &w.summary;
    let end = p.engine_http()?.engine_status()?;
    let ctx = || {
        format!(
            "settled at {settled}\n{}",
            w.context_with_engine(&p, &end, 50)
        )
    };
    assert!(
        end.uptime_s > before.uptime_s + since_before.elapsed().as_secs_f64() - 2.0,
        "the engine restarted: {}",
        ctx()
    );
    for pol in 0..2 {
        assert!(
            end.input.pols[pol].resyncs >= 1,
            "pol {pol} did not follow dsim's new timestamps: {}",
            ctx()
        );
    }
    for field in ["late", "duplicates", "misaligned"] {
        assert_eq!(
            w.u64_at(&format!("/sequence/{field}")),
            0,
            "{field}: {}",
            ctx()
        );
    }
    assert_eq!(w.u64_at("/malformed"), 0, "{}", ctx());
    let subs = s["per_substream"].as_array().context("per_substream")?;
    assert_eq!(subs.len(), SUBSTREAMS, "{}", ctx());
    let mut clean_after = f64::MAX;
    for (i, sub) in subs.iter().enumerate() {
        assert!(
            sub["sequence"]["resyncs"].as_u64() >= Some(1),
            "substream {i}: the harness saw no jump back: {}",
            ctx()
        );
        // Holes are tracked from the resync on: none after the engine settled.
        for r in sub["missing"].as_array().context("missing")? {
            let b = r[1].as_u64().context("hole end")?;
            assert!(
                b <= settled + OUTPUT_STEP,
                "substream {i}: hole {r} after the engine settled: {}",
                ctx()
            );
        }
        let newest = sub["newest_timestamp"].as_u64().context("newest")?;
        clean_after = clean_after.min(newest.saturating_sub(settled) as f64 / RATE);
    }
    assert!(
        clean_after > 10.0,
        "only {clean_after:.1} s of clean stream after the engine settled: {}",
        ctx()
    );
    let c: &Value = &s["content"];
    for pol in 0..2 {
        assert_eq!(
            c["last_peaks"][pol]["channel"].as_f64(),
            c["expected_channel"].as_f64(),
            "pol{pol}: {}",
            ctx()
        );
    }
    println!(
        "mid-stream dsim restart: down and back in {outage:.1} s; the engine followed the new \
         timestamps and gave {clean_after:.1} s of clean stream after settling, the tone in its \
         channel"
    );
    Ok(())
}

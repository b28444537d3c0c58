//! (2) dsim drops a known list of heaps (PUT /faults) and the harness reports exactly those: the
//! output heaps that needed them are the missing ones, in every substream, and nothing else; the
//! engine counts exactly the dropped digitiser heaps as missing input.

use acceptance::{
    affected_output_heaps, Pipeline, Session, HEAP_SAMPLES, OUTPUT_STEP, RATE, SUBSTREAMS,
};
use anyhow::{Context, Result};
use serde_json::json;

#[test]
fn dropped_heaps_are_reported_exactly() -> Result<()> {
    let Some(session) = Session::start("faults") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let dsim = p.dsim_http()?;
    let watch = p.watch_receiving(20)?;

    // Heaps from 3 s ahead: one alone, two adjacent, one near another's output heap, on pol0;
    // one on pol1. Heap k is the one with timestamp k * HEAP_SAMPLES.
    let status = dsim.get_json("/status")?;
    let now = status["timestamp"].as_u64().context("dsim timestamp")?;
    assert_eq!(status["heap_samples"].as_u64(), Some(HEAP_SAMPLES));
    let per_s = (RATE / HEAP_SAMPLES as f64) as u64;
    let k0 = now / HEAP_SAMPLES + 3 * per_s;
    let pol0 = vec![k0, k0 + 3000, k0 + 3001, k0 + 8000, k0 + 8100];
    let pol1 = vec![k0 + 6000];
    let reply = dsim.put_json(
        "/faults",
        &json!({"pol0": {"drop": {"heaps": pol0}}, "pol1": {"drop": {"heaps": pol1}}}),
    )?;
    eprintln!("PUT /faults -> {reply}");

    let w = watch.finish()?;
    let s = &w.summary;
    let ctx = || w.context(&p);

    // dsim dropped each listed heap once.
    let after = dsim.get_json("/status")?;
    for (pol, list) in [(0, &pol0), (1, &pol1)] {
        assert_eq!(
            after["pols"][pol]["faults_injected"]["dropped"].as_u64(),
            Some(list.len() as u64),
            "pol{pol}: {after:#}"
        );
    }

    // The engine saw exactly those digitiser heaps missing.
    let dropped = (pol0.len() + pol1.len()) as f64;
    assert_eq!(
        s["engine"]["missing_input"].as_f64(),
        Some(dropped),
        "{}",
        ctx()
    );

    // The harness: the output heaps that needed a dropped heap, in every substream, and no other.
    let first = s["per_substream"][0]["first_timestamp"]
        .as_u64()
        .context("first_timestamp")?;
    let mut all = pol0.clone();
    all.extend(&pol1);
    let expected = affected_output_heaps(&all, first % OUTPUT_STEP);
    assert!(!expected.is_empty());
    let missing = w.missing_per_substream();
    assert_eq!(missing.len(), SUBSTREAMS, "{}", ctx());
    for (i, m) in missing.iter().enumerate() {
        assert_eq!(
            m,
            &expected,
            "substream {i}: missing output heaps (timestamps) differ from those the dropped \
             digitiser heaps {all:?} feed: {}",
            ctx()
        );
    }
    let gaps = (expected.len() * SUBSTREAMS) as u64;
    assert_eq!(w.u64_at("/sequence/gaps"), gaps, "{}", ctx());
    assert_eq!(
        s["engine"]["skipped_output"].as_f64(),
        Some(gaps as f64),
        "the engine skipped exactly the heaps the harness missed: {}",
        ctx()
    );
    for field in ["late", "duplicates", "misaligned", "incomplete", "resyncs"] {
        assert_eq!(
            w.u64_at(&format!("/sequence/{field}")),
            0,
            "{field}: {}",
            ctx()
        );
    }
    assert_eq!(w.u64_at("/malformed"), 0, "{}", ctx());
    // Only the gaps made it fail.
    assert_eq!(w.exit_code, 1, "{}", ctx());
    let failures = s["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{}", ctx());
    assert!(failures[0].as_str().unwrap().contains("gaps"), "{}", ctx());
    println!(
        "faults: dropped digitiser heaps {all:?} -> {} output heaps missing in each of {} \
         substreams, as predicted",
        expected.len(),
        SUBSTREAMS
    );
    Ok(())
}

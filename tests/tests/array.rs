//! (5) A two-antenna array in containers (CPU backend): two dsims with different tones, two
//! engines (`--feng-id 0/1 --array-size 2`) on the same output groups, `harness watch --engines
//! 2` for 30 s: zero gaps for each engine, each engine's tone in its own channel, and the two
//! engines' heap counters never collide (each heap's counter is katgpucbf's for its engine, and
//! no counter arrived for two heaps).

use acceptance::{
    array_tone_hz, at_rate, Array, Session, ARRAY_RATE, CHANNELS, OUTPUT_STEP, SUBSTREAMS,
};
use anyhow::Result;

#[test]
fn two_antennas_run_30_s_each_engine_clean_with_its_own_tone() -> Result<()> {
    let Some(session) = Session::start("array") else {
        return Ok(());
    };
    let array = Array::start(&session, 2)?;
    let w = array.start_watch(30)?.finish()?;
    let s = &w.summary;
    let ctx = || {
        format!(
            "{:#}\n--- progress ---\n{}\n{}",
            s,
            w.progress_tail(9),
            array.logs()
        )
    };
    assert_eq!(w.exit_code, 0, "harness watch failed: {}", ctx());
    assert_eq!(s["ok"], true, "{}", ctx());
    // Every substream holds a lane per engine.
    assert_eq!(w.u64_at("/substreams"), SUBSTREAMS as u64, "{}", ctx());
    assert_eq!(
        s["per_substream"].as_array().map(Vec::len),
        Some(2 * SUBSTREAMS),
        "{}",
        ctx()
    );
    let engines = s["engines"].as_array().expect("engines in the summary");
    assert_eq!(engines.len(), 2, "{}", ctx());
    // 30 s at the rate: every substream of every engine gets ARRAY_RATE / OUTPUT_STEP heaps a
    // second (up to a tenth more while a backlog drains: `at_rate`).
    let expected_heaps = 30.0 * ARRAY_RATE / OUTPUT_STEP as f64 * SUBSTREAMS as f64;
    let mut channels = Vec::new();
    for (i, e) in engines.iter().enumerate() {
        assert_eq!(e["feng_id"], i, "{}", ctx());
        assert_eq!(e["ok"], true, "engine {i}: {}", ctx());
        for field in [
            "gaps",
            "late",
            "duplicates",
            "misaligned",
            "incomplete",
            "resyncs",
        ] {
            assert_eq!(e["sequence"][field], 0, "engine {i} {field}: {}", ctx());
        }
        assert_eq!(e["malformed"], 0, "engine {i}: {}", ctx());
        let heaps = e["heaps"].as_f64().unwrap();
        assert!(
            at_rate(heaps, expected_heaps, 0.95),
            "engine {i}: {heaps} heaps in 30 s, expected about {expected_heaps:.0}: {}",
            ctx()
        );
        // Its own antenna's tone, strongest in every interval checked, both polarisations.
        let tone_channel = array_tone_hz(i, 2) * 2.0 * CHANNELS as f64 / ARRAY_RATE;
        let c = &e["content"];
        assert_eq!(
            c["expected_channel"].as_f64(),
            Some(tone_channel),
            "{}",
            ctx()
        );
        let checked = c["checked"].as_u64().unwrap();
        assert!(
            checked >= 25,
            "engine {i} checked {checked} intervals: {}",
            ctx()
        );
        assert_eq!(
            c["matched"].as_u64(),
            Some(checked),
            "engine {i}: {}",
            ctx()
        );
        for pol in 0..2 {
            assert_eq!(
                c["last_peaks"][pol]["channel"].as_f64(),
                Some(tone_channel),
                "engine {i} pol{pol}: {}",
                ctx()
            );
        }
        // Heap counters: every heap's checked, none other than katgpucbf's rule, none carried
        // by two heaps.
        let k = &e["heap_counters"];
        assert!(k["checked"].as_f64().unwrap() >= heaps, "{}", ctx());
        assert_eq!(k["wrong"], 0, "engine {i}: {}", ctx());
        assert_eq!(k["collisions"], 0, "engine {i}: {}", ctx());
        // The engine agrees: nothing missing on input, nothing skipped on output.
        assert_eq!(
            e["engine"]["missing_input"].as_f64(),
            Some(0.0),
            "{}",
            ctx()
        );
        assert_eq!(
            e["engine"]["skipped_output"].as_f64(),
            Some(0.0),
            "{}",
            ctx()
        );
        channels.push(tone_channel);
    }
    assert_ne!(channels[0], channels[1], "the antennas' tones must differ");
    // Both engines' heaps shared every substream, told apart by feng_id.
    for sub in s["per_substream"].as_array().unwrap() {
        assert!(sub["heaps"].as_u64().unwrap() > 0, "{sub:#}");
        assert!(sub["feng_id"].as_u64().unwrap() < 2, "{sub:#}");
    }
    let agg = s["aggregate_rate"].as_f64().unwrap();
    assert!(
        at_rate(agg, 2.0 * ARRAY_RATE, 0.97),
        "aggregate {agg}: {}",
        ctx()
    );
    println!(
        "array: 2 engines, {} and {} heaps, {:.4} Gsample/s aggregate, tones in channels {} and \
         {}, {} heap counters checked, no collision",
        engines[0]["heaps"],
        engines[1]["heaps"],
        agg / 1e9,
        channels[0],
        channels[1],
        s["heap_counters"]["checked"]
    );
    drop(array);
    Ok(())
}

//! dsim killed and started again (its timestamps jump back): the engine follows the new stream
//! and clean output resumes within seconds, without restarting the engine.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::capture::value;
use crate::setup::{serial, Setup};
use crate::system::System;

/// True when `heaps` holds `n` consecutive timestamps ending at its newest.
fn consecutive_tail(ts: &BTreeSet<u64>, step: u64, n: usize) -> bool {
    let tail: Vec<u64> = ts.iter().rev().take(n).copied().collect();
    tail.len() == n && tail.windows(2).all(|w| w[0] - w[1] == step)
}

#[test]
fn restarted_digitiser_is_followed() {
    restart_case(Setup::new());
}

#[test]
fn restarted_digitiser_is_followed_with_receive_threads() {
    restart_case(Setup::with_lanes());
}

fn restart_case(s: Setup) {
    let _turn = serial();
    let t0 = Instant::now();
    let k = s.channels / 5;
    let gain = 64.0 / s.tone_response(0.25);
    let mut sys = System::start(s.clone(), gain, 1e-6);
    let args = s.tone_args(&[k], 0.25);
    // A sync time 100 s ago: timestamps start far from 0, so the restart below (no sync time:
    // timestamps from 0) jumps back.
    let old_sync = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 100.0;
    let mut first = args.clone();
    first.extend(["--sync-time".into(), format!("{old_sync}")]);
    sys.start_dsim(&first);
    sys.out.wait_count(4, Duration::from_secs(60));
    let old_newest = sys.out.newest().unwrap();
    assert!(old_newest > (50.0 * s.rate) as u64);

    if let Some(mut d) = sys.dsim.take() {
        d.kill();
    }
    std::thread::sleep(Duration::from_millis(300));
    let restarted = Instant::now();
    sys.start_dsim(&args);
    // Clean output: 4 consecutive heaps of the new stream.
    let limit = Duration::from_secs(10) + s.seconds(16);
    let recovered = loop {
        let ts: BTreeSet<u64> = sys
            .out
            .timestamps()
            .range(..old_newest / 2)
            .copied()
            .collect();
        if consecutive_tail(&ts, s.heap_step(), 4) {
            break restarted.elapsed();
        }
        assert!(
            restarted.elapsed() < limit,
            "no clean output {limit:?} after the restart"
        );
        sys.assert_engine_healthy();
        std::thread::sleep(Duration::from_millis(50));
    };
    // The new stream's content is right too.
    let newest_new = sys
        .out
        .timestamps()
        .range(..old_newest / 2)
        .next_back()
        .copied();
    let from = newest_new.unwrap() + s.heap_step();
    let heaps = sys.out.capture(from, 2, Duration::from_secs(30));
    assert!(heaps.iter().all(|h| h.timestamp < old_newest / 2));
    for pol in 0..2 {
        let mean: f64 = heaps
            .iter()
            .flat_map(|h| (0..s.spectra_per_heap).map(move |sp| (h, sp)))
            .map(|(h, sp)| value(&s, h, k, sp, pol).norm())
            .sum::<f64>()
            / (heaps.len() * s.spectra_per_heap) as f64;
        assert!(
            (mean - 64.0).abs() < 3.0,
            "pol {pol}: amplitude {mean} after restart"
        );
    }
    let st = sys.engine_status();
    for p in 0..2 {
        assert!(
            st.input.pols[p].resyncs >= 1,
            "pol {p} did not resynchronise: {st:?}"
        );
    }
    sys.assert_engine_healthy();
    eprintln!(
        "restart, {} receive thread(s) per pol: clean output {:.2} s after the restart, {:.1} s in all",
        s.recv_threads,
        recovered.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

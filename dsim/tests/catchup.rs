//! Catching up: the send threads, held still for 0.3 s as a busy host deschedules the process,
//! send their backlog at the catch-up rate and lose nothing; held past --max-late, they skip
//! ahead as before.

mod common;

use std::time::Duration;

use common::{config, decode, Capture};

const RATE: f64 = 1.2e7;
const STALL: Duration = Duration::from_millis(300);

#[test]
fn a_stall_within_the_bound_is_made_up_with_every_heap_sent_once_in_order() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = RATE;
    cfg.threads = 2;
    cfg.duration = Some(3.0);
    cfg.max_late = 1.0;
    cfg.catch_up_rate = 2.0;
    let d = dsim::Dsim::start(cfg).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    d.stall_senders(STALL);
    assert!(d.wait_timeout(Duration::from_secs(10)));
    let status = d.wait();
    let got = cap.finish(Duration::from_millis(300));

    assert_eq!(status.heaps_skipped, 0, "{status:?}");
    assert!(status.catch_ups >= 2, "one per thread at least: {status:?}");
    assert!(
        (0.2..1.0).contains(&status.longest_catch_up_s),
        "{} s",
        status.longest_catch_up_s
    );
    let heap_samples = status.heap_samples as u64;
    for (p, arrivals) in got.iter().enumerate() {
        let pol = &status.pols[p];
        assert_eq!(pol.heaps_skipped, 0);
        assert!(pol.catch_ups >= 1 && pol.heaps_sent_late > 0, "{pol:?}");
        let (heaps, rejected) = decode(arrivals, 10);
        assert_eq!(rejected, 0);
        assert_eq!(
            heaps.len() as u64,
            pol.heaps_sent,
            "every heap sent arrived"
        );
        // Every heap once: the timestamps, sorted, are contiguous.
        let mut ts: Vec<u64> = heaps.iter().map(|h| h.timestamp).collect();
        ts.sort_unstable();
        for w in ts.windows(2) {
            assert_eq!(w[1] - w[0], heap_samples, "a heap lost or sent twice");
        }
        assert_eq!(ts.len() as u64, pol.heaps);
        // Each thread (every other batch) in order of timestamps.
        let batch = status.heaps_per_batch[p] as u64;
        for thread in 0..2 {
            let own: Vec<u64> = heaps
                .iter()
                .map(|h| h.timestamp / heap_samples)
                .filter(|k| (k / batch) % 2 == thread)
                .collect();
            assert!(
                own.windows(2).all(|w| w[1] > w[0]),
                "thread {thread} out of order"
            );
        }
        // Paced, not a burst: the stall's 0.3 s of heaps left over about 0.15 s at twice the
        // rate (at once, they would have left within a few milliseconds).
        let heaps_per_s = RATE / heap_samples as f64;
        let stalled = (STALL.as_secs_f64() * heaps_per_s) as u64;
        let arrival = |k: u64| {
            let i = heaps
                .iter()
                .position(|h| h.timestamp / heap_samples == k)
                .unwrap();
            arrivals[i].at
        };
        // The first heap that left late: the one after the largest gap between arrivals.
        let late = (1..heaps.len())
            .max_by_key(|&i| arrivals[i].at - arrivals[i - 1].at)
            .unwrap();
        let k_late = heaps[late].timestamp / heap_samples;
        let spread = arrival(k_late + stalled) - arrival(k_late);
        assert!(
            spread > Duration::from_millis(100),
            "the backlog left in {spread:?}"
        );
    }
}

#[test]
fn a_stall_past_the_bound_still_skips() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = RATE;
    cfg.duration = Some(2.0);
    cfg.max_late = 0.1;
    let d = dsim::Dsim::start(cfg).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    d.stall_senders(STALL);
    assert!(d.wait_timeout(Duration::from_secs(10)));
    let status = d.wait();
    drop(cap.finish(Duration::from_millis(100)));
    assert!(status.heaps_skipped > 0, "{status:?}");
    for p in &status.pols {
        assert!(p.heaps_skipped > 0);
        assert_eq!(p.heaps_sent + p.heaps_skipped, p.heaps, "{p:?}");
    }
}

//! Fault injection observed on the wire and in the counters.

mod common;

use std::collections::BTreeMap;

use common::{config, decode, run, Capture};
use dsim::faults::{FaultsRequest, PolFaults, Reorder, Selector};
use spead::packet::{Limits, Packet};
use spead::Reject;

fn selector(heaps: Vec<u64>, ranges: Vec<[u64; 2]>, probability: f64) -> Selector {
    Selector {
        probability,
        heaps,
        ranges,
    }
}

/// A sync time shortly in the future makes the first heap 0, so faults can name exact heaps.
fn fixed_start(cfg: &mut dsim::Config) -> u64 {
    cfg.sync_time = Some(dsim::schedule::unix_now() + 0.3);
    0
}

#[test]
fn a_drop_list_removes_exactly_those_heaps() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    // Faults start far enough past the first heap that start-up timing cannot matter.
    let f = fixed_start(&mut cfg) + 100;
    let listed = vec![f + 10, f + 11, f + 57];
    cfg.faults = FaultsRequest {
        pol0: Some(PolFaults {
            drop: Some(selector(listed.clone(), vec![[f + 100, f + 105]], 0.0)),
            ..Default::default()
        }),
        pol1: None,
    };
    let (status, got) = run(cap, cfg, 1400);
    let first = status.first_heap;
    assert_eq!(first, 0);
    let mut want: Vec<u64> = listed;
    want.extend(f + 100..f + 105);
    for (p, arrivals) in got.iter().enumerate() {
        let (heaps, _) = decode(arrivals, 10);
        let seen: std::collections::BTreeSet<u64> = heaps.iter().map(|h| h.heap_cnt).collect();
        let missing: Vec<u64> = (first..first + 1400)
            .filter(|k| !seen.contains(k))
            .collect();
        let expect = if p == 0 { want.clone() } else { vec![] };
        assert_eq!(missing, expect, "pol {p}");
        assert_eq!(status.pols[p].faults_injected.dropped, expect.len() as u64);
        assert_eq!(status.pols[p].heaps, 1400, "timestamps still advance");
    }
}

#[test]
fn a_drop_probability_drops_within_statistical_bounds() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = 4e7;
    let p = 0.05;
    cfg.faults = FaultsRequest {
        pol0: Some(PolFaults {
            drop: Some(selector(vec![], vec![], p)),
            ..Default::default()
        }),
        pol1: None,
    };
    let n = 8_000u64;
    let (status, got) = run(cap, cfg, n);
    let (heaps0, _) = decode(&got[0], 10);
    let (heaps1, _) = decode(&got[1], 10);
    assert_eq!(heaps1.len() as u64, n, "no loss without faults");
    let dropped = n - heaps0.len() as u64;
    assert_eq!(
        status.pols[0].faults_injected.dropped, dropped,
        "counter = observed"
    );
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (dropped as f64 - mean).abs() < 5.0 * sd,
        "dropped {dropped} of {n}, expected {mean} +- {sd}"
    );
}

#[test]
fn duplicate_reorder_corrupt_and_truncate_are_seen_and_counted() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    let f = fixed_start(&mut cfg) + 100;
    cfg.faults = FaultsRequest {
        pol0: None,
        pol1: Some(PolFaults {
            duplicate: Some(selector(vec![f + 5], vec![], 0.0)),
            corrupt: Some(selector(vec![f + 7], vec![], 0.0)),
            truncate: Some(selector(vec![f + 9], vec![], 0.0)),
            // f + 19 = 119 is the last heap of a 12-heap batch: its turn comes in the next batch.
            reorder: Some(Reorder {
                probability: 0.0,
                heaps: vec![f + 19, f + 24],
                ranges: vec![],
                window: 3,
            }),
            drop: None,
        }),
    };
    let (status, got) = run(cap, cfg, 1200);
    assert_eq!(status.first_heap, 0);
    let (heaps0, rejected0) = decode(&got[0], 10);
    assert_eq!((heaps0.len(), rejected0), (1200, 0));

    let (heaps, rejected) = decode(&got[1], 10);
    assert_eq!(rejected, 2, "one corrupted header, one truncated datagram");
    let full = got[1][0].bytes.len();
    let short: Vec<&common::Arrival> = got[1].iter().filter(|a| a.bytes.len() != full).collect();
    assert_eq!(short.len(), 1);
    assert_eq!(
        short[0].bytes.len(),
        full / 2,
        "the first half of the datagram"
    );
    assert_eq!(
        Packet::decode(&short[0].bytes, &Limits::default()).unwrap_err(),
        Reject::PayloadLengthMismatch
    );
    // Its first item pointer is the heap counter (immediate, 48 bits).
    let first_item = u64::from_be_bytes(short[0].bytes[8..16].try_into().unwrap());
    assert_eq!(first_item >> 48, 0x8001, "heap counter first");
    assert_eq!(first_item & 0xffff_ffff_ffff, f + 9, "the truncated heap");
    let bad: Vec<&common::Arrival> = got[1].iter().filter(|a| a.bytes[0] != 0x53).collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(
        bad[0].bytes[0], 0x00,
        "the magic byte is what was corrupted"
    );
    let mut fixed = bad[0].bytes.clone();
    fixed[0] = 0x53;
    let (h, _) = decode(
        &[common::Arrival {
            at: bad[0].at,
            group: 0,
            bytes: fixed,
        }],
        10,
    );
    assert_eq!(h[0].heap_cnt, f + 7, "corrupted heap is otherwise intact");

    let mut count: BTreeMap<u64, usize> = BTreeMap::new();
    for h in &heaps {
        *count.entry(h.heap_cnt).or_default() += 1;
    }
    assert_eq!(count[&(f + 5)], 2, "duplicated");
    assert!(!count.contains_key(&(f + 7)));
    assert!(!count.contains_key(&(f + 9)));
    assert_eq!(heaps.len(), 1200 - 2 + 1);
    // Order on the wire (one thread, one group): each held heap follows the next 3.
    let order: Vec<u64> = heaps.iter().map(|h| h.heap_cnt).collect();
    let at = |k: u64| order.iter().position(|&x| x == k).unwrap();
    for k in [f + 19, f + 24] {
        assert_eq!(at(k), at(k + 3) + 1, "heap {k} sent right after {}", k + 3);
        assert_eq!(at(k + 4), at(k) + 1);
    }
    let inj = status.pols[1].faults_injected;
    assert_eq!(
        (
            inj.duplicated,
            inj.corrupted,
            inj.reordered,
            inj.dropped,
            inj.truncated
        ),
        (1, 1, 2, 0, 1)
    );
    assert_eq!(status.pols[1].heaps_sent, 1201);
}

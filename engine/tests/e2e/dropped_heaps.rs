//! Lost input: a dsim drop list removes exactly the output heaps whose spectra windows touch a
//! dropped heap (as the harness's oracle predicts), the engine's counters agree, and stray
//! packets are counted by reason without disturbing the stream.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;
use spead::items;

use crate::client::wideband;
use crate::setup::{serial, Setup};
use crate::system::System;

#[test]
fn dropped_heaps_give_exactly_the_predicted_gaps() {
    dropped_heaps_case(Setup::new());
}

#[test]
fn dropped_heaps_give_exactly_the_predicted_gaps_with_receive_threads() {
    dropped_heaps_case(Setup::with_lanes());
}

fn dropped_heaps_case(s: Setup) {
    let _turn = serial();
    let t0 = Instant::now();
    let mut sys = System::with_tone(&s);
    // Clean flow first: no heap skipped since output started.
    let before = sys.engine_status();
    let dsim_now = sys.dsim_timestamp();
    let hs = s.heap_samples as u64;
    // Drops about 1 s of output ahead: one heap of pol 0, a run of pol 1, and a heap of both
    // polarisations that holds the first sample of an output heap, so that it also lies in the
    // previous output heap's windows (two heaps lost). Far enough apart that the gaps are separate.
    let ahead = (s.rate as u64 / hs).max(64);
    let k0 = dsim_now / hs + ahead;
    let gap = 4 * s.heap_step() / hs + 8;
    let k1 = k0 + gap;
    let base = sys.out.timestamps().first().copied().unwrap();
    let boundary = base + ((k1 + gap) * hs - base).div_ceil(s.heap_step()) * s.heap_step();
    let k2 = boundary / hs;
    let pol0: Vec<u64> = vec![k0, k2];
    let pol1: Vec<u64> = vec![k1, k1 + 1, k1 + 2, k2];
    sys.dsim_ctl().put_json(
        "/faults",
        json!({"pol0": {"drop": {"heaps": pol0}}, "pol1": {"drop": {"heaps": pol1}}}),
    );
    let lo = k0 * hs - 4 * s.heap_step();
    let hi = (k2 + 1) * hs + 4 * s.heap_step();
    sys.out.wait_past(
        hi + 2 * s.heap_step(),
        Duration::from_secs(60) + 4 * s.seconds(ahead),
    );
    // Let the counters catch up with the heaps on the wire.
    std::thread::sleep(Duration::from_millis(300));
    let after = sys.engine_status();

    let seen = sys.out.timestamps();
    let mut dropped = pol0.clone();
    dropped.extend(&pol1);
    let (all, missing) = s.predicted_output(base, lo, hi, &dropped);
    // 1 + 1 + 2 heaps unless a run straddles a boundary too.
    assert!(
        missing.len() >= 4 && missing.len() < all.len(),
        "{missing:?}"
    );
    let got: BTreeSet<u64> = seen.range(lo..=hi).copied().collect();
    let expected: BTreeSet<u64> = all.difference(&missing).copied().collect();
    assert_eq!(
        got,
        expected,
        "received heaps differ from the prediction: missing {:?}, extra {:?}",
        expected.difference(&got).collect::<Vec<_>>(),
        got.difference(&expected).collect::<Vec<_>>()
    );
    let skipped = wideband(&after).heaps_skipped - wideband(&before).heaps_skipped;
    assert_eq!(skipped, missing.len() as u64, "skipped-heap counter");
    for (p, drops) in [(0, pol0.len()), (1, pol1.len())] {
        let m = after.input.pols[p].heaps_missing - before.input.pols[p].heaps_missing;
        assert_eq!(m, drops as u64, "missing-heap counter of pol {p}");
    }
    let metrics = sys.engine_ctl.get_text("/metrics");
    assert!(metrics.contains("fengine_output_skipped_heaps_total{backend="));

    // Stray packets: future-dated, too old, wrong size, misaligned, without a timestamp. Each is
    // counted by reason and dropped without disturbing the stream. Among the misaligned, an empty
    // packet at the very end of a heap (offset = heap size), which once marked the next heap's
    // packet as seen, and after a chunk's last heap panicked the receiver (spead::chunk).
    let now_ts = sys.engine_status().input.pols[0].last_timestamp;
    let stray = |ts: Option<u64>, bytes: usize| -> Vec<u8> {
        let payload = vec![0u8; bytes];
        let mut its = vec![spead::HeapItem::addressed(items::ADC_SAMPLES, &payload)];
        if let Some(t) = ts {
            its.push(spead::HeapItem::immediate(items::TIMESTAMP, t));
        }
        let mut out = Vec::new();
        spead::HeapWriter::new(1 << 16).write(7, &its, |d| out = d.to_vec());
        out
    };
    let heap_bytes = s.heap_samples * s.sample_bits as usize / 8;
    // Heaps whose index k is a multiple of 4 belong on the first address (k mod addresses).
    let k_now = now_ts / hs / 4 * 4;
    let chunk_heaps = (s.heap_step() * s.heaps_per_frame as u64 / hs).div_ceil(4) * 4;
    let mut packets = vec![
        stray(Some((k_now + 1_000_000) * hs), heap_bytes),
        // Eight chunks back: behind every receive window.
        stray(Some(k_now.saturating_sub(8 * chunk_heaps) * hs), heap_bytes),
        stray(Some(k_now * hs), heap_bytes / 2),
        stray(Some(k_now * hs + 1), heap_bytes),
        stray(None, heap_bytes),
        empty_at_end(k_now * hs, heap_bytes as u64),
    ];
    if s.addresses > 1 {
        // A heap that belongs on the second address.
        packets.push(stray(Some((k_now + 1) * hs), heap_bytes));
    }
    let first_source = format!(
        "127.0.0.1:{}",
        sys.sources[0].rsplit_once(':').expect("ADDR:PORT").1
    );
    let before_stray = sys.engine_status();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for p in &packets {
        tx.send_to(p, &first_source).unwrap();
    }
    let now = sys.out.newest().unwrap();
    sys.out
        .wait_past(now + 4 * s.heap_step(), Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    let after_stray = sys.engine_status();
    let rejected = &after_stray.input.pols[0].rejected;
    let was = &before_stray.input.pols[0].rejected;
    // Only reasons seen are listed: an absent one counts 0.
    let count = |m: &std::collections::BTreeMap<String, u64>, reason: &str| {
        m.get(reason).copied().unwrap_or(0)
    };
    let diff = |reason: &str| count(rejected, reason) - count(was, reason);
    assert_eq!(diff("too_new"), 1, "{rejected:?}");
    assert_eq!(diff("too_old"), 1, "{rejected:?}");
    assert_eq!(diff("wrong_heap_size"), 1, "{rejected:?}");
    assert_eq!(diff("misaligned"), 2, "{rejected:?}");
    assert_eq!(diff("missing_mandatory_item"), 1, "{rejected:?}");
    let wrong_destination = if s.addresses > 1 { 1 } else { 0 };
    assert_eq!(diff("wrong_destination"), wrong_destination, "{rejected:?}");
    // And it keeps going without a gap.
    assert_eq!(
        wideband(&after_stray).heaps_skipped,
        wideband(&before_stray).heaps_skipped,
        "stray packets disturbed the stream"
    );
    sys.assert_engine_healthy();
    eprintln!(
        "dropped heaps, {} receive thread(s) per pol: {} of {} heaps missing as predicted, {:.1} s",
        s.recv_threads,
        missing.len(),
        all.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// A packet of the heap at timestamp `ts` that carries no payload and sits at the heap's end.
fn empty_at_end(ts: u64, heap_bytes: u64) -> Vec<u8> {
    use spead::ItemPointer;
    let mut buf = vec![0u8; 64];
    let n = spead::packet::encode(
        &mut buf,
        &[
            ItemPointer::immediate(items::HEAP_CNT, 7),
            ItemPointer::immediate(items::HEAP_SIZE, heap_bytes),
            ItemPointer::immediate(items::HEAP_OFFSET, heap_bytes),
            ItemPointer::immediate(items::PAYLOAD_LENGTH, 0),
            ItemPointer::immediate(items::TIMESTAMP, ts),
        ],
        &[],
    )
    .expect("room for the packet");
    buf.truncate(n);
    buf
}

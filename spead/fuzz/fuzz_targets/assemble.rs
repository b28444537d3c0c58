//! A sequence of datagrams fed to both assemblers: nothing may panic, and what comes out stays
//! consistent (presence flags per slot, complete heaps of their declared size, counters adding up).
//!
//! Input: 4 bytes of configuration (max heaps, chunk slots, slot size, packet size, window), then
//! datagrams separated by 0xff 0xfe markers (so a seed corpus of real packets stays readable).
#![no_main]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use spead::assemble::{Event, HeapAssembler};
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::{items, Limits, Packet, Reject, RejectCounters};

fn split(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let at = rest.windows(2).position(|w| w == [0xff, 0xfe]);
        let (head, tail) = match at {
            Some(i) => (&rest[..i], &rest[i + 2..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = tail;
        Some(head)
    })
}

fuzz_target!(|data: &[u8]| {
    let [a, b, c, d, body @ ..] = data else {
        return;
    };
    let limits = Limits {
        max_packet: 9200,
        max_heap: 1 << 16,
    };
    let mut heaps = HeapAssembler::new(
        limits,
        1 + (*a as usize & 7),
        Arc::new(RejectCounters::new()),
    );
    let slots = 1 + (*b as usize & 7);
    let slot_bytes = 1 + (*c as usize & 127);
    let cfg = ChunkConfig {
        slots,
        slot_bytes,
        packet_payload: 1 + (*d as usize & 63),
        window: 1 + (*a as usize >> 4 & 3),
        max_jump: (*b as u64 >> 4) & 15,
    };
    let counters = Arc::new(RejectCounters::new());
    let mut chunks = ChunkAssembler::new(cfg, counters.clone());
    for _ in 0..=cfg.window {
        let _ = chunks.give(vec![0u8; slots * slot_bytes]);
    }
    // Either the timestamp or the heap counter picks the slot, as the engine and harness do.
    let by_counter = *d & 0x80 != 0;
    let place = |p: &Packet| -> Result<Placement, Reject> {
        let t = if by_counter {
            p.heap_cnt
        } else {
            p.immediate(items::TIMESTAMP)
                .ok_or(Reject::MissingMandatoryItem)?
        };
        Ok(Placement {
            chunk: t / slots as u64,
            slot: (t % slots as u64) as usize,
        })
    };
    let mut ready = Vec::new();
    let mut offered = 0u64;
    for datagram in split(body) {
        offered += 1;
        let _ = heaps.add_datagram(datagram, &mut |e| {
            if let Event::Complete(h) = &e {
                let _ = h.view().map(|v| v.descriptors());
            }
            if let Event::Incomplete {
                received, missing, ..
            } = &e
            {
                assert!(received.windows(2).all(|w| w[0].1 < w[1].0), "{received:?}");
                assert!(missing.windows(2).all(|w| w[0].1 < w[1].0), "{missing:?}");
            }
        });
        let _ = chunks.add_datagram(datagram, &limits, place, &mut |e| ready.push(e));
        for e in ready.drain(..) {
            if let ChunkEvent::Ready(c) = e {
                assert_eq!(c.present.len(), slots);
                chunks.recycle(c);
            }
        }
    }
    heaps.flush(&mut |_| {});
    chunks.flush(&mut |_| {});
    let stats = chunks.stats();
    assert_eq!(stats.packets.load(Ordering::Relaxed), offered);
    assert!(
        stats.bytes.load(Ordering::Relaxed)
            >= stats.heaps.load(Ordering::Relaxed) * slot_bytes as u64
    );
    assert!(counters.total() <= offered);
});

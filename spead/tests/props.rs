//! Property tests: random heaps split into packets, shuffled, duplicated and partly dropped,
//! come back exactly as sent, or are reported with exactly the bytes that arrived.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use spead::assemble::{Event, HeapAssembler};
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::packet::Limits;
use spead::{items, HeapItem, HeapWriter, Packet, Reject, RejectCounters};

#[derive(Debug, Clone)]
struct RandomHeap {
    cnt: u64,
    immediates: Vec<(u16, u64)>,
    values: Vec<Vec<u8>>,
}

fn heap_strategy() -> impl Strategy<Value = RandomHeap> {
    (
        any::<u32>(),
        prop::collection::vec((0x1000u16..0x7fff, 0u64..(1 << 48)), 0..4),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 1..600), 1..4),
    )
        .prop_map(|(cnt, immediates, values)| RandomHeap {
            cnt: cnt as u64 + 1,
            immediates,
            values,
        })
}

/// (heap counter, packet) pairs for a set of heaps with distinct counters.
fn packetise(heaps: &[RandomHeap], max_payload: usize) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    for h in heaps {
        let mut it: Vec<HeapItem> = h
            .immediates
            .iter()
            .map(|&(id, v)| HeapItem::immediate(id, v))
            .collect();
        for (i, v) in h.values.iter().enumerate() {
            it.push(HeapItem::addressed(0x0800 + i as u16, v));
        }
        HeapWriter::new(max_payload).write(h.cnt, &it, |p| out.push((h.cnt, p.to_vec())));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn heaps_reassemble_or_report_missing(
        heaps in prop::collection::vec(heap_strategy(), 1..6),
        max_payload in 16usize..300,
        seed in any::<u64>(),
        drop_per_mille in 0u32..300,
        dup_per_mille in 0u32..300,
    ) {
        let mut heaps = heaps;
        heaps.sort_by_key(|h| h.cnt);
        heaps.dedup_by_key(|h| h.cnt);
        let mut packets = packetise(&heaps, max_payload);
        // Deterministic shuffle, drops and duplicates from the seed.
        let mut state = seed | 1;
        let mut next = || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state };
        for i in (1..packets.len()).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            packets.swap(i, j);
        }
        let mut sent = Vec::new();
        let mut dropped: BTreeSet<u64> = BTreeSet::new();
        for (cnt, p) in packets {
            if (next() % 1000) < drop_per_mille as u64 { dropped.insert(cnt); continue; }
            if (next() % 1000) < dup_per_mille as u64 { sent.push(p.clone()); }
            sent.push(p);
        }
        let mut asm = HeapAssembler::new(Limits::default(), heaps.len(), Arc::new(RejectCounters::new()));
        let mut events = Vec::new();
        for p in &sent {
            let r = asm.add_datagram(p, &mut |e| events.push(e));
            prop_assert!(r.is_ok() || r == Err(Reject::Duplicate));
        }
        asm.flush(&mut |e| events.push(e));
        let mut complete = BTreeMap::new();
        let mut incomplete = BTreeSet::new();
        for e in events {
            match e {
                Event::Complete(h) => { complete.insert(h.heap_cnt, h); }
                Event::Incomplete { heap_cnt, .. } => { incomplete.insert(heap_cnt); }
                Event::Stop => prop_assert!(false, "no stop was sent"),
            }
        }
        for h in &heaps {
            if dropped.contains(&h.cnt) {
                prop_assert!(incomplete.contains(&h.cnt) || !complete.contains_key(&h.cnt));
                continue;
            }
            let got = complete.get(&h.cnt).expect("undropped heap completes");
            let view = got.view().unwrap();
            for &(id, v) in &h.immediates {
                prop_assert_eq!(view.immediate(id), Some(v));
            }
            for (i, v) in h.values.iter().enumerate() {
                prop_assert_eq!(view.value(0x0800 + i as u16), Some(&v[..]));
            }
        }
    }

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Packet::decode(&bytes, &Limits::default());
        let _ = spead::Descriptor::decode(&bytes);
    }

    #[test]
    fn chunks_flag_exactly_the_heaps_received(
        present in prop::collection::vec(any::<bool>(), 16),
        seed in any::<u64>(),
    ) {
        // 4 chunks of 4 slots; slot heaps of 40 bytes in packets of 16.
        let cfg = ChunkConfig { slots: 4, slot_bytes: 40, packet_payload: 16, window: 4, max_jump: 100 };
        let mut asm = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
        for _ in 0..4 { asm.give(vec![0u8; 160]); }
        let mut packets = Vec::new();
        for t in 0..16u64 {
            if !present[t as usize] && t != 0 { continue; }
            let data = [t as u8 + 1; 40];
            HeapWriter::new(16).write(t + 1, &[HeapItem::immediate(items::TIMESTAMP, t), HeapItem::addressed(0x3300, &data)], |p| packets.push(p.to_vec()));
        }
        // Keep heap 0 first (it opens the window), shuffle the rest.
        let mut state = seed | 1;
        for i in (4..packets.len()).rev() {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            packets.swap(i, 3 + (state % (i as u64 - 2)) as usize);
        }
        let place = |p: &Packet| -> Result<Placement, Reject> {
            let t = p.immediate(items::TIMESTAMP).ok_or(Reject::MissingMandatoryItem)?;
            Ok(Placement { chunk: t / 4, slot: (t % 4) as usize })
        };
        let mut chunks = Vec::new();
        for raw in &packets {
            let p = Packet::decode(raw, &Limits::default()).unwrap();
            asm.add_packet(&p, place, &mut |e| chunks.push(e)).unwrap();
        }
        asm.flush(&mut |e| chunks.push(e));
        for e in chunks {
            let ChunkEvent::Ready(c) = e else { panic!("no resync expected") };
            for slot in 0..4 {
                let t = c.id * 4 + slot as u64;
                let expect = present[t as usize] || t == 0;
                prop_assert_eq!(c.present[slot], expect, "heap {}", t);
                if expect {
                    prop_assert!(c.data[slot * 40..slot * 40 + 40].iter().all(|&b| b == t as u8 + 1));
                }
            }
        }
    }
}

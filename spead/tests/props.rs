//! Property tests: random heaps split into packets, shuffled, duplicated and partly dropped,
//! come back exactly as sent, or are reported with exactly the bytes that arrived; chunks flag
//! exactly the heaps that arrived whole; the decoder takes any bytes without panicking.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use spead::assemble::{Event, HeapAssembler};
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::packet::{encode, ItemPointer, Limits};
use spead::{items, HeapItem, HeapView, HeapWriter, Packet, Reject, RejectCounters};

/// A small deterministic generator, so that one proptest seed drives shuffles, drops and copies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, per_mille: u32) -> bool {
        self.next() % 1000 < per_mille as u64
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[derive(Debug, Clone)]
struct RandomHeap {
    immediates: BTreeMap<u16, u64>,
    /// Addressed items 0x0800 + i; empty values allowed (they share an address with the next).
    values: Vec<Vec<u8>>,
}

fn heap_strategy() -> impl Strategy<Value = RandomHeap> {
    (
        prop::collection::btree_map(0x1000u16..0x7fff, 0u64..(1 << 48), 0..4),
        prop::collection::vec(any::<u8>(), 1..600),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 0..3),
    )
        .prop_map(|(immediates, first, rest)| {
            // One value at least is not empty: HeapWriter pads an empty heap, and the padding
            // would become the last empty item's value.
            let values = std::iter::once(first).chain(rest).collect();
            RandomHeap { immediates, values }
        })
}

/// One packet as sent: heap index, byte range, datagram.
struct Sent {
    heap: usize,
    range: (u64, u64),
    datagram: Vec<u8>,
}

fn packetise(heaps: &[RandomHeap], cnts: &[u64], max_payload: usize) -> Vec<Vec<Sent>> {
    heaps
        .iter()
        .zip(cnts)
        .enumerate()
        .map(|(i, (h, &cnt))| {
            let mut it: Vec<HeapItem> = h
                .immediates
                .iter()
                .map(|(&id, &v)| HeapItem::immediate(id, v))
                .collect();
            for (k, v) in h.values.iter().enumerate() {
                it.push(HeapItem::addressed(0x0800 + k as u16, v));
            }
            let mut out = Vec::new();
            HeapWriter::new(max_payload).write(cnt, &it, |p| {
                let d = Packet::decode(p, &Limits::default()).unwrap();
                let range = (d.heap_offset, d.heap_offset + d.payload.len() as u64);
                out.push(Sent {
                    heap: i,
                    range,
                    datagram: p.to_vec(),
                });
            });
            out
        })
        .collect()
}

/// Sorted ranges merged where they touch.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if last.1 == s => last.1 = e,
            _ => out.push((s, e)),
        }
    }
    out
}

fn gaps(received: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &(s, e) in received {
        if s > at {
            out.push((at, s));
        }
        at = e;
    }
    if size > at {
        out.push((at, size));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Complete heaps come back item for item; incomplete ones are reported with exactly the
    /// byte ranges that arrived and those that did not; every extra copy is one duplicate.
    #[test]
    fn heaps_reassemble_or_report_exactly_what_is_missing(
        heaps in prop::collection::vec(heap_strategy(), 1..6),
        max_payload in 16usize..300,
        seed in any::<u64>(),
        drop_per_mille in 0u32..200,
        dup_per_mille in 0u32..300,
        interleave in any::<bool>(),
        max_heaps in 1usize..6,
    ) {
        let mut rng = Rng(seed | 1);
        let cnts: Vec<u64> = (0..heaps.len() as u64).map(|i| 1 + i * 7919).collect();
        let mut per_heap = packetise(&heaps, &cnts, max_payload);
        // Heaps interleaved need every heap live at once; heap after heap may evict.
        let max_heaps = if interleave { heaps.len() } else { max_heaps };
        for packets in &mut per_heap {
            rng.shuffle(packets);
        }
        let mut order: Vec<Sent> = per_heap.into_iter().flatten().collect();
        if interleave {
            rng.shuffle(&mut order);
        }
        let mut delivered: Vec<Vec<(u64, u64)>> = vec![Vec::new(); heaps.len()];
        let mut lost = vec![false; heaps.len()];
        let mut copies = 0u64;
        let mut asm = HeapAssembler::new(Limits::default(), max_heaps, Arc::new(RejectCounters::new()));
        let mut events = Vec::new();
        for s in &order {
            if rng.chance(drop_per_mille) {
                lost[s.heap] = true;
                continue;
            }
            delivered[s.heap].push(s.range);
            let r = asm.add_datagram(&s.datagram, &mut |e| events.push(e));
            prop_assert_eq!(r, Ok(()));
            if rng.chance(dup_per_mille) {
                copies += 1;
                let r = asm.add_datagram(&s.datagram, &mut |e| events.push(e));
                prop_assert_eq!(r, Err(Reject::Duplicate));
            }
        }
        asm.flush(&mut |e| events.push(e));
        prop_assert_eq!(asm.counters().get(Reject::Duplicate), copies);
        prop_assert_eq!(asm.counters().total(), copies);

        let mut seen = BTreeSet::new();
        for e in events {
            match e {
                Event::Complete(h) => {
                    let i = cnts.iter().position(|&c| c == h.heap_cnt).expect("a heap we sent");
                    prop_assert!(seen.insert(i), "heap {} reported twice", i);
                    prop_assert!(!lost[i], "heap {} completed without all its packets", i);
                    let view = h.view().unwrap();
                    for (&id, &v) in &heaps[i].immediates {
                        prop_assert_eq!(view.immediate(id), Some(v));
                    }
                    for (k, v) in heaps[i].values.iter().enumerate() {
                        prop_assert_eq!(view.value(0x0800 + k as u16), Some(&v[..]));
                    }
                }
                Event::Incomplete { heap_cnt, size, received, missing, .. } => {
                    let i = cnts.iter().position(|&c| c == heap_cnt).expect("a heap we sent");
                    prop_assert!(seen.insert(i), "heap {} reported twice", i);
                    prop_assert!(lost[i], "heap {} incomplete though nothing was lost", i);
                    let expect = merge(delivered[i].clone());
                    let size = size.expect("every packet carries the heap size");
                    prop_assert_eq!(&missing, &gaps(&expect, size));
                    prop_assert_eq!(received, expect);
                }
                Event::Stop => prop_assert!(false, "no stop was sent"),
            }
        }
        // A heap all of whose packets were dropped is never seen; every other heap is.
        for (i, d) in delivered.iter().enumerate() {
            prop_assert_eq!(seen.contains(&i), !d.is_empty(), "heap {}", i);
        }
    }

    /// Chunks flag exactly the slots whose every packet arrived, hold their bytes, count each
    /// extra copy as one duplicate and never emit a chunk that received nothing.
    #[test]
    fn chunks_flag_exactly_the_heaps_received(
        slots in 1usize..8,
        slot_bytes in 1usize..100,
        packet_payload in 1usize..40,
        window in 1usize..4,
        groups in 1usize..4,
        seed in any::<u64>(),
        absent_per_mille in 0u32..400,
        drop_per_mille in 0u32..200,
        dup_per_mille in 0u32..200,
    ) {
        let n_chunks = groups * window;
        let mut rng = Rng(seed | 1);
        let cfg = ChunkConfig { slots, slot_bytes, packet_payload, window, max_jump: 1000 };
        let mut asm = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
        for _ in 0..=window {
            asm.give(vec![0u8; slots * slot_bytes]).unwrap();
        }
        let value = |t: u64, i: usize| (t as usize * 31 + i * 7) as u8;
        // Packets of each window-aligned group of chunks, shuffled within the group, so that none
        // is too old for the window.
        let mut complete = BTreeSet::new();
        let mut touched = BTreeSet::new();
        let mut order: Vec<Vec<u8>> = Vec::new();
        let mut unique_bytes = 0u64;
        for g in 0..groups {
            let mut group = Vec::new();
            for t in (g * window * slots) as u64..((g + 1) * window * slots) as u64 {
                if rng.chance(absent_per_mille) {
                    continue;
                }
                let data: Vec<u8> = (0..slot_bytes).map(|i| value(t, i)).collect();
                let mut whole = true;
                HeapWriter::new(packet_payload).write(
                    t + 1,
                    &[HeapItem::immediate(items::TIMESTAMP, t), HeapItem::addressed(items::ADC_SAMPLES, &data)],
                    |p| {
                        if rng.chance(drop_per_mille) {
                            whole = false;
                        } else {
                            group.push(p.to_vec());
                        }
                    },
                );
                if whole {
                    complete.insert(t);
                }
            }
            rng.shuffle(&mut group);
            order.extend(group);
        }
        // The window opens at the first packet's chunk: make that the lowest one.
        let chunk_of = |raw: &[u8]| {
            Packet::decode(raw, &Limits::default()).unwrap().immediate(items::TIMESTAMP).unwrap() / slots as u64
        };
        if let Some(first) = (0..order.len()).min_by_key(|&i| chunk_of(&order[i])) {
            order.swap(0, first);
        }
        let place = |p: &Packet| -> Result<Placement, Reject> {
            let t = p.immediate(items::TIMESTAMP).ok_or(Reject::MissingMandatoryItem)?;
            Ok(Placement { chunk: t / slots as u64, slot: (t % slots as u64) as usize })
        };
        let mut copies = 0u64;
        let mut emitted = Vec::new();
        let mut check = |asm: &mut ChunkAssembler<Vec<u8>>, events: Vec<ChunkEvent<Vec<u8>>>| -> Result<(), TestCaseError> {
            for e in events {
                let ChunkEvent::Ready(c) = e else { panic!("no resync expected") };
                prop_assert!(c.id < n_chunks as u64);
                emitted.push(c.id);
                for slot in 0..slots {
                    let t = c.id * slots as u64 + slot as u64;
                    prop_assert_eq!(c.present[slot], complete.contains(&t), "heap {}", t);
                    if c.present[slot] {
                        let got = &c.data[slot * slot_bytes..(slot + 1) * slot_bytes];
                        prop_assert!(got.iter().enumerate().all(|(i, &b)| b == value(t, i)), "heap {} bytes", t);
                    }
                }
                asm.recycle(c);
            }
            Ok(())
        };
        for raw in &order {
            let p = Packet::decode(raw, &Limits::default()).unwrap();
            touched.insert(chunk_of(raw));
            unique_bytes += p.payload.len() as u64;
            let mut events = Vec::new();
            prop_assert_eq!(asm.add_packet(&p, place, &mut |e| events.push(e)), Ok(()));
            if rng.chance(dup_per_mille) {
                copies += 1;
                prop_assert_eq!(asm.add_packet(&p, place, &mut |e| events.push(e)), Err(Reject::Duplicate));
            }
            check(&mut asm, events)?;
        }
        let mut events = Vec::new();
        asm.flush(&mut |e| events.push(e));
        check(&mut asm, events)?;
        prop_assert_eq!(emitted, touched.into_iter().collect::<Vec<_>>());
        prop_assert_eq!(asm.counters().get(Reject::Duplicate), copies);
        prop_assert_eq!(asm.counters().total(), copies);
        let stats = asm.stats();
        prop_assert_eq!(stats.heaps.load(std::sync::atomic::Ordering::Relaxed), complete.len() as u64);
        prop_assert_eq!(stats.bytes.load(std::sync::atomic::Ordering::Relaxed), unique_bytes);
        prop_assert_eq!(asm.free_buffers(), window + 1);
    }

    #[test]
    fn decode_never_panics_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        exercise(&bytes);
    }

    /// Well-formed headers with random pointers and payload reach the deeper checks.
    #[test]
    fn decode_never_panics_on_plausible_packets(
        pointers in prop::collection::vec((any::<bool>(), 0u16..12, 0u64..300), 0..12),
        payload in prop::collection::vec(any::<u8>(), 0..300),
        extra_items in 0u16..3,
    ) {
        let ptrs: Vec<ItemPointer> = pointers
            .iter()
            .map(|&(imm, id, v)| {
                let id = if id > 8 { items::DESCRIPTOR } else { id };
                if imm { ItemPointer::immediate(id, v) } else { ItemPointer::addressed(id, v) }
            })
            .collect();
        let mut buf = vec![0u8; 8 + 8 * ptrs.len() + payload.len()];
        let n = encode(&mut buf, &ptrs, &payload).unwrap();
        buf[7] = buf[7].wrapping_add(extra_items as u8);
        exercise(&buf[..n]);
    }
}

/// Everything that reads untrusted bytes: the decoder, heap views, descriptors, the assembler.
fn exercise(bytes: &[u8]) {
    if let Ok(p) = Packet::decode(bytes, &Limits::default()) {
        let _ = p.items().count();
        let _ = p.is_stop();
        if let Ok(h) = HeapView::from_single_packet(&p) {
            for ptr in h.pointers() {
                let _ = h.value(ptr.id());
            }
            let _ = h.descriptors();
        }
    }
    let _ = spead::Descriptor::decode(bytes);
    let mut asm = HeapAssembler::new(Limits::default(), 2, Arc::new(RejectCounters::new()));
    let _ = asm.add_datagram(bytes, &mut |_| {});
    let _ = asm.add_datagram(bytes, &mut |_| {});
    asm.flush(&mut |_| {});
}

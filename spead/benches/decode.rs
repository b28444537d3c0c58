//! Receive-path rates on one core, from datagrams already in memory (no sockets):
//! - `decode`: `Packet::decode` of digitiser packets plus the timestamp lookup (packets/s);
//! - `chunk/digitiser`: decode + placement + copy into 4096-heap chunks of 5120-byte single-packet
//!   heaps (the engine's input);
//! - `chunk/digitiser_cached`: the same with 64-heap chunks that stay in cache (the assembler's
//!   own cost, without DRAM bandwidth);
//! - `chunk/feng`: the same for 16 KiB F-engine heaps in two 8 KiB packets (the harness);
//! - `heaps/feng`: the general `HeapAssembler` on the same F-engine packets.
//!
//! Throughput is reported per packet for `decode`, in bytes of payload for the others.

use std::cell::Cell;
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use spead::assemble::HeapAssembler;
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::packet::{encode, ItemPointer, Limits, Packet, PACKET_HEADER_BYTES};
use spead::{items, HeapItem, HeapWriter, Reject, RejectCounters};

const DIG_HEAP: usize = 5120;
const DIG_SAMPLES: u64 = 4096;
const DIG_SLOTS: usize = 4096;
const FENG_HEAP: usize = 16 << 10;
const FENG_PACKET: usize = 8192;
const FENG_SLOTS: usize = 16;

fn digitiser_packet(t: u64) -> Vec<u8> {
    let pointers = [
        ItemPointer::immediate(items::HEAP_CNT, t / DIG_SAMPLES),
        ItemPointer::immediate(items::HEAP_SIZE, DIG_HEAP as u64),
        ItemPointer::immediate(items::HEAP_OFFSET, 0),
        ItemPointer::immediate(items::PAYLOAD_LENGTH, DIG_HEAP as u64),
        ItemPointer::immediate(items::TIMESTAMP, t),
        ItemPointer::immediate(items::DIGITISER_ID, 0),
        ItemPointer::immediate(items::DIGITISER_STATUS, 0),
        ItemPointer::addressed(items::ADC_SAMPLES, 0),
    ];
    let mut buf = vec![0u8; PACKET_HEADER_BYTES + DIG_HEAP];
    encode(&mut buf, &pointers, &[0x11; DIG_HEAP]).unwrap();
    buf
}

fn feng_packets(heaps: u64) -> Vec<Vec<u8>> {
    let data = vec![0x22u8; FENG_HEAP];
    let mut out = Vec::new();
    for k in 0..heaps {
        let items = [
            HeapItem::immediate(items::TIMESTAMP, k * 2 * 4096 * 256),
            HeapItem::immediate(items::FENG_ID, 0),
            HeapItem::immediate(items::FREQUENCY, 0),
            HeapItem::addressed(items::FENG_RAW, &data),
        ];
        HeapWriter::new(FENG_PACKET).write(k, &items, |p| out.push(p.to_vec()));
    }
    out
}

/// Feeds `packets` (whose heap `k` maps to chunk `k / slots`, slot `k % slots`) to a chunk
/// assembler once per iteration; each iteration shifts chunk ids forward so the window moves.
fn bench_chunks(
    c: &mut Criterion,
    name: &str,
    cfg: ChunkConfig,
    packets: &[Vec<u8>],
    heap_of: fn(&Packet) -> Option<u64>,
) {
    let limits = Limits::default();
    let mut g = c.benchmark_group("chunk");
    let payload: usize = packets.iter().map(|p| p.len() - PACKET_HEADER_BYTES).sum();
    g.throughput(Throughput::Bytes(payload as u64));
    let chunks_per_round =
        (packets.len() / cfg.slots / cfg.slot_bytes.div_ceil(cfg.packet_payload)).max(1) as u64;
    g.bench_function(name, |b| {
        let mut asm = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
        for _ in 0..=cfg.window {
            asm.give(vec![0u8; cfg.slots * cfg.slot_bytes]).unwrap();
        }
        let base = Cell::new(0u64);
        let slots = cfg.slots as u64;
        let place = |p: &Packet| -> Result<Placement, Reject> {
            let k = heap_of(p).ok_or(Reject::MissingMandatoryItem)?;
            Ok(Placement {
                chunk: base.get() + k / slots,
                slot: (k % slots) as usize,
            })
        };
        let mut ready = Vec::with_capacity(4);
        b.iter(|| {
            for raw in packets {
                let _ = asm.add_datagram(raw, &limits, place, &mut |e| ready.push(e));
                for e in ready.drain(..) {
                    if let ChunkEvent::Ready(c) = e {
                        asm.recycle(c);
                    }
                }
            }
            base.set(base.get() + chunks_per_round);
        });
        assert_eq!(asm.counters().total(), 0, "every packet placed");
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let digitiser: Vec<Vec<u8>> = (0..DIG_SLOTS as u64 * 2)
        .map(|k| digitiser_packet(k * DIG_SAMPLES))
        .collect();

    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(digitiser.len() as u64));
    g.bench_function("digitiser", |b| {
        b.iter(|| {
            digitiser
                .iter()
                .map(|p| {
                    Packet::decode(black_box(p), &limits)
                        .map_or(0, |p| p.immediate(items::TIMESTAMP).unwrap_or(0))
                })
                .sum::<u64>()
        })
    });
    g.finish();

    let dig_cfg = ChunkConfig {
        slots: DIG_SLOTS,
        slot_bytes: DIG_HEAP,
        packet_payload: DIG_HEAP,
        window: 2,
        max_jump: 1 << 40,
    };
    bench_chunks(c, "digitiser", dig_cfg, &digitiser, |p| {
        p.immediate(items::TIMESTAMP).map(|t| t / DIG_SAMPLES)
    });
    // Small chunks that stay in cache: the assembler's own cost per packet, not DRAM's.
    let small_cfg = ChunkConfig {
        slots: 64,
        ..dig_cfg
    };
    bench_chunks(c, "digitiser_cached", small_cfg, &digitiser[..128], |p| {
        p.immediate(items::TIMESTAMP).map(|t| t / DIG_SAMPLES)
    });

    let feng = feng_packets(FENG_SLOTS as u64 * 8);
    let feng_cfg = ChunkConfig {
        slots: FENG_SLOTS,
        slot_bytes: FENG_HEAP,
        packet_payload: FENG_PACKET,
        window: 2,
        max_jump: 1 << 40,
    };
    bench_chunks(c, "feng", feng_cfg, &feng, |p| {
        p.immediate(items::TIMESTAMP).map(|t| t / (2 * 4096 * 256))
    });

    let mut g = c.benchmark_group("heaps");
    g.throughput(Throughput::Bytes((feng.len() * FENG_PACKET) as u64));
    g.bench_function("feng", |b| {
        let mut asm = HeapAssembler::new(limits, 4, Arc::new(RejectCounters::new()));
        let mut round = 0u64;
        let mut patched = feng.clone();
        b.iter(|| {
            // Fresh heap counters each round (a repeated counter would be a duplicate).
            round += 1;
            for raw in &mut patched {
                let cnt = Packet::decode(raw, &limits).unwrap().heap_cnt;
                let next = (cnt & 0xffff) | (round << 16);
                spead::packet::patch_pointer(raw, 0, ItemPointer::immediate(items::HEAP_CNT, next));
                asm.add_datagram(raw, &mut |e| {
                    black_box(e);
                })
                .unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

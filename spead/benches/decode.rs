//! Decode and chunk-assembly rates of digitiser packets (one core).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::packet::{encode, ItemPointer, Limits, Packet};
use spead::{items, Reject, RejectCounters};

const HEAP: usize = 5120;
const SLOTS: usize = 256;

fn digitiser_packet(t: u64) -> Vec<u8> {
    let pointers = [
        ItemPointer::immediate(items::HEAP_CNT, t / 4096),
        ItemPointer::immediate(items::HEAP_SIZE, HEAP as u64),
        ItemPointer::immediate(items::HEAP_OFFSET, 0),
        ItemPointer::immediate(items::PAYLOAD_LENGTH, HEAP as u64),
        ItemPointer::immediate(items::TIMESTAMP, t),
        ItemPointer::immediate(items::DIGITISER_ID, 0),
        ItemPointer::immediate(items::DIGITISER_STATUS, 0),
        ItemPointer::addressed(items::ADC_SAMPLES, 0),
    ];
    let mut buf = vec![0u8; 72 + HEAP];
    encode(&mut buf, &pointers, &[0x11; HEAP]).unwrap();
    buf
}

fn bench(c: &mut Criterion) {
    let packets: Vec<Vec<u8>> = (0..SLOTS as u64 * 4).map(|k| digitiser_packet(k * 4096)).collect();
    let limits = Limits::default();
    let mut g = c.benchmark_group("digitiser");
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.bench_function("decode", |b| {
        b.iter(|| {
            packets
                .iter()
                .map(|p| Packet::decode(p, &limits).unwrap().immediate(items::TIMESTAMP).unwrap())
                .sum::<u64>()
        })
    });
    g.throughput(Throughput::Bytes((packets.len() * HEAP) as u64));
    g.bench_function("decode+chunk", |b| {
        let cfg = ChunkConfig { slots: SLOTS, slot_bytes: HEAP, packet_payload: HEAP, window: 2, max_jump: 1 << 40 };
        let mut asm = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
        for _ in 0..4 {
            asm.give(vec![0u8; SLOTS * HEAP]);
        }
        let place = |p: &Packet| -> Result<Placement, Reject> {
            let t = p.immediate(items::TIMESTAMP).ok_or(Reject::MissingMandatoryItem)?;
            let heap = t / 4096;
            Ok(Placement { chunk: heap / SLOTS as u64, slot: (heap % SLOTS as u64) as usize })
        };
        let mut base = 0u64;
        b.iter(|| {
            let mut ready = Vec::new();
            for p in &packets {
                // Shift timestamps each round so the window keeps moving forward.
                let mut raw = p.clone();
                let t = u64::from_be_bytes(raw[40..48].try_into().unwrap()) & ((1 << 48) - 1);
                spead::packet::patch_pointer(&mut raw, 4, ItemPointer::immediate(items::TIMESTAMP, t + base));
                let packet = Packet::decode(&raw, &limits).unwrap();
                asm.add_packet(&packet, place, &mut |e| ready.push(e)).unwrap();
            }
            base += (packets.len() as u64) * 4096;
            for e in ready {
                if let ChunkEvent::Ready(c) = e {
                    asm.give(c.into_data());
                }
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

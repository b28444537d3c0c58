//! A sequence of datagrams (split from the input at 0xff 0xfe markers) fed to both assemblers:
//! nothing may panic, and a chunk's presence flags stay consistent with its size.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use spead::assemble::HeapAssembler;
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::{items, Limits, Packet, Reject, RejectCounters};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_packet: 9200, max_heap: 1 << 16 };
    let mut heaps = HeapAssembler::new(limits, 3, Arc::new(RejectCounters::new()));
    let cfg = ChunkConfig { slots: 4, slot_bytes: 64, packet_payload: 32, window: 2, max_jump: 8 };
    let mut chunks = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
    for _ in 0..3 {
        chunks.give(vec![0u8; 256]);
    }
    let place = |p: &Packet| -> Result<Placement, Reject> {
        let t = p.immediate(items::TIMESTAMP).ok_or(Reject::MissingMandatoryItem)?;
        Ok(Placement { chunk: t / 4, slot: (t % 4) as usize })
    };
    let mut recycle = Vec::new();
    for datagram in data.split(|&b| b == 0xff).filter(|d| !d.is_empty()) {
        let _ = heaps.add_datagram(datagram, &mut |_| {});
        if let Ok(p) = Packet::decode(datagram, &limits) {
            let _ = chunks.add_packet(&p, place, &mut |e| {
                if let ChunkEvent::Ready(c) = e {
                    assert_eq!(c.present.len(), 4);
                    recycle.push(c.into_data());
                }
            });
        }
        for buf in recycle.drain(..) {
            chunks.give(buf);
        }
    }
    heaps.flush(&mut |_| {});
    chunks.flush(&mut |_| {});
});

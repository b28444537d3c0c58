//! Golden bytes: one digitiser packet and one F-engine output packet written out by hand from
//! docs/wire-formats.md, checked against our encoder and decoder byte for byte.

use spead::heap::HeapView;
use spead::packet::{encode, ItemPointer, Limits, Packet};
use spead::{items, samples};

/// Digitiser heap: timestamp 0x1000, pol 1 of antenna 3 (id 7), no saturation, 4096 10-bit samples.
fn digitiser_golden() -> Vec<u8> {
    let mut bytes = vec![
        0x53, 0x04, 0x02, 0x06, 0x00, 0x00, 0x00,
        0x08, // magic, version, widths 2+6, 8 item pointers
        0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // immediate 0x0001 heap counter = 1
        0x80, 0x02, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, // immediate 0x0002 heap size = 5120
        0x80, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // immediate 0x0003 heap offset = 0
        0x80, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14,
        0x00, // immediate 0x0004 payload length = 5120
        0x96, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // immediate 0x1600 timestamp = 4096
        0xb1, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, // immediate 0x3101 digitiser id = 7
        0xb1, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // immediate 0x3102 digitiser status = 0
        0x33, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // addressed 0x3300 raw data at 0
    ];
    // Samples repeat (-1, 1, -512, 511): 11111111 11 | 00000000 01 | 10000000 00 | 01111111 11
    for _ in 0..1024 {
        bytes.extend_from_slice(&[0xff, 0xc0, 0x18, 0x01, 0xff]);
    }
    bytes
}

/// F-engine heap: timestamp 0x20000, F-engine 2, first channel 64, 2 channels x 2 spectra x 2 pols
/// x (re, im) = 16 bytes of payload in one packet.
fn feng_golden() -> Vec<u8> {
    let mut bytes = vec![
        0x53, 0x04, 0x02, 0x06, 0x00, 0x00, 0x00, 0x08, // header, 8 item pointers
        0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, // heap counter = (stream 0 << 40) + feng 2
        0x80, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, // heap size = 16
        0x80, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // heap offset = 0
        0x80, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, // payload length = 16
        0x96, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, // timestamp = 0x20000
        0xc1, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, // immediate 0x4101 F-engine id = 2
        0xc1, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, // immediate 0x4103 frequency = 64
        0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // addressed 0x4300 feng_raw at 0
    ];
    // [channel][spectrum][pol][re, im]: values 1..=8 and their negatives
    bytes.extend_from_slice(&[
        1, 0xff, 2, 0xfe, 3, 0xfd, 4, 0xfc, 5, 0xfb, 6, 0xfa, 7, 0xf9, 0x7f, 0x81,
    ]);
    bytes
}

#[test]
fn digitiser_packet_encodes_byte_for_byte() {
    let samples_in: Vec<i16> = (0..4096).map(|k| [-1, 1, -512, 511][k % 4]).collect();
    let mut payload = vec![0u8; 5120];
    samples::pack(&samples_in, 10, &mut payload);
    let pointers = [
        ItemPointer::immediate(items::HEAP_CNT, 1),
        ItemPointer::immediate(items::HEAP_SIZE, 5120),
        ItemPointer::immediate(items::HEAP_OFFSET, 0),
        ItemPointer::immediate(items::PAYLOAD_LENGTH, 5120),
        ItemPointer::immediate(items::TIMESTAMP, 4096),
        ItemPointer::immediate(items::DIGITISER_ID, 7),
        ItemPointer::immediate(items::DIGITISER_STATUS, 0),
        ItemPointer::addressed(items::ADC_SAMPLES, 0),
    ];
    let mut buf = vec![0u8; 6000];
    let n = encode(&mut buf, &pointers, &payload).unwrap();
    assert_eq!(n, 72 + 5120);
    assert_eq!(buf[..n], digitiser_golden()[..]);
}

#[test]
fn digitiser_packet_decodes() {
    let golden = digitiser_golden();
    let p = Packet::decode(&golden, &Limits::default()).unwrap();
    assert_eq!((p.heap_cnt, p.heap_size, p.heap_offset), (1, Some(5120), 0));
    assert_eq!(p.immediate(items::TIMESTAMP), Some(4096));
    assert_eq!(p.immediate(items::DIGITISER_ID), Some(7));
    assert_eq!(p.immediate(items::DIGITISER_STATUS), Some(0));
    let heap = HeapView::from_single_packet(&p).unwrap();
    let raw = heap.value(items::ADC_SAMPLES).unwrap();
    let mut out = vec![0i16; 4096];
    samples::unpack(raw, 10, 0, &mut out);
    assert!(out.chunks(4).all(|c| c == [-1, 1, -512, 511]));
}

#[test]
fn feng_packet_round_trips() {
    let golden = feng_golden();
    let payload: Vec<u8> = golden[72..].to_vec();
    let pointers = [
        ItemPointer::immediate(items::HEAP_CNT, 2),
        ItemPointer::immediate(items::HEAP_SIZE, 16),
        ItemPointer::immediate(items::HEAP_OFFSET, 0),
        ItemPointer::immediate(items::PAYLOAD_LENGTH, 16),
        ItemPointer::immediate(items::TIMESTAMP, 0x20000),
        ItemPointer::immediate(items::FENG_ID, 2),
        ItemPointer::immediate(items::FREQUENCY, 64),
        ItemPointer::addressed(items::FENG_RAW, 0),
    ];
    let mut buf = vec![0u8; 200];
    let n = encode(&mut buf, &pointers, &payload).unwrap();
    assert_eq!(buf[..n], golden[..]);
    let p = Packet::decode(&golden, &Limits::default()).unwrap();
    assert_eq!(p.immediate(items::FENG_ID), Some(2));
    assert_eq!(p.immediate(items::FREQUENCY), Some(64));
    let heap = HeapView::from_single_packet(&p).unwrap();
    let raw: Vec<i8> = heap
        .value(items::FENG_RAW)
        .unwrap()
        .iter()
        .map(|&b| b as i8)
        .collect();
    assert_eq!(
        raw,
        vec![1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 127, -127]
    );
}

/// The sender's path (HeapWriter, pointers in the wire-format order) gives the same bytes.
#[test]
fn heap_writer_produces_the_golden_packets() {
    let golden = digitiser_golden();
    let mut sent = Vec::new();
    spead::HeapWriter::new(8192).write(
        1,
        &[
            spead::HeapItem::immediate(items::TIMESTAMP, 4096),
            spead::HeapItem::immediate(items::DIGITISER_ID, 7),
            spead::HeapItem::immediate(items::DIGITISER_STATUS, 0),
            spead::HeapItem::addressed(items::ADC_SAMPLES, &golden[72..]),
        ],
        |p| sent.push(p.to_vec()),
    );
    assert_eq!(sent, vec![golden]);

    let golden = feng_golden();
    let mut sent = Vec::new();
    spead::HeapWriter::new(8192).write(
        2,
        &[
            spead::HeapItem::immediate(items::TIMESTAMP, 0x20000),
            spead::HeapItem::immediate(items::FENG_ID, 2),
            spead::HeapItem::immediate(items::FREQUENCY, 64),
            spead::HeapItem::addressed(items::FENG_RAW, &golden[72..]),
        ],
        |p| sent.push(p.to_vec()),
    );
    assert_eq!(sent, vec![golden]);
}

/// The golden packets go through both assemblers as the engine and harness would use them.
#[test]
fn golden_packets_assemble() {
    use spead::assemble::{Event, HeapAssembler};
    use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
    use std::sync::Arc;

    let golden = digitiser_golden();
    let cfg = ChunkConfig {
        slots: 4,
        slot_bytes: 5120,
        packet_payload: 5120,
        window: 2,
        max_jump: 100,
    };
    let mut chunks = ChunkAssembler::new(cfg, Arc::new(spead::RejectCounters::new()));
    chunks.give(vec![0u8; 4 * 5120]).unwrap();
    let place = |p: &Packet| -> Result<Placement, spead::Reject> {
        let heap = p.immediate(items::TIMESTAMP).unwrap() / 4096;
        Ok(Placement {
            chunk: heap / 4,
            slot: (heap % 4) as usize,
        })
    };
    let mut out = Vec::new();
    chunks
        .add_datagram(&golden, &Limits::default(), place, &mut |e| out.push(e))
        .unwrap();
    chunks.flush(&mut |e| out.push(e));
    let [ChunkEvent::Ready(c)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(
        (c.id, &c.present[..]),
        (0, &[false, true, false, false][..])
    );
    assert_eq!(&c.data[5120..10240], &golden[72..]);

    let mut heaps =
        HeapAssembler::new(Limits::default(), 4, Arc::new(spead::RejectCounters::new()));
    let mut events = Vec::new();
    heaps
        .add_datagram(&feng_golden(), &mut |e| events.push(e))
        .unwrap();
    let [Event::Complete(h)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(h.heap_cnt, 2);
    assert_eq!(h.view().unwrap().immediate(items::FREQUENCY), Some(64));
    assert_eq!(h.payload, feng_golden()[72..]);
}

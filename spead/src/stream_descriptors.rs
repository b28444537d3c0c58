//! The descriptors of our two streams' items, as katgpucbf describes the same items (names,
//! shapes and types; docs/wire-formats.md), and the descriptor heap that carries them: one heap
//! of item 0x5 values and no timestamp, which a spead2 `ItemGroup` turns into the item set.

use crate::descriptor::Descriptor;
use crate::heap::{HeapItem, HeapWriter};
use crate::items;

/// Bits of an immediate item's value in SPEAD-64-48.
const IMMEDIATE_BITS: u16 = 48;

/// The digitiser stream's items: `timestamp`, `digitiser_id`, `digitiser_status` (48-bit
/// unsigned immediates) and `adc_samples`, `heap_samples` signed samples of `sample_bits` bits.
pub fn digitiser(heap_samples: u64, sample_bits: u16) -> Vec<Descriptor> {
    vec![
        Descriptor::unsigned(
            items::TIMESTAMP,
            "timestamp",
            "ADC sample count of the heap's first sample since the sync epoch.",
            IMMEDIATE_BITS,
        ),
        Descriptor::unsigned(
            items::DIGITISER_ID,
            "digitiser_id",
            "Digitiser id: polarisation in bit 0, digitiser index above it.",
            IMMEDIATE_BITS,
        ),
        Descriptor::unsigned(
            items::DIGITISER_STATUS,
            "digitiser_status",
            "Digitiser status: bit 1 set when a sample of the heap saturated, bits 32-47 how many did.",
            IMMEDIATE_BITS,
        ),
        Descriptor::packed(
            items::ADC_SAMPLES,
            "adc_samples",
            "Raw ADC samples, signed, packed most significant bit first.",
            b'i',
            sample_bits,
            &[heap_samples],
        ),
    ]
}

/// The F-engine output's items: `timestamp`, `feng_id`, `frequency` (48-bit unsigned immediates)
/// and `feng_raw`, of shape (channels, spectra, polarisations, real/imaginary): int8 at 8 bits,
/// packed signed `bits`-bit values otherwise (4 bits: one byte per complex value, real part in
/// the high nibble).
pub fn f_engine(channels: u64, spectra: u64, bits: u16) -> Vec<Descriptor> {
    const POLS: u64 = 2;
    const COMPLEX: u64 = 2;
    let shape = [channels, spectra, POLS, COMPLEX];
    let text = "Channelised complex data of both polarisations: (channels, spectra, polarisations, real/imaginary).";
    let raw = if bits == 8 {
        Descriptor::numpy(items::FENG_RAW, "feng_raw", text, "|i1", &shape)
    } else {
        Descriptor::packed(items::FENG_RAW, "feng_raw", text, b'i', bits, &shape)
    };
    vec![
        Descriptor::unsigned(
            items::TIMESTAMP,
            "timestamp",
            "ADC sample count of the heap's first spectrum since the sync epoch.",
            IMMEDIATE_BITS,
        ),
        Descriptor::unsigned(
            items::FENG_ID,
            "feng_id",
            "F-engine (antenna) id.",
            IMMEDIATE_BITS,
        ),
        Descriptor::unsigned(
            items::FREQUENCY,
            "frequency",
            "Index of the heap's first channel.",
            IMMEDIATE_BITS,
        ),
        raw,
    ]
}

/// Calls `emit` with each packet of a descriptor heap of `descriptors`, heap counter `heap_cnt`,
/// in packets of at most `max_payload` bytes of payload.
pub fn write_heap(
    descriptors: &[Descriptor],
    heap_cnt: u64,
    max_payload: usize,
    emit: impl FnMut(&[u8]),
) {
    let encoded: Vec<Vec<u8>> = descriptors.iter().map(Descriptor::encode).collect();
    let heap_items: Vec<HeapItem> = encoded
        .iter()
        .map(|e| HeapItem::addressed(items::DESCRIPTOR, e))
        .collect();
    HeapWriter::new(max_payload).write(heap_cnt, &heap_items, emit);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::{Event, HeapAssembler};
    use crate::packet::{Limits, Packet};
    use crate::reject::RejectCounters;
    use std::sync::Arc;

    /// Assembles what `write_heap` emits and reads the descriptors back.
    fn round_trip(ds: &[Descriptor], max_payload: usize) -> (usize, Vec<Descriptor>) {
        let mut packets = Vec::new();
        write_heap(ds, 5, max_payload, |p| packets.push(p.to_vec()));
        let mut asm = HeapAssembler::new(Limits::default(), 4, Arc::new(RejectCounters::new()));
        let mut got = Vec::new();
        for p in &packets {
            let decoded = Packet::decode(p, &Limits::default()).unwrap();
            assert!(decoded.carries_descriptors());
            assert_eq!(decoded.immediate(items::TIMESTAMP), None);
            asm.add_datagram(p, &mut |e| {
                if let Event::Complete(h) = e {
                    got = h.view().unwrap().descriptors();
                }
            })
            .unwrap();
        }
        (packets.len(), got)
    }

    #[test]
    fn the_digitiser_heap_is_one_packet_of_four_descriptors() {
        let ds = digitiser(4096, 10);
        let (packets, got) = round_trip(&ds, 8192);
        assert_eq!((packets, &got), (1, &ds));
        let names: Vec<String> = ds.iter().map(|d| d.name.clone()).collect();
        assert_eq!(
            names,
            [
                "timestamp",
                "digitiser_id",
                "digitiser_status",
                "adc_samples"
            ]
        );
    }

    #[test]
    fn feng_raw_is_int8_at_8_bits_and_packed_at_4() {
        let eight = &f_engine(64, 256, 8)[3];
        assert_eq!(eight.shape, [64, 256, 2, 2]);
        assert!(eight.dtype.as_deref().unwrap().contains("'|i1'"));
        let four = &f_engine(64, 256, 4)[3];
        assert_eq!(
            (four.shape.as_slice(), four.format.as_slice()),
            (&[64, 256, 2, 2][..], &[(b'i', 4)][..])
        );
        assert_eq!(four.dtype, None);
        // A small payload splits the heap; it still reassembles whole.
        let ds = f_engine(64, 256, 8);
        let (packets, got) = round_trip(&ds, 128);
        assert!(packets > 1);
        assert_eq!(got, ds);
    }
}

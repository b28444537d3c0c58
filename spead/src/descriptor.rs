//! Item descriptors (item 0x5): each is an embedded SPEAD packet naming an item and giving its
//! shape and type, so that a generic receiver such as spead2 can decode our heaps.
//!
//! Field widths follow spead2 without bug-compatibility flags: a format entry is a type character
//! and a 16-bit width (1 + id bytes), a shape entry a flag byte and a 48-bit size.

use crate::heap::{HeapItem, HeapWriter};
use crate::items;
use crate::packet::{Limits, Packet};
use crate::reject::Reject;

/// What a generic receiver needs to decode one item: its name, shape and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// The item id it describes.
    pub id: u16,
    /// The item's name, as spead2 exposes it (`timestamp`, `feng_raw`).
    pub name: String,
    /// A sentence for people reading the stream.
    pub description: String,
    /// Dimensions; empty for a scalar.
    pub shape: Vec<u64>,
    /// spead2 format: (type code, bits), e.g. `('u', 48)`. Ignored by receivers when `dtype` is set.
    pub format: Vec<(u8, u16)>,
    /// A numpy header (`{'descr': '|i1', 'fortran_order': False, 'shape': (4, 2), }`).
    pub dtype: Option<String>,
}

impl Descriptor {
    /// An unsigned immediate of `bits` bits (timestamps, ids).
    pub fn unsigned(id: u16, name: &str, description: &str, bits: u16) -> Self {
        Self {
            id,
            name: name.into(),
            description: description.into(),
            shape: vec![],
            format: vec![(b'u', bits)],
            dtype: None,
        }
    }

    /// An array of `bits`-bit values of spead2 type `code` (`b'i'` signed, `b'u'` unsigned),
    /// packed back to back most significant bit first: how spead2 describes widths that no numpy
    /// dtype has, such as 10-bit digitiser samples.
    pub fn packed(
        id: u16,
        name: &str,
        description: &str,
        code: u8,
        bits: u16,
        shape: &[u64],
    ) -> Self {
        Self {
            id,
            name: name.into(),
            description: description.into(),
            shape: shape.to_vec(),
            format: vec![(code, bits)],
            dtype: None,
        }
    }

    /// An array described by a numpy dtype string such as `|i1` or `>i2`.
    pub fn numpy(id: u16, name: &str, description: &str, descr: &str, shape: &[u64]) -> Self {
        let dims = match shape {
            [one] => format!("({one},)"),
            _ => format!(
                "({})",
                shape
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Self {
            id,
            name: name.into(),
            description: description.into(),
            shape: shape.to_vec(),
            format: vec![],
            dtype: Some(format!(
                "{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}"
            )),
        }
    }

    /// The embedded packet: a one-packet heap with counter 1.
    pub fn encode(&self) -> Vec<u8> {
        let format: Vec<u8> = self
            .format
            .iter()
            .flat_map(|&(c, bits)| [c, (bits >> 8) as u8, bits as u8])
            .collect();
        let mut shape = Vec::with_capacity(self.shape.len() * 7);
        for &d in &self.shape {
            shape.push(0u8); // not variable-sized
            shape.extend_from_slice(&d.to_be_bytes()[2..]);
        }
        let mut items = vec![
            HeapItem::immediate(items::DESCRIPTOR_ID, self.id as u64),
            HeapItem::addressed(items::DESCRIPTOR_NAME, self.name.as_bytes()),
            HeapItem::addressed(items::DESCRIPTOR_DESCRIPTION, self.description.as_bytes()),
            HeapItem::addressed(items::DESCRIPTOR_FORMAT, &format),
            HeapItem::addressed(items::DESCRIPTOR_SHAPE, &shape),
        ];
        if let Some(dtype) = &self.dtype {
            items.push(HeapItem::addressed(
                items::DESCRIPTOR_DTYPE,
                dtype.as_bytes(),
            ));
        }
        let writer = HeapWriter::new(usize::MAX / 2);
        let mut out = Vec::new();
        writer.write(1, &items, |p| out.extend_from_slice(p));
        out
    }

    /// Decodes an embedded descriptor packet.
    pub fn decode(bytes: &[u8]) -> Result<Self, Reject> {
        let limits = Limits {
            max_packet: bytes.len(),
            max_heap: bytes.len() as u64,
        };
        let packet = Packet::decode(bytes, &limits)?;
        if packet.heap_offset != 0 {
            return Err(Reject::MissingMandatoryItem);
        }
        let id = packet
            .immediate(items::DESCRIPTOR_ID)
            .ok_or(Reject::MissingMandatoryItem)? as u16;
        let heap = crate::heap::HeapView::from_single_packet(&packet)?;
        let text = |item| {
            heap.value(item)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        let format = heap
            .value(items::DESCRIPTOR_FORMAT)
            .unwrap_or(&[])
            .chunks_exact(3)
            .map(|f| (f[0], u16::from_be_bytes([f[1], f[2]])))
            .collect();
        let shape = heap
            .value(items::DESCRIPTOR_SHAPE)
            .unwrap_or(&[])
            .chunks_exact(7)
            .map(|f| {
                let mut b = [0u8; 8];
                b[2..].copy_from_slice(&f[1..]);
                u64::from_be_bytes(b)
            })
            .collect();
        let dtype = heap
            .value(items::DESCRIPTOR_DTYPE)
            .map(|b| String::from_utf8_lossy(b).into_owned());
        Ok(Self {
            id,
            name: text(items::DESCRIPTOR_NAME),
            description: text(items::DESCRIPTOR_DESCRIPTION),
            shape,
            format,
            dtype,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_numpy_and_format() {
        for d in [
            Descriptor::numpy(
                items::FENG_RAW,
                "feng_raw",
                "Channelised data",
                "|i1",
                &[64, 256, 2, 2],
            ),
            Descriptor::numpy(0x1234, "one", "1-d", ">i2", &[5]),
            Descriptor::unsigned(items::TIMESTAMP, "timestamp", "ADC sample count", 48),
            Descriptor::packed(
                items::ADC_SAMPLES,
                "adc_samples",
                "10-bit",
                b'i',
                10,
                &[4096],
            ),
        ] {
            assert_eq!(Descriptor::decode(&d.encode()).unwrap(), d);
        }
    }

    #[test]
    fn numpy_header_is_a_python_dict() {
        let d = Descriptor::numpy(1, "x", "", "|i1", &[3]);
        assert_eq!(
            d.dtype.unwrap(),
            "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }"
        );
    }

    /// Found by fuzzing: a descriptor whose fields are all empty read the heap's padding back
    /// as its shape.
    #[test]
    fn empty_fields_round_trip() {
        let d = Descriptor {
            id: 16,
            name: String::new(),
            description: String::new(),
            shape: vec![],
            format: vec![],
            dtype: None,
        };
        assert_eq!(Descriptor::decode(&d.encode()).unwrap(), d);
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(Descriptor::decode(&[0x53, 4, 2, 6, 0, 0, 0, 0]).is_err());
        assert!(Descriptor::decode(&[]).is_err());
    }
}

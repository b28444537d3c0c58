//! Heaps: the items of one heap, split into packets for sending ([`HeapWriter`]), and read back
//! from a complete heap's payload ([`HeapView`]).

use crate::items;
use crate::packet::{self, ItemPointer, Packet, MAX_VALUE};
use crate::reject::Reject;

/// One item of a heap being sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapItem<'a> {
    /// A value carried in the item pointer itself (at most 48 bits).
    Immediate {
        /// The item id.
        id: u16,
        /// The value.
        value: u64,
    },
    /// A value carried in the heap's payload; the pointer holds its address.
    Addressed {
        /// The item id.
        id: u16,
        /// The bytes placed in the payload.
        value: &'a [u8],
    },
}

impl<'a> HeapItem<'a> {
    /// An item whose value travels in its pointer.
    pub fn immediate(id: u16, value: u64) -> Self {
        Self::Immediate { id, value }
    }
    /// An item whose bytes travel in the payload.
    pub fn addressed(id: u16, value: &'a [u8]) -> Self {
        Self::Addressed { id, value }
    }
}

/// Splits heaps into packets of at most `max_payload` payload bytes, repeating every item pointer
/// in every packet (as katgpucbf does, so any packet tells the heap's timestamp).
#[derive(Clone, Copy, Debug)]
pub struct HeapWriter {
    max_payload: usize,
}

/// Payload sent for a heap with no payload: spead2 gives every packet some payload, and marks
/// where the padding starts with a null item (id 0) so that it is not read as the last item's
/// value.
const EMPTY_HEAP_PADDING: usize = 8;

impl HeapWriter {
    /// A writer for packets of at most `max_payload` payload bytes (0 is raised to 1).
    pub fn new(max_payload: usize) -> Self {
        Self {
            max_payload: max_payload.max(1),
        }
    }

    /// Calls `emit` with each packet of the heap in order. The buffer passed to `emit` is reused.
    pub fn write(&self, heap_cnt: u64, items: &[HeapItem], mut emit: impl FnMut(&[u8])) {
        let mut pointers = vec![
            ItemPointer::immediate(items::HEAP_CNT, heap_cnt),
            ItemPointer::immediate(items::HEAP_SIZE, 0),
            ItemPointer::immediate(items::HEAP_OFFSET, 0),
            ItemPointer::immediate(items::PAYLOAD_LENGTH, 0),
        ];
        let mut payload = Vec::new();
        for item in items {
            match *item {
                HeapItem::Immediate { id, value } => {
                    pointers.push(ItemPointer::immediate(id, value))
                }
                HeapItem::Addressed { id, value } => {
                    pointers.push(ItemPointer::addressed(id, payload.len() as u64));
                    payload.extend_from_slice(value);
                }
            }
        }
        if payload.is_empty() {
            pointers.push(ItemPointer::addressed(items::NULL, 0));
            payload.resize(EMPTY_HEAP_PADDING, 0);
        }
        let heap_size = (payload.len() as u64).min(MAX_VALUE);
        pointers[1] = ItemPointer::immediate(items::HEAP_SIZE, heap_size);
        let mut buf =
            vec![0u8; packet::packet_size(pointers.len(), self.max_payload.min(payload.len()))];
        for (i, part) in payload.chunks(self.max_payload).enumerate() {
            let offset = (i * self.max_payload) as u64;
            pointers[2] = ItemPointer::immediate(items::HEAP_OFFSET, offset);
            pointers[3] = ItemPointer::immediate(items::PAYLOAD_LENGTH, part.len() as u64);
            let n = packet::encode(&mut buf, &pointers, part)
                .expect("buffer sized for the largest packet");
            emit(&buf[..n]);
        }
    }
}

/// A complete heap: its item pointers and its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapView<'a> {
    /// The heap's counter, unique within the stream.
    pub heap_cnt: u64,
    pointers: Vec<ItemPointer>,
    payload: &'a [u8],
}

impl<'a> HeapView<'a> {
    /// A heap assembled elsewhere: `pointers` are the item pointers of any of its packets.
    /// Rejects addressed items pointing past the payload.
    pub fn new(
        heap_cnt: u64,
        pointers: Vec<ItemPointer>,
        payload: &'a [u8],
    ) -> Result<Self, Reject> {
        if pointers
            .iter()
            .any(|p| !p.is_immediate() && p.value() > payload.len() as u64)
        {
            return Err(Reject::BadItemAddress);
        }
        Ok(Self {
            heap_cnt,
            pointers,
            payload,
        })
    }

    /// A heap that arrived whole in one packet.
    pub fn from_single_packet(packet: &Packet<'a>) -> Result<Self, Reject> {
        if packet.heap_offset != 0
            || packet
                .heap_size
                .is_some_and(|s| s != packet.payload.len() as u64)
        {
            return Err(Reject::WrongHeapSize);
        }
        Self::new(packet.heap_cnt, packet.items().collect(), packet.payload)
    }

    /// Item pointers other than the per-packet standard ones.
    pub fn pointers(&self) -> &[ItemPointer] {
        &self.pointers
    }

    /// The heap's bytes, which its addressed items point into.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The value of immediate item `id`, if the heap has one.
    pub fn immediate(&self, id: u16) -> Option<u64> {
        self.pointers
            .iter()
            .find(|p| p.id() == id && p.is_immediate())
            .map(|p| p.value())
    }

    /// An addressed item's bytes: from its address to the next address in (address, pointer
    /// order), or the heap's end. Items sharing an address (an empty one first) resolve as spead2's
    /// stable sort does.
    pub fn value(&self, id: u16) -> Option<&'a [u8]> {
        let index = self
            .pointers
            .iter()
            .position(|p| p.id() == id && !p.is_immediate())?;
        self.extent(index)
    }

    fn extent(&self, index: usize) -> Option<&'a [u8]> {
        let key = |i: usize| (self.pointers[i].value(), i);
        let start = key(index);
        let end = (0..self.pointers.len())
            .filter(|&i| !self.pointers[i].is_immediate() && key(i) > start)
            .map(key)
            .min()
            .map_or(self.payload.len() as u64, |(addr, _)| addr);
        self.payload.get(start.0 as usize..end as usize)
    }

    /// Descriptors carried by this heap (several items may share the descriptor id).
    pub fn descriptors(&self) -> Vec<crate::descriptor::Descriptor> {
        (0..self.pointers.len())
            .filter(|&i| {
                self.pointers[i].id() == items::DESCRIPTOR && !self.pointers[i].is_immediate()
            })
            .filter_map(|i| crate::descriptor::Descriptor::decode(self.extent(i)?).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Limits;

    #[test]
    fn writer_splits_and_repeats_pointers() {
        let data: Vec<u8> = (0..100u8).collect();
        let items = [
            HeapItem::immediate(items::TIMESTAMP, 99),
            HeapItem::addressed(items::FENG_RAW, &data),
        ];
        let mut packets = Vec::new();
        HeapWriter::new(32).write(5, &items, |p| packets.push(p.to_vec()));
        assert_eq!(packets.len(), 4);
        let mut payload = vec![0u8; 100];
        for raw in &packets {
            let p = Packet::decode(raw, &Limits::default()).unwrap();
            assert_eq!(p.heap_cnt, 5);
            assert_eq!(p.heap_size, Some(100));
            assert_eq!(p.immediate(items::TIMESTAMP), Some(99));
            let at = p.heap_offset as usize;
            payload[at..at + p.payload.len()].copy_from_slice(p.payload);
        }
        assert_eq!(payload, data);
    }

    #[test]
    fn view_finds_item_extents() {
        let a = [1u8, 2, 3];
        let b = [9u8; 5];
        let items = [
            HeapItem::addressed(0x1000, &a),
            HeapItem::addressed(0x1001, &b),
            HeapItem::immediate(0x1002, 7),
        ];
        let mut raw = Vec::new();
        HeapWriter::new(1000).write(1, &items, |p| raw = p.to_vec());
        let p = Packet::decode(&raw, &Limits::default()).unwrap();
        let h = HeapView::from_single_packet(&p).unwrap();
        assert_eq!(h.value(0x1000), Some(&a[..]));
        assert_eq!(h.value(0x1001), Some(&b[..]));
        assert_eq!(h.immediate(0x1002), Some(7));
        assert_eq!(h.value(0x1003), None);
    }

    #[test]
    fn padding_of_an_empty_heap_is_no_item_value() {
        let items = [
            HeapItem::addressed(0x1000, &[]),
            HeapItem::immediate(0x1001, 5),
        ];
        let mut raw = Vec::new();
        HeapWriter::new(1000).write(1, &items, |p| raw = p.to_vec());
        let p = Packet::decode(&raw, &Limits::default()).unwrap();
        assert_eq!(p.payload.len(), EMPTY_HEAP_PADDING);
        let h = HeapView::from_single_packet(&p).unwrap();
        assert_eq!(h.value(0x1000), Some(&[][..]));
        assert_eq!(h.immediate(0x1001), Some(5));
    }

    #[test]
    fn bad_address_rejected() {
        let ptrs = vec![ItemPointer::addressed(0x1000, 50)];
        assert_eq!(
            HeapView::new(1, ptrs, &[0; 10]).unwrap_err(),
            Reject::BadItemAddress
        );
    }
}

//! SPEAD-64-48 packets: decode (zero-copy, borrowing the datagram) and encode.
//!
//! Layout: an 8-byte header (`0x53 0x04 0x02 0x06 0x00 0x00` + 16-bit item count), then 8-byte
//! big-endian item pointers (1 immediate bit, 15-bit id, 48-bit value or address), then payload.

use crate::items;
use crate::reject::Reject;

/// The first byte of every SPEAD packet ('S').
pub const MAGIC: u8 = 0x53;
/// The protocol version the header's second byte must carry.
pub const VERSION: u8 = 4;
/// Bytes of the item id field (with the immediate bit): 64 - 48 bits.
pub const ITEM_POINTER_WIDTH: u8 = 2;
/// Bytes of the value / address field.
pub const HEAP_ADDRESS_WIDTH: u8 = 6;
/// Bytes of the packet header, which ends with the item count.
pub const HEADER_SIZE: usize = 8;
/// Bytes of one item pointer on the wire.
pub const ITEM_POINTER_SIZE: usize = 8;
/// Largest immediate value or address (48 bits).
pub const MAX_VALUE: u64 = (1 << 48) - 1;
/// Largest item id (15 bits).
pub const MAX_ID: u16 = 0x7fff;

const IMMEDIATE_BIT: u64 = 1 << 63;

/// One item pointer: immediate flag, id and 48-bit value (immediate) or address (in the heap).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ItemPointer(pub u64);

impl ItemPointer {
    /// An immediate item; the value is truncated to 48 bits (callers check with [`MAX_VALUE`]).
    pub const fn immediate(id: u16, value: u64) -> Self {
        Self(IMMEDIATE_BIT | ((id as u64 & MAX_ID as u64) << 48) | (value & MAX_VALUE))
    }
    /// An addressed item whose value starts `address` bytes into the heap payload.
    pub const fn addressed(id: u16, address: u64) -> Self {
        Self(((id as u64 & MAX_ID as u64) << 48) | (address & MAX_VALUE))
    }
    /// True when the value is carried in the pointer rather than in the payload.
    pub const fn is_immediate(self) -> bool {
        self.0 & IMMEDIATE_BIT != 0
    }
    /// The item id (15 bits).
    pub const fn id(self) -> u16 {
        ((self.0 >> 48) & MAX_ID as u64) as u16
    }
    /// The immediate value, or the address of an addressed item.
    pub const fn value(self) -> u64 {
        self.0 & MAX_VALUE
    }
    /// The pointer as it travels on the wire (big-endian).
    pub const fn to_be_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }
}

impl std::fmt::Debug for ItemPointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_immediate() { "imm" } else { "addr" };
        write!(
            f,
            "ItemPointer({:#06x} {kind} {:#x})",
            self.id(),
            self.value()
        )
    }
}

/// What a receiver accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest datagram accepted.
    pub max_packet: usize,
    /// Largest heap size accepted.
    pub max_heap: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_packet: 9200,
            max_heap: 64 << 20,
        }
    }
}

/// A decoded packet borrowing its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Counter of the heap the packet belongs to.
    pub heap_cnt: u64,
    /// Declared heap size, when the packet carries one.
    pub heap_size: Option<u64>,
    /// Where the packet's payload starts in the heap's payload.
    pub heap_offset: u64,
    /// Every item pointer of the packet, standard ones included, as raw bytes (8 each).
    pointers: &'a [u8],
    /// This packet's part of the heap's payload.
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Decodes and validates one datagram. Never panics; every rejection has its reason.
    pub fn decode(datagram: &'a [u8], limits: &Limits) -> Result<Self, Reject> {
        if datagram.len() < HEADER_SIZE {
            return Err(Reject::TooShort);
        }
        if datagram.len() > limits.max_packet {
            return Err(Reject::TooLong);
        }
        if datagram[0] != MAGIC {
            return Err(Reject::BadMagic);
        }
        if datagram[1] != VERSION {
            return Err(Reject::BadVersion);
        }
        if datagram[2] != ITEM_POINTER_WIDTH || datagram[3] != HEAP_ADDRESS_WIDTH {
            return Err(Reject::BadFlavour);
        }
        let n_items = u16::from_be_bytes([datagram[6], datagram[7]]) as usize;
        let items_end = HEADER_SIZE + n_items * ITEM_POINTER_SIZE;
        if items_end > datagram.len() {
            return Err(Reject::ItemsPastEnd);
        }
        let pointers = &datagram[HEADER_SIZE..items_end];
        let (mut heap_cnt, mut heap_size, mut heap_offset, mut payload_len) =
            (None, None, None, None);
        for p in iter_pointers(pointers) {
            let slot = match p.id() {
                items::HEAP_CNT => &mut heap_cnt,
                items::HEAP_SIZE => &mut heap_size,
                items::HEAP_OFFSET => &mut heap_offset,
                items::PAYLOAD_LENGTH => &mut payload_len,
                _ => continue,
            };
            if !p.is_immediate() {
                return Err(Reject::MissingStandardItem);
            }
            *slot = Some(p.value());
        }
        let (Some(heap_cnt), Some(heap_offset), Some(payload_len)) =
            (heap_cnt, heap_offset, payload_len)
        else {
            return Err(Reject::MissingStandardItem);
        };
        let payload = &datagram[items_end..];
        if payload_len != payload.len() as u64 {
            return Err(Reject::PayloadLengthMismatch);
        }
        if let Some(size) = heap_size {
            if size > limits.max_heap {
                return Err(Reject::HeapTooLarge);
            }
            if heap_offset + payload_len > size {
                return Err(Reject::PayloadPastHeap);
            }
        } else if heap_offset + payload_len > limits.max_heap {
            return Err(Reject::HeapTooLarge);
        }
        Ok(Self {
            heap_cnt,
            heap_size,
            heap_offset,
            pointers,
            payload,
        })
    }

    /// All item pointers in packet order, standard items included.
    pub fn pointers(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        iter_pointers(self.pointers)
    }

    /// Item pointers other than the four per-packet standard ones.
    pub fn items(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        self.pointers().filter(|p| {
            !matches!(
                p.id(),
                items::HEAP_CNT | items::HEAP_SIZE | items::HEAP_OFFSET | items::PAYLOAD_LENGTH
            )
        })
    }

    /// The first item pointer with this id.
    pub fn item(&self, id: u16) -> Option<ItemPointer> {
        self.pointers().find(|p| p.id() == id)
    }

    /// The value of an immediate item.
    pub fn immediate(&self, id: u16) -> Option<u64> {
        self.item(id)
            .filter(|p| p.is_immediate())
            .map(|p| p.value())
    }

    /// True for a stream-control stop packet.
    pub fn is_stop(&self) -> bool {
        self.immediate(items::STREAM_CTRL) == Some(items::STREAM_CTRL_STOP)
    }

    /// True when the packet carries item descriptors (item 0x5), as a descriptor heap's packets
    /// do.
    pub fn carries_descriptors(&self) -> bool {
        self.item(items::DESCRIPTOR).is_some()
    }

    /// How many item pointers the packet carries, standard ones included.
    pub fn n_pointers(&self) -> usize {
        self.pointers.len() / ITEM_POINTER_SIZE
    }
}

fn iter_pointers(raw: &[u8]) -> impl Iterator<Item = ItemPointer> + '_ {
    raw.chunks_exact(ITEM_POINTER_SIZE).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        ItemPointer(u64::from_be_bytes(b))
    })
}

/// Why a packet could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer is shorter than the packet.
    #[error("buffer of {have} bytes cannot hold a {need}-byte packet")]
    BufferTooSmall {
        /// Bytes the packet takes.
        need: usize,
        /// Bytes the buffer has.
        have: usize,
    },
    /// More item pointers than the header's 16-bit count can say.
    #[error("{0} item pointers do not fit the 16-bit count")]
    TooManyItems(usize),
}

/// Item pointers in every packet of our wire formats, digitiser and F-engine alike
/// (docs/wire-formats.md): heap counter, size, offset, payload length, timestamp, source id and
/// two items of the format's own.
pub const WIRE_ITEM_POINTERS: usize = 8;
/// Bytes before the payload of every packet of our wire formats: the 8-byte header and
/// [`WIRE_ITEM_POINTERS`] item pointers, 72.
pub const PACKET_HEADER_BYTES: usize = packet_size(WIRE_ITEM_POINTERS, 0);

/// Bytes a packet with `n_pointers` item pointers and `payload` bytes takes.
pub const fn packet_size(n_pointers: usize, payload: usize) -> usize {
    HEADER_SIZE + n_pointers * ITEM_POINTER_SIZE + payload
}

/// Writes the 8-byte header and the item pointers; returns the bytes written.
pub fn write_header(buf: &mut [u8], pointers: &[ItemPointer]) -> Result<usize, EncodeError> {
    let need = packet_size(pointers.len(), 0);
    if pointers.len() > u16::MAX as usize {
        return Err(EncodeError::TooManyItems(pointers.len()));
    }
    if buf.len() < need {
        return Err(EncodeError::BufferTooSmall {
            need,
            have: buf.len(),
        });
    }
    let n = (pointers.len() as u16).to_be_bytes();
    buf[..HEADER_SIZE].copy_from_slice(&[
        MAGIC,
        VERSION,
        ITEM_POINTER_WIDTH,
        HEAP_ADDRESS_WIDTH,
        0,
        0,
        n[0],
        n[1],
    ]);
    for (chunk, p) in buf[HEADER_SIZE..need]
        .chunks_exact_mut(ITEM_POINTER_SIZE)
        .zip(pointers)
    {
        chunk.copy_from_slice(&p.to_be_bytes());
    }
    Ok(need)
}

/// Writes a whole packet: header, `pointers` (the caller includes heap counter, size, offset and
/// payload length), then `payload`. Returns the bytes written.
pub fn encode(
    buf: &mut [u8],
    pointers: &[ItemPointer],
    payload: &[u8],
) -> Result<usize, EncodeError> {
    let need = packet_size(pointers.len(), payload.len());
    if buf.len() < need {
        return Err(EncodeError::BufferTooSmall {
            need,
            have: buf.len(),
        });
    }
    let at = write_header(buf, pointers)?;
    buf[at..need].copy_from_slice(payload);
    Ok(need)
}

/// Rewrites the value of the item pointer at `index` in an encoded packet (a packet template reused
/// for every heap: only the counter, timestamp and offsets change).
pub fn patch_pointer(packet: &mut [u8], index: usize, pointer: ItemPointer) {
    let at = HEADER_SIZE + index * ITEM_POINTER_SIZE;
    packet[at..at + ITEM_POINTER_SIZE].copy_from_slice(&pointer.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_packets_carry_a_72_byte_header() {
        assert_eq!(PACKET_HEADER_BYTES, 72);
    }

    fn pointers(payload: u64) -> Vec<ItemPointer> {
        vec![
            ItemPointer::immediate(items::HEAP_CNT, 7),
            ItemPointer::immediate(items::HEAP_SIZE, 16),
            ItemPointer::immediate(items::HEAP_OFFSET, 0),
            ItemPointer::immediate(items::PAYLOAD_LENGTH, payload),
            ItemPointer::immediate(items::TIMESTAMP, 0x1234_5678_9abc),
            ItemPointer::addressed(items::ADC_SAMPLES, 0),
        ]
    }

    fn good() -> Vec<u8> {
        let mut buf = vec![0u8; 128];
        let n = encode(&mut buf, &pointers(16), &[0xa5; 16]).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn round_trip() {
        let buf = good();
        let p = Packet::decode(&buf, &Limits::default()).unwrap();
        assert_eq!(p.heap_cnt, 7);
        assert_eq!(p.heap_size, Some(16));
        assert_eq!(p.heap_offset, 0);
        assert_eq!(p.payload, &[0xa5; 16]);
        assert_eq!(p.immediate(items::TIMESTAMP), Some(0x1234_5678_9abc));
        assert_eq!(
            p.item(items::ADC_SAMPLES),
            Some(ItemPointer::addressed(items::ADC_SAMPLES, 0))
        );
        assert_eq!(p.items().count(), 2);
        assert!(!p.is_stop());
        assert!(!p.carries_descriptors());
    }

    #[test]
    fn item_pointer_fields() {
        let p = ItemPointer::immediate(0x7fff, MAX_VALUE);
        assert!(p.is_immediate());
        assert_eq!((p.id(), p.value()), (0x7fff, MAX_VALUE));
        let a = ItemPointer::addressed(0x4300, 12);
        assert!(!a.is_immediate());
        assert_eq!((a.id(), a.value()), (0x4300, 12));
    }

    fn reject(buf: &[u8]) -> Reject {
        Packet::decode(
            buf,
            &Limits {
                max_packet: 100,
                max_heap: 1000,
            },
        )
        .unwrap_err()
    }

    #[test]
    fn too_short() {
        assert_eq!(reject(&good()[..7]), Reject::TooShort);
    }

    #[test]
    fn too_long() {
        let mut b = good();
        b.resize(101, 0);
        assert_eq!(reject(&b), Reject::TooLong);
    }

    #[test]
    fn bad_magic() {
        let mut b = good();
        b[0] = 0x54;
        assert_eq!(reject(&b), Reject::BadMagic);
    }

    #[test]
    fn bad_version() {
        let mut b = good();
        b[1] = 3;
        assert_eq!(reject(&b), Reject::BadVersion);
    }

    #[test]
    fn bad_flavour() {
        let mut b = good();
        b[2] = 3;
        b[3] = 5;
        assert_eq!(reject(&b), Reject::BadFlavour);
        let mut b = good();
        b[3] = 0;
        assert_eq!(reject(&b), Reject::BadFlavour);
    }

    #[test]
    fn items_past_end() {
        let mut b = good();
        b[7] = 200;
        assert_eq!(reject(&b), Reject::ItemsPastEnd);
    }

    #[test]
    fn missing_or_addressed_standard_item() {
        for missing in [items::HEAP_CNT, items::HEAP_OFFSET, items::PAYLOAD_LENGTH] {
            let ptrs: Vec<_> = pointers(16)
                .into_iter()
                .filter(|p| p.id() != missing)
                .collect();
            let mut buf = vec![0u8; 128];
            let n = encode(&mut buf, &ptrs, &[1; 16]).unwrap();
            assert_eq!(
                reject(&buf[..n]),
                Reject::MissingStandardItem,
                "without {missing:#x}"
            );
        }
        let mut ptrs = pointers(16);
        ptrs[0] = ItemPointer::addressed(items::HEAP_CNT, 7);
        let mut buf = vec![0u8; 128];
        let n = encode(&mut buf, &ptrs, &[1; 16]).unwrap();
        assert_eq!(reject(&buf[..n]), Reject::MissingStandardItem);
    }

    #[test]
    fn payload_length_mismatch() {
        let mut b = good();
        b.pop();
        assert_eq!(reject(&b), Reject::PayloadLengthMismatch);
    }

    #[test]
    fn payload_past_heap() {
        let mut ptrs = pointers(16);
        ptrs[2] = ItemPointer::immediate(items::HEAP_OFFSET, 8);
        let mut buf = vec![0u8; 128];
        let n = encode(&mut buf, &ptrs, &[1; 16]).unwrap();
        assert_eq!(reject(&buf[..n]), Reject::PayloadPastHeap);
    }

    #[test]
    fn heap_too_large() {
        let mut ptrs = pointers(16);
        ptrs[1] = ItemPointer::immediate(items::HEAP_SIZE, 1001);
        let mut buf = vec![0u8; 128];
        let n = encode(&mut buf, &ptrs, &[1; 16]).unwrap();
        assert_eq!(reject(&buf[..n]), Reject::HeapTooLarge);
    }

    #[test]
    fn encode_errors() {
        let mut small = [0u8; 20];
        assert!(matches!(
            encode(&mut small, &pointers(16), &[0; 16]),
            Err(EncodeError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn patch_pointer_rewrites_in_place() {
        let mut b = good();
        patch_pointer(&mut b, 4, ItemPointer::immediate(items::TIMESTAMP, 42));
        let p = Packet::decode(&b, &Limits::default()).unwrap();
        assert_eq!(p.immediate(items::TIMESTAMP), Some(42));
    }
}

//! The repeating packet buffer of one polarisation: every heap of the signal, already packed and
//! wrapped in its packet, so sending is a header patch and a syscall, never signal work.
//!
//! The buffer is cut into *slots*, one per send batch of `batch` consecutive heaps. Heap k belongs
//! to batch k / batch, which uses slot (k / batch) mod slots and is sent by thread
//! (k / batch) mod threads; slots are a multiple of threads, so each thread owns its slots outright
//! and patches them without locks. Heap k goes to destination group k mod groups; inside a slot
//! the packets are stored group by group, so each group's packets of a batch are contiguous and
//! leave in one GSO send.

use spead::items;
use spead::packet::{self, ItemPointer, PACKET_HEADER_BYTES};
use spead::transport::MAX_UDP_PAYLOAD;

use crate::config::{packet_bytes, BadRequest};
use crate::signal::Generator;

/// Item pointer indices in every packet (patched per send: counter and timestamp).
pub const PTR_HEAP_CNT: usize = 0;
pub const PTR_TIMESTAMP: usize = 4;
const N_POINTERS: usize = 8;

/// How heaps map onto slots, threads and destination groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub heap_samples: usize,
    pub bits: u32,
    pub payload_bytes: usize,
    pub packet_bytes: usize,
    /// Destination groups.
    pub groups: usize,
    /// Heaps per group in one batch (what fits one GSO send).
    pub run: usize,
    /// Heaps per batch: groups * run, so every batch starts on group 0.
    pub batch: usize,
    pub threads: usize,
    /// Heaps in the buffer: a multiple of batch * threads.
    pub buffer_heaps: usize,
}

impl Layout {
    pub fn new(
        heap_samples: usize,
        bits: u32,
        groups: usize,
        threads: usize,
        buffer_heaps: usize,
    ) -> Result<Self, BadRequest> {
        let packet_bytes = packet_bytes(heap_samples, bits);
        if packet_bytes > MAX_UDP_PAYLOAD {
            return Err(BadRequest(format!(
                "a {packet_bytes}-byte packet does not fit a UDP datagram."
            )));
        }
        let groups = groups.max(1);
        let threads = threads.max(1);
        let run = (MAX_UDP_PAYLOAD / packet_bytes).max(1);
        let batch = groups * run;
        let unit = batch * threads;
        let buffer_heaps = buffer_heaps.max(1).div_ceil(unit) * unit;
        Ok(Self {
            heap_samples,
            bits,
            payload_bytes: packet_bytes - PACKET_HEADER_BYTES,
            packet_bytes,
            groups,
            run,
            batch,
            threads,
            buffer_heaps,
        })
    }

    pub fn slots(&self) -> usize {
        self.buffer_heaps / self.batch
    }

    /// Slots each thread owns.
    pub fn slots_per_thread(&self) -> usize {
        self.slots() / self.threads
    }

    /// Samples in one period of the buffer.
    pub fn period(&self) -> u64 {
        (self.buffer_heaps * self.heap_samples) as u64
    }

    /// Where heap `i` of a batch (0..batch) sits in its slot: grouped by destination.
    pub fn position(&self, i: usize) -> usize {
        (i % self.groups) * self.run + i / self.groups
    }

    /// The batch a heap belongs to, and the thread that sends it.
    pub fn batch_of(&self, heap: u64) -> u64 {
        heap / self.batch as u64
    }

    pub fn thread_of(&self, batch: u64) -> usize {
        (batch % self.threads as u64) as usize
    }

    /// Index into the owning thread's slots for a batch.
    pub fn local_slot(&self, batch: u64) -> usize {
        (batch % self.slots() as u64) as usize / self.threads
    }
}

/// One batch's packets, ready but for heap counter and timestamp.
pub struct Slot {
    /// `batch` packets of `packet_bytes`, stored in [`Layout::position`] order.
    pub bytes: Vec<u8>,
    /// Saturated samples of each heap, by heap index within the batch.
    pub saturated: Vec<u32>,
}

/// Bit of the digitiser status item set when a sample of the heap saturated (the digitiser ICD,
/// M1000-0001-053, as katgpucbf reads and writes it).
pub const STATUS_SATURATED_BIT: u32 = 1;
/// The status item's bits 32-47 hold how many samples of the heap saturated.
pub const STATUS_COUNT_SHIFT: u32 = 32;

/// Digitiser status item: bit 1 = any saturation, bits 32-47 = saturated sample count (at most
/// 65535), every other bit 0.
pub fn digitiser_status(saturated: u32) -> u64 {
    if saturated == 0 {
        0
    } else {
        (1 << STATUS_SATURATED_BIT) | ((saturated.min(0xffff) as u64) << STATUS_COUNT_SHIFT)
    }
}

fn template_pointers(layout: &Layout, digitiser_id: u64, status: u64) -> [ItemPointer; N_POINTERS] {
    let payload = layout.payload_bytes as u64;
    [
        ItemPointer::immediate(items::HEAP_CNT, 0),
        ItemPointer::immediate(items::HEAP_SIZE, payload),
        ItemPointer::immediate(items::HEAP_OFFSET, 0),
        ItemPointer::immediate(items::PAYLOAD_LENGTH, payload),
        ItemPointer::immediate(items::TIMESTAMP, 0),
        ItemPointer::immediate(items::DIGITISER_ID, digitiser_id),
        ItemPointer::immediate(items::DIGITISER_STATUS, status),
        ItemPointer::addressed(items::ADC_SAMPLES, 0),
    ]
}

/// Builds slot `s` (buffer heaps s*batch ..) of one polarisation.
pub fn build_slot(layout: &Layout, generator: &Generator, digitiser_id: u64, s: usize) -> Slot {
    let mut bytes = vec![0u8; layout.batch * layout.packet_bytes];
    let mut saturated = vec![0u32; layout.batch];
    let mut samples = vec![0i16; layout.heap_samples];
    let mut scratch = crate::signal::Scratch::default();
    for (i, sat) in saturated.iter_mut().enumerate() {
        let h = (s * layout.batch + i) as u64;
        *sat = generator.heap_with(h, &mut samples, &mut scratch);
        let at = layout.position(i) * layout.packet_bytes;
        let packet = &mut bytes[at..at + layout.packet_bytes];
        let ptrs = template_pointers(layout, digitiser_id, digitiser_status(*sat));
        let n = packet::write_header(packet, &ptrs).expect("slot sized for the header");
        spead::samples::pack(&samples, layout.bits, &mut packet[n..]);
    }
    Slot { bytes, saturated }
}

/// Builds every slot of one polarisation on `workers` threads, dealt out per sender thread:
/// `result[j]` are thread j's slots in [`Layout::local_slot`] order.
pub fn build_all(
    layout: &Layout,
    generator: &Generator,
    digitiser_id: u64,
    workers: usize,
) -> Vec<Vec<Slot>> {
    let n = layout.slots();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut built: Vec<(usize, Slot)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers.clamp(1, n))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let s = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if s >= n {
                            return mine;
                        }
                        mine.push((s, build_slot(layout, generator, digitiser_id, s)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("slot builder panicked"))
            .collect()
    });
    built.sort_by_key(|(s, _)| *s);
    let mut per_thread: Vec<Vec<Slot>> = (0..layout.threads).map(|_| Vec::new()).collect();
    // Slot s belongs to thread s mod threads, at local index s / threads: sorted order fills it.
    for (s, slot) in built {
        per_thread[s % layout.threads].push(slot);
    }
    per_thread
}

/// Writes heap `heap`'s counter and timestamp into its packet.
pub fn patch(packet: &mut [u8], heap: u64, heap_samples: usize) {
    packet::patch_pointer(
        packet,
        PTR_HEAP_CNT,
        ItemPointer::immediate(items::HEAP_CNT, heap),
    );
    packet::patch_pointer(
        packet,
        PTR_TIMESTAMP,
        ItemPointer::immediate(items::TIMESTAMP, heap * heap_samples as u64),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Signal, SignalSpec};
    use spead::packet::{Limits, Packet};

    #[test]
    fn layout_rounds_and_groups() {
        let l = Layout::new(4096, 10, 4, 3, 1000).unwrap();
        assert_eq!(l.packet_bytes, 5192);
        assert_eq!(l.run, 12);
        assert_eq!(l.batch, 48);
        assert_eq!(l.buffer_heaps % (48 * 3), 0);
        assert!(l.buffer_heaps >= 1000);
        // Positions are a permutation, grouped by destination.
        let mut seen: Vec<usize> = (0..l.batch).map(|i| l.position(i)).collect();
        assert_eq!(l.position(0), 0);
        assert_eq!(l.position(4), 1);
        assert_eq!(l.position(1), 12);
        seen.sort();
        assert_eq!(seen, (0..l.batch).collect::<Vec<_>>());
        // Every batch maps onto a slot of the thread that sends it.
        for b in 0..1000u64 {
            assert!(l.local_slot(b) < l.slots_per_thread());
            assert_eq!((b % l.slots() as u64) as usize % l.threads, l.thread_of(b));
        }
    }

    #[test]
    fn slots_hold_valid_packets() {
        let l = Layout::new(256, 10, 2, 2, 10).unwrap();
        let signal = Signal::from_common(&SignalSpec::default());
        let g = Generator::new(&signal, 1e6, 1, 256, 10, l.period());
        let slots = build_all(&l, &g, 5 * 2 + 1, 2);
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[0].len(), l.slots_per_thread());
        let mut slot = build_slot(&l, &g, 11, 1);
        assert_eq!(slot.bytes, slots[1][0].bytes);
        let at = l.position(3) * l.packet_bytes;
        let pkt = &mut slot.bytes[at..at + l.packet_bytes];
        patch(pkt, 77, 256);
        let p = Packet::decode(pkt, &Limits::default()).unwrap();
        assert_eq!(p.heap_cnt, 77);
        assert_eq!(p.immediate(items::TIMESTAMP), Some(77 * 256));
        assert_eq!(p.immediate(items::DIGITISER_ID), Some(11));
        assert_eq!(p.payload.len(), 320);
        let mut want = vec![0i16; 256];
        g.heap((l.batch + 3) as u64, &mut want);
        let mut got = vec![0i16; 256];
        spead::samples::unpack(p.payload, 10, 0, &mut got);
        assert_eq!(got, want);
    }

    #[test]
    fn status_item_bits() {
        assert_eq!(digitiser_status(0), 0);
        assert_eq!(digitiser_status(1), 0b10 | (1 << 32));
        assert_eq!(digitiser_status(3), 0b10 | (3 << 32));
        assert_eq!(digitiser_status(0xffff), 0b10 | (0xffff << 32));
        // The count saturates at 16 bits and never spills into bit 48.
        assert_eq!(digitiser_status(1 << 20), 0b10 | (0xffff << 32));
        // Bit 0 stays clear: the ICD's flag is bit 1.
        assert_eq!(digitiser_status(7) & 1, 0);
    }
}

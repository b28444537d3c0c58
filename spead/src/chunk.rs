//! The hot-path receiver: heaps written straight into caller-owned chunk memory (spead2's chunk
//! stream). The caller maps each packet to a (chunk, slot); the payload is copied to
//! `slot * slot_bytes + heap_offset` of that chunk's buffer, and the slot is marked present once all
//! its bytes have arrived. No allocation per packet, nor per chunk when chunks are handed back with
//! [`recycle`]: buffers come from [`give`], and a packet that finds none is dropped and counted.
//!
//! ```
//! use std::sync::Arc;
//! use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
//! use spead::{items, HeapItem, HeapWriter, Limits, Packet, Reject, RejectCounters};
//!
//! // Chunks of 4 single-packet heaps of 16 bytes; heap t goes to chunk t / 4, slot t % 4.
//! let cfg = ChunkConfig { slots: 4, slot_bytes: 16, packet_payload: 16, window: 2, max_jump: 100 };
//! let mut asm = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
//! for _ in 0..3 {
//!     asm.give(vec![0u8; 4 * 16]); // window + 1 buffers: the consumer holds one while it works
//! }
//! let place = |p: &Packet| -> Result<Placement, Reject> {
//!     let t = p.immediate(items::TIMESTAMP).ok_or(Reject::MissingMandatoryItem)?;
//!     Ok(Placement { chunk: t / 4, slot: (t % 4) as usize })
//! };
//! let mut ready = Vec::new();
//! for t in [0u64, 1, 3, 4, 5, 6, 7, 9] {
//!     let data = [t as u8; 16];
//!     let items = [HeapItem::immediate(items::TIMESTAMP, t), HeapItem::addressed(0x3300, &data)];
//!     HeapWriter::new(16).write(t, &items, |datagram| {
//!         let _ = asm.add_datagram(datagram, &Limits::default(), place, &mut |e| ready.push(e));
//!     });
//! }
//! asm.flush(&mut |e| ready.push(e));
//! let ChunkEvent::Ready(first) = ready.remove(0) else { unreachable!() };
//! assert_eq!((first.id, &first.present[..]), (0, &[true, true, false, true][..]));
//! assert_eq!(&first.data[16..32], &[1u8; 16]);
//! asm.recycle(first); // buffer and flags back to the free list, nothing allocated
//! ```
//!
//! [`give`]: ChunkAssembler::give
//! [`recycle`]: ChunkAssembler::recycle

use std::collections::VecDeque;
use std::ops::DerefMut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::packet::{Limits, Packet};
use crate::reject::{Reject, RejectCounters};

mod window;
pub use window::{Admit, Window};

/// The shape of a chunk stream: how many heaps of what size make a chunk, and how far the window
/// reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Heaps per chunk.
    pub slots: usize,
    /// Bytes of every heap (a heap of another size is rejected).
    pub slot_bytes: usize,
    /// Payload bytes of every packet but a heap's last (the sender's packet size): a packet's
    /// offset names its place in the slot, which is how duplicates are told apart.
    pub packet_payload: usize,
    /// Chunks being filled at once; a packet older than the oldest is too old.
    pub window: usize,
    /// A packet more than this many chunks ahead of the window, or behind it, means the sender
    /// restarted (a digitiser restarted with a new sync epoch counts from zero again): everything
    /// live is flushed and the window starts again at the new chunk.
    pub max_jump: u64,
}

/// Where a heap goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Id of the chunk the heap belongs to.
    pub chunk: u64,
    /// Index of the heap's slot inside that chunk.
    pub slot: usize,
}

/// Memory that payloads are written into. Any `DerefMut<Target = [u8]>` buffer is one; a receiver
/// that splits a stream over threads implements it for a view that writes only its own slots.
pub trait ChunkMemory {
    /// Bytes the memory holds.
    fn size(&self) -> usize;
    /// Copies `bytes` to `offset`; the assembler only asks for ranges inside `size`.
    fn write(&mut self, offset: usize, bytes: &[u8]);
}

impl<T: DerefMut<Target = [u8]>> ChunkMemory for T {
    fn size(&self) -> usize {
        self.len()
    }
    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

/// Memory that keeps nothing: a `ChunkAssembler<Discard>` is the count-only mode of the
/// assembler. It applies every rule (window, duplicates, alignment, completeness) and reports
/// which heaps of each chunk arrived whole, without copying a byte: for receivers that only
/// count heaps (the harness's max-rate trials). Give it as many `Discard`s as a copying
/// assembler would get buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discard;

impl ChunkMemory for Discard {
    /// Any chunk fits: nothing is stored.
    fn size(&self) -> usize {
        usize::MAX
    }
    fn write(&mut self, _offset: usize, _bytes: &[u8]) {}
}

/// A filled (or partly filled) chunk.
#[derive(Debug)]
pub struct Chunk<B> {
    /// The chunk's id, as the caller's placement named it.
    pub id: u64,
    /// `slots * slot_bytes` bytes (or more) as given; bytes of slots not present are stale.
    pub data: B,
    /// One flag per slot: its whole heap arrived.
    pub present: Vec<bool>,
    /// Per-slot tracking while the chunk is live; empty once emitted.
    track: Tracking,
}

impl<B> Chunk<B> {
    /// A chunk made outside an assembler (by a consumer merging the chunks of several).
    pub fn new(id: u64, data: B, present: Vec<bool>) -> Self {
        Self {
            id,
            data,
            present,
            track: Tracking::default(),
        }
    }
    /// How many of its heaps arrived whole.
    pub fn present_count(&self) -> usize {
        self.present.iter().filter(|&&p| p).count()
    }
    /// Takes the buffer back (prefer [`ChunkAssembler::recycle`], which keeps the flags too).
    pub fn into_data(self) -> B {
        self.data
    }
}

/// Which packets of each slot arrived, and how many bytes.
#[derive(Debug, Default)]
struct Tracking {
    /// One bit per (slot, packet index): a second copy of a packet is a duplicate.
    seen: Vec<u64>,
    bytes: Vec<u64>,
}

/// What the assembler hands out.
#[derive(Debug)]
pub enum ChunkEvent<B> {
    /// A chunk left the window. Chunk ids that never received a packet are not emitted: a consumer
    /// sees the gap in ids.
    Ready(Chunk<B>),
    /// The stream jumped (a restart): chunks before `to` were flushed, `to` opens the new window.
    Resync {
        /// The window's oldest chunk id before the jump.
        from: u64,
        /// The chunk id that made the jump, now the window's first.
        to: u64,
    },
}

/// Totals of one assembler, written only by it and readable from other threads.
#[derive(Debug, Default)]
pub struct ChunkStats {
    /// Packets offered, rejected ones included.
    pub packets: AtomicU64,
    /// Payload bytes written into chunks.
    pub bytes: AtomicU64,
    /// Heaps (slots) completed.
    pub heaps: AtomicU64,
    /// Chunks emitted.
    pub chunks: AtomicU64,
    /// Packets for chunks already emitted.
    pub too_old: AtomicU64,
    /// Restarts seen (each one a [`ChunkEvent::Resync`]).
    pub resyncs: AtomicU64,
    /// Packets dropped because no free chunk buffer was available.
    pub no_buffer: AtomicU64,
}

/// Adds to a counter that has a single writer: a plain load and store, no locked instruction on
/// the per-packet path. Readers see a recent value.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// Writes the packets of a stream into chunk buffers of type `B` and hands out each chunk as it
/// leaves the window (see the module comment).
pub struct ChunkAssembler<B> {
    cfg: ChunkConfig,
    packets_per_slot: usize,
    /// Live chunks in id order (ids need not be contiguous).
    live: VecDeque<Chunk<B>>,
    /// Which chunk ids are accepted.
    window: Window,
    free: Vec<B>,
    /// Recycled flag vectors, so that opening a chunk does not allocate.
    spare_present: Vec<Vec<bool>>,
    spare_track: Vec<Tracking>,
    counters: Arc<RejectCounters>,
    stats: Arc<ChunkStats>,
}

impl<B: ChunkMemory> ChunkAssembler<B> {
    /// Zero sizes are raised to 1. `counters` may be shared with other assemblers.
    pub fn new(cfg: ChunkConfig, counters: Arc<RejectCounters>) -> Self {
        let slot_bytes = cfg.slot_bytes.max(1);
        let cfg = ChunkConfig {
            slots: cfg.slots.max(1),
            window: cfg.window.max(1),
            packet_payload: cfg.packet_payload.clamp(1, slot_bytes),
            slot_bytes,
            ..cfg
        };
        Self {
            cfg,
            packets_per_slot: cfg.slot_bytes.div_ceil(cfg.packet_payload),
            live: VecDeque::with_capacity(cfg.window + 1),
            window: Window::new(cfg.window, cfg.max_jump),
            free: Vec::new(),
            spare_present: Vec::new(),
            spare_track: Vec::new(),
            counters,
            stats: Arc::new(ChunkStats::default()),
        }
    }

    /// The configuration in force, zero sizes raised to 1.
    pub fn config(&self) -> &ChunkConfig {
        &self.cfg
    }

    /// Its totals, for readers on other threads.
    pub fn stats(&self) -> &Arc<ChunkStats> {
        &self.stats
    }

    /// The reasons and counts of what it dropped (shared with the assemblers given the same
    /// counters).
    pub fn counters(&self) -> &Arc<RejectCounters> {
        &self.counters
    }

    /// Bytes a buffer must hold: `slots * slot_bytes`.
    pub fn chunk_bytes(&self) -> usize {
        self.cfg.slots.saturating_mul(self.cfg.slot_bytes)
    }

    /// Adds an empty buffer of at least [`chunk_bytes`](Self::chunk_bytes); a smaller one is
    /// returned as the error.
    pub fn give(&mut self, buf: B) -> Result<(), B> {
        if buf.size() < self.chunk_bytes() {
            return Err(buf);
        }
        self.free.push(buf);
        Ok(())
    }

    /// Hands an emitted chunk back: its buffer joins the free list and its flag vector is reused.
    pub fn recycle(&mut self, chunk: Chunk<B>) {
        let data = self.reclaim(chunk);
        self.free.push(data);
    }

    /// Keeps an emitted chunk's flag vector for reuse and returns its buffer (to a consumer that
    /// supplies buffers itself, through [`add_placed`](Self::add_placed)).
    pub fn reclaim(&mut self, chunk: Chunk<B>) -> B {
        self.spare_present.push(chunk.present);
        chunk.data
    }

    /// Oldest chunk id the window accepts (`None` before the first packet).
    pub fn head(&self) -> Option<u64> {
        self.window.head()
    }

    /// Buffers waiting to be filled.
    pub fn free_buffers(&self) -> usize {
        self.free.len()
    }

    /// Decodes a datagram and places it. Rejections (decoding ones included) are counted and
    /// returned.
    pub fn add_datagram(
        &mut self,
        datagram: &[u8],
        limits: &Limits,
        place: impl FnOnce(&Packet) -> Result<Placement, Reject>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<(), Reject> {
        match Packet::decode(datagram, limits) {
            Ok(p) => self.add_packet(&p, place, emit),
            Err(reason) => {
                bump(&self.stats.packets, 1);
                self.counters.count(reason);
                Err(reason)
            }
        }
    }

    /// Places one decoded packet. Rejections are counted; the reason is also returned.
    pub fn add_packet(
        &mut self,
        p: &Packet,
        place: impl FnOnce(&Packet) -> Result<Placement, Reject>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<(), Reject> {
        bump(&self.stats.packets, 1);
        let result = self.place(p, place, None::<fn(u64) -> Result<B, Reject>>, emit);
        if let Err(reason) = result {
            self.counters.count(reason);
        }
        result
    }

    /// Counts a packet the caller refused before placing it (it failed to decode, say).
    pub fn reject(&self, reason: Reject) {
        bump(&self.stats.packets, 1);
        self.counters.count(reason);
    }

    /// Places a packet whose place the caller already decided. A chunk the packet opens takes its
    /// buffer from `open(id)` rather than the free list: that is how several assemblers, one per
    /// receive thread, fill disjoint slots of one shared chunk. Rejections are counted and
    /// returned, `open`'s included.
    pub fn add_placed(
        &mut self,
        p: &Packet,
        at: Placement,
        open: impl FnOnce(u64) -> Result<B, Reject>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<(), Reject> {
        bump(&self.stats.packets, 1);
        let result = self.place(p, |_| Ok(at), Some(open), emit);
        if let Err(reason) = result {
            self.counters.count(reason);
        }
        result
    }

    fn place<O: FnOnce(u64) -> Result<B, Reject>>(
        &mut self,
        p: &Packet,
        place: impl FnOnce(&Packet) -> Result<Placement, Reject>,
        open: Option<O>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<(), Reject> {
        let slot_bytes = self.cfg.slot_bytes;
        if p.heap_size != Some(slot_bytes as u64) {
            return Err(Reject::WrongHeapSize);
        }
        let at = place(p)?;
        if at.slot >= self.cfg.slots {
            return Err(Reject::WrongHeapSize);
        }
        // Decode guarantees offset + len <= heap size (= slot_bytes), so these fit in usize.
        let offset = p.heap_offset as usize;
        let len = p.payload.len();
        // No packet starts at the heap's end: an empty one there would name the next slot's
        // first packet.
        if offset >= slot_bytes {
            return Err(Reject::Misaligned);
        }
        let index = offset / self.cfg.packet_payload;
        let expected_len = self.cfg.packet_payload.min(slot_bytes - offset);
        if index * self.cfg.packet_payload != offset || len != expected_len {
            return Err(Reject::Misaligned);
        }
        let c = self.chunk_index(at.chunk, open, emit)?;
        let chunk = &mut self.live[c];
        let bit = at.slot * self.packets_per_slot + index;
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        if chunk.track.seen[word] & mask != 0 {
            return Err(Reject::Duplicate);
        }
        chunk.track.seen[word] |= mask;
        let start = at.slot * slot_bytes + offset;
        chunk.data.write(start, p.payload);
        let got = &mut chunk.track.bytes[at.slot];
        *got += len as u64;
        if *got == slot_bytes as u64 {
            chunk.present[at.slot] = true;
            bump(&self.stats.heaps, 1);
        }
        bump(&self.stats.bytes, len as u64);
        Ok(())
    }

    /// Finds or opens the live chunk `id`, moving the window forward (or resynchronising) first.
    fn chunk_index<O: FnOnce(u64) -> Result<B, Reject>>(
        &mut self,
        id: u64,
        open: Option<O>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<usize, Reject> {
        match self.window.admit(id) {
            Admit::Inside => {}
            Admit::TooOld => {
                bump(&self.stats.too_old, 1);
                return Err(Reject::TooOld);
            }
            Admit::Advanced { head } => self.emit_before(head, emit),
            Admit::Restart { from, to } => {
                self.flush(emit);
                bump(&self.stats.resyncs, 1);
                emit(ChunkEvent::Resync { from, to });
            }
        }
        let at = self.live.partition_point(|c| c.id < id);
        if self.live.get(at).is_some_and(|c| c.id == id) {
            return Ok(at);
        }
        let data = match open {
            Some(open) => open(id),
            None => self.free.pop().ok_or(Reject::NoBuffer),
        };
        let data = match data {
            Ok(d) => d,
            Err(reason) => {
                if reason == Reject::NoBuffer {
                    bump(&self.stats.no_buffer, 1);
                }
                return Err(reason);
            }
        };
        let mut present = self.spare_present.pop().unwrap_or_default();
        present.clear();
        present.resize(self.cfg.slots, false);
        let mut track = self.spare_track.pop().unwrap_or_default();
        track.seen.clear();
        track
            .seen
            .resize((self.cfg.slots * self.packets_per_slot).div_ceil(64), 0);
        track.bytes.clear();
        track.bytes.resize(self.cfg.slots, 0);
        self.live.insert(
            at,
            Chunk {
                id,
                data,
                present,
                track,
            },
        );
        Ok(at)
    }

    fn emit_chunk(&mut self, mut chunk: Chunk<B>, emit: &mut impl FnMut(ChunkEvent<B>)) {
        bump(&self.stats.chunks, 1);
        // The consumer only needs the presence flags; the tracking vectors stay here for reuse.
        self.spare_track.push(std::mem::take(&mut chunk.track));
        emit(ChunkEvent::Ready(chunk));
    }

    /// Starts the window again at `to` (a restart the caller recognised): every live chunk is
    /// emitted, then a [`ChunkEvent::Resync`].
    pub fn resync(&mut self, to: u64, emit: &mut impl FnMut(ChunkEvent<B>)) {
        self.flush(emit);
        bump(&self.stats.resyncs, 1);
        let from = self.window.restart(to);
        emit(ChunkEvent::Resync { from, to });
    }

    /// Moves the window's start forward to `head`, emitting the live chunks before it (a receive
    /// thread whose share of the stream went quiet keeps pace with the others this way).
    pub fn expire_before(&mut self, head: u64, emit: &mut impl FnMut(ChunkEvent<B>)) {
        if self.window.expire_before(head) {
            self.emit_before(head, emit);
        }
    }

    /// Emits the live chunks older than `head`.
    fn emit_before(&mut self, head: u64, emit: &mut impl FnMut(ChunkEvent<B>)) {
        while self.live.front().is_some_and(|c| c.id < head) {
            let chunk = self.live.pop_front().expect("front exists");
            self.emit_chunk(chunk, emit);
        }
    }

    /// Emits every live chunk (end of stream, or before a resync). The window stays where it is.
    pub fn flush(&mut self, emit: &mut impl FnMut(ChunkEvent<B>)) {
        while let Some(chunk) = self.live.pop_front() {
            self.emit_chunk(chunk, emit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::{HeapItem, HeapWriter};
    use crate::items;

    const SLOT: usize = 32;
    const PKT: usize = 16;

    fn cfg() -> ChunkConfig {
        ChunkConfig {
            slots: 4,
            slot_bytes: SLOT,
            packet_payload: PKT,
            window: 2,
            max_jump: 10,
        }
    }

    /// Packets of the heap with timestamp `t` (slot = t % 4, chunk = t / 4), payload filled with t.
    fn heap(t: u64) -> Vec<Vec<u8>> {
        let data = [t as u8; SLOT];
        let mut out = Vec::new();
        HeapWriter::new(PKT).write(
            t,
            &[
                HeapItem::immediate(items::TIMESTAMP, t),
                HeapItem::addressed(0x3300, &data),
            ],
            |p| out.push(p.to_vec()),
        );
        out
    }

    fn place(p: &Packet) -> Result<Placement, Reject> {
        let t = p
            .immediate(items::TIMESTAMP)
            .ok_or(Reject::MissingMandatoryItem)?;
        Ok(Placement {
            chunk: t / 4,
            slot: (t % 4) as usize,
        })
    }

    type Events = Vec<ChunkEvent<Vec<u8>>>;

    fn feed(asm: &mut ChunkAssembler<Vec<u8>>, datagrams: &[Vec<u8>], out: &mut Events) {
        for d in datagrams {
            let _ = asm.add_datagram(d, &Limits::default(), place, &mut |e| out.push(e));
        }
    }

    fn new_asm(buffers: usize) -> ChunkAssembler<Vec<u8>> {
        let mut a = ChunkAssembler::new(cfg(), Arc::new(RejectCounters::new()));
        for _ in 0..buffers {
            a.give(vec![0xee; 4 * SLOT]).unwrap();
        }
        a
    }

    fn ready(events: Events) -> Vec<Chunk<Vec<u8>>> {
        events
            .into_iter()
            .map(|e| match e {
                ChunkEvent::Ready(c) => c,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn fills_chunks_and_flags_missing_slots() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        // Out of order within the window (the window opens at the first packet's chunk).
        let packets: Vec<Vec<u8>> = [3u64, 0, 6, 1, 7, 5, 4]
            .iter()
            .flat_map(|&t| heap(t).into_iter().rev())
            .collect();
        feed(&mut a, &packets, &mut out);
        a.flush(&mut |e| out.push(e));
        let chunks = ready(out);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].id, 0);
        assert_eq!(chunks[0].present, vec![true, true, false, true]);
        assert_eq!(&chunks[0].data[3 * SLOT..4 * SLOT], &[3u8; SLOT]);
        assert_eq!(chunks[1].present, vec![true; 4]);
        assert_eq!(&chunks[1].data[..SLOT], &[4u8; SLOT]);
        let s = a.stats();
        assert_eq!(s.heaps.load(Ordering::Relaxed), 7);
        assert_eq!(s.packets.load(Ordering::Relaxed), 14);
        assert_eq!(s.bytes.load(Ordering::Relaxed), 7 * SLOT as u64);
        assert_eq!(s.chunks.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn duplicate_counted_not_double_counted() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        let h0 = heap(0);
        // Two copies of the first packet must not complete a two-packet heap.
        feed(&mut a, &[h0[0].clone(), h0[0].clone()], &mut out);
        assert_eq!(a.counters().get(Reject::Duplicate), 1);
        feed(&mut a, &[h0[1].clone(), h0[1].clone()], &mut out);
        assert_eq!(a.counters().get(Reject::Duplicate), 2);
        a.flush(&mut |e| out.push(e));
        let chunks = ready(out);
        assert_eq!(chunks[0].present, [true, false, false, false]);
        assert_eq!(a.stats().heaps.load(Ordering::Relaxed), 1);
        assert_eq!(a.stats().bytes.load(Ordering::Relaxed), SLOT as u64);
    }

    #[test]
    fn missing_packet_leaves_slot_absent() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        feed(&mut a, &heap(0)[..1], &mut out);
        feed(&mut a, &heap(1), &mut out);
        a.flush(&mut |e| out.push(e));
        assert_eq!(ready(out)[0].present, [false, true, false, false]);
    }

    #[test]
    fn too_old() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        feed(&mut a, &heap(0)[..1], &mut out);
        // chunk 3 moves the window to [2, 3]; chunk 0 is emitted and now too old
        feed(&mut a, &heap(12), &mut out);
        feed(&mut a, &heap(1), &mut out);
        assert_eq!(a.counters().get(Reject::TooOld), 2);
        assert_eq!(a.stats().too_old.load(Ordering::Relaxed), 2);
        assert!(matches!(&out[..], [ChunkEvent::Ready(c)] if c.id == 0 && c.present == [false; 4]));
    }

    #[test]
    fn jump_resynchronises() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        feed(&mut a, &heap(0), &mut out);
        feed(&mut a, &heap(1000), &mut out);
        assert!(matches!(out[0], ChunkEvent::Ready(ref c) if c.id == 0));
        assert!(matches!(out[1], ChunkEvent::Resync { from: 0, to: 250 }));
        assert_eq!(a.stats().resyncs.load(Ordering::Relaxed), 1);
        // The new window starts at the new chunk: one before it is too old.
        feed(&mut a, &heap(996), &mut out);
        assert_eq!(a.counters().get(Reject::TooOld), 2);
    }

    #[test]
    fn far_chunk_ids_do_not_overflow() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        let ids = [u64::MAX - 1, u64::MAX, 0, u64::MAX];
        for id in ids {
            let p = &heap(0)[0];
            let p = Packet::decode(p, &Limits::default()).unwrap();
            let _ = a.add_packet(&p, |_| Ok(Placement { chunk: id, slot: 0 }), &mut |e| {
                out.push(e)
            });
        }
        a.flush(&mut |e| out.push(e));
        // 0 after u64::MAX - 1 is a restart, and so is u64::MAX after 0: no overflow, no panic.
        assert_eq!(a.stats().resyncs.load(Ordering::Relaxed), 2);
        assert_eq!(a.counters().get(Reject::TooOld), 0);
    }

    #[test]
    fn backward_jump_resynchronises() {
        // A digitiser restarted with a new epoch: timestamps start again near zero.
        let mut a = new_asm(4);
        let mut out = Vec::new();
        feed(&mut a, &heap(4000), &mut out);
        feed(&mut a, &heap(3996), &mut out);
        // (each heap is two packets)
        assert_eq!(
            a.counters().get(Reject::TooOld),
            2,
            "just behind the window is too old"
        );
        feed(&mut a, &heap(4), &mut out);
        assert_eq!(a.stats().resyncs.load(Ordering::Relaxed), 1);
        assert!(out
            .iter()
            .any(|e| matches!(e, ChunkEvent::Resync { from: 1000, to: 1 })));
        feed(&mut a, &heap(5), &mut out);
        assert_eq!(a.counters().get(Reject::TooOld), 2);
    }

    #[test]
    fn wrong_heap_size() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        let mut other = Vec::new();
        HeapWriter::new(PKT).write(
            1,
            &[
                HeapItem::immediate(items::TIMESTAMP, 1),
                HeapItem::addressed(0x3300, &[1u8; 8]),
            ],
            |p| other.push(p.to_vec()),
        );
        feed(&mut a, &other, &mut out);
        assert_eq!(a.counters().get(Reject::WrongHeapSize), 1);
    }

    #[test]
    fn missing_mandatory_item_from_placement() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        let mut no_timestamp = Vec::new();
        HeapWriter::new(PKT).write(1, &[HeapItem::addressed(0x3300, &[1u8; SLOT])], |p| {
            no_timestamp.push(p.to_vec())
        });
        feed(&mut a, &no_timestamp, &mut out);
        assert_eq!(a.counters().get(Reject::MissingMandatoryItem), 2);
        assert_eq!(a.stats().bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn misaligned_packet() {
        // The same heap cut into 8-byte packets by a sender not using the configured 16.
        let mut a = new_asm(4);
        let mut out = Vec::new();
        let mut small = Vec::new();
        HeapWriter::new(8).write(
            1,
            &[
                HeapItem::immediate(items::TIMESTAMP, 1),
                HeapItem::addressed(0x3300, &[1u8; SLOT]),
            ],
            |p| small.push(p.to_vec()),
        );
        feed(&mut a, &small, &mut out);
        assert_eq!(a.counters().get(Reject::Misaligned), 4);
    }

    #[test]
    fn no_buffer_drops_and_counts() {
        let mut a = new_asm(0);
        let mut out = Vec::new();
        feed(&mut a, &heap(0)[..1], &mut out);
        assert_eq!(a.stats().no_buffer.load(Ordering::Relaxed), 1);
        assert_eq!(a.counters().get(Reject::NoBuffer), 1);
        assert!(a.give(vec![0u8; 4]).is_err(), "too small a buffer");
        a.give(vec![0u8; 4 * SLOT]).unwrap();
        feed(&mut a, &heap(0), &mut out);
        assert_eq!(a.stats().heaps.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn recycled_chunks_are_reused() {
        let mut a = new_asm(1);
        let mut out = Vec::new();
        for t in [0u64, 4, 8, 12] {
            feed(&mut a, &heap(t), &mut out);
            a.flush(&mut |e| out.push(e));
            for c in ready(std::mem::take(&mut out)) {
                assert_eq!(c.present, [true, false, false, false]);
                a.recycle(c);
            }
        }
        assert_eq!(a.free_buffers(), 1);
        assert_eq!(a.counters().total(), 0);
    }

    #[test]
    fn placed_packets_take_buffers_from_the_caller() {
        let mut a = new_asm(0);
        let mut out = Events::new();
        let mut opened = Vec::new();
        for t in [0u64, 1, 5] {
            for d in heap(t) {
                let p = Packet::decode(&d, &Limits::default()).unwrap();
                let at = place(&p).unwrap();
                let _ = a.add_placed(
                    &p,
                    at,
                    |id| {
                        opened.push(id);
                        Ok(vec![0u8; 4 * SLOT])
                    },
                    &mut |e| out.push(e),
                );
            }
        }
        // One buffer per chunk opened, asked for by id; nothing from the (empty) free list.
        assert_eq!(opened, [0, 1]);
        assert_eq!(a.head(), Some(0));
        // The caller's refusal is counted under its reason and the packet dropped.
        let d = &heap(9)[0];
        let p = Packet::decode(d, &Limits::default()).unwrap();
        let r = a.add_placed(&p, place(&p).unwrap(), |_| Err(Reject::TooOld), &mut |e| {
            out.push(e)
        });
        assert_eq!(r, Err(Reject::TooOld));
        assert_eq!(a.counters().get(Reject::TooOld), 1);
        // Chunk 2 opened the window at 1..=2, so chunk 0 left it.
        let done = ready(std::mem::take(&mut out));
        assert_eq!(done.iter().map(|c| c.id).collect::<Vec<_>>(), [0]);
        assert_eq!(&done[0].present[..], &[true, true, false, false]);
    }

    #[test]
    fn count_only_mode_follows_the_same_rules() {
        // Heaps of 100 bytes in packets of 40 (40, 40, 20), one heap per chunk, a window of 2.
        let cfg = ChunkConfig {
            slots: 1,
            slot_bytes: 100,
            packet_payload: 40,
            window: 2,
            max_jump: u64::MAX,
        };
        let mut a = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
        for _ in 0..4 {
            a.give(Discard).unwrap();
        }
        let packets = |id: u64, size: usize| {
            let mut out = Vec::new();
            HeapWriter::new(size).write(id, &[HeapItem::addressed(0x3300, &[1u8; 100])], |p| {
                out.push(p.to_vec())
            });
            out
        };
        let mut out = Vec::new();
        let mut add = |a: &mut ChunkAssembler<Discard>, d: &[u8], id: u64| {
            let at = Placement { chunk: id, slot: 0 };
            a.add_datagram(d, &Limits::default(), |_| Ok(at), &mut |e| out.push(e))
        };
        let h5 = packets(5, 40);
        for d in &h5 {
            add(&mut a, d, 5).unwrap();
        }
        add(&mut a, &packets(6, 40)[0], 6).unwrap();
        assert_eq!(add(&mut a, &h5[1], 5), Err(Reject::Duplicate));
        // A sender cutting 30-byte packets: no packet starts and ends where 40-byte ones do.
        for d in packets(6, 30) {
            assert_eq!(add(&mut a, &d, 6), Err(Reject::Misaligned));
        }
        // Heap 8 moves the window to [7, 8]: 5 (complete) and 6 (not) leave.
        add(&mut a, &packets(8, 40)[0], 8).unwrap();
        assert_eq!(add(&mut a, &packets(6, 40)[1], 6), Err(Reject::TooOld));
        a.flush(&mut |e| out.push(e));
        let released: Vec<(u64, bool)> = out
            .into_iter()
            .map(|e| match e {
                ChunkEvent::Ready(c) => (c.id, c.present[0]),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(released, [(5, true), (6, false), (8, false)]);
        assert_eq!(a.stats().heaps.load(Ordering::Relaxed), 1);
        assert_eq!(a.counters().get(Reject::Misaligned), 4);
    }

    #[test]
    fn explicit_resync_and_expiry() {
        let mut a = new_asm(4);
        let mut out = Events::new();
        feed(&mut a, &heap(40), &mut out); // chunk 10
        a.expire_before(10, &mut |e| out.push(e));
        assert!(out.is_empty(), "the window already starts at 10");
        a.expire_before(11, &mut |e| out.push(e));
        assert_eq!(ready(std::mem::take(&mut out))[0].id, 10);
        assert_eq!(a.head(), Some(11));
        feed(&mut a, &heap(44), &mut out); // chunk 11
        a.resync(2, &mut |e| out.push(e));
        assert!(matches!(out[0], ChunkEvent::Ready(Chunk { id: 11, .. })));
        assert!(matches!(out[1], ChunkEvent::Resync { from: 11, to: 2 }));
        out.clear();
        feed(&mut a, &heap(8), &mut out); // chunk 2 of the new stream, no longer too old
        assert_eq!(a.counters().get(Reject::TooOld), 0);
        assert_eq!(a.head(), Some(2));
    }

    /// An empty packet at the very end of a heap (offset = heap size, which decoding allows) is
    /// where no packet of the heap goes. It used to pass as the slot's packet past its last: it
    /// marked the next slot's first packet as seen (so that good packet was then dropped as a
    /// duplicate), counted its own heap a second time, and after the last slot of a chunk whose
    /// packets fill whole 64-bit words of tracking it indexed past them and panicked. Found by
    /// the chunk_placement fuzz target.
    #[test]
    fn an_empty_packet_at_the_end_of_a_heap_is_misaligned() {
        let empty_at_end = |t: u64| {
            let mut buf = vec![0u8; 64];
            let n = crate::packet::encode(
                &mut buf,
                &[
                    crate::ItemPointer::immediate(items::HEAP_CNT, t),
                    crate::ItemPointer::immediate(items::HEAP_SIZE, SLOT as u64),
                    crate::ItemPointer::immediate(items::HEAP_OFFSET, SLOT as u64),
                    crate::ItemPointer::immediate(items::PAYLOAD_LENGTH, 0),
                    crate::ItemPointer::immediate(items::TIMESTAMP, t),
                ],
                &[],
            )
            .unwrap();
            buf.truncate(n);
            buf
        };
        let mut a = new_asm(4);
        let mut out = Vec::new();
        feed(&mut a, &heap(0), &mut out);
        feed(&mut a, &[empty_at_end(0)], &mut out);
        assert_eq!(a.counters().get(Reject::Misaligned), 1);
        feed(&mut a, &heap(1), &mut out);
        a.flush(&mut |e| out.push(e));
        assert_eq!(
            a.counters().get(Reject::Duplicate),
            0,
            "slot 1's packets are not duplicates"
        );
        assert_eq!(ready(out)[0].present, [true, true, false, false]);
        assert_eq!(a.stats().heaps.load(Ordering::Relaxed), 2);

        // 64 single-packet slots: the tracking bits fill one word exactly.
        let cfg = ChunkConfig {
            slots: 64,
            slot_bytes: SLOT,
            packet_payload: SLOT,
            window: 1,
            max_jump: 10,
        };
        let mut a = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
        a.give(vec![0u8; 64 * SLOT]).unwrap();
        let p = empty_at_end(63);
        let p = Packet::decode(&p, &Limits::default()).unwrap();
        let at = Placement { chunk: 0, slot: 63 };
        let r = a.add_packet(&p, |_| Ok(at), &mut |_| {});
        assert_eq!(r, Err(Reject::Misaligned));
    }
}

//! The hot-path receiver: heaps written straight into caller-owned chunk memory (spead2's chunk
//! stream). The caller maps each packet to a (chunk, slot); the payload is copied to
//! `slot * slot_bytes + heap_offset` of that chunk's buffer, and the slot is marked present once all
//! its bytes have arrived. No allocation per packet or per chunk: buffers come from [`give`].
//!
//! ```
//! use std::sync::Arc;
//! use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
//! use spead::{items, Packet, Reject, RejectCounters};
//!
//! let cfg = ChunkConfig { slots: 4, slot_bytes: 16, packet_payload: 16, window: 2, max_jump: 100 };
//! let mut asm = ChunkAssembler::new(cfg, Arc::new(RejectCounters::new()));
//! for _ in 0..3 {
//!     asm.give(vec![0u8; 4 * 16]);
//! }
//! // Digitiser-style placement: the timestamp gives chunk and slot.
//! let place = |p: &Packet| -> Result<Placement, Reject> {
//!     let t = p.immediate(items::TIMESTAMP).ok_or(Reject::MissingMandatoryItem)?;
//!     Ok(Placement { chunk: t / 64, slot: (t % 64 / 16) as usize })
//! };
//! # let datagram = [0u8; 8];
//! let mut ready = Vec::new();
//! if let Ok(p) = Packet::decode(&datagram, &Default::default()) {
//!     asm.add_packet(&p, place, &mut |e| ready.push(e));
//! }
//! asm.flush(&mut |e| ready.push(e));
//! ```
//!
//! [`give`]: ChunkAssembler::give

use std::collections::VecDeque;
use std::ops::DerefMut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::packet::Packet;
use crate::reject::{Reject, RejectCounters};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Heaps per chunk.
    pub slots: usize,
    /// Bytes of every heap (a heap of another size is rejected).
    pub slot_bytes: usize,
    /// Payload bytes of every packet but a heap's last (the sender's packet size); used to detect
    /// duplicate packets.
    pub packet_payload: usize,
    /// Chunks being filled at once; a packet older than the oldest is too old.
    pub window: usize,
    /// A packet more than this many chunks ahead of the window means the sender restarted:
    /// everything live is flushed and the window starts again at the new chunk.
    pub max_jump: u64,
}

/// Where a heap goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub chunk: u64,
    pub slot: usize,
}

/// A filled (or partly filled) chunk.
#[derive(Debug)]
pub struct Chunk<B> {
    pub id: u64,
    pub data: B,
    /// One flag per slot: its whole heap arrived.
    pub present: Vec<bool>,
    /// Packets received per slot (to tell complete slots and count duplicates).
    received: Vec<u32>,
}

impl<B> Chunk<B> {
    pub fn present_count(&self) -> usize {
        self.present.iter().filter(|&&p| p).count()
    }
    /// Takes the buffer back (to give it to the assembler again).
    pub fn into_data(self) -> B {
        self.data
    }
}

/// What the assembler hands out.
#[derive(Debug)]
pub enum ChunkEvent<B> {
    /// A chunk left the window. Chunk ids that never received a packet are not emitted: a consumer
    /// sees the gap in ids.
    Ready(Chunk<B>),
    /// The stream jumped (a restart): chunks before `to` were flushed.
    Resync { from: u64, to: u64 },
}

/// Totals, readable from other threads.
#[derive(Debug, Default)]
pub struct ChunkStats {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub heaps: AtomicU64,
    pub chunks: AtomicU64,
    pub resyncs: AtomicU64,
    /// Packets dropped because no free chunk buffer was available.
    pub no_buffer: AtomicU64,
}

pub struct ChunkAssembler<B> {
    cfg: ChunkConfig,
    packets_per_slot: u32,
    /// Live chunks in id order (ids need not be contiguous).
    live: VecDeque<Chunk<B>>,
    /// Id of the oldest chunk the window accepts.
    head: Option<u64>,
    free: Vec<B>,
    /// Recycled per-chunk vectors, so that no chunk allocates.
    spare: Vec<(Vec<bool>, Vec<u32>)>,
    counters: Arc<RejectCounters>,
    stats: Arc<ChunkStats>,
}

impl<B: DerefMut<Target = [u8]>> ChunkAssembler<B> {
    pub fn new(cfg: ChunkConfig, counters: Arc<RejectCounters>) -> Self {
        let cfg = ChunkConfig {
            window: cfg.window.max(1),
            packet_payload: cfg.packet_payload.max(1),
            slot_bytes: cfg.slot_bytes.max(1),
            ..cfg
        };
        let packets_per_slot = cfg.slot_bytes.div_ceil(cfg.packet_payload) as u32;
        Self {
            cfg,
            packets_per_slot,
            live: VecDeque::with_capacity(cfg.window),
            head: None,
            free: Vec::new(),
            spare: Vec::new(),
            counters,
            stats: Arc::new(ChunkStats::default()),
        }
    }

    pub fn config(&self) -> &ChunkConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &Arc<ChunkStats> {
        &self.stats
    }

    pub fn counters(&self) -> &Arc<RejectCounters> {
        &self.counters
    }

    /// Adds an empty buffer (at least `slots * slot_bytes` bytes; a smaller one is ignored).
    pub fn give(&mut self, buf: B) {
        if buf.len() >= self.cfg.slots * self.cfg.slot_bytes {
            self.free.push(buf);
        }
    }

    /// Buffers waiting to be filled.
    pub fn free_buffers(&self) -> usize {
        self.free.len()
    }

    /// Places one packet. Rejections are counted; the reason is also returned.
    pub fn add_packet(
        &mut self,
        p: &Packet,
        place: impl FnOnce(&Packet) -> Result<Placement, Reject>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<(), Reject> {
        self.stats.packets.fetch_add(1, Ordering::Relaxed);
        let result = self.place(p, place, emit);
        if let Err(reason) = result {
            self.counters.count(reason);
        }
        result
    }

    fn place(
        &mut self,
        p: &Packet,
        place: impl FnOnce(&Packet) -> Result<Placement, Reject>,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<(), Reject> {
        if p.heap_size != Some(self.cfg.slot_bytes as u64) {
            return Err(Reject::WrongHeapSize);
        }
        let at = place(p)?;
        if at.slot >= self.cfg.slots {
            return Err(Reject::WrongHeapSize);
        }
        let offset = p.heap_offset as usize;
        let is_last = offset + p.payload.len() == self.cfg.slot_bytes;
        if !offset.is_multiple_of(self.cfg.packet_payload)
            || (!is_last && p.payload.len() != self.cfg.packet_payload)
        {
            return Err(Reject::Misaligned);
        }
        let index = self.chunk_index(at.chunk, emit)?;
        let chunk = &mut self.live[index];
        // Each packet of a slot has a fixed offset, so counting packets detects repeats only if a
        // repeat is refused: a packet for a complete slot, or a count past the total, is a duplicate.
        if chunk.present[at.slot] || chunk.received[at.slot] >= self.packets_per_slot {
            return Err(Reject::Duplicate);
        }
        let start = at.slot * self.cfg.slot_bytes + offset;
        chunk.data[start..start + p.payload.len()].copy_from_slice(p.payload);
        chunk.received[at.slot] += 1;
        if chunk.received[at.slot] == self.packets_per_slot {
            chunk.present[at.slot] = true;
            self.stats.heaps.fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .bytes
            .fetch_add(p.payload.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Finds or opens the live chunk `id`, moving the window forward (or resynchronising) first.
    fn chunk_index(
        &mut self,
        id: u64,
        emit: &mut impl FnMut(ChunkEvent<B>),
    ) -> Result<usize, Reject> {
        let head = *self.head.get_or_insert(id);
        if id < head {
            return Err(Reject::TooOld);
        }
        let window = self.cfg.window as u64;
        if id >= head + window {
            if id - (head + window - 1) > self.cfg.max_jump {
                self.flush(emit);
                self.stats.resyncs.fetch_add(1, Ordering::Relaxed);
                emit(ChunkEvent::Resync { from: head, to: id });
                self.head = Some(id);
            } else {
                let new_head = id + 1 - window;
                while self.live.front().is_some_and(|c| c.id < new_head) {
                    let chunk = self.live.pop_front().expect("front exists");
                    self.emit_chunk(chunk, emit);
                }
                self.head = Some(new_head);
            }
        }
        let at = self.live.partition_point(|c| c.id < id);
        if self.live.get(at).is_some_and(|c| c.id == id) {
            return Ok(at);
        }
        let Some(data) = self.free.pop() else {
            self.stats.no_buffer.fetch_add(1, Ordering::Relaxed);
            return Err(Reject::TooNew);
        };
        let (mut present, mut received) = self.spare.pop().unwrap_or_default();
        present.clear();
        present.resize(self.cfg.slots, false);
        received.clear();
        received.resize(self.cfg.slots, 0);
        self.live.insert(
            at,
            Chunk {
                id,
                data,
                present,
                received,
            },
        );
        Ok(at)
    }

    fn emit_chunk(&mut self, mut chunk: Chunk<B>, emit: &mut impl FnMut(ChunkEvent<B>)) {
        self.stats.chunks.fetch_add(1, Ordering::Relaxed);
        // The consumer only needs the presence flags; keep the packet counts' allocation here.
        let received = std::mem::take(&mut chunk.received);
        self.spare
            .push((Vec::with_capacity(self.cfg.slots), received));
        emit(ChunkEvent::Ready(chunk));
    }

    /// Emits every live chunk (end of stream, or before a resync).
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
    use crate::packet::Limits;

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

    fn feed(
        asm: &mut ChunkAssembler<Vec<u8>>,
        datagrams: &[Vec<u8>],
        out: &mut Vec<ChunkEvent<Vec<u8>>>,
    ) {
        for d in datagrams {
            let p = Packet::decode(d, &Limits::default()).unwrap();
            let _ = asm.add_packet(&p, place, &mut |e| out.push(e));
        }
    }

    fn new_asm(buffers: usize) -> ChunkAssembler<Vec<u8>> {
        let mut a = ChunkAssembler::new(cfg(), Arc::new(RejectCounters::new()));
        for _ in 0..buffers {
            a.give(vec![0xee; 4 * SLOT]);
        }
        a
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
        let chunks: Vec<_> = out
            .into_iter()
            .map(|e| match e {
                ChunkEvent::Ready(c) => c,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].id, 0);
        assert_eq!(chunks[0].present, vec![true, true, false, true]);
        assert_eq!(&chunks[0].data[3 * SLOT..4 * SLOT], &[3u8; SLOT]);
        assert_eq!(chunks[1].present, vec![true; 4]);
        assert_eq!(&chunks[1].data[..SLOT], &[4u8; SLOT]);
    }

    #[test]
    fn duplicate_and_too_old() {
        let mut a = new_asm(4);
        let mut out = Vec::new();
        let h0 = heap(0);
        feed(
            &mut a,
            &[h0[0].clone(), h0[0].clone(), h0[1].clone(), h0[1].clone()],
            &mut out,
        );
        assert_eq!(a.counters().get(Reject::Duplicate), 2);
        // chunk 3 moves the window to [2, 3]; chunk 0 is now too old
        feed(&mut a, &heap(12), &mut out);
        feed(&mut a, &heap(1), &mut out);
        assert_eq!(a.counters().get(Reject::TooOld), 2);
        assert!(
            matches!(&out[..], [ChunkEvent::Ready(c)] if c.id == 0 && c.present == [true, false, false, false])
        );
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
    }

    #[test]
    fn wrong_size_and_no_buffer() {
        let mut a = new_asm(0);
        let mut out = Vec::new();
        feed(&mut a, &heap(0)[..1], &mut out);
        assert_eq!(a.stats().no_buffer.load(Ordering::Relaxed), 1);
        let mut other = Vec::new();
        HeapWriter::new(PKT).write(1, &[HeapItem::addressed(0x3300, &[1u8; 8])], |p| {
            other.push(p.to_vec())
        });
        feed(&mut a, &other, &mut out);
        assert_eq!(a.counters().get(Reject::WrongHeapSize), 1);
    }
}

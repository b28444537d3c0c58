//! One polarisation's chunks, shared by its receive threads ("lanes"). Each lane runs its own
//! `ChunkAssembler` over its own sockets; a chunk a lane opens is the same buffer for every lane
//! (found or created here by chunk id), and each lane writes only the slots of the heaps it owns.
//! A chunk goes on to the pairing stage once no lane can write to it any more: every lane's window
//! has moved past it (or the lane has no window in the chunk's stream).
//!
//! Restarts are decided together: a lane that sees the stream jump proposes the new place, and
//! the stream moves to a new *generation* only when every lane with traffic proposes the same
//! place (one lane's view can be skewed, by a lagging sender thread say, and a lane that moved
//! alone would strand the others). Lanes behind the current generation follow at once. Chunks are
//! handed on in (generation, id) order, with a resync notice before the first chunk of a new
//! generation.
//!
//! Everything here runs under the lanes' mutex, once per chunk per lane: a few hundred times a
//! second, never per packet.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use spead::chunk::{Chunk, ChunkMemory};
use spead::Reject;

use super::RecvMsg;
use crate::backend::HostBuffer;
use crate::stats::Stats;

/// A lane's handle on a shared chunk: it writes payloads and never reads.
///
/// Writes go through a raw pointer, so lanes writing disjoint slots of one chunk at once never
/// hold overlapping references. Soundness rests on two rules kept by the lanes and the collector:
/// a lane writes only slots of heaps it owns (heap k belongs to one lane), and the buffer is
/// handed on (and so read or reused) only after every lane has released the chunk, under the
/// collector's mutex, which orders the lanes' writes before the hand-over.
#[derive(Debug)]
pub struct SlotWriter {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: see the type's comment; the pointer's memory outlives every writer (its buffer stays in
// the collector until all lanes have released the chunk).
unsafe impl Send for SlotWriter {}

impl ChunkMemory for SlotWriter {
    fn size(&self) -> usize {
        self.len
    }
    fn write(&mut self, offset: usize, bytes: &[u8]) {
        assert!(
            offset
                .checked_add(bytes.len())
                .is_some_and(|end| end <= self.len),
            "write outside the chunk"
        );
        // SAFETY: in bounds (checked above); no reference to these bytes exists (see the type),
        // and a received datagram never lies in chunk memory.
        unsafe { super::stream::copy(self.ptr.as_ptr().add(offset), bytes) };
    }
}

/// A chunk being filled by one or more lanes.
struct Entry {
    gen: u64,
    id: u64,
    data: HostBuffer,
    /// The lanes' way in, taken once when the entry was created from an unshared buffer.
    writer: SlotWriter,
    present: Vec<bool>,
}

/// How long a lane's restart proposal counts.
const PROPOSAL_LIFE: Duration = Duration::from_secs(1);
/// Chunks by which proposals of one restart may differ.
const SAME_PLACE: u64 = 16;

/// Where the current generation's stream started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restart {
    pub gen: u64,
    pub chunk: u64,
    pub timestamp: u64,
}

/// Where a lane's window is: its generation and the oldest chunk it still accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LanePos {
    pub gen: u64,
    pub head: u64,
}

pub struct Collector {
    pol: usize,
    slots: usize,
    free: Vec<HostBuffer>,
    spare_present: Vec<Vec<bool>>,
    /// Open chunks in (generation, id) order.
    entries: VecDeque<Entry>,
    /// `None` until the lane's first packet.
    lanes: Vec<Option<LanePos>>,
    /// Lanes without packets lately: they do not vote on restarts.
    quiet: Vec<bool>,
    /// Each lane's latest restart proposal: chunk and when.
    proposals: Vec<Option<(u64, Instant)>>,
    gen: u64,
    /// The current generation, readable by the lanes without the lock.
    gen_now: Arc<AtomicU64>,
    restart: Restart,
    /// Newest chunk id opened in the current generation (its first one until then).
    newest: u64,
    /// (generation, id) of the last chunk handed on.
    done: Option<(u64, u64)>,
    to_pair: Sender<RecvMsg>,
    returns: Receiver<Chunk<HostBuffer>>,
    stats: Arc<Stats>,
}

impl Collector {
    pub fn new(
        pol: usize,
        lanes: usize,
        slots: usize,
        buffers: Vec<HostBuffer>,
        to_pair: Sender<RecvMsg>,
        returns: Receiver<Chunk<HostBuffer>>,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            pol,
            slots,
            free: buffers,
            spare_present: Vec::new(),
            entries: VecDeque::new(),
            lanes: vec![None; lanes.max(1)],
            quiet: vec![false; lanes.max(1)],
            proposals: vec![None; lanes.max(1)],
            gen: 0,
            gen_now: Arc::default(),
            restart: Restart {
                gen: 0,
                chunk: 0,
                timestamp: 0,
            },
            newest: 0,
            done: None,
            to_pair,
            returns,
            stats,
        }
    }

    /// The current generation and the newest chunk opened in it.
    pub fn front(&self) -> (u64, u64) {
        (self.gen, self.newest)
    }

    /// The current generation, for lanes to check without the lock.
    pub fn gen_now(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.gen_now)
    }

    /// Where the current generation started.
    pub fn restart(&self) -> Restart {
        self.restart
    }

    pub fn set_quiet(&mut self, lane: usize, quiet: bool) {
        if let Some(q) = self.quiet.get_mut(lane) {
            *q = quiet;
        }
    }

    /// The shared buffer of chunk `id` of generation `gen`, opened if no lane has yet. A lane
    /// behind the current generation opens nothing: it must follow first.
    pub fn open(&mut self, gen: u64, id: u64) -> Result<SlotWriter, Reject> {
        if gen < self.gen || self.done.is_some_and(|d| (gen, id) <= d) {
            return Err(Reject::TooOld);
        }
        let at = self.entries.partition_point(|e| (e.gen, e.id) < (gen, id));
        if let Some(e) = self.entries.get(at).filter(|e| (e.gen, e.id) == (gen, id)) {
            return Ok(SlotWriter { ..e.writer });
        }
        if self.free.is_empty() {
            while let Ok(c) = self.returns.try_recv() {
                self.spare_present.push(c.present);
                self.free.push(c.data);
            }
        }
        let mut data = self.free.pop().ok_or(Reject::NoBuffer)?;
        let ptr = NonNull::new(data.as_mut_ptr()).unwrap_or(NonNull::dangling());
        let len = data.len();
        let mut present = self.spare_present.pop().unwrap_or_default();
        present.clear();
        present.resize(self.slots, false);
        if gen == self.gen {
            self.newest = self.newest.max(id);
        }
        self.entries.insert(
            at,
            Entry {
                gen,
                id,
                data,
                writer: SlotWriter { ptr, len },
                present,
            },
        );
        Ok(SlotWriter { ptr, len })
    }

    /// A lane's part of a chunk is finished: its whole heaps are recorded as present.
    pub fn finish(&mut self, gen: u64, id: u64, present: &[bool]) {
        if let Some(e) = self.entries.iter_mut().find(|e| (e.gen, e.id) == (gen, id)) {
            for (p, &q) in e.present.iter_mut().zip(present) {
                *p |= q;
            }
        }
    }

    /// Lane `lane` saw the stream restart at chunk `chunk` (heap timestamp `timestamp`). Returns
    /// the new generation once every lane with traffic agrees (the caller then follows), else
    /// `None` (the caller drops the heap and goes on).
    pub fn propose(
        &mut self,
        lane: usize,
        chunk: u64,
        timestamp: u64,
        now: Instant,
    ) -> Option<u64> {
        if let Some(p) = self.proposals.get_mut(lane) {
            *p = Some((chunk, now));
        }
        let agreed = (0..self.lanes.len()).all(|l| {
            self.lanes[l].is_none()
                || self.quiet[l]
                || self.proposals[l].is_some_and(|(c, at)| {
                    c.abs_diff(chunk) <= SAME_PLACE
                        && now.saturating_duration_since(at) <= PROPOSAL_LIFE
                })
        });
        if !agreed {
            return None;
        }
        self.gen += 1;
        self.gen_now.store(self.gen, Ordering::Relaxed);
        self.newest = chunk;
        self.restart = Restart {
            gen: self.gen,
            chunk,
            timestamp,
        };
        self.proposals.fill(None);
        self.stats.pols[self.pol]
            .resyncs
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            pol = self.pol,
            chunk,
            timestamp,
            "input stream restarted; receivers resynchronised"
        );
        Some(self.gen)
    }

    /// Records where lane `lane`'s window now is, and hands on every chunk no lane can still
    /// write to.
    pub fn advance(&mut self, lane: usize, pos: Option<LanePos>) {
        if let Some(l) = self.lanes.get_mut(lane) {
            *l = pos;
        }
        while let Some(e) = self.entries.front() {
            let held = self
                .lanes
                .iter()
                .flatten()
                .any(|l| l.gen == e.gen && l.head <= e.id);
            if held {
                break;
            }
            let e = self.entries.pop_front().expect("front exists");
            let last_gen = self.done.map(|(g, _)| g);
            if last_gen.is_some_and(|g| g != e.gen) {
                let _ = self.to_pair.try_send(RecvMsg::Resync {
                    pol: self.pol,
                    to: e.id,
                });
            }
            self.done = Some((e.gen, e.id));
            let msg = RecvMsg::Chunk {
                pol: self.pol,
                id: e.id,
                chunk: Chunk::new(e.id, e.data, e.present),
            };
            // The queue has room for every buffer; a chunk it cannot take is recycled here.
            match self.to_pair.try_send(msg) {
                Ok(()) => {}
                Err(TrySendError::Full(RecvMsg::Chunk { chunk, .. }))
                | Err(TrySendError::Disconnected(RecvMsg::Chunk { chunk, .. })) => {
                    self.spare_present.push(chunk.present);
                    self.free.push(chunk.data);
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    fn collector(lanes: usize, buffers: usize) -> (Collector, Receiver<RecvMsg>) {
        let (tx, rx) = bounded(64);
        let (_ret_tx, ret_rx) = bounded(64);
        let bufs = (0..buffers).map(|_| HostBuffer::zeroed(16)).collect();
        let c = Collector::new(
            0,
            lanes,
            4,
            bufs,
            tx,
            ret_rx,
            Arc::new(Stats::new(&[(crate::config::WIDEBAND, 1)])),
        );
        (c, rx)
    }

    fn pos(gen: u64, head: u64) -> Option<LanePos> {
        Some(LanePos { gen, head })
    }

    /// (id, present) of the chunks handed on, "R" for a resync notice.
    fn handed(rx: &Receiver<RecvMsg>) -> Vec<String> {
        rx.try_iter()
            .map(|m| match m {
                RecvMsg::Chunk { id, chunk, .. } => {
                    let flags: String = chunk
                        .present
                        .iter()
                        .map(|&p| if p { '1' } else { '0' })
                        .collect();
                    format!("{id}:{flags}")
                }
                RecvMsg::Resync { to, .. } => format!("R{to}"),
            })
            .collect()
    }

    #[test]
    fn lanes_share_one_buffer_and_the_chunk_waits_for_both() {
        let (mut c, rx) = collector(2, 4);
        let mut a = c.open(0, 5).unwrap();
        let mut b = c.open(0, 5).unwrap();
        a.write(0, &[1, 1, 1, 1]);
        b.write(4, &[2, 2, 2, 2]);
        c.advance(0, pos(0, 5));
        c.advance(1, pos(0, 5));
        c.finish(0, 5, &[true, false, false, false]);
        c.advance(0, pos(0, 6));
        assert!(handed(&rx).is_empty(), "lane 1 still holds chunk 5");
        c.finish(0, 5, &[false, true, false, false]);
        c.advance(1, pos(0, 6));
        let msgs: Vec<_> = rx.try_iter().collect();
        let [RecvMsg::Chunk { id: 5, chunk, .. }] = &msgs[..] else {
            panic!("expected chunk 5, got {msgs:?}")
        };
        assert_eq!(chunk.present, [true, true, false, false]);
        assert_eq!(&chunk.data[..8], &[1, 1, 1, 1, 2, 2, 2, 2]);
        // Handed on: a late lane can no longer open it.
        assert_eq!(c.open(0, 5).err(), Some(Reject::TooOld));
    }

    #[test]
    fn a_lane_without_packets_does_not_hold_chunks_back() {
        let (mut c, rx) = collector(3, 4);
        c.open(0, 1).unwrap();
        c.advance(0, pos(0, 1));
        c.finish(0, 1, &[true; 4]);
        c.advance(0, pos(0, 2));
        assert_eq!(handed(&rx), ["1:1111"]);
    }

    #[test]
    fn chunks_leave_in_order_with_a_resync_before_the_new_stream() {
        let (mut c, rx) = collector(2, 6);
        let now = Instant::now();
        c.open(0, 100).unwrap();
        c.advance(0, pos(0, 100));
        c.advance(1, pos(0, 100));
        // Lane 0 sees a restart at chunk 3; lane 1 does not (yet): no restart.
        assert_eq!(c.propose(0, 3, 3 * 64, now), None);
        assert_eq!(c.gen_now().load(Ordering::Relaxed), 0);
        // Lane 1 sees it too: both agree, a new generation.
        let g = c.propose(1, 4, 4 * 64, now).expect("agreed");
        assert_eq!(g, 1);
        assert_eq!(c.restart().chunk, 4);
        // A lane still in the old generation opens nothing.
        assert_eq!(c.open(0, 101).err(), Some(Reject::TooOld));
        c.open(g, 4).unwrap();
        c.advance(0, pos(g, 5));
        assert!(handed(&rx).is_empty(), "chunk 100 is still held by lane 1");
        c.advance(1, pos(g, 5));
        assert_eq!(handed(&rx), ["100:0000", "R4", "4:0000"]);
        assert_eq!(c.stats.pols[0].resyncs(), 1);
    }

    #[test]
    fn a_quiet_lane_does_not_vote_and_stale_proposals_lapse() {
        let (mut c, _rx) = collector(2, 4);
        let t0 = Instant::now();
        c.advance(0, pos(0, 10));
        c.advance(1, pos(0, 10));
        assert_eq!(c.propose(1, 500, 0, t0), None);
        // Lane 1's proposal is too old by the time lane 0 makes its own.
        let later = t0 + PROPOSAL_LIFE + Duration::from_millis(1);
        assert_eq!(c.propose(0, 500, 0, later), None);
        c.set_quiet(1, true);
        assert_eq!(c.propose(0, 500, 0, later), Some(1));
    }

    #[test]
    fn no_buffer_is_refused_and_returned_buffers_are_reused() {
        let (tx, rx) = bounded(64);
        let (ret_tx, ret_rx) = bounded(64);
        let mut c = Collector::new(
            0,
            1,
            4,
            vec![HostBuffer::zeroed(16)],
            tx,
            ret_rx,
            Arc::new(Stats::new(&[(crate::config::WIDEBAND, 1)])),
        );
        c.open(0, 0).unwrap();
        assert_eq!(c.open(0, 1).err(), Some(Reject::NoBuffer));
        c.advance(0, pos(0, 1));
        let Ok(RecvMsg::Chunk { chunk, .. }) = rx.try_recv() else {
            panic!("chunk 0 not handed on")
        };
        ret_tx.send(chunk).unwrap();
        assert!(c.open(0, 1).is_ok());
    }
}

//! One receive thread: reads its substream's socket, checks each datagram (a heap of this
//! substream, on the timestamp lattice, of the right size), assembles heaps with the spead chunk
//! assembler (one heap per chunk) and hands what it releases to the sequence tracker and the
//! sink.
//!
//! With several engines (an array) the engines' heaps share the socket: each datagram goes to its
//! engine's lane by its feng_id (each lane its own assembler and tracker), and each heap's counter
//! is checked against katgpucbf's rule and against the counters recently seen.
//!
//! The assembler's memory is chosen once per receiver: `Vec<u8>` buffers when a sink reads the
//! payload, [`Discard`] when only heaps are counted (no copy, so a thread keeps up with more).
//! Either way the window rules are the assembler's own.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, ChunkMemory, Discard, Placement};
use spead::transport::{DatagramSource, DropCounter};
use spead::{items, Limits, Packet, Reject};

use super::snapshot::{Stats, Substream};
use super::HeapSink;
use crate::feng_raw::OutputBits;
use crate::gaps::{Arrival, SeqTracker, DEFAULT_RESYNC_HEAPS};

/// How often a receive thread reads its socket's drop count from the kernel.
const DROPS_EVERY: Duration = Duration::from_millis(100);

/// Memory a receive thread assembles heaps into.
pub(super) trait HeapMemory: ChunkMemory + Send + 'static {
    /// Memory for one heap of `bytes`.
    fn for_heap(bytes: usize) -> Self;
    /// The heap's payload, when this memory keeps it.
    fn payload(&self) -> Option<&[u8]>;
}

impl HeapMemory for Vec<u8> {
    fn for_heap(bytes: usize) -> Self {
        vec![0u8; bytes]
    }
    fn payload(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl HeapMemory for Discard {
    fn for_heap(_: usize) -> Self {
        Discard
    }
    fn payload(&self) -> Option<&[u8]> {
        None
    }
}

/// What a worker needs to know about its substream and the stream's shape.
pub(super) struct WorkerConfig {
    pub channels: usize,
    /// ADC samples per PFB input sample (1, or a narrowband output's D).
    pub decimation: usize,
    pub per_sub: usize,
    pub spectra_per_heap: Option<usize>,
    /// The output format: bytes per channel and spectrum.
    pub bits: OutputBits,
    /// Heaps kept open for reordering (at least 1).
    pub window: usize,
    /// Engines in the array; None: one engine, its feng_id not looked at.
    pub array: Option<usize>,
}

/// The heap counter's layout in katgpucbf's F-engine output (docs/wire-formats.md): the
/// substream above bit 40, below it (timestamp / heap step) x engines + feng_id. The harness's own
/// copy, independent of the engine's.
const SUBSTREAM_SHIFT: u32 = 40;
const COUNTER_MASK: u64 = (1 << SUBSTREAM_SHIFT) - 1;

/// The counter katgpucbf gives heap `timestamp` of engine `feng_id` of `engines` in `substream`.
pub(super) fn expected_counter(
    substream: usize,
    timestamp: u64,
    step: u64,
    engines: usize,
    feng_id: usize,
) -> u64 {
    let k = (timestamp / step)
        .wrapping_mul(engines as u64)
        .wrapping_add(feng_id as u64);
    ((substream as u64) << SUBSTREAM_SHIFT) | (k & COUNTER_MASK)
}

/// Heap counters seen lately on one socket, each with the heap (engine, timestamp) it named.
struct RecentCounters {
    seen: HashMap<u64, (usize, u64)>,
    order: VecDeque<u64>,
    keep: usize,
}

impl RecentCounters {
    fn new(keep: usize) -> Self {
        Self {
            seen: HashMap::with_capacity(keep),
            order: VecDeque::with_capacity(keep),
            keep,
        }
    }

    /// Records `counter` for heap (feng_id, timestamp); true if another heap carried it.
    fn collides(&mut self, counter: u64, feng_id: usize, timestamp: u64) -> bool {
        if let Some(&heap) = self.seen.get(&counter) {
            return heap != (feng_id, timestamp);
        }
        if self.order.len() >= self.keep {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(counter, (feng_id, timestamp));
        self.order.push_back(counter);
        false
    }
}

/// Counters kept per engine for the collision check: a few seconds of heaps at any rate the
/// harness receives.
const RECENT_PER_ENGINE: usize = 4096;

/// The state of one receive thread.
pub(super) struct Worker<B: HeapMemory> {
    /// One lane per engine (one in all without an array); lane 0 also takes what names no engine.
    lanes: Vec<Lane<B>>,
    sink: Arc<dyn HeapSink>,
    cfg: WorkerConfig,
    limits: Limits,
    events: Vec<ChunkEvent<B>>,
    recent: RecentCounters,
}

/// One engine's heaps in this substream.
struct Lane<B> {
    sub: Arc<Substream>,
    /// Created at the first heap start, when heap size and packet size are known.
    asm: Option<Assembly<B>>,
    last_misaligned: Option<u64>,
}

struct Assembly<B> {
    asm: ChunkAssembler<B>,
    step: u64,
    phase: u64,
    heap_bytes: u64,
}

fn tracker<R>(sub: &Substream, f: impl FnOnce(&mut SeqTracker) -> R) -> Option<R> {
    let mut t = sub.tracker.lock().unwrap_or_else(|e| e.into_inner());
    t.as_mut().map(f)
}

fn malformed(sub: &Substream, reason: Option<Reject>) {
    sub.stats.malformed_packets.fetch_add(1, Ordering::Relaxed);
    if let Some(r) = reason {
        sub.rejects.count(r);
    }
}

impl<B: HeapMemory> Worker<B> {
    /// `lanes`: this substream's lane of each engine, in feng_id order.
    pub(super) fn new(
        lanes: Vec<Arc<Substream>>,
        sink: Arc<dyn HeapSink>,
        cfg: WorkerConfig,
    ) -> Self {
        let engines = lanes.len().max(1);
        Self {
            lanes: lanes
                .into_iter()
                .map(|sub| Lane {
                    sub,
                    asm: None,
                    last_misaligned: None,
                })
                .collect(),
            sink,
            cfg,
            limits: Limits {
                max_packet: 65_536,
                ..Limits::default()
            },
            events: Vec::new(),
            recent: RecentCounters::new(RECENT_PER_ENGINE * engines),
        }
    }

    /// The thread's loop: receive from `rx` until `stop`, then hand out the complete heaps still
    /// open.
    pub(super) fn run(mut self, mut rx: impl DatagramSource, stop: Arc<AtomicBool>) {
        let mut drops = DropCounter::new(&rx);
        let mut count_drops = |rx: &_, st: &Stats| {
            st.socket_drops.fetch_add(drops.take(rx), Ordering::Relaxed);
        };
        let mut drops_at = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if drops_at.elapsed() >= DROPS_EVERY {
                drops_at = Instant::now();
                count_drops(&rx, &self.lanes[0].sub.stats);
            }
            match rx.recv(Duration::from_millis(50)) {
                Ok(0) => {}
                Ok(_) => {
                    for d in rx.datagrams() {
                        self.datagram(d);
                    }
                }
                Err(e) => {
                    tracing::warn!(substream = self.lanes[0].sub.index, "receive error: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        count_drops(&rx, &self.lanes[0].sub.stats);
        self.finish();
    }

    fn datagram(&mut self, d: &[u8]) {
        let count = |sub: &Substream| {
            sub.stats.packets.fetch_add(1, Ordering::Relaxed);
            sub.stats.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
        };
        let first = &self.lanes[0].sub;
        let p = match Packet::decode(d, &self.limits) {
            Ok(p) => p,
            Err(r) => {
                count(first);
                return malformed(first, Some(r));
            }
        };
        if p.item(items::FENG_RAW).is_none() {
            count(first);
            if p.is_stop() {
                first.stats.stops.fetch_add(1, Ordering::Relaxed);
            } else if p.item(items::DESCRIPTOR).is_some() {
                first.stats.descriptors.fetch_add(1, Ordering::Relaxed);
            } else {
                malformed(first, Some(Reject::MissingMandatoryItem));
            }
            return;
        }
        let lane = match self.cfg.array {
            None => 0,
            Some(n) => match p.immediate(items::FENG_ID).map(|f| f as usize) {
                Some(f) if f < n => f,
                _ => {
                    count(first);
                    first.stats.unknown_engine.fetch_add(1, Ordering::Relaxed);
                    return malformed(first, None);
                }
            },
        };
        count(&self.lanes[lane].sub);
        self.heap_packet(lane, &p);
    }

    /// A packet of a data heap of engine `lane`.
    fn heap_packet(&mut self, lane: usize, p: &Packet) {
        let sub = self.lanes[lane].sub.clone();
        let (Some(ts), Some(size)) = (p.immediate(items::TIMESTAMP), p.heap_size) else {
            return malformed(&sub, Some(Reject::MissingMandatoryItem));
        };
        if p.immediate(items::FREQUENCY) != Some(sub.first_channel as u64) {
            sub.stats.wrong_frequency.fetch_add(1, Ordering::Relaxed);
            return malformed(&sub, None);
        }
        if self.lanes[lane].asm.is_none() && !self.open(lane, p, size) {
            return;
        }
        let l = &mut self.lanes[lane];
        let Some(a) = l.asm.as_mut() else { return };
        if size != a.heap_bytes {
            return malformed(&sub, Some(Reject::WrongHeapSize));
        }
        if ts % a.step != a.phase {
            // Count the heap once, not each of its packets.
            if l.last_misaligned != Some(ts) {
                l.last_misaligned = Some(ts);
                tracker(&sub, |t| t.heap(ts));
            }
            return malformed(&sub, None);
        }
        let step = a.step;
        if let (Some(n), 0) = (self.cfg.array, p.heap_offset) {
            let st = &sub.stats;
            st.counters_checked.fetch_add(1, Ordering::Relaxed);
            if p.heap_cnt != expected_counter(sub.index, ts, step, n, lane) {
                st.counters_wrong.fetch_add(1, Ordering::Relaxed);
            }
            if self.recent.collides(p.heap_cnt, lane, ts) {
                st.counters_collided.fetch_add(1, Ordering::Relaxed);
            }
        }
        let events = &mut self.events;
        let at = Placement {
            chunk: ts / step,
            slot: 0,
        };
        // The assembler counts its rejections in the lane's counters.
        match a.asm.add_packet(p, |_| Ok(at), &mut |e| events.push(e)) {
            Ok(()) => {}
            Err(Reject::TooOld) => {
                let newest = tracker(&sub, |t| t.newest()).flatten();
                if newest.is_some_and(|n| n > ts && (n - ts) / step > DEFAULT_RESYNC_HEAPS) {
                    // The sender went back in time (a restart): start assembling afresh; the
                    // tracker resynchronises at the next heap.
                    l.asm = None;
                    self.events.clear();
                    return;
                }
                if tracker(&sub, |t| t.stray(ts)) == Some(Arrival::Resync) {
                    // A restart a short way back in time, told by its heaps coming in order.
                    l.asm = None;
                    self.events.clear();
                    return;
                }
            }
            Err(Reject::Duplicate) => {
                tracker(&sub, |t| t.stray(ts));
            }
            Err(Reject::WrongHeapSize | Reject::Misaligned) => {
                sub.stats.malformed_packets.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        self.drain(lane, false);
    }

    /// Sets up a lane's assembly from the first packet that starts a heap. False if this packet
    /// cannot.
    fn open(&mut self, lane: usize, p: &Packet, size: u64) -> bool {
        let sub = self.lanes[lane].sub.clone();
        if p.heap_offset != 0 {
            // Joined mid-heap: wait for the start of one (it tells the packet size).
            return false;
        }
        // Bytes of one spectrum of this substream's channels: 4 per channel at 8 bits, 2 at 4.
        let per_spectrum = (self.cfg.per_sub * self.cfg.bits.spectrum_bytes()) as u64;
        let spectra = match self.cfg.spectra_per_heap {
            Some(s) if s as u64 * per_spectrum == size => s as u64,
            Some(_) => {
                malformed(&sub, Some(Reject::WrongHeapSize));
                return false;
            }
            None if size > 0 && size.is_multiple_of(per_spectrum) => size / per_spectrum,
            None => {
                malformed(&sub, Some(Reject::WrongHeapSize));
                return false;
            }
        };
        let step = spectra * 2 * (self.cfg.channels * self.cfg.decimation) as u64;
        let ts = p.immediate(items::TIMESTAMP).unwrap_or(0);
        let window = self.cfg.window;
        let chunk_cfg = ChunkConfig {
            slots: 1,
            slot_bytes: size as usize,
            packet_payload: p.payload.len().max(1),
            window,
            max_jump: u64::MAX / 4,
        };
        let mut asm = ChunkAssembler::new(chunk_cfg, sub.rejects.clone());
        for _ in 0..window + 2 {
            // Sized to the heap, so never refused.
            let _ = asm.give(B::for_heap(size as usize));
        }
        self.lanes[lane].asm = Some(Assembly {
            asm,
            step,
            phase: ts % step,
            heap_bytes: size,
        });
        sub.stats.step.store(step, Ordering::Relaxed);
        let mut t = sub.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_none() {
            *t = Some(SeqTracker::new(step, window as u64));
        }
        true
    }

    /// Hands out the chunks a lane's assembler released. At the end (`closing`), incomplete ones
    /// are the heaps still arriving when we stopped: not gaps.
    fn drain(&mut self, lane: usize, closing: bool) {
        let l = &mut self.lanes[lane];
        let Some(a) = l.asm.as_mut() else {
            self.events.clear();
            return;
        };
        let sub = &l.sub;
        let feng_id = sub.feng_id.unwrap_or(0);
        for e in self.events.drain(..) {
            let ChunkEvent::Ready(chunk) = e else {
                continue;
            };
            let complete = chunk.present.first().copied().unwrap_or(false);
            let ts = chunk.id * a.step + a.phase;
            {
                let mut t = sub.tracker.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(t) = t.as_mut() {
                    if complete {
                        t.heap(ts);
                    } else if !closing {
                        t.incomplete(ts);
                    }
                }
            }
            if complete {
                sub.stats.heaps.fetch_add(1, Ordering::Relaxed);
                sub.stats
                    .heap_bytes
                    .fetch_add(a.heap_bytes, Ordering::Relaxed);
                if let Some(data) = chunk.data.payload() {
                    self.sink
                        .engine_heap(feng_id, sub.index, sub.first_channel, ts, data);
                }
            }
            a.asm.recycle(chunk);
        }
    }

    fn finish(&mut self) {
        for lane in 0..self.lanes.len() {
            if let Some(a) = self.lanes[lane].asm.as_mut() {
                let events = &mut self.events;
                a.asm.flush(&mut |e| events.push(e));
            }
            self.drain(lane, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_katgpucbf() {
        // The engine's own test figures (engine/src/pipeline/send.rs), reached independently.
        let step = 256 * 2048;
        assert_eq!(expected_counter(0, 5 * step, step, 4, 1), 21);
        assert_eq!(expected_counter(0, 5 * step, step, 4, 2), 22);
        assert_eq!(expected_counter(1, 5 * step, step, 4, 1), (1 << 40) + 21);
        assert_eq!(expected_counter(0, 6 * step, step, 4, 1), 25);
        // The low part wraps at 40 bits without touching the substream.
        let far = (COUNTER_MASK + 1) * step;
        assert_eq!(expected_counter(3, far, step, 1, 0), 3 << 40);
    }

    #[test]
    fn recent_counters_tell_a_collision_from_a_repeat() {
        let mut r = RecentCounters::new(2);
        assert!(!r.collides(7, 0, 100));
        assert!(
            !r.collides(7, 0, 100),
            "the same heap again is no collision"
        );
        assert!(r.collides(7, 1, 100), "another engine");
        assert!(r.collides(7, 0, 200), "another timestamp");
        assert!(!r.collides(8, 1, 100));
        assert!(!r.collides(9, 1, 200));
        // 7 has been forgotten (two kept).
        assert!(!r.collides(7, 1, 300));
    }
}

//! One receive thread: reads its substream's socket, checks each datagram (a heap of this
//! substream, on the timestamp lattice, of the right size), assembles heaps with the spead chunk
//! assembler (one heap per chunk) and hands what it releases to the sequence tracker and the
//! sink.
//!
//! The assembler's memory is chosen once per receiver: `Vec<u8>` buffers when a sink reads the
//! payload, [`Discard`] when only heaps are counted (no copy, so a thread keeps up with more).
//! Either way the window rules are the assembler's own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, ChunkMemory, Discard, Placement};
use spead::transport::{DropCounter, UdpSocket};
use spead::{items, Limits, Packet, Reject};

use super::snapshot::{Stats, Substream};
use super::HeapSink;
use crate::gaps::{SeqTracker, DEFAULT_RESYNC_HEAPS};

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
    pub per_sub: usize,
    pub spectra_per_heap: Option<usize>,
    /// Heaps kept open for reordering (at least 1).
    pub window: usize,
}

/// The state of one receive thread.
pub(super) struct Worker<B: HeapMemory> {
    sub: Arc<Substream>,
    sink: Arc<dyn HeapSink>,
    cfg: WorkerConfig,
    limits: Limits,
    /// Created at the first heap start, when heap size and packet size are known.
    asm: Option<Assembly<B>>,
    events: Vec<ChunkEvent<B>>,
    last_misaligned: Option<u64>,
}

struct Assembly<B> {
    asm: ChunkAssembler<B>,
    step: u64,
    phase: u64,
    heap_bytes: u64,
}

impl<B: HeapMemory> Worker<B> {
    pub fn new(sub: Arc<Substream>, sink: Arc<dyn HeapSink>, cfg: WorkerConfig) -> Self {
        Self {
            sub,
            sink,
            cfg,
            limits: Limits {
                max_packet: 65_536,
                ..Limits::default()
            },
            asm: None,
            events: Vec::new(),
            last_misaligned: None,
        }
    }

    /// The thread's loop: receive until `stop`, then hand out the complete heaps still open.
    pub fn run(mut self, socket: UdpSocket, stop: Arc<AtomicBool>) {
        let mut rx = spead::transport::Receiver::new(socket, 32);
        let mut drops = DropCounter::new(rx.socket());
        let mut count_drops = |rx: &spead::transport::Receiver, st: &Stats| {
            st.socket_drops
                .fetch_add(drops.take(rx.socket()), Ordering::Relaxed);
        };
        let mut drops_at = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if drops_at.elapsed() >= DROPS_EVERY {
                drops_at = Instant::now();
                count_drops(&rx, &self.sub.stats);
            }
            match rx.recv(Duration::from_millis(50)) {
                Ok(0) => {}
                Ok(_) => {
                    for d in rx.datagrams() {
                        self.datagram(d);
                    }
                }
                Err(e) => {
                    tracing::warn!(substream = self.sub.index, "receive error: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        count_drops(&rx, &self.sub.stats);
        self.finish();
    }

    fn malformed(&self, reason: Option<Reject>) {
        self.sub
            .stats
            .malformed_packets
            .fetch_add(1, Ordering::Relaxed);
        if let Some(r) = reason {
            self.sub.rejects.count(r);
        }
    }

    fn tracker<R>(&self, f: impl FnOnce(&mut SeqTracker) -> R) -> Option<R> {
        let mut t = self.sub.tracker.lock().unwrap_or_else(|e| e.into_inner());
        t.as_mut().map(f)
    }

    fn datagram(&mut self, d: &[u8]) {
        self.sub.stats.packets.fetch_add(1, Ordering::Relaxed);
        self.sub
            .stats
            .bytes
            .fetch_add(d.len() as u64, Ordering::Relaxed);
        let p = match Packet::decode(d, &self.limits) {
            Ok(p) => p,
            Err(r) => return self.malformed(Some(r)),
        };
        if p.is_stop() {
            self.sub.stats.stops.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if p.item(items::FENG_RAW).is_none() {
            if p.item(items::DESCRIPTOR).is_some() {
                self.sub.stats.descriptors.fetch_add(1, Ordering::Relaxed);
            } else {
                self.malformed(Some(Reject::MissingMandatoryItem));
            }
            return;
        }
        let (Some(ts), Some(size)) = (p.immediate(items::TIMESTAMP), p.heap_size) else {
            return self.malformed(Some(Reject::MissingMandatoryItem));
        };
        if p.immediate(items::FREQUENCY) != Some(self.sub.first_channel as u64) {
            self.sub
                .stats
                .wrong_frequency
                .fetch_add(1, Ordering::Relaxed);
            return self.malformed(None);
        }
        if self.asm.is_none() && !self.open(&p, size) {
            return;
        }
        let Some(a) = self.asm.as_mut() else { return };
        if size != a.heap_bytes {
            return self.malformed(Some(Reject::WrongHeapSize));
        }
        if ts % a.step != a.phase {
            // Count the heap once, not each of its packets.
            if self.last_misaligned != Some(ts) {
                self.last_misaligned = Some(ts);
                self.tracker(|t| t.heap(ts));
            }
            return self.malformed(None);
        }
        let step = a.step;
        let events = &mut self.events;
        let at = Placement {
            chunk: ts / step,
            slot: 0,
        };
        // The assembler counts its rejections in the substream's counters.
        match a.asm.add_packet(&p, |_| Ok(at), &mut |e| events.push(e)) {
            Ok(()) => {}
            Err(Reject::TooOld) => {
                let newest = self.tracker(|t| t.newest()).flatten();
                if newest.is_some_and(|n| n > ts && (n - ts) / step > DEFAULT_RESYNC_HEAPS) {
                    // The sender went back in time (a restart): start assembling afresh; the
                    // tracker resynchronises at the next heap.
                    self.asm = None;
                    self.events.clear();
                    return;
                }
                self.tracker(|t| t.stray(ts));
            }
            Err(Reject::Duplicate) => {
                self.tracker(|t| t.stray(ts));
            }
            Err(Reject::WrongHeapSize | Reject::Misaligned) => {
                self.sub
                    .stats
                    .malformed_packets
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        self.drain(false);
    }

    /// Sets up assembly from the first packet that starts a heap. False if this packet cannot.
    fn open(&mut self, p: &Packet, size: u64) -> bool {
        if p.heap_offset != 0 {
            // Joined mid-heap: wait for the start of one (it tells the packet size).
            return false;
        }
        let per_channel = self.cfg.per_sub as u64 * 4;
        let spectra = match self.cfg.spectra_per_heap {
            Some(s) if s as u64 * per_channel == size => s as u64,
            Some(_) => {
                self.malformed(Some(Reject::WrongHeapSize));
                return false;
            }
            None if size > 0 && size.is_multiple_of(per_channel) => size / per_channel,
            None => {
                self.malformed(Some(Reject::WrongHeapSize));
                return false;
            }
        };
        let step = spectra * 2 * self.cfg.channels as u64;
        let ts = p.immediate(items::TIMESTAMP).unwrap_or(0);
        let window = self.cfg.window;
        let chunk_cfg = ChunkConfig {
            slots: 1,
            slot_bytes: size as usize,
            packet_payload: p.payload.len().max(1),
            window,
            max_jump: u64::MAX / 4,
        };
        let mut asm = ChunkAssembler::new(chunk_cfg, self.sub.rejects.clone());
        for _ in 0..window + 2 {
            // Sized to the heap, so never refused.
            let _ = asm.give(B::for_heap(size as usize));
        }
        self.asm = Some(Assembly {
            asm,
            step,
            phase: ts % step,
            heap_bytes: size,
        });
        self.sub.stats.step.store(step, Ordering::Relaxed);
        let mut t = self.sub.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_none() {
            *t = Some(SeqTracker::new(step, window as u64));
        }
        true
    }

    /// Hands out the chunks the assembler released. At the end (`closing`), incomplete ones are
    /// the heaps still arriving when we stopped: not gaps.
    fn drain(&mut self, closing: bool) {
        let Some(a) = self.asm.as_mut() else {
            self.events.clear();
            return;
        };
        let sub = &self.sub;
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
                    self.sink.heap(sub.index, sub.first_channel, ts, data);
                }
            }
            a.asm.recycle(chunk);
        }
    }

    fn finish(&mut self) {
        if let Some(a) = self.asm.as_mut() {
            let events = &mut self.events;
            a.asm.flush(&mut |e| events.push(e));
        }
        self.drain(true);
    }
}

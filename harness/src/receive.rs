//! Joins the engine's output substreams: one receive thread per substream (GRO batches through
//! the spead transport), heaps assembled into recycled buffers by the spead chunk assembler (one
//! heap per chunk, so nothing is allocated per heap), and each substream's timestamps tracked by
//! [`SeqTracker`]. Complete heaps go to a [`HeapSink`] on the receive thread.
//!
//! The assembler keeps `reorder_window` heaps open and hands them out in timestamp order; a packet
//! arriving after its heap left the window is a stray, which the tracker counts as a late heap
//! (it filled a hole) or a duplicate.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::transport::{DropCounter, Endpoint, SocketConfig, UdpSocket};
use spead::{items, Limits, Packet, Reject, RejectCounters};

use crate::gaps::{SeqCounts, SeqTracker, DEFAULT_RESYNC_HEAPS};

/// Receives complete heaps. Called on the substream's receive thread: keep it short.
pub trait HeapSink: Send + Sync {
    /// `data` is the heap's `feng_raw`: (channels_per_substream, spectra_per_heap, 2, 2) int8.
    fn heap(&self, substream: usize, first_channel: usize, timestamp: u64, data: &[u8]);
}

/// A sink that looks at nothing (max-rate trials only count heaps).
pub struct NoSink;
impl HeapSink for NoSink {
    fn heap(&self, _: usize, _: usize, _: u64, _: &[u8]) {}
}

/// Several sinks fed in turn.
pub struct Sinks(pub Vec<Arc<dyn HeapSink>>);
impl HeapSink for Sinks {
    fn heap(&self, s: usize, c: usize, t: u64, d: &[u8]) {
        for sink in &self.0 {
            sink.heap(s, c, t, d);
        }
    }
}

#[derive(Clone, Debug)]
pub struct ReceiveConfig {
    /// One address per substream, in channel order. A port of 0 picks a free port (the same for
    /// every substream): unicast loopback only.
    pub substreams: Vec<SocketAddrV4>,
    /// Channels of the whole band (split evenly over the substreams).
    pub channels: usize,
    /// Spectra per heap; None: learned from the first heap's size.
    pub spectra_per_heap: Option<usize>,
    /// Interface to join multicast groups on.
    pub interface: Option<Ipv4Addr>,
    /// Socket receive buffer asked for.
    pub buffer_bytes: usize,
    /// Heaps kept open for reordering; a heap completed later than this is late.
    pub reorder_window: usize,
    /// Assemble payloads for the sink. False: only count which packets of each heap arrived
    /// (no copy, so a receive thread keeps up with more; the sink is then never called).
    pub payload: bool,
}

impl ReceiveConfig {
    pub fn new(substreams: Vec<SocketAddrV4>, channels: usize) -> Self {
        Self {
            substreams,
            channels,
            spectra_per_heap: None,
            interface: None,
            buffer_bytes: 64 << 20,
            reorder_window: 4,
            payload: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("no substreams to join")]
    NoSubstreams,
    #[error("{channels} channels do not split evenly over {substreams} substreams")]
    Uneven { channels: usize, substreams: usize },
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddrV4,
        source: io::Error,
    },
    #[error("cannot start a receive thread: {0}")]
    Thread(io::Error),
}

/// Counters one receive thread updates and anyone may read.
#[derive(Debug, Default)]
struct Stats {
    packets: AtomicU64,
    bytes: AtomicU64,
    heaps: AtomicU64,
    heap_bytes: AtomicU64,
    malformed_packets: AtomicU64,
    wrong_frequency: AtomicU64,
    descriptors: AtomicU64,
    stops: AtomicU64,
    /// Datagrams the kernel dropped because this substream's socket buffer was full.
    socket_drops: AtomicU64,
    /// Timestamp step once known (0 before).
    step: AtomicU64,
}

struct Substream {
    index: usize,
    addr: SocketAddrV4,
    first_channel: usize,
    stats: Stats,
    rejects: Arc<RejectCounters>,
    tracker: Mutex<Option<SeqTracker>>,
}

/// One substream's state at a moment.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SubstreamSnapshot {
    pub index: usize,
    pub address: String,
    pub first_channel: usize,
    pub packets: u64,
    pub bytes: u64,
    /// Complete heaps assembled (duplicates excluded).
    pub heaps: u64,
    pub heap_bytes: u64,
    /// Packets that decoded but were not a valid heap of this substream.
    pub malformed_packets: u64,
    pub wrong_frequency: u64,
    pub descriptors: u64,
    /// Packets the kernel dropped because this substream's socket buffer was full: the harness
    /// itself lost them (its receive thread fell behind). A GSO super-packet counts once.
    pub socket_drops: u64,
    /// Packet rejections by reason (non-zero ones).
    pub rejects: BTreeMap<String, u64>,
    pub sequence: SeqCounts,
    pub step: Option<u64>,
    pub first_timestamp: Option<u64>,
    pub newest_timestamp: Option<u64>,
    /// Missing timestamps as [start, end) ranges (the oldest `MAX_RANGES`).
    pub missing: Vec<(u64, u64)>,
}

/// Ranges of missing timestamps kept in a snapshot.
pub const MAX_RANGES: usize = 1000;
/// How often a receive thread reads its socket's drop count from the kernel.
const DROPS_EVERY: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    #[serde(skip)]
    pub at: Option<Instant>,
    pub substreams: Vec<SubstreamSnapshot>,
}

impl Snapshot {
    pub fn sequence(&self) -> SeqCounts {
        let mut t = SeqCounts::default();
        for s in &self.substreams {
            t += s.sequence;
        }
        t
    }
    pub fn heaps(&self) -> u64 {
        self.substreams.iter().map(|s| s.heaps).sum()
    }
    pub fn heap_bytes(&self) -> u64 {
        self.substreams.iter().map(|s| s.heap_bytes).sum()
    }
    /// Packets the harness's own sockets dropped (see [`SubstreamSnapshot::socket_drops`]).
    pub fn socket_drops(&self) -> u64 {
        self.substreams.iter().map(|s| s.socket_drops).sum()
    }
    pub fn malformed(&self) -> u64 {
        self.substreams
            .iter()
            .map(|s| s.malformed_packets + s.sequence.misaligned)
            .sum()
    }
    /// Timestamp step (samples per heap per polarisation), once any substream knows it.
    pub fn step(&self) -> Option<u64> {
        self.substreams.iter().find_map(|s| s.step)
    }
    /// Sample rate per polarisation that `heaps` heaps over `secs` seconds stand for: each heap
    /// of one substream covers `step` samples, and every substream covers the same samples.
    pub fn sample_rate(&self, heaps: u64, secs: f64) -> f64 {
        let n = self.substreams.len().max(1) as f64;
        match self.step() {
            Some(step) if secs > 0.0 => heaps as f64 * step as f64 / n / secs,
            _ => 0.0,
        }
    }
}

pub struct Receiver {
    subs: Vec<Arc<Substream>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Receiver {
    /// Binds every substream (joining multicast groups) and starts the threads.
    pub fn start(cfg: &ReceiveConfig, sink: Arc<dyn HeapSink>) -> Result<Self, ReceiveError> {
        let n = cfg.substreams.len();
        if n == 0 {
            return Err(ReceiveError::NoSubstreams);
        }
        if cfg.channels == 0 || !cfg.channels.is_multiple_of(n) {
            return Err(ReceiveError::Uneven {
                channels: cfg.channels,
                substreams: n,
            });
        }
        let sock_cfg = SocketConfig {
            buffer_bytes: cfg.buffer_bytes,
            interface: cfg.interface,
            ..SocketConfig::default()
        };
        let sockets = bind_all(&cfg.substreams, &sock_cfg)?;
        let per_sub = cfg.channels / n;
        let stop = Arc::new(AtomicBool::new(false));
        let mut subs = Vec::new();
        let mut threads = Vec::new();
        for (index, (addr, socket)) in sockets.into_iter().enumerate() {
            let sub = Arc::new(Substream {
                index,
                addr,
                first_channel: index * per_sub,
                stats: Stats::default(),
                rejects: Arc::new(RejectCounters::new()),
                tracker: Mutex::new(None),
            });
            let mut worker = Worker {
                sub: sub.clone(),
                sink: sink.clone(),
                channels: cfg.channels,
                per_sub,
                spectra_per_heap: cfg.spectra_per_heap,
                window: cfg.reorder_window.max(1),
                payload: cfg.payload,
                limits: Limits {
                    max_packet: 65_536,
                    ..Limits::default()
                },
                asm: None,
                events: Vec::new(),
                counted: Vec::new(),
                last_misaligned: None,
            };
            let stop = stop.clone();
            let handle = std::thread::Builder::new()
                .name(format!("rx-{index}"))
                .spawn(move || {
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
                            count_drops(&rx, &worker.sub.stats);
                        }
                        match rx.recv(Duration::from_millis(50)) {
                            Ok(0) => {}
                            Ok(_) => {
                                for d in rx.datagrams() {
                                    worker.datagram(d);
                                }
                            }
                            Err(e) => {
                                tracing::warn!(substream = index, "receive error: {e}");
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                    count_drops(&rx, &worker.sub.stats);
                    worker.finish();
                })
                .map_err(ReceiveError::Thread)?;
            subs.push(sub);
            threads.push(handle);
        }
        Ok(Self {
            subs,
            stop,
            threads,
        })
    }

    /// The substreams joined, as `ADDR[+N]:PORT` (with the port chosen, if it was 0).
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            addrs: self.subs.iter().map(|s| s.addr).collect(),
        }
    }

    pub fn substreams(&self) -> usize {
        self.subs.len()
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            at: Some(Instant::now()),
            substreams: self.subs.iter().map(|s| s.snapshot()).collect(),
        }
    }

    /// Stops the threads (they hand out the complete heaps still open) and takes a last snapshot.
    pub fn stop(mut self) -> Snapshot {
        self.halt();
        self.snapshot()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Substream {
    fn snapshot(&self) -> SubstreamSnapshot {
        let st = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let step = get(&st.step);
        SubstreamSnapshot {
            index: self.index,
            address: self.addr.to_string(),
            first_channel: self.first_channel,
            packets: get(&st.packets),
            bytes: get(&st.bytes),
            heaps: get(&st.heaps),
            heap_bytes: get(&st.heap_bytes),
            malformed_packets: get(&st.malformed_packets),
            wrong_frequency: get(&st.wrong_frequency),
            descriptors: get(&st.descriptors),
            socket_drops: get(&st.socket_drops),
            rejects: self
                .rejects
                .snapshot()
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(r, n)| (r.name().to_string(), n))
                .collect(),
            sequence: tracker.as_ref().map(|t| t.counts()).unwrap_or_default(),
            step: (step > 0).then_some(step),
            first_timestamp: tracker.as_ref().and_then(|t| t.first()),
            newest_timestamp: tracker.as_ref().and_then(|t| t.newest()),
            missing: tracker
                .as_ref()
                .map(|t| t.holes().take(MAX_RANGES).collect())
                .unwrap_or_default(),
        }
    }
}

/// Binds every address; a port of 0 is chosen once (on the first) and reused for the rest,
/// retrying a few times if another process holds it on a later address.
fn bind_all(
    addrs: &[SocketAddrV4],
    cfg: &SocketConfig,
) -> Result<Vec<(SocketAddrV4, UdpSocket)>, ReceiveError> {
    let mut last_err = None;
    for _attempt in 0..8 {
        let mut out = Vec::with_capacity(addrs.len());
        let mut port = addrs[0].port();
        let mut failed = false;
        for &a in addrs {
            let want = SocketAddrV4::new(*a.ip(), if a.port() == 0 { port } else { a.port() });
            match UdpSocket::bind(want, cfg) {
                Ok(s) => {
                    let bound = match s.local_addr() {
                        Ok(std::net::SocketAddr::V4(v4)) if !a.ip().is_multicast() => v4,
                        _ => want,
                    };
                    if port == 0 {
                        port = bound.port();
                    }
                    out.push((SocketAddrV4::new(*a.ip(), bound.port()), s));
                }
                Err(source) => {
                    let picked = a.port() == 0 && port != 0;
                    last_err = Some(ReceiveError::Bind { addr: want, source });
                    if !picked {
                        return Err(last_err.expect("just set"));
                    }
                    failed = true;
                    break;
                }
            }
        }
        if !failed {
            return Ok(out);
        }
    }
    Err(last_err.unwrap_or(ReceiveError::NoSubstreams))
}

/// The state of one receive thread.
struct Worker {
    sub: Arc<Substream>,
    sink: Arc<dyn HeapSink>,
    channels: usize,
    per_sub: usize,
    spectra_per_heap: Option<usize>,
    window: usize,
    payload: bool,
    limits: Limits,
    /// Created at the first heap start, when heap size and packet size are known.
    asm: Option<Assembly>,
    events: Vec<ChunkEvent<Vec<u8>>>,
    /// Heaps the counter released: (chunk id, complete).
    counted: Vec<(u64, bool)>,
    last_misaligned: Option<u64>,
}

struct Assembly {
    kind: Kind,
    step: u64,
    phase: u64,
    heap_bytes: u64,
}

enum Kind {
    /// Payloads assembled into recycled buffers, for a sink that reads them.
    Copy(ChunkAssembler<Vec<u8>>),
    /// Only which packets arrived.
    Count(Counter),
}

impl Worker {
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
        let result = match &mut a.kind {
            Kind::Copy(asm) => {
                let events = &mut self.events;
                asm.add_packet(
                    &p,
                    |_| {
                        Ok(Placement {
                            chunk: ts / step,
                            slot: 0,
                        })
                    },
                    &mut |e| events.push(e),
                )
            }
            Kind::Count(c) => {
                let r = c.add(
                    ts / step,
                    p.heap_offset,
                    p.payload.len() as u64,
                    &mut self.counted,
                );
                if let Err(reason) = r {
                    self.sub.rejects.count(reason);
                }
                r
            }
        };
        match result {
            Ok(()) => {}
            Err(Reject::TooOld) => {
                let newest = self.tracker(|t| t.newest()).flatten();
                if newest.is_some_and(|n| n > ts && (n - ts) / step > DEFAULT_RESYNC_HEAPS) {
                    // The sender went back in time (a restart): start assembling afresh; the
                    // tracker resynchronises at the next heap.
                    self.asm = None;
                    self.events.clear();
                    self.counted.clear();
                    return;
                }
                self.tracker(|t| t.stray(ts));
            }
            Err(Reject::Duplicate) => {
                self.tracker(|t| t.stray(ts));
            }
            Err(Reject::WrongHeapSize | Reject::Misaligned) => {
                // Already counted by the assembler.
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
        let per_channel = self.per_sub as u64 * 4;
        let spectra = match self.spectra_per_heap {
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
        let step = spectra * 2 * self.channels as u64;
        let ts = p.immediate(items::TIMESTAMP).unwrap_or(0);
        let packet_payload = p.payload.len().max(1);
        let cfg = ChunkConfig {
            slots: 1,
            slot_bytes: size as usize,
            packet_payload,
            window: self.window,
            max_jump: u64::MAX / 4,
        };
        let kind = if self.payload {
            let mut asm = ChunkAssembler::new(cfg, self.sub.rejects.clone());
            for _ in 0..self.window + 2 {
                // Sized to the heap, so never refused.
                let _ = asm.give(vec![0u8; size as usize]);
            }
            Kind::Copy(asm)
        } else {
            Kind::Count(Counter::new(
                size,
                packet_payload as u64,
                self.window as u64,
            ))
        };
        self.asm = Some(Assembly {
            kind,
            step,
            phase: ts % step,
            heap_bytes: size,
        });
        self.sub.stats.step.store(step, Ordering::Relaxed);
        let mut t = self.sub.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_none() {
            *t = Some(SeqTracker::new(step, self.window as u64));
        }
        true
    }

    /// Hands out the chunks the assembler released. At the end (`closing`), incomplete ones are
    /// the heaps still arriving when we stopped: not gaps.
    fn drain(&mut self, closing: bool) {
        let Some(a) = self.asm.as_mut() else {
            self.events.clear();
            self.counted.clear();
            return;
        };
        let sub = &self.sub;
        // Tracker and counters for one released heap; true if it was complete.
        let release = |id: u64, complete: bool| {
            let ts = id * a.step + a.phase;
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
            }
            ts
        };
        for (id, complete) in self.counted.drain(..) {
            release(id, complete);
        }
        for e in self.events.drain(..) {
            let ChunkEvent::Ready(chunk) = e else {
                continue;
            };
            let complete = chunk.present.first().copied().unwrap_or(false);
            let ts = release(chunk.id, complete);
            if complete {
                self.sink
                    .heap(sub.index, sub.first_channel, ts, &chunk.data);
            }
            if let Kind::Copy(asm) = &mut a.kind {
                asm.recycle(chunk);
            }
        }
    }

    fn finish(&mut self) {
        if let Some(a) = self.asm.as_mut() {
            match &mut a.kind {
                Kind::Copy(asm) => {
                    let events = &mut self.events;
                    asm.flush(&mut |e| events.push(e));
                }
                Kind::Count(c) => c.flush(&mut self.counted),
            }
        }
        self.drain(true);
    }
}

/// Heap completion without the payload: which packets of each open heap arrived, with the chunk
/// assembler's rules (a window of open heaps released in order, too old, duplicate, misaligned),
/// for runs that only count heaps.
struct Counter {
    heap_bytes: u64,
    packet_payload: u64,
    window: u64,
    /// Oldest heap id the window accepts; None until the first packet.
    head: Option<u64>,
    /// Open heaps in id order: (id, one bit per packet, bytes received).
    live: VecDeque<(u64, Vec<u64>, u64)>,
    spare: Vec<Vec<u64>>,
}

impl Counter {
    fn new(heap_bytes: u64, packet_payload: u64, window: u64) -> Self {
        Self {
            heap_bytes: heap_bytes.max(1),
            packet_payload: packet_payload.clamp(1, heap_bytes.max(1)),
            window: window.max(1),
            head: None,
            live: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// A packet of heap `id`; released heaps are pushed to `out` as (id, complete).
    fn add(
        &mut self,
        id: u64,
        offset: u64,
        len: u64,
        out: &mut Vec<(u64, bool)>,
    ) -> Result<(), Reject> {
        let index = offset / self.packet_payload;
        let expected = self
            .packet_payload
            .min(self.heap_bytes.saturating_sub(offset));
        if offset >= self.heap_bytes || index * self.packet_payload != offset || len != expected {
            return Err(Reject::Misaligned);
        }
        let head = *self.head.get_or_insert(id);
        if id < head {
            return Err(Reject::TooOld);
        }
        let last = head.saturating_add(self.window - 1);
        if id > last {
            let new_head = id - (self.window - 1);
            while self.live.front().is_some_and(|h| h.0 < new_head) {
                let h = self.live.pop_front().expect("front exists");
                self.release(h, out);
            }
            self.head = Some(new_head);
        }
        let at = self.live.partition_point(|h| h.0 < id);
        if self.live.get(at).is_none_or(|h| h.0 != id) {
            let words = self.heap_bytes.div_ceil(self.packet_payload).div_ceil(64) as usize;
            let mut bits = self.spare.pop().unwrap_or_default();
            bits.clear();
            bits.resize(words, 0);
            self.live.insert(at, (id, bits, 0));
        }
        let h = &mut self.live[at];
        let (word, mask) = ((index / 64) as usize, 1u64 << (index % 64));
        if h.1[word] & mask != 0 {
            return Err(Reject::Duplicate);
        }
        h.1[word] |= mask;
        h.2 += len;
        Ok(())
    }

    fn release(&mut self, h: (u64, Vec<u64>, u64), out: &mut Vec<(u64, bool)>) {
        out.push((h.0, h.2 == self.heap_bytes));
        self.spare.push(h.1);
    }

    fn flush(&mut self, out: &mut Vec<(u64, bool)>) {
        while let Some(h) = self.live.pop_front() {
            self.release(h, out);
        }
    }
}

/// The kernel's count of UDP datagrams dropped for a full receive buffer, host-wide
/// (`/proc/net/snmp`). A rise during a trial says some receiver (maybe ours) fell behind.
pub fn udp_rcvbuf_errors() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let at = header.iter().position(|&h| h == "RcvbufErrors")?;
    values.get(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spead::heap::{HeapItem, HeapWriter};
    use std::net::UdpSocket as StdUdp;

    const CH: usize = 64;
    const SPECTRA: usize = 8;

    /// Records every heap it is given.
    #[derive(Default)]
    struct Record(Mutex<Vec<(usize, usize, u64, u8)>>);
    impl HeapSink for Record {
        fn heap(&self, s: usize, c: usize, t: u64, d: &[u8]) {
            self.0.lock().unwrap().push((s, c, t, d[0]));
        }
    }

    /// Packets of one engine-style heap for substream `sub` of 2 (32 channels each).
    fn heap_packets(sub: usize, ts: u64, fill: u8, max_payload: usize) -> Vec<Vec<u8>> {
        let data = vec![fill; CH / 2 * SPECTRA * 4];
        let mut out = Vec::new();
        HeapWriter::new(max_payload).write(
            ts / 1000,
            &[
                HeapItem::immediate(items::TIMESTAMP, ts),
                HeapItem::immediate(items::FENG_ID, 0),
                HeapItem::immediate(items::FREQUENCY, (sub * CH / 2) as u64),
                HeapItem::addressed(items::FENG_RAW, &data),
            ],
            |p| out.push(p.to_vec()),
        );
        out
    }

    fn wait_for(rx: &Receiver, heaps: u64) -> Snapshot {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = rx.snapshot();
            if s.heaps() >= heaps || Instant::now() > deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn loopback_gaps_duplicates_late_and_malformed() {
        let addrs = vec![
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 0),
        ];
        let mut cfg = ReceiveConfig::new(addrs, CH);
        cfg.reorder_window = 2;
        cfg.buffer_bytes = 4 << 20;
        let record = Arc::new(Record::default());
        let rx = Receiver::start(&cfg, record.clone()).unwrap();
        let ep = rx.endpoint();
        assert_eq!(ep.addrs.len(), 2);
        assert_ne!(ep.addrs[0].port(), 0);
        assert_eq!(ep.addrs[0].port(), ep.addrs[1].port());
        let tx = StdUdp::bind("127.0.0.1:0").unwrap();
        let step = (SPECTRA * 2 * CH) as u64;
        let phase = 5 * 4096;
        let send = |sub: usize, k: u64, fill: u8| {
            for p in heap_packets(sub, phase + k * step, fill, 200) {
                tx.send_to(&p, ep.addrs[sub]).unwrap();
                // Loopback drops nothing while the socket buffer has room; pace a little anyway.
                std::thread::sleep(Duration::from_micros(20));
            }
        };
        // Substream 0: heaps 0..20 without 5 and 9; 9 comes late, 3 twice.
        for k in 0..20 {
            if k != 5 && k != 9 {
                send(0, k, k as u8);
            }
            // A repeat of 3 after its window passed; 9 after its window passed.
            if k == 10 || k == 15 {
                send(0, if k == 10 { 3 } else { 9 }, 99);
            }
        }
        // Substream 1: clean, plus a packet claiming substream 0's channels, and garbage.
        for k in 0..20 {
            send(1, k, 1);
        }
        tx.send_to(&heap_packets(0, phase, 0, 200)[0], ep.addrs[1])
            .unwrap();
        tx.send_to(b"not spead", ep.addrs[1]).unwrap();
        let snap = wait_for(&rx, 38);
        std::thread::sleep(Duration::from_millis(50));
        let snap2 = rx.stop();
        let s0 = &snap2.substreams[0];
        let s1 = &snap2.substreams[1];
        assert_eq!(s0.step, Some(step));
        assert_eq!(s0.first_timestamp, Some(phase));
        assert_eq!(s0.sequence.gaps, 1, "{s0:?}");
        assert_eq!(s0.missing, vec![(phase + 5 * step, phase + 6 * step)]);
        assert_eq!(s0.sequence.late, 1, "{s0:?}");
        assert_eq!(s0.sequence.duplicates, 1, "{s0:?}");
        // The final flush hands out the last open heaps.
        assert_eq!(s0.heaps, 18, "{s0:?} first snapshot {snap:?}");
        assert_eq!(s1.heaps, 20);
        assert_eq!(s1.sequence.gaps, 0);
        assert_eq!(s1.wrong_frequency, 1);
        assert_eq!(s1.malformed_packets, 2);
        assert_eq!(s1.first_channel, 32);
        let seen = record.0.lock().unwrap();
        assert!(seen.iter().all(|&(s, c, _, _)| c == s * 32));
        // In order per substream, with the content of each heap.
        let s0_heaps: Vec<u64> = seen
            .iter()
            .filter(|h| h.0 == 0)
            .map(|h| (h.2 - phase) / step)
            .collect();
        assert_eq!(
            s0_heaps,
            vec![0, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
        );
        assert!(seen
            .iter()
            .filter(|h| h.0 == 0)
            .all(|&(_, _, t, fill)| fill as u64 == (t - phase) / step));
        assert!(snap2.sample_rate(40, 1.0) > 0.0);
    }

    #[test]
    fn counter_follows_the_chunk_assembler_rules() {
        // Heaps of 100 bytes in packets of 40 (40, 40, 20); a window of 2 heaps.
        let mut c = Counter::new(100, 40, 2);
        let mut out = Vec::new();
        for (id, off, len) in [(5, 0, 40), (5, 40, 40), (5, 80, 20), (6, 0, 40)] {
            c.add(id, off, len, &mut out).unwrap();
        }
        assert_eq!(c.add(5, 40, 40, &mut out), Err(Reject::Duplicate));
        assert_eq!(c.add(6, 10, 40, &mut out), Err(Reject::Misaligned));
        assert_eq!(c.add(6, 80, 40, &mut out), Err(Reject::Misaligned));
        assert_eq!(c.add(6, 120, 20, &mut out), Err(Reject::Misaligned));
        assert!(out.is_empty());
        // Heap 8 moves the window to [7, 8]: 5 (complete) and 6 (not) leave.
        c.add(8, 0, 40, &mut out).unwrap();
        assert_eq!(out, vec![(5, true), (6, false)]);
        assert_eq!(c.add(6, 40, 40, &mut out), Err(Reject::TooOld));
        c.flush(&mut out);
        assert_eq!(out.last(), Some(&(8, false)));
    }

    #[test]
    fn count_only_receive_sees_the_same_gaps() {
        let mut cfg = ReceiveConfig::new(vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)], CH / 2);
        cfg.payload = false;
        cfg.reorder_window = 2;
        cfg.buffer_bytes = 4 << 20;
        let record = Arc::new(Record::default());
        let rx = Receiver::start(&cfg, record.clone()).unwrap();
        let dest = rx.endpoint().addrs[0];
        let tx = StdUdp::bind("127.0.0.1:0").unwrap();
        // 32 channels in one substream of a 32-channel band: step 8 x 2 x 32.
        let step = (SPECTRA * 2 * CH / 2) as u64;
        for k in (0..12u64).filter(|&k| k != 4) {
            for p in heap_packets(0, 1000 * step + k * step, 1, 200) {
                tx.send_to(&p, dest).unwrap();
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        wait_for(&rx, 9);
        let snap = rx.stop();
        let s = &snap.substreams[0];
        assert_eq!(s.heaps, 11, "{s:?}");
        assert_eq!(s.sequence.gaps, 1);
        assert_eq!(s.missing, vec![(1004 * step, 1005 * step)]);
        assert!(record.0.lock().unwrap().is_empty(), "no payload, no sink");
    }

    #[test]
    fn uneven_split_is_refused() {
        let cfg = ReceiveConfig::new(vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0); 3], 64);
        assert!(matches!(
            Receiver::start(&cfg, Arc::new(NoSink)),
            Err(ReceiveError::Uneven { .. })
        ));
        let cfg = ReceiveConfig::new(vec![], 64);
        assert!(matches!(
            Receiver::start(&cfg, Arc::new(NoSink)),
            Err(ReceiveError::NoSubstreams)
        ));
    }

    #[test]
    fn rcvbuf_errors_are_readable() {
        // Present on Linux; the value itself is host-wide.
        assert!(udp_rcvbuf_errors().is_some());
    }
}

//! Receive stage: per polarisation, one or more threads ("lanes"), each with its own sockets.
//! Datagrams (GRO batches) go through the lane's own `ChunkAssembler` straight into chunk buffers
//! shared by the polarisation's lanes (`collect`); finished chunks go to the pairing stage, which
//! sends them back with spent buffers swapped in.
//!
//! With several lanes, the polarisation's source addresses are dealt out (address i to lane
//! i mod lanes) and heap k must arrive on address k mod (number of addresses), as dsim and the
//! wire format send it: so each heap, and each slot of a chunk, belongs to exactly one lane.
//! A heap that arrives elsewhere is dropped and counted (`wrong_destination`).
//!
//! Placement and restarts are `place`'s; a lane whose share of the stream goes quiet moves its
//! window along with the others' so that chunks keep flowing. Each lane also counts what the
//! digitiser status items of the heaps it accepts say about saturation (`digitiser`), the
//! descriptor heaps it receives (metadata, not rejected), and its own stalls: the longest gap
//! between its rounds that received, and what the scheduler took from it
//! (`crate::stats::LaneStalls`).
//!
//! How a stalled lane loses data. While a lane's thread is held off its core nothing moves its
//! window: a lane's assembler and placer belong to its thread alone (a quiet lane moves only its
//! own window, in `keep_pace`, and only after a round found its sockets empty), and the collector
//! never hands on a chunk a lane's reported window still holds. The kernel queues the stream in
//! the lane's sockets meanwhile (or drops it there, counted as socket drops). The loss comes when
//! the lane catches up: its sockets carry interleaved heaps of one stream (heap k on address k
//! mod addresses), and a lane drains up to [`BATCHES_PER_SOCKET`] batches from one socket before
//! looking at the next (`drain`): that socket's backlog moves the window to its newest heaps while
//! the other sockets' backlog, older, falls behind the window: "too old". A window in time
//! (`--recv-window`) longer than that skew (8 batches of one socket, as stream time: times the
//! sockets sharing the stream) keeps them.

mod collect;
mod digitiser;
mod place;
mod stream;

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use spead::chunk::{Chunk, ChunkAssembler, ChunkConfig, ChunkEvent};
use spead::transport::{self, DatagramSource, DropCounter, SocketConfig, SourceWaiter, UdpSocket};
use spead::{items, Limits, Packet, Reject};

pub use collect::Collector;
use collect::{LanePos, SlotWriter};
use digitiser::ClipCount;
use place::Placer;
pub use place::CONFIRM;

use super::PipelineError;
use crate::backend::{HostBuffer, POLS};
use crate::stats::{LaneStalls, SchedProbe, Stats};
use spead::packet::PACKET_HEADER_BYTES;

/// GRO buffers (64 KiB each) per receive call. Few (512 KiB in all), so that what the kernel just
/// copied in is likely still in the core's cache when the lane copies it into chunk memory.
const RECV_BATCH: usize = 8;
/// Batches drained from one socket before looking at the others.
const BATCHES_PER_SOCKET: usize = 8;
/// How long a lane waits for packets before it counts as quiet and keeps pace with the others.
const QUIET: Duration = Duration::from_millis(5);
/// After a round that received, the lane sleeps this long before it polls again, so that it
/// takes several GRO buffers per wakeup rather than being woken for each (see
/// `spead::transport::recv`).
const COALESCE: Duration = transport::DEFAULT_COALESCE;
/// How often a lane reads its sockets' drop counts from the kernel.
const DROPS_EVERY: Duration = Duration::from_millis(100);

/// What the receive stage needs: where the digitiser sends, how to open the sockets, and the
/// shape of its heaps and of the chunks they go into.
#[derive(Clone, Debug)]
pub struct RecvSpec {
    /// Sockets for receiving (GRO, no GSO).
    pub socket: SocketConfig,
    /// Each polarisation's source addresses.
    pub sources: [Vec<SocketAddrV4>; POLS],
    /// Receive threads per polarisation (at least 1, at most one per source address).
    pub lanes: usize,
    /// Digitiser heaps per chunk.
    pub slots: usize,
    /// Samples per digitiser heap.
    pub heap_samples: usize,
    /// Packed bytes of one digitiser heap.
    pub heap_bytes: usize,
    /// New samples per polarisation per chunk.
    pub chunk_samples: usize,
    /// ADC sample rate, Hz.
    pub fs: f64,
    /// Chunks each lane's window holds (at least [`RECV_WINDOW`](super::RECV_WINDOW)): see
    /// `--recv-window`.
    pub window: usize,
}

/// What the receivers hand to the pairing stage.
#[derive(Debug)]
pub enum RecvMsg {
    /// A chunk no receiver writes to any more. `id` is the chunk id (timestamp / chunk_samples).
    Chunk {
        pol: usize,
        id: u64,
        chunk: Chunk<HostBuffer>,
    },
    /// The stream jumped; chunks before this message belong to the old stream.
    Resync { pol: usize, to: u64 },
}

/// Opens the sockets of polarisation `pol`, dealt out to `spec.lanes` lanes, and records where
/// they are bound. The engine's one choice of input transport: UDP.
pub fn bind(
    spec: &RecvSpec,
    pol: usize,
    stats: &Stats,
) -> Result<Vec<Vec<transport::Receiver>>, PipelineError> {
    let sc = &spec.socket;
    let addrs = &spec.sources[pol];
    let lanes = spec.lanes.clamp(1, addrs.len().max(1));
    let mut out: Vec<Vec<transport::Receiver>> = (0..lanes).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    let open = |what: &str, r: std::io::Result<UdpSocket>| {
        r.map_err(|error| PipelineError::Bind {
            pol,
            addr: what.to_string(),
            error,
        })
    };
    let groups: Vec<_> = addrs.iter().map(|a| *a.ip()).collect();
    let port = addrs.first().map_or(0, |a| a.port());
    if lanes == 1
        && addrs.len() > 1
        && groups.iter().all(|g| g.is_multicast())
        && addrs.iter().all(|a| a.port() == port)
    {
        // One thread for several groups on one port: one socket joined to all of them.
        let what = format!("{}+{}:{port}", groups[0], groups.len() - 1);
        let s = open(&what, UdpSocket::bind_groups(&groups, port, sc))?;
        tracing::info!(pol, addr = %what, gro = s.caps().gro, "receiving");
        bound.extend(addrs.iter().map(|a| SocketAddr::V4(*a)));
        out[0].push(transport::Receiver::new(s, RECV_BATCH));
    } else {
        for (i, addr) in addrs.iter().enumerate() {
            let s = open(&addr.to_string(), UdpSocket::bind(*addr, sc))?;
            // A multicast socket is bound to the group; a unicast one may have had port 0.
            let shown = if addr.ip().is_multicast() {
                SocketAddr::V4(*addr)
            } else {
                s.local_addr().unwrap_or(SocketAddr::V4(*addr))
            };
            let lane = i % lanes;
            tracing::info!(pol, lane, addr = %shown, gro = s.caps().gro, "receiving");
            bound.push(shown);
            out[lane].push(transport::Receiver::new(s, RECV_BATCH));
        }
    }
    if let Ok(mut b) = stats.pols[pol].bound.lock() {
        *b = bound;
    }
    Ok(out)
}

/// Builds polarisation `pol`'s lanes around one collector holding `buffers`, each lane reading
/// its own sources.
#[allow(clippy::too_many_arguments)]
pub fn lanes<S: DatagramSource>(
    spec: &RecvSpec,
    pol: usize,
    sockets: Vec<Vec<S>>,
    buffers: Vec<HostBuffer>,
    to_pair: Sender<RecvMsg>,
    returns: Receiver<Chunk<HostBuffer>>,
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
) -> Vec<Lane<S>> {
    let n = sockets.len().max(1);
    let collector = Arc::new(Mutex::new(Collector::new(
        pol,
        n,
        spec.slots,
        buffers,
        to_pair,
        returns,
        Arc::clone(stats),
    )));
    let lanes: Vec<Lane<S>> = sockets
        .into_iter()
        .enumerate()
        .map(|(lane, sockets)| Lane::new(spec, pol, lane, n, sockets, &collector, stats, stop))
        .collect();
    let chunk_stats = lanes.iter().map(|l| l.asm.stats().clone()).collect();
    let _ = stats.pols[pol].chunk.set(chunk_stats);
    let stalls = lanes.iter().map(|l| Arc::clone(&l.stalls)).collect();
    let _ = stats.pols[pol].lanes.set(stalls);
    lanes
}

/// One receive thread of one polarisation, reading sources of one transport.
pub struct Lane<S> {
    pol: usize,
    lane: usize,
    lanes: u64,
    /// Source addresses of the polarisation: heap k arrives on address k mod `addresses`.
    addresses: u64,
    heap_samples: u64,
    sockets: Vec<S>,
    asm: ChunkAssembler<SlotWriter>,
    placer: Placer,
    /// Chunks the window holds.
    window: usize,
    limits: Limits,
    collector: Arc<Mutex<Collector>>,
    /// The stream generation this lane is in (see [`collect`]), and the collector's.
    gen: u64,
    gen_now: Arc<AtomicU64>,
    /// No packets for [`QUIET`]: the collector knows, and keeps this lane out of restart votes.
    quiet: bool,
    /// Where the collector last heard this lane's window was.
    reported: Option<LanePos>,
    events: Vec<ChunkEvent<SlotWriter>>,
    /// Saturation the accepted heaps' digitiser status items reported, not yet published.
    clip: ClipCount,
    /// Its longest gap and scheduler waits, read by the control server.
    stalls: Arc<LaneStalls>,
    sched: SchedProbe,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl<S: DatagramSource> Lane<S> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        spec: &RecvSpec,
        pol: usize,
        lane: usize,
        lanes: usize,
        sockets: Vec<S>,
        collector: &Arc<Mutex<Collector>>,
        stats: &Arc<Stats>,
        stop: &Arc<AtomicBool>,
    ) -> Self {
        let chunk_cfg = ChunkConfig {
            slots: spec.slots,
            slot_bytes: spec.heap_bytes,
            packet_payload: spec.heap_bytes,
            window: spec.window,
            // Restarts are recognised by the placer and made explicit, never guessed here.
            max_jump: u64::MAX,
        };
        let chunk_samples = spec.chunk_samples as u64;
        Self {
            pol,
            lane,
            lanes: lanes as u64,
            addresses: spec.sources[pol].len().max(1) as u64,
            heap_samples: spec.heap_samples as u64,
            sockets,
            asm: ChunkAssembler::new(chunk_cfg, stats.pols[pol].rejects.clone()),
            placer: Placer::new(
                chunk_samples,
                spec.heap_samples as u64,
                spec.fs,
                spec.window as u64,
            ),
            window: spec.window,
            // Heaps of another size are let through decoding so that the assembler counts them as
            // the wrong size rather than too large.
            limits: Limits {
                max_packet: (spec.heap_bytes + PACKET_HEADER_BYTES + 1024).max(9200),
                max_heap: Limits::default().max_heap,
            },
            gen_now: lock(collector).gen_now(),
            collector: Arc::clone(collector),
            gen: 0,
            quiet: false,
            reported: None,
            events: Vec::with_capacity(spec.window + 2),
            clip: ClipCount::default(),
            stalls: Arc::default(),
            sched: SchedProbe::own(),
            stats: Arc::clone(stats),
            stop: Arc::clone(stop),
        }
    }

    pub fn name(&self) -> String {
        format!("fengine-recv{}.{}", self.pol, self.lane)
    }

    pub fn run(mut self) -> Result<(), PipelineError> {
        let mut sockets = std::mem::take(&mut self.sockets);
        let mut waiter = S::waiter(&sockets);
        let mut last_packet = Instant::now();
        // The last round that received while the stream flowed: none before the first packet,
        // nor after a round that found the sockets quiet (a gap in the stream is not a stall).
        let mut flowing_since: Option<Instant> = None;
        let mut drops = SocketDrops::new(&sockets);
        while !self.stop.load(Ordering::Relaxed) {
            let r = match waiter.wait(QUIET) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(PipelineError::Receive {
                        pol: self.pol,
                        error,
                    })
                }
            };
            self.placer.now = Instant::now();
            self.sched.sample(self.placer.now, &self.stalls.waits);
            drops.update(
                &sockets,
                self.placer.now,
                &self.stats.pols[self.pol].socket_drops,
            );
            if r == 0 {
                if self.placer.now.duration_since(last_packet) >= QUIET {
                    flowing_since = None;
                    self.keep_pace();
                }
                continue;
            }
            if let Some(before) = flowing_since {
                let gap = self.placer.now.saturating_duration_since(before);
                self.stalls.gap(gap, self.placer.newest_timestamp());
            }
            last_packet = self.placer.now;
            flowing_since = Some(self.placer.now);
            if self.quiet {
                self.quiet = false;
                lock(&self.collector).set_quiet(self.lane, false);
            }
            self.drain(&mut sockets, &waiter);
            self.report();
            self.publish();
            std::thread::sleep(COALESCE);
        }
        Ok(())
    }

    /// Takes up to [`BATCHES_PER_SOCKET`] batches from each ready socket, one socket after the
    /// other. After a stall each socket holds a backlog, and one socket's batches can carry the
    /// window past the next socket's older heaps (see the module comment).
    fn drain(&mut self, sockets: &mut [S], waiter: &S::Waiter) {
        for (i, source) in sockets.iter_mut().enumerate() {
            if !waiter.is_ready(i) {
                continue;
            }
            for _ in 0..BATCHES_PER_SOCKET {
                match source.recv(Duration::ZERO) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(pol = self.pol, lane = self.lane, "receive error: {e}");
                        break;
                    }
                }
                self.take_batch(source);
            }
        }
        self.stalls.lateness(self.placer.latest_late());
    }

    /// Places every datagram of a source's last batch.
    fn take_batch(&mut self, rx: &S) {
        for d in rx.datagrams() {
            self.take(d);
        }
    }

    /// Places one datagram.
    #[inline]
    fn take(&mut self, d: &[u8]) {
        let p = match Packet::decode(d, &self.limits) {
            Ok(p) => p,
            Err(reason) => {
                self.asm.reject(reason);
                return;
            }
        };
        let Some(ts) = p.immediate(items::TIMESTAMP) else {
            if p.carries_descriptors() {
                // A descriptor heap (katgpucbf's dsim sends one every 5 s): metadata. Counted
                // once per heap, by its first packet; rare enough for an atomic.
                if p.heap_offset == 0 {
                    let ps = &self.stats.pols[self.pol];
                    ps.descriptor_heaps.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                self.asm.reject(Reject::MissingMandatoryItem);
            }
            return;
        };
        if self.lanes > 1
            && (ts / self.heap_samples) % self.addresses % self.lanes != self.lane as u64
        {
            self.asm.reject(Reject::WrongDestination);
            return;
        }
        let placed = match self.placer.place(ts) {
            Ok(p) => p,
            Err(reason) => {
                self.asm.reject(reason);
                return;
            }
        };
        if let Some(reason) = placed.jump {
            let now = self.placer.now;
            let decided = lock(&self.collector).propose(self.lane, placed.at.chunk, ts, now);
            if decided.is_none() {
                self.asm.reject(reason);
                return;
            }
            self.report();
        }
        let collector = &self.collector;
        let gen = self.gen;
        let accepted = self.asm.add_placed(
            &p,
            placed.at,
            |id| lock(collector).open(gen, id),
            &mut |e| self.events.push(e),
        );
        // A heap is one packet (the assembler takes no other), so an accepted packet is a heap
        // received whole.
        if accepted.is_ok() {
            self.clip.add(p.immediate(items::DIGITISER_STATUS));
        }
        if !self.events.is_empty() {
            self.report();
        }
    }

    /// Hands what this lane counted since its last round to its polarisation's counters, and
    /// then where the stream has got to.
    fn publish(&mut self) {
        let ps = &self.stats.pols[self.pol];
        self.clip
            .publish(&ps.digitiser_clip_heaps, &ps.digitiser_clip_samples);
        if let Some(ts) = self.placer.newest_timestamp() {
            ps.last_timestamp.store(ts, Ordering::Relaxed);
        }
    }

    /// Tells the collector about finished chunks and where the window is now, and follows a
    /// restart the lanes agreed on. Takes the lock only when there is news.
    fn report(&mut self) {
        let pos = self.asm.head().map(|head| LanePos {
            gen: self.gen,
            head,
        });
        let behind = self.gen_now.load(Ordering::Relaxed) > self.gen;
        if self.events.is_empty() && pos == self.reported && !behind {
            return;
        }
        let collector = Arc::clone(&self.collector);
        let mut c = lock(&collector);
        self.settle(&mut c);
        let restart = c.restart();
        if restart.gen > self.gen {
            // Everything held so far belongs to the old stream: hand it back, then start again
            // where the stream restarted.
            self.asm.resync(restart.chunk, &mut |e| self.events.push(e));
            self.settle(&mut c);
            self.gen = restart.gen;
            self.placer.follow(restart.timestamp);
        }
        let pos = self.asm.head().map(|head| LanePos {
            gen: self.gen,
            head,
        });
        c.advance(self.lane, pos);
        self.reported = pos;
    }

    /// Records this lane's finished chunks in the collector.
    fn settle(&mut self, c: &mut Collector) {
        for e in self.events.drain(..) {
            if let ChunkEvent::Ready(chunk) = e {
                c.finish(self.gen, chunk.id, &chunk.present);
                self.asm.reclaim(chunk); // the writer goes: this lane lets go
            }
        }
    }

    /// A quiet lane moves its window along with the newest chunk any lane opened, so that the
    /// chunks it shares with busy lanes are handed on, and past the chunks the clock says have
    /// ended; and it follows restarts.
    fn keep_pace(&mut self) {
        let (gen, newest) = {
            let mut c = lock(&self.collector);
            if !self.quiet {
                self.quiet = true;
                c.set_quiet(self.lane, true);
            }
            c.front()
        };
        if self.asm.head().is_none() {
            // Nothing received yet, so nothing held: just follow the others' generation.
            self.gen = gen;
            return;
        }
        // A whole polarisation gone silent still hands on what it holds once the clock says it
        // is over: otherwise its partner's frames go alone, all of this polarisation missing,
        // while its partly filled chunks wait for the stream to come back.
        let ended = self.placer.ended_before(self.placer.now).unwrap_or(0);
        let head = newest.saturating_sub(self.window as u64 - 1).max(ended);
        if gen == self.gen && self.asm.head().is_some_and(|h| h < head) {
            self.asm.expire_before(head, &mut |e| self.events.push(e));
        }
        self.report();
    }
}

/// The drop counts of a lane's sources (the kernel's, for sockets), read every [`DROPS_EVERY`]
/// and added to a counter as they grow.
struct SocketDrops {
    counters: Vec<DropCounter>,
    at: Instant,
}

impl SocketDrops {
    fn new(sockets: &[impl DatagramSource]) -> Self {
        Self {
            counters: sockets.iter().map(DropCounter::new).collect(),
            at: Instant::now(),
        }
    }

    fn update(&mut self, sockets: &[impl DatagramSource], now: Instant, total: &AtomicU64) {
        if now.duration_since(self.at) < DROPS_EVERY {
            return;
        }
        self.at = now;
        for (c, s) in self.counters.iter_mut().zip(sockets) {
            total.fetch_add(c.take(s), Ordering::Relaxed);
        }
    }
}

fn lock(c: &Mutex<Collector>) -> MutexGuard<'_, Collector> {
    // A panicking lane poisons the mutex; the others go on with the collector as it is.
    c.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;
    use crate::pipeline::{StageSpecs, RECV_WINDOW as RECV_WINDOW_MIN};
    use crate::stats;
    use crossbeam_channel::bounded;
    use spead::transport::loopback::{self, LoopbackSource};
    use spead::transport::DatagramSink;
    use spead::transport::SourceWaiter;
    use spead::{HeapItem, HeapWriter};

    fn config() -> EngineConfig {
        // Chunks of 64 x 32 x 2 = 4096 samples: 16 heaps of 256.
        let args = crate::config::test_args(&[
            "--channels",
            "16",
            "--taps",
            "2",
            "--spectra-per-heap",
            "64",
            "--heaps-per-frame",
            "2",
            "--heap-samples",
            "256",
            "--adc-sample-rate",
            "1e6",
            "--max-delay",
            "0",
        ])
        .unwrap();
        EngineConfig::from_args(&args).unwrap()
    }

    /// A digitiser heap of `bytes` at `ts`, as dsim sends it: timestamp, the status item when
    /// given, samples.
    fn heap(ts: u64, status: Option<u64>, bytes: usize) -> Vec<u8> {
        let payload = vec![0u8; bytes];
        let mut its = vec![HeapItem::immediate(items::TIMESTAMP, ts)];
        if let Some(s) = status {
            its.push(HeapItem::immediate(items::DIGITISER_STATUS, s));
        }
        its.push(HeapItem::addressed(items::ADC_SAMPLES, &payload));
        let mut out = Vec::new();
        HeapWriter::new(bytes).write(ts, &its, |d| out = d.to_vec());
        out
    }

    /// The status items of the heaps a lane accepts are counted, on its polarisation only, and
    /// reach the shared counters when the lane publishes; a heap without the item, or one the
    /// lane rejects, counts nothing.
    #[test]
    fn digitiser_status_of_accepted_heaps_is_counted() {
        let cfg = config();
        let stats = Arc::new(Stats::for_config(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (to_pair, _chunks) = bounded(16);
        let (_returns_tx, returns) = bounded(16);
        let buffers = (0..4)
            .map(|_| HostBuffer::zeroed(cfg.input.geometry.chunk_bytes()))
            .collect();
        let pol = 1;
        let mut lanes = lanes(
            &StageSpecs::new(&cfg).recv,
            pol,
            vec![Vec::<LoopbackSource>::new()],
            buffers,
            to_pair,
            returns,
            &stats,
            &stop,
        );
        let lane = &mut lanes[0];
        let (hs, hb) = (cfg.input.heap_samples as u64, cfg.input.heap_bytes);
        let clip = |n: u64| 2 | (n << 32);
        let datagrams = [
            heap(0, Some(clip(5)), hb),
            heap(hs, Some(0), hb),
            heap(2 * hs, None, hb),
            // The count is bits 32-47 alone.
            heap(3 * hs, Some(clip(0xffff) | (0x7f << 48) | 0x10), hb),
            // Rejected: a duplicate, the wrong size, a misaligned timestamp.
            heap(0, Some(clip(5)), hb),
            heap(4 * hs, Some(clip(7)), hb / 2),
            heap(5 * hs + 1, Some(clip(7)), hb),
        ];
        // Through the transport seam, as a lane's thread takes a batch.
        let (mut sink, mut source) = loopback::pair(datagrams.len());
        let dest = SocketAddr::from(([127, 0, 0, 1], 7148));
        for d in &datagrams {
            sink.send_segments(dest, d, d.len()).unwrap();
        }
        assert_eq!(source.recv(Duration::ZERO).unwrap(), datagrams.len());
        lane.take_batch(&source);
        let ps = &stats.pols[pol];
        let counts = || {
            [
                ps.digitiser_clip_heaps.load(Ordering::Relaxed),
                ps.digitiser_clip_samples.load(Ordering::Relaxed),
            ]
        };
        assert_eq!(counts(), [0, 0], "published once per receive round");
        lane.publish();
        assert_eq!(ps.heaps_received(), 4);
        for reason in [Reject::Duplicate, Reject::WrongHeapSize, Reject::Misaligned] {
            assert_eq!(ps.rejects.get(reason), 1, "{reason:?}");
        }
        assert_eq!(counts(), [2, 5 + 0xffff]);
        // Published once: the next round adds only what is new.
        lane.take(&heap(6 * hs, Some(clip(1)), hb));
        lane.publish();
        assert_eq!(counts(), [3, 5 + 0xffff + 1]);
        let other = &stats.pols[1 - pol];
        assert_eq!(other.digitiser_clip_heaps.load(Ordering::Relaxed), 0);
        assert_eq!(other.digitiser_clip_samples.load(Ordering::Relaxed), 0);
    }

    /// Descriptor heaps between data heaps (one of them in two packets) are counted once each on
    /// the polarisation that got them, rejected for nothing, and take no data heap with them.
    #[test]
    fn descriptor_heaps_between_data_heaps_are_counted_not_rejected() {
        let cfg = config();
        let stats = Arc::new(Stats::for_config(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (to_pair, chunks) = bounded(16);
        let (_returns_tx, returns) = bounded(16);
        let buffers = (0..4)
            .map(|_| HostBuffer::zeroed(cfg.input.geometry.chunk_bytes()))
            .collect();
        let pol = 0;
        let mut lanes = lanes(
            &StageSpecs::new(&cfg).recv,
            pol,
            vec![Vec::<LoopbackSource>::new()],
            buffers,
            to_pair,
            returns,
            &stats,
            &stop,
        );
        let lane = &mut lanes[0];
        let (hs, hb) = (cfg.input.heap_samples as u64, cfg.input.heap_bytes);
        let descriptors = spead::stream_descriptors::digitiser(hs, 10);
        let descriptor_heap = |max_payload: usize| {
            let mut packets = Vec::new();
            spead::stream_descriptors::write_heap(&descriptors, 1, max_payload, |p| {
                packets.push(p.to_vec())
            });
            packets
        };
        let slots = cfg.input.geometry.chunk_samples as u64 / hs;
        let mut datagrams = Vec::new();
        for k in 0..2 * slots {
            datagrams.push(heap(k * hs, Some(0), hb));
            if k == 0 || k == slots - 1 {
                datagrams.extend(descriptor_heap(8192));
            }
            if k == slots + 3 {
                let split = descriptor_heap(400);
                assert_eq!(split.len(), 2, "a descriptor heap in two packets");
                datagrams.extend(split);
            }
        }
        for d in &datagrams {
            lane.take(d);
        }
        // Move the window past both chunks, as the next chunk's heaps would.
        lane.asm.expire_before(2, &mut |e| lane.events.push(e));
        lane.report();
        lane.publish();
        let ps = &stats.pols[pol];
        assert_eq!(ps.descriptor_heaps.load(Ordering::Relaxed), 3);
        assert_eq!(
            stats.pols[1 - pol].descriptor_heaps.load(Ordering::Relaxed),
            0
        );
        assert_eq!(ps.rejects.snapshot().iter().map(|(_, n)| n).sum::<u64>(), 0);
        assert_eq!(ps.heaps_received(), 2 * slots);
        // Both chunks went on whole.
        let mut whole = Vec::new();
        while let Ok(RecvMsg::Chunk { id, chunk, .. }) = chunks.try_recv() {
            assert!(chunk.present.iter().all(|&p| p), "chunk {id} lost heaps");
            whole.push(id);
        }
        assert_eq!(whole, [0, 1]);
    }

    /// Lanes of polarisation 1 over `sources`, with buffers enough for every chunk of the tests
    /// and a window of `window` chunks.
    fn lanes_over(
        cfg: &EngineConfig,
        sources: Vec<Vec<LoopbackSource>>,
        window: usize,
        stats: &Arc<Stats>,
        stop: &Arc<AtomicBool>,
    ) -> (Vec<Lane<LoopbackSource>>, Receiver<RecvMsg>) {
        let (to_pair, chunks) = bounded(1024);
        let (returns_tx, returns) = bounded(1024);
        // Kept open for the lanes' lifetime: a closed return queue is not an error, but tidy.
        std::mem::forget(returns_tx);
        let buffers = (0..64)
            .map(|_| HostBuffer::zeroed(cfg.input.geometry.chunk_bytes()))
            .collect();
        let mut spec = StageSpecs::new(cfg).recv;
        spec.window = window;
        let lanes = lanes(&spec, 1, sources, buffers, to_pair, returns, stats, stop);
        (lanes, chunks)
    }

    fn longest_gap(stats: &Stats) -> Duration {
        let l = &stats.pols[1].lanes.get().expect("lanes registered")[0];
        Duration::from_nanos(l.longest_gap_ns.load(Ordering::Relaxed))
    }

    /// A lane held up while the stream flows records the gap as its longest, with when, and
    /// /metrics reports it; a pause of the stream itself (the lane finds its sockets quiet) is
    /// no stall and is not counted.
    #[test]
    fn a_stalled_lane_records_its_longest_gap() {
        let cfg = config();
        let stats = Arc::new(Stats::for_config(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (mut sink, source) = loopback::pair(64);
        let (mut lanes, _chunks) = lanes_over(&cfg, vec![vec![source]], 3, &stats, &stop);
        let lane = lanes.pop().unwrap();
        let collector = Arc::clone(&lane.collector);
        let runner = std::thread::spawn(move || lane.run());
        let (hs, hb) = (cfg.input.heap_samples as u64, cfg.input.heap_bytes);
        let dest = SocketAddr::from(([127, 0, 0, 1], 7148));
        // The stream at its real pace: a heap of 256 samples every 256 us at 1 MHz, sent a
        // millisecond's worth at a time.
        let mut ts = 0;
        let mut flow = |ms: u64, ts: &mut u64| {
            let t0 = Instant::now();
            for k in 0..ms {
                for _ in 0..4 {
                    let d = heap(*ts, None, hb);
                    sink.send_segments(dest, &d, d.len()).unwrap();
                    *ts += hs;
                }
                std::thread::sleep(
                    (t0 + Duration::from_millis(k + 1)).saturating_duration_since(Instant::now()),
                );
            }
        };
        flow(100, &mut ts);
        // The digitiser pauses (its timestamps go on with the clock): the lane finds its socket
        // quiet.
        std::thread::sleep(Duration::from_millis(300));
        ts += 300 * 4 * hs;
        flow(100, &mut ts);
        assert!(
            longest_gap(&stats) < Duration::from_millis(150),
            "a pause of the stream counted as a stall: {:?}",
            longest_gap(&stats)
        );
        // Now the lane is held up (blocked on its collector) while the stream flows on.
        let before = stats::unix_ns();
        let held = std::thread::spawn(move || {
            let _c = collector.lock().unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        flow(400, &mut ts);
        held.join().unwrap();
        flow(50, &mut ts);
        stop.store(true, Ordering::Relaxed);
        runner.join().unwrap().unwrap();
        let gap = longest_gap(&stats);
        assert!(
            gap >= Duration::from_millis(280) && gap < Duration::from_millis(1000),
            "{gap:?}"
        );
        let l = &stats.pols[1].lanes.get().unwrap()[0];
        let at = l.longest_gap_unix_ns.load(Ordering::Relaxed);
        assert!(
            at > before && at <= stats::unix_ns(),
            "gap's end {at}, stall from {before}"
        );
        let placed = l.longest_gap_timestamp.load(Ordering::Relaxed);
        assert!(
            placed > 0 && placed < ts,
            "timestamp before the gap {placed}, sent to {ts}"
        );
        // Nothing lost to the stall: the lane caught up within its window.
        assert_eq!(stats.pols[1].rejects.get(Reject::TooOld), 0);
        // And /metrics says so, per polarisation and lane.
        let labels = crate::metrics::EngineLabels {
            backend: "cpu",
            feng_id: None,
        };
        let text = crate::metrics::render(&crate::metrics::registry(stats.clone(), &labels));
        let series = "fengine_input_longest_gap_seconds{backend=\"cpu\",pol=\"1\",lane=\"0\"} ";
        let shown: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .expect("the lane's series")
            .parse()
            .unwrap();
        assert!(
            (shown - gap.as_secs_f64()).abs() < 1e-6,
            "{shown} vs {gap:?}"
        );
    }

    /// After a stall, each of a lane's sockets holds a backlog of interleaved heaps. Drained one
    /// socket at a time, the first socket's batches carry the smallest window past the second's
    /// older heaps; a window longer than the skew keeps them all. Either way the lane's latest
    /// heap measures the skew: 8 batches of 8 heaps of one socket, 125 heaps of the stream, 7.8
    /// chunks of 16.
    #[test]
    fn a_backlog_on_several_sockets_needs_a_window_longer_than_the_skew() {
        let cfg = config();
        let chunk_s = cfg.chunk_seconds();
        for (window, lost) in [(RECV_WINDOW_MIN, true), (10, false)] {
            let (too_old, received, latest) = backlog(window);
            assert_eq!(too_old > 0, lost, "window {window}: {too_old} too old");
            assert_eq!(too_old + received, 20 * 16);
            let chunks = latest.as_secs_f64() / chunk_s;
            assert!(
                (7.7..7.9).contains(&chunks),
                "latest heap {chunks} chunks behind"
            );
        }
    }

    /// Drains a backlog of 20 chunks of 16 heaps spread over two sockets (8 heaps a batch) with
    /// a window of `window` chunks: (heaps too old, heaps received, the latest heap's lateness).
    fn backlog(window: usize) -> (u64, u64, Duration) {
        let cfg = config();
        let stats = Arc::new(Stats::for_config(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (mut sink0, source0) = loopback::pair(8);
        let (mut sink1, source1) = loopback::pair(8);
        let mut sockets = vec![source0, source1];
        let (mut lanes, _chunks) = lanes_over(&cfg, vec![Vec::new()], window, &stats, &stop);
        let lane = &mut lanes[0];
        // Two source addresses: heap k on address k mod 2. The backlog: 20 chunks of 16 heaps,
        // far more than 8 batches of 8 heaps of one socket.
        lane.addresses = 2;
        let (hs, hb) = (cfg.input.heap_samples as u64, cfg.input.heap_bytes);
        let dest = SocketAddr::from(([127, 0, 0, 1], 7148));
        let heaps = 20 * 16;
        for k in 0..heaps {
            let d = heap(k * hs, None, hb);
            let sink = if k % 2 == 0 { &mut sink0 } else { &mut sink1 };
            sink.send_segments(dest, &d, d.len()).unwrap();
        }
        let mut waiter = LoopbackSource::waiter(&sockets);
        for _ in 0..heaps {
            if waiter.wait(Duration::ZERO).unwrap() == 0 {
                break;
            }
            lane.drain(&mut sockets, &waiter);
            lane.report();
        }
        let ps = &stats.pols[1];
        let l = &ps.lanes.get().expect("lanes registered")[0];
        let latest = Duration::from_nanos(l.latest_heap_ns.load(Ordering::Relaxed));
        (ps.rejects.get(Reject::TooOld), ps.heaps_received(), latest)
    }
}

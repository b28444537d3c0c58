//! Joins the engine's output substreams: one receive thread per substream (GRO batches through
//! the spead transport), heaps assembled into recycled buffers by the spead chunk assembler (one
//! heap per chunk, so nothing is allocated per heap), and each substream's timestamps tracked by
//! [`SeqTracker`](crate::gaps::SeqTracker). Complete heaps go to a [`HeapSink`] on the receive thread.
//!
//! The assembler keeps `reorder_window` heaps open and hands them out in timestamp order; a packet
//! arriving after its heap left the window is a stray, which the tracker counts as a late heap
//! (it filled a hole) or a duplicate. Without a sink that reads payloads, the assembler runs in
//! its count-only mode: the same rules, no copy.
//!
//! With several engines sending to the same substreams (an array, as katgpucbf's engines share
//! the output groups), each substream has a lane per engine, chosen by the heap's feng_id; every
//! snapshot entry is then one engine's lane, with its `feng_id`.
//!
//! - this module: the receiver (configuration, threads, snapshots) and the sink it feeds.
//! - `worker`: one receive thread and its per-datagram checks.
//! - `snapshot`: the counters a thread shares, and snapshots of them.
//! - `bind`: binding the substreams' sockets.
//! - `kernel`: the host-wide counters of `/proc`.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use placement::{Affinity, CoreSet, Placement, PlacementError, Policy};
use spead::chunk::Discard;
use spead::transport::Receiver as UdpReceiver;
use spead::transport::{Endpoint, SocketConfig};
use spead::RejectCounters;

mod bind;
mod kernel;
mod snapshot;
mod worker;

pub use kernel::udp_rcvbuf_errors;
pub use snapshot::{CounterCheck, Snapshot, SubstreamSnapshot, MAX_RANGES};

use crate::feng_raw::OutputBits;
use bind::bind_all;
use snapshot::{Stats, Substream};
use worker::{Worker, WorkerConfig};

/// Buffers per receive call (quinn-udp's most).
const RECV_BATCH: usize = 32;

/// Receives complete heaps. Called on the substream's receive thread: keep it short.
pub trait HeapSink: Send + Sync {
    /// `data` is the heap's `feng_raw`: (channels_per_substream, spectra_per_heap, 2 pols)
    /// complex values, in the receiver's output format ([`crate::feng_raw`]).
    fn heap(&self, substream: usize, first_channel: usize, timestamp: u64, data: &[u8]);
    /// A heap of engine `feng_id` of an array (0 without one). A sink that tells engines apart
    /// ([`PerEngine`]) overrides this; any other sees every engine's heaps alike.
    fn engine_heap(
        &self,
        feng_id: usize,
        substream: usize,
        first_channel: usize,
        timestamp: u64,
        data: &[u8],
    ) {
        let _ = feng_id;
        self.heap(substream, first_channel, timestamp, data);
    }
}

/// One sink per engine of an array, by feng_id.
pub struct PerEngine(pub Vec<Arc<dyn HeapSink>>);
impl HeapSink for PerEngine {
    fn heap(&self, s: usize, c: usize, t: u64, d: &[u8]) {
        self.engine_heap(0, s, c, t, d);
    }
    fn engine_heap(&self, feng_id: usize, s: usize, c: usize, t: u64, d: &[u8]) {
        if let Some(sink) = self.0.get(feng_id) {
            sink.heap(s, c, t, d);
        }
    }
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
    /// ADC samples per sample the output's PFB reads: 1 for a wideband output, the decimation D
    /// for a narrowband one. A spectrum steps 2n of them, a heap `spectra_per_heap` spectra.
    pub decimation: usize,
    /// Spectra per heap; None: learned from the first heap's size.
    pub spectra_per_heap: Option<usize>,
    /// The engine's output format (its `/status` says): 4 bytes per channel and spectrum at 8
    /// bits, 2 at 4 bits.
    pub bits: OutputBits,
    /// Interface to join multicast groups on.
    pub interface: Option<Ipv4Addr>,
    /// Socket receive buffer asked for.
    pub buffer_bytes: usize,
    /// Heaps kept open for reordering; a heap completed later than this is late.
    pub reorder_window: usize,
    /// Assemble payloads for the sink. False: only count which packets of each heap arrived
    /// (no copy, so a receive thread keeps up with more; the sink is then never called).
    pub payload: bool,
    /// Engines sending to these substreams (an array: feng_id 0..n, heaps told apart by it and
    /// their counters checked). None: one engine, its feng_id not looked at.
    pub array: Option<usize>,
    /// Cores for the receive threads (`--recv-affinity`): thread i (substream i) takes the i-th
    /// core of a list, cycling; `auto` plans a core of its own for each. None: any core.
    pub affinity: Option<Affinity>,
    /// The receive threads' scheduling policy (`--realtime`).
    pub realtime: Policy,
}

impl ReceiveConfig {
    pub fn new(substreams: Vec<SocketAddrV4>, channels: usize) -> Self {
        Self {
            substreams,
            channels,
            decimation: 1,
            spectra_per_heap: None,
            bits: OutputBits::Eight,
            interface: None,
            buffer_bytes: 64 << 20,
            reorder_window: 4,
            payload: true,
            array: None,
            affinity: None,
            realtime: Policy::Other,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("no substreams to join")]
    NoSubstreams,
    #[error("an array needs at least one engine")]
    NoEngines,
    #[error("{channels} channels do not split evenly over {substreams} substreams")]
    Uneven { channels: usize, substreams: usize },
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddrV4,
        source: io::Error,
    },
    #[error("cannot start a receive thread: {0}")]
    Thread(io::Error),
    /// A receive thread could not take the cores or scheduling asked for.
    #[error("receive thread {thread}: {error}")]
    Placement {
        thread: String,
        error: PlacementError,
    },
}

pub struct Receiver {
    /// Every lane: substream-major, one per engine of the array (one per substream without).
    subs: Vec<Arc<Substream>>,
    /// Lanes per substream.
    engines: usize,
    /// Whether heaps are told apart by feng_id (an array, of one engine or more).
    array: bool,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// One placement per receive thread (`n` of them) from `cfg`'s affinity and policy.
fn placements(cfg: &ReceiveConfig, n: usize) -> Result<Vec<Placement>, ReceiveError> {
    let refused = |error| ReceiveError::Placement {
        thread: "rx-*".into(),
        error,
    };
    let cores = match &cfg.affinity {
        Some(a) => {
            let allowed = CoreSet::allowed().map_err(refused)?;
            Some(a.deal(n, &allowed).map_err(refused)?.threads)
        }
        None => None,
    };
    Ok((0..n)
        .map(|i| Placement {
            cores: cores.as_ref().map(|c| c[i].clone()),
            policy: cfg.realtime,
        })
        .collect())
}

impl Receiver {
    /// Binds every substream (joining multicast groups) and starts the threads, each reading its
    /// socket through the UDP transport (the harness's one choice of transport).
    pub fn start(cfg: &ReceiveConfig, sink: Arc<dyn HeapSink>) -> Result<Self, ReceiveError> {
        let n = cfg.substreams.len();
        if n == 0 {
            return Err(ReceiveError::NoSubstreams);
        }
        if cfg.array == Some(0) {
            return Err(ReceiveError::NoEngines);
        }
        let engines = cfg.array.unwrap_or(1);
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
        let placements = placements(cfg, n)?;
        // Each thread takes its placement itself and says whether the kernel let it.
        let (placed_tx, placed_rx) = std::sync::mpsc::channel();
        let per_sub = cfg.channels / n;
        let payload = cfg.payload;
        let stop = Arc::new(AtomicBool::new(false));
        let mut subs = Vec::new();
        let mut threads = Vec::new();
        for (index, (addr, socket)) in sockets.into_iter().enumerate() {
            let lanes: Vec<Arc<Substream>> = (0..engines)
                .map(|feng_id| {
                    Arc::new(Substream {
                        index,
                        feng_id: cfg.array.map(|_| feng_id),
                        addr,
                        first_channel: index * per_sub,
                        stats: Stats::default(),
                        rejects: Arc::new(RejectCounters::new()),
                        tracker: Mutex::new(None),
                    })
                })
                .collect();
            let wcfg = WorkerConfig {
                channels: cfg.channels,
                decimation: cfg.decimation.max(1),
                per_sub,
                spectra_per_heap: cfg.spectra_per_heap,
                bits: cfg.bits,
                window: cfg.reorder_window.max(1),
                array: cfg.array,
            };
            let (thread_lanes, sink, stop) = (lanes.clone(), sink.clone(), stop.clone());
            let (placement, placed_tx) = (placements[index].clone(), placed_tx.clone());
            let name = format!("rx-{index}");
            let thread = name.clone();
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let placed = placement
                        .apply()
                        .map_err(|error| ReceiveError::Placement { thread, error });
                    let ok = placed.is_ok();
                    let _ = placed_tx.send(placed);
                    // Dropped now, not as the thread ends: the starter reads until every sender is gone.
                    drop(placed_tx);
                    if !ok {
                        return;
                    }
                    // Built on its thread, which touches its buffers first.
                    let rx = UdpReceiver::new(socket, RECV_BATCH);
                    if payload {
                        Worker::<Vec<u8>>::new(thread_lanes, sink, wcfg).run(rx, stop)
                    } else {
                        Worker::<Discard>::new(thread_lanes, sink, wcfg).run(rx, stop)
                    }
                })
                .map_err(ReceiveError::Thread)?;
            subs.extend(lanes);
            threads.push(handle);
        }
        drop(placed_tx);
        if let Some(e) = placed_rx.iter().find_map(Result::err) {
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                let _ = t.join();
            }
            return Err(e);
        }
        Ok(Self {
            subs,
            engines,
            array: cfg.array.is_some(),
            stop,
            threads,
        })
    }

    /// The substreams joined, as `ADDR[+N]:PORT` (with the port chosen, if it was 0).
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            addrs: self
                .subs
                .iter()
                .step_by(self.engines)
                .map(|s| s.addr)
                .collect(),
        }
    }

    pub fn substreams(&self) -> usize {
        self.subs.len() / self.engines
    }

    /// Engines told apart (1 without an array).
    pub fn engines(&self) -> usize {
        self.engines
    }

    /// Whether heaps are told apart by feng_id (`ReceiveConfig::array` given).
    pub fn is_array(&self) -> bool {
        self.array
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

#[cfg(test)]
mod tests {
    use super::*;
    use placement::ThreadView;
    use spead::heap::{HeapItem, HeapWriter};
    use spead::items;
    use std::net::UdpSocket as StdUdp;
    use std::time::Duration;

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
        packets(sub, ts, &vec![fill; CH / 2 * SPECTRA * 4], max_payload)
    }

    /// Packets of one engine-style heap of `data` for substream `sub` of 2.
    fn packets(sub: usize, ts: u64, data: &[u8], max_payload: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        HeapWriter::new(max_payload).write(
            ts / 1000,
            &[
                HeapItem::immediate(items::TIMESTAMP, ts),
                HeapItem::immediate(items::FENG_ID, 0),
                HeapItem::immediate(items::FREQUENCY, (sub * CH / 2) as u64),
                HeapItem::addressed(items::FENG_RAW, data),
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
        // Without an array the snapshot says nothing of engines or counters.
        let json = serde_json::to_value(s0).unwrap();
        assert!(json.get("feng_id").is_none() && json.get("heap_counters").is_none());
        assert!(snap2.heap_counters().is_none());
    }

    /// Twelve heaps of one 32-channel substream with the fifth left out, stepping `step` ADC
    /// samples, into a receiver configured by `configure`; its snapshot once it has them all.
    fn one_heap_left_out(
        step: u64,
        configure: impl FnOnce(&mut ReceiveConfig),
        record: Arc<Record>,
    ) -> Snapshot {
        let mut cfg = ReceiveConfig::new(vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)], CH / 2);
        cfg.reorder_window = 2;
        cfg.buffer_bytes = 4 << 20;
        configure(&mut cfg);
        let rx = Receiver::start(&cfg, record).unwrap();
        let dest = rx.endpoint().addrs[0];
        let tx = StdUdp::bind("127.0.0.1:0").unwrap();
        for k in (0..12u64).filter(|&k| k != 4) {
            for p in heap_packets(0, 1000 * step + k * step, 1, 200) {
                tx.send_to(&p, dest).unwrap();
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        wait_for(&rx, 9);
        rx.stop()
    }

    #[test]
    fn count_only_receive_sees_the_same_gaps() {
        let record = Arc::new(Record::default());
        // 32 channels in one substream of a 32-channel band: step 8 x 2 x 32.
        let step = (SPECTRA * 2 * CH / 2) as u64;
        let snap = one_heap_left_out(step, |cfg| cfg.payload = false, record.clone());
        let s = &snap.substreams[0];
        assert_eq!(s.heaps, 11, "{s:?}");
        assert_eq!(s.sequence.gaps, 1);
        assert_eq!(s.missing, vec![(1004 * step, 1005 * step)]);
        assert!(record.0.lock().unwrap().is_empty(), "no payload, no sink");
    }

    /// A narrowband output's heaps step 2nD ADC samples a spectrum: told D, the receiver expects
    /// that step, sees the one heap left out as the one gap and counts the rate in ADC samples.
    #[test]
    fn a_decimated_outputs_heaps_step_by_2nd() {
        let step = (SPECTRA * 2 * CH / 2 * 8) as u64;
        let snap = one_heap_left_out(step, |cfg| cfg.decimation = 8, Arc::default());
        let s = &snap.substreams[0];
        assert_eq!((s.heaps, s.step), (11, Some(step)), "{s:?}");
        assert_eq!(s.sequence.gaps, 1);
        assert_eq!(s.missing, vec![(1004 * step, 1005 * step)]);
        // 11 heaps of `step` samples over a second: the rate in ADC samples.
        assert_eq!(snap.sample_rate(11, 1.0), 11.0 * step as f64);
    }

    /// 4-bit output: heaps of 2 bytes per channel and spectrum are whole, their spectra (and so
    /// the timestamp step) learned as such, their values read as 4-bit; an 8-bit heap of the same
    /// spectra is the wrong size.
    #[test]
    fn four_bit_heaps_are_two_bytes_per_channel_and_spectrum() {
        use crate::content::ContentMonitor;
        let start = |spectra: Option<usize>, sink: Arc<dyn HeapSink>| {
            let mut cfg =
                ReceiveConfig::new(vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)], CH / 2);
            cfg.reorder_window = 2;
            cfg.buffer_bytes = 4 << 20;
            cfg.bits = OutputBits::Four;
            cfg.spectra_per_heap = spectra;
            Receiver::start(&cfg, sink).unwrap()
        };
        let tx = StdUdp::bind("127.0.0.1:0").unwrap();
        let send = |rx: &Receiver, k: u64, data: &[u8]| {
            let step = (SPECTRA * 2 * CH / 2) as u64;
            for p in packets(0, 7 * step + k * step, data, 200) {
                tx.send_to(&p, rx.endpoint().addrs[0]).unwrap();
                std::thread::sleep(Duration::from_micros(20));
            }
        };
        // Channel 5 holds (-6, 3) in pol 0 and (2, -1) in pol 1; every other value (1, -1).
        let mut heap4 = Vec::new();
        for c in 0..CH / 2 {
            for _ in 0..SPECTRA {
                heap4.extend_from_slice(if c == 5 { &[0xa3, 0x2f] } else { &[0x1f, 0x1f] });
            }
        }
        assert_eq!(heap4.len(), CH / 2 * SPECTRA * 2);
        let monitor = Arc::new(ContentMonitor::new(
            CH / 2,
            1,
            Duration::ZERO,
            OutputBits::Four,
        ));
        let rx = start(None, monitor.clone());
        for k in 0..6 {
            send(&rx, k, &heap4);
        }
        wait_for(&rx, 3);
        let snap = rx.stop();
        let s = &snap.substreams[0];
        assert_eq!(
            (s.heaps, s.sequence.gaps, s.malformed_packets),
            (6, 0, 0),
            "{s:?}"
        );
        assert_eq!(
            s.step,
            Some((SPECTRA * 2 * CH / 2) as u64),
            "{SPECTRA} spectra a heap"
        );
        let (power, bad) = monitor.take();
        assert_eq!(bad, 0);
        assert_eq!(power.mean(5, 0), Some(45.0));
        assert_eq!(power.mean(5, 1), Some(5.0));
        assert_eq!(power.mean(6, 0), Some(2.0));
        assert_eq!(power.strongest()[0].map(|p| p.channel), Some(5));
        // Told the spectra per heap, a 4-bit receiver refuses heaps of 4 bytes per channel and
        // spectrum.
        let rx = start(Some(SPECTRA), Arc::new(NoSink));
        for k in 0..3 {
            send(&rx, k, &vec![0u8; CH / 2 * SPECTRA * 4]);
        }
        send(&rx, 3, &heap4);
        std::thread::sleep(Duration::from_millis(100));
        let snap = rx.stop();
        let s = &snap.substreams[0];
        assert_eq!(s.heaps, 1, "{s:?}");
        assert!(s.malformed_packets >= 3, "{s:?}");
    }

    /// Packets of engine `feng` of `engines`' heap for substream `sub` of 2, counter as given.
    fn engine_heap_packets(sub: usize, feng: u64, counter: u64, ts: u64, fill: u8) -> Vec<Vec<u8>> {
        let data = vec![fill; CH / 2 * SPECTRA * 4];
        let mut out = Vec::new();
        HeapWriter::new(1000).write(
            counter,
            &[
                HeapItem::immediate(items::TIMESTAMP, ts),
                HeapItem::immediate(items::FENG_ID, feng),
                HeapItem::immediate(items::FREQUENCY, (sub * CH / 2) as u64),
                HeapItem::addressed(items::FENG_RAW, &data),
            ],
            |p| out.push(p.to_vec()),
        );
        out
    }

    #[test]
    fn an_array_is_told_apart_by_feng_id_and_its_counters_checked() {
        let addrs = vec![
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 0),
        ];
        let mut cfg = ReceiveConfig::new(addrs, CH);
        cfg.reorder_window = 2;
        cfg.buffer_bytes = 4 << 20;
        cfg.array = Some(2);
        let seen = [Arc::new(Record::default()), Arc::new(Record::default())];
        let sinks: Vec<Arc<dyn HeapSink>> = vec![seen[0].clone(), seen[1].clone()];
        let rx = Receiver::start(&cfg, Arc::new(PerEngine(sinks))).unwrap();
        assert_eq!((rx.substreams(), rx.engines()), (2, 2));
        let ep = rx.endpoint();
        assert_eq!(ep.addrs.len(), 2);
        let tx = StdUdp::bind("127.0.0.1:0").unwrap();
        let step = (SPECTRA * 2 * CH) as u64;
        let phase = 3 * 4096;
        let send = |sub: usize, feng: u64, counter: u64, k: u64, fill: u8| {
            for p in engine_heap_packets(sub, feng, counter, phase + k * step, fill) {
                tx.send_to(&p, ep.addrs[sub]).unwrap();
                std::thread::sleep(Duration::from_micros(20));
            }
        };
        let good = |sub: usize, feng: u64, k: u64| {
            worker::expected_counter(sub, phase + k * step, step, 2, feng as usize)
        };
        // Both engines, the same timestamps, on both substreams; engine 1 misses heap 4 of
        // substream 0 and sends heap 6 of substream 1 with engine 0's counter of heap 6 (a
        // collision and a wrong counter at once); a heap from a third engine is refused.
        for k in 0..12 {
            for sub in 0..2 {
                send(sub, 0, good(sub, 0, k), k, 10 + sub as u8);
                match (sub, k) {
                    (0, 4) => {}
                    (1, 6) => send(sub, 1, good(sub, 0, 6), k, 20),
                    _ => send(sub, 1, good(sub, 1, k), k, 20 + sub as u8),
                }
            }
        }
        send(0, 2, 0, 3, 99);
        wait_for(&rx, 47);
        std::thread::sleep(Duration::from_millis(50));
        let snap = rx.stop();
        assert_eq!(snap.substreams.len(), 4);
        let e0 = snap.engine(0);
        let e1 = snap.engine(1);
        assert!(e0.substreams.iter().all(|s| s.feng_id == Some(0)));
        assert_eq!((e0.heaps(), e1.heaps()), (24, 23));
        assert_eq!((e0.sequence().gaps, e1.sequence().gaps), (0, 1));
        assert_eq!(
            e1.substreams[0].missing,
            vec![(phase + 4 * step, phase + 5 * step)]
        );
        assert_eq!(e0.sequence().duplicates + e1.sequence().duplicates, 0);
        let c0 = e0.heap_counters().unwrap();
        let c1 = e1.heap_counters().unwrap();
        assert_eq!((c0.checked, c0.wrong, c0.collisions), (24, 0, 0));
        assert_eq!((c1.checked, c1.wrong, c1.collisions), (23, 1, 1));
        // The stranger's two packets are counted in engine 0's lane of substream 0, by reason.
        assert_eq!(e0.substreams[0].rejects["feng_id outside the array"], 2);
        assert_eq!(e0.malformed(), 2);
        // Each engine's sink saw only its own heaps.
        for (feng, rec) in seen.iter().enumerate() {
            let heaps = rec.0.lock().unwrap();
            assert_eq!(heaps.len(), if feng == 0 { 24 } else { 23 });
            assert!(heaps
                .iter()
                .all(|&(s, _, _, fill)| fill == 10 * (feng as u8 + 1) + s as u8
                    || (feng, s, fill) == (1, 1, 20)));
        }
        // One engine alone, as before: no lanes, no counter checks in the JSON.
        let json = serde_json::to_value(&snap.substreams[0]).unwrap();
        assert_eq!(json["feng_id"], 0);
        assert_eq!(json["heap_counters"]["checked"], 12);
    }

    /// A receive thread started with `--recv-affinity` at one core runs on it alone, and under
    /// SCHED_FIFO with `--realtime fifo:1` where the process may ask for it; where it may not,
    /// the start fails with the placement crate's sentence. Four substreams on addresses of
    /// their own: `rx-3` and the ports are this test's alone while the others run beside it.
    #[test]
    fn receive_threads_run_where_the_flags_say() {
        let core = *CoreSet::allowed().unwrap().cores().last().unwrap();
        for policy in [Policy::Other, Policy::Fifo(1)] {
            let subs = (211..=214)
                .map(|i| SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, i), 0))
                .collect();
            let mut cfg = ReceiveConfig::new(subs, 64);
            cfg.affinity = Some(Affinity::Cores(CoreSet::one(core)));
            cfg.realtime = policy;
            match Receiver::start(&cfg, Arc::new(NoSink)) {
                Ok(rx) => {
                    let seen = ThreadView::named("rx-3");
                    rx.stop();
                    let seen = seen.expect("the receive thread in /proc");
                    assert_eq!((seen.cores, seen.policy), (CoreSet::one(core), policy));
                }
                Err(e) => {
                    assert_eq!(policy, Policy::Fifo(1), "{e}");
                    let e = e.to_string();
                    assert!(e.contains("rx-") && e.contains("CAP_SYS_NICE"), "{e}");
                }
            }
        }
        let mut cfg = ReceiveConfig::new(vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)], 64);
        cfg.affinity = Some("1023".parse().unwrap());
        let e = Receiver::start(&cfg, Arc::new(NoSink))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not all among the cores"), "{e}");
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
}

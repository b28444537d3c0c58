//! Send stage: each output's heaps in the katgpucbf F-engine format (`docs/wire-formats.md`), to
//! that output's destinations.
//!
//! For output heap h of a frame and substream i of an output: if every spectrum of the heap is valid, channels
//! `[i c, (i+1) c)` of that heap (contiguous in the frame's output) go to substream i's destination
//! as packets of at most `packet_payload` bytes of payload, each with the 8 item pointers (heap
//! counter, size, offset, payload length, timestamp, F-engine id, frequency, feng_raw at 0).
//! A heap's packet headers are written back to back into one reused buffer; the kernel gathers
//! each packet from its header there and its payload straight from the frame's output (no copy in
//! user space), in GSO super-packets paced at `send_rate_factor` times the input's data rate, in
//! bursts of up to `send_burst`.
//! Descriptors go to every substream at katgpucbf's cadence ([`DescriptorCadence`]).
//!
//! Heap counters: `(substream << 40) + (timestamp / heap_step) * array_size + feng_id`, so that
//! engines and substreams never collide and a heap's counter follows from its timestamp.

use std::net::{SocketAddr, SocketAddrV4};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use spead::items;
use spead::packet::{write_header, ItemPointer};
use spead::transport::{self, DatagramSink, Pacer, SocketConfig, UdpSocket};

use super::{recv_until_stop, PipelineError, Work};
use crate::backend::Channelisation;
use crate::signal::delay::FramePlan;
use crate::stats::{OutputStats, Stats};
use spead::packet::PACKET_HEADER_BYTES;

/// katgpucbf's descriptor interval: each engine of an array sends its descriptors once every
/// `array_size` of these, the engines in turn.
const DESCRIPTOR_INTERVAL: Duration = Duration::from_secs(5);
/// Heap counters keep the substream above this bit.
const SUBSTREAM_SHIFT: u32 = 40;
const COUNTER_MASK: u64 = (1 << SUBSTREAM_SHIFT) - 1;
/// Descriptor heaps use this bit of the counter, so they never collide with data heaps.
const DESCRIPTOR_BIT: u64 = 1 << 39;

/// What the send stage needs for one output: its channelisation and timestamps, where it goes,
/// and the engine-wide settings of every output's packets and pace.
#[derive(Clone, Debug)]
pub struct SendSpec {
    pub g: Channelisation,
    pub plan: FramePlan,
    /// Substream destinations: substream i carries channels [i c, (i+1) c), c = channels / N.
    pub dests: Vec<SocketAddrV4>,
    /// Send threads (at least 1, at most one per substream).
    pub threads: usize,
    /// Sockets for sending (GSO, no GRO).
    pub socket: SocketConfig,
    /// Largest payload of a packet, bytes.
    pub packet_payload: usize,
    /// Output rate as a multiple of the input's data rate; 0: unpaced.
    pub rate_factor: f64,
    /// How far ahead of its pace output may leave.
    pub burst: Duration,
    /// ADC sample rate, Hz.
    pub fs: f64,
    pub array_size: u64,
    pub feng_id: u64,
    /// Where each of its send threads runs (missing ones: anywhere).
    pub placements: Vec<placement::Placement>,
}

impl SendSpec {
    pub fn substreams(&self) -> usize {
        self.dests.len()
    }

    /// Channels per substream.
    pub fn substream_channels(&self) -> usize {
        self.g.output.channels / self.substreams()
    }

    /// Bytes of one substream's heap: its channels' slice of a heap.
    pub fn substream_bytes(&self) -> usize {
        self.g.output.heap_bytes() / self.substreams()
    }

    /// Samples between consecutive heaps of one substream (S x 2n, or S x 2nD).
    pub fn heap_timestamp_step(&self) -> u64 {
        self.g.output.heap_samples() as u64
    }
}

/// One send thread's sink (a UDP socket), its share of one output's substreams and everything
/// precomputed for them.
pub struct Transmitter<K> {
    /// The output it sends for (index into the configuration's outputs).
    output: usize,
    sender: K,
    /// Destinations of every substream of the output (indexed by substream; this transmitter
    /// sends to `subs`).
    dests: Vec<SocketAddr>,
    /// The substreams this transmitter sends.
    subs: Range<usize>,
    /// Pre-encoded descriptor packets per substream of `subs` (the heap counter is patched each time).
    descriptors: Vec<Vec<Vec<u8>>>,
    /// One heap's packet headers, back to back ([`PACKET_HEADER_BYTES`] each).
    headers: Vec<u8>,
    /// Sender totals already added to the shared counters.
    reported: (u64, u64),
}

/// When an engine sends its output's descriptors, as katgpucbf's F-engine does: at start, then
/// `(feng_id + 1)` intervals later, then every `array_size` intervals, so that the engines of an
/// array, sending to the same groups, take turns. A sender that fell behind sends once and goes
/// on from the next time due, without a burst.
#[derive(Clone, Copy, Debug)]
struct DescriptorCadence {
    next: Instant,
    gap: Duration,
    period: Duration,
}

impl DescriptorCadence {
    fn new(start: Instant, feng_id: u64, array_size: u64) -> Self {
        let times = |n: u64| DESCRIPTOR_INTERVAL * u32::try_from(n).unwrap_or(u32::MAX);
        Self {
            next: start,
            gap: times(feng_id.saturating_add(1)),
            period: times(array_size.max(1)),
        }
    }

    /// True when descriptors are due at `now` (and then not again until the next time).
    fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        while self.next <= now {
            self.next += self.gap;
            self.gap = self.period;
        }
        true
    }
}

/// The counter of the data heap with timestamp `t` on `substream`.
pub fn heap_counter(
    substream: usize,
    t: u64,
    heap_step: u64,
    array_size: u64,
    feng_id: u64,
) -> u64 {
    let k = (t / heap_step)
        .wrapping_mul(array_size)
        .wrapping_add(feng_id);
    ((substream as u64) << SUBSTREAM_SHIFT) | (k & COUNTER_MASK)
}

/// Records `t` as the newest output timestamp. The send threads of an output finish a frame's
/// heaps in any order, so the newest is kept, unless `t` lies further back than the threads can
/// lag behind each other: then the digitiser restarted, and `t` is where the stream now is.
fn record_newest(newest: &AtomicU64, t: u64, lag_limit: u64) {
    let _ = newest.fetch_update(Relaxed, Relaxed, |cur| {
        (t > cur || cur - t > lag_limit).then_some(t)
    });
}

/// The transmitters of every output: each output's substreams split into contiguous shares, one
/// per send thread of that output, each with its own UDP socket (the engine's one choice of
/// output transport).
pub fn transmitters(
    specs: &[SendSpec],
) -> Result<Vec<Transmitter<transport::Sender>>, PipelineError> {
    let mut all = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        let n = spec.substreams();
        let threads = spec.threads.clamp(1, n);
        for t in 0..threads {
            let socket = UdpSocket::sender(&spec.socket).map_err(PipelineError::OutputSocket)?;
            all.push(Transmitter::new(
                spec,
                k,
                t * n / threads..(t + 1) * n / threads,
                transport::Sender::new(socket),
            ));
        }
    }
    Ok(all)
}

/// Sends every frame from `rx` through `transmitters`, one thread each (this thread hands each
/// frame to all of them), and returns each frame to `free` once every transmitter is done with it.
/// `specs` are the outputs', in order.
pub fn run<K: DatagramSink>(
    transmitters: Vec<Transmitter<K>>,
    specs: &[SendSpec],
    rx: Receiver<Work>,
    free: Sender<Work>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Result<(), PipelineError> {
    // The last holder of a frame gives it back (the pool holds every frame there is: no blocking).
    let release = |w: Arc<Work>| match Arc::into_inner(w) {
        Some(work) => free.send(work).is_ok(),
        None => true,
    };
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        // Each thread takes its placement itself, and says whether it could before it sends.
        let (placed_tx, placed_rx) = crossbeam_channel::unbounded();
        let mut per_output = vec![0usize; specs.len()];
        for (k, out) in transmitters.into_iter().enumerate() {
            let (tx, wrx) = crossbeam_channel::bounded::<Arc<Work>>(2);
            let (stats, stop, release) = (&stats, &stop, &release);
            let spec = &specs[out.output];
            let placement = spec
                .placements
                .get(per_output[out.output])
                .cloned()
                .unwrap_or_default();
            per_output[out.output] += 1;
            let name = format!("fengine-send{k}");
            let placed_tx = placed_tx.clone();
            let spawned =
                std::thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || {
                        let placed = placement.apply().map_err(|error| PipelineError::Placement {
                            thread: name,
                            error,
                        });
                        let ok = placed.is_ok();
                        let _ = placed_tx.send(placed);
                        // Dropped now, not as the thread ends: the starter reads until every sender is gone.
                        drop(placed_tx);
                        if ok {
                            out.run(spec, wrx, release, stats, stop)
                        }
                    });
            match spawned {
                Ok(_) => workers.push(tx),
                Err(e) => {
                    stop.store(true, Relaxed);
                    return Err(PipelineError::SendThread(e));
                }
            }
        }
        drop(placed_tx);
        for placed in placed_rx.iter() {
            if let Err(e) = placed {
                stop.store(true, Relaxed);
                return Err(e);
            }
        }
        while let Some(work) = recv_until_stop(&rx, &stop) {
            let work = Arc::new(work);
            for tx in &workers {
                if tx.send(work.clone()).is_err() {
                    return Err(PipelineError::SendThreadStopped);
                }
            }
            if !release(work) {
                break;
            }
        }
        Ok(())
    })
}

impl<K: DatagramSink> Transmitter<K> {
    /// A transmitter of substreams `subs` of output `output`, which `spec` describes, sending
    /// into `sender`.
    pub fn new(spec: &SendSpec, output: usize, subs: Range<usize>, sender: K) -> Self {
        let c = spec.substream_channels() as u64;
        let s = spec.g.output.spectra_per_heap as u64;
        // The item descriptors katgpucbf's F-engine sends for its output.
        let ds = spead::stream_descriptors::f_engine(c, s, spec.g.output.bits as u16);
        let descriptors = subs
            .clone()
            .map(|_| {
                let mut packets = Vec::new();
                spead::stream_descriptors::write_heap(
                    &ds,
                    DESCRIPTOR_BIT,
                    spec.packet_payload,
                    |p| packets.push(p.to_vec()),
                );
                packets
            })
            .collect();
        let heap_payload = spec.substream_bytes();
        let packets = heap_payload.div_ceil(spec.packet_payload);
        Self {
            output,
            sender,
            dests: spec.dests.iter().map(|d| SocketAddr::V4(*d)).collect(),
            subs,
            descriptors,
            headers: vec![0u8; packets * PACKET_HEADER_BYTES],
            reported: (0, 0),
        }
    }

    /// One send thread: this transmitter's substreams of every frame from `rx`, each frame then
    /// handed to `release`.
    fn run(
        mut self,
        spec: &SendSpec,
        rx: Receiver<Arc<Work>>,
        release: &dyn Fn(Arc<Work>) -> bool,
        stats: &Stats,
        stop: &AtomicBool,
    ) {
        let k = self.output;
        let (g, plan) = (spec.g, spec.plan);
        let Some(out_stats) = stats.outputs.get(k) else {
            return;
        };
        let heap_step = spec.heap_timestamp_step();
        // Send threads are at most a couple of frames apart (the hand-over queues hold two).
        let lag_limit = 4 * g.heaps_per_frame() as u64 * heap_step;
        let sub_bytes = spec.substream_bytes();
        let heap_bytes = g.heap_bytes();
        let segment = PACKET_HEADER_BYTES + spec.packet_payload;
        // Output is n channels x 2 pols x 2 components of `bits` bits per 2n samples: 2 fs bytes/s
        // at 8 bits, fs at 4, plus headers. This transmitter's share of it.
        let share = self.subs.len() as f64 / spec.substreams() as f64;
        let bytes_per_sample = g.heap_bytes() as f64 / g.output.heap_samples() as f64;
        let rate = share
            * spec.rate_factor
            * bytes_per_sample
            * spec.fs
            * (segment as f64 / spec.packet_payload as f64);
        let mut pacer = (rate > 0.0).then(|| Pacer::new(Instant::now(), 0, rate));
        let mut paced_bytes = 0u64;
        let mut cadence = DescriptorCadence::new(Instant::now(), spec.feng_id, spec.array_size);
        let mut descriptor_seq = 0u64;
        let mut errors = 0u64;

        while let Some(work) = recv_until_stop(&rx, stop) {
            if cadence.due(Instant::now()) {
                self.send_descriptors(spec, descriptor_seq, out_stats, &mut errors);
                descriptor_seq += 1;
            }
            let meta = &work.meta;
            let output = &work.frame.outputs[k].heaps;
            for h in 0..g.heaps_per_frame() {
                let t = plan.spectrum_timestamp(
                    &g,
                    work.frame.input.timestamp,
                    h * g.output.spectra_per_heap,
                );
                let valid = meta.computed
                    && meta.heap_valid[k][h]
                    && t >= 0
                    && output.len() >= heap_bytes * (h + 1);
                if !valid {
                    for s in &out_stats.heaps_skipped[self.subs.clone()] {
                        s.fetch_add(1, Relaxed);
                    }
                    continue;
                }
                let t = t as u64;
                for i in self.subs.clone() {
                    let start = h * heap_bytes + i * sub_bytes;
                    let data = &output[start..start + sub_bytes];
                    let cnt = heap_counter(i, t, heap_step, spec.array_size, spec.feng_id);
                    let frequency = (i * spec.substream_channels()) as u64;
                    self.write_headers(cnt, t, spec.feng_id, frequency, data, spec.packet_payload);
                    // Pace per GSO-sized part so that a heap is not one long burst.
                    let per_part = (65_000 / segment).max(1);
                    let mut sent_ok = true;
                    let parts = data
                        .chunks(per_part * spec.packet_payload)
                        .zip(self.headers.chunks(per_part * PACKET_HEADER_BYTES));
                    for (part, headers) in parts {
                        if let Some(p) = pacer.as_mut() {
                            let now = Instant::now();
                            // After an idle spell, do not burst to catch up.
                            if p.due(paced_bytes) + Duration::from_millis(2) < now {
                                *p = Pacer::new(now, paced_bytes, rate);
                            }
                            p.wait_early(paced_bytes, spec.burst);
                        }
                        paced_bytes += (part.len() + headers.len()) as u64;
                        let sent = self.sender.send_framed(
                            self.dests[i],
                            headers,
                            PACKET_HEADER_BYTES,
                            part,
                            spec.packet_payload,
                        );
                        if let Err(e) = sent {
                            if errors.is_multiple_of(1000) {
                                tracing::warn!(dest = %self.dests[i], "output send failed: {e}");
                            }
                            errors += 1;
                            sent_ok = false;
                            break;
                        }
                    }
                    if sent_ok {
                        out_stats.heaps_sent[i].fetch_add(1, Relaxed);
                        record_newest(&out_stats.last_output_timestamp, t, lag_limit);
                    } else {
                        out_stats.send_errors.fetch_add(1, Relaxed);
                    }
                }
            }
            let totals = self.sender.stats();
            let (packets, bytes) = self.reported;
            out_stats
                .packets_sent
                .fetch_add(totals.datagrams - packets, Relaxed);
            out_stats
                .bytes_sent
                .fetch_add(totals.bytes - bytes, Relaxed);
            self.reported = (totals.datagrams, totals.bytes);
            if !release(work) {
                break;
            }
        }
    }

    /// Writes the headers of one heap's packets into `self.headers`, one per `payload`-byte piece
    /// of `data`.
    fn write_headers(
        &mut self,
        cnt: u64,
        t: u64,
        feng_id: u64,
        frequency: u64,
        data: &[u8],
        payload: usize,
    ) {
        let size = data.len() as u64;
        let mut pointers = [
            ItemPointer::immediate(items::HEAP_CNT, cnt),
            ItemPointer::immediate(items::HEAP_SIZE, size),
            ItemPointer::immediate(items::HEAP_OFFSET, 0),
            ItemPointer::immediate(items::PAYLOAD_LENGTH, 0),
            ItemPointer::immediate(items::TIMESTAMP, t),
            ItemPointer::immediate(items::FENG_ID, feng_id),
            ItemPointer::immediate(items::FREQUENCY, frequency),
            ItemPointer::addressed(items::FENG_RAW, 0),
        ];
        let headers = self.headers.chunks_mut(PACKET_HEADER_BYTES);
        for ((j, part), header) in data.chunks(payload).enumerate().zip(headers) {
            pointers[2] = ItemPointer::immediate(items::HEAP_OFFSET, (j * payload) as u64);
            pointers[3] = ItemPointer::immediate(items::PAYLOAD_LENGTH, part.len() as u64);
            // 8 item pointers make exactly PACKET_HEADER_BYTES: this cannot fail.
            let written = write_header(header, &pointers);
            debug_assert_eq!(written.ok(), Some(PACKET_HEADER_BYTES));
        }
    }

    fn send_descriptors(
        &mut self,
        spec: &SendSpec,
        seq: u64,
        stats: &OutputStats,
        errors: &mut u64,
    ) {
        for (i, packets) in self.subs.clone().zip(self.descriptors.iter_mut()) {
            let k = seq.wrapping_mul(spec.array_size).wrapping_add(spec.feng_id);
            let cnt = ((i as u64) << SUBSTREAM_SHIFT) | DESCRIPTOR_BIT | (k & (DESCRIPTOR_BIT - 1));
            for p in packets.iter_mut() {
                spead::packet::patch_pointer(p, 0, ItemPointer::immediate(items::HEAP_CNT, cnt));
                if let Err(e) = self.sender.send_segments(self.dests[i], p, p.len()) {
                    if errors.is_multiple_of(1000) {
                        tracing::warn!(dest = %self.dests[i], "descriptor send failed: {e}");
                    }
                    *errors += 1;
                    stats.send_errors.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::config;
    use crate::pipeline::StageSpecs;
    use placement::{CoreSet, ThreadView};

    /// A send thread started with `--dst-affinity` at one core runs on that core alone, and the
    /// stage goes on to send (and stops when asked) once every send thread has been placed.
    #[test]
    fn send_threads_run_where_the_flags_say() {
        let core = *CoreSet::allowed().unwrap().cores().last().unwrap();
        let cfg = config(&["--dst-affinity", &core.to_string(), "--send-threads", "1"]);
        let specs = StageSpecs::new(&cfg).send;
        let (sink, _source) = transport::loopback::pair(64);
        let tx = Transmitter::new(&specs[0], 0, 0..specs[0].substreams(), sink);
        let stats = Arc::new(Stats::for_config(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (_frames, frames_rx) = crossbeam_channel::bounded::<Work>(1);
        let (free, _free_rx) = crossbeam_channel::bounded::<Work>(1);
        let stage = {
            let stop = stop.clone();
            std::thread::spawn(move || run(vec![tx], &specs, frames_rx, free, stats, stop))
        };
        let mut seen = None;
        for _ in 0..400 {
            seen = ThreadView::named("fengine-send0").filter(|v| v.cores == CoreSet::one(core));
            if seen.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Relaxed);
        stage.join().unwrap().unwrap();
        assert!(
            seen.is_some(),
            "fengine-send0 never ran on core {core} alone"
        );
    }

    #[test]
    fn heap_counters_do_not_collide() {
        let step = 256 * 2048;
        let a = heap_counter(0, 5 * step, step, 4, 1);
        let b = heap_counter(0, 5 * step, step, 4, 2);
        let c = heap_counter(1, 5 * step, step, 4, 1);
        let d = heap_counter(0, 6 * step, step, 4, 1);
        assert_eq!(a, 21);
        assert_eq!(b, 22);
        assert_eq!(c, (1 << 40) + 21);
        assert_eq!(d, 25);
    }

    #[test]
    fn descriptors_follow_katgpucbfs_cadence() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        // Engine 2 of 4: at start, 15 s later, then every 20 s.
        let mut c = DescriptorCadence::new(t0, 2, 4);
        let sent: Vec<u64> = (0..80).filter(|&t| c.due(s(t))).collect();
        assert_eq!(sent, [0, 15, 35, 55, 75]);
        // One engine alone: every 5 s; a sender that fell behind sends once, then keeps time.
        let mut c = DescriptorCadence::new(t0, 0, 1);
        assert!(c.due(s(0)));
        assert!(!c.due(s(4)));
        assert!(c.due(s(17)));
        assert!(!c.due(s(19)));
        assert!(c.due(s(20)));
    }

    #[test]
    fn the_newest_timestamp_follows_a_restart_but_not_a_lagging_thread() {
        let newest = AtomicU64::new(0);
        for (t, want) in [(1000, 1000), (900, 1000), (1100, 1100), (50, 50), (60, 60)] {
            record_newest(&newest, t, 200);
            assert_eq!(newest.load(Relaxed), want, "after {t}");
        }
    }
}

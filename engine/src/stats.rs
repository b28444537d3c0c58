//! Counters shared by the pipeline threads and read by the control server: relaxed atomics
//! written by one thread each. The input's counters are per polarisation, each output's are its
//! own ([`OutputStats`], keyed by the output's name), and the rest belong to the engine as a whole.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use spead::chunk::ChunkStats;
use spead::RejectCounters;

use crate::backend::POLS;
use crate::config::EngineConfig;

/// Input counters of one polarisation.
#[derive(Debug, Default)]
pub struct PolStats {
    /// The chunk assemblers' own totals (packets, heaps completed, too old, no buffer), one per
    /// receive thread.
    pub chunk: OnceLock<Vec<Arc<ChunkStats>>>,
    /// Times the input stream restarted and the receivers followed it.
    pub resyncs: AtomicU64,
    /// Rejected packets by reason (too_old and too_new included).
    pub rejects: Arc<RejectCounters>,
    /// Digitiser heaps absent from the chunks the engine processed (gaps included).
    pub heaps_missing: AtomicU64,
    /// Highest digitiser timestamp placed into a chunk.
    pub last_timestamp: AtomicU64,
    /// Addresses the receive sockets are bound to (ports resolved).
    pub bound: Mutex<Vec<SocketAddr>>,
    /// Chunks handed to the pairing stage without a partner from the other polarisation.
    pub unpaired_chunks: AtomicU64,
    /// Chunks that reached the pairing stage after their frame had gone without them (their
    /// partner waited its time out): dropped, their heaps already counted missing.
    pub late_chunks: AtomicU64,
    /// Packets the kernel dropped because a receive socket's buffer was full: the receive
    /// threads fell behind (or were held off the processor). A GSO super-packet counts once
    /// (see `spead::transport::UdpSocket::drops`).
    pub socket_drops: AtomicU64,
    /// Descriptor heaps received (item descriptors, no timestamp; katgpucbf's dsim sends one every
    /// 5 s to the first address of polarisation 0): metadata, neither data nor a reject.
    pub descriptor_heaps: AtomicU64,
    /// Heaps received whose digitiser status item says a sample saturated (bit 1), and the
    /// saturated samples those items report (bits 32-47): the digitiser's own account of
    /// clipping at its input. Added to by the receive threads once per receive round.
    pub digitiser_clip_heaps: AtomicU64,
    pub digitiser_clip_samples: AtomicU64,
    /// The input sensors, from the backend's measure of each frame whose heaps all arrived for
    /// this polarisation: frames measured, the latest one's rms in dBFS (f64 bits), and the
    /// samples at full scale (|v| >= 2^(bits-1) - 1) summed over them.
    pub frames_measured: AtomicU64,
    pub rms_dbfs_bits: AtomicU64,
    pub full_scale_samples: AtomicU64,
    /// What each receive thread saw of its own stalls, one per thread (set with `chunk`).
    pub lanes: OnceLock<Vec<Arc<LaneStalls>>>,
}

impl PolStats {
    /// The latest measured frame's rms in dBFS (None before the first).
    pub fn rms_dbfs(&self) -> Option<f64> {
        (self.frames_measured.load(Relaxed) > 0)
            .then(|| f64::from_bits(self.rms_dbfs_bits.load(Relaxed)))
    }
    /// Records one frame's measure of `samples` samples of `bits`-bit input.
    pub fn record_input(&self, p: crate::signal::power::InputPower, samples: usize, bits: u32) {
        self.rms_dbfs_bits
            .store(p.rms_dbfs(samples, bits).to_bits(), Relaxed);
        self.full_scale_samples.fetch_add(p.full_scale, Relaxed);
        self.frames_measured.fetch_add(1, Relaxed);
    }
    fn chunk_stat(&self, f: impl Fn(&ChunkStats) -> &AtomicU64) -> u64 {
        self.chunk
            .get()
            .map_or(0, |lanes| lanes.iter().map(|c| f(c).load(Relaxed)).sum())
    }
    pub fn packets(&self) -> u64 {
        self.chunk_stat(|c| &c.packets)
    }
    pub fn heaps_received(&self) -> u64 {
        self.chunk_stat(|c| &c.heaps)
    }
    pub fn resyncs(&self) -> u64 {
        self.resyncs.load(Relaxed)
    }
}

/// A running sum and count of a duration, for a Prometheus summary.
#[derive(Debug, Default)]
pub struct Timing {
    pub sum_ns: AtomicU64,
    pub count: AtomicU64,
    pub last_ns: AtomicU64,
}

impl Timing {
    pub fn record(&self, d: std::time::Duration) {
        let ns = d.as_nanos().min(u64::MAX as u128) as u64;
        self.sum_ns.fetch_add(ns, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.last_ns.store(ns, Relaxed);
    }
    pub fn mean_seconds(&self) -> f64 {
        let n = self.count.load(Relaxed);
        if n == 0 {
            0.0
        } else {
            self.sum_ns.load(Relaxed) as f64 / n as f64 * 1e-9
        }
    }
}

/// What the scheduler took from one thread: its time spent waiting for a core, summed, and the
/// most it waited in one sampling interval (about [`SCHED_EVERY`]), with when that interval ended
/// and how long it was. Written by one thread, read by the control server.
#[derive(Debug, Default)]
pub struct ThreadWaits {
    /// The kernel keeps scheduler statistics for this thread (false until the first reading).
    pub known: AtomicBool,
    pub wait_ns: AtomicU64,
    pub max_wait_ns: AtomicU64,
    pub max_wait_unix_ns: AtomicU64,
    pub max_wait_interval_ns: AtomicU64,
}

/// How often a thread's scheduler statistics are read: often enough to place a stall of a few
/// hundred milliseconds, rarely enough that reading them (a small /proc file) costs nothing.
pub const SCHED_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Reads one thread's scheduler statistics every [`SCHED_EVERY`] into a [`ThreadWaits`]: the
/// calling thread's, or (for a monitor) another thread's by its id.
#[derive(Debug)]
pub struct SchedProbe {
    tid: Option<i32>,
    last: Option<(placement::SchedStats, std::time::Instant)>,
}

impl SchedProbe {
    /// A probe of the calling thread.
    pub fn own() -> Self {
        Self {
            tid: None,
            last: None,
        }
    }

    /// A probe of thread `tid` of this process (see `placement::current_tid`).
    pub fn of(tid: i32) -> Self {
        Self {
            tid: Some(tid),
            last: None,
        }
    }

    /// Reads the statistics if [`SCHED_EVERY`] has passed since the last reading (or there was
    /// none), and records what changed. Cheap otherwise: one comparison of instants.
    #[inline]
    pub fn sample(&mut self, now: std::time::Instant, into: &ThreadWaits) {
        if self
            .last
            .is_some_and(|(_, at)| now.saturating_duration_since(at) < SCHED_EVERY)
        {
            return;
        }
        self.read(now, into);
    }

    #[cold]
    fn read(&mut self, now: std::time::Instant, into: &ThreadWaits) {
        let s = match self.tid {
            None => placement::SchedStats::current_thread(),
            Some(tid) => placement::SchedStats::of_thread(tid),
        };
        let Some(s) = s else {
            // No schedstat: try again later, at the same pace.
            self.last = Some((placement::SchedStats::default(), now));
            return;
        };
        if let Some((before, at)) = self.last.filter(|_| into.known.load(Relaxed)) {
            let waited = s.since(&before).wait;
            let ns = waited.as_nanos() as u64;
            if ns > into.max_wait_ns.load(Relaxed) {
                into.max_wait_ns.store(ns, Relaxed);
                into.max_wait_unix_ns.store(unix_ns(), Relaxed);
                let interval = now.saturating_duration_since(at).as_nanos() as u64;
                into.max_wait_interval_ns.store(interval, Relaxed);
            }
        }
        into.wait_ns.store(s.wait.as_nanos() as u64, Relaxed);
        into.known.store(true, Relaxed);
        self.last = Some((s, now));
    }
}

/// One receive thread's account of its stalls: the longest wall time between two of its receive
/// rounds that returned data while the stream was flowing (no round in between found its sockets
/// quiet), when that gap ended, and the newest digitiser timestamp it had placed before it; and
/// what the scheduler took from it ([`ThreadWaits`]).
#[derive(Debug, Default)]
pub struct LaneStalls {
    pub longest_gap_ns: AtomicU64,
    pub longest_gap_unix_ns: AtomicU64,
    pub longest_gap_timestamp: AtomicU64,
    /// How far behind its lane's newest heap the latest heap arrived, in ns of stream time.
    pub latest_heap_ns: AtomicU64,
    pub waits: ThreadWaits,
}

impl LaneStalls {
    /// A gap of `gap` that ended now, after the lane had placed timestamps up to `timestamp`:
    /// kept if it is the longest so far. Called by the lane once per round that received.
    #[inline]
    pub fn gap(&self, gap: std::time::Duration, timestamp: Option<u64>) {
        let ns = gap.as_nanos() as u64;
        if ns > self.longest_gap_ns.load(Relaxed) {
            self.longest_gap_ns.store(ns, Relaxed);
            self.longest_gap_unix_ns.store(unix_ns(), Relaxed);
            self.longest_gap_timestamp
                .store(timestamp.unwrap_or(0), Relaxed);
        }
    }

    /// The lane's latest heap so far arrived `late` behind the lane's newest: kept if later than
    /// any before. Called by the lane once per round that received.
    #[inline]
    pub fn lateness(&self, late: std::time::Duration) {
        let ns = late.as_nanos() as u64;
        if ns > self.latest_heap_ns.load(Relaxed) {
            self.latest_heap_ns.store(ns, Relaxed);
        }
    }
}

/// Depths of the queues between stages, read through functions the pipeline installs.
pub type DepthFn = Box<dyn Fn() -> usize + Send + Sync>;

/// Delay models that may wait for their load time, per polarisation.
pub const MAX_PENDING_DELAYS: u64 = 256;

/// Everything GET /status and GET /metrics report: the input's counters per polarisation, each
/// output's own, and the engine's as a whole.
#[derive(Default)]
pub struct Stats {
    pub pols: [PolStats; POLS],
    /// One per output, in the configuration's order.
    pub outputs: Vec<OutputStats>,
    /// Control requests answered with a 4xx (malformed, unknown, not allowed): nothing changed.
    pub control_rejected: AtomicU64,
    /// Frames handed to the backend, and frames with no input at all (not computed).
    pub frames_computed: AtomicU64,
    pub frames_empty: AtomicU64,
    /// (spectrum, polarisation) pairs whose coarse delay put the window outside the span.
    pub delay_out_of_span: AtomicU64,
    /// Delay models loaded for a later time and not yet in force, per polarisation (the compute
    /// stage keeps the count; the control API refuses more than [`MAX_PENDING_DELAYS`]).
    pub pending_delays: [AtomicU64; POLS],
    /// Time from submitting a frame to the backend until its output is ready.
    pub chunk_time: Timing,
    /// Frames the backend may hold at once (its `max_in_flight`), once the compute stage starts.
    pub in_flight_max: AtomicU64,
    /// ADC timestamp of the chunk of the last frame computed, and its completion time (Unix ns).
    pub last_frame_timestamp: AtomicU64,
    pub last_frame_unix_ns: AtomicU64,
    pub queues: Mutex<Vec<(&'static str, DepthFn)>>,
    /// What the scheduler took from the pipeline's other threads (pairing, compute, send), by
    /// thread name, sampled by the pipeline's monitor.
    pub threads: Mutex<Vec<(String, Arc<ThreadWaits>)>>,
    /// The receive window: chunks per receive thread, and the memory it and the spare buffers
    /// sized from it take, both polarisations together (0 until the pipeline starts).
    pub recv_window_chunks: AtomicU64,
    pub recv_window_seconds_bits: AtomicU64,
    /// Bytes of the chunks the windows hold, and of every spare chunk buffer (the windows'
    /// included), both polarisations together.
    pub recv_window_bytes: AtomicU64,
    pub recv_spare_bytes: AtomicU64,
    /// ADC sample rate, Hz (0 unless made by [`Stats::for_config`]): turns a narrowband output's
    /// mixer word into its centre.
    pub adc_sample_rate: f64,
}

/// Counters of one output stream.
#[derive(Debug, Default)]
pub struct OutputStats {
    /// The output's name ([`crate::config::OutputSpec::name`]).
    pub name: String,
    /// Output heaps sent, per substream.
    pub heaps_sent: Vec<AtomicU64>,
    /// Output heaps not sent because a spectrum in them was invalid, per substream.
    pub heaps_skipped: Vec<AtomicU64>,
    pub packets_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    /// Output packets the kernel refused (the heap was abandoned).
    pub send_errors: AtomicU64,
    /// Timestamp of the newest output heap sent (of the stream now in place: it goes back when
    /// the digitiser restarts).
    pub last_output_timestamp: AtomicU64,
    /// Complex values clamped during quantisation, per polarisation.
    pub saturated: [AtomicU64; POLS],
    /// Complex values computed per polarisation, what `saturated` counts out of: added with it,
    /// a frame's [`frame_values`](Self::frame_values) where a frame is computed.
    pub values: AtomicU64,
    /// Complex values per polarisation in one frame: heaps per frame, spectra per heap, channels.
    pub frame_values: u64,
    /// A narrowband output's mixer word in use (`crate::signal::ddc::mixer_word`): set from the
    /// configuration, then by the control server as it hands a new centre to the pipeline;
    /// `None` for a wideband output.
    pub mixer: Option<AtomicU32>,
}

impl OutputStats {
    pub fn new(name: &str, substreams: usize) -> Self {
        Self {
            name: name.to_string(),
            heaps_sent: (0..substreams).map(|_| AtomicU64::new(0)).collect(),
            heaps_skipped: (0..substreams).map(|_| AtomicU64::new(0)).collect(),
            ..Self::default()
        }
    }

    pub fn total_sent(&self) -> u64 {
        self.heaps_sent.iter().map(|c| c.load(Relaxed)).sum()
    }

    pub fn total_skipped(&self) -> u64 {
        self.heaps_skipped.iter().map(|c| c.load(Relaxed)).sum()
    }
}

impl Stats {
    /// Counters for outputs of these names and substream counts, in order.
    pub fn new(outputs: &[(&str, usize)]) -> Self {
        Self {
            outputs: outputs
                .iter()
                .map(|&(name, substreams)| OutputStats::new(name, substreams))
                .collect(),
            ..Self::default()
        }
    }

    /// Counters for the outputs of `cfg`.
    pub fn for_config(cfg: &EngineConfig) -> Self {
        let outputs: Vec<(&str, usize)> = cfg
            .outputs
            .iter()
            .map(|o| (o.name.as_str(), o.substreams()))
            .collect();
        let mut s = Self::new(&outputs);
        for (k, (stats, spec)) in s.outputs.iter_mut().zip(&cfg.outputs).enumerate() {
            stats.mixer = spec.mixer().map(AtomicU32::new);
            let g = cfg.channelisation(k);
            stats.frame_values =
                (g.heaps_per_frame() * g.output.spectra_per_heap * g.output.channels) as u64;
        }
        s.adc_sample_rate = cfg.fs;
        s
    }

    /// Output `k`'s centre in Hz now, if it is narrowband: its mixer word's F fs / 2^32.
    pub fn centre_hz(&self, k: usize) -> Option<f64> {
        let word = self.outputs.get(k)?.mixer.as_ref()?.load(Relaxed);
        Some(crate::signal::ddc::centre_frequency(
            word,
            self.adc_sample_rate,
        ))
    }

    pub fn queue_depths(&self) -> Vec<(&'static str, usize)> {
        match self.queues.lock() {
            Ok(q) => q.iter().map(|(name, f)| (*name, f())).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Unix time now, in nanoseconds.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

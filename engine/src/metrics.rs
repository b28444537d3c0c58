//! Counters shared by the pipeline threads and read by the control server: relaxed atomics written
//! by one thread each, plus the Prometheus text rendering of GET /metrics.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use spead::chunk::ChunkStats;
use spead::RejectCounters;

use crate::backend::POLS;

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
    /// Packets the kernel dropped because a receive socket's buffer was full: the receive
    /// threads fell behind (or were held off the processor). A GSO super-packet counts once
    /// (see `spead::transport::UdpSocket::drops`).
    pub socket_drops: AtomicU64,
}

impl PolStats {
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

/// Depths of the queues between stages, read through functions the pipeline installs.
pub type DepthFn = Box<dyn Fn() -> usize + Send + Sync>;

/// Everything GET /status and GET /metrics report.
#[derive(Default)]
pub struct Stats {
    pub pols: [PolStats; POLS],
    /// Output heaps sent, per substream.
    pub heaps_sent: Vec<AtomicU64>,
    /// Output heaps not sent because a spectrum in them was invalid, per substream.
    pub heaps_skipped: Vec<AtomicU64>,
    pub packets_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    /// Output packets the kernel refused (the heap was abandoned).
    pub send_errors: AtomicU64,
    /// Control requests answered with a 4xx (malformed, unknown, not allowed): nothing changed.
    pub control_rejected: AtomicU64,
    /// Complex values clamped during quantisation, per polarisation.
    pub saturated: [AtomicU64; POLS],
    /// Frames handed to the backend, and frames with no input at all (not computed).
    pub frames_computed: AtomicU64,
    pub frames_empty: AtomicU64,
    /// (spectrum, polarisation) pairs whose coarse delay put the window outside the span.
    pub delay_out_of_span: AtomicU64,
    /// Time from submitting a frame to the backend until its output is ready.
    pub chunk_time: Timing,
    /// ADC timestamp of the chunk of the last frame computed, and its completion time (Unix ns).
    pub last_frame_timestamp: AtomicU64,
    pub last_frame_unix_ns: AtomicU64,
    /// Timestamp of the last output heap sent.
    pub last_output_timestamp: AtomicU64,
    pub queues: Mutex<Vec<(&'static str, DepthFn)>>,
}

impl Stats {
    pub fn new(substreams: usize) -> Self {
        Self {
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

/// Prometheus text exposition (version 0.0.4). Every series carries the backend as a label.
pub fn render(stats: &Stats, backend: &str) -> String {
    let mut out = String::with_capacity(8192);
    let b = format!("backend=\"{backend}\"");
    let mut family = |name: &str, kind: &str, help: &str, series: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in series {
            let sep = if labels.is_empty() { "" } else { "," };
            let _ = writeln!(out, "{name}{{{b}{sep}{labels}}} {v}");
        }
    };
    let per_pol = |f: &dyn Fn(&PolStats) -> u64| -> Vec<(String, f64)> {
        (0..POLS)
            .map(|p| (format!("pol=\"{p}\""), f(&stats.pols[p]) as f64))
            .collect()
    };
    family(
        "fengine_input_packets_total",
        "counter",
        "Digitiser packets received, rejected ones included.",
        &per_pol(&|p| p.packets()),
    );
    family(
        "fengine_input_heaps_total",
        "counter",
        "Digitiser heaps received complete.",
        &per_pol(&|p| p.heaps_received()),
    );
    family(
        "fengine_input_missing_heaps_total",
        "counter",
        "Digitiser heaps absent from the chunks processed.",
        &per_pol(&|p| p.heaps_missing.load(Relaxed)),
    );
    family(
        "fengine_input_resyncs_total",
        "counter",
        "Times the input stream jumped (digitiser restart) and the receiver started again.",
        &per_pol(&|p| p.resyncs()),
    );
    family(
        "fengine_input_socket_drops_total",
        "counter",
        "Packets the kernel dropped because a receive socket's buffer was full (a GSO super-packet counts once).",
        &per_pol(&|p| p.socket_drops.load(Relaxed)),
    );
    family(
        "fengine_input_unpaired_chunks_total",
        "counter",
        "Chunks processed without the other polarisation's chunk.",
        &per_pol(&|p| p.unpaired_chunks.load(Relaxed)),
    );
    let mut rejects = Vec::new();
    for p in 0..POLS {
        for (reason, n) in stats.pols[p].rejects.snapshot() {
            rejects.push((
                format!("pol=\"{p}\",reason=\"{}\"", reason.name()),
                n as f64,
            ));
        }
    }
    family(
        "fengine_input_rejected_packets_total",
        "counter",
        "Digitiser packets dropped, by reason.",
        &rejects,
    );
    let per_sub = |v: &[AtomicU64]| -> Vec<(String, f64)> {
        v.iter()
            .enumerate()
            .map(|(i, c)| (format!("substream=\"{i}\""), c.load(Relaxed) as f64))
            .collect()
    };
    family(
        "fengine_output_heaps_total",
        "counter",
        "Output heaps sent.",
        &per_sub(&stats.heaps_sent),
    );
    family(
        "fengine_output_skipped_heaps_total",
        "counter",
        "Output heaps not sent because some spectrum in them lacked input.",
        &per_sub(&stats.heaps_skipped),
    );
    let one = |v: u64| vec![(String::new(), v as f64)];
    family(
        "fengine_output_packets_total",
        "counter",
        "Output packets sent.",
        &one(stats.packets_sent.load(Relaxed)),
    );
    family(
        "fengine_output_bytes_total",
        "counter",
        "Output bytes sent (headers included).",
        &one(stats.bytes_sent.load(Relaxed)),
    );
    family(
        "fengine_output_send_errors_total",
        "counter",
        "Output heaps abandoned because the socket refused them.",
        &one(stats.send_errors.load(Relaxed)),
    );
    family(
        "fengine_control_rejected_requests_total",
        "counter",
        "Control requests refused with a 4xx status (nothing was changed).",
        &one(stats.control_rejected.load(Relaxed)),
    );
    family(
        "fengine_saturated_total",
        "counter",
        "Complex output values with a part clamped to [-127, 127].",
        &(0..POLS)
            .map(|p| {
                (
                    format!("pol=\"{p}\""),
                    stats.saturated[p].load(Relaxed) as f64,
                )
            })
            .collect::<Vec<_>>(),
    );
    family(
        "fengine_frames_total",
        "counter",
        "Frames computed by the backend.",
        &one(stats.frames_computed.load(Relaxed)),
    );
    family(
        "fengine_empty_frames_total",
        "counter",
        "Frames with no input data, not computed.",
        &one(stats.frames_empty.load(Relaxed)),
    );
    family(
        "fengine_delay_out_of_span_total",
        "counter",
        "Spectra (per polarisation) whose delay put the window outside the data kept.",
        &one(stats.delay_out_of_span.load(Relaxed)),
    );
    family(
        "fengine_queue_depth",
        "gauge",
        "Items waiting in each queue between pipeline stages.",
        &stats
            .queue_depths()
            .into_iter()
            .map(|(q, d)| (format!("queue=\"{q}\""), d as f64))
            .collect::<Vec<_>>(),
    );
    let t = &stats.chunk_time;
    family(
        "fengine_chunk_processing_seconds",
        "summary",
        "Time from handing a frame to the backend until its output is ready.",
        &[],
    );
    let _ = writeln!(
        out,
        "fengine_chunk_processing_seconds_sum{{{b}}} {}",
        t.sum_ns.load(Relaxed) as f64 * 1e-9
    );
    let _ = writeln!(
        out,
        "fengine_chunk_processing_seconds_count{{{b}}} {}",
        t.count.load(Relaxed)
    );
    let mut gauge = |name: &str, help: &str, v: f64| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{{{b}}} {v}");
    };
    gauge(
        "fengine_last_frame_timestamp",
        "ADC timestamp of the chunk of the last frame computed.",
        stats.last_frame_timestamp.load(Relaxed) as f64,
    );
    gauge(
        "fengine_last_frame_time_seconds",
        "Unix time at which the last frame was computed.",
        stats.last_frame_unix_ns.load(Relaxed) as f64 * 1e-9,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_the_backend_label() {
        let s = Stats::new(2);
        s.heaps_sent[1].fetch_add(3, Relaxed);
        s.chunk_time.record(std::time::Duration::from_millis(2));
        s.queues
            .lock()
            .unwrap()
            .push(("pair_to_compute", Box::new(|| 4)));
        let text = render(&s, "cpu");
        assert!(text.contains("fengine_output_heaps_total{backend=\"cpu\",substream=\"1\"} 3"));
        assert!(text.contains(
            "fengine_input_rejected_packets_total{backend=\"cpu\",pol=\"0\",reason=\"too_old\"} 0"
        ));
        assert!(text.contains("fengine_queue_depth{backend=\"cpu\",queue=\"pair_to_compute\"} 4"));
        assert!(text.contains("fengine_chunk_processing_seconds_count{backend=\"cpu\"} 1"));
        // Every sample line has a value that parses.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{line}");
        }
    }
}

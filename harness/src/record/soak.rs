//! What `harness soak` produces: a sample of every process's resources and of every loss counter
//! once an interval, and the report made of them (the time series, a summary per process, and the
//! verdict with its reasons).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::WatchSummary;

/// One process's resources at one sample, as far as they could be read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub threads: Option<u64>,
    pub cpu_seconds: Option<f64>,
    /// Unix time the process started: another value later means it was restarted.
    pub start_time_seconds: Option<f64>,
    /// Why the resources could not be read (the service did not answer, or does not export
    /// them).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// Everything sampled once an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoakSample {
    /// Seconds since the soak began (the end of the warm-up).
    pub elapsed_s: f64,
    /// Received rate since the previous sample, as ADC samples per second per polarisation.
    pub received_rate: f64,
    /// Every loss counter as grown since the soak began, by name (see the README's list): the
    /// harness's gaps, late and malformed heaps and own socket drops, the content check's misses,
    /// the engine's missing input and skipped output (and its input socket drops, rejected
    /// packets, unpaired chunks and resyncs, where it has them), dsim's skipped heaps and send
    /// errors. A counter that could not be read this time is absent.
    pub losses: BTreeMap<String, f64>,
    /// Per process ("fengine", "dsim", "harness"), its resources.
    pub processes: BTreeMap<String, ProcessSample>,
    /// What could not be read at this sample, one sentence each.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub errors: Vec<String>,
    /// The harness's host's CPU since the previous sample (absent at the first, or where the
    /// host's `/proc/stat` could not be read).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host: Option<HostCpu>,
}

/// A host's CPU over an interval, as average cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    /// Everything but idle and I/O wait, kernel work and steal included.
    pub busy: f64,
    /// Time the hypervisor gave the host's virtual CPUs to something else: every thread on
    /// such a CPU stands still, and neither the engine's scheduler statistics nor any process's
    /// CPU time can see it.
    pub steal: f64,
    /// Cores the host has.
    pub cores: usize,
}

/// How a soak is judged.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoakLimits {
    /// The resident-memory baseline is each process's first sample at or after this many
    /// seconds; later samples are held to it.
    pub baseline_s: f64,
    /// Largest growth of resident memory over the baseline, as a fraction (0.05: 5%).
    pub rss_growth: f64,
    /// Open descriptors and threads may rise this many above their baseline.
    pub fd_slack: u64,
    pub thread_slack: u64,
    /// The mean received rate may fall short of the requested one by this fraction.
    pub rate_tolerance: f64,
    /// Samples due this often (s): a longer silence between two is a hole in the record.
    pub interval_s: f64,
}

/// One process over the soak.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessSummary {
    /// When its baseline was taken, and the baseline.
    pub baseline_s: Option<f64>,
    pub baseline_rss_bytes: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_rss_s: Option<f64>,
    pub last_rss_bytes: Option<u64>,
    /// Largest resident memory after the baseline over the baseline, less one.
    pub max_growth: Option<f64>,
    pub baseline_fds: Option<u64>,
    pub max_fds_seen: Option<u64>,
    pub baseline_threads: Option<u64>,
    pub max_threads_seen: Option<u64>,
    /// Samples at which its resources could not be read.
    pub unreadable: usize,
    /// Times its start time changed between samples.
    pub restarts: usize,
}

/// The outcome: pass, or the reasons it failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoakVerdict {
    pub pass: bool,
    pub reasons: Vec<String>,
    pub processes: BTreeMap<String, ProcessSummary>,
    /// Every loss counter at the end (the largest it reached).
    pub losses: BTreeMap<String, f64>,
    /// Mean received rate over the soak (sample/s per polarisation).
    pub received_rate: Option<f64>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    pub pass: bool,
    pub reasons: Vec<String>,
    /// The rate asked for (sample/s per polarisation), and where it came from.
    pub rate: Option<f64>,
    pub rate_source: String,
    /// Seconds asked for, and soaked (after the warm-up).
    pub duration_s: f64,
    pub soaked_s: f64,
    pub warmup_s: f64,
    pub limits: SoakLimits,
    /// Mode, backend, geometry and arguments of the system under test.
    pub system: serde_json::Value,
    pub received_rate: Option<f64>,
    pub processes: BTreeMap<String, ProcessSummary>,
    pub losses: BTreeMap<String, f64>,
    /// The time series.
    pub samples: Vec<SoakSample>,
    /// `watch`'s own summary of the whole run, warm-up included: per substream the heaps
    /// received and any missing ranges.
    pub watch: Option<WatchSummary>,
}

/// One fraction of a soak at several fractions of the max rate (`--fractions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FractionRisk {
    /// Of the max rate.
    pub fraction: f64,
    /// Requested and mean received rate (sample/s per polarisation).
    pub rate: Option<f64>,
    pub received_rate: Option<f64>,
    /// Seconds soaked (after the warm-up) and samples taken.
    pub soaked_s: f64,
    pub samples: usize,
    /// Sample intervals in which any loss counter moved.
    pub loss_events: usize,
    /// Of those, the intervals in which the hypervisor took a quarter of a core or more of the
    /// harness's host (None where its CPU could not be read): events of the host, not the system.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub events_with_steal: Option<usize>,
    pub events_per_hour: Option<f64>,
    /// With no loss event: the rate of events per hour that a soak this long rules out at 95%
    /// confidence (the true rate is below it).
    pub upper_95_per_hour: Option<f64>,
    /// The fraction's own soak verdict (memory, restarts, rate and losses).
    pub pass: bool,
    /// Where its own soak report is, relative to the risk report.
    pub out_dir: String,
}

/// A soak at several fractions of the max rate: loss events per hour at each, the rate a user
/// can provision for a given risk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RiskReport {
    /// The max rate the fractions are of (sample/s per polarisation) and where it came from.
    pub max_rate: f64,
    pub max_rate_source: String,
    /// Seconds soaked at each fraction, and between samples (the resolution of a loss event).
    pub duration_s: f64,
    pub interval_s: f64,
    pub fractions: Vec<FractionRisk>,
}

//! The process's own resources as Prometheus's standard `process_*` series, which `fengine` and
//! `dsim` add to their `GET /metrics`: resident and virtual memory, open and allowed file
//! descriptors, threads, CPU time and start time. They are read from `/proc/self` (through
//! procfs) at each scrape, so a harness that cannot see the process's `/proc` (another
//! container, another host) reads them over HTTP, and a Prometheus scraping the services gets
//! the series its dashboards already know.
//!
//! On a system without `/proc` the series are left out rather than made up.

use procfs::process::{LimitValue, Process};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The series' names as scraped (a counter's with its `_total`).
pub mod names {
    pub const RESIDENT_MEMORY: &str = "process_resident_memory_bytes";
    pub const VIRTUAL_MEMORY: &str = "process_virtual_memory_bytes";
    pub const OPEN_FDS: &str = "process_open_fds";
    pub const MAX_FDS: &str = "process_max_fds";
    pub const THREADS: &str = "process_threads";
    pub const CPU_SECONDS: &str = "process_cpu_seconds_total";
    pub const START_TIME: &str = "process_start_time_seconds";
}

/// One reading of a process's resources.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessStats {
    /// Resident set size.
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    /// The soft limit on open files; None when unlimited.
    pub max_fds: Option<u64>,
    pub threads: u64,
    /// User and system time of all its threads.
    pub cpu_seconds: f64,
    /// Unix time the process started: a new value means a new process (a restart).
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// The calling process.
    pub fn myself() -> procfs::ProcResult<Self> {
        Self::read(&Process::myself()?)
    }

    /// The process `pid` (which this user may read).
    pub fn of(pid: i32) -> procfs::ProcResult<Self> {
        Self::read(&Process::new(pid)?)
    }

    fn read(p: &Process) -> procfs::ProcResult<Self> {
        let stat = p.stat()?;
        let ticks = procfs::ticks_per_second() as f64;
        let max_fds = match p.limits()?.max_open_files.soft_limit {
            LimitValue::Value(n) => Some(n),
            LimitValue::Unlimited => None,
        };
        Ok(Self {
            resident_bytes: stat.rss * procfs::page_size(),
            virtual_bytes: stat.vsize,
            open_fds: p.fd_count()? as u64,
            max_fds,
            threads: u64::try_from(stat.num_threads).unwrap_or(0),
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            start_time_seconds: procfs::boot_time_secs()? as f64 + stat.starttime as f64 / ticks,
        })
    }
}

/// Reads `/proc/self` at each scrape.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let Ok(s) = ProcessStats::myself() else {
            return Ok(());
        };
        let enc = &mut enc;
        gauge(
            enc,
            names::RESIDENT_MEMORY,
            "Resident memory size in bytes.",
            s.resident_bytes,
        )?;
        gauge(
            enc,
            names::VIRTUAL_MEMORY,
            "Virtual memory size in bytes.",
            s.virtual_bytes,
        )?;
        gauge(
            enc,
            names::OPEN_FDS,
            "Number of open file descriptors.",
            s.open_fds,
        )?;
        if let Some(m) = s.max_fds {
            gauge(
                enc,
                names::MAX_FDS,
                "Maximum number of open file descriptors.",
                m,
            )?;
        }
        gauge(
            enc,
            names::THREADS,
            "Number of OS threads in the process.",
            s.threads,
        )?;
        let cpu = names::CPU_SECONDS.trim_end_matches("_total");
        ConstCounter::new(s.cpu_seconds).encode(enc.encode_descriptor(
            cpu,
            "Total user and system CPU time spent in seconds.",
            None,
            MetricType::Counter,
        )?)?;
        gauge(
            enc,
            names::START_TIME,
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )
    }
}

fn gauge<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: V,
) -> std::fmt::Result {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A registry of the process series alone (no labels: they describe the process, whichever
/// engines or outputs it serves).
pub fn registry() -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(ProcessCollector));
    r
}

/// Appends this process's series to a scrape in Prometheus text exposition (version 0.0.4),
/// whose families they do not repeat.
pub fn encode_into(out: &mut String) {
    // Writing into a String cannot fail, and the collector's encoding does not either.
    let _ = prometheus_client::encoding::prometheus_text::encode(out, &registry());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests read their own process: one at a time, so that none sees another's files.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn reads_this_process() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let s = ProcessStats::myself().unwrap();
        assert!(s.resident_bytes > 1 << 20, "{s:?}");
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(s.open_fds >= 3, "stdin, stdout, stderr at least: {s:?}");
        assert!(s.threads >= 1, "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86400.0 * 365.0,
            "{s:?}"
        );
        assert_eq!(
            ProcessStats::of(std::process::id() as i32)
                .unwrap()
                .start_time_seconds,
            s.start_time_seconds
        );
    }

    /// Memory touched shows in the resident size, and a file opened in the descriptor count.
    #[test]
    fn follows_memory_and_descriptors() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let before = ProcessStats::myself().unwrap();
        // Seen (black_box) before the reading, so that the writes cannot move past it.
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let files: Vec<_> = (0..20)
            .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
            .collect();
        let after = ProcessStats::myself().unwrap();
        drop(block);
        assert!(
            after.resident_bytes >= before.resident_bytes + (60 << 20),
            "{before:?} -> {after:?}"
        );
        assert!(
            after.open_fds >= before.open_fds + 20,
            "{before:?} -> {after:?}"
        );
        drop(files);
    }

    #[test]
    fn exposition_has_the_standard_names() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::new();
        encode_into(&mut text);
        for name in [
            names::RESIDENT_MEMORY,
            names::VIRTUAL_MEMORY,
            names::OPEN_FDS,
            names::THREADS,
            names::CPU_SECONDS,
            names::START_TIME,
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"));
            let v: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
            // A test process may not have used a tick of CPU yet.
            assert!(v > 0.0 || name == names::CPU_SECONDS && v == 0.0, "{line}");
        }
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_resident_memory_bytes gauge"),
            "{text}"
        );
    }
}

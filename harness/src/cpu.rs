//! Where the host's cores went during a trial: the CPU time of the processes under test and of the
//! whole host (Linux `/proc`, through procfs), read at both ends of the observation window.
//!
//! Per-process time leaves out kernel work the kernel does not charge to a task (softirq time,
//! where it is accounted separately, e.g. loopback delivery), so the host figure is the one that
//! says whether the host ran out of cores.

use std::collections::BTreeMap;

use procfs::process::Process;
use procfs::{CurrentSI, KernelStats};
use serde::Serialize;

/// CPU seconds used so far: per named process, and by the host (busy, and how many cores).
#[derive(Clone, Debug, Default)]
pub struct CpuTimes {
    procs: BTreeMap<String, f64>,
    host: Option<(f64, usize)>,
}

/// Average cores busy over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cores {
    /// Per process (user + system time of all its threads).
    pub by_process: BTreeMap<String, f64>,
    /// The whole host: everything but idle and I/O wait, kernel work included.
    pub host_busy: Option<f64>,
    /// Cores the host has.
    pub host_cores: Option<usize>,
}

impl CpuTimes {
    /// Reads the named processes and the host; what cannot be read (a process gone, no `/proc`)
    /// is left out.
    pub fn read(pids: &[(String, u32)]) -> Self {
        let tps = procfs::ticks_per_second() as f64;
        let procs = pids
            .iter()
            .filter_map(|(name, pid)| {
                let stat = Process::new(i32::try_from(*pid).ok()?).ok()?.stat().ok()?;
                Some((name.clone(), (stat.utime + stat.stime) as f64 / tps))
            })
            .collect();
        let host = KernelStats::current().ok().map(|k| {
            let t = &k.total;
            let busy = t.user
                + t.nice
                + t.system
                + t.irq.unwrap_or(0)
                + t.softirq.unwrap_or(0)
                + t.steal.unwrap_or(0);
            (busy as f64 / tps, k.cpu_time.len())
        });
        Self { procs, host }
    }

    /// Average cores used between `before` and this reading, `secs` apart.
    pub fn cores_since(&self, before: &CpuTimes, secs: f64) -> Cores {
        let per = |now: f64, then: f64| ((now - then) / secs.max(1e-9)).max(0.0);
        Cores {
            by_process: self
                .procs
                .iter()
                .filter_map(|(name, &now)| Some((name.clone(), per(now, *before.procs.get(name)?))))
                .collect(),
            host_busy: self.host.zip(before.host).map(|(a, b)| per(a.0, b.0)),
            host_cores: self.host.map(|h| h.1),
        }
    }
}

impl Cores {
    /// "dsim 3.1, fengine 6.2, harness 1.8; host 14.9 of 16", or empty if nothing was read.
    pub fn describe(&self) -> String {
        let procs: Vec<String> = self
            .by_process
            .iter()
            .map(|(n, c)| format!("{n} {c:.1}"))
            .collect();
        let host = match (self.host_busy, self.host_cores) {
            (Some(b), Some(n)) => format!("host {b:.1} of {n}"),
            _ => String::new(),
        };
        match (procs.is_empty(), host.is_empty()) {
            (true, _) => host,
            (false, true) => procs.join(", "),
            (false, false) => format!("{}; {host}", procs.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_shows_as_about_one_core() {
        let me = vec![("harness".to_string(), std::process::id())];
        let before = CpuTimes::read(&me);
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_secs_f64() < 0.5 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let secs = start.elapsed().as_secs_f64();
        let cores = CpuTimes::read(&me).cores_since(&before, secs);
        let c = cores.by_process["harness"];
        // Ticks are 10 ms: allow for rounding at both ends, and for other test threads.
        assert!(c > 0.7, "{cores:?}");
        let host = cores.host_busy.unwrap();
        assert!(
            host > 0.7 && host <= cores.host_cores.unwrap() as f64 + 0.1,
            "{cores:?}"
        );
        assert!(
            cores.describe().starts_with("harness "),
            "{}",
            cores.describe()
        );
    }

    #[test]
    fn unreadable_processes_are_left_out() {
        let gone = vec![("ghost".to_string(), u32::MAX)];
        let a = CpuTimes::read(&gone);
        let cores = CpuTimes::read(&gone).cores_since(&a, 1.0);
        assert!(cores.by_process.is_empty());
        assert_eq!(
            Cores::default().describe(),
            "",
            "nothing read, nothing said"
        );
    }
}

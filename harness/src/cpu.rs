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

use crate::record::soak::HostCpu;

/// CPU seconds used so far: per named process, and by the host (busy, and how many cores).
#[derive(Clone, Debug, Default)]
pub struct CpuTimes {
    procs: BTreeMap<String, f64>,
    host: Option<Host>,
}

#[derive(Clone, Copy, Debug)]
struct Host {
    busy: f64,
    steal: f64,
    cores: usize,
}

/// Average cores busy over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cores {
    /// Per process (user + system time of all its threads).
    pub by_process: BTreeMap<String, f64>,
    /// The whole host: everything but idle and I/O wait, kernel work included.
    pub host_busy: Option<f64>,
    /// Of that, time the hypervisor ran something else on the host's virtual CPUs (steal): a
    /// thread on such a CPU stalls however idle the other cores are.
    pub host_steal: Option<f64>,
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
            let steal = t.steal.unwrap_or(0);
            let busy =
                t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0) + steal;
            Host {
                busy: busy as f64 / tps,
                steal: steal as f64 / tps,
                cores: k.cpu_time.len(),
            }
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
            host_busy: self.host.zip(before.host).map(|(a, b)| per(a.busy, b.busy)),
            host_steal: self
                .host
                .zip(before.host)
                .map(|(a, b)| per(a.steal, b.steal)),
            host_cores: self.host.map(|h| h.cores),
        }
    }
}

impl Cores {
    /// The host's part, where it was read.
    pub fn host(&self) -> Option<HostCpu> {
        Some(HostCpu {
            busy: self.host_busy?,
            steal: self.host_steal?,
            cores: self.host_cores?,
        })
    }

    /// "dsim 3.1, fengine 6.2, harness 1.8; host 14.9 of 16 (steal 0.2)", or empty if nothing
    /// was read.
    pub fn describe(&self) -> String {
        let procs: Vec<String> = self
            .by_process
            .iter()
            .map(|(n, c)| format!("{n} {c:.1}"))
            .collect();
        let host = match (self.host_busy, self.host_cores) {
            (Some(b), Some(n)) => format!(
                "host {b:.1} of {n} (steal {:.1})",
                self.host_steal.unwrap_or(0.0)
            ),
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

    /// This process's CPU time (all threads) from the kernel's own clock.
    fn process_cpu_seconds() -> f64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        assert_eq!(
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) },
            0
        );
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    }

    #[test]
    fn process_time_agrees_with_the_kernel_clock() {
        let me = vec![("harness".to_string(), std::process::id())];
        let (before, cpu0, start) = (
            CpuTimes::read(&me),
            process_cpu_seconds(),
            std::time::Instant::now(),
        );
        // Half a second of CPU, however busy the host is (within 20 s).
        let mut x = 0u64;
        while process_cpu_seconds() - cpu0 < 0.5 && start.elapsed().as_secs() < 20 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let secs = start.elapsed().as_secs_f64();
        let cores = CpuTimes::read(&me).cores_since(&before, secs);
        let used = process_cpu_seconds() - cpu0;
        // /proc counts in ticks (10 ms): allow two at each end.
        let tick = 1.0 / procfs::ticks_per_second() as f64;
        let seen = cores.by_process["harness"] * secs;
        assert!(
            (seen - used).abs() <= 4.0 * tick + 0.01,
            "{seen} s against {used} s"
        );
        let host = cores.host_busy.unwrap();
        let n = cores.host_cores.unwrap() as f64;
        assert!(
            host * secs >= used - 4.0 * tick && host <= n + 0.1,
            "{cores:?}"
        );
        assert!(cores.host_steal.unwrap() <= host, "{cores:?}");
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

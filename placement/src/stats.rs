//! What the scheduler says a thread did: time on a core, time waiting for one, and how often it
//! was switched in (`/proc/<pid>/task/<tid>/schedstat`, kept by every kernel with schedstats).

use std::time::Duration;

/// A thread's scheduler statistics since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Time spent running on a core.
    pub run: Duration,
    /// Time spent runnable but waiting for a core: what a busy host takes from the thread.
    pub wait: Duration,
    /// Times the thread was switched onto a core.
    pub slices: u64,
}

impl SchedStats {
    /// The calling thread's statistics; `None` where the kernel keeps none.
    pub fn current_thread() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
    }

    /// Statistics of thread `tid` of this process (see [`current_tid`]).
    pub fn of_thread(tid: i32) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?)
    }

    fn parse(s: &str) -> Option<Self> {
        let mut it = s.split_whitespace().map(|t| t.parse::<u64>().ok());
        Some(Self {
            run: Duration::from_nanos(it.next()??),
            wait: Duration::from_nanos(it.next()??),
            slices: it.next()??,
        })
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &SchedStats) -> SchedStats {
        SchedStats {
            run: self.run.saturating_sub(earlier.run),
            wait: self.wait.saturating_sub(earlier.wait),
            slices: self.slices.saturating_sub(earlier.slices),
        }
    }
}

/// The calling thread's id, as the kernel names it in /proc and `ps -L`.
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_line() {
        let s = SchedStats::parse("648993 1459309 7\n").unwrap();
        assert_eq!(s.run, Duration::from_nanos(648993));
        assert_eq!(s.wait, Duration::from_nanos(1459309));
        assert_eq!(s.slices, 7);
        assert!(SchedStats::parse("1 2").is_none());
    }

    #[test]
    fn a_busy_thread_has_run_time() {
        // Spins until the kernel has counted 10 ms of running: on a loaded host a 30 ms spin may
        // get far less of a core, so the wall time is only a bound.
        let before = SchedStats::current_thread().expect("schedstat");
        let t = std::time::Instant::now();
        let mut d = SchedStats::default();
        while d.run < Duration::from_millis(10) && t.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
            d = SchedStats::current_thread().unwrap().since(&before);
        }
        assert!(d.run >= Duration::from_millis(10), "{d:?}");
        assert!(d.run <= t.elapsed() + Duration::from_millis(5), "{d:?}");
        assert!(SchedStats::of_thread(current_tid()).is_some());
    }
}

//! Catching up after a stall. A send thread that finds itself behind its schedule (the host
//! descheduled it: another program's compiler, a page fault) sends its backlog paced at a
//! multiple of the rate rather than all at once, so that the burst reaches the receiver at a rate
//! it can take instead of landing in its socket buffer in one go. A real digitiser never falls
//! behind: a stall of the simulator is an artefact of the test bed, and making it up keeps every
//! heap rather than losing a stretch of the stream.
//!
//! Only the pacing changes: heap k keeps its timestamp and its due time (computed from k, never
//! accumulated); a catch-up only releases late heaps at `started + (due - from_due) / factor`
//! until that line meets the schedule. Past `--max-late` the host is taken to be unable to send
//! the rate at all, and the senders skip ahead instead (`sender`).

use std::time::{Duration, Instant};

/// Lateness below this is sent at once, as before: it is within the scheduler's usual wakeup
/// jitter on a loaded host (timer slack, a core taken for a millisecond or two), and a burst of
/// a few milliseconds of data is far below any receiver's socket buffer.
pub const CATCH_UP_AFTER: Duration = Duration::from_millis(5);

/// What a send thread does with a batch that starts `behind` its due time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lateness {
    /// Within [`CATCH_UP_AFTER`]: send as the schedule says.
    OnTime,
    /// Behind, within the bound: send paced at the catch-up rate.
    Late,
    /// More than the bound behind: the host cannot send the rate; skip ahead.
    TooLate,
}

impl Lateness {
    pub fn judge(behind: Duration, max_late: Duration) -> Self {
        if behind > max_late {
            Self::TooLate
        } else if behind > CATCH_UP_AFTER {
            Self::Late
        } else {
            Self::OnTime
        }
    }
}

/// One catch-up in progress: heaps due from `from_due` on leave at `factor` times the rate from
/// `started`, or at their due time once that comes later (caught up).
#[derive(Clone, Copy, Debug)]
pub struct CatchUp {
    started: Instant,
    from_due: Instant,
    factor: f64,
}

impl CatchUp {
    /// A catch-up from `now` of the heaps due from `from_due` on, at `factor` (> 1) times the
    /// rate.
    pub fn new(now: Instant, from_due: Instant, factor: f64) -> Self {
        Self {
            started: now,
            from_due,
            factor,
        }
    }

    /// When a heap due at `due` may leave: never before it is due, and at `factor` times the
    /// schedule's pace from the start of the catch-up.
    pub fn release(&self, due: Instant) -> Instant {
        let paced = self.started
            + due
                .saturating_duration_since(self.from_due)
                .div_f64(self.factor);
        paced.max(due)
    }

    /// Whether the heap due at `due` is on schedule again: the catch-up is over.
    pub fn caught_up(&self, due: Instant) -> bool {
        self.release(due) <= due
    }

    /// How long a catch-up of a stall of `behind` takes: the backlog shrinks at (factor - 1)
    /// times real time.
    pub fn duration(behind: Duration, factor: f64) -> Duration {
        behind.div_f64(factor - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn lateness_is_judged_against_the_two_bounds() {
        let max = 1000 * MS;
        assert_eq!(Lateness::judge(Duration::ZERO, max), Lateness::OnTime);
        assert_eq!(Lateness::judge(CATCH_UP_AFTER, max), Lateness::OnTime);
        assert_eq!(Lateness::judge(6 * MS, max), Lateness::Late);
        assert_eq!(Lateness::judge(max, max), Lateness::Late);
        assert_eq!(Lateness::judge(max + MS, max), Lateness::TooLate);
    }

    /// A 300 ms stall at twice the rate: heaps leave at 2x until, 300 ms later, the pacing meets
    /// the schedule; heaps due after that leave when due.
    #[test]
    fn late_heaps_leave_at_the_catch_up_rate_until_on_schedule() {
        let t0 = Instant::now();
        // Heap k is due at t0 + k ms; the thread wakes 300 ms late, at heap 0's due + 300 ms.
        let due = |k: u32| t0 + MS * k;
        let now = t0 + 300 * MS;
        let c = CatchUp::new(now, due(0), 2.0);
        assert_eq!(c.release(due(0)), now);
        // 100 ms of heaps go out in 50 ms.
        assert_eq!(c.release(due(100)), now + 50 * MS);
        assert_eq!(c.release(due(400)), now + 200 * MS);
        assert!(!c.caught_up(due(599)));
        // Caught up at heap 600 (due t0 + 600 ms = now + 300 ms), as `duration` says.
        assert_eq!(CatchUp::duration(300 * MS, 2.0), 300 * MS);
        assert!(c.caught_up(due(600)));
        assert_eq!(c.release(due(600)), due(600));
        assert_eq!(c.release(due(900)), due(900));
        // Release times never go backwards and never precede the due time.
        let mut last = now;
        for k in 0..1000 {
            let r = c.release(due(k));
            assert!(r >= last && r >= due(k), "heap {k}");
            last = r;
        }
    }

    #[test]
    fn a_slower_catch_up_takes_longer() {
        let t0 = Instant::now();
        let now = t0 + 100 * MS;
        let c = CatchUp::new(now, t0, 1.5);
        assert_eq!(CatchUp::duration(100 * MS, 1.5), 200 * MS);
        assert!(!c.caught_up(t0 + 299 * MS));
        assert!(c.caught_up(t0 + 300 * MS));
    }
}

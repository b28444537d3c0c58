//! What the scheduler takes from the stages' threads other than the receivers (which read their
//! own, once per receive round): each such thread gives its kernel thread id as it starts, and
//! the thread waiting in [`Pipeline::join`](super::Pipeline::join) reads their statistics every
//! [`SCHED_EVERY`](crate::stats::SCHED_EVERY), so that the stages' loops stay as they are.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::stats::{SchedProbe, Stats, ThreadWaits};

/// One watched thread: its id once it has started, and its figures in [`Stats::threads`].
pub(super) struct Watched {
    tid: Arc<AtomicI32>,
    probe: Option<SchedProbe>,
    waits: Arc<ThreadWaits>,
}

impl Watched {
    /// Registers thread `name` in `stats`; the thread stores its id in the returned cell.
    pub(super) fn new(stats: &Stats, name: &str) -> (Self, Arc<AtomicI32>) {
        let waits = Arc::new(ThreadWaits::default());
        if let Ok(mut t) = stats.threads.lock() {
            t.push((name.to_string(), Arc::clone(&waits)));
        }
        let tid = Arc::new(AtomicI32::new(0));
        let w = Self {
            tid: Arc::clone(&tid),
            probe: None,
            waits,
        };
        (w, tid)
    }

    /// Reads the thread's statistics if it has started and their time has come.
    pub(super) fn sample(&mut self, now: Instant) {
        if self.probe.is_none() {
            let tid = self.tid.load(Ordering::Relaxed);
            if tid == 0 {
                return;
            }
            self.probe = Some(SchedProbe::of(tid));
        }
        if let Some(p) = &mut self.probe {
            p.sample(now, &self.waits);
        }
    }
}

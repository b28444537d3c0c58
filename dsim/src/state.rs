//! State shared between the send threads, the control plane and the status reader.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use spead::transport::Endpoint;

use crate::buffer::{Layout, Slot};
use crate::config::Config;
use crate::faults::{FaultCounters, FaultPlan};
use crate::schedule::{Schedule, Versioned};
use crate::spec::{Signal, SignalSpec, SignalStatus};
use crate::status::RateWindow;

/// Totals of one send thread (each on its own cache lines, so threads never contend; readers
/// add them up).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct PolCounters {
    /// Heaps whose timestamps have been dealt with (sent, dropped or held back).
    pub heaps_done: AtomicU64,
    /// Datagrams handed to the kernel (duplicates and corrupted ones included).
    pub datagrams: AtomicU64,
    pub bytes: AtomicU64,
    /// Saturated samples in the heaps sent.
    pub saturated: AtomicU64,
    /// Failed send calls.
    pub send_errors: AtomicU64,
    /// Heaps never sent because the senders had fallen too far behind (`Shared::resume_from`).
    pub skipped: AtomicU64,
    /// Catch-ups begun after a stall (`catchup`).
    pub catch_ups: AtomicU64,
    /// Heaps sent during a catch-up, later than due.
    pub sent_late: AtomicU64,
    /// How far behind (ns) the thread was at the start of its longest catch-up.
    pub longest_catch_up_ns: AtomicU64,
}

/// Counts one send thread gathers over a batch and then adds to [`PolCounters`].
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchCounts {
    pub heaps_done: u64,
    pub datagrams: u64,
    pub bytes: u64,
    pub saturated: u64,
    pub send_errors: u64,
    pub skipped: u64,
    pub catch_ups: u64,
    pub sent_late: u64,
}

impl PolCounters {
    /// Adds a batch's counts (only the owning thread writes).
    pub fn add(&self, c: &BatchCounts) {
        for (a, v) in [
            (&self.heaps_done, c.heaps_done),
            (&self.datagrams, c.datagrams),
            (&self.bytes, c.bytes),
            (&self.saturated, c.saturated),
            (&self.send_errors, c.send_errors),
            (&self.skipped, c.skipped),
            (&self.catch_ups, c.catch_ups),
            (&self.sent_late, c.sent_late),
        ] {
            if v > 0 {
                a.fetch_add(v, Relaxed);
            }
        }
    }
}

/// A new signal's slots for one send thread, used from heap `from_heap` (a batch boundary) on.
pub struct Switch {
    pub from_heap: u64,
    pub slots: Vec<Slot>,
}

/// Where a send thread has got to: the first heap of its latest batch and when it left.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub heap: u64,
    pub sent_at: Instant,
}

pub struct PolState {
    pub pol: usize,
    pub layout: Layout,
    pub endpoint: Endpoint,
    pub dests: Vec<SocketAddr>,
    /// One per send thread.
    pub counters: Vec<PolCounters>,
    pub faults: Versioned<FaultPlan>,
    pub fault_counters: FaultCounters,
    /// One per send thread.
    pub progress: Vec<Mutex<Option<Progress>>>,
    /// Highest batch start any thread of this polarisation has begun.
    pub started: AtomicU64,
    /// One per send thread: new signals.
    pub switches: Mutex<Vec<mpsc::Sender<Switch>>>,
}

impl PolState {
    /// The totals over all threads.
    pub fn totals(&self) -> BatchCounts {
        let mut t = BatchCounts::default();
        for c in &self.counters {
            t.heaps_done += c.heaps_done.load(Relaxed);
            t.datagrams += c.datagrams.load(Relaxed);
            t.bytes += c.bytes.load(Relaxed);
            t.saturated += c.saturated.load(Relaxed);
            t.send_errors += c.send_errors.load(Relaxed);
            t.skipped += c.skipped.load(Relaxed);
            t.catch_ups += c.catch_ups.load(Relaxed);
            t.sent_late += c.sent_late.load(Relaxed);
        }
        t
    }

    /// The longest catch-up of any thread: how far behind it began, in seconds.
    pub fn longest_catch_up_s(&self) -> f64 {
        let ns = self
            .counters
            .iter()
            .map(|c| c.longest_catch_up_ns.load(Relaxed))
            .max()
            .unwrap_or(0);
        ns as f64 * 1e-9
    }

    /// The latest progress over all threads.
    pub fn progress(&self) -> Option<Progress> {
        self.progress
            .iter()
            .filter_map(|p| *p.lock().unwrap_or_else(|e| e.into_inner()))
            .max_by_key(|p| p.heap)
    }
}

/// The signal in force (or about to be).
#[derive(Clone, Debug)]
pub struct SignalState {
    /// Per polarisation, and the seed.
    pub signal: Signal,
    /// The common form an update in the common form applies to: the latest signal given in that
    /// form (at start, the flags), its seed kept equal to the signal's.
    pub common: SignalSpec,
    /// Each polarisation's tone frequencies as generated (rounded to whole cycles per buffer), Hz
    /// at `rate`.
    pub tone_frequencies: [Vec<f64>; 2],
    /// The sample rate the frequencies were converted with.
    pub rate: f64,
    pub from_heap: u64,
    /// The buffer in samples: the longest period a spec in katgpucbf's language may have.
    pub max_period: u64,
}

impl SignalState {
    pub fn status(&self) -> SignalStatus {
        self.signal.status_with(
            self.tone_frequencies.clone(),
            self.from_heap,
            self.max_period,
        )
    }
}

pub struct Shared {
    pub config: Config,
    pub heap_samples: usize,
    pub threads: usize,
    pub pols: [PolState; 2],
    pub schedule: Versioned<Schedule>,
    pub signal: Mutex<SignalState>,
    /// Held while a new signal is built, so two requests do not interleave.
    pub signal_busy: Mutex<()>,
    pub stop: AtomicBool,
    /// Send threads still running.
    pub running: AtomicUsize,
    pub first_heap: u64,
    /// Heap index at which sending ends (exclusive), if it does.
    pub end_heap: Option<u64>,
    pub sync_time: f64,
    /// Heap from which the senders of both polarisations go on after one of them fell more than
    /// `max_late` behind: batches wholly before it are skipped, so that every thread is back on
    /// the clock together (threads drifting apart would look like a restarted stream).
    pub resume_from: AtomicU64,
    /// Nanoseconds after `started_at` until which every send thread holds still at its next
    /// batch (0: none): a stall of the process as a busy host causes one, for tests of the
    /// catch-up (`DsimHandle::stall_senders`).
    pub stalled_until_ns: AtomicU64,
    pub started_at: Instant,
    pub rate_window: Mutex<RateWindow>,
}

impl Shared {
    pub fn finished(&self) -> bool {
        self.running.load(Relaxed) == 0
    }

    /// When a stall asked for by `DsimHandle::stall_senders` ends, if one is on or was.
    pub fn stalled_until(&self) -> Option<Instant> {
        match self.stalled_until_ns.load(Relaxed) {
            0 => None,
            ns => Some(self.started_at + std::time::Duration::from_nanos(ns)),
        }
    }

    /// Largest batch of either polarisation, in heaps.
    pub fn max_batch(&self) -> usize {
        self.pols.iter().map(|p| p.layout.batch).max().unwrap_or(1)
    }
}

//! When each heap leaves: heap k is due at sync_time + k * heap_samples / rate, and a rate change
//! from heap k_c on keeps k_c's due time and continues at the new rate (timestamps continuous).
//! Due times are computed from k every time (spead's exact-rate [`Pacer`]), never accumulated.
//!
//! Also [`Versioned`]: a value the control plane replaces and the send threads re-read only when
//! its generation number has moved (one atomic load per batch on the hot path).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spead::transport::{Pacer, Rate};

/// One stretch at a constant rate, from heap `start` on. The pacer counts samples from `start`
/// (exact integer ratios, so no drift however long the run).
#[derive(Clone, Debug)]
struct Segment {
    start: u64,
    pacer: Pacer,
    /// Samples per second per polarisation.
    rate: f64,
}

/// Due times of every heap.
#[derive(Clone, Debug)]
pub struct Schedule {
    heap_samples: u64,
    segments: Vec<Segment>,
    /// The same moment on both clocks, to express due times as Unix times.
    anchor: (Instant, f64),
}

/// Segments kept: older ones are long past by the time a few changes have followed them.
const KEEP_SEGMENTS: usize = 8;

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The pacer's exact rate; `rate` is validated (1 to 1e12 samples/s) before it gets here.
fn exact(rate: f64) -> Rate {
    Rate::per_second(rate).unwrap_or_else(|| Rate::period(Duration::from_secs(1)).expect("1 Hz"))
}

impl Schedule {
    /// Heap `start` is due at Unix time `sync_time + start * heap_samples / rate`.
    pub fn new(sync_time: f64, start: u64, rate: f64, heap_samples: usize) -> Self {
        let (now, now_unix) = (Instant::now(), unix_now());
        let due_unix = sync_time + start as f64 * heap_samples as f64 / rate;
        let offset = due_unix - now_unix;
        let due = if offset >= 0.0 {
            now + Duration::from_secs_f64(offset)
        } else {
            now.checked_sub(Duration::from_secs_f64(-offset))
                .unwrap_or(now)
        };
        Self {
            heap_samples: heap_samples as u64,
            segments: vec![Segment {
                start,
                pacer: Pacer::new(due, 0, exact(rate)),
                rate,
            }],
            anchor: (now, now_unix),
        }
    }

    fn segment(&self, k: u64) -> &Segment {
        self.segments
            .iter()
            .rev()
            .find(|s| s.start <= k)
            .unwrap_or(&self.segments[0])
    }

    pub fn due(&self, k: u64) -> Instant {
        let s = self.segment(k);
        s.pacer.due(k.saturating_sub(s.start) * self.heap_samples)
    }

    /// Sample rate in force at heap `k`.
    pub fn rate_at(&self, k: u64) -> f64 {
        self.segment(k).rate
    }

    /// The latest rate (in force now or from a pending change).
    pub fn latest_rate(&self) -> f64 {
        self.segments.last().map_or(0.0, |s| s.rate)
    }

    /// The heap due at `t` (the last one due at or before it; the first heap before it starts).
    pub fn index_at(&self, t: Instant) -> u64 {
        let s = self
            .segments
            .iter()
            .rev()
            .find(|s| s.pacer.due(0) <= t)
            .unwrap_or(&self.segments[0]);
        s.start + s.pacer.index_at(t) / self.heap_samples
    }

    /// From heap `k` on, heaps follow `rate`; heap k keeps its due time.
    pub fn change_rate(&mut self, k: u64, rate: f64) {
        let due = self.due(k);
        self.segments.retain(|s| s.start < k);
        self.segments.push(Segment {
            start: k,
            pacer: Pacer::new(due, 0, exact(rate)),
            rate,
        });
        if self.segments.len() > KEEP_SEGMENTS {
            self.segments.remove(0);
        }
    }

    /// Unix time at which heap `k` is due.
    pub fn unix_due(&self, k: u64) -> f64 {
        let due = self.due(k);
        let (at, unix) = self.anchor;
        if due >= at {
            unix + (due - at).as_secs_f64()
        } else {
            unix - (at - due).as_secs_f64()
        }
    }

    /// The sync time that the rate in force at heap `k` implies: heap k's due Unix time less its
    /// timestamp at that rate. Equal to the configured sync time until the rate changes.
    pub fn implied_sync_time(&self, k: u64) -> f64 {
        self.unix_due(k) - k as f64 * self.heap_samples as f64 / self.rate_at(k)
    }
}

/// A value replaced by the control plane and read by the send threads.
pub struct Versioned<T> {
    generation: AtomicU64,
    value: RwLock<Arc<T>>,
}

impl<T> Versioned<T> {
    pub fn new(value: T) -> Self {
        Self {
            generation: AtomicU64::new(0),
            value: RwLock::new(Arc::new(value)),
        }
    }

    pub fn load(&self) -> Arc<T> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value with `f(current)`, atomically with respect to other updates.
    pub fn update<R>(&self, f: impl FnOnce(&T) -> (T, R)) -> R {
        let mut guard = self.value.write().unwrap_or_else(|e| e.into_inner());
        let (new, r) = f(&guard);
        *guard = Arc::new(new);
        self.generation.fetch_add(1, Ordering::Release);
        r
    }

    pub fn cached(&self) -> Cached<T> {
        Cached {
            generation: self.generation.load(Ordering::Acquire),
            value: self.load(),
        }
    }
}

/// A send thread's copy of a [`Versioned`] value.
pub struct Cached<T> {
    generation: u64,
    value: Arc<T>,
}

impl<T> Cached<T> {
    /// Re-reads the value if it changed since the last call.
    pub fn refresh(&mut self, source: &Versioned<T>) -> Arc<T> {
        let g = source.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.generation = g;
            self.value = source.load();
        }
        self.value.clone()
    }

    pub fn get(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_follow_the_sync_time() {
        let sync = unix_now() - 10.0;
        let s = Schedule::new(sync, 1000, 4096e3, 4096); // 1000 heaps/s
        assert!((s.unix_due(1000) - (sync + 1.0)).abs() < 1e-3);
        assert!((s.unix_due(21000) - (sync + 21.0)).abs() < 1e-3);
        assert!((s.implied_sync_time(5000) - sync).abs() < 1e-3);
        let at = s.due(3000);
        assert_eq!(s.index_at(at), 3000);
    }

    #[test]
    fn rate_change_keeps_timestamps_continuous() {
        let mut s = Schedule::new(unix_now(), 0, 1000.0 * 8.0, 8); // 1000 heaps/s
        let before = s.due(500);
        s.change_rate(500, 2000.0 * 8.0);
        assert_eq!(s.due(500), before);
        assert_eq!(s.due(1500) - s.due(500), Duration::from_millis(500));
        assert_eq!(s.due(400) + Duration::from_millis(100), before);
        assert_eq!(s.index_at(s.due(400)), 400);
        assert_eq!(s.rate_at(499), 8000.0);
        assert_eq!(s.rate_at(500), 16000.0);
        assert_eq!(s.index_at(s.due(1700)), 1700);
        // A later change replaces one not yet reached.
        s.change_rate(300, 8000.0);
        assert_eq!(s.rate_at(600), 8000.0);
    }

    #[test]
    fn versioned_refreshes_on_change_only() {
        let v = Versioned::new(1);
        let mut c = v.cached();
        assert_eq!(*c.refresh(&v), 1);
        v.update(|x| (x + 1, ()));
        assert_eq!(*c.get(), 1);
        assert_eq!(*c.refresh(&v), 2);
    }
}

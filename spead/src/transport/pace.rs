//! An exact-rate pacer: item k is due at `epoch + k / rate`, computed from k every time (never by
//! adding increments), so the long-term rate holds exactly however late any one send is.

use std::time::{Duration, Instant};

/// Below this, sleeping overshoots; spin instead.
const SPIN: Duration = Duration::from_micros(50);

#[derive(Clone, Debug)]
pub struct Pacer {
    epoch: Instant,
    /// Item index at `epoch`.
    base: u64,
    rate: f64,
}

impl Pacer {
    /// Items per second `rate`; item `base` is due at `epoch`.
    pub fn new(epoch: Instant, base: u64, rate: f64) -> Self {
        Self {
            epoch,
            base,
            rate: rate.max(f64::MIN_POSITIVE),
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// When item `k` is due (items before the base are due at the epoch).
    pub fn due(&self, k: u64) -> Instant {
        let secs = k.saturating_sub(self.base) as f64 / self.rate;
        self.epoch + Duration::from_secs_f64(secs)
    }

    /// Blocks until item `k` is due: a coarse sleep, then a short spin.
    pub fn wait(&self, k: u64) {
        let due = self.due(k);
        loop {
            let now = Instant::now();
            if now >= due {
                return;
            }
            let left = due - now;
            if left > SPIN {
                std::thread::sleep(left - SPIN);
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Changes the rate from item `k` on: `k` keeps its due time, later items follow the new rate.
    pub fn set_rate(&mut self, k: u64, rate: f64) {
        self.epoch = self.due(k);
        self.base = k;
        self.rate = rate.max(f64::MIN_POSITIVE);
    }

    /// Item due at `t` (the last one due at or before it).
    pub fn index_at(&self, t: Instant) -> u64 {
        let secs = t.saturating_duration_since(self.epoch).as_secs_f64();
        self.base + (secs * self.rate) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_do_not_drift() {
        let t0 = Instant::now();
        let p = Pacer::new(t0, 0, 1e6);
        assert_eq!(p.due(1_000_000) - t0, Duration::from_secs(1));
        assert_eq!(p.due(3_000_000_000) - t0, Duration::from_secs(3000));
    }

    #[test]
    fn rate_change_keeps_continuity() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 0, 1000.0);
        p.set_rate(500, 2000.0);
        assert_eq!(p.due(500) - t0, Duration::from_millis(500));
        assert_eq!(p.due(1500) - t0, Duration::from_millis(1000));
        assert_eq!(p.index_at(t0 + Duration::from_millis(1000)), 1500);
    }

    #[test]
    fn holds_the_rate_over_a_second() {
        let rate = 20_000.0;
        let start = Instant::now();
        let p = Pacer::new(start, 0, rate);
        let n = 20_000u64;
        for k in 0..n {
            p.wait(k);
        }
        let achieved = (n - 1) as f64 / start.elapsed().as_secs_f64();
        assert!(
            (achieved / rate - 1.0).abs() < 1e-3,
            "achieved {achieved} for {rate}"
        );
    }
}

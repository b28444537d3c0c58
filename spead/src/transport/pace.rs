//! An exact-rate pacer. Item k is due at `t0 + (k - base) * nanos / items`, computed from k in
//! integer nanoseconds every time (never by adding increments) and rounded up (never early), so
//! the long-term rate holds exactly however late any one wait returns. "Items" are whatever the caller counts: datagrams,
//! bytes, or samples (pass the index of the first sample a packet carries); a burst is due when
//! its first item is due.

use std::time::{Duration, Instant};

/// How long before a due time [`sleep_until`] stops sleeping and spins. Short: a sender that
/// spins through the gaps between its sends holds a core that, on a host shared with many
/// network threads, another thread may need. The thread's timer slack is lowered instead, so
/// that sleeps end close to the due time.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(2);
/// Timer slack for threads that pace: a sleep overshoots by up to this (Linux's default is
/// 50 µs, which would make every paced send late by that much unless the thread spun).
pub const TIMER_SLACK: Duration = Duration::from_micros(1);

/// A rate as an exact ratio: `items` every `nanos` nanoseconds (both above zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    items: u64,
    nanos: u64,
}

impl Rate {
    /// `items` every `per`, exactly (e.g. 1_712_000_000 samples per second).
    pub fn ratio(items: u64, per: Duration) -> Option<Self> {
        let nanos = u64::try_from(per.as_nanos()).ok()?;
        (items > 0 && nanos > 0).then_some(Self { items, nanos })
    }

    /// One item every `period`.
    pub fn period(period: Duration) -> Option<Self> {
        Self::ratio(1, period)
    }

    /// `rate` items per second; fractional rates are held to 15 significant digits (or 1e-9
    /// items/s). `None` unless finite and positive.
    pub fn per_second(rate: f64) -> Option<Self> {
        if !(rate.is_finite() && rate > 0.0) {
            return None;
        }
        // Scale by powers of ten until the count is whole: items per 10^j seconds.
        let mut items = rate;
        let mut secs: u64 = 1;
        while items.fract() != 0.0 && items < 1e15 && secs < 1_000_000_000 {
            items *= 10.0;
            secs *= 10;
        }
        let items = items.round();
        if !(1.0..=u64::MAX as f64).contains(&items) {
            return None;
        }
        Some(Self {
            items: items as u64,
            nanos: secs.checked_mul(1_000_000_000)?,
        })
    }

    /// Items per second, for display.
    pub fn per_sec(&self) -> f64 {
        self.items as f64 * 1e9 / self.nanos as f64
    }

    /// The slowest rate, one item per 584 years: what invalid `f64` rates become.
    pub const SLOWEST: Rate = Rate {
        items: 1,
        nanos: u64::MAX,
    };

    /// Nanoseconds from item 0 to item `k`, rounded up.
    pub fn nanos_to(&self, k: u64) -> u128 {
        (u128::from(k) * u128::from(self.nanos)).div_ceil(u128::from(self.items))
    }

    /// Items due within `nanos` of item 0 (item 0 included), saturating.
    pub fn items_within(&self, nanos: u128) -> u64 {
        let k = nanos.saturating_mul(u128::from(self.items)) / u128::from(self.nanos);
        u64::try_from(k).unwrap_or(u64::MAX)
    }
}

/// Items per second; a rate that is not finite and positive becomes [`Rate::SLOWEST`] (nothing
/// more is due), so a bad rate stalls a sender rather than panicking it.
impl From<f64> for Rate {
    fn from(rate: f64) -> Self {
        Rate::per_second(rate).unwrap_or(Rate::SLOWEST)
    }
}

/// Due times for a sequence of items at a [`Rate`] from an absolute start.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    t0: Instant,
    /// Item due at `t0`.
    base: u64,
    rate: Rate,
    spin: Duration,
}

impl Pacer {
    /// Item `base` is due at `t0`; `rate` in items per second (`f64`) or an exact [`Rate`].
    pub fn new(t0: Instant, base: u64, rate: impl Into<Rate>) -> Self {
        Self {
            t0,
            base,
            rate: rate.into(),
            spin: DEFAULT_SPIN,
        }
    }

    /// How long before a due time to stop sleeping and spin.
    pub fn with_spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// The rate items are paced at now.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// When item `k` is due (items before `base` or the last rate change: at that point).
    pub fn due(&self, k: u64) -> Instant {
        let ns = self.rate.nanos_to(k.saturating_sub(self.base));
        // Beyond ~584 years: treat as never, without overflowing.
        let d = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        self.t0
            .checked_add(d)
            .or_else(|| self.t0.checked_add(Duration::from_secs(1 << 32)))
            .unwrap_or(self.t0)
    }

    /// Blocks until item `k` is due. Returns how late it returned (zero if on time: the
    /// caller's measure of falling behind).
    pub fn wait(&self, k: u64) -> Duration {
        sleep_until(self.due(k), self.spin)
    }

    /// Blocks until `early` before item `k` is due: a sender that lets items go up to a burst's
    /// length early wakes once per burst instead of once per send. Returns how late it returned
    /// (against the early time).
    pub fn wait_early(&self, k: u64, early: Duration) -> Duration {
        let due = self.due(k);
        sleep_until(due.checked_sub(early).unwrap_or(due), self.spin)
    }

    /// Changes the rate from item `k` on: `k` keeps its due time, later items follow the new
    /// rate, so the schedule stays continuous.
    pub fn set_rate(&mut self, k: u64, rate: impl Into<Rate>) {
        self.t0 = self.due(k);
        self.base = k.max(self.base);
        self.rate = rate.into();
    }

    /// The last item due at or before `t`.
    pub fn index_at(&self, t: Instant) -> u64 {
        let ns = t.saturating_duration_since(self.t0).as_nanos();
        self.base.saturating_add(self.rate.items_within(ns))
    }
}

/// Lowers the calling thread's timer slack to [`TIMER_SLACK`], once per thread (Linux only;
/// elsewhere, and if the kernel refuses, sleeps are just coarser).
pub fn fine_timer_slack() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if DONE.with(|d| d.replace(true)) {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a value and touches only this thread's settings.
    unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            TIMER_SLACK.as_nanos() as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// Sleeps (with a fine timer slack, see [`fine_timer_slack`]) until `spin` before `due`, then
/// spins. Returns how late it returned.
pub fn sleep_until(due: Instant, spin: Duration) -> Duration {
    fine_timer_slack();
    loop {
        let now = Instant::now();
        if now >= due {
            return now - due;
        }
        let left = due - now;
        if left > spin {
            std::thread::sleep(left - spin);
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_exact_ratios() {
        let r = Rate::per_second(1e6).unwrap();
        assert_eq!(r.nanos_to(1_000_000), 1_000_000_000);
        // 1712 MHz sampling, 4096 samples per heap: 417968.75 heaps/s.
        let heaps = Rate::per_second(1712e6 / 4096.0).unwrap();
        assert_eq!(heaps.nanos_to(41_796_875 * 36), 3600 * 1_000_000_000);
        let r = Rate::ratio(1_712_000_000, Duration::from_secs(1)).unwrap();
        assert_eq!(r.nanos_to(1_712_000_000 * 86_400), 86_400 * 1_000_000_000);
        assert_eq!(r.nanos_to(3), 2); // 3 / 1.712, rounded up
        assert_eq!(r.items_within(1_000_000_000), 1_712_000_000);
        let r = Rate::per_second(1.0 / 3.0).unwrap();
        assert!((r.per_sec() * 3.0 - 1.0).abs() < 1e-8);
        assert_eq!(
            Rate::period(Duration::from_micros(5)).unwrap().per_sec(),
            200e3
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-12, 1e30] {
            assert_eq!(Rate::per_second(bad), None, "{bad}");
        }
        assert_eq!(Rate::ratio(0, Duration::from_secs(1)), None);
        assert_eq!(Rate::period(Duration::ZERO), None);
    }

    #[test]
    fn due_times_do_not_drift() {
        let t0 = Instant::now();
        let p = Pacer::new(t0, 0, Rate::per_second(3e6).unwrap());
        assert_eq!(p.due(3_000_000) - t0, Duration::from_secs(1));
        assert_eq!(p.due(9_000_000_000) - t0, Duration::from_secs(3000));
        assert_eq!(p.index_at(t0 + Duration::from_secs(2)), 6_000_000);
        // Due times round up, so the item due at an item's due time is that item.
        let p = Pacer::new(t0, 7, 1712e6 / 4096.0);
        assert_eq!(p.due(7), t0);
        for k in 7..5000 {
            assert_eq!(p.index_at(p.due(k)), k);
            assert!(p.due(k + 1) > p.due(k));
        }
        assert_eq!(p.index_at(t0), 7);
        // Bad rates stall rather than panic.
        for bad in [0.0, -5.0, f64::NAN] {
            let p = Pacer::new(t0, 0, bad);
            assert_eq!(p.rate(), Rate::SLOWEST);
            assert!(p.due(1) - t0 > Duration::from_secs(1 << 32));
        }
        // Absurd indices neither panic nor wrap.
        let slow = Pacer::new(t0, 0, Rate::period(Duration::from_secs(1 << 30)).unwrap());
        assert!(slow.due(u64::MAX) >= t0);
    }

    #[test]
    fn rate_change_keeps_continuity() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 0, Rate::per_second(1000.0).unwrap());
        p.set_rate(500, Rate::per_second(2000.0).unwrap());
        assert_eq!(p.due(500) - t0, Duration::from_millis(500));
        assert_eq!(p.due(1500) - t0, Duration::from_millis(1000));
        assert_eq!(p.due(100) - t0, Duration::from_millis(500));
        assert_eq!(p.index_at(t0 + Duration::from_millis(1000)), 1500);
    }

    /// How late the end of a run may be on a loaded host: one wake-up delayed by the scheduler.
    /// The pacer's exactness is the integer schedule above; this bounds only the last wait.
    const HICCUP: Duration = Duration::from_millis(50);

    /// Runs `n` bursts through a pacer starting now (burst j covers items `first(j)..first(j + 1)`),
    /// with the thread stalled for `stall` before burst `n / 3`. Checks that no wait returned
    /// early and returns how long the run took past its due end.
    fn late_by(
        pacer: impl FnOnce(Instant) -> Pacer,
        n: u64,
        first: impl Fn(u64) -> u64,
        stall: Duration,
    ) -> Result<Duration, String> {
        let start = Instant::now();
        let p = pacer(start);
        for j in 0..=n {
            if j == n / 3 {
                std::thread::sleep(stall);
            }
            p.wait(first(j));
            let early = p.due(first(j)).saturating_duration_since(Instant::now());
            if !early.is_zero() {
                return Err(format!("burst {j} returned {early:?} early"));
            }
        }
        // The run ends when the burst after the last is due.
        Ok(start.elapsed().saturating_sub(p.due(first(n)) - start))
    }

    fn assert_on_time(what: &str, late: Result<Duration, String>) {
        let late = late.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(late < HICCUP, "{what}: ended {late:?} past its due time");
    }

    /// Each schedule ends on time, never early, over about a second: datagrams per second, bytes
    /// per second in GSO-sized bursts, and a samples schedule. A 100 ms stall a third of the way
    /// in is caught up (the items it delayed go at once), so the run still ends on time: an
    /// error that accumulated (a due time computed by adding increments, or from the late wake-up)
    /// would end it that much late.
    #[test]
    fn holds_the_rate_over_a_second() {
        let stall = Duration::from_millis(100);
        let cases: Vec<(&str, std::thread::JoinHandle<Result<Duration, String>>)> = vec![
            ("datagrams/s", {
                std::thread::spawn(move || {
                    let rate = Rate::per_second(2000.0).unwrap();
                    late_by(|t| Pacer::new(t, 0, rate), 2000, |j| j, stall)
                })
            }),
            ("bytes/s in bursts of 12 x 5192", {
                std::thread::spawn(move || {
                    let rate = Rate::per_second(50e6).unwrap();
                    late_by(|t| Pacer::new(t, 0, rate), 802, |j| j * 12 * 5192, stall)
                })
            }),
            ("samples/s, 256 heaps of 4096 per batch", {
                std::thread::spawn(move || {
                    let rate = Rate::ratio(1_712_000_000, Duration::from_secs(1)).unwrap();
                    late_by(|t| Pacer::new(t, 0, rate), 1632, |j| j * 256 * 4096, stall)
                })
            }),
        ];
        for (what, h) in cases {
            assert_on_time(what, h.join().unwrap());
        }
    }

    /// 300 items at 1 kHz, then 1200 at 4 kHz: due 0.6 s after the start, and the run ends then
    /// (not 0.375 s or 1.5 s, as it would if the change lost the schedule's continuity).
    #[test]
    fn holds_the_rate_across_a_change() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 0, Rate::per_second(1000.0).unwrap());
        for k in 0..300 {
            p.wait(k);
        }
        p.set_rate(300, Rate::per_second(4000.0).unwrap());
        assert_eq!(p.due(1500) - start, Duration::from_millis(600));
        for k in 300..=1500 {
            p.wait(k);
            assert!(Instant::now() >= p.due(k), "item {k} went early");
        }
        let late = start.elapsed().saturating_sub(Duration::from_millis(600));
        assert!(late < HICCUP, "ended {late:?} past its due time");
    }
}

//! Binary search for the highest sustained rate, over any trial function (pure: the real trial
//! is in `trial.rs`, the tests use simulated ones).
//!
//! The rule: a rate is *sustained* when every trial run at it passed. One failure marks a rate as
//! failing for good. The search
//! 1. tries `low` and `high`. Where `low` fails (or a repeat refutes it, below), the range began
//!    above the answer: it steps down by a fifth of `low` at a time, at most [`LOW_STEPS`] times,
//!    and the first rate that passes becomes the lower bound (all failing: nothing is sustained,
//!    and the search ends);
//! 2. bisects between the highest pass and the lowest failure, on a grid of `resolution` above
//!    `low`, until they are at most `resolution` apart;
//! 3. repeats the boundary pass `repeats` more times. Near the critical rate a pass is a random
//!    event (paper, 5.4); if a repeat fails, that rate becomes the failing bound and the search
//!    resumes from the highest pass below it.
//!
//! Optionally ([`hold`]) the found rate is then held for a long window: a 20 s pass says little
//! about the next hour. If the hold loses anything, the rate steps down by a fixed fraction of
//! the found rate and holds again, a bounded number of times; the first rate that holds is the
//! *held* (sustained) rate.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SearchConfig {
    /// Lowest rate tried (sample/s).
    pub low: f64,
    /// Highest rate tried (sample/s).
    pub high: f64,
    /// Stop when the pass and fail bounds are this close (sample/s).
    pub resolution: f64,
    /// Extra trials of the final pass before it is accepted.
    pub repeats: u32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("--low ({low}) must be positive and below --high ({high})")]
    Range { low: f64, high: f64 },
    #[error("--resolution ({0}) must be positive")]
    Resolution(f64),
}

impl SearchConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.low.is_finite()
            && self.high.is_finite()
            && self.low > 0.0
            && self.low < self.high)
        {
            return Err(ConfigError::Range {
                low: self.low,
                high: self.high,
            });
        }
        if !(self.resolution.is_finite() && self.resolution > 0.0) {
            return Err(ConfigError::Resolution(self.resolution));
        }
        Ok(())
    }

    /// Trials a search takes without refutations: 2 bounds, the bisection, the repeats.
    pub fn expected_trials(&self) -> usize {
        let steps = ((self.high - self.low) / self.resolution).max(1.0);
        2 + steps.log2().ceil() as usize + self.repeats as usize
    }
}

/// Why a trial was run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Bound,
    Bisect,
    Repeat,
    /// A long window at the found rate or a step below it ([`hold`]).
    Hold,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub rate: f64,
    pub phase: Phase,
    pub pass: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResult {
    /// Highest sustained rate found (None: `low` and its steps down all failed).
    pub best: Option<f64>,
    /// Lowest rate that failed (None: `high` was sustained).
    pub lowest_fail: Option<f64>,
    pub probes: Vec<Probe>,
}

/// How many times a failing `low` steps down (each by a fifth of it) before the search gives up.
pub const LOW_STEPS: u32 = 3;

/// Runs the search. `trial(rate, phase)` runs one trial and says whether it passed; its error
/// aborts the search (an interrupted run, a service that died).
pub fn search<E>(
    cfg: &SearchConfig,
    mut trial: impl FnMut(f64, Phase) -> Result<bool, E>,
) -> Result<SearchResult, E> {
    let mut probes = Vec::new();
    let mut run = |rate: f64, phase: Phase, probes: &mut Vec<Probe>| -> Result<bool, E> {
        let pass = trial(rate, phase)?;
        probes.push(Probe { rate, phase, pass });
        Ok(pass)
    };
    // Rates that passed every trial so far, ascending.
    let mut passes: Vec<f64> = Vec::new();
    let mut hi = None;
    // The next lower bound to try: `low` (0), then its steps down.
    let mut step = 0;
    loop {
        let Some(&lo) = passes.last() else {
            // No lower bound yet, or it was refuted by a repeat: the next step down.
            if step > LOW_STEPS {
                return Ok(SearchResult {
                    best: None,
                    lowest_fail: hi,
                    probes,
                });
            }
            let rate = cfg.low * f64::from(5 - step) / 5.0;
            step += 1;
            if !run(rate, Phase::Bound, &mut probes)? {
                hi = Some(rate);
                continue;
            }
            passes.push(rate);
            // The range's first pass: try its top too.
            if hi.is_none() {
                if run(cfg.high, Phase::Bound, &mut probes)? {
                    passes.push(cfg.high);
                } else {
                    hi = Some(cfg.high);
                }
            }
            continue;
        };
        if let Some(h) = hi {
            if h - lo > cfg.resolution * (1.0 + 1e-9) {
                let mid = midpoint(cfg, lo, h);
                if run(mid, Phase::Bisect, &mut probes)? {
                    passes.push(mid);
                } else {
                    hi = Some(mid);
                }
                continue;
            }
        }
        // Converged: confirm the boundary pass.
        let mut confirmed = true;
        for _ in 0..cfg.repeats {
            if !run(lo, Phase::Repeat, &mut probes)? {
                confirmed = false;
                break;
            }
        }
        if confirmed {
            return Ok(SearchResult {
                best: Some(lo),
                lowest_fail: hi,
                probes,
            });
        }
        passes.pop();
        hi = Some(lo);
    }
}

/// How the found rate is held: each hold a trial of `seconds`, stepping down by `step` (a
/// fraction of the found rate) after each failure, at most `max_steps` times.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HoldConfig {
    pub seconds: f64,
    pub step: f64,
    pub max_steps: u32,
}

/// Why a hold configuration cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HoldError {
    #[error("--hold ({0} s) must be a number of seconds above 0")]
    Seconds(f64),
    #[error("--hold-step ({0}) must be a fraction above 0 and below 1")]
    Step(f64),
    #[error("--hold-step {step} x --hold-steps {steps} would step to or below zero; give fewer or smaller steps")]
    Reach { step: f64, steps: u32 },
}

impl HoldConfig {
    pub fn validate(&self) -> Result<(), HoldError> {
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            return Err(HoldError::Seconds(self.seconds));
        }
        if !(self.step.is_finite() && self.step > 0.0 && self.step < 1.0) {
            return Err(HoldError::Step(self.step));
        }
        if self.step * self.max_steps as f64 >= 1.0 {
            return Err(HoldError::Reach {
                step: self.step,
                steps: self.max_steps,
            });
        }
        Ok(())
    }

    /// The rates held in turn, from `found` down: found x (1 - i step), i = 0 ..= max_steps.
    pub fn rates(&self, found: f64) -> impl Iterator<Item = f64> + '_ {
        (0..=self.max_steps).map(move |i| found * (1.0 - i as f64 * self.step))
    }
}

/// What holding gave.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HoldResult {
    /// The first rate that held (None: every step lost something).
    pub held: Option<f64>,
    pub probes: Vec<Probe>,
}

/// Holds `found` with `trial(rate, Phase::Hold)`, stepping down after each failure (see
/// [`HoldConfig`]); its error aborts, as in [`search`].
pub fn hold<E>(
    cfg: &HoldConfig,
    found: f64,
    mut trial: impl FnMut(f64, Phase) -> Result<bool, E>,
) -> Result<HoldResult, E> {
    let mut probes = Vec::new();
    for rate in cfg.rates(found) {
        let pass = trial(rate, Phase::Hold)?;
        probes.push(Probe {
            rate,
            phase: Phase::Hold,
            pass,
        });
        if pass {
            return Ok(HoldResult {
                held: Some(rate),
                probes,
            });
        }
    }
    Ok(HoldResult { held: None, probes })
}

/// A rate between `lo` and `hi` (exclusive) near their middle, on the grid `low + k resolution`
/// so that results read as "to the nearest resolution" (as the paper's 10 Msample/s).
fn midpoint(cfg: &SearchConfig, lo: f64, hi: f64) -> f64 {
    let on_grid = |r: f64| cfg.low + ((r - cfg.low) / cfg.resolution).round() * cfg.resolution;
    let mid = on_grid((lo + hi) / 2.0);
    if mid > lo && mid < hi {
        mid
    } else {
        // The grid has no point strictly inside (bounds off the grid, e.g. `high`): halve exactly.
        (lo + hi) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn cfg(low: f64, high: f64, resolution: f64, repeats: u32) -> SearchConfig {
        SearchConfig {
            low,
            high,
            resolution,
            repeats,
        }
    }

    /// A deterministic generator (the crate has no rand dependency; this is enough for tests).
    struct XorShift(u64);
    impl XorShift {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn converges_to_a_sharp_threshold() {
        for threshold in [1.234e9, 6.27e9, 9.99e9, 1.005e9] {
            let c = cfg(1e9, 10e9, 10e6, 2);
            let r = search(&c, |rate, _| Ok::<_, Infallible>(rate <= threshold)).unwrap();
            let best = r.best.unwrap();
            assert!(best <= threshold, "{best} above {threshold}");
            assert!(
                threshold - best < c.resolution,
                "{best} too far below {threshold}"
            );
            let fail = r.lowest_fail.unwrap();
            assert!(fail > threshold && fail - best <= c.resolution * (1.0 + 1e-9));
            // Bounded work: bounds + bisection + repeats.
            assert!(
                r.probes.len() <= c.expected_trials() + 1,
                "{}",
                r.probes.len()
            );
            assert_eq!(
                r.probes.iter().filter(|p| p.phase == Phase::Repeat).count(),
                2
            );
        }
    }

    #[test]
    fn results_lie_on_the_grid() {
        let c = cfg(100e6, 1000e6, 10e6, 0);
        let r = search(&c, |rate, _| Ok::<_, Infallible>(rate <= 537e6)).unwrap();
        assert_eq!(r.best, Some(530e6));
        assert_eq!(r.lowest_fail, Some(540e6));
    }

    #[test]
    fn below_and_above_range() {
        let c = cfg(1e9, 2e9, 10e6, 1);
        // Nothing passes: `low` and its steps down are tried, then the search gives up.
        let r = search(&c, |_, _| Ok::<_, Infallible>(false)).unwrap();
        assert_eq!(
            (r.best, r.lowest_fail, r.probes.len()),
            (None, Some(0.4e9), 1 + LOW_STEPS as usize)
        );
        let r = search(&c, |_, _| Ok::<_, Infallible>(true)).unwrap();
        assert_eq!((r.best, r.lowest_fail), (Some(2e9), None));
        assert_eq!(r.probes.len(), 3);
    }

    #[test]
    fn a_failing_low_steps_down_and_searches_below_it() {
        // A range that starts above the answer: 4.0 fails, 3.2 passes, and the answer (3.6) is
        // found between them, on the grid of `low`, without trying `high`.
        let c = cfg(4e9, 5e9, 250e6, 0);
        let r = search(&c, |rate, _| Ok::<_, Infallible>(rate <= 3.6e9)).unwrap();
        assert_eq!((r.best, r.lowest_fail), (Some(3.5e9), Some(3.75e9)));
        let rates: Vec<f64> = r.probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates[..2], [4e9, 3.2e9]);
        assert!(rates.iter().all(|&r| r < 4e9 + 1.0), "{rates:?}");
    }

    #[test]
    fn a_refuted_low_steps_down_too() {
        // As on a host whose answer drifted down during the search: 4.5 and 4.75 pass once and
        // then fail their repeats; the search goes below --low rather than answering none.
        let c = cfg(4.5e9, 6.5e9, 250e6, 1);
        let mut tried = std::collections::HashMap::new();
        let r = search(&c, |rate, _| {
            let n = tried.entry(rate.to_bits()).or_insert(0);
            *n += 1;
            Ok::<_, Infallible>(rate <= 4.0e9 || (rate <= 4.75e9 && *n == 1))
        })
        .unwrap();
        assert_eq!(r.best, Some(4.0e9), "{:?}", r.probes);
        assert_eq!(r.lowest_fail, Some(4.25e9));
        assert!(r
            .probes
            .iter()
            .any(|p| p.rate == 3.6e9 && p.phase == Phase::Bound));
    }

    #[test]
    fn copes_with_a_noisy_threshold() {
        // Pass probability falls linearly from 1 at t - d to 0 at t + d.
        let (t, d) = (6.3e9, 0.1e9);
        let c = cfg(1e9, 10e9, 10e6, 3);
        let mut worst_low = f64::MAX;
        for seed in 1..=200u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let r = search(&c, |rate, _| {
                let p = ((t + d - rate) / (2.0 * d)).clamp(0.0, 1.0);
                Ok::<_, Infallible>(rng.uniform() < p)
            })
            .unwrap();
            let best = r.best.expect("rates below t - d always pass");
            // Never above where passing is impossible, never below where it is certain.
            assert!(best <= t + d, "seed {seed}: {best}");
            assert!(best >= t - d - c.resolution, "seed {seed}: {best}");
            worst_low = worst_low.min(best);
            // The accepted rate passed all of its trials.
            let at_best: Vec<_> = r.probes.iter().filter(|p| p.rate == best).collect();
            assert!(at_best.iter().all(|p| p.pass));
            assert!(at_best.len() > c.repeats as usize);
        }
        assert!(worst_low >= t - d - c.resolution);
    }

    #[test]
    fn a_refuted_boundary_falls_back() {
        // 500 passes once then fails on repeat; 490 always passes; above 500 fails.
        let mut seen_500 = 0;
        let c = cfg(100e6, 1000e6, 10e6, 2);
        let r = search(&c, |rate, _| {
            Ok::<_, Infallible>(if (rate - 500e6).abs() < 1.0 {
                seen_500 += 1;
                seen_500 == 1
            } else {
                rate < 500e6
            })
        })
        .unwrap();
        assert_eq!(r.best, Some(490e6));
        assert_eq!(r.lowest_fail, Some(500e6));
    }

    #[test]
    fn errors_abort() {
        let c = cfg(1.0, 100.0, 1.0, 0);
        let r = search(
            &c,
            |rate, _| if rate > 50.0 { Err("stop") } else { Ok(true) },
        );
        assert_eq!(r, Err("stop"));
    }

    fn hold_cfg(step: f64, max_steps: u32) -> HoldConfig {
        HoldConfig {
            seconds: 600.0,
            step,
            max_steps,
        }
    }

    #[test]
    fn a_rate_that_holds_is_kept() {
        let r = hold(&hold_cfg(0.05, 4), 1e9, |_, _| Ok::<_, Infallible>(true)).unwrap();
        assert_eq!(r.held, Some(1e9));
        assert_eq!(r.probes.len(), 1);
        assert_eq!(r.probes[0].phase, Phase::Hold);
    }

    #[test]
    fn a_hold_that_loses_steps_down_until_one_holds() {
        // Holds for 20 s up to 1 GS/s, but for an hour only up to 0.88.
        let mut asked = Vec::new();
        let r = hold(&hold_cfg(0.05, 4), 1e9, |rate, phase| {
            asked.push((rate, phase));
            Ok::<_, Infallible>(rate <= 0.88e9)
        })
        .unwrap();
        let rates: Vec<f64> = asked.iter().map(|a| (a.0 / 1e6).round()).collect();
        assert_eq!(rates, [1000.0, 950.0, 900.0, 850.0]);
        assert_eq!(r.held, Some(asked[3].0));
        assert_eq!(
            r.probes.iter().map(|p| p.pass).collect::<Vec<_>>(),
            [false, false, false, true]
        );
    }

    #[test]
    fn the_steps_are_bounded() {
        let mut n = 0;
        let r = hold(&hold_cfg(0.1, 3), 1e9, |_, _| {
            n += 1;
            Ok::<_, Infallible>(false)
        })
        .unwrap();
        assert_eq!(
            (r.held, n),
            (None, 4),
            "the found rate and 3 steps below it"
        );
        let lowest = r.probes.last().unwrap().rate;
        assert!((lowest - 0.7e9).abs() < 1.0, "{lowest}");
        // An error stops the hold.
        let e = hold(&hold_cfg(0.1, 3), 1e9, |rate, _| {
            if rate < 0.95e9 {
                Err("stop")
            } else {
                Ok(false)
            }
        });
        assert_eq!(e, Err("stop"));
    }

    #[test]
    fn hold_config_is_checked() {
        assert!(hold_cfg(0.05, 5).validate().is_ok());
        assert_eq!(hold_cfg(0.0, 5).validate(), Err(HoldError::Step(0.0)));
        assert!(hold_cfg(0.25, 4).validate().is_err(), "reaches zero");
        let mut c = hold_cfg(0.05, 5);
        c.seconds = -1.0;
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "--hold (-1 s) must be a number of seconds above 0"
        );
    }

    #[test]
    fn config_is_checked() {
        assert!(cfg(2.0, 1.0, 1.0, 0).validate().is_err());
        assert!(cfg(0.0, 1.0, 1.0, 0).validate().is_err());
        assert!(cfg(1.0, 2.0, 0.0, 0).validate().is_err());
        assert!(cfg(1.0, f64::NAN, 1.0, 0).validate().is_err());
        assert!(cfg(1.0, 2.0, 0.1, 0).validate().is_ok());
    }
}

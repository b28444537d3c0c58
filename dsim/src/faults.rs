//! Fault injection per polarisation: drop, duplicate, reorder, corrupt or truncate chosen heaps.
//!
//! A heap is chosen by its index k = timestamp / heap_samples: listed exactly, in a half-open
//! range, or at random with a probability. The random choice is a hash of (seed, polarisation,
//! fault, k), not a generator's state, so it does not depend on threads or timing and a run with
//! the same seed injects the same faults.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub use fgpu_api::dsim::{FaultCounts, FaultsRequest, PolFaults, Reorder, Selector};

use crate::config::{ensure, BadRequest};
use crate::signal::mix;

/// Most heaps listed per fault (bounds memory and request size).
pub const MAX_LISTED: usize = 1_000_000;
/// Largest reorder window, in heaps.
pub const MAX_WINDOW: usize = 1024;

/// A PUT /faults body that does not read as a faults request (serde's reason in the sentence).
#[derive(Debug, thiserror::Error)]
#[error("the body is not a valid faults request: {0}.")]
pub struct FaultsBodyError(serde_json::Error);

/// Reads a PUT /faults body (it is checked by [`FaultRules::validate`]); the error is one
/// sentence.
pub fn parse_request(body: &[u8]) -> Result<FaultsRequest, FaultsBodyError> {
    serde_json::from_slice(body).map_err(FaultsBodyError)
}

/// dsim's rules for the fault requests it shares through [`fgpu_api::dsim`].
pub trait FaultRules {
    /// Checks every polarisation's faults; the error names the field at fault.
    fn validate(&self) -> Result<(), BadRequest>;
}

impl FaultRules for FaultsRequest {
    fn validate(&self) -> Result<(), BadRequest> {
        for (name, f) in [("pol0", &self.pol0), ("pol1", &self.pol1)] {
            if let Some(f) = f {
                validate_pol(f, name)?;
            }
        }
        Ok(())
    }
}

fn validate_selector(
    at: &str,
    probability: f64,
    heaps: &[u64],
    ranges: &[[u64; 2]],
) -> Result<(), BadRequest> {
    ensure((0.0..=1.0).contains(&probability), || {
        format!("{at}.probability {probability} is not between 0 and 1.")
    })?;
    ensure(heaps.len() + ranges.len() <= MAX_LISTED, || {
        format!("{at} lists more than {MAX_LISTED} heaps and ranges.")
    })?;
    for (i, r) in ranges.iter().enumerate() {
        ensure(r[0] < r[1], || {
            format!(
                "{at}.ranges[{i}] is [{}, {}]: the end (exclusive) must be after the start.",
                r[0], r[1]
            )
        })?;
    }
    Ok(())
}

/// Checks one polarisation's faults; `pol` names it in the error.
fn validate_pol(f: &PolFaults, pol: &str) -> Result<(), BadRequest> {
    for (kind, s) in [
        ("drop", &f.drop),
        ("duplicate", &f.duplicate),
        ("corrupt", &f.corrupt),
        ("truncate", &f.truncate),
    ] {
        if let Some(s) = s {
            validate_selector(&format!("{pol}.{kind}"), s.probability, &s.heaps, &s.ranges)?;
        }
    }
    if let Some(r) = &f.reorder {
        let at = format!("{pol}.reorder");
        validate_selector(&at, r.probability, &r.heaps, &r.ranges)?;
        ensure((1..=MAX_WINDOW).contains(&r.window), || {
            format!("{at}.window {} is not 1 to {MAX_WINDOW} heaps.", r.window)
        })?;
    }
    Ok(())
}

/// A selector ready for the send path.
#[derive(Clone, Debug, Default)]
struct Compiled {
    /// Chosen when hash < threshold; probability 1 chooses everything via `all`.
    threshold: u64,
    all: bool,
    heaps: Vec<u64>,
    ranges: Vec<(u64, u64)>,
    salt: u64,
}

impl Compiled {
    fn new(probability: f64, heaps: &[u64], ranges: &[[u64; 2]], salt: u64) -> Self {
        let mut heaps = heaps.to_vec();
        heaps.sort_unstable();
        heaps.dedup();
        Self {
            threshold: (probability * 2f64.powi(64)) as u64,
            all: probability >= 1.0,
            heaps,
            ranges: ranges.iter().map(|r| (r[0], r[1])).collect(),
            salt,
        }
    }

    fn hits(&self, k: u64) -> bool {
        self.all
            || (self.threshold > 0 && mix(self.salt ^ k) < self.threshold)
            || self.heaps.binary_search(&k).is_ok()
            || self.ranges.iter().any(|&(a, b)| (a..b).contains(&k))
    }
}

/// What happens to one heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    pub drop: bool,
    pub duplicate: bool,
    pub corrupt: bool,
    /// Send only the first half of the datagram.
    pub truncate: bool,
    /// Hold back for this many later heaps of the same group (0: in order).
    pub delay: usize,
}

/// The faults of one polarisation, compiled.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    spec: PolFaults,
    drop: Option<Compiled>,
    duplicate: Option<Compiled>,
    corrupt: Option<Compiled>,
    truncate: Option<Compiled>,
    reorder: Option<(Compiled, usize)>,
}

impl FaultPlan {
    /// `spec` must be valid; `seed` and `pol` make the random choices reproducible.
    pub fn new(spec: &PolFaults, seed: u64, pol: usize) -> Self {
        let salt = |kind: u64| mix(mix(seed ^ 0xfa17) ^ (pol as u64) << 8 ^ kind);
        let c = |s: &Option<Selector>, kind| {
            s.as_ref()
                .map(|s| Compiled::new(s.probability, &s.heaps, &s.ranges, salt(kind)))
        };
        Self {
            spec: spec.clone(),
            drop: c(&spec.drop, 1),
            duplicate: c(&spec.duplicate, 2),
            corrupt: c(&spec.corrupt, 3),
            truncate: c(&spec.truncate, 5),
            reorder: spec.reorder.as_ref().map(|r| {
                (
                    Compiled::new(r.probability, &r.heaps, &r.ranges, salt(4)),
                    r.window,
                )
            }),
        }
    }

    pub fn spec(&self) -> &PolFaults {
        &self.spec
    }

    pub fn is_empty(&self) -> bool {
        self.drop.is_none()
            && self.duplicate.is_none()
            && self.corrupt.is_none()
            && self.truncate.is_none()
            && self.reorder.is_none()
    }

    /// The fate of heap `k`. A dropped heap has no other fault.
    pub fn action(&self, k: u64) -> Action {
        let hit = |c: &Option<Compiled>| c.as_ref().is_some_and(|c| c.hits(k));
        if hit(&self.drop) {
            return Action {
                drop: true,
                ..Default::default()
            };
        }
        Action {
            drop: false,
            duplicate: hit(&self.duplicate),
            corrupt: hit(&self.corrupt),
            truncate: hit(&self.truncate),
            delay: match &self.reorder {
                Some((c, w)) if c.hits(k) => *w,
                _ => 0,
            },
        }
    }
}

/// Faults injected so far on one polarisation ([`FaultCounts`] is a copy of them).
#[derive(Debug, Default)]
pub struct FaultCounters {
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    pub reordered: AtomicU64,
    pub corrupted: AtomicU64,
    pub truncated: AtomicU64,
}

impl FaultCounters {
    pub fn add(&self, c: &FaultCounts) {
        for (a, v) in [
            (&self.dropped, c.dropped),
            (&self.duplicated, c.duplicated),
            (&self.reordered, c.reordered),
            (&self.corrupted, c.corrupted),
            (&self.truncated, c.truncated),
        ] {
            if v > 0 {
                a.fetch_add(v, Relaxed);
            }
        }
    }

    pub fn snapshot(&self) -> FaultCounts {
        FaultCounts {
            dropped: self.dropped.load(Relaxed),
            duplicated: self.duplicated.load(Relaxed),
            reordered: self.reordered.load(Relaxed),
            corrupted: self.corrupted.load(Relaxed),
            truncated: self.truncated.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> FaultsRequest {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn lists_and_ranges_are_exact() {
        let r = parse(r#"{"pol0": {"drop": {"heaps": [5, 9], "ranges": [[20, 23]]}}}"#);
        r.validate().unwrap();
        let plan = FaultPlan::new(r.pol0.as_ref().unwrap(), 1, 0);
        let dropped: Vec<u64> = (0..40).filter(|&k| plan.action(k).drop).collect();
        assert_eq!(dropped, vec![5, 9, 20, 21, 22]);
    }

    #[test]
    fn probability_is_reproducible_and_near_p() {
        let spec = PolFaults {
            drop: Some(Selector {
                probability: 0.1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = FaultPlan::new(&spec, 7, 0);
        let b = FaultPlan::new(&spec, 7, 0);
        let c = FaultPlan::new(&spec, 7, 1);
        let n = 100_000u64;
        let hits = (0..n).filter(|&k| a.action(k).drop).count() as f64;
        assert!((hits / n as f64 - 0.1).abs() < 5.0 * (0.09 / n as f64).sqrt());
        assert!((0..1000).all(|k| a.action(k) == b.action(k)));
        assert!((0..1000).any(|k| a.action(k) != c.action(k)), "pols differ");
    }

    #[test]
    fn dropped_heaps_have_no_other_fault() {
        let r = parse(
            r#"{"pol1": {"drop": {"heaps": [3]}, "duplicate": {"probability": 1},
                "reorder": {"heaps": [3, 4], "window": 2}, "corrupt": {"ranges": [[0, 10]]},
                "truncate": {"heaps": [4]}}}"#,
        );
        r.validate().unwrap();
        let plan = FaultPlan::new(r.pol1.as_ref().unwrap(), 1, 1);
        assert_eq!(
            plan.action(3),
            Action {
                drop: true,
                ..Default::default()
            }
        );
        assert_eq!(
            plan.action(4),
            Action {
                drop: false,
                duplicate: true,
                corrupt: true,
                truncate: true,
                delay: 2
            }
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (json, expect) in [
            (
                r#"{"pol0": {"drop": {"probability": 1.5}}}"#,
                "pol0.drop.probability 1.5",
            ),
            (
                r#"{"pol1": {"corrupt": {"ranges": [[5, 5]]}}}"#,
                "pol1.corrupt.ranges[0]",
            ),
            (
                r#"{"pol0": {"truncate": {"probability": -0.1}}}"#,
                "pol0.truncate.probability -0.1",
            ),
            (
                r#"{"pol0": {"reorder": {"window": 0}}}"#,
                "pol0.reorder.window 0",
            ),
        ] {
            let e = parse(json).validate().unwrap_err().0;
            assert!(e.contains(expect), "{e}");
        }
        assert!(serde_json::from_str::<FaultsRequest>(r#"{"pol2": {}}"#).is_err());
        assert!(serde_json::from_str::<FaultsRequest>(r#"{"pol0": {"dorp": {}}}"#).is_err());
    }
}

//! `harness qualify`: an F-engine qualification suite in the manner of katgpucbf's
//! `qualification/antenna_channelised_voltage`, measured on the engine's output directly (no
//! correlator): channelisation and SFDR, channel shape, linearity, gains, delay and phase with
//! their rates, delay enable/disable, delay application time, group delay, saturation counters
//! and lost data, and for a narrowband output its DDC's filter response. Each check works on the
//! output's [`Band`](crate::band::Band): a wideband output's whole Nyquist zone or a narrowband
//! output's band around its centre, its channels' frequencies, spectrum step and window. Any engine that speaks the katgpucbf F-engine format and control API
//! (`/status`, `/gains`, `/delays`) fed by a dsim with per-polarisation signals can be qualified.
//!
//! - this module: the checks' register, the plan (quick or full) and the runner.
//! - [`bench`](mod@bench): the system under control and the moves every check makes.
//! - [`spectra`]: the sink that integrates the output's whole band.
//! - [`analysis`]: the arithmetic (SFDR, fits, phase slopes, crossings, widths).
//! - `checks`: one module per family of checks.

use std::time::Instant;

use anyhow::Result;

pub mod analysis;
pub mod bench;
mod checks;
pub mod spectra;

pub use bench::{Bench, Geometry};

use crate::record::qualify::{Figure, Outcome, Plot, TestRecord};

/// How thorough a run is.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The quick subset: fewer positions, shorter integrations (CI on a CPU engine).
    pub quick: bool,
    /// Tone positions across the band for channelisation (>= 32 in a full run).
    pub positions: usize,
    /// Spectra integrated per measurement.
    pub spectra: u64,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            quick: false,
            positions: 32,
            spectra: 4000,
        }
    }
    pub fn quick() -> Self {
        Self {
            quick: true,
            positions: 8,
            spectra: 1000,
        }
    }
}

/// What a check measured: its figures (judged ones decide the outcome), its plots, and why it
/// could not run or failed outright where that happened.
#[derive(Debug, Default)]
pub struct Measured {
    pub figures: Vec<Figure>,
    pub plots: Vec<Plot>,
    /// Set when a precondition is missing: the check did not run.
    pub not_run: Option<String>,
    /// A failure no figure expresses.
    pub failure: Option<String>,
}

impl Measured {
    pub fn not_run(reason: impl Into<String>) -> Self {
        Self {
            not_run: Some(reason.into()),
            ..Self::default()
        }
    }
}

/// A check's measurement: on the bench, to the plan, with a progress line now and then.
pub type CheckFn = fn(&Bench, &Plan, &mut dyn FnMut(&str)) -> Result<Measured>;

/// One check of the suite.
pub struct Check {
    /// The name `--tests` takes.
    pub name: &'static str,
    pub title: &'static str,
    pub requirement: &'static str,
    pub method: &'static str,
    pub run: CheckFn,
    /// It measures a DDC filter: only an output that has one (narrowband) is judged by it, and
    /// "all" leaves it out for the others.
    pub needs_ddc: bool,
}

impl Check {
    /// Whether the check means something for an output of this band.
    pub fn applies_to(&self, band: &crate::band::Band) -> bool {
        !self.needs_ddc || band.decimation() > 1
    }
}

/// Every check, in the order a run takes them.
pub fn checks() -> &'static [Check] {
    checks::ALL
}

/// The check of that name.
pub fn find(name: &str) -> Option<&'static Check> {
    checks().iter().find(|c| c.name == name)
}

/// A name in `--tests` that the suite does not have; the sentence lists the ones it has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("there is no test named \"{name}\"; the tests are: {}", known_names().join(", "))]
pub struct UnknownCheck {
    /// The name given.
    pub name: String,
}

fn known_names() -> Vec<&'static str> {
    checks().iter().map(|c| c.name).collect()
}

/// Parses `--tests`: names separated by commas, each one the suite has; "all" for every one.
pub fn select(names: &str) -> Result<Vec<&'static Check>, UnknownCheck> {
    if names.trim() == "all" {
        return Ok(checks().iter().collect());
    }
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| find(n).ok_or_else(|| UnknownCheck { name: n.into() }))
        .collect()
}

/// Runs one check and makes its record: an error is a failure with its reason.
pub fn run_check(
    check: &Check,
    bench: &Bench,
    plan: &Plan,
    progress: &mut dyn FnMut(&str),
) -> TestRecord {
    let start = Instant::now();
    let (outcome, figures, plots) = match (check.run)(bench, plan, progress) {
        Ok(m) => {
            let failed: Vec<String> = m
                .figures
                .iter()
                .filter(|f| f.pass == Some(false))
                .map(|f| {
                    format!(
                        "{} = {} {} (limit {})",
                        f.name,
                        fmt_value(f.value),
                        f.unit,
                        f.limit.as_deref().unwrap_or("-")
                    )
                })
                .collect();
            let outcome = if let Some(why) = m.not_run {
                Outcome::NotRun { reason: why }
            } else if let Some(why) = m.failure {
                Outcome::Fail { reason: why }
            } else if !failed.is_empty() {
                Outcome::Fail {
                    reason: failed.join("; "),
                }
            } else if !m.figures.iter().any(|f| f.pass.is_some()) {
                Outcome::NotRun {
                    reason: "no figure was judged".into(),
                }
            } else {
                Outcome::Pass
            };
            (outcome, m.figures, m.plots)
        }
        // An engine over katcp has no status: a check that needs it is not run, and says why.
        Err(e) if e.downcast_ref::<crate::control::Unavailable>().is_some() => (
            Outcome::NotRun {
                reason: format!("{e:#}"),
            },
            Vec::new(),
            Vec::new(),
        ),
        Err(e) => (
            Outcome::Fail {
                reason: format!("could not complete: {e:#}"),
            },
            Vec::new(),
            Vec::new(),
        ),
    };
    TestRecord {
        name: check.name.into(),
        title: check.title.into(),
        requirement: check.requirement.into(),
        method: check.method.into(),
        outcome,
        figures,
        plots,
        duration_s: start.elapsed().as_secs_f64(),
    }
}

/// The record of a check that was not run, and why.
pub fn not_run(check: &Check, reason: &str) -> TestRecord {
    TestRecord {
        name: check.name.into(),
        title: check.title.into(),
        requirement: check.requirement.into(),
        method: check.method.into(),
        outcome: Outcome::NotRun {
            reason: reason.into(),
        },
        figures: Vec::new(),
        plots: Vec::new(),
        duration_s: 0.0,
    }
}

/// A value with sensible significant digits for one line of text.
pub fn fmt_value(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if v.fract() == 0.0 && a < 1e9 {
        format!("{v:.0}")
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_selectable() {
        let names: Vec<&str> = checks().iter().map(|c| c.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert_eq!(select("all").unwrap().len(), names.len());
        assert_eq!(select("gains, linearity").unwrap()[1].name, "linearity");
        let e = select("gains,sfdr").err().unwrap().to_string();
        assert!(
            e.contains("\"sfdr\"") && e.contains("channelisation"),
            "{e}"
        );
    }
}

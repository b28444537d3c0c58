//! `harness soak`: run the chain at one rate (a fraction of the measured max rate) for a long
//! time; `watch` checks every heap while a sampler reads every process's resident memory, open
//! descriptors and threads and every loss counter once an interval. Fails on any loss, memory
//! grown past its limit after the baseline, a restart, or a sample that could not be read.
//!
//! With `--fractions`, one such soak per fraction of the max rate, each in its own folder, and
//! then loss events per hour at each (`soak::risk`): the rate a user can provision for a given
//! risk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::announce;
use crate::bringup::{self, Setup, SystemArgs};
use crate::content::{ContentMonitor, Expected};
use crate::feed::Feed;
use crate::gsps;
use crate::receive::HeapSink;
use crate::record::soak::{RiskReport, SoakLimits, SoakReport};
use crate::render::soak::{risk_table, summary, write, write_risk, SampleLines};
use crate::soak::{self, verdict, Schedule};
use crate::watch;

/// Interval records the feed keeps for the sampler (16 s at one a second): room for a sample's
/// HTTP reads, while the harness's own memory, which holds them, reaches its plateau long before
/// any baseline worth the name (each record carries the interval's channel power).
const FEED_KEEP: usize = 16;

#[derive(Args)]
pub struct SoakArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    /// Seconds to soak, after the warm-up (with --fractions, at each fraction).
    #[arg(long, default_value_t = 1800.0)]
    pub duration: f64,
    /// Seconds between samples of the processes and counters (a progress line each).
    #[arg(long, default_value_t = 60.0)]
    pub interval: f64,
    /// Seconds the system runs before the soak begins; losses in them are reported by watch's
    /// summary but not judged (the engine counts its first chunks' input as missing while the
    /// stream starts).
    #[arg(long, default_value_t = 10.0)]
    pub warmup: f64,
    /// Each process's memory baseline is its first sample at or after this many seconds of the
    /// soak; later samples may not exceed it by more than --rss-growth.
    #[arg(long, default_value_t = 60.0)]
    pub baseline: f64,
    /// Largest growth of a process's resident memory over its baseline, in percent.
    #[arg(long, default_value_t = 5.0)]
    pub rss_growth: f64,
    /// Open file descriptors may rise this many above a process's baseline.
    #[arg(long, default_value_t = 8)]
    pub fd_slack: u64,
    /// Threads may rise this many above a process's baseline.
    #[arg(long, default_value_t = 8)]
    pub thread_slack: u64,
    /// Fraction by which the mean received rate may differ from the requested one.
    #[arg(long, default_value_t = 0.02)]
    pub rate_tolerance: f64,
    /// Soak at this fraction of the max rate (--max-rate, or --max-rate-json) [default: 1].
    #[arg(long)]
    pub fraction: Option<f64>,
    /// Soak at each of these fractions of the max rate in turn, lowest first, e.g.
    /// 0.6,0.7,0.8,0.9,1.0: --duration each, every one a soak of its own (in
    /// OUT_DIR/fraction-F), then loss events per hour at each fraction (soak-risk.{txt,json,svg}).
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "fraction",
        value_name = "F,F,..."
    )]
    pub fractions: Vec<f64>,
    /// The system's max rate (sample/s per polarisation), as `harness max-rate` measured it.
    #[arg(long, conflicts_with = "max_rate_json")]
    pub max_rate: Option<f64>,
    /// A `max-rate.json` to take the max rate from: the search of --backend's name (the first
    /// search that is not the null backend's, by URL), its highest sustained rate.
    #[arg(long)]
    pub max_rate_json: Option<PathBuf>,
    /// The tone's frequency (Hz) to check against [default: dsim's /status, or the --local tone].
    #[arg(long)]
    pub expect_tone_hz: Option<f64>,
    /// Do not check content (the null backend sends zeros): the harness then only counts heaps,
    /// copying no payload, as max-rate does, so that it keeps up with the same rates.
    #[arg(long)]
    pub no_content_check: bool,
    /// Where soak.json, soak-rss.svg and soak-growth.svg go (and the children's logs, with
    /// --local).
    #[arg(long, default_value = "harness-soak")]
    pub out_dir: PathBuf,
}

impl SoakArgs {
    fn limits(&self) -> SoakLimits {
        SoakLimits {
            baseline_s: self.baseline,
            rss_growth: self.rss_growth / 100.0,
            fd_slack: self.fd_slack,
            thread_slack: self.thread_slack,
            rate_tolerance: self.rate_tolerance,
            interval_s: self.interval,
        }
    }

    /// Every number in range, or one sentence saying which is not.
    fn check(&self) -> Result<()> {
        let positive = [("--duration", self.duration), ("--interval", self.interval)];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a number of seconds above 0 (got {v})");
            }
        }
        let at_least_zero = [
            ("--warmup", self.warmup),
            ("--baseline", self.baseline),
            ("--rss-growth", self.rss_growth),
            ("--rate-tolerance", self.rate_tolerance),
        ];
        for (name, v) in at_least_zero {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{name} must be 0 or more (got {v})");
            }
        }
        if self.baseline >= self.duration {
            bail!(
                "--baseline ({} s) must be shorter than --duration ({} s): memory growth is judged after it",
                self.baseline,
                self.duration
            );
        }
        // Growth is judged from the first sample at or after the baseline to a later one: a
        // soak that ends on that sample (or within a second of it, too soon for the run's
        // closing sample) fails after its whole run for want of a second.
        let baseline_sample = (self.baseline / self.interval).ceil() * self.interval;
        if baseline_sample + 1.0 > self.duration {
            bail!(
                "--duration ({} s) ends on the memory baseline's sample (at {baseline_sample} s, \
                 the first at or after --baseline {} s, one every --interval {} s), leaving none \
                 to judge growth by: give a longer --duration or a shorter --baseline",
                self.duration,
                self.baseline,
                self.interval
            );
        }
        if let Some(f) = self.fraction {
            if !(f.is_finite() && f > 0.0) {
                bail!("--fraction must be above 0 (got {f})");
            }
            if self.max_rate.is_none() && self.max_rate_json.is_none() {
                bail!("--fraction needs the max rate it is a fraction of: --max-rate or --max-rate-json");
            }
        }
        if !self.fractions.is_empty() {
            if self.fractions.len() > MAX_FRACTIONS {
                bail!(
                    "--fractions gives {} fractions; give at most {MAX_FRACTIONS}",
                    self.fractions.len()
                );
            }
            if let Some(f) = self
                .fractions
                .iter()
                .find(|f| !(f.is_finite() && **f > 0.0))
            {
                bail!("--fractions must all be above 0 (got {f})");
            }
            if self.max_rate.is_none() && self.max_rate_json.is_none() {
                bail!("--fractions needs the max rate they are fractions of: --max-rate or --max-rate-json");
            }
        }
        if (self.max_rate.is_some() || self.max_rate_json.is_some())
            && self.system.adc_rate.is_some()
        {
            bail!("give either --adc-rate or the max rate (--max-rate, --max-rate-json) with --fraction, not both");
        }
        Ok(())
    }

    /// The rate to soak at and where it came from; None keeps --adc-rate (or dsim's rate).
    fn rate(&self) -> Result<Option<(f64, String)>> {
        self.rate_at(self.fraction.unwrap_or(1.0))
    }

    /// The max rate and where it came from; None without --max-rate or --max-rate-json.
    fn max_rate(&self) -> Result<Option<(f64, String)>> {
        let (max, from) = match (&self.max_rate, &self.max_rate_json) {
            (Some(m), _) => (*m, "--max-rate".to_string()),
            (None, Some(path)) => {
                let backend = if self.system.local {
                    Some(self.system.backend.as_str())
                } else {
                    None
                };
                let (max, search) = max_rate_from_file(path, backend)?;
                (max, format!("{}'s {search} search", path.display()))
            }
            (None, None) => return Ok(None),
        };
        if !(max.is_finite() && max > 0.0) {
            bail!("the max rate must be above 0 (got {max})");
        }
        Ok(Some((max, from)))
    }

    /// The rate to soak at for `fraction` of the max rate and where it came from; without a max
    /// rate, --adc-rate (None: dsim's rate).
    fn rate_at(&self, fraction: f64) -> Result<Option<(f64, String)>> {
        Ok(match self.max_rate()? {
            Some((max, from)) => Some((
                fraction * max,
                format!("{fraction} of {} Gsample/s from {from}", gsps(max)),
            )),
            None => self.system.adc_rate.map(|r| (r, "--adc-rate".to_string())),
        })
    }
}

/// The highest sustained rate of a `max-rate.json`: of the search named `backend` when given,
/// else of the first search that is not the null backend's. Returns it with the search's name.
pub fn max_rate_from_report(report: &Value, backend: Option<&str>) -> Result<(f64, String)> {
    let searches = report
        .get("searches")
        .and_then(Value::as_array)
        .context("it has no \"searches\" list (is it harness max-rate's max-rate.json?)")?;
    let name = |s: &Value| {
        s.get("backend")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let search = match backend {
        Some(b) => searches.iter().find(|s| name(s) == b).with_context(|| {
            format!(
                "it has no search of the {b} backend (it has: {})",
                searches.iter().map(name).collect::<Vec<_>>().join(", ")
            )
        })?,
        None => searches
            .iter()
            .find(|s| name(s) != "null")
            .context("it has no search but the null backend's")?,
    };
    let best = search
        .get("best")
        .and_then(Value::as_f64)
        .with_context(|| {
            format!(
                "its {} search sustained no rate (its --low failed)",
                name(search)
            )
        })?;
    Ok((best, name(search)))
}

fn max_rate_from_file(path: &Path, backend: Option<&str>) -> Result<(f64, String)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --max-rate-json {}", path.display()))?;
    let report: Value = serde_json::from_str(&text)
        .with_context(|| format!("--max-rate-json {} is not JSON", path.display()))?;
    max_rate_from_report(&report, backend)
        .with_context(|| format!("--max-rate-json {}", path.display()))
}

/// The tone's channel: dsim's tone at dsim's rate before the soak (its frequencies are fixed in
/// cycles per sample, so the channel stays where it is when the soak changes the rate), or
/// `expect_hz` at the soak's rate. None (content reported, not checked) when either is unknown.
fn expected_channel(
    s: &Setup,
    expect_hz: Option<f64>,
    soak_rate: Option<f64>,
    rate_before: Option<f64>,
) -> Option<f64> {
    let at = match expect_hz {
        Some(f) => soak_rate.map(|fs| (f, fs)),
        None => s.tone.map(|t| t.frequency).zip(rate_before),
    };
    if at.is_none() {
        tracing::warn!("tone or ADC rate unknown: content reported, not checked");
    }
    at.map(|(f, fs)| s.geometry.band.channel(f, fs, s.geometry.channels))
}

/// Sets dsim's rate (URL mode), warning when the engine paces its output for a lower one.
fn set_url_rate(s: &Setup, rate: f64) -> Result<()> {
    s.services.dsim.set_rate(rate)?;
    if let Ok(fs) = s.services.engine.geometry().map(|g| g.adc_sample_rate) {
        if fs < rate {
            tracing::warn!(
                "the engine was started with --adc-sample-rate {fs:e}, below the soak's {rate:e}: \
                 it paces its output for that rate and will fall behind"
            );
        }
    }
    Ok(())
}

/// Most fractions one `--fractions` soak takes (each a soak of --duration).
const MAX_FRACTIONS: usize = 20;

/// Runs `harness soak`; true when it passed (with --fractions: when every fraction was soaked
/// to its end, losses being what it measures).
pub fn run(a: SoakArgs) -> Result<bool> {
    a.check()?;
    bringup::one_engine(&a.system, "soak")?;
    if !a.fractions.is_empty() {
        return run_fractions(&a);
    }
    let report = soak_once(&a, a.rate()?, &a.out_dir)?;
    let index = crate::render::index::write(&a.out_dir)?;
    print!("{}", summary(&report));
    eprintln!(
        "wrote {}/soak.json, soak-rss.svg, soak-growth.svg and {}",
        a.out_dir.display(),
        index.display()
    );
    Ok(report.pass)
}

/// One soak per fraction, lowest first, each in OUT_DIR/fraction-F; then the loss events per
/// hour at each.
fn run_fractions(a: &SoakArgs) -> Result<bool> {
    let (max, from) = a.max_rate()?.context("--fractions needs the max rate")?;
    let mut fractions = a.fractions.clone();
    fractions.sort_by(f64::total_cmp);
    fractions.dedup();
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    eprintln!(
        "soak: {} fractions of {} Gsample/s ({from}), {} each: about {} in all",
        fractions.len(),
        gsps(max),
        verdict::when(a.duration),
        verdict::when(fractions.len() as f64 * (a.warmup + a.duration)),
    );
    let mut risk = RiskReport {
        max_rate: max,
        max_rate_source: from,
        duration_s: a.duration,
        interval_s: a.interval,
        fractions: Vec::new(),
    };
    let mut complete = true;
    for f in fractions {
        let name = format!("fraction-{f}");
        let dir = a.out_dir.join(&name);
        eprintln!("soak: fraction {f} in {}", dir.display());
        let report = soak_once(a, a.rate_at(f)?, &dir)?;
        crate::render::index::write(&dir)?;
        print!("{}", summary(&report));
        complete &= report.soaked_s >= a.duration - a.interval;
        risk.fractions
            .push(crate::soak::risk::of_report(f, &report, name));
        // Written after each fraction, so that an interrupted run keeps what it measured.
        write_risk(&a.out_dir, &risk)?;
    }
    let index = crate::render::index::write(&a.out_dir)?;
    print!("{}", risk_table(&risk));
    eprintln!(
        "wrote {}/soak-risk.{{txt,json,svg}}, a soak report per fraction and {}",
        a.out_dir.display(),
        index.display()
    );
    Ok(complete)
}

/// One soak at `rate` (None: --adc-rate or dsim's rate), its files in `out_dir`.
fn soak_once(a: &SoakArgs, rate: Option<(f64, String)>, out_dir: &Path) -> Result<SoakReport> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut sys = a.system.clone();
    if sys.local {
        if let Some((r, _)) = &rate {
            sys.adc_rate = Some(*r);
        }
    }
    // Without the content check the harness only counts heaps, copying no payload, as max-rate
    // does: a soak at a fraction of a max rate measured so runs under the same conditions.
    let count_only = a.no_content_check || (sys.local && sys.backend == "null");
    let mut monitor = None;
    let s = bringup::setup(&sys, &sys.backend, None, Some(out_dir), |g, subs| {
        let m = Arc::new(ContentMonitor::new(
            g.channels,
            subs,
            Duration::from_millis(50),
            g.bits,
        ));
        monitor = Some(m.clone());
        (!count_only).then_some(m as Arc<dyn HeapSink>)
    })?;
    announce(&s);
    let monitor = monitor.context("content monitor")?;
    let soak_rate = rate.as_ref().map(|(r, _)| *r).or(s.adc_rate);
    let rate_before = if s.local {
        s.adc_rate
    } else {
        s.services.dsim.status().ok().map(|st| st.rate)
    };
    let expected_channel = if count_only {
        None
    } else {
        expected_channel(&s, a.expect_tone_hz, soak_rate, rate_before)
    };
    // By URL: set dsim to the soak's rate, and put it back afterwards.
    let restore_rate = match (s.local, &rate) {
        (false, Some((r, _))) => {
            set_url_rate(&s, *r)?;
            rate_before.filter(|b| b != r)
        }
        _ => None,
    };
    let adc_rate = soak_rate;
    let limits = a.limits();
    let planned_s = a.duration;
    let system = json!({
        "mode": if s.local { "local" } else { "url" },
        "backend": if s.local {
            Some(s.backend.clone())
        } else {
            s.services.engine.status().ok().map(|st| st.backend)
        },
        "engine": s.services.engine.url(),
        "output": s.output_name(),
        "dsim": s.services.dsim.url(),
        "channels": s.geometry.channels,
        "taps": s.geometry.taps,
        "spectra_per_heap": s.geometry.spectra_per_heap,
        "substreams": s.rx.endpoint().addrs.len(),
        "input_addresses": sys.input_addresses,
        "dsim_args": sys.dsim_args,
        "fengine_args": sys.fengine_args,
        "host_cores": std::thread::available_parallelism().map(|n| n.get()).ok(),
    });
    eprintln!(
        "soak: {} at {} for {} after a {} s warm-up; a sample every {}, memory judged from {}",
        if s.local {
            "local system"
        } else {
            "services by URL"
        },
        adc_rate.map_or("dsim's rate".into(), |r| format!("{} Gsample/s", gsps(r))),
        verdict::when(a.duration),
        a.warmup,
        verdict::when(a.interval),
        verdict::when(a.baseline),
    );

    let feed = Feed::new(FEED_KEEP);
    let reader = feed.reader();
    let (engine, dsim) = (s.services.engine.clone(), s.services.dsim.clone());
    let schedule = Schedule {
        warmup_s: a.warmup,
        interval_s: a.interval,
    };
    let baseline_s = a.baseline;
    let sampler = std::thread::spawn(move || {
        let mut lines = SampleLines::new(baseline_s);
        soak::follow(reader, Some(engine), Some(dsim), schedule, |x| {
            eprintln!("{}", lines.line(x))
        })
    });
    let opts = watch::WatchOptions {
        duration: Some(Duration::from_secs_f64(a.warmup + a.duration)),
        progress_interval: Duration::from_secs(1),
        output_label: s.output_label().map(String::from),
    };
    let Setup { services, rx, .. } = s;
    let one = [watch::Watched {
        monitor,
        expected: Expected::new(expected_channel),
        engine: Some(services.engine.clone()),
        dsim: Some(services.dsim.clone()),
    }];
    let watched = watch::run(rx, &one, &opts, &feed);
    feed.close();
    let followed = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
    if let Some(r) = restore_rate {
        if let Err(e) = services.dsim.set_rate(r) {
            tracing::warn!("could not put dsim's rate back to {r:e}: {e:#}");
        }
    }
    drop(services);
    let watched = watched.map_err(|e| tracing::warn!("watch: {e:#}")).ok();

    let v = verdict::judge(
        &followed.samples,
        &limits,
        planned_s,
        (adc_rate, followed.received_rate),
    );
    let report = SoakReport {
        pass: v.pass,
        reasons: v.reasons,
        rate: adc_rate,
        rate_source: rate.map_or_else(
            || {
                if a.system.local {
                    "--local's default rate".into()
                } else {
                    "dsim's rate as it was".into()
                }
            },
            |(_, from)| from,
        ),
        duration_s: planned_s,
        soaked_s: followed.samples.last().map_or(0.0, |x| x.elapsed_s),
        warmup_s: a.warmup,
        limits,
        system,
        received_rate: v.received_rate,
        processes: v.processes,
        losses: v.losses,
        samples: followed.samples,
        watch: watched,
    };
    write(out_dir, &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        soak: SoakArgs,
    }

    fn args(line: &str) -> SoakArgs {
        Cli::try_parse_from(std::iter::once("soak").chain(line.split_whitespace()))
            .unwrap()
            .soak
    }

    #[test]
    fn the_rate_is_a_fraction_of_the_max_or_as_given() {
        let (r, from) = args("--local --max-rate 32e6 --fraction 0.75")
            .rate()
            .unwrap()
            .unwrap();
        assert_eq!(r, 24e6);
        assert_eq!(from, "0.75 of 0.032 Gsample/s from --max-rate");
        let (r, _) = args("--local --max-rate 32e6").rate().unwrap().unwrap();
        assert_eq!(r, 32e6, "a max rate alone: all of it");
        let (r, from) = args("--local --adc-rate 16e6").rate().unwrap().unwrap();
        assert_eq!((r, from.as_str()), (16e6, "--adc-rate"));
        assert!(args("--local").rate().unwrap().is_none());
    }

    #[test]
    fn bad_arguments_are_named_in_one_sentence() {
        let err = |line: &str| args(line).check().unwrap_err().to_string();
        assert_eq!(
            err("--local --fraction 0.8"),
            "--fraction needs the max rate it is a fraction of: --max-rate or --max-rate-json"
        );
        assert!(err("--local --max-rate 1e9 --adc-rate 1e8").starts_with("give either --adc-rate"));
        assert!(err("--local --duration 30").contains("--baseline (60 s) must be shorter"));
        assert!(err("--local --interval 0").starts_with("--interval must be"));
        // A baseline whose sample is the last leaves nothing to judge growth by.
        assert!(err("--local --duration 75 --interval 25")
            .starts_with("--duration (75 s) ends on the memory baseline's sample (at 75 s"));
        assert!(args("--local --duration 90 --interval 30").check().is_ok());
        assert!(
            err("--local --max-rate 1e9 --fraction=-1").starts_with("--fraction must be above 0")
        );
        assert!(err("--local --rss-growth=-5").starts_with("--rss-growth must be 0 or more"));
        assert!(args("--local --max-rate 1e9 --fraction 0.8")
            .check()
            .is_ok());
    }

    #[test]
    fn fractions_are_parsed_checked_and_turned_into_rates() {
        let a = args("--local --max-rate 1e9 --fractions 0.6,0.7,0.8,0.9,1.0");
        assert_eq!(a.fractions, [0.6, 0.7, 0.8, 0.9, 1.0]);
        a.check().unwrap();
        let (r, from) = a.rate_at(0.7).unwrap().unwrap();
        assert_eq!(
            (r, from.as_str()),
            (0.7e9, "0.7 of 1.000 Gsample/s from --max-rate")
        );
        let err = |line: &str| args(line).check().unwrap_err().to_string();
        assert_eq!(
            err("--local --fractions 0.5,1"),
            "--fractions needs the max rate they are fractions of: --max-rate or --max-rate-json"
        );
        assert_eq!(
            err("--local --max-rate 1e9 --fractions 0.5,0"),
            "--fractions must all be above 0 (got 0)"
        );
        let many = vec!["0.5"; 21].join(",");
        assert!(err(&format!("--local --max-rate 1e9 --fractions {many}")).contains("at most 20"));
        // One fraction or several, not both.
        assert!(Cli::try_parse_from(
            "soak --local --max-rate 1e9 --fraction 0.8 --fractions 0.6,0.7".split_whitespace()
        )
        .is_err());
        assert!(Cli::try_parse_from("soak --fractions 0.6,x".split_whitespace()).is_err());
        // Without --fractions, the one-fraction soak as before.
        assert!(args("--local --max-rate 1e9 --fraction 0.8")
            .fractions
            .is_empty());
    }

    #[test]
    fn the_max_rate_comes_from_the_right_search() {
        let report = json!({"searches": [
            {"backend": "cuda", "best": 6.8e9},
            {"backend": "null", "best": 5.8e9},
        ]});
        assert_eq!(
            max_rate_from_report(&report, Some("cuda")).unwrap(),
            (6.8e9, "cuda".into())
        );
        assert_eq!(
            max_rate_from_report(&report, Some("null")).unwrap().0,
            5.8e9
        );
        assert_eq!(max_rate_from_report(&report, None).unwrap().0, 6.8e9);
        let e = max_rate_from_report(&report, Some("cpu")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it has no search of the cpu backend (it has: cuda, null)"
        );
        let failed = json!({"searches": [{"backend": "engine", "best": null}]});
        let e = max_rate_from_report(&failed, None).unwrap_err();
        assert!(e.to_string().contains("sustained no rate"), "{e}");
        let e = max_rate_from_report(&json!({"tests": []}), None).unwrap_err();
        assert!(e.to_string().contains("max-rate.json"), "{e}");
    }
}

//! `harness max-rate`: binary-search the highest ADC rate the system sustains (paper, 5.4),
//! optionally hold the rate found for a long window (stepping down until one holds), optionally
//! again with the engine's null backend, and write the table, JSON and plot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;

use super::announce;
use crate::bringup::{self, Setup, SystemArgs};
use crate::gsps;
use crate::record::{MaxRateReport, Reference, SearchReport};
use crate::render::progress::{trial_line, TrialBar};
use crate::render::{self, report};
use crate::search::{self, HoldConfig, Phase, SearchConfig};
use crate::trial::{self, TrialConfig};

#[derive(Args)]
pub struct MaxRateArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    /// Lowest rate tried (sample/s per polarisation); where it fails (or fails a repeat), the
    /// search steps down by a fifth of it, up to three times, and searches below it.
    #[arg(long)]
    pub low: f64,
    /// Highest rate tried (sample/s per polarisation).
    #[arg(long)]
    pub high: f64,
    /// Search resolution (sample/s).
    #[arg(long, default_value_t = 10e6)]
    pub resolution: f64,
    /// Warm-up per trial (s), not observed.
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// After the warm-up, wait up to this long (s) for the engine's loss counters and the gaps
    /// to stop moving before observing: a system still recovering from the previous trial's
    /// overload is not judged at the new rate yet. 0 observes straight after the warm-up.
    #[arg(long, default_value_t = 20.0)]
    pub settle: f64,
    /// Observation window per trial (s).
    #[arg(long, default_value_t = 20.0)]
    pub window: f64,
    /// Extra trials of the boundary pass before it is accepted (every one must pass).
    #[arg(long, default_value_t = 1)]
    pub repeats: u32,
    /// Fraction by which the received rate may fall short of the requested one.
    #[arg(long, default_value_t = 0.02)]
    pub rate_tolerance: f64,
    /// After the search, hold the rate found for this many seconds: if anything is lost, step
    /// down by --hold-step and hold again, at most --hold-steps times. The first rate that holds
    /// is reported as the sustained one beside the search's (20 s windows) answer.
    #[arg(long, value_name = "SECONDS")]
    pub hold: Option<f64>,
    /// Each step down after a hold that lost, as a fraction of the rate found.
    #[arg(long, default_value_t = 0.05, value_name = "FRACTION")]
    pub hold_step: f64,
    /// Most steps down after the found rate's hold (so at most this many + 1 holds).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub hold_steps: u32,
    /// Run the same search with the engine's null backend and report the ratio.
    #[arg(long)]
    pub compare_null: bool,
    /// URL mode with --compare-null: the null-backend engine's control URL.
    #[arg(long)]
    pub null_engine_url: Option<String>,
    /// URL mode with --compare-null: the null-backend engine's output substreams [default:
    /// the destinations its /status gives the output, as for the engine under test].
    #[arg(long)]
    pub null_dst: Option<String>,
    /// A rate measured beside the search, NAME=RATE in sample/s per polarisation (e.g. the
    /// transport alone from spead's chain bench in the same run): in the report and drawn on the
    /// plot's axes. Repeatable.
    #[arg(long = "reference", value_name = "NAME=RATE")]
    pub references: Vec<Reference>,
    /// Where the table (max-rate.txt), JSON (max-rate.json) and plot (max-rate.svg) go; an
    /// index.html there links every report in the folder.
    #[arg(long, default_value = "harness-max-rate")]
    pub out_dir: PathBuf,
}

/// The hold `--hold` asks for, checked; None without it.
fn hold_config(a: &MaxRateArgs) -> Result<Option<HoldConfig>, search::HoldError> {
    let Some(seconds) = a.hold else {
        return Ok(None);
    };
    let h = HoldConfig {
        seconds,
        step: a.hold_step,
        max_steps: a.hold_steps,
    };
    h.validate()?;
    Ok(Some(h))
}

/// Runs `harness max-rate`; true when every search found a sustained rate (and, with --hold,
/// held one).
pub fn run(a: MaxRateArgs) -> Result<bool> {
    let cfg = SearchConfig {
        low: a.low,
        high: a.high,
        resolution: a.resolution,
        repeats: a.repeats,
    };
    cfg.validate()?;
    let hold = hold_config(&a)?;
    let tcfg = TrialConfig {
        warmup: Duration::from_secs_f64(a.warmup.max(0.0)),
        settle: Duration::from_secs_f64(a.settle.max(0.0)),
        window: Duration::from_secs_f64(a.window.max(0.1)),
        rate_tolerance: a.rate_tolerance,
    };
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let array = bringup::array_size(&a.system)?;
    let mut backends = vec![a.system.backend.clone()];
    if a.compare_null {
        if !a.system.local && a.null_engine_url.is_none() {
            bail!("--compare-null needs --local, or --null-engine-url in URL mode");
        }
        if !a.system.local && array.is_some() {
            bail!("--compare-null in URL mode compares one engine: with --engines, use --local");
        }
        backends.push("null".into());
    }
    let mut report = MaxRateReport {
        searches: Vec::new(),
        ratio_to_null: None,
        references: a.references.clone(),
        system: json!({
            "mode": if a.system.local { "local" } else { "url" },
            "channels": a.system.channels,
            "taps": a.system.taps,
            "spectra_per_heap": a.system.spectra_per_heap,
            "substreams": a.system.substreams,
            "input_addresses": a.system.input_addresses,
            "dsim_args": a.system.dsim_args,
            "fengine_args": a.system.fengine_args,
            "search": cfg,
            "trial": { "warmup_s": a.warmup, "settle_max_s": a.settle, "window_s": a.window, "rate_tolerance": a.rate_tolerance },
            "hold": hold,
        }),
    };
    if let Some(n) = array {
        report.system["engines"] = json!(n);
        report.system["gpus"] = match a.system.gpus {
            Some(g) => json!(g),
            None if a.system.gpu_ids.is_empty() => serde_json::Value::Null,
            None => json!(a.system.gpu_ids),
        };
    }
    if let Some(n) = array {
        eprintln!("max-rate: an array of {n} engines, every dsim at the trial's rate; a trial passes when every engine passes");
    }
    eprintln!(
        "max-rate: {} to {} Gsample/s, resolution {} Msample/s, about {} trials per search of {:.0} s each (plus up to {:.0} s settling)",
        gsps(a.low),
        gsps(a.high),
        a.resolution / 1e6,
        cfg.expected_trials(),
        a.warmup + a.window,
        a.settle
    );
    if let Some(h) = &hold {
        eprintln!(
            "max-rate: then the rate found is held for {} s, stepping down by {}% of it after a loss, at most {} times",
            h.seconds,
            h.step * 100.0,
            h.max_steps
        );
    }
    let mut index = 0;
    for (i, backend) in backends.iter().enumerate() {
        let null_second = i == 1 && !a.system.local;
        let mut sys = a.system.clone();
        if sys.local && sys.adc_rate.is_none() {
            // dsim sizes its send threads for its starting rate, not for later rate changes.
            sys.adc_rate = Some(a.high);
        }
        if null_second {
            sys.dst = a.null_dst.clone();
        }
        let urls = if null_second {
            Some((
                a.system.dsim_url.as_deref().context("--dsim-url")?,
                a.null_engine_url.as_deref().context("--null-engine-url")?,
            ))
        } else {
            None
        };
        let mut s = bringup::setup(&sys, backend, urls, Some(&a.out_dir), |_, _| None)?;
        announce(&s);
        let output = s.output_name().map(String::from);
        let backend_name = if sys.local {
            backend.clone()
        } else if null_second {
            "null".into()
        } else {
            "engine".into()
        };
        if !sys.local {
            // The engine paces its output at a factor of its configured ADC rate: started below
            // --high, it would fail trials for a reason that is not throughput.
            if let Ok(fs) = s.services.engine.geometry().map(|g| g.adc_sample_rate) {
                if fs < a.high {
                    tracing::warn!(
                        "the engine was started with --adc-sample-rate {fs:e}, below --high {:e}: \
                         it paces its output for that rate, so faster trials may fail; start it \
                         with the highest rate tried",
                        a.high
                    );
                }
            }
        }
        let mut trials = Vec::new();
        let bar = TrialBar::stderr();
        let mut one_trial = |rate: f64, phase: Phase| {
            index += 1;
            // A hold is a trial whose window is the hold.
            let cfg = match (&hold, phase) {
                (Some(h), Phase::Hold) => TrialConfig {
                    window: Duration::from_secs_f64(h.seconds),
                    ..tcfg
                },
                _ => tcfg,
            };
            let t = trial::run_trial(
                &mut s.services,
                &s.rx,
                rate,
                phase,
                &cfg,
                index,
                &backend_name,
                &mut |p| bar.show(p),
            )?;
            eprintln!("{}", trial_line(&t));
            // Where a trial lost data, what the engine says of its window.
            if let (false, Some(st)) = (t.pass, &t.stalls) {
                eprintln!("           engine over the window: {}", st.line());
            }
            let pass = t.pass;
            trials.push(t);
            Ok::<_, anyhow::Error>(pass)
        };
        let result = search::search(&cfg, &mut one_trial).and_then(|r| {
            let held = match (&hold, r.best) {
                (Some(h), Some(best)) => Some(search::hold(h, best, &mut one_trial)?.held),
                _ => None,
            };
            Ok((r, held))
        });
        let Setup { services, rx, .. } = s;
        drop(rx);
        drop(services);
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                // Keep what was measured (an interrupt, a service that died) before failing.
                report.searches.push(SearchReport {
                    backend: backend_name,
                    output,
                    config: cfg,
                    best: None,
                    hold,
                    held: None,
                    engines: array,
                    aggregate_best: None,
                    lowest_fail: None,
                    trials,
                });
                write_max_rate(&a.out_dir, &mut report)?;
                return Err(e.context("search stopped; the trials so far are in the report"));
            }
        };
        let (result, held) = result;
        let aggregate_best = array.zip(result.best).map(|(n, b)| n as f64 * b);
        eprintln!(
            "{backend_name}: highest sustained {} Gsample/s{}",
            result.best.map_or("none".into(), gsps),
            match (array, aggregate_best) {
                (Some(n), Some(t)) => format!(" per engine, {} aggregate over {n}", gsps(t)),
                _ => String::new(),
            }
        );
        if let (Some(h), Some(_)) = (&hold, result.best) {
            eprintln!(
                "{backend_name}: held for {} s: {}",
                h.seconds,
                held.flatten()
                    .map_or("no rate (every step lost something)".into(), |r| format!(
                        "{} Gsample/s",
                        gsps(r)
                    ))
            );
        }
        report.searches.push(SearchReport {
            backend: backend_name,
            output,
            config: cfg,
            best: result.best,
            hold,
            held: held.flatten(),
            engines: array,
            aggregate_best,
            lowest_fail: result.lowest_fail,
            trials,
        });
    }
    write_max_rate(&a.out_dir, &mut report)?;
    Ok(report
        .searches
        .iter()
        .all(|s| s.best.is_some() && (s.hold.is_none() || s.held.is_some())))
}

fn write_max_rate(dir: &Path, report: &mut MaxRateReport) -> Result<()> {
    report.compute_ratio();
    let table = report::table(report);
    print!("{table}");
    std::fs::write(dir.join("max-rate.txt"), &table)?;
    report::write_json(&dir.join("max-rate.json"), report)?;
    report::plot_trials(&dir.join("max-rate.svg"), report)?;
    let index = render::index::write(dir)?;
    eprintln!(
        "wrote {}/max-rate.{{txt,json,svg}} and {}",
        dir.display(),
        index.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        max_rate: MaxRateArgs,
    }

    fn args(line: &str) -> MaxRateArgs {
        Cli::try_parse_from(std::iter::once("max-rate").chain(line.split_whitespace()))
            .unwrap()
            .max_rate
    }

    #[test]
    fn hold_flags_make_a_checked_hold() {
        assert_eq!(hold_config(&args("--low 1e9 --high 2e9")), Ok(None));
        assert_eq!(
            hold_config(&args("--low 1e9 --high 2e9 --hold 600")),
            Ok(Some(HoldConfig {
                seconds: 600.0,
                step: 0.05,
                max_steps: 4
            }))
        );
        let h = hold_config(&args(
            "--low 1e9 --high 2e9 --hold 3600 --hold-step 0.02 --hold-steps 10",
        ))
        .unwrap()
        .unwrap();
        assert_eq!((h.step, h.max_steps), (0.02, 10));
        let e = hold_config(&args("--low 1e9 --high 2e9 --hold 600 --hold-step 1.5")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--hold-step (1.5) must be a fraction above 0 and below 1"
        );
        assert!(hold_config(&args("--low 1e9 --high 2e9 --hold 0")).is_err());
        assert!(
            Cli::try_parse_from(["max-rate", "--low", "1", "--high", "2", "--hold", "x"]).is_err()
        );
    }
}

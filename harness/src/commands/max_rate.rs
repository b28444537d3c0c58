//! `harness max-rate`: binary-search the highest ADC rate the system sustains (paper, 5.4),
//! optionally again with the engine's null backend, and write the table, JSON and plot.

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
use crate::search::{self, SearchConfig};
use crate::trial::{self, TrialConfig};

#[derive(Args)]
pub struct MaxRateArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    /// Lowest rate tried (sample/s per polarisation).
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

/// Runs `harness max-rate`; true when every search found a sustained rate.
pub fn run(a: MaxRateArgs) -> Result<bool> {
    let cfg = SearchConfig {
        low: a.low,
        high: a.high,
        resolution: a.resolution,
        repeats: a.repeats,
    };
    cfg.validate()?;
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
        let result = search::search(&cfg, |rate, phase| {
            index += 1;
            let t = trial::run_trial(
                &mut s.services,
                &s.rx,
                rate,
                phase,
                &tcfg,
                index,
                &backend_name,
                &mut |p| bar.show(p),
            )?;
            eprintln!("{}", trial_line(&t));
            let pass = t.pass;
            trials.push(t);
            Ok::<_, anyhow::Error>(pass)
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
                    engines: array,
                    aggregate_best: None,
                    lowest_fail: None,
                    trials,
                });
                write_max_rate(&a.out_dir, &mut report)?;
                return Err(e.context("search stopped; the trials so far are in the report"));
            }
        };
        let aggregate_best = array.zip(result.best).map(|(n, b)| n as f64 * b);
        eprintln!(
            "{backend_name}: highest sustained {} Gsample/s{}",
            result.best.map_or("none".into(), gsps),
            match (array, aggregate_best) {
                (Some(n), Some(t)) => format!(" per engine, {} aggregate over {n}", gsps(t)),
                _ => String::new(),
            }
        );
        report.searches.push(SearchReport {
            backend: backend_name,
            output,
            config: cfg,
            best: result.best,
            engines: array,
            aggregate_best,
            lowest_fail: result.lowest_fail,
            trials,
        });
    }
    write_max_rate(&a.out_dir, &mut report)?;
    Ok(report.searches.iter().all(|s| s.best.is_some()))
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

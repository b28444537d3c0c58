//! `harness qualify`: run the qualification suite against a running dsim and engine (or local
//! ones), write qualify.json and qualify.html, print a summary table.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use fgpu_api::dsim::{PolSignal, PolsRequest, SignalRequest};

use super::announce;
use crate::band::Band;
use crate::bringup::{self, SystemArgs};
use crate::control::{Engine, Unavailable};
use crate::feng_raw::OutputBits;
use crate::qualify::spectra::Spectra;
use crate::qualify::{self, Bench, Geometry, Plan};
use crate::receive::{HeapSink, Sinks};
use crate::record::qualify::{JudgedBand, Outcome, QualifyReport, SystemUnderTest};
use crate::render;
use crate::response::CrossAccumulator;

/// The tests, for --help (a unit test keeps it in step with the suite).
pub const TESTS_HELP: &str =
    "Tests, in the order run, on the output --output names, within its band:
  channelisation    Channelisation and SFDR: the tone's channel at >= 32 positions, SFDR >= 53 dB
  shape             Channel shape: response within 0.5 dB of theory, -3/-53 dB widths
  filter-response   DDC filter response (narrowband): ripple <= 0.1 dB, aliases <= -60 dB
  linearity         Linearity: tone at 2^-i full scale, i = 0..9, within 1 dB of the ideal line
  gains             Gains: random complex gains per channel, within 0.1 dB and 0.5 degree
  delay             Delay: compensated residual phase within 1 degree below 0.9 of the band
  delay-enable      Delay enable/disable: loaded, cleared, loaded again
  phase             Phase: a fringe phase of 0.7 rad within 1 degree
  delay-rate        Delay rate: residual delay drifts as predicted, within 0.01 samples
  phase-rate        Phase rate: phase drifts as predicted, within 1 degree
  application-time  Delay application time: the model starts at exactly the predicted spectrum
  group-delay       Group delay: a switched-on tone's half-amplitude spectrum, within 0.1 spectrum
  saturation        Saturation counters: clamped output counted as the harness sees it
  lost-data         Lost data: a drop list removes exactly the predicted output heaps";

#[derive(Args)]
#[command(after_long_help = TESTS_HELP)]
pub struct QualifyArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    /// Tests to run, comma-separated, or "all" (--list names them).
    #[arg(long, default_value = "all")]
    pub tests: String,
    /// List the tests and exit.
    #[arg(long)]
    pub list: bool,
    /// The quick subset: 8 tone positions, 1000 spectra per measurement, a coarser response.
    #[arg(long)]
    pub quick: bool,
    /// Spectra integrated per measurement [default: 4000; quick: 1000].
    #[arg(long)]
    pub spectra: Option<u64>,
    /// Tone positions across the band for channelisation [default: 32; quick: 8].
    #[arg(long)]
    pub positions: Option<usize>,
    /// Where qualify.json, qualify.html (and with --local the children's logs) go.
    #[arg(long, default_value = "harness-qualify")]
    pub out_dir: PathBuf,
    /// Leave dsim's signal and the engine's gains as the tests left them (default: restore them).
    #[arg(long)]
    pub no_restore: bool,
    /// An engine over katcp (no status): its input chunk, samples per polarisation (katgpucbf's
    /// --src-chunk-samples) [default: this project's engine's, 4 heaps of spectra of 2n samples].
    #[arg(long)]
    pub chunk_samples: Option<usize>,
    /// An engine over katcp (no status): the largest delay it loads, s (katgpucbf's
    /// --max-delay-diff) [default: this project's engine's, 1e-4].
    #[arg(long, default_value_t = 1e-4)]
    pub max_delay: f64,
}

/// What the suite needs to know of the engine: from its status, or, over katcp (no status), from
/// the command line.
struct EngineFacts {
    output: String,
    backend: String,
    channels: usize,
    taps: usize,
    spectra_per_heap: usize,
    sample_bits: u32,
    max_delay_s: f64,
    chunk_samples: usize,
}

impl EngineFacts {
    fn of(st: &fgpu_api::engine::Status, engine: &Engine) -> Result<Self> {
        let (output, out) = engine.output_in(st)?;
        Ok(Self {
            output: output.to_string(),
            backend: st.backend.clone(),
            channels: out.channels,
            taps: out.taps,
            spectra_per_heap: out.spectra_per_heap,
            sample_bits: st.input.sample_bits,
            max_delay_s: st.max_delay_s,
            chunk_samples: st.input.chunk_samples,
        })
    }

    /// The command line's: the geometry bringup took from it, --sample-bits, --max-delay and
    /// --chunk-samples.
    fn given(a: &QualifyArgs, s: &bringup::Setup) -> Result<Self> {
        let g = &s.geometry;
        let spectra_per_heap = g.spectra_per_heap.context(
            "an engine over katcp does not say its spectra per heap: give --spectra-per-heap",
        )?;
        Ok(Self {
            output: s
                .services
                .engine
                .output_name()
                .unwrap_or(fgpu_api::engine::WIDEBAND)
                .to_string(),
            backend: "katcp".into(),
            channels: g.channels,
            taps: g.taps,
            spectra_per_heap,
            sample_bits: a.system.sample_bits,
            max_delay_s: a.max_delay,
            chunk_samples: a
                .chunk_samples
                .unwrap_or(spectra_per_heap * 4 * 2 * g.channels),
        })
    }
}

/// Runs `harness qualify`; true when every test ran and passed.
pub fn run(a: QualifyArgs) -> Result<bool> {
    if a.list {
        println!("{TESTS_HELP}");
        return Ok(true);
    }
    bringup::one_engine(&a.system, "qualify")?;
    let selected = qualify::select(&a.tests).map_err(|e| anyhow!("--tests: {e}"))?;
    let mut plan = if a.quick { Plan::quick() } else { Plan::full() };
    if let Some(s) = a.spectra {
        if s == 0 {
            bail!("--spectra must be at least 1");
        }
        plan.spectra = s;
    }
    if let Some(p) = a.positions {
        if p == 0 {
            bail!("--positions must be at least 1");
        }
        plan.positions = p;
    }
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let mut sinks = None;
    let mut s = bringup::setup(
        &a.system,
        &a.system.backend,
        None,
        Some(&a.out_dir),
        |g, subs| {
            let spectra = Arc::new(
                Spectra::new(g.channels, subs, g.bits).with_decimation(g.band.decimation()),
            );
            // Channel n/4, or the pass band's edge nearest it (a no-discard output's).
            let pass = g.band.pass_channels(g.channels);
            let response = Arc::new(CrossAccumulator::new(
                (g.channels / 4).clamp(*pass.start(), *pass.end()),
                g.channels,
                subs,
                g.bits,
            ));
            sinks = Some((spectra.clone(), response.clone()));
            let all: Vec<Arc<dyn HeapSink>> = vec![spectra, response];
            Some(Arc::new(Sinks(all)))
        },
    )?;
    announce(&s);
    let (spectra, response) = sinks.context("qualify's sinks")?;
    // An engine over katcp has no status: the command line gives what it would.
    let status = match s.services.engine.status() {
        Ok(st) => Some(st),
        Err(e) if e.downcast_ref::<Unavailable>().is_some() => None,
        Err(e) => return Err(e.context("reading the engine's status")),
    };
    let facts = match &status {
        Some(st) => EngineFacts::of(st, &s.services.engine)?,
        None => EngineFacts::given(&a, &s)?,
    };
    let output = facts.output.as_str();
    let band = s.geometry.band;
    // "all" is every test that means something for this output: filter-response only where
    // there is a DDC filter. One named explicitly is run and says why it does not apply.
    let selected: Vec<_> = if a.tests.trim() == "all" {
        selected
            .into_iter()
            .filter(|c| c.applies_to(&band))
            .collect()
    } else {
        selected
    };
    let adc_rate = s
        .adc_rate
        .filter(|r| *r > 0.0)
        .context("the ADC rate is unknown: give --adc-rate")?;
    let geometry = Geometry {
        channels: facts.channels,
        taps: facts.taps,
        spectra_per_heap: facts.spectra_per_heap,
        adc_rate,
        sample_bits: facts.sample_bits,
        max_delay_samples: facts.max_delay_s * adc_rate,
        chunk_samples: facts.chunk_samples,
        filter: s.geometry.filter,
        output_bits: s.geometry.bits,
        band,
    };
    if geometry.output_bits != OutputBits::Eight {
        tracing::warn!(
            "the engine sends {} output: the suite's signal levels are set for 8-bit output, so \
             its level-dependent checks may clamp or lose resolution",
            geometry.output_bits
        );
    }
    let system = SystemUnderTest {
        engine_url: s.services.engine.url().into(),
        output: Some(output.to_string()),
        dsim_url: s.services.dsim.url().into(),
        backend: facts.backend.clone(),
        channels: geometry.channels,
        taps: geometry.taps,
        spectra_per_heap: geometry.spectra_per_heap,
        adc_sample_rate: adc_rate,
        sample_bits: geometry.sample_bits,
        output_bits: geometry.output_bits.bits(),
        harness_version: env!("CARGO_PKG_VERSION").into(),
        band: Some(judged_band(&band, adc_rate, geometry.channels)),
    };
    // The ADC clock the engine shares with dsim: an engine that loads delay models at Unix
    // times (katcp) is sent the tests' ADC timestamps by it.
    match s.services.dsim.sync_time() {
        Ok(sync_time) => s.services.engine.set_clock(crate::control::Clock {
            sync_time,
            adc_rate,
        }),
        Err(e) => tracing::warn!(
            "dsim's sync time is unknown ({e:#}): an engine that loads delay models at Unix times \
             cannot be sent a load at an ADC timestamp"
        ),
    }
    // What to put back afterwards.
    let signal_before = s.services.dsim.status().ok().map(|d| d.signal);
    let gains_before = s.services.engine.gains().ok();
    let bench = Bench {
        services: s.services,
        rx: s.rx,
        spectra,
        response,
        geometry,
    };
    eprintln!(
        "qualify: {} test(s) on output {output} ({}) of a {} engine, {} channels, {} taps, {:.6} Gsample/s, {} run",
        selected.len(),
        system.band.as_ref().map(|b| b.describe()).unwrap_or_default(),
        system.backend,
        geometry.channels,
        geometry.taps,
        adc_rate / 1e9,
        if plan.quick { "quick" } else { "full" }
    );
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut tests = Vec::new();
    for (i, check) in selected.iter().enumerate() {
        eprintln!(
            "[{}/{}] {}: {}",
            i + 1,
            selected.len(),
            check.name,
            check.title
        );
        let record = if !check.applies_to(&band) {
            qualify::not_run(
                check,
                &format!("a {} output has no DDC filter to judge", band.kind()),
            )
        } else if facts.backend == "null" {
            qualify::not_run(
                check,
                "the null backend computes nothing: there is no signal to qualify",
            )
        } else {
            qualify::run_check(check, &bench, &plan, &mut |line| eprintln!("  {line}"))
        };
        eprintln!(
            "  -> {} ({:.1} s){}",
            record.outcome.word(),
            record.duration_s,
            match &record.outcome {
                Outcome::Pass => String::new(),
                Outcome::Fail { reason } | Outcome::NotRun { reason } => format!(": {reason}"),
            }
        );
        tests.push(record);
        if crate::signals::interrupted() {
            break;
        }
    }
    if !a.no_restore {
        restore(&bench, signal_before, gains_before);
    }
    let pass = tests.len() == selected.len() && tests.iter().all(|t| t.outcome.passed());
    let report = QualifyReport {
        started_unix,
        duration_s: started.elapsed().as_secs_f64(),
        system,
        quick: plan.quick,
        tests,
        pass,
    };
    let (html, json) = render::html::write(&a.out_dir, &report)?;
    println!("{}", render::progress::qualify_table(&report));
    let index = render::index::write(&a.out_dir)?;
    println!(
        "report: {} (and {}; {} links every report in the folder)",
        html.display(),
        json.display(),
        index.display()
    );
    if crate::signals::interrupted() {
        bail!("interrupted");
    }
    Ok(pass)
}

/// The band the report says it judged.
fn judged_band(band: &Band, adc_rate: f64, channels: usize) -> JudgedBand {
    let (low_hz, high_hz) = band.edges_hz(adc_rate, channels);
    JudgedBand {
        kind: band.kind().into(),
        low_hz,
        high_hz,
        centre_hz: band.centre_hz(adc_rate),
        decimation: band.decimation(),
        pass_band_hz: band
            .pass_fraction()
            .map(|_| band.pass_band_hz(adc_rate, channels)),
    }
}

/// Puts dsim's signal and the engine's gains back as they were, and clears the delays; a
/// failure is reported, not fatal (the results stand).
fn restore(
    bench: &Bench,
    signal: Option<fgpu_api::dsim::SignalStatus>,
    gains: Option<fgpu_api::engine::Gains>,
) {
    if let Some(sig) = signal {
        let pol = |i: usize| -> Option<PolSignal> { sig.pols.get(i).map(|p| p.signal.clone()) };
        let req = SignalRequest::Pols(PolsRequest {
            pol0: pol(0),
            pol1: pol(1),
            seed: Some(sig.seed),
        });
        if let Err(e) = bench.services.dsim.set_signal(&req) {
            eprintln!("qualify: could not restore dsim's signal: {e:#}");
        }
    }
    if let Some(g) = gains {
        if let Err(e) = bench.services.engine.set_gains(&g.into()) {
            eprintln!("qualify: could not restore the engine's gains: {e:#}");
        }
    }
    if let Err(e) = bench.clear_delays() {
        eprintln!("qualify: could not clear the engine's delays: {e:#}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// --help names every test, in the suite's order.
    #[test]
    fn help_lists_every_test_in_order() {
        let named: Vec<&str> = TESTS_HELP
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let suite: Vec<&str> = qualify::checks().iter().map(|c| c.name).collect();
        assert_eq!(named, suite);
    }
}

//! `harness`: watch the F-engine's output, search its highest sustained rate, measure its
//! channel response. The work is in the library; this is the command line.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use harness::content::{tone_channel, ContentMonitor};
use harness::control::{CounterNames, Tone};
use harness::receive::{HeapSink, NoSink, ReceiveConfig, Receiver};
use harness::report::{self, MaxRateReport, SearchReport};
use harness::response::{self, CrossAccumulator, ResponseConfig, ResponseGeometry};
use harness::search::{self, SearchConfig};
use harness::services::{self, LocalSpec, Services};
use harness::trial::{self, TrialConfig};
use harness::{gsps, signals, watch};
use serde_json::json;
use spead::transport::Endpoint;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Test harness of the F-engine test bed: watch the output, search the max rate, measure the channel response",
    long_about = "Test harness of the F-engine test bed (dsim -> fengine -> harness).\n\n\
        Two ways to reach the system: running services by URL (--dsim-url, --engine-url, --dst; \
        inside compose), or --local, which launches dsim and fengine here as child processes over \
        loopback and stops them on exit or Ctrl-C.\n\n\
        Units: rates are ADC samples per second per polarisation (1.712e9 or 1712e6); times are \
        seconds; frequencies are Hz. Progress goes to stderr, results (JSON) to stdout and files."
)]
struct Cli {
    /// Log filter (tracing syntax), e.g. info, debug, harness=debug.
    #[arg(long, global = true, default_value = "info", env = "HARNESS_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Join the engine's output substreams and check every heap: gaps, duplicates, late and
    /// malformed heaps, and that the strongest channel is the tone's. Prints a progress line a
    /// second and a JSON summary at the end; exits 1 when gaps, malformed heaps or wrong content
    /// were seen.
    Watch(WatchArgs),
    /// Binary-search the highest ADC rate the system sustains (paper, 5.4): each trial sets
    /// dsim's rate, warms up, then observes a window; it passes when the engine's missing-input
    /// and skipped-output counters did not move, the harness saw no gap, and the output ran at
    /// the rate. Writes a table, JSON and an SVG plot.
    MaxRate(MaxRateArgs),
    /// Measure the channel response (paper, 5.2): step dsim's tone across a channel,
    /// cross-correlate the polarisations, compare with |FT of the PFB weights|^2 in dB. Exits 1
    /// when the deviation above --floor-db exceeds --tolerance-db.
    Response(ResponseArgs),
}

/// The system under test.
#[derive(Args, Clone, Debug)]
struct SystemArgs {
    /// Launch dsim and fengine here as child processes over loopback (instead of the URLs).
    #[arg(long, help_heading = "System")]
    local: bool,
    /// dsim's control URL (URL mode), e.g. http://dsim:8080.
    #[arg(long, env = "HARNESS_DSIM_URL", help_heading = "System")]
    dsim_url: Option<String>,
    /// The engine's control URL (URL mode), e.g. http://fengine:8080.
    #[arg(long, env = "HARNESS_ENGINE_URL", help_heading = "System")]
    engine_url: Option<String>,
    /// Engine output substreams to join, ADDR[+N]:PORT (N+1 consecutive addresses, multicast or
    /// unicast; the engine's --dst). Required in URL mode; with --local the default is
    /// 127.0.0.1+<substreams-1> on a free port.
    #[arg(long, help_heading = "System")]
    dst: Option<String>,
    /// Interface address to join multicast groups on.
    #[arg(long, help_heading = "System")]
    interface: Option<Ipv4Addr>,
    /// Channels n. Default: the engine's /status in URL mode, 1024 with --local.
    #[arg(long, help_heading = "System")]
    channels: Option<usize>,
    /// PFB taps (for the response theory and gap prediction). Default: engine's /status, or 16.
    #[arg(long, help_heading = "System")]
    taps: Option<usize>,
    /// Spectra per output heap. Default: the engine's /status, else learned from the heap size.
    #[arg(long, help_heading = "System")]
    spectra_per_heap: Option<usize>,
    /// Bits per input sample (full scale for the response's gain choice).
    #[arg(long, default_value_t = 10, help_heading = "System")]
    sample_bits: u32,
    /// ADC rate (sample/s per polarisation). With --local, dsim's starting rate [default: 1e8;
    /// max-rate: --high, so that dsim sizes its send threads for it]. In URL mode [default:
    /// dsim's /status].
    #[arg(long, help_heading = "System")]
    adc_rate: Option<f64>,
    /// Socket receive buffer per substream (bytes; capped by net.core.rmem_max).
    #[arg(long, default_value_t = 64 << 20, help_heading = "System")]
    rcvbuf: usize,
    /// Prometheus series of the engine's missing-input counter: words a series name must
    /// contain (comma-separated alternatives are summed).
    #[arg(long, default_value = "missing input", help_heading = "System")]
    missing_metric: String,
    /// Prometheus series of the engine's skipped-output counter (output heaps not sent), as
    /// --missing-metric.
    #[arg(
        long,
        default_value = "skipped output, send errors",
        help_heading = "System"
    )]
    skipped_metric: String,

    /// --local: output substreams (the engine's --dst gets ADDR+<substreams-1>).
    #[arg(long, default_value_t = 4, help_heading = "Local processes")]
    substreams: usize,
    /// --local: engine backend (cpu, cuda, null).
    #[arg(long, default_value = "cpu", help_heading = "Local processes")]
    backend: String,
    /// --local: the dsim binary [default: next to harness, else on PATH].
    #[arg(long, help_heading = "Local processes")]
    dsim_bin: Option<PathBuf>,
    /// --local: the fengine binary [default: next to harness, else on PATH].
    #[arg(long, help_heading = "Local processes")]
    fengine_bin: Option<PathBuf>,
    /// --local: extra dsim arguments, one string (quotes group), e.g. "--seed 3".
    #[arg(long, allow_hyphen_values = true, help_heading = "Local processes")]
    dsim_args: Option<String>,
    /// --local: extra fengine arguments, one string, e.g. "--sample-bits 10".
    #[arg(long, allow_hyphen_values = true, help_heading = "Local processes")]
    fengine_args: Option<String>,
    /// --local: dsim's tone, HZ:AMPL (amplitude a fraction of full scale). Default: the centre
    /// of channel n/4 (fs/8) at 0.5.
    #[arg(long, help_heading = "Local processes")]
    tone: Option<String>,
    /// dsim's Gaussian noise, fraction of full scale (--local: at start, else dsim's default
    /// 0.05; response: set for every step [default there: 0.001]).
    #[arg(long, help_heading = "Local processes")]
    noise: Option<f64>,
    /// --local: dsim's random seed.
    #[arg(long, help_heading = "Local processes")]
    seed: Option<u64>,
    /// --local: loopback addresses per polarisation from dsim to fengine (127.0.0.1+N-1, one
    /// port). Heap k goes to address k mod N, and fengine's receive threads (one per 2 GB/s of
    /// input, at most one per address) each take their share of them.
    #[arg(long, default_value_t = 1, help_heading = "Local processes")]
    input_addresses: usize,
    /// --local: seconds each process may take to answer /status.
    #[arg(long, default_value_t = 120.0, help_heading = "Local processes")]
    startup_timeout: f64,
    /// --local: directory for the children's logs [default: <out-dir>/logs, or a temp dir].
    #[arg(long, help_heading = "Local processes")]
    log_dir: Option<PathBuf>,
}

#[derive(Args)]
struct WatchArgs {
    #[command(flatten)]
    system: SystemArgs,
    /// Seconds to watch [default: until Ctrl-C].
    #[arg(long)]
    duration: Option<f64>,
    /// The tone's frequency (Hz) to check against [default: dsim's /status, or the --local tone].
    #[arg(long)]
    expect_tone_hz: Option<f64>,
    /// Do not check content (the null backend sends zeros).
    #[arg(long)]
    no_content_check: bool,
    /// Seconds between heaps sampled for content, per substream.
    #[arg(long, default_value_t = 0.05)]
    content_interval: f64,
    /// Also write the JSON summary here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct MaxRateArgs {
    #[command(flatten)]
    system: SystemArgs,
    /// Lowest rate tried (sample/s per polarisation).
    #[arg(long)]
    low: f64,
    /// Highest rate tried (sample/s per polarisation).
    #[arg(long)]
    high: f64,
    /// Search resolution (sample/s).
    #[arg(long, default_value_t = 10e6)]
    resolution: f64,
    /// Warm-up per trial (s), not observed.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// After the warm-up, wait up to this long (s) for the engine's loss counters and the gaps
    /// to stop moving before observing: a system still recovering from the previous trial's
    /// overload is not judged at the new rate yet. 0 observes straight after the warm-up.
    #[arg(long, default_value_t = 20.0)]
    settle: f64,
    /// Observation window per trial (s).
    #[arg(long, default_value_t = 20.0)]
    window: f64,
    /// Extra trials of the boundary pass before it is accepted (every one must pass).
    #[arg(long, default_value_t = 1)]
    repeats: u32,
    /// Fraction by which the received rate may fall short of the requested one.
    #[arg(long, default_value_t = 0.02)]
    rate_tolerance: f64,
    /// Run the same search with the engine's null backend and report the ratio.
    #[arg(long)]
    compare_null: bool,
    /// URL mode with --compare-null: the null-backend engine's control URL.
    #[arg(long)]
    null_engine_url: Option<String>,
    /// URL mode with --compare-null: the null-backend engine's output substreams.
    #[arg(long)]
    null_dst: Option<String>,
    /// Where the table (max-rate.txt), JSON (max-rate.json) and plot (max-rate.svg) go.
    #[arg(long, default_value = "harness-max-rate")]
    out_dir: PathBuf,
}

#[derive(Args)]
struct ResponseArgs {
    #[command(flatten)]
    system: SystemArgs,
    /// The channel measured [default: n/4].
    #[arg(long)]
    channel: Option<usize>,
    /// Channels each side of the centre the tone visits.
    #[arg(long, default_value_t = 2.0)]
    span: f64,
    /// Tone steps per channel.
    #[arg(long, default_value_t = 16)]
    steps_per_channel: usize,
    /// Integration per step (s).
    #[arg(long, default_value_t = 1.0)]
    integration: f64,
    /// Wait after each tone/gain change before integrating (s).
    #[arg(long, default_value_t = 0.5)]
    settle: f64,
    /// Tone amplitude, fraction of full scale.
    #[arg(long, default_value_t = 0.9)]
    amplitude: f64,
    /// Output level (counts) each step's gain aims the tone at.
    #[arg(long, default_value_t = 40.0)]
    target: f64,
    /// Largest gain set.
    #[arg(long, default_value_t = 1000.0)]
    max_gain: f64,
    /// Keep the engine's gain (no PUT /gains; the 8-bit output then limits the range).
    #[arg(long)]
    no_gains: bool,
    /// Compare only where the theory is above this (dB).
    #[arg(long, default_value_t = -60.0, allow_hyphen_values = true)]
    floor_db: f64,
    /// Largest deviation (dB) that passes.
    #[arg(long, default_value_t = 0.5)]
    tolerance_db: f64,
    /// Where response.json and response.svg go.
    #[arg(long, default_value = "harness-response")]
    out_dir: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    signals::install();
    let result = match cli.command {
        Command::Watch(a) => run_watch(a),
        Command::MaxRate(a) => run_max_rate(a),
        Command::Response(a) => run_response(a),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("harness: {e:#}");
            ExitCode::from(if signals::interrupted() { 130 } else { 2 })
        }
    }
}

/// Geometry settled from the command line, the engine's status and defaults.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    channels: usize,
    taps: usize,
    spectra_per_heap: Option<usize>,
}

/// A running system and the receiver on its output.
struct Setup {
    services: Services,
    rx: Receiver,
    geometry: Geometry,
    /// dsim's ADC rate (sample/s).
    adc_rate: Option<f64>,
    /// dsim's tone.
    tone: Option<Tone>,
    backend: String,
}

fn parse_tone(s: &str) -> Result<Tone> {
    let (f, a) = s.split_once(':').unwrap_or((s, "0.5"));
    Ok(Tone {
        frequency: f
            .trim()
            .parse()
            .with_context(|| format!("tone frequency in '{s}'"))?,
        amplitude: a
            .trim()
            .parse()
            .with_context(|| format!("tone amplitude in '{s}'"))?,
    })
}

fn counter_names(sys: &SystemArgs) -> CounterNames {
    CounterNames {
        missing_input: sys.missing_metric.clone(),
        skipped_output: sys.skipped_metric.clone(),
    }
}

/// Brings the system up: by URL, or launched here (`backend` overrides --backend). `sink` gets
/// the geometry and the substream count; None means only heaps are counted (no payload copy).
fn setup(
    sys: &SystemArgs,
    backend: &str,
    urls: Option<(&str, &str)>,
    out_dir: Option<&std::path::Path>,
    sink: impl FnOnce(&Geometry, usize) -> Option<Arc<dyn HeapSink>>,
) -> Result<Setup> {
    if sys.local {
        let channels = sys.channels.unwrap_or(1024);
        let geometry = Geometry {
            channels,
            taps: sys.taps.unwrap_or(16),
            spectra_per_heap: sys.spectra_per_heap,
        };
        if sys.substreams == 0 {
            bail!("--substreams must be at least 1");
        }
        let dst: Endpoint = match &sys.dst {
            Some(d) => d.parse().map_err(anyhow::Error::msg)?,
            None => format!("127.0.0.1+{}:0", sys.substreams - 1)
                .parse()
                .map_err(anyhow::Error::msg)?,
        };
        let rate = sys.adc_rate.unwrap_or(100e6);
        let tone = match &sys.tone {
            Some(t) => parse_tone(t)?,
            None => Tone {
                frequency: rate / 8.0,
                amplitude: 0.5,
            },
        };
        let rx = start_receiver(sys, &dst, &geometry, sink(&geometry, dst.addrs.len()))?;
        let log_dir = sys.log_dir.clone().unwrap_or_else(|| match out_dir {
            Some(d) => d.join("logs"),
            None => std::env::temp_dir().join(format!("harness-logs-{}", std::process::id())),
        });
        let spec = LocalSpec {
            dsim_bin: sys
                .dsim_bin
                .clone()
                .unwrap_or_else(|| services::sibling_binary("dsim")),
            fengine_bin: sys
                .fengine_bin
                .clone()
                .unwrap_or_else(|| services::sibling_binary("fengine")),
            dsim_args: services::split_args(sys.dsim_args.as_deref().unwrap_or("")),
            fengine_args: services::split_args(sys.fengine_args.as_deref().unwrap_or("")),
            backend: backend.to_string(),
            channels,
            taps: geometry.taps,
            spectra_per_heap: sys.spectra_per_heap,
            rate,
            tone: Some(tone),
            noise: sys.noise,
            seed: sys.seed,
            input_addresses: sys.input_addresses.clamp(1, 64),
            startup_timeout: Duration::from_secs_f64(sys.startup_timeout.max(0.1)),
            log_dir,
        };
        let services = Services::launch(&spec, &rx.endpoint(), counter_names(sys))?;
        eprintln!(
            "local system: fengine --backend {backend} ({}), dsim ({}), output {}",
            services.engine.url(),
            services.dsim.url(),
            rx.endpoint()
        );
        return Ok(Setup {
            services,
            rx,
            geometry,
            adc_rate: Some(rate),
            tone: Some(tone),
            backend: backend.to_string(),
        });
    }
    let (dsim_url, engine_url) = match urls {
        Some(u) => u,
        None => (
            sys.dsim_url
                .as_deref()
                .context("URL mode needs --dsim-url (or use --local)")?,
            sys.engine_url
                .as_deref()
                .context("URL mode needs --engine-url (or use --local)")?,
        ),
    };
    let services = Services::connect(dsim_url, engine_url, counter_names(sys));
    let eg = services
        .engine
        .geometry()
        .map_err(|e| tracing::warn!("engine /status unreadable ({e:#}); using the command line"))
        .ok();
    let status = services
        .dsim
        .status()
        .map_err(|e| tracing::warn!("dsim /status unreadable ({e:#})"))
        .ok();
    let geometry = Geometry {
        channels: sys
            .channels
            .or(eg.map(|g| g.channels))
            .context("--channels is needed (the engine's /status does not say)")?,
        taps: sys.taps.or(eg.map(|g| g.taps)).unwrap_or(16),
        spectra_per_heap: sys.spectra_per_heap.or(eg.map(|g| g.spectra_per_heap)),
    };
    let dst: Endpoint = sys
        .dst
        .as_deref()
        .context("URL mode needs --dst, the engine's output ADDR[+N]:PORT")?
        .parse()
        .map_err(anyhow::Error::msg)?;
    let rx = start_receiver(sys, &dst, &geometry, sink(&geometry, dst.addrs.len()))?;
    Ok(Setup {
        services,
        rx,
        geometry,
        adc_rate: sys
            .adc_rate
            .or(status.as_ref().map(|s| s.rate))
            .or(eg.map(|g| g.adc_sample_rate)),
        tone: status.as_ref().and_then(|s| s.strongest_tone()),
        backend: backend.to_string(),
    })
}

fn start_receiver(
    sys: &SystemArgs,
    dst: &Endpoint,
    g: &Geometry,
    sink: Option<Arc<dyn HeapSink>>,
) -> Result<Receiver> {
    let mut cfg = ReceiveConfig::new(dst.addrs.clone(), g.channels);
    cfg.payload = sink.is_some();
    let sink = sink.unwrap_or_else(|| Arc::new(NoSink));
    cfg.spectra_per_heap = g.spectra_per_heap;
    cfg.interface = sys.interface;
    cfg.buffer_bytes = sys.rcvbuf;
    Ok(Receiver::start(&cfg, sink)?)
}

fn run_watch(a: WatchArgs) -> Result<bool> {
    let mut monitor = None;
    let interval = Duration::from_secs_f64(a.content_interval.max(0.0));
    let s = setup(&a.system, &a.system.backend, None, None, |g, subs| {
        let m = Arc::new(ContentMonitor::new(g.channels, subs, interval));
        monitor = Some(m.clone());
        Some(m)
    })?;
    let monitor = monitor.context("content monitor")?;
    let expected_channel = if a.no_content_check || s.backend == "null" {
        None
    } else {
        let freq = a.expect_tone_hz.or(s.tone.map(|t| t.frequency));
        match (freq, s.adc_rate) {
            (Some(f), Some(fs)) => Some(tone_channel(f, fs, s.geometry.channels)),
            _ => {
                tracing::warn!("tone or ADC rate unknown: content reported, not checked");
                None
            }
        }
    };
    let opts = watch::WatchOptions {
        duration: a.duration.map(|d| Duration::from_secs_f64(d.max(0.0))),
        expected_channel,
        progress_interval: Duration::from_secs(1),
        progress: !a.quiet,
    };
    let Setup { services, rx, .. } = s;
    let summary = watch::run(
        rx,
        monitor,
        &opts,
        Some(&services.engine),
        Some(&services.dsim),
    )?;
    drop(services);
    let text = serde_json::to_string_pretty(&summary)?;
    println!("{text}");
    if let Some(p) = &a.json {
        std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    if !summary.ok {
        eprintln!("watch: FAILED: {}", summary.failures.join("; "));
    }
    Ok(summary.ok)
}

fn run_max_rate(a: MaxRateArgs) -> Result<bool> {
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
    let mut backends = vec![a.system.backend.clone()];
    if a.compare_null {
        if !a.system.local && (a.null_engine_url.is_none() || a.null_dst.is_none()) {
            bail!("--compare-null needs --local, or --null-engine-url and --null-dst in URL mode");
        }
        backends.push("null".into());
    }
    let mut report = MaxRateReport {
        searches: Vec::new(),
        ratio_to_null: None,
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
        let mut s = setup(&sys, backend, urls, Some(&a.out_dir), |_, _| None)?;
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
            )?;
            eprintln!("{}", trial::summary_line(&t));
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
                    config: cfg,
                    best: None,
                    lowest_fail: None,
                    trials,
                });
                write_max_rate(&a.out_dir, &mut report)?;
                return Err(e.context("search stopped; the trials so far are in the report"));
            }
        };
        eprintln!(
            "{backend_name}: highest sustained {} Gsample/s",
            result.best.map_or("none".into(), gsps)
        );
        report.searches.push(SearchReport {
            backend: backend_name,
            config: cfg,
            best: result.best,
            lowest_fail: result.lowest_fail,
            trials,
        });
    }
    write_max_rate(&a.out_dir, &mut report)?;
    Ok(report.searches.iter().all(|s| s.best.is_some()))
}

fn write_max_rate(dir: &std::path::Path, report: &mut MaxRateReport) -> Result<()> {
    report.compute_ratio();
    let table = report::table(report);
    print!("{table}");
    std::fs::write(dir.join("max-rate.txt"), &table)?;
    report::write_json(&dir.join("max-rate.json"), report)?;
    report::plot_trials(&dir.join("max-rate.svg"), report)?;
    eprintln!("wrote {}/max-rate.{{txt,json,svg}}", dir.display());
    Ok(())
}

fn run_response(a: ResponseArgs) -> Result<bool> {
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let mut acc = None;
    let channel_arg = a.channel;
    let s = setup(
        &a.system,
        &a.system.backend,
        None,
        Some(&a.out_dir),
        |g, subs| {
            let channel = channel_arg.unwrap_or(g.channels / 4);
            let c = Arc::new(CrossAccumulator::new(channel, g.channels, subs));
            acc = Some(c.clone());
            Some(c)
        },
    )?;
    let acc = acc.context("accumulator")?;
    let channel = a.channel.unwrap_or(s.geometry.channels / 4);
    if channel >= s.geometry.channels {
        bail!(
            "--channel {channel} is not below {} channels",
            s.geometry.channels
        );
    }
    let geometry = ResponseGeometry {
        channels: s.geometry.channels,
        taps: s.geometry.taps,
        sample_bits: a.system.sample_bits,
        adc_rate: s
            .adc_rate
            .context("the ADC rate is unknown: give --adc-rate")?,
    };
    let config = ResponseConfig {
        channel,
        span: a.span,
        steps_per_channel: a.steps_per_channel,
        integration: Duration::from_secs_f64(a.integration.max(0.0)),
        settle: Duration::from_secs_f64(a.settle.max(0.0)),
        amplitude: a.amplitude,
        // Little noise, so that high gains far from the centre do not clamp it (dither stays).
        noise: Some(a.system.noise.unwrap_or(0.001)),
        target: a.target,
        max_gain: a.max_gain,
        floor_db: a.floor_db,
        tolerance_db: a.tolerance_db,
        set_gains: !a.no_gains,
    };
    // Give the system a moment to produce output before the first step.
    signals::sleep(Duration::from_millis(500))?;
    let result = response::measure(&s.services, &s.rx, &acc, config, geometry);
    let Setup { services, rx, .. } = s;
    drop(rx);
    drop(services);
    let r = result?;
    report::write_json(&a.out_dir.join("response.json"), &r)?;
    let theory = response::theory_curve(&geometry, -a.span.abs(), a.span.abs(), 801);
    report::plot_response(
        &a.out_dir.join("response.svg"),
        &theory,
        &r.points,
        a.floor_db,
        &format!(
            "channel response: {} channels, {} taps, channel {}",
            geometry.channels, geometry.taps, channel
        ),
    )?;
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "pass": r.pass,
            "max_deviation_db": r.max_deviation_db,
            "worst_offset": r.worst_offset,
            "compared_points": r.compared,
            "floor_db": a.floor_db,
            "tolerance_db": a.tolerance_db,
            "json": a.out_dir.join("response.json"),
            "svg": a.out_dir.join("response.svg"),
        }))?
    );
    Ok(r.pass)
}

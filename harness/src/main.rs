//! `harness`: watch the F-engine's output, search its highest sustained rate, measure its
//! channel response. The work is in the library (each command in `harness::commands`); this is
//! the command line and the dispatch.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use harness::commands::{max_rate, qualify, response, soak, watch};
use harness::signals;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Test harness of the F-engine test bed: watch the output, search the max rate, measure the channel response, qualify the engine, soak the system",
    long_about = "Test harness of the F-engine test bed (dsim -> fengine -> harness).\n\n\
        Two ways to reach the system: running services by URL (--dsim-url, --engine-url, and --dst \
        where the engine's /status cannot say where its output goes; inside compose), or --local, \
        which launches dsim and fengine here as child processes over loopback and stops them on \
        exit or Ctrl-C. Of an engine with several outputs, --output NAME says which to read \
        [default: its only output, else the one named wideband].\n\n\
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
    Watch(watch::WatchArgs),
    /// Binary-search the highest ADC rate the system sustains (paper, 5.4): each trial sets
    /// dsim's rate, warms up, then observes a window; it passes when the engine's missing-input
    /// and skipped-output counters did not move, the harness saw no gap, and the output ran at
    /// the rate. Writes a table, JSON and an SVG plot.
    MaxRate(max_rate::MaxRateArgs),
    /// Measure the channel response (paper, 5.2): step dsim's tone across a channel,
    /// cross-correlate the polarisations, compare with |FT of the PFB weights|^2 in dB. Exits 1
    /// when the deviation above --floor-db exceeds --tolerance-db.
    Response(response::ResponseArgs),
    /// Qualify the engine as CBF engineers do (katgpucbf's antenna-channelised-voltage suite,
    /// measured on the engine's output): channelisation and SFDR, channel shape, linearity,
    /// gains, delay, delay and phase rates, delay enable/disable, application time, group delay,
    /// saturation counters, lost data. Drives dsim (per-polarisation signals) and the engine
    /// (gains, delays) through their control APIs; writes qualify.html (self-contained, plots
    /// inline) and qualify.json to --out-dir. Exits 1 unless every test ran and passed.
    Qualify(qualify::QualifyArgs),
    /// Soak the system: run it at one rate (--fraction of --max-rate, or of max-rate.json's
    /// result) for --duration while watch checks every heap, and once an --interval sample every
    /// process's resident memory, open descriptors and threads (the services' process_* series
    /// in /metrics, the harness's /proc/self) and every loss counter. Prints a line per sample;
    /// writes soak.json (the time series and the verdict) and SVG plots of memory over time.
    /// Exits 1 on any loss or gap, memory grown past --rss-growth over its baseline,
    /// descriptors or threads past their slack, a restart, or a sample not read whole.
    Soak(soak::SoakArgs),
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
        Command::Watch(a) => watch::run(a),
        Command::MaxRate(a) => max_rate::run(a),
        Command::Response(a) => response::run(a),
        Command::Qualify(a) => qualify::run(a),
        Command::Soak(a) => soak::run(a),
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

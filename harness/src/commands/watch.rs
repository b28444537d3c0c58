//! `harness watch`: join the engine's output, check every heap, print a progress line a second
//! and end with a JSON summary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::announce;
use crate::bringup::{self, Setup, SystemArgs};
use crate::content::{ContentMonitor, Expected};
use crate::dashboard::{self, Dashboard};
use crate::feed::{Feed, Next, Reader};
use crate::receive::{HeapSink, PerEngine};
use crate::record::WatchInterval;
use crate::render::progress::watch_lines;
use crate::watch::{self, Watched};

/// Interval records the feed keeps for a reader that falls behind (a minute at one a second).
const FEED_KEEP: usize = 64;

#[derive(Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    /// Seconds to watch [default: until Ctrl-C].
    #[arg(long)]
    pub duration: Option<f64>,
    /// The tone's frequency (Hz) to check against [default: dsim's /status, or the --local tone].
    /// With --engines, one for every engine or a comma-separated list of one per engine.
    #[arg(long, value_delimiter = ',')]
    pub expect_tone_hz: Vec<f64>,
    /// Do not check content (the null backend sends zeros).
    #[arg(long)]
    pub no_content_check: bool,
    /// Seconds between heaps sampled for content, per substream.
    #[arg(long, default_value_t = 0.05)]
    pub content_interval: f64,
    /// Also write the JSON summary here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Serve a live page here (e.g. 127.0.0.1:8080; port 0 picks one): per polarisation the
    /// spectrum and a waterfall, the counters, the rate, and controls for dsim's tone and the
    /// engine's gain and delay. Open http://ADDR:PORT/ in a browser; GET /api/status gives the
    /// same as JSON. Its controls are open to whoever reaches the address: bind 127.0.0.1
    /// unless the network is yours.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// With --http: show, do not control (the control requests answer 403).
    #[arg(long, requires = "http")]
    pub http_read_only: bool,
}

/// Runs `harness watch`; true when the run was clean.
pub fn run(a: WatchArgs) -> Result<bool> {
    let engines = bringup::array_size(&a.system)?.unwrap_or(1);
    if !matches!(a.expect_tone_hz.len(), 0 | 1) && a.expect_tone_hz.len() != engines {
        bail!(
            "--expect-tone-hz lists {} tones for {engines} engines: give one, or one per engine",
            a.expect_tone_hz.len()
        );
    }
    let mut monitors = Vec::new();
    let interval = Duration::from_secs_f64(a.content_interval.max(0.0));
    let s = bringup::setup(&a.system, &a.system.backend, None, None, |g, subs| {
        monitors = (0..engines)
            .map(|_| Arc::new(ContentMonitor::new(g.channels, subs, interval, g.bits)))
            .collect();
        let sinks: Vec<Arc<dyn HeapSink>> = monitors
            .iter()
            .map(|m| m.clone() as Arc<dyn HeapSink>)
            .collect();
        Some(Arc::new(PerEngine(sinks)))
    })?;
    announce(&s);
    let watched: Vec<Watched> = monitors
        .into_iter()
        .enumerate()
        .map(|(i, monitor)| {
            let expected_channel = if a.no_content_check || s.backend == "null" {
                None
            } else {
                let given = a.expect_tone_hz.get(i).or(a.expect_tone_hz.first());
                let freq =
                    given
                        .copied()
                        .or(s.tones.get(i).copied().flatten().map(|t| t.frequency));
                match (freq, s.adc_rate) {
                    (Some(f), Some(fs)) => {
                        Some(s.geometry.band.channel(f, fs, s.geometry.channels))
                    }
                    _ => {
                        tracing::warn!(
                            "engine {i}: tone or ADC rate unknown: content reported, not checked"
                        );
                        None
                    }
                }
            };
            let antenna = s.services.antennas.get(i);
            Watched {
                monitor,
                expected: Expected::new(expected_channel),
                engine: antenna.map(|a| a.engine.clone()),
                dsim: antenna.map(|a| a.dsim.clone()),
            }
        })
        .collect();
    let expected = watched
        .first()
        .map(|w| w.expected.clone())
        .context("no engine to watch")?;
    let opts = watch::WatchOptions {
        duration: a.duration.map(|d| Duration::from_secs_f64(d.max(0.0))),
        progress_interval: Duration::from_secs(1),
        output_label: s.output_label().map(String::from),
    };
    let output = s.output_name().map(String::from);
    // The progress lines are one reader of the interval feed; the live page is another.
    let feed = Feed::new(FEED_KEEP);
    let page = match a.http {
        Some(addr) => {
            let ctx = dashboard::Config {
                engine: Some(s.services.engine.clone()),
                dsim: Some(s.services.dsim.clone()),
                adc_rate: s.adc_rate,
                backend: s.backend.clone(),
                channels: s.geometry.channels,
                band: s.geometry.band,
                output: s.output_label().map(String::from),
                expected,
                controls: !a.http_read_only,
            };
            let page = Dashboard::start(addr, ctx, feed.reader())?;
            eprintln!("watch: live page on http://{}/", page.addr());
            Some(page)
        }
        None => None,
    };
    let printer = (!a.quiet).then(|| print_intervals(feed.reader()));
    let Setup { services, rx, .. } = s;
    let summary = watch::run(rx, &watched, &opts, &feed);
    feed.close();
    if let Some(p) = printer {
        let _ = p.join();
    }
    if let Some(p) = page {
        p.join();
    }
    let mut summary = summary?;
    summary.output = output;
    drop(services);
    let text = serde_json::to_string_pretty(&summary)?;
    println!("{text}");
    if let Some(p) = &a.json {
        std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    if !summary.ok {
        eprintln!("watch: FAILED: {}", summary.failures.join("; "));
        if let Some(s) = &summary.stalls {
            eprintln!("watch: engine stalls: {}", s.line());
        }
    }
    Ok(summary.ok)
}

/// Prints each interval record as it is published, until the feed closes.
fn print_intervals(mut reader: Reader<WatchInterval>) -> JoinHandle<()> {
    std::thread::spawn(move || loop {
        match reader.next(Duration::from_secs(3600)) {
            Next::Record(_, r) => {
                for line in watch_lines(&r) {
                    eprintln!("{line}");
                }
            }
            Next::Missed(_) | Next::TimedOut => {}
            Next::Closed => return,
        }
    })
}

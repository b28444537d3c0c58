//! `harness watch --http`: a live page served by the harness itself. Per polarisation the
//! averaged spectrum and a waterfall, the gap and loss counters, the received against the
//! configured rate and the services' state, pushed once an interval over server-sent events;
//! and, unless read-only, controls that set dsim's tone and the engine's gain and delay through
//! their control APIs.
//!
//! Three parts, each on its own thread so none holds up the watch loop: the composer follows the
//! watch feed and makes each interval a [`frame::Frame`] (its spectrum decimated to a screen's
//! width); the poller reads the engine's counters and dsim's state once a second (a slow service
//! delays nobody's frames); the server (axum on a one-thread runtime, behind the same limits as
//! the control servers) serves the page, the events and the JSON.

pub mod frame;
mod poll;
mod server;

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::{broadcast, watch};

use crate::content::Expected;
use crate::control::{Dsim, Engine};
use crate::feed::{Next, Reader};
use crate::record::WatchInterval;
use frame::{Averager, Frame};
use poll::Polled;

/// Frames kept for `GET /api/status?seq=N` (a minute at one a second).
const KEEP: usize = 64;

/// What the page is about.
#[derive(Clone)]
pub struct Config {
    pub engine: Option<Engine>,
    pub dsim: Option<Dsim>,
    /// The rate the harness was given or read from dsim at the start (sample/s).
    pub adc_rate: Option<f64>,
    pub backend: String,
    /// The engine's channels, to place a new tone.
    pub channels: usize,
    /// The frequencies the channels cover, to place a new tone and label the page's axis.
    pub band: crate::band::Band,
    /// The output watched, where the engine has several (the page's title names it).
    pub output: Option<String>,
    /// The content check's tone channel, which follows a tone set from the page.
    pub expected: Expected,
    /// Whether the page may change the tone, gain and delay.
    pub controls: bool,
}

/// A serialized frame and its number.
type Published = (u64, Arc<str>);

/// What the threads share.
struct Shared {
    frames: Mutex<VecDeque<Published>>,
    /// Taken (and so dropped) at the end: the event streams then finish.
    events: Mutex<Option<broadcast::Sender<Published>>>,
    closed: watch::Sender<bool>,
    polled: Mutex<Polled>,
    ctx: Config,
}

impl Shared {
    fn latest(&self) -> Option<Published> {
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .back()
            .cloned()
    }

    /// Every frame kept, oldest first.
    fn kept(&self) -> VecDeque<Published> {
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn frame(&self, seq: u64) -> Option<Published> {
        let frames = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        frames.iter().find(|f| f.0 == seq).cloned()
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<Published>> {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.as_ref().map(broadcast::Sender::subscribe)
    }

    fn publish(&self, seq: u64, json: String) {
        let f: Published = (seq, json.into());
        let mut frames = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        if frames.len() == KEEP {
            frames.pop_front();
        }
        frames.push_back(f.clone());
        drop(frames);
        if let Some(tx) = &*self.events.lock().unwrap_or_else(|e| e.into_inner()) {
            // No page open is not an error.
            let _ = tx.send(f);
        }
    }

    fn close(&self) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.closed.send_replace(true);
    }
}

/// The running page; [`Dashboard::join`] waits for it to finish once the feed closes.
pub struct Dashboard {
    addr: SocketAddr,
    threads: Vec<JoinHandle<()>>,
}

impl Dashboard {
    /// Binds `addr` (an error here, such as the port in use, stops the watch before it starts)
    /// and serves the page until `reader`'s feed closes.
    pub fn start(addr: SocketAddr, ctx: Config, reader: Reader<WatchInterval>) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("--http {addr}: cannot listen there"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (events, _) = broadcast::channel(16);
        let shared = Arc::new(Shared {
            frames: Mutex::new(VecDeque::with_capacity(KEEP)),
            events: Mutex::new(Some(events)),
            closed: watch::channel(false).0,
            polled: Mutex::new(Polled::default()),
            ctx,
        });
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .context("starting the page's threads")
        };
        let threads = vec![
            spawn("page-server", {
                let s = shared.clone();
                Box::new(move || server::run(listener, s))
            })?,
            spawn("page-poller", {
                let s = shared.clone();
                Box::new(move || poll::run(&s))
            })?,
            spawn("page-composer", {
                let s = shared.clone();
                Box::new(move || compose(reader, &s))
            })?,
        ];
        Ok(Self { addr, threads })
    }

    /// Where the page is served (the port chosen, when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Makes a frame of each interval of the feed until it closes, then closes the page.
fn compose(mut reader: Reader<WatchInterval>, shared: &Shared) {
    let mut average = Averager::default();
    loop {
        match reader.next(Duration::from_secs(3600)) {
            Next::Record(seq, r) => {
                let polled = shared
                    .polled
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let frame = make_frame(seq, &r, &polled, &mut average, &shared.ctx);
                match serde_json::to_string(&frame) {
                    Ok(json) => shared.publish(seq, json),
                    Err(e) => tracing::warn!("page: frame {seq} not serialised: {e}"),
                }
            }
            Next::Missed(_) | Next::TimedOut => {}
            Next::Closed => break,
        }
    }
    shared.close();
}

fn make_frame(
    seq: u64,
    r: &WatchInterval,
    polled: &Polled,
    average: &mut Averager,
    ctx: &Config,
) -> Frame {
    let power = &r.power;
    let per_bin = frame::channels_per_bin(power.channels());
    let latest = [0, 1].map(|pol| frame::decimate(power, pol, per_bin));
    average.add(&latest);
    let mut counters = frame::counters(r);
    polled.fill(&mut counters);
    let adc_rate = ctx.adc_rate.or(polled.dsim_rate);
    let channels = power.channels();
    Frame {
        seq,
        elapsed_s: r.elapsed_s,
        rate: frame::Rates {
            received: r.sample_rate,
            configured: polled.dsim_rate.or(ctx.adc_rate),
            heaps_per_s: r.heaps_per_s,
        },
        counters,
        spectrum: frame::Spectrum {
            channels,
            channels_per_bin: per_bin,
            adc_rate,
            output: ctx.output.clone(),
            kind: ctx.band.kind(),
            first_channel_hz: adc_rate.map(|fs| ctx.band.frequency(0.0, fs, channels)),
            channel_width_hz: adc_rate.map(|fs| ctx.band.channel_width(fs, channels)),
            expected_channel: r.expected_channel,
            latest: latest.each_ref().map(|l| frame::to_db(l)),
            average: average.get().each_ref().map(|a| frame::to_db(a)),
            peaks: r.peaks.map(|p| p.as_ref().map(Into::into)),
        },
        verdict: r.verdict,
        engine: polled.engine_state(ctx),
        input_rms_dbfs: polled.input_rms_dbfs(),
        dsim: polled.dsim_state(ctx),
        controls: ctx.controls,
    }
}

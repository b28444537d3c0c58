//! The `watch` loop: receive the engine's output and, once an interval, publish a
//! [`WatchInterval`] record (rates, sequence counts, the content check); at the end, a
//! [`WatchSummary`] whose `ok` says whether gaps, malformed heaps or wrong content were seen.
//! Nothing here prints: readers of the feed render the intervals. An array's engines are
//! followed at once, each judged on its own heaps (told apart by feng_id), its tone and its
//! counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::content::{self, ChannelPower, ContentMonitor, Expected, Verdict};
use crate::control::{Dsim, DsimLag, Engine, EngineCounters};
use crate::feed::Feed;
use crate::receive::{udp_rcvbuf_errors, Receiver, SubstreamSnapshot};
use crate::record::{
    ContentSummary, EngineInterval, EngineSummary, PolSensors, WatchInterval, WatchSummary,
};
use crate::signals;
use fgpu_api::engine::PolInput;

#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Stop after this long (None: until Ctrl-C).
    pub duration: Option<Duration>,
    /// How often an interval record is published.
    pub progress_interval: Duration,
    /// The output's name for the interval records, where the engine has several.
    pub output_label: Option<String>,
}

/// One engine as the watch follows it: the monitor its heaps go to, the tone expected in them,
/// and, where reachable, the engine's and its dsim's control APIs.
#[derive(Clone)]
pub struct Watched {
    pub monitor: Arc<ContentMonitor>,
    /// The tone's fractional channel, when known (a live page may move it).
    pub expected: Expected,
    /// With `engine`, its counters over the run go in the summary, to tell loss in the engine
    /// from loss on the way to the harness; with `dsim`, the heaps it skipped because it fell
    /// behind.
    pub engine: Option<Engine>,
    pub dsim: Option<Dsim>,
}

/// What the loop keeps per engine.
struct Followed<'a> {
    w: &'a Watched,
    content: ContentSummary,
    engine_before: Option<EngineCounters>,
    lag_before: Option<DsimLag>,
    /// The input polarisations at the latest reading of the engine's status.
    input_before: Option<Vec<PolInput>>,
}

impl Followed<'_> {
    fn dsim_lag(&self) -> Option<DsimLag> {
        self.w
            .dsim
            .as_ref()
            .and_then(|d| Some(DsimLag::of(&d.status().ok()?)))
    }
    fn engine_counters(&self) -> Option<EngineCounters> {
        self.w.engine.as_ref().and_then(|e| e.counters().ok())
    }
    fn input(&self) -> Option<Vec<PolInput>> {
        self.w
            .engine
            .as_ref()
            .and_then(|e| Some(e.status().ok()?.input.pols))
    }
    /// The input sensors since the previous reading of the engine's status (None when this
    /// one or every earlier one failed; a failed reading leaves the next interval to cover its
    /// time).
    fn input_sensors(&mut self) -> Option<Vec<PolSensors>> {
        let now = self.input()?;
        let sensors = self
            .input_before
            .as_ref()
            .map(|before| PolSensors::between(before, &now));
        self.input_before = Some(now);
        sensors
    }
}

/// Watches until the duration passes or a signal comes, then stops the receiver, publishing a
/// record to `feed` each interval (the feed is left open: the caller closes it). `watched` holds
/// one entry per engine the receiver tells apart, in feng_id order (one without an array).
pub fn run(
    rx: Receiver,
    watched: &[Watched],
    opts: &WatchOptions,
    feed: &Feed<WatchInterval>,
) -> Result<WatchSummary> {
    anyhow::ensure!(
        watched.len() == rx.engines(),
        "{} engines watched, {} told apart by the receiver",
        watched.len(),
        rx.engines()
    );
    let array = rx.is_array();
    let mut followed: Vec<Followed> = watched
        .iter()
        .map(|w| {
            let mut f = Followed {
                w,
                content: ContentSummary {
                    expected_channel: w.expected.channel(),
                    ..Default::default()
                },
                engine_before: None,
                lag_before: None,
                input_before: None,
            };
            f.engine_before = f.engine_counters();
            f.lag_before = f.dsim_lag();
            f.input_before = f.input();
            f
        })
        .collect();
    let rcvbuf_before = udp_rcvbuf_errors();
    let start = Instant::now();
    let mut prev = rx.snapshot();
    let mut prev_at = Instant::now();
    loop {
        let remaining = opts
            .duration
            .map(|d| d.saturating_sub(start.elapsed()))
            .unwrap_or(opts.progress_interval);
        let nap = remaining.min(opts.progress_interval);
        let interrupted = signals::sleep(nap).is_err();
        let now = rx.snapshot();
        let secs = prev_at.elapsed().as_secs_f64();
        prev_at = Instant::now();
        let mut engines = Vec::with_capacity(followed.len());
        let mut powers = Vec::with_capacity(followed.len());
        for (feng_id, f) in followed.iter_mut().enumerate() {
            let (power, verdict) = take_content(f);
            let (snap, was) = (now.engine(feng_id), prev.engine(feng_id));
            let heaps = snap.heaps() - was.heaps();
            engines.push(EngineInterval {
                feng_id,
                sample_rate: snap.sample_rate(heaps, secs),
                heaps_per_s: heaps as f64 / secs.max(1e-9),
                sequence: snap.sequence(),
                malformed: snap.malformed(),
                peaks: power.strongest(),
                expected_channel: f.w.expected.channel(),
                verdict,
                input: f.input_sensors(),
            });
            powers.push(power);
        }
        let heaps = now.heaps() - prev.heaps();
        let first = engines[0].clone();
        feed.publish(WatchInterval {
            elapsed_s: start.elapsed().as_secs_f64(),
            sample_rate: now.sample_rate(heaps, secs),
            heaps_per_s: heaps as f64 / secs.max(1e-9),
            sequence: now.sequence(),
            malformed: now.malformed(),
            socket_drops: now.socket_drops(),
            peaks: first.peaks,
            expected_channel: first.expected_channel,
            verdict: first.verdict,
            input: first.input,
            power: Arc::new(powers.swap_remove(0)),
            engines: if array { engines } else { Vec::new() },
            output: opts.output_label.clone(),
        });
        prev = now;
        let done = opts.duration.is_some_and(|d| start.elapsed() >= d);
        if done || interrupted {
            break;
        }
    }
    let duration_s = start.elapsed().as_secs_f64();
    let last = rx.stop();
    let mut per_engine: Vec<WatchSummary> = followed
        .iter_mut()
        .enumerate()
        .map(|(feng_id, f)| {
            f.content.expected_channel = f.w.expected.channel();
            let mut s = summarise(
                last.engine(feng_id).substreams,
                duration_s,
                f.content.clone(),
                f.w.expected.channel().is_some(),
            );
            s.engine = f
                .engine_before
                .zip(f.engine_counters())
                .map(|(b, a)| a.since(&b));
            let lag = f.lag_before.zip(f.dsim_lag()).map(|(b, a)| a.since(&b));
            s.dsim_heaps_skipped = lag.map(|l| l.skipped);
            s.dsim_catch_ups = lag.map(|l| l.catch_ups);
            if let Some(why) = lag.and_then(|l| l.failure()) {
                s.ok = false;
                s.failures.push(why);
            }
            s
        })
        .collect();
    let udp_rcvbuf_errors = rcvbuf_before
        .zip(udp_rcvbuf_errors())
        .map(|(b, a)| a.saturating_sub(b));
    if !array {
        let mut summary = per_engine.swap_remove(0);
        summary.udp_rcvbuf_errors = udp_rcvbuf_errors;
        return Ok(summary);
    }
    let mut summary = summarise(
        last.substreams.clone(),
        duration_s,
        followed[0].content.clone(),
        false,
    );
    summary.failures.clear();
    let mut engines = Vec::with_capacity(per_engine.len());
    for (feng_id, mut s) in per_engine.into_iter().enumerate() {
        let counters = last.engine(feng_id).heap_counters();
        if let Some(c) = counters {
            if c.wrong > 0 {
                s.failures.push(format!(
                    "{} heaps carried a counter other than katgpucbf's for their engine and timestamp",
                    c.wrong
                ));
            }
            if c.collisions > 0 {
                s.failures.push(format!(
                    "{} heap counters were carried by another heap too",
                    c.collisions
                ));
            }
        }
        s.ok = s.failures.is_empty();
        summary
            .failures
            .extend(s.failures.iter().map(|f| format!("feng {feng_id}: {f}")));
        engines.push(EngineSummary {
            feng_id,
            ok: s.ok,
            failures: s.failures,
            heaps: s.heaps,
            sample_rate: s.sample_rate,
            sequence: s.sequence,
            malformed: s.malformed,
            heap_counters: counters,
            content: s.content,
            engine: s.engine,
            dsim_heaps_skipped: s.dsim_heaps_skipped,
            dsim_catch_ups: s.dsim_catch_ups,
        });
    }
    // What names no engine (undecodable datagrams, feng_ids outside the array) is not any one
    // engine's failure but fails the run.
    let named: u64 = engines.iter().map(|e| e.malformed).sum();
    if summary.malformed > named {
        summary.failures.push(format!(
            "{} malformed packets named no engine of the array",
            summary.malformed - named
        ));
    }
    summary.ok = summary.failures.is_empty();
    summary.engine = engines
        .iter()
        .map(|e| e.engine)
        .sum::<Option<EngineCounters>>();
    summary.dsim_heaps_skipped = engines.iter().map(|e| e.dsim_heaps_skipped).sum();
    summary.dsim_catch_ups = engines.iter().map(|e| e.dsim_catch_ups).sum();
    summary.udp_rcvbuf_errors = udp_rcvbuf_errors;
    summary.aggregate_rate = Some(engines.iter().map(|e| e.sample_rate).sum());
    // Substreams, not lanes: each substream has one lane per engine in `per_substream`.
    summary.substreams /= engines.len().max(1);
    summary.heap_counters = last.heap_counters();
    summary.engines = engines;
    Ok(summary)
}

/// Takes an engine's content since the last interval and checks it against the tone.
fn take_content(f: &mut Followed) -> (ChannelPower, Option<Verdict>) {
    let (power, bad) = f.w.monitor.take();
    let content = &mut f.content;
    content.bad_shape += bad;
    let peaks = power.strongest();
    if peaks.iter().any(Option::is_some) {
        content.last_peaks = peaks;
    }
    let mut verdict = None;
    if let Some(expected) = f.w.expected.checking() {
        // An interval in which the tone's substream was not sampled (the engine stopping or
        // starting) says nothing about the tone.
        let v = if power.sampled(expected.round() as usize) {
            content::check(&peaks, expected)
        } else {
            Verdict::NoData
        };
        match v {
            Verdict::NoData => {}
            Verdict::Match => content.matched += 1,
            Verdict::WrongChannel => content.wrong_channel += 1,
            Verdict::NoTone => content.no_tone += 1,
        }
        if v != Verdict::NoData {
            content.checked += 1;
        }
        verdict = Some(v);
    }
    (power, verdict)
}

fn summarise(
    subs: Vec<SubstreamSnapshot>,
    duration_s: f64,
    content: ContentSummary,
    content_expected: bool,
) -> WatchSummary {
    let snap = crate::receive::Snapshot {
        at: None,
        substreams: subs,
    };
    let seq = snap.sequence();
    let heaps = snap.heaps();
    let malformed = snap.malformed();
    let mut failures = Vec::new();
    if heaps == 0 {
        failures.push("no heaps received".to_string());
    }
    if seq.gaps > 0 {
        let drops = snap.socket_drops();
        failures.push(if drops > 0 {
            format!(
                "{} heaps missing (gaps; the harness's own sockets dropped {drops} packets)",
                seq.gaps
            )
        } else {
            format!("{} heaps missing (gaps)", seq.gaps)
        });
    }
    if malformed > 0 {
        failures.push(format!("{malformed} malformed packets or heaps"));
    }
    if content.bad_shape > 0 {
        failures.push(format!("{} heaps of the wrong shape", content.bad_shape));
    }
    if content_expected {
        if content.wrong_channel > 0 {
            failures.push(format!(
                "strongest channel was not the tone's in {} of {} intervals",
                content.wrong_channel, content.checked
            ));
        }
        if content.no_tone > 0 {
            failures.push(format!(
                "no tone stood out in {} of {} intervals",
                content.no_tone, content.checked
            ));
        }
        if content.checked == 0 && heaps > 0 {
            failures.push("content never checked".into());
        }
    }
    WatchSummary {
        ok: failures.is_empty(),
        failures,
        output: None,
        duration_s,
        substreams: snap.substreams.len(),
        heaps,
        heap_bytes: snap.heap_bytes(),
        sample_rate: snap.sample_rate(heaps, duration_s),
        sequence: seq,
        malformed,
        step: snap.step(),
        content,
        engine: None,
        dsim_heaps_skipped: None,
        dsim_catch_ups: None,
        udp_rcvbuf_errors: None,
        aggregate_rate: None,
        heap_counters: None,
        engines: Vec::new(),
        per_substream: snap.substreams,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(heaps: u64, gaps: u64) -> SubstreamSnapshot {
        let mut s = SubstreamSnapshot {
            heaps,
            step: Some(1000),
            ..Default::default()
        };
        s.sequence.gaps = gaps;
        s.sequence.received = heaps;
        s
    }

    #[test]
    fn verdicts() {
        let c = ContentSummary {
            checked: 3,
            matched: 3,
            ..Default::default()
        };
        let s = summarise(vec![sub(10, 0), sub(10, 0)], 1.0, c.clone(), true);
        assert!(s.ok, "{:?}", s.failures);
        assert_eq!(s.sample_rate, 10_000.0);
        let s = summarise(vec![sub(10, 0), sub(9, 1)], 1.0, c.clone(), true);
        assert!(!s.ok);
        assert_eq!(s.sequence.gaps, 1);
        let wrong = ContentSummary {
            checked: 3,
            matched: 2,
            wrong_channel: 1,
            ..Default::default()
        };
        assert!(!summarise(vec![sub(10, 0)], 1.0, wrong.clone(), true).ok);
        // Without an expected tone the content is reported, not judged.
        assert!(summarise(vec![sub(10, 0)], 1.0, wrong, false).ok);
        assert!(!summarise(vec![sub(0, 0)], 1.0, c, false).ok);
        let unchecked = ContentSummary::default();
        assert!(!summarise(vec![sub(10, 0)], 1.0, unchecked, true).ok);
    }
}

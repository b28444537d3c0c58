//! The `watch` loop: receive the engine's output and, once an interval, publish a
//! [`WatchInterval`] record (rates, sequence counts, the content check); at the end, a
//! [`WatchSummary`] whose `ok` says whether gaps, malformed heaps or wrong content were seen.
//! Nothing here prints: readers of the feed render the intervals.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::content::{self, ContentMonitor, Expected, Verdict};
use crate::control::{dsim_skipped_reason, Dsim, Engine};
use crate::feed::Feed;
use crate::receive::{udp_rcvbuf_errors, Receiver, SubstreamSnapshot};
use crate::record::{ContentSummary, WatchInterval, WatchSummary};
use crate::signals;

#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Stop after this long (None: until Ctrl-C).
    pub duration: Option<Duration>,
    /// The tone's fractional channel, when known (a live page may move it).
    pub expected: Expected,
    /// How often an interval record is published.
    pub progress_interval: Duration,
}

/// Watches until the duration passes or a signal comes, then stops the receiver, publishing a
/// record to `feed` each interval (the feed is left open: the caller closes it).
/// With `engine`, its counters over the run go in the summary, to tell loss in the engine from
/// loss on the way to the harness; with `dsim`, the heaps it skipped because it fell behind.
pub fn run(
    rx: Receiver,
    monitor: Arc<ContentMonitor>,
    opts: &WatchOptions,
    engine: Option<&Engine>,
    dsim: Option<&Dsim>,
    feed: &Feed<WatchInterval>,
) -> Result<WatchSummary> {
    let engine_before = engine.and_then(|e| e.counters().ok());
    let dsim_skipped = || dsim.and_then(|d| Some(d.status().ok()?.heaps_skipped));
    let skipped_before = dsim_skipped();
    let rcvbuf_before = udp_rcvbuf_errors();
    let start = Instant::now();
    let mut content = ContentSummary {
        expected_channel: opts.expected.channel(),
        ..Default::default()
    };
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
        let (power, bad) = monitor.take();
        content.bad_shape += bad;
        let peaks = power.strongest();
        if peaks.iter().any(Option::is_some) {
            content.last_peaks = peaks;
        }
        let mut verdict = None;
        if let Some(expected) = opts.expected.checking() {
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
        let heaps = now.heaps() - prev.heaps();
        feed.publish(WatchInterval {
            elapsed_s: start.elapsed().as_secs_f64(),
            sample_rate: now.sample_rate(heaps, secs),
            heaps_per_s: heaps as f64 / secs.max(1e-9),
            sequence: now.sequence(),
            malformed: now.malformed(),
            socket_drops: now.socket_drops(),
            peaks,
            expected_channel: opts.expected.channel(),
            verdict,
            power: Arc::new(power),
        });
        prev = now;
        let done = opts.duration.is_some_and(|d| start.elapsed() >= d);
        if done || interrupted {
            break;
        }
    }
    let duration_s = start.elapsed().as_secs_f64();
    let last = rx.stop();
    content.expected_channel = opts.expected.channel();
    let mut summary = summarise(
        last.substreams,
        duration_s,
        content,
        opts.expected.channel().is_some(),
    );
    summary.engine = engine_before
        .zip(engine.and_then(|e| e.counters().ok()))
        .map(|(b, a)| a.since(&b));
    summary.dsim_heaps_skipped = skipped_before
        .zip(dsim_skipped())
        .map(|(b, a)| a.saturating_sub(b));
    if let Some(n) = summary.dsim_heaps_skipped.filter(|&n| n > 0) {
        summary.ok = false;
        summary.failures.push(dsim_skipped_reason(n));
    }
    summary.udp_rcvbuf_errors = rcvbuf_before
        .zip(udp_rcvbuf_errors())
        .map(|(b, a)| a.saturating_sub(b));
    Ok(summary)
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
        udp_rcvbuf_errors: None,
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

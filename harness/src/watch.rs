//! `harness watch`: receive the engine's output, print a progress line once a second, and end
//! with a JSON summary whose `ok` says whether gaps, malformed heaps or wrong content were seen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::content::{self, ContentMonitor, Peak, Verdict};
use crate::control::{dsim_skipped_reason, Dsim, Engine, EngineCounters};
use crate::gaps::SeqCounts;
use crate::receive::{udp_rcvbuf_errors, Receiver, SubstreamSnapshot};
use crate::{gsps, signals};

#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Stop after this long (None: until Ctrl-C).
    pub duration: Option<Duration>,
    /// The tone's fractional channel, when known.
    pub expected_channel: Option<f64>,
    pub progress_interval: Duration,
    /// Print progress lines (stderr).
    pub progress: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ContentSummary {
    pub expected_channel: Option<f64>,
    /// Intervals checked, and how each ended.
    pub checked: u64,
    pub matched: u64,
    pub wrong_channel: u64,
    pub no_tone: u64,
    /// Heaps whose payload had the wrong shape for the content check.
    pub bad_shape: u64,
    /// The last strongest channel per polarisation.
    pub last_peaks: [Option<Peak>; 2],
}

#[derive(Clone, Debug, Serialize)]
pub struct WatchSummary {
    pub ok: bool,
    /// Why not ok.
    pub failures: Vec<String>,
    pub duration_s: f64,
    pub substreams: usize,
    pub heaps: u64,
    pub heap_bytes: u64,
    /// Mean received rate, as ADC samples per second per polarisation.
    pub sample_rate: f64,
    pub sequence: SeqCounts,
    pub malformed: u64,
    pub step: Option<u64>,
    pub content: ContentSummary,
    /// The engine's missing-input and skipped-output counters over the run, when reachable:
    /// gaps the engine did not skip were lost on the way to the harness.
    pub engine: Option<EngineCounters>,
    /// Heaps dsim skipped over the run because it fell behind its schedule, when it says.
    pub dsim_heaps_skipped: Option<u64>,
    /// Host-wide UDP receive-buffer drops over the run.
    pub udp_rcvbuf_errors: Option<u64>,
    pub per_substream: Vec<SubstreamSnapshot>,
}

fn peak_text(p: &Option<Peak>) -> String {
    match p {
        Some(p) => format!("ch {} {:.1} dB", p.channel, p.power_db()),
        None => "-".into(),
    }
}

/// Watches until the duration passes or a signal comes, then stops the receiver.
/// With `engine`, its counters over the run go in the summary, to tell loss in the engine from
/// loss on the way to the harness; with `dsim`, the heaps it skipped because it fell behind.
pub fn run(
    rx: Receiver,
    monitor: Arc<ContentMonitor>,
    opts: &WatchOptions,
    engine: Option<&Engine>,
    dsim: Option<&Dsim>,
) -> Result<WatchSummary> {
    let engine_before = engine.and_then(|e| e.counters().ok());
    let dsim_skipped = || dsim.and_then(|d| Some(d.status().ok()?.heaps_skipped));
    let skipped_before = dsim_skipped();
    let rcvbuf_before = udp_rcvbuf_errors();
    let start = Instant::now();
    let mut content = ContentSummary {
        expected_channel: opts.expected_channel,
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
        if let Some(expected) = opts.expected_channel {
            // An interval in which the tone's substream was not sampled (the engine stopping or
            // starting) says nothing about the tone.
            let verdict = if power.sampled(expected.round() as usize) {
                content::check(&peaks, expected)
            } else {
                Verdict::NoData
            };
            match verdict {
                Verdict::NoData => {}
                v => {
                    content.checked += 1;
                    match v {
                        Verdict::Match => content.matched += 1,
                        Verdict::WrongChannel => content.wrong_channel += 1,
                        _ => content.no_tone += 1,
                    }
                }
            }
        }
        if opts.progress {
            let heaps = now.heaps() - prev.heaps();
            let seq = now.sequence();
            eprintln!(
                "[{:>6.1} s] {} Gsample/s  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  own socket drops {}  pol0 {}  pol1 {}{}",
                start.elapsed().as_secs_f64(),
                gsps(now.sample_rate(heaps, secs)),
                heaps as f64 / secs.max(1e-9),
                seq.gaps,
                seq.late,
                seq.duplicates,
                now.malformed(),
                now.socket_drops(),
                peak_text(&peaks[0]),
                peak_text(&peaks[1]),
                match opts.expected_channel {
                    Some(e) => format!("  (tone ch {e:.2})"),
                    None => String::new(),
                }
            );
        }
        prev = now;
        let done = opts.duration.is_some_and(|d| start.elapsed() >= d);
        if done || interrupted {
            break;
        }
    }
    let duration_s = start.elapsed().as_secs_f64();
    let last = rx.stop();
    let mut summary = summarise(
        last.substreams,
        duration_s,
        content,
        opts.expected_channel.is_some(),
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

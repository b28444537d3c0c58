//! One max-rate trial (paper, 5.4): set dsim's rate, let the system warm up, then observe a
//! window. It passes when the engine's missing-input and skipped-output counters did not move,
//! the harness saw no new gap, and the output really ran at the rate asked for (a dsim that
//! cannot produce the rate must not pass the engine).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::control::{dsim_skipped_reason, EngineCounters};
use crate::cpu::{Cores, CpuTimes};
use crate::receive::{udp_rcvbuf_errors, Receiver, Snapshot};
use crate::search::Phase;
use crate::services::Services;
use crate::{gsps, signals};

#[derive(Clone, Copy, Debug, Serialize)]
pub struct TrialConfig {
    pub warmup: Duration,
    /// After the warm-up, wait up to this much longer for the losses to stop (see [`STILL`]).
    pub settle: Duration,
    pub window: Duration,
    /// The received rate may fall short of the requested one by this fraction (edge effects of
    /// counting whole heaps in a window).
    pub rate_tolerance: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TrialRecord {
    pub index: usize,
    pub backend: String,
    pub phase: Phase,
    /// Requested ADC rate (sample/s per polarisation).
    pub rate: f64,
    pub pass: bool,
    /// Why it failed (empty for a pass).
    pub reasons: Vec<String>,
    /// Changes over the window.
    pub missing_input: f64,
    pub skipped_output: f64,
    pub gaps: i64,
    pub late: u64,
    pub malformed: u64,
    /// Sample rate per polarisation the received heaps stand for.
    pub received_rate: f64,
    /// Host-wide UDP receive-buffer drops in the window (any receiver on the host).
    pub udp_rcvbuf_errors: Option<u64>,
    /// Of those, packets the harness's own sockets dropped (a GSO super-packet counts once):
    /// gaps the harness, not the engine, caused.
    pub harness_socket_drops: u64,
    /// Heaps dsim skipped in the window because it fell behind (the sender, not the engine,
    /// could not keep the rate); `None` when dsim does not report them.
    pub dsim_heaps_skipped: Option<u64>,
    pub window_s: f64,
    /// Time spent after the warm-up waiting for the losses to stop, before the window.
    pub settle_s: f64,
    /// Where the host's cores went over the window.
    pub cores: Cores,
}

struct Point {
    counters: EngineCounters,
    dsim_skipped: Option<u64>,
    snap: Snapshot,
    rcvbuf: Option<u64>,
    cpu: CpuTimes,
    at: Instant,
}

fn point(services: &Services, rx: &Receiver) -> Result<Point> {
    Ok(Point {
        counters: services.engine.counters()?,
        // Only an explanation: a dsim that does not say is not an error.
        dsim_skipped: services.dsim.status().ok().map(|s| s.heaps_skipped),
        snap: rx.snapshot(),
        rcvbuf: udp_rcvbuf_errors(),
        cpu: CpuTimes::read(&services.pids()),
        at: Instant::now(),
    })
}

/// Progress on stderr: a bar redrawn in place on a terminal, nothing between trials otherwise
/// (the caller prints one line per trial).
struct Progress {
    tty: bool,
}

impl Progress {
    fn show(&self, line: &str) {
        if self.tty {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        }
    }
    fn done(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

fn bar(done: f64, total: f64) -> String {
    let width = 20;
    let filled = ((done / total.max(1e-9)) * width as f64)
        .round()
        .clamp(0.0, width as f64) as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

/// After the warm-up, a trial waits (up to [`TrialConfig::settle`]) until the engine's loss
/// counters and the harness's gap count have not moved for this long: a system still draining
/// the previous trial's overload (queues full, receivers resynchronising) is not yet showing what
/// it does at the new rate. A rate it cannot sustain keeps losing, times the wait out, and fails
/// in the window as before.
pub const STILL: Duration = Duration::from_secs(1);

/// Runs one trial at `rate`. Errors (a service that stopped answering, an interrupt) abort the
/// search; a failed criterion is a failed trial.
pub fn run_trial(
    services: &mut Services,
    rx: &Receiver,
    rate: f64,
    phase: Phase,
    cfg: &TrialConfig,
    index: usize,
    backend: &str,
) -> Result<TrialRecord> {
    let progress = Progress {
        tty: std::io::stderr().is_terminal(),
    };
    services.dsim.set_rate(rate)?;
    let label = format!("trial {index} {backend} {} Gsample/s", gsps(rate));
    let start = Instant::now();
    while start.elapsed() < cfg.warmup {
        services.check_alive()?;
        let el = start.elapsed().as_secs_f64();
        progress.show(&format!(
            "{label}: warm-up {} {:.0}/{:.0} s",
            bar(el, cfg.warmup.as_secs_f64()),
            el,
            cfg.warmup.as_secs_f64()
        ));
        signals::sleep(Duration::from_millis(250).min(cfg.warmup))?;
    }
    let settled = settle(services, rx, cfg, &progress, &label)?;
    let before = point(services, rx)?;
    let mut last_draw = Instant::now() - Duration::from_secs(1);
    while before.at.elapsed() < cfg.window {
        services.check_alive()?;
        if last_draw.elapsed() >= Duration::from_secs(1) {
            last_draw = Instant::now();
            let now = rx.snapshot();
            let el = before.at.elapsed().as_secs_f64();
            let gaps = now.sequence().gaps as i64 - before.snap.sequence().gaps as i64;
            let recv = now.sample_rate(now.heaps() - before.snap.heaps(), el);
            progress.show(&format!(
                "{label}: observe {} {:.0}/{:.0} s  received {} Gsample/s  gaps {gaps:+}",
                bar(el, cfg.window.as_secs_f64()),
                el,
                cfg.window.as_secs_f64(),
                gsps(recv),
            ));
        }
        signals::sleep(Duration::from_millis(100).min(cfg.window))?;
    }
    let after = point(services, rx)?;
    progress.done();
    let mut t = evaluate(&before, &after, rate, phase, cfg, index, backend);
    t.settle_s = settled.as_secs_f64();
    Ok(t)
}

/// Waits until the losses have been still for [`STILL`], or `cfg.settle` has passed; returns
/// how long it waited.
fn settle(
    services: &mut Services,
    rx: &Receiver,
    cfg: &TrialConfig,
    progress: &Progress,
    label: &str,
) -> Result<Duration> {
    let start = Instant::now();
    let losses = |services: &Services| -> Result<(EngineCounters, u64)> {
        Ok((services.engine.counters()?, rx.snapshot().sequence().gaps))
    };
    let mut last = losses(services)?;
    let mut still_since = Instant::now();
    while start.elapsed() < cfg.settle && still_since.elapsed() < STILL {
        services.check_alive()?;
        progress.show(&format!(
            "{label}: settling (losses still for {:.1} of {:.0} s, at most {:.0} s)",
            still_since.elapsed().as_secs_f64(),
            STILL.as_secs_f64(),
            cfg.settle.as_secs_f64()
        ));
        signals::sleep(Duration::from_millis(250))?;
        let now = losses(services)?;
        let moved = now.0.since(&last.0);
        if moved.missing_input > 0.0 || moved.skipped_output > 0.0 || now.1 != last.1 {
            still_since = Instant::now();
        }
        last = now;
    }
    Ok(start.elapsed())
}

fn evaluate(
    before: &Point,
    after: &Point,
    rate: f64,
    phase: Phase,
    cfg: &TrialConfig,
    index: usize,
    backend: &str,
) -> TrialRecord {
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let (b, a) = (before.snap.sequence(), after.snap.sequence());
    let moved = after.counters.since(&before.counters);
    let (missing_input, skipped_output) = (moved.missing_input, moved.skipped_output);
    let gaps = a.gaps as i64 - b.gaps as i64;
    let heaps = after.snap.heaps().saturating_sub(before.snap.heaps());
    let received_rate = after.snap.sample_rate(heaps, secs);
    let mut reasons = Vec::new();
    let dsim_skipped = after
        .dsim_skipped
        .zip(before.dsim_skipped)
        .map(|(a, b)| a.saturating_sub(b));
    if let Some(n) = dsim_skipped.filter(|&n| n > 0) {
        reasons.push(dsim_skipped_reason(n));
    }
    if missing_input > 0.0 {
        reasons.push(format!("engine missing input +{missing_input}"));
    }
    if skipped_output > 0.0 {
        reasons.push(format!("engine skipped output +{skipped_output}"));
    }
    let harness_drops = after
        .snap
        .socket_drops()
        .saturating_sub(before.snap.socket_drops());
    if gaps > 0 {
        reasons.push(if harness_drops > 0 {
            format!("harness saw {gaps} new gaps (its own sockets dropped {harness_drops} packets)")
        } else {
            format!("harness saw {gaps} new gaps")
        });
    }
    // Heaps arrive whole: over a short window at a low rate one heap per substream more or less
    // is a larger fraction than the tolerance, so allow that much on top.
    let heap_fraction = after
        .snap
        .step()
        .map_or(0.0, |step| step as f64 / (rate * secs).max(1.0));
    if received_rate < rate * (1.0 - cfg.rate_tolerance - heap_fraction) {
        reasons.push(format!(
            "output ran at {} of {} Gsample/s",
            gsps(received_rate),
            gsps(rate)
        ));
    }
    TrialRecord {
        index,
        backend: backend.to_string(),
        phase,
        rate,
        pass: reasons.is_empty(),
        reasons,
        missing_input,
        skipped_output,
        gaps,
        late: a.late.saturating_sub(b.late),
        malformed: after
            .snap
            .malformed()
            .saturating_sub(before.snap.malformed()),
        received_rate,
        udp_rcvbuf_errors: after
            .rcvbuf
            .zip(before.rcvbuf)
            .map(|(x, y)| x.saturating_sub(y)),
        harness_socket_drops: harness_drops,
        dsim_heaps_skipped: dsim_skipped,
        window_s: secs,
        settle_s: 0.0,
        cores: after.cpu.cores_since(&before.cpu, secs),
    }
}

/// One line per trial, for logs and non-terminal runs.
pub fn summary_line(t: &TrialRecord) -> String {
    format!(
        "trial {:>2} {:<5} {:<7} {:>8} Gsample/s  {}  recv {} Gsample/s  missing-in {:+}  skipped-out {:+}  gaps {:+}{}{}{}",
        t.index,
        t.backend,
        format!("{:?}", t.phase).to_lowercase(),
        gsps(t.rate),
        if t.pass { "PASS" } else { "FAIL" },
        gsps(t.received_rate),
        t.missing_input,
        t.skipped_output,
        t.gaps,
        if t.reasons.is_empty() {
            String::new()
        } else {
            format!("  ({})", t.reasons.join("; "))
        },
        if t.settle_s > STILL.as_secs_f64() + 0.5 {
            format!("  settled {:.1} s", t.settle_s)
        } else {
            String::new()
        },
        match t.cores.describe() {
            d if d.is_empty() => d,
            d => format!("  cores: {d}"),
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::SubstreamSnapshot;

    fn pt(missing: f64, skipped: f64, gaps: u64, heaps: u64, secs: f64) -> Point {
        pt_dsim(missing, skipped, gaps, heaps, secs, Some(7))
    }

    fn pt_dsim(
        missing: f64,
        skipped: f64,
        gaps: u64,
        heaps: u64,
        secs: f64,
        dsim_skipped: Option<u64>,
    ) -> Point {
        let mut s = SubstreamSnapshot {
            heaps,
            step: Some(1_000_000),
            ..Default::default()
        };
        s.sequence.gaps = gaps;
        Point {
            counters: EngineCounters {
                missing_input: missing,
                skipped_output: skipped,
            },
            dsim_skipped,
            snap: Snapshot {
                at: None,
                substreams: vec![s],
            },
            rcvbuf: Some(10),
            cpu: CpuTimes::default(),
            at: Instant::now() + Duration::from_secs_f64(secs),
        }
    }

    const CFG: TrialConfig = TrialConfig {
        warmup: Duration::ZERO,
        settle: Duration::ZERO,
        window: Duration::ZERO,
        rate_tolerance: 0.02,
    };

    #[test]
    fn clean_window_passes() {
        // 1000 heaps of 1e6 samples in 10 s = 1e8 sample/s.
        let t = evaluate(
            &pt(5.0, 1.0, 2, 0, 0.0),
            &pt(5.0, 1.0, 2, 1000, 10.0),
            1e8,
            Phase::Bisect,
            &CFG,
            1,
            "cpu",
        );
        assert!(t.pass, "{t:?}");
        assert!((t.received_rate - 1e8).abs() < 1e3);
        assert_eq!(t.udp_rcvbuf_errors, Some(0));
        assert!(summary_line(&t).contains("PASS"));
    }

    #[test]
    fn each_criterion_fails() {
        let ok = pt(0.0, 0.0, 0, 0, 0.0);
        for (after, needle) in [
            (pt(1.0, 0.0, 0, 1000, 10.0), "missing input"),
            (pt(0.0, 2.0, 0, 1000, 10.0), "skipped output"),
            (pt(0.0, 0.0, 3, 1000, 10.0), "new gaps"),
            (pt(0.0, 0.0, 0, 900, 10.0), "output ran at"),
            (
                pt_dsim(0.0, 0.0, 0, 1000, 10.0, Some(12)),
                "dsim fell behind and skipped 5 heaps",
            ),
        ] {
            let t = evaluate(&ok, &after, 1e8, Phase::Bisect, &CFG, 1, "cpu");
            assert!(!t.pass);
            assert!(t.reasons.iter().any(|r| r.contains(needle)), "{t:?}");
            assert!(summary_line(&t).contains(needle));
        }
    }

    #[test]
    fn bars() {
        assert_eq!(bar(0.0, 10.0), format!("[{}]", ".".repeat(20)));
        assert_eq!(
            bar(5.0, 10.0),
            format!("[{}{}]", "#".repeat(10), ".".repeat(10))
        );
        assert_eq!(bar(50.0, 10.0), format!("[{}]", "#".repeat(20)));
    }
}

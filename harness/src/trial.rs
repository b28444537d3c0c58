//! One max-rate trial (paper, 5.4): set dsim's rate, let the system warm up, then observe a
//! window. It passes when the engine's missing-input and skipped-output counters did not move,
//! the harness saw no new gap, and the output really ran at the rate asked for (a dsim that
//! cannot produce the rate must not pass the engine). An array's trial sets every dsim's rate
//! and passes only when every engine passed on its own heaps and counters.

use std::time::{Duration, Instant};

use anyhow::Result;
use fgpu_api::engine::Status;
use serde::Serialize;

use crate::control::{dsim_skipped_reason, EngineCounters};
use crate::cpu::CpuTimes;
use crate::receive::{udp_rcvbuf_errors, Receiver, Snapshot};
use crate::record::{EngineTrial, TrialProgress, TrialRecord};
use crate::search::Phase;
use crate::services::Services;
use crate::stalls::StallReport;
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

struct Point {
    /// Per antenna (one without an array).
    counters: Vec<EngineCounters>,
    dsim_skipped: Vec<Option<u64>>,
    snap: Snapshot,
    rcvbuf: Option<u64>,
    cpu: CpuTimes,
    /// Per antenna, the engine's status where it gives one (for its stall figures).
    status: Vec<Option<Status>>,
    at: Instant,
}

fn point(services: &Services, rx: &Receiver) -> Result<Point> {
    Ok(Point {
        counters: services
            .antennas
            .iter()
            .map(|a| a.engine.counters())
            .collect::<Result<_>>()?,
        // Only an explanation: a dsim that does not say is not an error.
        dsim_skipped: services
            .antennas
            .iter()
            .map(|a| a.dsim.status().ok().map(|s| s.heaps_skipped))
            .collect(),
        snap: rx.snapshot(),
        rcvbuf: udp_rcvbuf_errors(),
        cpu: CpuTimes::read(&services.pids()),
        // Only an explanation, as dsim's skips: an engine without a status (katcp) has none.
        status: services
            .antennas
            .iter()
            .map(|a| a.engine.status().ok())
            .collect(),
        at: Instant::now(),
    })
}

/// After the warm-up, a trial waits (up to [`TrialConfig::settle`]) until the engine's loss
/// counters and the harness's gap count have not moved for this long: a system still draining
/// the previous trial's overload (queues full, receivers resynchronising) is not yet showing what
/// it does at the new rate. A rate it cannot sustain keeps losing, times the wait out, and fails
/// in the window as before.
pub const STILL: Duration = Duration::from_secs(1);

/// Runs one trial at `rate`, telling `progress` where it is (a few times a second). Errors (a
/// service that stopped answering, an interrupt) abort the search; a failed criterion is a
/// failed trial.
#[allow(clippy::too_many_arguments)]
pub fn run_trial(
    services: &mut Services,
    rx: &Receiver,
    rate: f64,
    phase: Phase,
    cfg: &TrialConfig,
    index: usize,
    backend: &str,
    progress: &mut dyn FnMut(&TrialProgress),
) -> Result<TrialRecord> {
    for a in &services.antennas {
        a.dsim.set_rate(rate)?;
    }
    let label = format!("trial {index} {backend} {} Gsample/s", gsps(rate));
    let start = Instant::now();
    while start.elapsed() < cfg.warmup {
        services.check_alive()?;
        progress(&TrialProgress::Warmup {
            label: label.clone(),
            elapsed_s: start.elapsed().as_secs_f64(),
            total_s: cfg.warmup.as_secs_f64(),
        });
        signals::sleep(Duration::from_millis(250).min(cfg.warmup))?;
    }
    let settled = settle(services, rx, cfg, progress, &label)?;
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
            progress(&TrialProgress::Observe {
                label: label.clone(),
                elapsed_s: el,
                total_s: cfg.window.as_secs_f64(),
                received_rate: recv,
                gaps,
            });
        }
        signals::sleep(Duration::from_millis(100).min(cfg.window))?;
    }
    let after = point(services, rx)?;
    progress(&TrialProgress::Done);
    let mut t = evaluate(
        &before,
        &after,
        rate,
        phase,
        cfg,
        index,
        backend,
        rx.is_array(),
    );
    t.settle_s = settled.as_secs_f64();
    Ok(t)
}

/// Waits until the losses have been still for [`STILL`], or `cfg.settle` has passed; returns
/// how long it waited.
fn settle(
    services: &mut Services,
    rx: &Receiver,
    cfg: &TrialConfig,
    progress: &mut dyn FnMut(&TrialProgress),
    label: &str,
) -> Result<Duration> {
    let start = Instant::now();
    let losses = |services: &Services| -> Result<(EngineCounters, u64)> {
        let counters = services
            .antennas
            .iter()
            .map(|a| a.engine.counters())
            .collect::<Result<Vec<_>>>()?;
        Ok((counters.into_iter().sum(), rx.snapshot().sequence().gaps))
    };
    let mut last = losses(services)?;
    let mut still_since = Instant::now();
    while start.elapsed() < cfg.settle && still_since.elapsed() < STILL {
        services.check_alive()?;
        progress(&TrialProgress::Settling {
            label: label.to_string(),
            still_for_s: still_since.elapsed().as_secs_f64(),
            still_s: STILL.as_secs_f64(),
            max_s: cfg.settle.as_secs_f64(),
        });
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

/// One engine's window: what its heaps and counters did, and why it failed.
struct Judged {
    reasons: Vec<String>,
    missing_input: f64,
    skipped_output: f64,
    gaps: i64,
    late: u64,
    malformed: u64,
    received_rate: f64,
    dsim_skipped: Option<u64>,
}

/// Judges engine `i` over the window on `before` and `after`, its heaps in those snapshots
/// (one engine's lanes); `harness_drops` are the harness's own socket drops in the window.
#[allow(clippy::too_many_arguments)]
fn judge(
    before: &Point,
    after: &Point,
    i: usize,
    (b_snap, a_snap): (&Snapshot, &Snapshot),
    harness_drops: u64,
    rate: f64,
    secs: f64,
    cfg: &TrialConfig,
) -> Judged {
    let (b, a) = (b_snap.sequence(), a_snap.sequence());
    let moved = after.counters[i].since(&before.counters[i]);
    let (missing_input, skipped_output) = (moved.missing_input, moved.skipped_output);
    let gaps = a.gaps as i64 - b.gaps as i64;
    let heaps = a_snap.heaps().saturating_sub(b_snap.heaps());
    let received_rate = a_snap.sample_rate(heaps, secs);
    let mut reasons = Vec::new();
    let dsim_skipped = after.dsim_skipped[i]
        .zip(before.dsim_skipped[i])
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
    if gaps > 0 {
        reasons.push(if harness_drops > 0 {
            format!("harness saw {gaps} new gaps (its own sockets dropped {harness_drops} packets)")
        } else {
            format!("harness saw {gaps} new gaps")
        });
    }
    // Heaps arrive whole: over a short window at a low rate one heap per substream more or less
    // is a larger fraction than the tolerance, so allow that much on top.
    let heap_fraction = a_snap
        .step()
        .map_or(0.0, |step| step as f64 / (rate * secs).max(1.0));
    if received_rate < rate * (1.0 - cfg.rate_tolerance - heap_fraction) {
        reasons.push(format!(
            "output ran at {} of {} Gsample/s",
            gsps(received_rate),
            gsps(rate)
        ));
    }
    Judged {
        reasons,
        missing_input,
        skipped_output,
        gaps,
        late: a.late.saturating_sub(b.late),
        malformed: a_snap.malformed().saturating_sub(b_snap.malformed()),
        received_rate,
        dsim_skipped,
    }
}

#[allow(clippy::too_many_arguments)]
fn evaluate(
    before: &Point,
    after: &Point,
    rate: f64,
    phase: Phase,
    cfg: &TrialConfig,
    index: usize,
    backend: &str,
    array: bool,
) -> TrialRecord {
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let harness_drops = after
        .snap
        .socket_drops()
        .saturating_sub(before.snap.socket_drops());
    let antennas = after.counters.len().min(before.counters.len());
    let judged: Vec<Judged> = (0..antennas)
        .map(|i| {
            let (b, a) = if array {
                (before.snap.engine(i), after.snap.engine(i))
            } else {
                (before.snap.clone(), after.snap.clone())
            };
            judge(before, after, i, (&b, &a), harness_drops, rate, secs, cfg)
        })
        .collect();
    let mut t = TrialRecord {
        index,
        backend: backend.to_string(),
        phase,
        rate,
        pass: judged.iter().all(|j| j.reasons.is_empty()),
        reasons: Vec::new(),
        missing_input: judged.iter().map(|j| j.missing_input).sum(),
        skipped_output: judged.iter().map(|j| j.skipped_output).sum(),
        gaps: judged.iter().map(|j| j.gaps).sum(),
        late: judged.iter().map(|j| j.late).sum(),
        malformed: judged.iter().map(|j| j.malformed).sum(),
        received_rate: judged.iter().map(|j| j.received_rate).sum::<f64>()
            / judged.len().max(1) as f64,
        udp_rcvbuf_errors: after
            .rcvbuf
            .zip(before.rcvbuf)
            .map(|(x, y)| x.saturating_sub(y)),
        harness_socket_drops: harness_drops,
        dsim_heaps_skipped: judged.iter().map(|j| j.dsim_skipped).sum(),
        window_s: secs,
        settle_s: 0.0,
        cores: after.cpu.cores_since(&before.cpu, secs),
        aggregate_rate: None,
        engines: Vec::new(),
        stalls: match (before.status.first(), after.status.first()) {
            (Some(Some(b)), Some(Some(a))) if !array => StallReport::between(b, a),
            _ => None,
        },
    };
    if !array {
        t.reasons = judged.into_iter().flat_map(|j| j.reasons).collect();
        return t;
    }
    t.aggregate_rate = Some(judged.iter().map(|j| j.received_rate).sum());
    for (feng_id, j) in judged.into_iter().enumerate() {
        t.reasons
            .extend(j.reasons.iter().map(|r| format!("feng {feng_id}: {r}")));
        t.engines.push(EngineTrial {
            feng_id,
            pass: j.reasons.is_empty(),
            reasons: j.reasons,
            received_rate: j.received_rate,
            missing_input: j.missing_input,
            skipped_output: j.skipped_output,
            gaps: j.gaps,
            dsim_heaps_skipped: j.dsim_skipped,
        });
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::SubstreamSnapshot;
    use crate::render::progress::trial_line;

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
            counters: vec![EngineCounters {
                missing_input: missing,
                skipped_output: skipped,
            }],
            dsim_skipped: vec![dsim_skipped],
            snap: Snapshot {
                at: None,
                substreams: vec![s],
            },
            rcvbuf: Some(10),
            cpu: CpuTimes::default(),
            status: Vec::new(),
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
            false,
        );
        assert!(t.pass, "{t:?}");
        assert!((t.received_rate - 1e8).abs() < 1e3);
        assert_eq!(t.udp_rcvbuf_errors, Some(0));
        assert!(trial_line(&t).contains("PASS"));
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
                "too far to catch up, and skipped 5 heaps",
            ),
        ] {
            let t = evaluate(&ok, &after, 1e8, Phase::Bisect, &CFG, 1, "cpu", false);
            assert!(!t.pass);
            assert!(t.reasons.iter().any(|r| r.contains(needle)), "{t:?}");
            assert!(trial_line(&t).contains(needle));
        }
    }

    /// Two engines' lanes of one substream, heaps and gaps each, and their counters.
    fn array_pt(heaps: [u64; 2], gaps: [u64; 2], missing: [f64; 2], secs: f64) -> Point {
        let lane = |feng: usize| {
            let mut s = SubstreamSnapshot {
                feng_id: Some(feng),
                heaps: heaps[feng],
                step: Some(1_000_000),
                ..Default::default()
            };
            s.sequence.gaps = gaps[feng];
            s
        };
        Point {
            counters: missing
                .iter()
                .map(|&m| EngineCounters {
                    missing_input: m,
                    skipped_output: 0.0,
                })
                .collect(),
            dsim_skipped: vec![Some(0), Some(0)],
            snap: Snapshot {
                at: None,
                substreams: vec![lane(0), lane(1)],
            },
            rcvbuf: None,
            cpu: CpuTimes::default(),
            status: Vec::new(),
            at: Instant::now() + Duration::from_secs_f64(secs),
        }
    }

    #[test]
    fn an_array_passes_only_when_every_engine_passes() {
        let start = array_pt([0, 0], [0, 0], [0.0, 0.0], 0.0);
        let clean = array_pt([1000, 1000], [0, 0], [0.0, 0.0], 10.0);
        let t = evaluate(&start, &clean, 1e8, Phase::Bisect, &CFG, 1, "cpu", true);
        assert!(t.pass, "{t:?}");
        assert_eq!(t.engines.len(), 2);
        assert!((t.received_rate - 1e8).abs() < 1e3, "the mean per engine");
        assert!((t.aggregate_rate.unwrap() - 2e8).abs() < 1e3);
        // Engine 1 loses input and heaps: the trial fails, and says which engine.
        let bad = array_pt([1000, 990], [0, 10], [0.0, 4.0], 10.0);
        let t = evaluate(&start, &bad, 1e8, Phase::Bisect, &CFG, 2, "cpu", true);
        assert!(!t.pass);
        assert!(t.engines[0].pass && !t.engines[1].pass, "{t:?}");
        assert!(t.reasons.iter().all(|r| r.starts_with("feng 1: ")), "{t:?}");
        assert_eq!((t.gaps, t.missing_input), (10, 4.0));
        let line = trial_line(&t);
        assert!(line.contains("feng 1: engine missing input +4"), "{line}");
    }
}

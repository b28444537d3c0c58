//! What dsim reports: counters per polarisation, the signal, and the achieved rate over the last
//! 10 s, measured from when heaps actually left against when they were due. The reply's types
//! live in [`fgpu_api::dsim`], shared with every reader.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

pub use fgpu_api::dsim::{PolStatus, RateReport, SignalStatus, Status};

use crate::state::{Progress, Shared};

/// The window over which the achieved rate is measured.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Allowed relative error of the achieved rate.
pub const RATE_TOLERANCE: f64 = 1e-3;
/// How often the progress is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Progress samples of both polarisations over the last [`RATE_WINDOW`].
#[derive(Debug, Default)]
pub struct RateWindow {
    samples: [VecDeque<Progress>; 2],
}

impl RateWindow {
    pub fn push(&mut self, pol: usize, p: Progress) {
        let q = &mut self.samples[pol];
        if q.back().is_some_and(|b| b.heap == p.heap) {
            return;
        }
        q.push_back(p);
        while q
            .front()
            .is_some_and(|f| p.sent_at - f.sent_at > RATE_WINDOW)
        {
            q.pop_front();
        }
    }

    /// (oldest, newest) progress in the window.
    pub fn span(&self, pol: usize) -> Option<(Progress, Progress)> {
        let q = &self.samples[pol];
        Some((*q.front()?, *q.back()?)).filter(|(a, b)| b.heap > a.heap)
    }
}

fn rate_report(shared: &Shared, pol: usize) -> RateReport {
    let window = shared
        .rate_window
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .span(pol);
    let Some((a, b)) = window else {
        return RateReport::default();
    };
    let schedule = shared.schedule.load();
    let samples = (b.heap - a.heap) as f64 * shared.heap_samples as f64;
    let wall = (b.sent_at - a.sent_at).as_secs_f64();
    let planned = (schedule.due(b.heap) - schedule.due(a.heap)).as_secs_f64();
    let achieved = (wall > 0.0).then(|| samples / wall);
    let expected = (planned > 0.0).then(|| samples / planned);
    RateReport {
        achieved_rate: achieved,
        expected_rate: expected,
        rate_error: achieved.zip(expected).map(|(a, e)| a / e - 1.0),
        window_s: wall,
    }
}

pub fn status(shared: &Shared) -> Status {
    let schedule = shared.schedule.load();
    let now = Instant::now();
    let mut pols = Vec::new();
    let mut late: Option<f64> = None;
    for p in &shared.pols {
        let progress = p.progress();
        if let Some(pr) = progress {
            let due = schedule.due(pr.heap);
            let l = if pr.sent_at >= due {
                (pr.sent_at - due).as_secs_f64()
            } else {
                -(due - pr.sent_at).as_secs_f64()
            };
            late = Some(late.map_or(l, |x: f64| x.max(l)));
        }
        let c = p.totals();
        pols.push(PolStatus {
            pol: p.pol,
            destinations: p.endpoint.to_string(),
            heaps: c.heaps_done,
            heaps_sent: c.datagrams,
            bytes_sent: c.bytes,
            saturated_samples: c.saturated,
            send_errors: c.send_errors,
            heaps_skipped: c.skipped,
            catch_ups: c.catch_ups,
            longest_catch_up_s: p.longest_catch_up_s(),
            heaps_sent_late: c.sent_late,
            timestamp: progress.map(|pr| pr.heap * shared.heap_samples as u64),
            rate: rate_report(shared, p.pol),
            faults_injected: p.fault_counters.snapshot(),
            faults: p.faults.load().spec().clone(),
        });
    }
    let achieved_rate = pols
        .iter()
        .filter_map(|p| p.rate.achieved_rate)
        .min_by(f64::total_cmp);
    let rate_error = pols
        .iter()
        .filter_map(|p| p.rate.rate_error)
        .max_by(|a, b| a.abs().total_cmp(&b.abs()));
    let rate_window_s = pols
        .iter()
        .map(|p| p.rate.window_s)
        .fold(f64::INFINITY, f64::min);
    let state = if !shared.finished() {
        "running"
    } else if shared.stop.load(Relaxed) {
        "stopped"
    } else {
        "finished"
    };
    let now_heap = schedule.index_at(now);
    let signal = shared
        .signal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .status();
    Status {
        state: state.into(),
        rate: schedule.latest_rate(),
        achieved_rate,
        rate_error,
        rate_window_s: if rate_window_s.is_finite() {
            rate_window_s
        } else {
            0.0
        },
        rate_ok: rate_error.is_some_and(|e| e.abs() <= RATE_TOLERANCE),
        late_s: late,
        heaps_skipped: pols.iter().map(|p| p.heaps_skipped).sum(),
        catch_ups: pols.iter().map(|p| p.catch_ups).sum(),
        longest_catch_up_s: pols
            .iter()
            .map(|p| p.longest_catch_up_s)
            .fold(0.0, f64::max),
        heaps_sent_late: pols.iter().map(|p| p.heaps_sent_late).sum(),
        sync_time: shared.sync_time,
        implied_sync_time: schedule.implied_sync_time(now_heap),
        timestamp: now_heap * shared.heap_samples as u64,
        heap_samples: shared.heap_samples,
        sample_bits: shared.config.sample_bits,
        first_heap: shared.first_heap,
        end_heap: shared.end_heap,
        threads_per_pol: shared.threads,
        heaps_per_batch: [shared.pols[0].layout.batch, shared.pols[1].layout.batch],
        buffer_heaps: shared.pols[0].layout.buffer_heaps,
        signal,
        pols,
        uptime_s: shared.started_at.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_keeps_ten_seconds() {
        let t0 = Instant::now();
        let mut w = RateWindow::default();
        for i in 0..200u64 {
            w.push(
                0,
                Progress {
                    heap: i * 10,
                    sent_at: t0 + Duration::from_millis(i * 100),
                },
            );
        }
        let (a, b) = w.span(0).unwrap();
        assert_eq!(b.heap, 1990);
        assert_eq!((b.sent_at - a.sent_at), Duration::from_secs(10));
        assert!(w.span(1).is_none());
    }
}

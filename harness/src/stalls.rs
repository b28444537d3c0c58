//! Which of the engine's threads stalled, and for how long, from its `GET /status`: the receive
//! thread with the longest gap between rounds that got data, and the thread the scheduler kept
//! waiting longest in one sampling interval, the one nearest that gap first. Beside them, why
//! the receive threads turned packets away, and how long the backend took per frame against the
//! stream time a frame holds: loss with no thread held off is an engine that could not keep
//! up. A report of loss names them, so that a run that lost data says where to look.

use std::collections::BTreeMap;

use fgpu_api::engine::{SchedWaits, Status};
use serde::{Deserialize, Serialize};

/// A wait this close (s) to the longest gap's end counts as "around" it.
const NEAR_S: f64 = 2.0;

/// One thread's worst moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// The thread, as `ps -L` names it ("fengine-recv1.0", "fengine-pair", ...).
    pub thread: String,
    /// How long: the gap, or the scheduler's wait within one interval.
    pub seconds: f64,
    /// Unix time it ended.
    pub unix_time: Option<f64>,
    /// For a scheduler wait, the interval it was measured over (s).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub interval_s: Option<f64>,
}

/// The engine's account of its stalls at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StallReport {
    /// The receive thread with the longest gap between rounds that got data.
    pub longest_gap: Option<Stall>,
    /// The largest scheduler wait within [`NEAR_S`] of that gap's end, else the largest of any
    /// thread.
    pub largest_wait: Option<Stall>,
    /// Whether `largest_wait` was around the gap (within 2 s of its end).
    pub wait_near_gap: bool,
    /// The receive window (s): a receive thread away from its sockets longer than the socket
    /// buffers hold loses data whatever the window.
    pub recv_window_s: Option<f64>,
    /// The latest heap of any receive thread: how far behind its thread's newest heap it
    /// arrived (stream time). A window shorter than this lost heaps as too old.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub latest_heap: Option<Stall>,
    /// Packets the receive threads turned away, by reason, both polarisations together:
    /// `too_old` (behind the window), `no_buffer` (no free chunk: a later stage was behind).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub rejected: BTreeMap<String, u64>,
    /// The backend's pace: its time per frame against the stream time a frame holds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub compute: Option<ComputePace>,
}

/// How long the backend took per frame, against the stream time one frame holds (its chunk of
/// samples at the ADC rate): a mean near or above it is an engine short of compute, whatever
/// the threads' waits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputePace {
    /// Mean seconds from handing a frame to the backend until its output was ready.
    pub mean_s: f64,
    /// The same for the latest frame.
    pub last_s: f64,
    /// Stream seconds per frame.
    pub frame_s: f64,
    /// Frames the backend holds at once (1 for an engine that does not say). Above 1 the
    /// times are how long frames queued behind one another, not the backend's work: the
    /// compute thread collects a frame only when it needs its place.
    #[serde(default = "one")]
    pub in_flight: u64,
}

fn one() -> u64 {
    1
}

impl ComputePace {
    /// The mean over the frames computed between two statuses (the engine's mean is since it
    /// started); the latest frame's time from the later one.
    fn between(before: &Status, after: &Status) -> Option<Self> {
        let end = Self::of(after)?;
        let (n0, n1) = (before.frames.computed as f64, after.frames.computed as f64);
        (n1 > n0).then(|| Self {
            mean_s: (end.mean_s * n1 - before.frames.processing_s_mean * n0) / (n1 - n0),
            ..end
        })
    }

    fn of(s: &Status) -> Option<Self> {
        let frame_s = s.input.chunk_samples as f64 / s.adc_sample_rate;
        (s.frames.computed > 0 && frame_s.is_finite() && frame_s > 0.0).then_some(Self {
            mean_s: s.frames.processing_s_mean,
            last_s: s.frames.processing_s_last,
            frame_s,
            in_flight: s.frames.in_flight_max.max(1),
        })
    }
}

impl StallReport {
    /// None when the engine reports no stall statistics (an older engine).
    pub fn from_status(s: &Status) -> Option<Self> {
        let lane = |pol: usize, lane: usize| format!("fengine-recv{pol}.{lane}");
        let longest_gap = s
            .input
            .pols
            .iter()
            .flat_map(|p| {
                p.lanes.iter().map(move |l| Stall {
                    thread: lane(p.pol, l.lane),
                    seconds: l.longest_gap_s,
                    unix_time: l.longest_gap_unix_time,
                    interval_s: None,
                })
            })
            .filter(|g| g.unix_time.is_some())
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
        let waits: Vec<Stall> = s
            .input
            .pols
            .iter()
            .flat_map(|p| {
                p.lanes
                    .iter()
                    .filter_map(move |l| wait(lane(p.pol, l.lane), l.sched.as_ref()?))
            })
            .chain(
                s.threads
                    .iter()
                    .filter_map(|t| wait(t.thread.clone(), t.sched.as_ref()?)),
            )
            .collect();
        let gap_at = longest_gap.as_ref().and_then(|g| g.unix_time);
        let near = |w: &&Stall| {
            gap_at
                .zip(w.unix_time)
                .is_some_and(|(g, t)| (g - t).abs() <= NEAR_S)
        };
        let largest = |it: &mut dyn Iterator<Item = &Stall>| {
            it.max_by(|a, b| a.seconds.total_cmp(&b.seconds)).cloned()
        };
        let around = largest(&mut waits.iter().filter(near));
        let wait_near_gap = around.is_some();
        let largest_wait = around.or_else(|| largest(&mut waits.iter()));
        let latest_heap = s
            .input
            .pols
            .iter()
            .flat_map(|p| {
                p.lanes.iter().map(move |l| Stall {
                    thread: lane(p.pol, l.lane),
                    seconds: l.latest_heap_s,
                    unix_time: None,
                    interval_s: None,
                })
            })
            .filter(|l| l.seconds > 0.0)
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
        if longest_gap.is_none() && largest_wait.is_none() && s.input.recv_window.is_none() {
            return None;
        }
        let mut rejected = BTreeMap::new();
        for (reason, n) in s.input.pols.iter().flat_map(|p| &p.rejected) {
            *rejected.entry(reason.clone()).or_insert(0) += n;
        }
        rejected.retain(|_, n| *n > 0);
        Some(Self {
            longest_gap,
            largest_wait,
            wait_near_gap,
            recv_window_s: s.input.recv_window.as_ref().map(|w| w.seconds),
            latest_heap,
            rejected,
            compute: ComputePace::of(s),
        })
    }

    /// What happened between two statuses of one engine (a max-rate trial's window): the
    /// packets turned away in it, the backend's mean time per frame over the frames computed in
    /// it, and the longest receive gap, largest scheduler wait and latest heap only where the
    /// window set a new worst (the engine keeps its worst since it started, so a worst that did
    /// not move happened before the window). None as [`Self::from_status`].
    pub fn between(before: &Status, after: &Status) -> Option<Self> {
        let (old, mut new) = (Self::from_status(before), Self::from_status(after)?);
        let old = old.unwrap_or_default();
        let moved = |b: &Option<Stall>, a: &Option<Stall>| match (b, a) {
            (Some(b), Some(a)) => a.seconds > b.seconds || a.unix_time != b.unix_time,
            (None, a) => a.is_some(),
            (Some(_), None) => false,
        };
        if !moved(&old.longest_gap, &new.longest_gap) {
            new.longest_gap = None;
            new.wait_near_gap = false;
        }
        if !moved(&old.largest_wait, &new.largest_wait) {
            new.largest_wait = None;
            new.wait_near_gap = false;
        }
        if !moved(&old.latest_heap, &new.latest_heap) {
            new.latest_heap = None;
        }
        for (reason, n) in new.rejected.iter_mut() {
            *n = n.saturating_sub(old.rejected.get(reason).copied().unwrap_or(0));
        }
        new.rejected.retain(|_, n| *n > 0);
        new.compute = ComputePace::between(before, after);
        Some(new)
    }

    /// One line for a text report.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(g) = &self.longest_gap {
            parts.push(format!(
                "longest receive gap {} on {}{}",
                ms(g.seconds),
                g.thread,
                at(g.unix_time)
            ));
        }
        if let Some(w) = &self.largest_wait {
            parts.push(format!(
                "{} scheduler wait {} on {} (in {}){}",
                if self.wait_near_gap {
                    "around it, the largest"
                } else {
                    "the largest"
                },
                ms(w.seconds),
                w.thread,
                w.interval_s.map_or("-".into(), ms),
                at(w.unix_time)
            ));
        }
        if let Some(l) = &self.latest_heap {
            parts.push(format!(
                "latest heap {} behind on {}",
                ms(l.seconds),
                l.thread
            ));
        }
        if let Some(r) = self.recv_window_s {
            parts.push(format!("receive window {}", ms(r)));
        }
        if !self.rejected.is_empty() {
            let why: Vec<String> = self
                .rejected
                .iter()
                .map(|(reason, n)| format!("{reason} {n}{}", meaning(reason)))
                .collect();
            parts.push(format!("packets turned away: {}", why.join(", ")));
        }
        if let Some(c) = self.compute.as_ref().filter(|c| c.in_flight > 1) {
            parts.push(format!(
                "the backend's pace is not measured with {} frames in flight (a frame was collected {:.1} ms after hand-off on average, {:.1} ms of stream each)",
                c.in_flight,
                c.mean_s * 1e3,
                c.frame_s * 1e3
            ));
        } else if let Some(c) = &self.compute {
            parts.push(format!(
                "the backend took {:.1} ms a frame on average (latest {:.1}) for {:.1} ms of stream: {:.0}% of real time",
                c.mean_s * 1e3,
                c.last_s * 1e3,
                c.frame_s * 1e3,
                100.0 * c.mean_s / c.frame_s
            ));
        }
        if parts.is_empty() {
            "the engine reports no stall".into()
        } else {
            parts.join("; ")
        }
    }
}

/// What a rejection reason says about where the loss came from.
fn meaning(reason: &str) -> &'static str {
    match reason {
        "no_buffer" => " (no free chunk: compute or send was behind)",
        "too_old" => " (later than the receive window)",
        _ => "",
    }
}

fn wait(thread: String, w: &SchedWaits) -> Option<Stall> {
    w.max_wait_unix_time.map(|t| Stall {
        thread,
        seconds: w.max_wait_s,
        unix_time: Some(t),
        interval_s: Some(w.max_wait_interval_s),
    })
}

fn ms(s: f64) -> String {
    format!("{:.0} ms", s * 1e3)
}

/// " at 21:55:03.2 UTC", from a Unix time.
fn at(t: Option<f64>) -> String {
    t.map_or(String::new(), |t| {
        let day = t.rem_euclid(86_400.0);
        let (h, m) = ((day / 3600.0) as u32, ((day % 3600.0) / 60.0) as u32);
        format!(" at {h:02}:{m:02}:{:04.1} UTC", day % 60.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgpu_api::engine::{Input, LaneStalls, PolInput, RecvWindow, ThreadWaits};

    fn sched(max: f64, at: f64) -> Option<SchedWaits> {
        Some(SchedWaits {
            wait_s: 1.0,
            max_wait_s: max,
            max_wait_unix_time: Some(at),
            max_wait_interval_s: 0.1,
        })
    }

    fn status() -> Status {
        let lane = |lane: usize, gap: f64, at: f64, w: f64, w_at: f64| LaneStalls {
            lane,
            longest_gap_s: gap,
            longest_gap_unix_time: Some(at),
            longest_gap_timestamp: Some(1 << 30),
            latest_heap_s: gap / 4.0,
            sched: sched(w, w_at),
        };
        let json = serde_json::json!({
            "backend": "cpu", "running": true, "uptime_s": 1.0, "feng_id": 0,
            "adc_sample_rate": 1e9, "sync_time": null, "max_delay_s": 0.0,
            "input": {"sample_bits": 10, "heap_samples": 4096, "chunk_samples": 1048576,
                      "overlap_samples": 0, "pols": []},
            "outputs": {}, "frames": {"computed": 0, "empty": 0, "last_timestamp": 0,
              "last_unix_time": 0.0, "processing_s_last": 0.0, "processing_s_mean": 0.0},
            "delay_out_of_span": 0, "delays": null, "queues": {},
            "control": {"rejected_requests": 0}
        });
        let mut s: Status = serde_json::from_value(json).unwrap();
        s.input = Input {
            pols: vec![
                PolInput {
                    pol: 0,
                    lanes: vec![lane(0, 0.004, 1000.0, 0.002, 1000.0)],
                    ..Default::default()
                },
                PolInput {
                    pol: 1,
                    lanes: vec![lane(0, 0.231, 50_103.25, 0.19, 50_103.2)],
                    ..Default::default()
                },
            ],
            recv_window: Some(RecvWindow {
                chunks: 25,
                seconds: 0.1,
                window_bytes: 1,
                spare_bytes: 2,
            }),
            ..s.input
        };
        s.threads = vec![ThreadWaits {
            thread: "fengine-compute".into(),
            sched: sched(0.5, 9000.0),
        }];
        s
    }

    /// The lane with the longest gap is named, and the wait around it rather than a larger one
    /// at another time.
    #[test]
    fn names_the_stalled_lane_and_the_wait_around_it() {
        let r = StallReport::from_status(&status()).unwrap();
        let g = r.longest_gap.as_ref().unwrap();
        assert_eq!((g.thread.as_str(), g.seconds), ("fengine-recv1.0", 0.231));
        let w = r.largest_wait.as_ref().unwrap();
        assert_eq!((w.thread.as_str(), w.seconds), ("fengine-recv1.0", 0.19));
        assert!(r.wait_near_gap);
        assert_eq!(
            r.line(),
            "longest receive gap 231 ms on fengine-recv1.0 at 13:55:03.2 UTC; around it, the \
             largest scheduler wait 190 ms on fengine-recv1.0 (in 100 ms) at 13:55:03.2 UTC; \
             latest heap 58 ms behind on fengine-recv1.0; receive window 100 ms"
        );
        // Packets turned away and the backend's pace: where loss without a stall came from.
        let mut s = status();
        s.input.pols[0].rejected = BTreeMap::from([("no_buffer".into(), 7), ("too_old".into(), 0)]);
        s.input.pols[1].rejected = BTreeMap::from([("no_buffer".into(), 5)]);
        s.frames.computed = 10;
        s.frames.processing_s_mean = 0.0011;
        s.frames.processing_s_last = 0.0015;
        let r = StallReport::from_status(&s).unwrap();
        assert_eq!(r.rejected, BTreeMap::from([("no_buffer".into(), 12)]));
        assert!(
            r.line().ends_with(
                "; packets turned away: no_buffer 12 (no free chunk: compute or send was \
                 behind); the backend took 1.1 ms a frame on average (latest 1.5) for 1.0 ms \
                 of stream: 105% of real time"
            ),
            "{}",
            r.line()
        );
        // With frames in flight the times are queueing, not work: no pace is claimed.
        s.frames.in_flight_max = 4;
        let r = StallReport::from_status(&s).unwrap();
        assert!(
            r.line().ends_with(
                "the backend's pace is not measured with 4 frames in flight (a frame was \
                 collected 1.1 ms after hand-off on average, 1.0 ms of stream each)"
            ),
            "{}",
            r.line()
        );
        // Without a gap near it, the largest wait anywhere.
        let mut s = status();
        s.input.pols[1].lanes[0].sched = None;
        let r = StallReport::from_status(&s).unwrap();
        assert_eq!(r.largest_wait.unwrap().thread, "fengine-compute");
        assert!(!r.wait_near_gap);
        // An engine without the statistics: nothing to say.
        let mut s = status();
        s.input.pols.iter_mut().for_each(|p| p.lanes.clear());
        s.threads.clear();
        s.input.recv_window = None;
        assert_eq!(StallReport::from_status(&s), None);
    }

    /// Over a window: only what moved in it. Rejects and the backend's mean are the window's
    /// own; a worst the engine set before the window is not the window's.
    #[test]
    fn a_window_reports_what_moved_in_it() {
        let mut before = status();
        before.input.pols[0].rejected = BTreeMap::from([("no_buffer".into(), 100)]);
        before.frames.computed = 10;
        before.frames.processing_s_mean = 0.001;
        let mut after = before.clone();
        after.input.pols[0].rejected = BTreeMap::from([("no_buffer".into(), 130)]);
        after.input.pols[1].rejected = BTreeMap::from([("too_old".into(), 4)]);
        // 30 frames at 2 ms each after the first 10 at 1 ms.
        after.frames.computed = 40;
        after.frames.processing_s_mean = (10.0 * 0.001 + 30.0 * 0.002) / 40.0;
        after.frames.processing_s_last = 0.0021;
        let r = StallReport::between(&before, &after).unwrap();
        assert_eq!(
            r.rejected,
            BTreeMap::from([("no_buffer".into(), 30), ("too_old".into(), 4)])
        );
        let c = r.compute.as_ref().unwrap();
        assert!((c.mean_s - 0.002).abs() < 1e-12, "{c:?}");
        assert_eq!((c.last_s, c.frame_s), (0.0021, 1048576.0 / 1e9));
        // No worst moved: none is the window's.
        assert_eq!(
            (&r.longest_gap, &r.largest_wait, &r.latest_heap),
            (&None, &None, &None)
        );
        // A longer gap on lane 0 of polarisation 0 is.
        after.input.pols[0].lanes[0].longest_gap_s = 0.5;
        after.input.pols[0].lanes[0].longest_gap_unix_time = Some(60_000.0);
        let r = StallReport::between(&before, &after).unwrap();
        let g = r.longest_gap.unwrap();
        assert_eq!((g.thread.as_str(), g.seconds), ("fengine-recv0.0", 0.5));
        // No frame computed in the window: no pace.
        after.frames.computed = 10;
        assert_eq!(StallReport::between(&before, &after).unwrap().compute, None);
    }
}

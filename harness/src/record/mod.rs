//! What the harness's loops produce: one record per watch interval, per max-rate trial and per
//! response step, and the summaries and reports made of them. Each says what was measured, the
//! limit it was held to where there is one, and whether it passed. The loops only make these;
//! [`render`](crate::render) turns them into progress lines, tables, JSON and SVG.

use std::sync::Arc;
use std::time::Duration;

use fgpu_api::engine::PolInput;
use serde::Serialize;

use crate::content::{ChannelPower, Peak, Verdict};
use crate::control::EngineCounters;
use crate::cpu::Cores;
use crate::gaps::SeqCounts;
use crate::receive::{CounterCheck, SubstreamSnapshot};
use crate::search::{HoldConfig, Phase, SearchConfig};

pub mod qualify;
pub mod soak;

// --- watch ---

/// One progress interval of `watch`: the rates over the interval and the counts so far.
/// With several engines (`--engines`), the rate is the mean per engine, the counts are summed
/// over them, the content (peaks, tone, verdict, power) is antenna 0's, which the live page
/// draws, and `engines` holds each engine's own.
#[derive(Clone, Debug, Serialize)]
pub struct WatchInterval {
    /// Seconds since the watch began, at the end of the interval.
    pub elapsed_s: f64,
    /// Received rate over the interval, as ADC samples per second per polarisation.
    pub sample_rate: f64,
    pub heaps_per_s: f64,
    /// Sequence counts since the start, over all substreams.
    pub sequence: SeqCounts,
    /// Malformed packets and misaligned heaps since the start.
    pub malformed: u64,
    /// Packets the harness's own sockets dropped since the start.
    pub socket_drops: u64,
    /// The strongest channel per polarisation over the interval.
    pub peaks: [Option<Peak>; 2],
    /// The tone's fractional channel, when it is checked.
    pub expected_channel: Option<f64>,
    /// The content check of this interval, when the tone is known.
    pub verdict: Option<Verdict>,
    /// The interval's channel power, for a live page to draw (not part of the JSON record).
    #[serde(skip)]
    pub power: Arc<ChannelPower>,
    /// The engine's input sensors per polarisation over the interval (antenna 0's in an array);
    /// None when the engine's status could not be read now and at the interval's start.
    pub input: Option<Vec<PolSensors>>,
    /// An array's engines, each on its own (empty with one engine).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<EngineInterval>,
    /// The engine output watched, where the engine has several (`--output`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// One input polarisation's sensors over a watch interval, from the engine's `GET /status`
/// (katgpucbf's `dig-rms-dbfs` and `dig-clip-cnt`): the latest level, and how far the counters
/// grew since the previous reading. An engine older than the sensors reports no level and
/// counts nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PolSensors {
    pub pol: usize,
    /// The latest whole frame's rms in dB relative to a full-scale sine (-200: silence); None
    /// before the first frame, from the null backend and from older engines.
    pub rms_dbfs: Option<f64>,
    /// Samples at the most negative or positive code, over the interval.
    pub full_scale_samples: u64,
    /// Frames measured over the interval (what `full_scale_samples` is counted over).
    pub frames_measured: u64,
    /// Saturated samples the digitiser's status items reported, over the interval.
    pub digitiser_clip_samples: u64,
    /// Heaps whose digitiser status item reported saturation, over the interval.
    pub digitiser_clip_heaps: u64,
}

impl PolSensors {
    /// Each polarisation of `now` against the same polarisation of `before`: the counters'
    /// growth (a counter that went down, or a polarisation not read before, means the engine
    /// restarted in between: then all of its count is new) and the latest level.
    pub fn between(before: &[PolInput], now: &[PolInput]) -> Vec<Self> {
        let grown = |a: u64, b: Option<u64>| match b {
            Some(b) if b <= a => a - b,
            _ => a,
        };
        now.iter()
            .map(|n| {
                let b = before.iter().find(|b| b.pol == n.pol);
                Self {
                    pol: n.pol,
                    rms_dbfs: n.rms_dbfs,
                    full_scale_samples: grown(
                        n.full_scale_samples,
                        b.map(|b| b.full_scale_samples),
                    ),
                    frames_measured: grown(n.frames_measured, b.map(|b| b.frames_measured)),
                    digitiser_clip_samples: grown(
                        n.digitiser_clip_samples,
                        b.map(|b| b.digitiser_clip_samples),
                    ),
                    digitiser_clip_heaps: grown(
                        n.digitiser_clip_heaps,
                        b.map(|b| b.digitiser_clip_heaps),
                    ),
                }
            })
            .collect()
    }
}

/// One engine of an array over a watch interval.
#[derive(Clone, Debug, Serialize)]
pub struct EngineInterval {
    pub feng_id: usize,
    /// Received rate of this engine's heaps over the interval (sample/s per polarisation).
    pub sample_rate: f64,
    pub heaps_per_s: f64,
    /// Sequence counts of this engine's heaps since the start.
    pub sequence: SeqCounts,
    pub malformed: u64,
    pub peaks: [Option<Peak>; 2],
    pub expected_channel: Option<f64>,
    pub verdict: Option<Verdict>,
    /// This engine's input sensors over the interval (None: its status was not read).
    pub input: Option<Vec<PolSensors>>,
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

/// The whole `watch` run; `ok` says whether gaps, malformed heaps or wrong content were seen.
/// With several engines, the counts are summed over them, `sample_rate` is the mean per engine
/// and `aggregate_rate` their sum, `ok` needs every engine ok, and `engines` holds each engine's
/// own summary.
#[derive(Clone, Debug, Serialize)]
pub struct WatchSummary {
    pub ok: bool,
    /// Why not ok.
    pub failures: Vec<String>,
    /// The engine output watched, by name (None when the engine's status could not be read).
    pub output: Option<String>,
    pub duration_s: f64,
    /// Output substreams joined (with an array, each holds a lane per engine).
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
    /// Heaps dsim skipped over the run because it fell more than --max-late behind its
    /// schedule, when it says: lost, a failure.
    pub dsim_heaps_skipped: Option<u64>,
    /// Stalls dsim made up over the run (sent late at its catch-up rate, no heap lost), when it
    /// says: not a failure.
    pub dsim_catch_ups: Option<u64>,
    /// Host-wide UDP receive-buffer drops over the run.
    pub udp_rcvbuf_errors: Option<u64>,
    /// An array's received rate, summed over its engines (sample/s per polarisation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_rate: Option<f64>,
    /// An array's heap counters checked, over every engine and substream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_counters: Option<CounterCheck>,
    /// An array's engines, each on its own (empty with one engine).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<EngineSummary>,
    /// Every substream (with an array, every engine's lane of every substream).
    pub per_substream: Vec<SubstreamSnapshot>,
    /// The engine's worst stalls at the end of the run, from its status (one engine; absent
    /// where it does not report them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalls: Option<crate::stalls::StallReport>,
}

/// One engine of an array over the whole `watch` run: its own verdict, counts, content and
/// counters.
#[derive(Clone, Debug, Serialize)]
pub struct EngineSummary {
    pub feng_id: usize,
    pub ok: bool,
    pub failures: Vec<String>,
    pub heaps: u64,
    /// Received rate of this engine's heaps (sample/s per polarisation).
    pub sample_rate: f64,
    pub sequence: SeqCounts,
    pub malformed: u64,
    pub heap_counters: Option<CounterCheck>,
    pub content: ContentSummary,
    pub engine: Option<EngineCounters>,
    pub dsim_heaps_skipped: Option<u64>,
    pub dsim_catch_ups: Option<u64>,
}

// --- max-rate ---

/// One max-rate trial: the rate asked for, what the window showed, and the verdict.
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
    /// An array's received rate summed over its engines (with an array, `received_rate` is the
    /// mean per engine and the counts are summed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_rate: Option<f64>,
    /// An array's engines, each judged on its own heaps and counters: the trial passes only when
    /// every one passed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<EngineTrial>,
    /// The engine's stall figures over the window (one engine; where it reports them): packets
    /// turned away by reason, the backend's time per frame, and any worst the window set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalls: Option<crate::stalls::StallReport>,
}

/// One engine of an array over a trial's window.
#[derive(Clone, Debug, Serialize)]
pub struct EngineTrial {
    pub feng_id: usize,
    pub pass: bool,
    pub reasons: Vec<String>,
    /// Sample rate per polarisation this engine's received heaps stand for.
    pub received_rate: f64,
    pub missing_input: f64,
    pub skipped_output: f64,
    pub gaps: i64,
    pub dsim_heaps_skipped: Option<u64>,
}

/// Where a running trial is, for a progress display.
#[derive(Clone, Debug, PartialEq)]
pub enum TrialProgress {
    Warmup {
        label: String,
        elapsed_s: f64,
        total_s: f64,
    },
    Settling {
        label: String,
        /// How long the losses have been still, of the `still_s` needed, waiting at most `max_s`.
        still_for_s: f64,
        still_s: f64,
        max_s: f64,
    },
    Observe {
        label: String,
        elapsed_s: f64,
        total_s: f64,
        received_rate: f64,
        gaps: i64,
    },
    /// The window ended.
    Done,
}

/// One search (one engine backend).
#[derive(Clone, Debug, Serialize)]
pub struct SearchReport {
    pub backend: String,
    /// The engine output the search received, by name (absent when the engine did not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    pub config: SearchConfig,
    /// Highest rate whose trials (one window each, 20 s by default) all passed (sample/s per
    /// polarisation), None if `low` failed. With an array, per engine: every dsim ran at it and
    /// every engine passed.
    pub best: Option<f64>,
    /// How `best` was held (`--hold`), when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldConfig>,
    /// The first rate from `best` down that held for the hold's whole window: the sustained
    /// rate (None: not held, or every step lost something).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<f64>,
    /// An array's engines (absent with one engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engines: Option<usize>,
    /// An array's sustained rate over all engines: `best` x engines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_best: Option<f64>,
    pub lowest_fail: Option<f64>,
    pub trials: Vec<TrialRecord>,
}

/// A rate measured outside the search and set beside it (e.g. the transport alone, from spead's
/// chain bench in the same run).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reference {
    pub name: String,
    /// Sample/s per polarisation.
    pub rate: f64,
}

/// Why text is not a `NAME=RATE` reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// No `=` in the text.
    #[error("'{0}' is not NAME=RATE (e.g. 'transport alone=6.3e9')")]
    Form(String),
    /// Nothing but spaces before the `=`.
    #[error("'{0}' has no name before '='")]
    NoName(String),
    /// A rate that is not a positive finite number.
    #[error("'{0}' is not a positive rate in sample/s per polarisation")]
    Rate(String),
}

impl std::str::FromStr for Reference {
    type Err = ReferenceError;

    /// `NAME=RATE`, the rate in sample/s per polarisation (e.g. `transport alone=6.3e9`).
    fn from_str(s: &str) -> Result<Self, ReferenceError> {
        let (name, rate) = s
            .rsplit_once('=')
            .ok_or_else(|| ReferenceError::Form(s.into()))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(ReferenceError::NoName(s.into()));
        }
        match rate.trim().parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Ok(Self {
                name: name.into(),
                rate: r,
            }),
            _ => Err(ReferenceError::Rate(rate.into())),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MaxRateReport {
    pub searches: Vec<SearchReport>,
    /// best / best of the null backend, with --compare-null.
    pub ratio_to_null: Option<f64>,
    /// Rates measured beside the search (--reference), drawn on the same axes.
    pub references: Vec<Reference>,
    /// How the system was set up (mode, geometry, arguments).
    pub system: serde_json::Value,
}

impl MaxRateReport {
    pub fn compute_ratio(&mut self) {
        let best = |name: &str| {
            self.searches
                .iter()
                .find(|s| s.backend == name)
                .and_then(|s| s.best)
        };
        let null = best("null");
        let other = self
            .searches
            .iter()
            .find(|s| s.backend != "null")
            .and_then(|s| s.best);
        self.ratio_to_null = match (other, null) {
            (Some(o), Some(n)) if n > 0.0 => Some(o / n),
            _ => None,
        };
    }
}

// --- response ---

/// One tone offset of the channel response.
#[derive(Clone, Debug, Serialize)]
pub struct ResponsePoint {
    /// Tone offset from the channel centre (channels).
    pub offset: f64,
    pub frequency: f64,
    pub gain: f64,
    /// Mean cross-power per spectrum, gain divided out.
    pub power: f64,
    /// Relative to the centre (the largest measured power when 0 was not measured).
    pub measured_db: Option<f64>,
    pub theory_db: f64,
    /// measured - theory, where the theory is above the floor.
    pub deviation_db: Option<f64>,
    pub spectra: u64,
    pub saturated_fraction: f64,
    /// |cross| / sqrt(auto0 auto1): near 1 when the tone dominates, near 0 when noise does.
    pub coherence: f64,
}

/// A step of the response as it is measured (before the points are normalised and judged).
#[derive(Clone, Debug)]
pub struct ResponseStep {
    /// 1-based, of `steps`.
    pub step: usize,
    pub steps: usize,
    pub point: ResponsePoint,
}

#[derive(Clone, Debug, Serialize)]
pub struct ResponseConfig {
    /// The channel measured.
    pub channel: usize,
    /// Channels each side of its centre the tone visits.
    pub span: f64,
    pub steps_per_channel: usize,
    /// Integration per step.
    pub integration: Duration,
    /// Wait after changing tone and gain before integrating (signal and pipeline latency).
    pub settle: Duration,
    /// Tone amplitude, fraction of full scale.
    pub amplitude: f64,
    /// Noise dsim adds (fraction of full scale), if set.
    pub noise: Option<f64>,
    /// Output level (counts) each step's gain aims the tone at.
    pub target: f64,
    pub max_gain: f64,
    /// Compare only where the theory is above this (dB).
    pub floor_db: f64,
    pub tolerance_db: f64,
    /// Set a gain per step (false: keep the engine's gain; range limited by the output's bits).
    pub set_gains: bool,
}

/// The system's shape as the response needs it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ResponseGeometry {
    pub channels: usize,
    pub taps: usize,
    pub sample_bits: u32,
    /// The engine's output format (bits per component): the levels aimed at scale with its
    /// clamp.
    pub output_bits: crate::feng_raw::OutputBits,
    pub adc_rate: f64,
    /// The engine's PFB filter design, as its /status reports it.
    pub filter: FilterDesign,
    /// The frequencies the output's channels cover: where the tone goes for a channel offset.
    pub band: crate::band::Band,
}

/// An engine's PFB filter design (docs/signal-path.md): a Hann or rectangular taper times
/// sinc(w_cutoff x).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FilterDesign {
    pub rect: bool,
    pub w_cutoff: f64,
}

impl Default for FilterDesign {
    /// The MeerKAT design, and what an engine that does not say uses.
    fn default() -> Self {
        Self {
            rect: false,
            w_cutoff: 1.0,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ResponseReport {
    /// The engine output measured, by name (absent when the engine did not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    pub config: ResponseConfig,
    pub geometry: ResponseGeometry,
    pub points: Vec<ResponsePoint>,
    /// Largest |deviation| over the points above the floor.
    pub max_deviation_db: Option<f64>,
    pub worst_offset: Option<f64>,
    pub compared: usize,
    pub pass: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pol(p: usize, full: u64, frames: u64, clip: u64, rms: Option<f64>) -> PolInput {
        PolInput {
            pol: p,
            full_scale_samples: full,
            frames_measured: frames,
            digitiser_clip_samples: clip,
            digitiser_clip_heaps: clip / 10,
            rms_dbfs: rms,
            ..Default::default()
        }
    }

    #[test]
    fn references_parse_or_say_why() {
        let r: Reference = "transport alone = 6.3e9".parse().unwrap();
        assert_eq!((r.name.as_str(), r.rate), ("transport alone", 6.3e9));
        let said = |s: &str| s.parse::<Reference>().unwrap_err().to_string();
        assert_eq!(
            said("6.3e9"),
            "'6.3e9' is not NAME=RATE (e.g. 'transport alone=6.3e9')"
        );
        assert_eq!(said(" =1"), "' =1' has no name before '='");
        assert_eq!(
            said("a=-1"),
            "'-1' is not a positive rate in sample/s per polarisation"
        );
    }

    #[test]
    fn sensors_grow_over_the_interval_and_restart_from_zero() {
        let before = [
            pol(0, 100, 10, 50, Some(-20.0)),
            pol(1, 7, 10, 0, Some(-21.0)),
        ];
        let now = [pol(0, 130, 12, 70, Some(-19.5)), pol(1, 3, 2, 0, None)];
        let s = PolSensors::between(&before, &now);
        assert_eq!(
            s[0],
            PolSensors {
                pol: 0,
                rms_dbfs: Some(-19.5),
                full_scale_samples: 30,
                frames_measured: 2,
                digitiser_clip_samples: 20,
                digitiser_clip_heaps: 2,
            }
        );
        // Counters that went down: the engine restarted, all of their count is new.
        assert_eq!(s[1].full_scale_samples, 3);
        assert_eq!(s[1].frames_measured, 2);
        assert_eq!(s[1].rms_dbfs, None);
        // A polarisation not read before counts from zero.
        let s = PolSensors::between(&before[..1], &now);
        assert_eq!(s[1].full_scale_samples, 3);
    }

    #[test]
    fn an_older_engine_without_the_sensors_reads_as_no_level_and_no_counts() {
        // A polarisation as an engine before the input sensors served it.
        let old = serde_json::json!({
            "pol": 0, "sources": [], "receive_threads": 1, "packets": 5, "heaps_received": 5,
            "heaps_missing": 0, "resyncs": 0, "unpaired_chunks": 0, "socket_drops": 0,
            "last_timestamp": 0, "rejected": {}
        });
        let old: PolInput = serde_json::from_value(old).unwrap();
        let s = PolSensors::between(std::slice::from_ref(&old), std::slice::from_ref(&old));
        assert_eq!(s, vec![PolSensors::default()]);
    }

    #[test]
    fn the_interval_record_carries_the_sensors() {
        let sensors = PolSensors {
            pol: 1,
            rms_dbfs: Some(-21.25),
            full_scale_samples: 4,
            frames_measured: 3,
            digitiser_clip_samples: 9,
            digitiser_clip_heaps: 1,
        };
        let r = EngineInterval {
            feng_id: 2,
            sample_rate: 1e8,
            heaps_per_s: 10.0,
            sequence: SeqCounts::default(),
            malformed: 0,
            peaks: [None, None],
            expected_channel: None,
            verdict: None,
            input: Some(vec![PolSensors::default(), sensors]),
        };
        let v = serde_json::to_value(&r).unwrap();
        let p = &v["input"][1];
        assert_eq!(p["pol"], 1);
        assert_eq!(p["rms_dbfs"], -21.25);
        assert_eq!(p["full_scale_samples"], 4);
        assert_eq!(p["frames_measured"], 3);
        assert_eq!(p["digitiser_clip_samples"], 9);
        assert_eq!(p["digitiser_clip_heaps"], 1);
        assert_eq!(v["input"][0]["rms_dbfs"], serde_json::Value::Null);
        let unread = EngineInterval { input: None, ..r };
        assert_eq!(
            serde_json::to_value(&unread).unwrap()["input"],
            serde_json::Value::Null
        );
    }
}

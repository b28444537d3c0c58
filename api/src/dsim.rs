//! dsim's control plane: `GET /status` ([`Status`]), the signal and faults it takes and reports,
//! and the replies to its changes. Plain data: dsim keeps the rules (validation, applying an
//! update, compiling faults) next to the code that acts on them.

use serde::{Deserialize, Serialize};

/// One sinusoid common to both polarisations: `amplitude * cos(2 pi frequency t)`, amplitude as a
/// fraction of full scale (1.0 = 2^(sample_bits-1) counts).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tone {
    /// Hz, 0 (a constant) to rate/2.
    pub frequency: f64,
    /// Peak amplitude as a fraction of full scale.
    pub amplitude: f64,
}

/// The signal: tones common to both polarisations, then per polarisation independent Gaussian noise
/// and uniform dither, a per-polarisation delay, and quantisation with saturation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalSpec {
    /// The tones added to both polarisations (none: noise only).
    pub tones: Vec<Tone>,
    /// Noise rms as a fraction of full scale.
    pub noise: f64,
    /// Uniform dither of +-0.5 LSB before rounding.
    pub dither: bool,
    /// Per-polarisation delay in samples (fractional allowed): polarisation p emits `x(t + delay[p])`.
    pub delays: [f64; 2],
    /// Seeds the noise, the dither and the random faults.
    pub seed: u64,
}

impl Default for SignalSpec {
    /// dsim's documented default signal: no tones, noise of 0.05 full scale, dithered.
    fn default() -> Self {
        Self {
            tones: Vec::new(),
            noise: 0.05,
            dither: true,
            delays: [0.0; 2],
            seed: 1,
        }
    }
}

/// A partial signal, as PUT /signal takes it: fields left out keep their current values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalUpdate {
    /// Replaces every tone (an empty list removes them); None keeps them.
    pub tones: Option<Vec<Tone>>,
    /// Noise rms as a fraction of full scale, 0 for none; None keeps it.
    pub noise: Option<f64>,
    /// Dither on or off in both polarisations; None keeps it.
    pub dither: Option<bool>,
    /// Each polarisation's delay in samples, fractional allowed; None keeps them.
    pub delays: Option<[f64; 2]>,
    /// Seeds the noise, the dither and the random faults; None keeps it.
    pub seed: Option<u64>,
}

/// One component of a polarisation's signal. Amplitudes and rms are fractions of full scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Component {
    /// `amplitude * cos(2 pi frequency t + phase)`, phase in radians.
    Tone {
        /// Hz, 0 to rate/2; generated rounded to whole cycles per buffer.
        frequency: f64,
        /// Peak amplitude as a fraction of full scale.
        amplitude: f64,
        /// Phase in radians (left out: 0).
        #[serde(default)]
        phase: f64,
    },
    /// White Gaussian noise of the given rms. The noise is a function of the seed alone, so the
    /// same seed in both polarisations gives the same (fully correlated) noise, delayed with each
    /// polarisation's delay; different seeds give independent noise.
    Noise {
        /// Rms as a fraction of full scale, 0 or more.
        rms: f64,
        /// Picks the noise: equal seeds give the same noise, different seeds independent noise.
        seed: u64,
    },
    /// `count` tones of one amplitude at `start + i * spacing` Hz, phases 0.
    Comb {
        /// Frequency of the first tooth, Hz.
        start: f64,
        /// Hz between neighbouring teeth.
        spacing: f64,
        /// Number of teeth, 1 to 4096; the last must lie at or below rate/2.
        count: usize,
        /// Peak amplitude of every tooth as a fraction of full scale.
        amplitude: f64,
    },
}

/// One polarisation's signal: the sum of its components, evaluated at t + delay (delay in
/// samples, fractional allowed, applied to every component), then uniform dither of +-0.5 LSB
/// when on, then rounding to the sample bits with saturation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolSignal {
    /// What is summed, at most 64 (none: silence, or only dither).
    pub components: Vec<Component>,
    /// Delay in samples, fractional allowed: the polarisation emits `x(t + delay)` (left out: 0).
    #[serde(default)]
    pub delay: f64,
    /// Uniform dither of +-0.5 LSB before rounding, independent per polarisation (left out: on).
    #[serde(default = "yes")]
    pub dither: bool,
}

fn yes() -> bool {
    true
}

/// The per-polarisation form of PUT /signal (and of dsim's `--signal`): each polarisation given
/// replaces that polarisation's signal; one left out keeps its own. `seed` seeds the dither (and
/// the random faults); left out, it is kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolsRequest {
    /// Polarisation 0's new signal; None keeps its signal.
    pub pol0: Option<PolSignal>,
    /// Polarisation 1's new signal; None keeps its signal.
    pub pol1: Option<PolSignal>,
    /// Seeds the dither and the random faults; None keeps the seed.
    pub seed: Option<u64>,
}

/// katgpucbf's signal language (PUT /signal naming `signals`, dsim's `--signals`, katcp
/// `?signals`): one expression per polarisation, each ended by ';' (docs/signals.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalsRequest {
    /// The spec, e.g. `"cw(0.5, 1e8); wgn(0.05);"`; a single expression serves both
    /// polarisations.
    pub signals: String,
    /// Samples after which the signal repeats; it must divide the buffer (`max_period`). Left
    /// out: the whole buffer.
    #[serde(default)]
    pub period: Option<u64>,
}

/// A signal in katgpucbf's language in force, as katgpucbf's dsim sensors show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalsStatus {
    /// The spec as given (katgpucbf's `signals-orig`).
    pub signals_orig: String,
    /// The spec reproducibly written out, every `wgn` with its entropy (katgpucbf's `signals`).
    pub signals: String,
    /// Samples after which the signal repeats (katgpucbf's `period`).
    pub period: u64,
    /// The largest period allowed: the buffer (katgpucbf's `max-period`).
    pub max_period: u64,
}

/// What PUT /signal takes: katgpucbf's language when the body names `signals`, the
/// per-polarisation form when it names `pol0` or `pol1`, else the older common form
/// ([`SignalUpdate`]: tones common to both polarisations, independent noise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SignalRequest {
    /// A body naming `pol0` or `pol1`: each polarisation's signal given in full.
    Pols(PolsRequest),
    /// A body naming `signals`: a spec in katgpucbf's language for both polarisations.
    Signals(SignalsRequest),
    /// Any other body: applied to the latest common-form signal, which then rebuilds both
    /// polarisations.
    Common(SignalUpdate),
}

/// Which heaps a fault applies to: any heap listed, in a range, or drawn with `probability`.
/// A heap is named by its index k = timestamp / heap_samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Chance, 0 to 1, that any heap is chosen, drawn from the seed so a run repeats (left out: 0).
    #[serde(default)]
    pub probability: f64,
    /// Heap indices always chosen (left out: none).
    #[serde(default)]
    pub heaps: Vec<u64>,
    /// Half-open `[start, end)` heap index ranges.
    #[serde(default)]
    pub ranges: Vec<[u64; 2]>,
}

/// Reordering: a chosen heap is held back and sent after the next `window` heaps of its
/// destination group (counting those its sender thread sends).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reorder {
    /// Chance, 0 to 1, that any heap is held back, drawn from the seed (left out: 0).
    #[serde(default)]
    pub probability: f64,
    /// Heap indices always held back (left out: none).
    #[serde(default)]
    pub heaps: Vec<u64>,
    /// Half-open `[start, end)` heap index ranges held back (left out: none).
    #[serde(default)]
    pub ranges: Vec<[u64; 2]>,
    /// How many later heaps of the same destination group go out first (left out: 1).
    #[serde(default = "one")]
    pub window: usize,
}

fn one() -> usize {
    1
}

/// The faults of one polarisation. Corruption overwrites the SPEAD magic byte, so receivers
/// reject the packet as not SPEAD; truncation sends the first half of the datagram only, so its
/// payload is shorter than its header says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolFaults {
    /// Heaps never sent; None drops none.
    pub drop: Option<Selector>,
    /// Heaps sent twice; None duplicates none.
    pub duplicate: Option<Selector>,
    /// Heaps sent late, after others; None reorders none.
    pub reorder: Option<Reorder>,
    /// Heaps sent with the SPEAD magic byte overwritten; None corrupts none.
    pub corrupt: Option<Selector>,
    /// Heaps sent cut to the first half of their datagram; None (or absent) truncates none.
    #[serde(default)]
    pub truncate: Option<Selector>,
}

/// PUT /faults: each polarisation given replaces that polarisation's faults (`{}` clears them);
/// a polarisation left out keeps its faults. GET /faults answers the same shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsRequest {
    /// Polarisation 0's faults in full; None keeps its faults.
    pub pol0: Option<PolFaults>,
    /// Polarisation 1's faults in full; None keeps its faults.
    pub pol1: Option<PolFaults>,
}

/// Faults injected so far on one polarisation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Heaps not sent because the drop fault chose them.
    pub dropped: u64,
    /// Heaps sent a second time by the duplicate fault.
    pub duplicated: u64,
    /// Heaps held back and sent after later ones by the reorder fault.
    pub reordered: u64,
    /// Heaps sent with their SPEAD magic byte overwritten by the corrupt fault.
    pub corrupted: u64,
    /// Heaps sent cut to half a datagram by the truncate fault (absent from older dsims: 0).
    #[serde(default)]
    pub truncated: u64,
}

/// PUT /rate body, and GET /rate's reply.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateRequest {
    /// Samples per second per polarisation.
    pub rate: f64,
}

/// The reply to a rate change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateChange {
    /// Samples per second per polarisation from `from_heap` on.
    pub rate: f64,
    /// First heap (timestamp / heap_samples) sent at the new rate.
    pub from_heap: u64,
    /// That heap's timestamp in ADC samples, `from_heap * heap_samples`.
    pub from_timestamp: u64,
    /// Unix time at which that heap leaves.
    pub from_unix_time: f64,
}

/// The reply to a signal change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalChange {
    /// First heap with the new signal (a batch boundary).
    pub from_heap: u64,
    /// That heap's timestamp in ADC samples, `from_heap * heap_samples`.
    pub from_timestamp: u64,
    /// Unix time at which that heap leaves; heaps before it carry the old signal.
    pub from_unix_time: f64,
    /// The signal in force from that heap on, as `GET /signal` answers it.
    pub signal: SignalStatus,
}

/// Achieved rate of one polarisation over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateReport {
    /// Samples per second actually achieved (timestamps advanced / wall time).
    pub achieved_rate: Option<f64>,
    /// What the schedule asked for over the same heaps (the rate, unless it changed).
    pub expected_rate: Option<f64>,
    /// achieved / expected - 1.
    pub rate_error: Option<f64>,
    /// Seconds the measurement spans (up to 10).
    pub window_s: f64,
}

/// One polarisation's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolStatus {
    /// The polarisation, 0 or 1.
    pub pol: usize,
    /// Where its heaps go, `ADDR:PORT` or `ADDR+N:PORT` for N+1 multicast groups.
    pub destinations: String,
    /// Heaps whose timestamps have gone by (sent, dropped or held back).
    pub heaps: u64,
    /// Datagrams sent, duplicates, corrupted and truncated ones included.
    pub heaps_sent: u64,
    /// UDP payload bytes of the datagrams sent.
    pub bytes_sent: u64,
    /// Samples that saturated when quantised, over the heaps sent (a duplicate counts once): by
    /// katgpucbf's rule, those at full scale, |v| >= 2^(bits-1) - 1.
    pub saturated_samples: u64,
    /// Send calls that failed; the datagrams of a failed call are not counted as sent.
    pub send_errors: u64,
    /// Heaps never sent because the senders fell more than --max-late behind and skipped ahead.
    pub heaps_skipped: u64,
    /// Catch-ups: a send thread stalled (the host descheduled it) and sent its backlog at
    /// --catch-up-rate times the rate until back on schedule, every heap kept.
    #[serde(default)]
    pub catch_ups: u64,
    /// How far behind (s) a send thread was when its longest catch-up began.
    #[serde(default)]
    pub longest_catch_up_s: f64,
    /// Heaps sent later than due during catch-ups (their timestamps unchanged).
    #[serde(default)]
    pub heaps_sent_late: u64,
    /// Timestamp of the latest heap to leave.
    pub timestamp: Option<u64>,
    /// The rate this polarisation achieved over the last 10 s.
    pub rate: RateReport,
    /// Faults injected on this polarisation since the start.
    pub faults_injected: FaultCounts,
    /// The faults in force on this polarisation, as `GET /faults` answers them.
    pub faults: PolFaults,
}

/// One polarisation's signal in force.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolSignalStatus {
    /// The signal as given (or built from the common form), its fields inline.
    #[serde(flatten)]
    pub signal: PolSignal,
    /// The frequencies of its tones as generated, rounded to whole cycles per buffer period: one
    /// per tone component and `count` per comb, in the order of the components.
    pub tone_frequencies: Vec<f64>,
}

/// The signal in force (GET /signal, and in the status).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalStatus {
    /// Polarisation 0, then 1.
    pub pols: Vec<PolSignalStatus>,
    /// Seeds the dither and the random faults.
    pub seed: u64,
    /// Heap from which this signal is (or will be) sent.
    pub from_heap: u64,
    /// The spec in katgpucbf's language, when the signal was given in it (then `pols` hold no
    /// components and the spec is what is sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals: Option<SignalsStatus>,
}

impl SignalStatus {
    /// The strongest tone (a tone component or a comb tooth) of a polarisation, at its generated
    /// frequency.
    pub fn strongest_tone(&self, pol: usize) -> Option<Tone> {
        let p = self.pols.get(pol)?;
        let amplitudes = p.signal.components.iter().flat_map(|c| match c {
            Component::Tone { amplitude, .. } => vec![*amplitude],
            Component::Comb {
                count, amplitude, ..
            } => vec![*amplitude; *count],
            Component::Noise { .. } => vec![],
        });
        amplitudes
            .zip(&p.tone_frequencies)
            .map(|(amplitude, &frequency)| Tone {
                frequency,
                amplitude,
            })
            .max_by(|a, b| a.amplitude.abs().total_cmp(&b.amplitude.abs()))
    }
}

/// `GET /status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// "running", "finished" (reached its heap count) or "stopped".
    pub state: String,
    /// Requested samples per second per polarisation (the latest rate set).
    pub rate: f64,
    /// Lowest achieved rate of the two polarisations over the window.
    pub achieved_rate: Option<f64>,
    /// Largest relative error of the two polarisations over the window.
    pub rate_error: Option<f64>,
    /// Seconds the shorter of the two polarisations' measurements spans, up to 10 (0 until both
    /// have one).
    pub rate_window_s: f64,
    /// True when the rate error is within 0.1%.
    pub rate_ok: bool,
    /// Seconds the latest heap left after its due time (positive: behind).
    pub late_s: Option<f64>,
    /// Heaps of both polarisations never sent because the senders fell too far behind: the host
    /// could not send the rate.
    pub heaps_skipped: u64,
    /// Catch-ups after a stall over both polarisations' send threads (see [`PolStatus`]): no
    /// heap lost, a stall of the test bed made up.
    #[serde(default)]
    pub catch_ups: u64,
    /// The longest catch-up of either polarisation: how far behind (s) it began.
    #[serde(default)]
    pub longest_catch_up_s: f64,
    /// Heaps of both polarisations sent later than due during catch-ups.
    #[serde(default)]
    pub heaps_sent_late: u64,
    /// Unix time of timestamp 0 as configured.
    pub sync_time: f64,
    /// The sync time the current rate implies (equal to sync_time until the rate changes).
    pub implied_sync_time: f64,
    /// Timestamp of the latest heap due by the wall clock, in ADC samples.
    pub timestamp: u64,
    /// Samples per heap, per polarisation (`--heap-samples`).
    pub heap_samples: usize,
    /// Bits per sample (`--sample-bits`).
    pub sample_bits: u32,
    /// Index of the first heap sent: the first due shortly after dsim started, or 0 when the sync
    /// time was still ahead.
    pub first_heap: u64,
    /// Heap index at which sending stops (exclusive): after `--heaps` or `--duration`, at the
    /// latest where timestamps would reach 2^48.
    pub end_heap: Option<u64>,
    /// Send threads per polarisation (`--threads`, or one per 3 GB/s of the starting rate).
    pub threads_per_pol: usize,
    /// Heaps per send batch of each polarisation: its destination groups times the heaps one
    /// 64 KiB GSO send holds.
    pub heaps_per_batch: [usize; 2],
    /// Heaps in the repeating signal buffer: `--buffer-heaps`, rounded up to whole batches for
    /// every thread.
    pub buffer_heaps: usize,
    /// The signal in force, as `GET /signal` answers it.
    pub signal: SignalStatus,
    /// Polarisation 0's counters, then 1's.
    pub pols: Vec<PolStatus>,
    /// Seconds since dsim started.
    pub uptime_s: f64,
}

impl Status {
    /// The tone of largest amplitude in polarisation 0's signal, if there is one.
    pub fn strongest_tone(&self) -> Option<Tone> {
        self.signal.strongest_tone(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON dsim has always served reads into the types, and the strongest tone is found.
    #[test]
    fn reads_dsims_status() {
        let s: Status = serde_json::from_value(serde_json::json!({
            "state": "running", "rate": 1e8, "achieved_rate": 1e8, "rate_error": 0.0,
            "rate_window_s": 10.0, "rate_ok": true, "late_s": 1e-6, "heaps_skipped": 2,
            "sync_time": 0.0, "implied_sync_time": 0.0, "timestamp": 4096, "heap_samples": 4096,
            "sample_bits": 10, "first_heap": 0, "end_heap": null, "threads_per_pol": 1,
            "heaps_per_batch": [12, 12], "buffer_heaps": 8192,
            "signal": {"pols": [
                           {"components": [{"kind": "tone", "frequency": 1e6, "amplitude": 0.5},
                                           {"kind": "noise", "rms": 0.05, "seed": 7},
                                           {"kind": "comb", "start": 2e6, "spacing": 1e6,
                                            "count": 2, "amplitude": 0.1}],
                            "delay": 0.0, "dither": true,
                            "tone_frequencies": [1e6, 2e6, 3e6]},
                           {"components": [], "delay": 1.5, "dither": false,
                            "tone_frequencies": []}],
                       "seed": 1, "from_heap": 0},
            "pols": [{"pol": 0, "destinations": "127.0.0.1:7148", "heaps": 5, "heaps_sent": 5,
                      "bytes_sent": 100, "saturated_samples": 0, "send_errors": 0,
                      "heaps_skipped": 0, "timestamp": 4096,
                      "rate": {"achieved_rate": null, "expected_rate": null, "rate_error": null,
                               "window_s": 0.0},
                      "faults_injected": {"dropped": 1, "duplicated": 0, "reordered": 0,
                                          "corrupted": 0},
                      "faults": {"drop": null, "duplicate": null, "reorder": null,
                                 "corrupt": null}}],
            "uptime_s": 1.0
        }))
        .unwrap();
        assert_eq!(s.heaps_skipped, 2);
        assert_eq!(s.pols[0].faults_injected.dropped, 1);
        assert_eq!(
            s.strongest_tone(),
            Some(Tone {
                frequency: 1e6,
                amplitude: 0.5
            })
        );
        assert_eq!(
            s.signal.strongest_tone(1),
            None,
            "no tone in pol 1's signal"
        );
        let back: Status = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn requests_refuse_unknown_fields_and_fill_defaults() {
        assert!(serde_json::from_str::<SignalUpdate>(r#"{"nosie": 1}"#).is_err());
        assert!(serde_json::from_str::<FaultsRequest>(r#"{"pol2": {}}"#).is_err());
        let f: FaultsRequest =
            serde_json::from_str(r#"{"pol0": {"reorder": {"heaps": [3]}}}"#).unwrap();
        assert_eq!(f.pol0.unwrap().reorder.unwrap().window, 1);
    }

    #[test]
    fn signal_requests_take_either_form_and_refuse_typos() {
        let r: SignalRequest = serde_json::from_str(
            r#"{"pol1": {"components": [{"kind": "noise", "rms": 0.1, "seed": 3},
                                        {"kind": "tone", "frequency": 1e6, "amplitude": 0.2}],
                         "delay": 2.5}}"#,
        )
        .unwrap();
        let SignalRequest::Pols(p) = r else {
            panic!("not the per-polarisation form: {r:?}")
        };
        let pol1 = p.pol1.unwrap();
        assert!(p.pol0.is_none() && pol1.dither && pol1.delay == 2.5);
        assert_eq!(
            pol1.components[1],
            Component::Tone {
                frequency: 1e6,
                amplitude: 0.2,
                phase: 0.0
            }
        );
        let r: SignalRequest = serde_json::from_str(r#"{"noise": 0.1}"#).unwrap();
        assert!(matches!(r, SignalRequest::Common(u) if u.noise == Some(0.1)));
        for bad in [
            r#"{"pol0": {"components": [{"kind": "tone", "frequency": 1, "amplitude": 1, "phse": 0}]}}"#,
            r#"{"pol0": {"components": [{"kind": "sawtooth"}]}}"#,
            r#"{"pol0": {"components": []}, "noise": 0.1}"#,
        ] {
            assert!(serde_json::from_str::<SignalRequest>(bad).is_err(), "{bad}");
        }
    }
}

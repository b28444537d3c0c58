//! The F-engine's `GET /status`: the engine as a whole (backend, timing, delays), its one input
//! (both polarisations of one digitiser) and its outputs keyed by name. Delays belong to the
//! engine (they act on the input); gains, channels and destinations belong to each output. The
//! requests its control takes (delays, gains, a narrowband centre) are in `control.rs` beside
//! this file, re-exported here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod control;
pub mod katgpucbf_text;

pub use control::{CentreRequest, DelayRequest, Gain, Gains, GainsRequest, PolDelay, PolDelaySpec};

/// The name of the output that the single-output command-line flags (`--dst`, `--channels`, ...)
/// describe. An engine started with `--wideband NAME:...` outputs has the names given instead
/// (this one only if given).
pub const WIDEBAND: &str = "wideband";

/// The engine's default `--send-rate-factor`: its output may leave at up to this many times the
/// rate, so that a sender that fell behind (a stall of the host) catches up.
pub const SEND_RATE_FACTOR: f64 = 1.1;

fn single() -> String {
    "single".into()
}

fn two_pass() -> String {
    "two-pass".into()
}

/// `GET /status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// "reference", "cpu", "cuda" or "null".
    pub backend: String,
    /// The CUDA backend's precision between its two wideband passes: "single" (float32), or
    /// "half" (float16, `--fft-precision half`). Engines that predate it report nothing: single.
    #[serde(default = "single")]
    pub fft_precision: String,
    /// The CUDA backend's kernels for wideband outputs of 1024 channels and more: "two-pass" or
    /// "three-pass" (`--wideband-kernels`). Engines that predate it report nothing: two-pass.
    #[serde(default = "two_pass")]
    pub wideband_kernels: String,
    /// False once the engine has been asked to stop.
    pub running: bool,
    /// Seconds since the engine started.
    pub uptime_s: f64,
    /// This engine's index in its array (`--feng-id`), sent as the F-engine id item of every heap.
    pub feng_id: u64,
    /// ADC samples per second per polarisation.
    pub adc_sample_rate: f64,
    /// Unix time of ADC timestamp 0, when given.
    pub sync_time: Option<f64>,
    /// Largest |delay| a delay model may ask for, in seconds.
    pub max_delay_s: f64,
    /// The digitiser input: its shape and each polarisation's counters.
    pub input: Input,
    /// Outputs by name: [`WIDEBAND`], or those that `--wideband` named.
    pub outputs: BTreeMap<String, Output>,
    /// How many frames the compute stage has processed, and how long they took.
    pub frames: Frames,
    /// Spectra whose delayed window fell outside the samples at hand (flagged, not computed).
    pub delay_out_of_span: u64,
    /// The delay model each polarisation runs with, once one has been loaded.
    pub delays: Option<Delays>,
    /// Items waiting in each of the pipeline's queues, by queue name.
    pub queues: BTreeMap<String, u64>,
    /// The control server's own counters.
    pub control: Control,
    /// What the scheduler took from the pipeline's threads other than the receivers (pairing,
    /// compute, send); the receivers' own are in each polarisation's `lanes` (absent from older
    /// engines: empty).
    #[serde(default)]
    pub threads: Vec<ThreadWaits>,
    /// Where the stream threads run (`--src-affinity`, `--affinity auto`, `--realtime`, ...).
    /// Engines that predate it report nothing: every thread on any core, normal scheduling.
    #[serde(default)]
    pub placement: Placement,
}

impl Status {
    /// The output of that name.
    pub fn output(&self, name: &str) -> Option<&Output> {
        self.outputs.get(name)
    }

    /// The output named [`WIDEBAND`]: `--dst`'s output, absent when `--wideband` named others.
    pub fn wideband(&self) -> Option<&Output> {
        self.output(WIDEBAND)
    }

    /// Digitiser heaps missing from the input, both polarisations together.
    pub fn heaps_missing(&self) -> u64 {
        self.input.pols.iter().map(|p| p.heaps_missing).sum()
    }

    /// Output heaps sent, every output together.
    pub fn heaps_sent(&self) -> u64 {
        self.outputs.values().map(|o| o.heaps_sent).sum()
    }

    /// Output heaps skipped (not sent because input was missing), every output together.
    pub fn heaps_skipped(&self) -> u64 {
        self.outputs.values().map(|o| o.heaps_skipped).sum()
    }
}

/// The engine's input: its shape and each polarisation's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Bits per digitiser sample.
    pub sample_bits: u32,
    /// Samples per digitiser heap.
    pub heap_samples: usize,
    /// New samples per polarisation per frame.
    pub chunk_samples: usize,
    /// Samples of the previous frame kept ahead of each chunk (filter history and delay room).
    pub overlap_samples: usize,
    /// One entry per polarisation, in order.
    pub pols: Vec<PolInput>,
    /// The receive window and the memory it takes (absent from older engines).
    #[serde(default)]
    pub recv_window: Option<RecvWindow>,
}

/// How long each receive thread holds a chunk open for late heaps (`--recv-window`), and the
/// memory that costs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecvWindow {
    /// Chunks each receive thread's window holds.
    pub chunks: usize,
    /// Those chunks' duration: every chunk reaches processing about this much after it ends.
    pub seconds: f64,
    /// Bytes of the chunks the windows hold, both polarisations together.
    pub window_bytes: u64,
    /// Bytes of all the receivers' spare chunk buffers (the windows', what the pairing stage
    /// holds, and a few more), both polarisations together.
    pub spare_bytes: u64,
}

/// What the scheduler took from one thread, from the kernel's per-thread statistics (read about
/// every 0.1 s): time it was ready to run but waited for a core.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedWaits {
    /// Waiting for a core since the thread started, seconds.
    pub wait_s: f64,
    /// The most it waited within one sampling interval, seconds: a stall of the thread shows
    /// here, up to the interval's length.
    pub max_wait_s: f64,
    /// Unix time that interval ended (null until the thread waited at all).
    pub max_wait_unix_time: Option<f64>,
    /// That interval's length, seconds (about 0.1; longer if the sampling thread itself
    /// stalled).
    pub max_wait_interval_s: f64,
}

/// One of the pipeline's threads and what the scheduler took from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadWaits {
    /// The thread's name, as `ps -L` shows it ("fengine-pair", ...).
    pub thread: String,
    /// Null where the kernel keeps no scheduler statistics.
    pub sched: Option<SchedWaits>,
}

/// One receive thread ("lane") of a polarisation and its stalls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LaneStalls {
    /// The lane's index within its polarisation (thread "fengine-recvP.L").
    pub lane: usize,
    /// The longest wall time between two of its receive rounds that got data while the stream
    /// flowed (no round between them found its sockets quiet), seconds: how long the thread
    /// was away from its sockets at worst. Never reset.
    pub longest_gap_s: f64,
    /// Unix time that gap ended (null before the first gap).
    pub longest_gap_unix_time: Option<f64>,
    /// The newest digitiser timestamp the lane had placed when the gap began (null before the
    /// first gap).
    pub longest_gap_timestamp: Option<u64>,
    /// How far behind the lane's newest heap its latest heap arrived, in seconds of stream time:
    /// heaps it kept and heaps too old for its window (up to 2 s behind). A receive window
    /// (`recv_window`) shorter than this lost heaps. Never reset.
    #[serde(default)]
    pub latest_heap_s: f64,
    /// What the scheduler took from the lane; null where the kernel keeps no statistics.
    pub sched: Option<SchedWaits>,
}

/// One polarisation's input counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolInput {
    /// The polarisation, 0 or 1.
    pub pol: usize,
    /// Addresses the receive sockets are bound to (ports resolved).
    pub sources: Vec<String>,
    /// Threads receiving this polarisation (0 until the receivers have started).
    pub receive_threads: usize,
    /// Digitiser packets that reached the receivers, rejected ones included.
    pub packets: u64,
    /// Digitiser heaps received complete.
    pub heaps_received: u64,
    /// Digitiser heaps absent from the chunks the engine processed.
    pub heaps_missing: u64,
    /// Times the input stream restarted and the receivers followed it.
    pub resyncs: u64,
    /// Chunks that found no partner from the other polarisation.
    pub unpaired_chunks: u64,
    /// Chunks that came after their frame had gone without them: dropped, their heaps counted
    /// missing with that frame (absent from older engines: 0).
    #[serde(default)]
    pub late_chunks: u64,
    /// Packets the kernel dropped at a full receive socket.
    pub socket_drops: u64,
    /// Descriptor heaps received (item descriptors and no timestamp, which a digitiser such as
    /// katgpucbf's dsim sends now and then): metadata, not rejected (absent from older engines: 0).
    #[serde(default)]
    pub descriptor_heaps: u64,
    /// Heaps received whose digitiser status item (0x3102) says a sample saturated at the
    /// digitiser (absent from older engines: 0).
    #[serde(default)]
    pub digitiser_clip_heaps: u64,
    /// Saturated samples the digitiser status items of the heaps received report, summed
    /// (absent from older engines: 0).
    #[serde(default)]
    pub digitiser_clip_samples: u64,
    /// The input's rms in dB relative to a full-scale sine, over the latest frame whose heaps all
    /// arrived (null before the first, from a backend that does not look at samples, and from
    /// older engines).
    #[serde(default)]
    pub rms_dbfs: Option<f64>,
    /// Samples at full scale, |v| >= 2^(bits-1) - 1 (katgpucbf's rule for a saturated sample:
    /// -512, -511 and 511 at 10 bits), over the frames measured (absent from
    /// older engines: 0).
    #[serde(default)]
    pub full_scale_samples: u64,
    /// Frames the two figures above come from (absent from older engines: 0).
    #[serde(default)]
    pub frames_measured: u64,
    /// Highest digitiser timestamp placed into a chunk, of the stream in place (it goes back when
    /// the digitiser restarts).
    pub last_timestamp: u64,
    /// Rejected packets by reason (only reasons seen).
    pub rejected: BTreeMap<String, u64>,
    /// Each receive thread's stalls, lane 0 first (absent from older engines: empty).
    #[serde(default)]
    pub lanes: Vec<LaneStalls>,
}

/// What an output is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// The whole band, channelised by a real-input PFB.
    Wideband,
    /// A band fs/(2D) wide around a centre: mixed down, filtered and subsampled by D (the DDC),
    /// then channelised by a complex PFB ([`Narrowband`] says how).
    Narrowband,
    /// katgpucbf's no-discard (VLBI) narrowband: the same band and channels, subsampled by 2D
    /// through a remez filter flat over `pass_bandwidth_hz`, every bin of an n-point PFB kept.
    NarrowbandNoDiscard,
}

/// A narrowband output's band: what a wideband output does not have.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Narrowband {
    /// The centre in use, Hz: the mixer word's, F fs / 2^32 (the centre asked for, quantised).
    /// Channel n/2 is centred on it. It may change at run time (`PUT /outputs/NAME`).
    pub centre_hz: f64,
    /// F, the mixer's phase increment in 2^-32 turns per ADC sample.
    pub mixer_word: u32,
    /// D: 8, 16 or 32.
    pub decimation: usize,
    /// L, the DDC filter's taps.
    pub ddc_taps: usize,
    /// The band's width, fs / (2D) Hz; channel c is centred on centre_hz + (c - n/2)
    /// bandwidth_hz / n.
    pub bandwidth_hz: f64,
    /// The no-discard output's flat pass band, Hz, centred on centre_hz (absent with discard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_bandwidth_hz: Option<f64>,
}

fn hann() -> String {
    "hann".into()
}

fn one() -> f64 {
    1.0
}

fn eight() -> u32 {
    8
}

/// One output: its shape, where it goes and what it sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// Wideband or narrowband.
    pub kind: OutputKind,
    /// Frequency channels of the output, n.
    pub channels: usize,
    /// PFB filter taps per channel.
    pub taps: usize,
    /// The PFB filter's taper, "hann" or "rect" (absent from older engines: hann).
    #[serde(default = "hann")]
    pub window_function: String,
    /// The sinc's cutoff in channels (absent from older engines: 1).
    #[serde(default = "one")]
    pub w_cutoff: f64,
    /// Bits per output component: 8, or 4 (one byte per complex value, real in the high nibble)
    /// (absent from older engines: 8).
    #[serde(default = "eight")]
    pub bits: u32,
    /// The output dither's seed (uniform, +-1/2 LSB before rounding), or null when the output is
    /// not dithered (absent from older engines: null, they did not dither).
    #[serde(default)]
    pub dither_seed: Option<u32>,
    /// Spectra in each output heap (`--spectra-per-heap`).
    pub spectra_per_heap: usize,
    /// Output heaps (in time) per frame.
    pub heaps_per_frame: usize,
    /// Spectrum m of the frame whose chunk starts at T has timestamp T - lag + m step (step 2n
    /// ADC samples, 2nD for a narrowband output).
    pub lag_samples: usize,
    /// Streams the channels are split over, N+1 for a destination `ADDR+N:PORT`.
    pub substreams: usize,
    /// Channels each substream carries: substream i has channels `[i c, (i+1) c)`.
    pub channels_per_substream: usize,
    /// Substream destinations, substream i at index i.
    pub destinations: Vec<String>,
    /// Output heaps sent, every substream together.
    pub heaps_sent: u64,
    /// Heaps not sent because some of their input was missing.
    pub heaps_skipped: u64,
    /// Heaps sent, substream i at index i.
    pub heaps_sent_per_substream: Vec<u64>,
    /// Heaps skipped for missing input, substream i at index i.
    pub heaps_skipped_per_substream: Vec<u64>,
    /// Datagrams sent, descriptor packets included.
    pub packets: u64,
    /// Bytes of the datagrams sent, SPEAD headers included.
    pub bytes: u64,
    /// Heaps (and descriptor packets) abandoned because a send failed.
    pub send_errors: u64,
    /// Timestamp of the newest heap sent, of the stream in place (it goes back when the digitiser
    /// restarts).
    pub last_timestamp: u64,
    /// Complex values with a clamped real or imaginary part, per polarisation.
    pub saturated: Vec<u64>,
    /// A narrowband output's band (absent for a wideband output, and from older engines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrowband: Option<Narrowband>,
}

/// The compute stage's progress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Frames {
    /// Frames the backend has computed.
    pub computed: u64,
    /// Frames with no valid spectrum (all input missing).
    pub empty: u64,
    /// ADC timestamp of the chunk of the latest frame computed (0 before the first).
    pub last_timestamp: u64,
    /// Unix time, s, at which the latest frame's output was ready (0 before the first).
    pub last_unix_time: f64,
    /// Seconds from handing the latest frame to the backend until its output was ready.
    pub processing_s_last: f64,
    /// The same, averaged over every frame computed (0 before the first).
    pub processing_s_mean: f64,
    /// How many frames the backend holds at once. Above 1 the compute thread collects a frame
    /// only when it needs its place, so the times above are how long frames queued, not how
    /// long the backend worked (0: an engine that does not say).
    #[serde(default)]
    pub in_flight_max: u64,
}

/// A polarisation's delay model as loaded (units as katgpucbf: s, s/s, rad, rad/s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DelayModel {
    /// Delay added to the polarisation's signal at the load timestamp, s.
    pub delay: f64,
    /// Change of the delay per second, s/s.
    pub delay_rate: f64,
    /// Fringe phase at the load timestamp, rad.
    pub phase: f64,
    /// Change of the phase per second, rad/s.
    pub phase_rate: f64,
    /// ADC timestamp at which the values hold.
    pub load_timestamp: u64,
    /// First timestamp the model applies to (0: from the frame after the request).
    pub apply_from: u64,
}

/// Both polarisations' delay models.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Delays {
    /// Polarisation 0's model (all zero until a request gave it one).
    pub pol0: DelayModel,
    /// Polarisation 1's model (all zero until a request gave it one).
    pub pol1: DelayModel,
}

/// Where the engine's stream threads run, as its flags asked and each thread applied at start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Stream threads by the name they run under (`fengine-recv0.1`, `fengine-send0`, ...).
    pub threads: BTreeMap<String, ThreadPlacement>,
    /// Cores of the process's other threads; `None`: any of the process's cores.
    pub rest_cores: Option<String>,
    /// Whether the process's memory is locked (`--lock-memory`).
    pub memory_locked: bool,
}

/// One stream thread's cores and scheduling.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadPlacement {
    /// Its cores as a list such as `0-3,8`; `None`: any of the process's cores.
    pub cores: Option<String>,
    /// `other` (normal scheduling), `fifo:PRIORITY` or `rr:PRIORITY`.
    pub policy: String,
}

/// The control server's own counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Control {
    /// Requests refused with a 4xx.
    pub rejected_requests: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_sums_across_outputs() {
        let out = Output {
            kind: OutputKind::Wideband,
            channels: 4096,
            taps: 16,
            window_function: "hann".into(),
            w_cutoff: 1.0,
            bits: 8,
            dither_seed: Some(5),
            spectra_per_heap: 256,
            heaps_per_frame: 4,
            lag_samples: 122_880,
            substreams: 2,
            channels_per_substream: 2048,
            destinations: vec!["239.10.1.0:7148".into(), "239.10.1.1:7148".into()],
            heaps_sent: 10,
            heaps_skipped: 2,
            heaps_sent_per_substream: vec![5, 5],
            heaps_skipped_per_substream: vec![1, 1],
            packets: 20,
            bytes: 1 << 20,
            send_errors: 0,
            last_timestamp: 1 << 30,
            saturated: vec![0, 3],
            narrowband: None,
        };
        let status = Status {
            backend: "cpu".into(),
            fft_precision: "single".into(),
            wideband_kernels: "two-pass".into(),
            running: true,
            uptime_s: 1.5,
            feng_id: 0,
            adc_sample_rate: 1712e6,
            sync_time: None,
            max_delay_s: 0.0,
            input: Input {
                sample_bits: 10,
                heap_samples: 4096,
                chunk_samples: 1 << 23,
                overlap_samples: 122_880,
                pols: vec![
                    PolInput {
                        heaps_missing: 3,
                        ..Default::default()
                    },
                    PolInput {
                        pol: 1,
                        heaps_missing: 4,
                        digitiser_clip_heaps: 2,
                        digitiser_clip_samples: 70,
                        rms_dbfs: Some(-23.5),
                        full_scale_samples: 3,
                        frames_measured: 9,
                        ..Default::default()
                    },
                ],
                recv_window: None,
            },
            outputs: [(WIDEBAND.to_string(), out.clone())].into(),
            frames: Frames::default(),
            delay_out_of_span: 0,
            delays: None,
            queues: [("free_frames".to_string(), 3)].into(),
            control: Control::default(),
            threads: Vec::new(),
            placement: Placement {
                threads: [(
                    "fengine-recv0.0".to_string(),
                    ThreadPlacement {
                        cores: Some("3".into()),
                        policy: "fifo:50".into(),
                    },
                )]
                .into(),
                rest_cores: Some("0-2".into()),
                memory_locked: true,
            },
        };
        let text = serde_json::to_string(&status).unwrap();
        let back: Status = serde_json::from_str(&text).unwrap();
        assert_eq!(back, status);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["outputs"]["wideband"]["kind"], "wideband");
        assert_eq!(v["input"]["pols"][1]["heaps_missing"], 4);
        assert_eq!(v["input"]["pols"][1]["digitiser_clip_samples"], 70);
        assert_eq!(v["input"]["pols"][1]["rms_dbfs"], -23.5);
        assert_eq!(v["input"]["pols"][0]["rms_dbfs"], serde_json::Value::Null);
        // An older engine's status, without the digitiser's clipping counters, the FFT's
        // precision, the wideband kernels or the placement, still reads.
        let mut old = v.clone();
        for p in old["input"]["pols"].as_array_mut().unwrap() {
            let p = p.as_object_mut().unwrap();
            p.remove("digitiser_clip_heaps");
            p.remove("digitiser_clip_samples");
        }
        old.as_object_mut().unwrap().remove("fft_precision");
        old.as_object_mut().unwrap().remove("wideband_kernels");
        old.as_object_mut().unwrap().remove("placement");
        let old: Status = serde_json::from_value(old).unwrap();
        assert_eq!(old.placement, Placement::default());
        assert_eq!(old.fft_precision, "single");
        assert_eq!(old.wideband_kernels, "two-pass");
        assert_eq!(old.input.pols[1].digitiser_clip_heaps, 0);
        assert_eq!(old.input.pols[1].heaps_missing, 4);
        assert_eq!(back.heaps_missing(), 7);
        assert_eq!(back.wideband().map(|o| o.heaps_sent), Some(10));
        assert_eq!(back.heaps_skipped(), 2);
        // A wideband output says nothing of a band; a narrowband one does, and round-trips.
        assert!(v["outputs"]["wideband"].get("narrowband").is_none());
        let mut with_nb = status.clone();
        let nb = Output {
            kind: OutputKind::Narrowband,
            narrowband: Some(Narrowband {
                centre_hz: 428e6,
                mixer_word: 1 << 30,
                decimation: 8,
                ddc_taps: 96,
                bandwidth_hz: 107e6,
                pass_bandwidth_hz: None,
            }),
            ..out
        };
        with_nb.outputs.insert("nb".into(), nb);
        let text = serde_json::to_string(&with_nb).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["outputs"]["nb"]["kind"], "narrowband");
        assert_eq!(v["outputs"]["nb"]["narrowband"]["decimation"], 8);
        let back: Status = serde_json::from_str(&text).unwrap();
        assert_eq!(back, with_nb);
    }
}

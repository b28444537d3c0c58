//! The command line (`fengine run`, `fengine bench`) and the engine configuration derived from it:
//! the input and its outputs ([`InputSpec`], [`OutputSpec`]: `--dst` and the output flags describe
//! one output, [`WIDEBAND`]; each `--wideband NAME:key=value,...` ([`WidebandSpec`]) one output
//! of its own, the flags giving the keys it leaves out), the lags and overlap that `--max-delay`
//! implies, and the checks that turn a bad combination into one sentence ([`ConfigError`]).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use spead::transport::Endpoint;

use crate::backend::{Channelisation, InputGeometry, OutputGeometry, POLS};
use crate::signal::delay::FramePlan;
use crate::signal::weights::{self, FilterDesign, WindowFunction};
pub use fgpu_api::engine::{OutputKind, WIDEBAND};

/// Bytes of the 8-byte SPEAD header and 8 item pointers that every packet carries.
pub const PACKET_HEADER_BYTES: usize = 72;
/// Largest UDP payload over IPv4.
const MAX_UDP_PAYLOAD: usize = 65_507;

const ABOUT: &str = "GPU F-engine: receives digitiser samples over SPEAD, channelises them \
(PFB + FFT), applies delay, phase and gain, and sends 8-bit spectra in the katgpucbf format.";

const LONG_ABOUT: &str = "\
GPU F-engine: receives both polarisations of one digitiser (SPEAD-64-48, one heap per packet, \
--sample-bits signed samples packed MSB first), channelises them with a --taps-tap polyphase \
filter bank and a 2n-point real FFT (n = --channels), applies coarse and fine delay, fringe phase \
and a complex gain per channel, quantises to 8 bits and sends heaps of --spectra-per-heap spectra \
in the katgpucbf F-engine format (items timestamp, feng_id, frequency, feng_raw).

Work goes in frames of --heaps-per-frame output heaps: a chunk of S x H x 2n new samples per \
polarisation, plus samples kept from the previous chunk for the filter and for delays up to \
--max-delay. Spectrum m of the frame whose chunk starts at ADC sample T has timestamp \
T - lag + m 2n (lag = (taps-1) 2n + max delay, rounded up to 2n): the ADC sample of its first \
input sample before delay. An output heap is sent only if every input sample of every spectrum \
in it (both polarisations) arrived.

--dst and the output flags make one output, named wideband. Instead of --dst, each --wideband \
NAME:dst=ADDR[+N]:PORT,key=value,... makes an output of its own (at most 8, all from the one \
input): its own channels, taps, bits, filter, dither, gain and destinations, the output flags \
giving the keys it leaves out. Each output has its own lag; the chunk is S x H x 2n of the \
output with the most channels, a whole number of every output's heaps.";

const AFTER_HELP: &str = "\
HTTP API (--control): GET /health, /status (JSON, outputs keyed by name), /metrics (Prometheus),
/delays, /gains, /outputs/NAME/gains.
  PUT /delays {\"pol0\": {\"delay\": 1.5e-9, \"delay_rate\": 0, \"phase\": 0.1, \"phase_rate\": 0},
               \"pol1\": \"1.5e-9,0:0.1,0\", \"load_timestamp\": 123456789}
    Units s, s/s, rad, rad/s; |delay| <= --max-delay, |delay_rate| < 1,
    |phase_rate| <= pi x the sample rate. Load at an ADC timestamp, at \"load_time\"
    (Unix s; needs --sync-time), or, with neither, from the next frame. A polarisation left out
    keeps its model.
  PUT /gains {\"pol0\": 0.5, \"pol1\": [0.5, -0.1]}  or one [re, im] per channel: [[re, im], ...].
    Gains belong to an output: /outputs/NAME/gains is output NAME's, /gains the one named
    wideband (--dst's output; with --wideband, the one given that name, if any).
  A bad request gets a 4xx with {\"error\": \"<sentence>\"} and changes nothing.
Limits: a request body of at most 128 bytes per channel of the largest output, and at least
1 MiB (8 MiB at 65536 channels: room for a PUT /gains with one [re, im] per channel for both
polarisations in compact JSON), else 413; a request's headers within 20 s of the connection or
of its previous reply, else the connection is closed; its body within 10 s of its headers, else
408; 64 connections at a time, more wait to be accepted.
With --control-token (or FENGINE_CONTROL_TOKEN), every change (PUT) needs the header
\"Authorization: Bearer TOKEN\", else 401; GET stays open. --control binds loopback unless told
otherwise (0.0.0.0:7147: every interface).

--wideband NAME:key=value,... (repeatable, instead of --dst): NAME is 1 to 32 of a-z 0-9 _ -.
  dst=ADDR[+N]:PORT (required), channels=N, taps=T, bits=8|4, window=hann|rect, w_cutoff=X,
  dither=SEED|off, gain=G. A key left out takes its flag's value (--channels, --taps,
  --output-bits, --window-function, --w-cutoff, --dither-seed/--no-dither, --gain). Without
  dither=, output k (0 for the first given) gets --dither-seed + k, or a random seed of its own.
  Two outputs may not share a destination ADDR:PORT.

Logs go to stderr (RUST_LOG sets the filter, default info).

Examples:
  fengine --src-pol0 239.10.0.1+3:7148 --src-pol1 239.10.0.5+3:7148 --dst 239.10.1.1+3:7148 \\
          --interface 10.0.0.2 --channels 4096 --adc-sample-rate 1712e6 --sync-time 1700000000
  fengine --src-pol0 127.0.0.1:7148 --src-pol1 127.0.0.1:7149 --dst 127.0.0.1:7150 \\
          --channels 1024 --taps 4 --spectra-per-heap 64 --adc-sample-rate 5e7 --backend cpu \\
          --control 127.0.0.1:0
  fengine --src-pol0 239.10.0.1+3:7148 --src-pol1 239.10.0.5+3:7148 --interface 10.0.0.2 \\
          --adc-sample-rate 1712e6 --wideband wide:dst=239.10.1.1+3:7148,channels=4096 \\
          --wideband fine:dst=239.10.2.1+7:7148,channels=32768,bits=4
  fengine bench --backend cuda --channels 32768";

#[derive(Parser, Debug)]
#[command(
    name = "fengine",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    args_override_self = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `fengine ARGS` is `fengine run ARGS`.
    #[command(flatten)]
    pub run: Option<RunArgs>,
}

/// The environment variable that gives the control token when `--control-token` does not.
pub const CONTROL_TOKEN_ENV: &str = "FENGINE_CONTROL_TOKEN";

impl Cli {
    /// The command line with the run's `--control-token` taken from [`CONTROL_TOKEN_ENV`] where
    /// the line gives none. Not clap's `env`: with the run options flattened beside the
    /// subcommands, a value from the environment counts as a run option given at the top level,
    /// and `fengine run ...` and `fengine bench` then fail to parse.
    pub fn with_env_token(self) -> Result<Self, String> {
        self.with_token_from(std::env::var_os(CONTROL_TOKEN_ENV))
    }

    /// [`with_env_token`](Self::with_env_token) with the variable's value given.
    pub fn with_token_from(mut self, value: Option<std::ffi::OsString>) -> Result<Self, String> {
        let run = match &mut self.command {
            Some(Command::Run(r)) => Some(r),
            Some(Command::Bench(_)) => None,
            None => self.run.as_mut(),
        };
        let (Some(run), Some(value)) = (run, value) else {
            return Ok(self);
        };
        if run.control_token.is_none() {
            let token = value
                .to_str()
                .ok_or_else(|| format!("{CONTROL_TOKEN_ENV} is not valid UTF-8."))?
                .parse()
                .map_err(|e| format!("{CONTROL_TOKEN_ENV} is not a usable token: {e}."))?;
            run.control_token = Some(token);
        }
        Ok(self)
    }
}

// Parsed once at start: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the engine (the default when no subcommand is given).
    Run(RunArgs),
    /// Time one backend on synthetic frames, without the network.
    Bench(BenchArgs),
}

/// Which implementation of the signal path to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// CUDA when a GPU and driver are usable, otherwise the CPU backend.
    Auto,
    Cuda,
    Cpu,
    /// float64 oracle: exact but slow.
    Reference,
    /// Does no signal processing (zero output): measures the engine around the backend.
    Null,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cuda => "cuda",
            BackendKind::Cpu => "cpu",
            BackendKind::Reference => "reference",
            BackendKind::Null => "null",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Polarisation 0 digitiser stream: ADDR[+N]:PORT, N+1 consecutive addresses (multicast groups
    /// or local unicast addresses). Port 0 binds a free port (unicast only; see GET /status).
    #[arg(long, value_name = "ADDR[+N]:PORT")]
    pub src_pol0: Endpoint,
    /// Polarisation 1 digitiser stream, as --src-pol0.
    #[arg(long, value_name = "ADDR[+N]:PORT")]
    pub src_pol1: Endpoint,
    /// Output substreams of the one output (named wideband): ADDR[+N]:PORT. Channels are divided
    /// evenly: substream i carries channels [i c, (i+1) c) with c = channels / (N+1). Required
    /// unless --wideband is given, and not with it.
    #[arg(
        long,
        value_name = "ADDR[+N]:PORT",
        required_unless_present = "wideband",
        conflicts_with = "wideband"
    )]
    pub dst: Option<Endpoint>,
    /// A wideband output of its own, instead of --dst (repeatable, at most 8):
    /// NAME:dst=ADDR[+N]:PORT and optionally channels=, taps=, bits=8|4, window=hann|rect,
    /// w_cutoff=, dither=SEED|off, gain=, comma-separated; keys left out take the output flags'
    /// values (see below).
    #[arg(long, value_name = "NAME:dst=ADDR[+N]:PORT,KEY=VALUE,...")]
    pub wideband: Vec<WidebandSpec>,
    /// Local IPv4 address of the interface to join multicast groups and send on (default: the
    /// kernel's choice).
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<Ipv4Addr>,
    /// Output channels n (a power of two, 16 to 65536); each spectrum takes 2n samples. This and
    /// the other output flags are also the defaults of every --wideband output.
    #[arg(long, default_value_t = 4096)]
    pub channels: usize,
    /// PFB taps T (1 to 64); each spectrum's window is 2nT samples.
    #[arg(long, default_value_t = 16)]
    pub taps: usize,
    /// The PFB filter's taper: hann (the MeerKAT design) or rect. The weights are the taper
    /// times sinc(w_cutoff x), scaled to unit energy (docs/signal-path.md); `--taps 1
    /// --window-function rect --w-cutoff 0` makes the PFB a plain FFT.
    #[arg(long, default_value = "hann", value_name = "hann|rect")]
    pub window_function: WindowFunction,
    /// Scales the sinc: 1 makes the filter's passband one channel wide (-6 dB at the channel's
    /// edges), more widens it, less narrows it; 0 removes the sinc.
    #[arg(long, default_value_t = weights::DEFAULT_CUTOFF, value_name = "CUTOFF")]
    pub w_cutoff: f64,
    /// Bits per output component: 8, or 4 (real and imaginary parts packed in one byte, real in
    /// the high nibble, two's complement, clamped to +-7 as katgpucbf packs them).
    #[arg(long, default_value_t = 8, value_name = "8|4")]
    pub output_bits: u32,
    /// Seed of the output dither (uniform, +-1/2 LSB per component before rounding; the same
    /// values for the same seed and timestamps on every backend). Default: a random seed, which
    /// `GET /status` reports. Engines of an array must not share a seed, or their dither
    /// correlates. With several --wideband outputs, output k (0 for the first) gets SEED + k
    /// unless it gives dither=.
    #[arg(long, value_name = "SEED", conflicts_with = "no_dither")]
    pub dither_seed: Option<u32>,
    /// Turns the output dither off: values are rounded as they are.
    #[arg(long)]
    pub no_dither: bool,
    /// Spectra per output heap (S), every output's.
    #[arg(long, default_value_t = 256)]
    pub spectra_per_heap: usize,
    /// Output heaps (in time) per frame (H): one frame processes a chunk of S*H*2n samples per
    /// polarisation (n: the most channels of any output), which must be a whole number of
    /// digitiser heaps.
    #[arg(long, default_value_t = 4)]
    pub heaps_per_frame: usize,
    /// ADC sample rate in Hz (samples per second per polarisation).
    #[arg(long, default_value_t = 1712e6, value_name = "HZ")]
    pub adc_sample_rate: f64,
    /// Unix time in seconds of ADC timestamp 0. Needed only for delay load times given as Unix
    /// time; without it they must be given as ADC timestamps.
    #[arg(long, value_name = "UNIX_S")]
    pub sync_time: Option<f64>,
    /// Bits per digitiser sample: 8, 10, 12 or 16 (signed, packed MSB first).
    #[arg(long, default_value_t = 10)]
    pub sample_bits: u32,
    /// Samples per digitiser heap (one heap per packet).
    #[arg(long, default_value_t = 4096)]
    pub heap_samples: usize,
    /// F-engine id (sent in every heap; also sets the heap counters).
    #[arg(long, default_value_t = 0)]
    pub feng_id: u64,
    /// Number of F-engines in the array: output heap counters step by this so that engines never
    /// collide (katgpucbf's scheme).
    #[arg(long, default_value_t = 1)]
    pub array_size: u64,
    /// Largest payload of an output packet in bytes (each packet also carries a 72-byte header).
    #[arg(long, default_value_t = 8192, value_name = "BYTES")]
    pub packet_payload: usize,
    /// Largest delay magnitude in seconds that PUT /delays may load (either sign). Sets how many
    /// samples each frame keeps from the previous one.
    #[arg(long, default_value_t = 1e-4, value_name = "SECONDS")]
    pub max_delay: f64,
    /// Signal path implementation.
    #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
    pub backend: BackendKind,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// HTTP control and monitoring address (GET /status, /metrics, /health; PUT /delays, /gains).
    /// Loopback by default: give 0.0.0.0:PORT to reach it from other hosts (or a container's
    /// published port), ideally with --control-token. Port 0 picks a free port; the log says
    /// which ("control listening on ADDR:PORT").
    #[arg(long, default_value = "127.0.0.1:7147", value_name = "ADDR:PORT")]
    pub control: SocketAddr,
    /// Bearer token that every change (PUT, POST, DELETE) must carry as "Authorization: Bearer
    /// TOKEN", else 401; reads (GET) stay open. Also read from the environment variable
    /// FENGINE_CONTROL_TOKEN when this option is not given: prefer that, a command line shows in
    /// the process list. Default: no token, anyone who reaches the port may change delays and
    /// gains.
    #[arg(long, value_name = "TOKEN")]
    pub control_token: Option<fgpu_serve::Token>,
    /// Initial complex gain, real part, for every channel of both polarisations (default
    /// 2^(10 - sample_bits): white noise at 5% of full scale comes out at rms 18; a sixteenth of
    /// that with 4-bit output, rms 1.1).
    #[arg(long, allow_negative_numbers = true)]
    pub gain: Option<f32>,
    /// Multicast TTL of the output.
    #[arg(long, default_value_t = 4)]
    pub ttl: u32,
    /// Output rate as a multiple of the input's data rate (2 x ADC rate bytes/s of spectra);
    /// above 1 so the sender catches up after a stall. 0 sends as fast as possible.
    #[arg(long, default_value_t = 1.1, value_name = "FACTOR")]
    pub send_rate_factor: f64,
    /// Output may leave up to this many microseconds ahead of its pace, so that a send thread
    /// wakes once per burst of GSO sends rather than once per send (each wakeup costs far more
    /// CPU than the send on a virtual machine). 0 paces every send.
    #[arg(long, default_value_t = 200.0, value_name = "MICROSECONDS")]
    pub send_burst: f64,
    /// Send threads of each output, each with its own socket and a contiguous share of the
    /// output's substreams. 0 picks one per 2 GB/s of output (2 x ADC rate bytes/s at 8 bits),
    /// at most one per substream.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub send_threads: usize,
    /// Receive threads per polarisation. Each takes its own share of the polarisation's source
    /// addresses (address i goes to thread i mod N) and writes its heaps straight into the shared
    /// chunk; a heap k must then arrive on address k mod (number of addresses), as dsim sends
    /// them. 0 picks one per 2 GB/s of input (1.25 x ADC rate bytes/s at 10 bits), at most one per
    /// address.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub recv_threads: usize,
    /// Socket buffer size in bytes for each receive and the send socket (capped by the kernel's
    /// net.core.rmem_max / wmem_max).
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    pub socket_buffer: usize,
}

/// Most outputs one engine makes: what a backend serves from one input.
pub use crate::backend::MAX_OUTPUTS;

/// Words of the control API's routes (`/status`, `/outputs/NAME/gains`, ...), which an output may
/// not be named.
const RESERVED_NAMES: [&str; 6] = ["health", "status", "metrics", "delays", "gains", "outputs"];

/// One `--wideband NAME:dst=ADDR[+N]:PORT,key=value,...`: a wideband output's name and
/// destinations, and the keys it gives; `None` takes the value of the output flags (`--channels`,
/// `--taps`, `--output-bits`, `--window-function`, `--w-cutoff`, `--dither-seed`/`--no-dither`,
/// `--gain`).
#[derive(Clone, Debug, PartialEq)]
pub struct WidebandSpec {
    pub name: String,
    pub dst: Endpoint,
    pub channels: Option<usize>,
    pub taps: Option<usize>,
    pub bits: Option<u32>,
    pub window: Option<WindowFunction>,
    pub w_cutoff: Option<f64>,
    /// `Some(None)`: `dither=off`.
    pub dither: Option<Option<u32>>,
    pub gain: Option<f32>,
}

/// Checks an output's name: 1 to 32 of a-z, 0-9, `_` and `-`, and no word of the control API's
/// routes. The error is a sentence.
pub fn check_output_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 32 || !name.chars().all(allowed) {
        return Err(format!(
            "output name {name:?} must be 1 to 32 characters from a-z, 0-9, _ and -."
        ));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!(
            "output name {name:?} would clash with the control API's routes ({}); choose another.",
            RESERVED_NAMES.join(", ")
        ));
    }
    Ok(())
}

impl FromStr for WidebandSpec {
    type Err = String;

    /// Parses `NAME:dst=ADDR[+N]:PORT,key=value,...`. Errors are one sentence naming the part.
    fn from_str(s: &str) -> Result<Self, String> {
        let Some((name, keys)) = s.split_once(':') else {
            return Err(format!(
                "{s:?} is not NAME:dst=ADDR[+N]:PORT,key=value,... (the name and a colon first)."
            ));
        };
        check_output_name(name)?;
        let refuse = |msg: String| format!("output {name:?}: {msg}");
        let mut dst = None;
        let mut spec = WidebandSpec {
            name: name.to_string(),
            dst: Endpoint { addrs: Vec::new() },
            channels: None,
            taps: None,
            bits: None,
            window: None,
            w_cutoff: None,
            dither: None,
            gain: None,
        };
        let mut seen: Vec<&str> = Vec::new();
        for part in keys.split(',').filter(|_| !keys.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(refuse(format!("{part:?} is not key=value.")));
            };
            if seen.contains(&key) {
                return Err(refuse(format!("the key {key} is given twice.")));
            }
            seen.push(key);
            let whole = |what: &str| {
                value
                    .parse::<usize>()
                    .map_err(|_| refuse(format!("{key}={value} is not {what}.")))
            };
            match key {
                "dst" => {
                    let e = value
                        .parse::<Endpoint>()
                        .map_err(|e| refuse(format!("dst={value}: {}", sentence(e))))?;
                    dst = Some(e);
                }
                "channels" => spec.channels = Some(whole("a whole number of channels")?),
                "taps" => spec.taps = Some(whole("a whole number of taps")?),
                "bits" => {
                    spec.bits = Some(match value {
                        "8" => 8,
                        "4" => 4,
                        _ => return Err(refuse(format!("bits={value} must be 8 or 4."))),
                    })
                }
                "window" => {
                    spec.window =
                        Some(value.parse().map_err(|e: String| {
                            refuse(format!("window={value}: {}", sentence(e)))
                        })?)
                }
                "w_cutoff" => {
                    spec.w_cutoff = Some(
                        value
                            .parse()
                            .map_err(|_| refuse(format!("w_cutoff={value} is not a number.")))?,
                    )
                }
                "dither" => {
                    spec.dither = Some(match value {
                        "off" => None,
                        seed => Some(seed.parse().map_err(|_| {
                            refuse(format!(
                                "dither={value} must be a seed from 0 to {} or off.",
                                u32::MAX
                            ))
                        })?),
                    })
                }
                "gain" => {
                    let gain: f32 = value
                        .parse()
                        .map_err(|_| refuse(format!("gain={value} is not a number.")))?;
                    if !gain.is_finite() {
                        return Err(refuse(format!("gain={value} is not a finite number.")));
                    }
                    spec.gain = Some(gain);
                }
                _ => {
                    return Err(refuse(format!(
                        "unknown key {key:?}; the keys are dst, channels, taps, bits, window, \
                         w_cutoff, dither and gain."
                    )))
                }
            }
        }
        spec.dst = dst.ok_or_else(|| refuse("needs dst=ADDR[+N]:PORT.".into()))?;
        Ok(spec)
    }
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Backend to time.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    pub backend: BackendKind,
    /// Output channels n.
    #[arg(long, default_value_t = 4096)]
    pub channels: usize,
    /// PFB taps.
    #[arg(long, default_value_t = 16)]
    pub taps: usize,
    /// Bits per input sample.
    #[arg(long, default_value_t = 10)]
    pub sample_bits: u32,
    /// Frames to time (after a few warm-up frames).
    #[arg(long, default_value_t = 20)]
    pub frames: usize,
    /// Spectra per output heap.
    #[arg(long, default_value_t = 256)]
    pub spectra_per_heap: usize,
    /// Output heaps per frame.
    #[arg(long, default_value_t = 4)]
    pub heaps_per_frame: usize,
    /// Bits per output component: 8 or 4.
    #[arg(long, default_value_t = 8, value_name = "8|4")]
    pub output_bits: u32,
    /// Dithers the output (as `fengine run` does by default), to time its cost.
    #[arg(long)]
    pub dither: bool,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

/// Everything the pipeline needs, checked and derived from [`RunArgs`]: the engine's one input,
/// its outputs, and what the engine as a whole runs with.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub input: InputSpec,
    /// The outputs, 1 to [`MAX_OUTPUTS`], in the order given: `--dst` makes one, [`WIDEBAND`];
    /// each `--wideband` one of the name it gives (unique, [`check_output_name`]). Every output
    /// is a whole number of heaps per frame, and no two share a destination address and port.
    pub outputs: Vec<OutputSpec>,
    /// Largest coarse delay magnitude in samples that keeps every window inside the span.
    pub max_delay_samples: u64,
    pub max_delay: f64,
    pub fs: f64,
    pub sync_time: Option<f64>,
    pub interface: Option<Ipv4Addr>,
    pub feng_id: u64,
    pub array_size: u64,
    pub packet_payload: usize,
    pub ttl: u32,
    pub send_rate_factor: f64,
    /// How far ahead of its pace output may leave.
    pub send_burst: Duration,
    pub socket_buffer: usize,
    pub backend: BackendKind,
    pub gpu: usize,
    pub control: SocketAddr,
    /// The bearer token that changes over HTTP need, if any.
    pub control_token: Option<fgpu_serve::Token>,
}

/// The engine's input: both polarisations of one digitiser.
#[derive(Clone, Debug)]
pub struct InputSpec {
    pub geometry: InputGeometry,
    /// Samples per digitiser heap.
    pub heap_samples: usize,
    /// Packed bytes of one digitiser heap.
    pub heap_bytes: usize,
    pub sources: [Vec<SocketAddrV4>; POLS],
    /// Receive threads per polarisation (at least 1, at most one per source address).
    pub recv_threads: usize,
}

/// One output stream of the engine: what it computes and where it goes.
#[derive(Clone, Debug)]
pub struct OutputSpec {
    /// Keys the output in stats, control and `/status` ([`WIDEBAND`] for `--dst`'s output).
    pub name: String,
    pub kind: OutputKind,
    pub geometry: OutputGeometry,
    /// Spectrum m of the frame whose chunk starts at T has timestamp T - lag + m 2n.
    pub lag: usize,
    /// Substream destinations: substream i carries channels [i c, (i+1) c), c = channels / N.
    pub dests: Vec<SocketAddrV4>,
    /// Initial complex gain (real) for every channel of both polarisations.
    pub gain: f32,
    /// Send threads (at least 1, at most one per substream).
    pub send_threads: usize,
}

/// Why a command line does not make a working engine: one sentence for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl From<String> for ConfigError {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// Output bytes/s given to each send thread when `--send-threads` is 0.
const SEND_BYTES_PER_THREAD: f64 = 2e9;
/// Input bytes/s per polarisation given to each receive thread when `--recv-threads` is 0: one
/// thread's kernel copy (GRO) plus its copy into chunk memory hold about 2 GB/s.
const RECV_BYTES_PER_THREAD: f64 = 2e9;

/// Rounds `x` up to a multiple of `m` (m > 0).
fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// One output as the command line asks for it, every key filled in, before the engine-wide
/// derivation.
struct Requested {
    name: String,
    /// Made by `--wideband`: its refusals name it. `--dst`'s output is named by its flags.
    named: bool,
    dst: Endpoint,
    geometry: OutputGeometry,
    /// `None`: the default gain for its bits.
    gain: Option<f32>,
}

impl Requested {
    /// `msg` as a sentence that names the output where `--wideband` made it.
    fn refuse(&self, msg: impl Into<String>) -> String {
        let msg = sentence(msg);
        if self.named {
            format!("output {:?}: {msg}", self.name)
        } else {
            msg
        }
    }

    /// How refusals call its destinations.
    fn dst_flag(&self) -> &'static str {
        if self.named {
            "dst="
        } else {
            "--dst "
        }
    }
}

impl EngineConfig {
    /// Checks the arguments and derives the geometry. Errors are one sentence for the user.
    pub fn from_args(a: &RunArgs) -> Result<Self, ConfigError> {
        Ok(Self::check(a)?)
    }

    /// The outputs the command line asks for, in order, each key given or taken from the output
    /// flags. Dither seeds: the output's own `dither=`, else none with `--no-dither`, else
    /// `--dither-seed` + k for output k, else a random seed unlike every other output's.
    fn requested(a: &RunArgs) -> Result<Vec<Requested>, String> {
        let flags = OutputGeometry {
            channels: a.channels,
            taps: a.taps,
            spectra_per_heap: a.spectra_per_heap,
            bits: a.output_bits,
            filter: FilterDesign {
                window: a.window_function,
                w_cutoff: a.w_cutoff,
            },
            dither: None,
            ddc: None,
        };
        // The flags' seed for output k; `None`: draw one.
        let flag_seed = |k: usize| match (a.no_dither, a.dither_seed) {
            (true, _) => Some(None),
            (false, Some(seed)) => Some(Some(seed.wrapping_add(k as u32))),
            (false, None) => None,
        };
        let mut wanted = Vec::new();
        let mut seeds = Vec::new();
        match (&a.dst, a.wideband.as_slice()) {
            (Some(dst), []) => {
                wanted.push(Requested {
                    name: WIDEBAND.to_string(),
                    named: false,
                    dst: dst.clone(),
                    geometry: flags,
                    gain: a.gain,
                });
                seeds.push(flag_seed(0));
            }
            (None, []) => return Err("give --dst, or one or more --wideband outputs.".into()),
            (Some(_), [_, ..]) => return Err("give either --dst or --wideband, not both.".into()),
            (None, specs) => {
                if specs.len() > MAX_OUTPUTS {
                    return Err(format!(
                        "{} --wideband outputs is more than {MAX_OUTPUTS}.",
                        specs.len()
                    ));
                }
                for (k, w) in specs.iter().enumerate() {
                    check_output_name(&w.name)?;
                    if specs[..k].iter().any(|o| o.name == w.name) {
                        return Err(format!(
                            "output {:?} is given twice; every output needs a name of its own.",
                            w.name
                        ));
                    }
                    wanted.push(Requested {
                        name: w.name.clone(),
                        named: true,
                        dst: w.dst.clone(),
                        geometry: OutputGeometry {
                            channels: w.channels.unwrap_or(flags.channels),
                            taps: w.taps.unwrap_or(flags.taps),
                            bits: w.bits.unwrap_or(flags.bits),
                            filter: FilterDesign {
                                window: w.window.unwrap_or(flags.filter.window),
                                w_cutoff: w.w_cutoff.unwrap_or(flags.filter.w_cutoff),
                            },
                            ..flags
                        },
                        gain: w.gain.or(a.gain),
                    });
                    seeds.push(w.dither.or_else(|| flag_seed(k)));
                }
            }
        }
        let mut taken: Vec<u32> = seeds.iter().flatten().flatten().copied().collect();
        for (w, seed) in wanted.iter_mut().zip(seeds) {
            w.geometry.dither = seed.unwrap_or_else(|| {
                let mut drawn: u32 = rand::random();
                while taken.contains(&drawn) {
                    drawn = rand::random();
                }
                taken.push(drawn);
                Some(drawn)
            });
        }
        Ok(wanted)
    }

    fn check(a: &RunArgs) -> Result<Self, String> {
        if !(a.adc_sample_rate.is_finite() && a.adc_sample_rate >= 1.0) {
            return Err(format!(
                "--adc-sample-rate {} is not a positive rate in Hz.",
                a.adc_sample_rate
            ));
        }
        if !(a.max_delay.is_finite() && a.max_delay >= 0.0) {
            return Err(format!(
                "--max-delay {} is not a delay of 0 seconds or more.",
                a.max_delay
            ));
        }
        // Rounded up, but not for the last bits of floating-point error (1e-5 s x 1e8 Hz).
        let max_delay_samples = (a.max_delay * a.adc_sample_rate * (1.0 - 1e-12)).ceil();
        if max_delay_samples > 1e9 {
            return Err(format!(
                "--max-delay {} s is {max_delay_samples} samples at this rate; at most 1e9 samples are supported.",
                a.max_delay
            ));
        }
        let max_delay_samples = max_delay_samples as u64;
        let wanted = Self::requested(a)?;
        if a.spectra_per_heap == 0 || a.heaps_per_frame == 0 {
            return Err("spectra per heap and heaps per frame must be positive.".into());
        }
        for w in &wanted {
            w.geometry.validate().map_err(|e| w.refuse(e))?;
        }
        // Windows must fit the span for any coarse delay in [-D, D] (docs/signal-path.md): each
        // output's lag >= (T-1) 2n + D, and the overlap >= every output's lag + D.
        let d = max_delay_samples as usize;
        let lags: Vec<usize> = wanted
            .iter()
            .map(|w| {
                let step = w.geometry.step();
                round_up((w.geometry.taps - 1) * step + d, step)
            })
            .collect();
        let (longest, lag_max) = lags
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(k, lag)| (lag, std::cmp::Reverse(k)))
            .expect("at least one output");
        let overlap = round_up(lag_max + d, 8);
        // Channel counts are powers of two: the widest output's heaps are a whole number of
        // every output's.
        let widest = wanted.iter().map(|w| w.geometry.step()).max().unwrap_or(0);
        let input = InputGeometry {
            sample_bits: a.sample_bits,
            chunk_samples: a
                .spectra_per_heap
                .saturating_mul(a.heaps_per_frame)
                .saturating_mul(widest),
            overlap_samples: overlap,
        };
        input.validate().map_err(sentence)?;
        for w in &wanted {
            Channelisation::new(input, w.geometry)
                .validate()
                .map_err(|e| w.refuse(e))?;
        }
        let chunk = input.chunk_samples;
        if a.heap_samples == 0 || !a.heap_samples.is_multiple_of(8) {
            return Err(format!(
                "--heap-samples {} must be a positive multiple of 8.",
                a.heap_samples
            ));
        }
        let several = wanted.len() > 1;
        if !chunk.is_multiple_of(a.heap_samples) {
            let channels = if several {
                "the most channels of any output"
            } else {
                "channels"
            };
            return Err(format!(
                "a frame's chunk of {chunk} samples (spectra-per-heap x heaps-per-frame x 2 x {channels}) is not a whole number of {}-sample digitiser heaps.",
                a.heap_samples
            ));
        }
        if overlap > chunk {
            let whose = if several {
                format!("output {:?}'s taps", wanted[longest].name)
            } else {
                "taps".to_string()
            };
            return Err(format!(
                "the overlap of {overlap} samples that {whose} and --max-delay need exceeds a frame's chunk of {chunk} samples; raise --heaps-per-frame or --spectra-per-heap, or lower --max-delay."
            ));
        }
        let heap_bytes = a.heap_samples * a.sample_bits as usize / 8;
        if heap_bytes + PACKET_HEADER_BYTES > MAX_UDP_PAYLOAD {
            return Err(format!(
                "a digitiser heap of {} samples makes a packet larger than a UDP datagram.",
                a.heap_samples
            ));
        }
        if a.packet_payload < 64 || a.packet_payload + PACKET_HEADER_BYTES > MAX_UDP_PAYLOAD {
            return Err(format!(
                "--packet-payload {} must be from 64 to {} bytes.",
                a.packet_payload,
                MAX_UDP_PAYLOAD - PACKET_HEADER_BYTES
            ));
        }
        let mut senders: HashMap<SocketAddrV4, &str> = HashMap::new();
        for w in &wanted {
            let substreams = w.dst.addrs.len();
            if substreams == 0 || !w.geometry.channels.is_multiple_of(substreams) {
                return Err(w.refuse(format!(
                    "{} channels cannot be divided evenly over {substreams} output substreams",
                    w.geometry.channels
                )));
            }
            if substreams > 256 {
                return Err(w.refuse(format!("{substreams} output substreams is more than 256")));
            }
            if w.dst.addrs.iter().any(|d| d.port() == 0) {
                return Err(w.refuse(format!(
                    "{}{} needs a port other than 0",
                    w.dst_flag(),
                    w.dst
                )));
            }
            for addr in &w.dst.addrs {
                if let Some(other) = senders.insert(*addr, &w.name) {
                    return Err(format!(
                        "outputs {other:?} and {:?} both send to {addr}; each output needs \
                         destinations of its own.",
                        w.name
                    ));
                }
            }
        }
        for (p, src) in [&a.src_pol0, &a.src_pol1].iter().enumerate() {
            if src.addrs.is_empty() || src.addrs.len() > 64 {
                return Err(format!("--src-pol{p} {src} must name 1 to 64 addresses."));
            }
            if src
                .addrs
                .iter()
                .any(|s| s.ip().is_multicast() && s.port() == 0)
            {
                return Err(format!(
                    "--src-pol{p} {src} is multicast and needs a port other than 0."
                ));
            }
        }
        let fewest_sources = a.src_pol0.addrs.len().min(a.src_pol1.addrs.len());
        if a.recv_threads > fewest_sources {
            return Err(format!(
                "--recv-threads {} needs at least that many source addresses per polarisation \
                 (ADDR+N:PORT); --src-pol0 has {} and --src-pol1 {}.",
                a.recv_threads,
                a.src_pol0.addrs.len(),
                a.src_pol1.addrs.len()
            ));
        }
        if let Some(t) = a.sync_time {
            if !(t.is_finite() && t >= 0.0) {
                return Err(format!("--sync-time {t} is not a Unix time in seconds."));
            }
        }
        if let Some(gain) = a.gain {
            if !gain.is_finite() {
                return Err(format!("--gain {gain} is not a finite number."));
            }
        }
        for w in &wanted {
            if let Some(gain) = w.gain.filter(|g| !g.is_finite()) {
                return Err(w.refuse(format!("gain {gain} is not a finite number")));
            }
        }
        if !(a.send_burst.is_finite() && (0.0..=1e6).contains(&a.send_burst)) {
            return Err(format!(
                "--send-burst {} must be between 0 and 1000000 microseconds.",
                a.send_burst
            ));
        }
        if !(a.send_rate_factor.is_finite() && a.send_rate_factor >= 0.0) {
            return Err(format!(
                "--send-rate-factor {} must be 0 (unpaced) or a positive factor.",
                a.send_rate_factor
            ));
        }
        if a.array_size == 0 || a.feng_id >= a.array_size {
            return Err(format!(
                "--feng-id {} must be below --array-size {} (at least 1).",
                a.feng_id, a.array_size
            ));
        }
        for (w, &lag) in wanted.iter().zip(&lags) {
            let plan = FramePlan {
                lag,
                fs: a.adc_sample_rate,
            };
            plan.validate(&Channelisation::new(input, w.geometry))
                .map_err(|e| w.refuse(e.to_string()))?;
        }
        let outputs = wanted
            .into_iter()
            .zip(lags)
            .map(|(w, lag)| OutputSpec {
                send_threads: match a.send_threads {
                    // One kernel-UDP sender thread moves about 3 GB/s with GSO
                    // (docs/performance.md).
                    0 => {
                        let bytes_per_sample = 2.0 * w.geometry.bits as f64 / 8.0;
                        (bytes_per_sample * a.adc_sample_rate / SEND_BYTES_PER_THREAD).ceil()
                            as usize
                    }
                    n => n,
                }
                .clamp(1, w.dst.addrs.len()),
                gain: w.gain.unwrap_or_else(|| {
                    crate::signal::gain::default_gain(a.sample_bits, w.geometry.bits)
                }),
                kind: OutputKind::Wideband,
                geometry: w.geometry,
                lag,
                dests: w.dst.addrs,
                name: w.name,
            })
            .collect();
        Ok(Self {
            input: InputSpec {
                geometry: input,
                heap_samples: a.heap_samples,
                heap_bytes,
                sources: [a.src_pol0.addrs.clone(), a.src_pol1.addrs.clone()],
                recv_threads: match a.recv_threads {
                    0 => {
                        let bytes = a.adc_sample_rate * a.sample_bits as f64 / 8.0;
                        (bytes / RECV_BYTES_PER_THREAD).ceil() as usize
                    }
                    n => n,
                }
                .clamp(1, fewest_sources),
            },
            outputs,
            max_delay_samples,
            max_delay: a.max_delay,
            fs: a.adc_sample_rate,
            sync_time: a.sync_time,
            interface: a.interface,
            feng_id: a.feng_id,
            array_size: a.array_size,
            packet_payload: a.packet_payload,
            ttl: a.ttl,
            send_rate_factor: a.send_rate_factor,
            send_burst: Duration::from_secs_f64(a.send_burst * 1e-6),
            socket_buffer: a.socket_buffer,
            backend: a.backend,
            gpu: a.gpu,
            control: a.control,
            control_token: a.control_token.clone(),
        })
    }

    /// Output `k`'s view of the input.
    pub fn channelisation(&self, k: usize) -> Channelisation {
        Channelisation::new(self.input.geometry, self.outputs[k].geometry)
    }

    /// Every output's geometry, in order: what backends are built for.
    pub fn output_geometries(&self) -> Vec<OutputGeometry> {
        self.outputs.iter().map(|o| o.geometry).collect()
    }

    /// Where output `k`'s spectra sit relative to the ADC stream.
    pub fn plan(&self, k: usize) -> FramePlan {
        FramePlan {
            lag: self.outputs[k].lag,
            fs: self.fs,
        }
    }

    /// Digitiser heaps per chunk (slots of the chunk assembler).
    pub fn heaps_per_chunk(&self) -> usize {
        self.input.geometry.chunk_samples / self.input.heap_samples
    }

    /// Wall-clock duration of one chunk.
    pub fn chunk_seconds(&self) -> f64 {
        self.input.geometry.chunk_samples as f64 / self.fs
    }
}

impl OutputSpec {
    pub fn substreams(&self) -> usize {
        self.dests.len()
    }

    /// Channels per output substream.
    pub fn substream_channels(&self) -> usize {
        self.geometry.channels / self.substreams()
    }

    /// Bytes of one substream's heap: its channels' slice of a heap.
    pub fn substream_bytes(&self) -> usize {
        self.geometry.heap_bytes() / self.substreams()
    }

    /// Samples between consecutive output heaps of one substream (S x 2n).
    pub fn heap_timestamp_step(&self) -> u64 {
        self.geometry.heap_samples() as u64
    }
}

/// Makes a message a sentence: capital first letter is left alone, a full stop is added.
pub fn sentence(s: impl Into<String>) -> String {
    let s = s.into();
    if s.ends_with('.') {
        s
    } else {
        s + "."
    }
}

/// The run arguments of `fengine` with test addresses and `extra` flags: for the tests of every
/// module that needs a configuration. The output goes to `--dst 127.0.0.1:7150` unless `extra`
/// gives `--dst` or `--wideband`.
#[cfg(test)]
pub(crate) fn test_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
    let mut v = vec![
        "fengine",
        "--src-pol0",
        "127.0.0.1:7148",
        "--src-pol1",
        "127.0.0.1:7149",
    ];
    let outputs_given = extra
        .iter()
        .any(|f| f.starts_with("--dst") || f.starts_with("--wideband"));
    if !outputs_given {
        v.extend(["--dst", "127.0.0.1:7150"]);
    }
    v.extend_from_slice(extra);
    let cli = Cli::try_parse_from(v)?;
    Ok(cli.run.expect("run arguments"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use test_args as args;

    #[test]
    fn defaults_make_a_valid_config() {
        let c = EngineConfig::from_args(&args(&[]).unwrap()).unwrap();
        let [out] = &c.outputs[..] else {
            panic!("one output: {:?}", c.outputs)
        };
        assert_eq!(out.name, WIDEBAND);
        let (g, lag) = (c.channelisation(0), out.lag);
        assert_eq!(g.output.channels, 4096);
        assert_eq!(g.heaps_per_frame(), 4);
        assert!(lag.is_multiple_of(g.step()) && lag >= (g.output.taps - 1) * g.step());
        assert!(g.input.overlap_samples >= lag + c.max_delay_samples as usize);
        assert_eq!(g.input.overlap_samples % 8, 0);
        assert_eq!(out.gain, 1.0);
        // The control API is not reachable from other hosts unless asked for, and open.
        assert_eq!(c.control, "127.0.0.1:7147".parse().unwrap());
        assert!(c.control.ip().is_loopback());
        assert!(c.control_token.is_none());
    }

    /// FENGINE_CONTROL_TOKEN fills --control-token of the run, given at the top level or with
    /// `run`, unless the option is given; `bench` ignores it; a bad value is a sentence.
    #[test]
    fn the_control_token_comes_from_the_environment_too() {
        let token = |cli: &Cli| {
            let run = match &cli.command {
                Some(Command::Run(r)) => r,
                _ => cli.run.as_ref().unwrap(),
            };
            run.control_token.as_ref().map(|t| format!("{t:?}"))
        };
        let line = ["--src-pol0", "127.0.0.1:1", "--src-pol1", "127.0.0.1:2"];
        let top: Vec<&str> = ["fengine"].iter().chain(&line).copied().collect();
        let run: Vec<&str> = ["fengine", "run"].iter().chain(&line).copied().collect();
        for argv in [&top, &run] {
            let mut argv = argv.clone();
            argv.extend(["--dst", "127.0.0.1:3"]);
            let env = Some("from-env".into());
            let cli = Cli::try_parse_from(&argv).unwrap();
            assert_eq!(token(&cli), None);
            let cli = cli.with_token_from(env.clone()).unwrap();
            assert_eq!(token(&cli).as_deref(), Some("Token(hidden)"));
            let e = Cli::try_parse_from(&argv)
                .unwrap()
                .with_token_from(Some("".into()))
                .unwrap_err();
            assert!(
                e.starts_with("FENGINE_CONTROL_TOKEN is not a usable token"),
                "{e}"
            );
        }
        // The option wins over the variable (even a bad one).
        let mut argv = top.clone();
        argv.extend(["--dst", "127.0.0.1:3", "--control-token", "given"]);
        let cli = Cli::try_parse_from(&argv)
            .unwrap()
            .with_token_from(Some("".into()))
            .unwrap();
        assert!(token(&cli).is_some());
        let bench = Cli::try_parse_from(["fengine", "bench"]).unwrap();
        assert!(bench.with_token_from(Some("x y".into())).is_ok());
    }

    /// --control-token takes a visible ASCII token; an empty or spaced one is a sentence.
    #[test]
    fn the_control_token_is_checked() {
        let c = EngineConfig::from_args(&args(&["--control-token", "a-b_c.d~e+f/g="]).unwrap())
            .unwrap();
        assert_eq!(format!("{:?}", c.control_token), "Some(Token(hidden))");
        for bad in ["", "two words"] {
            let e = args(&["--control-token", bad]).unwrap_err().to_string();
            assert!(e.contains("control token"), "{e}");
        }
    }

    #[test]
    fn lag_and_overlap_cover_the_delay_range() {
        let a = args(&[
            "--channels",
            "1024",
            "--taps",
            "4",
            "--spectra-per-heap",
            "64",
            "--adc-sample-rate",
            "1e8",
            "--max-delay",
            "1e-5",
        ])
        .unwrap();
        let c = EngineConfig::from_args(&a).unwrap();
        assert_eq!(c.max_delay_samples, 1000);
        // (T-1) 2n + D = 6144 + 1000 -> 8192; overlap = 9192.
        assert_eq!(c.outputs[0].lag, 8192);
        assert_eq!(c.input.geometry.overlap_samples, 9192);
        assert_eq!(c.heaps_per_chunk(), 64 * 4 * 2048 / 4096);
    }

    #[test]
    fn bad_combinations_are_sentences() {
        for (extra, want) in [
            (vec!["--channels", "1000"], "power of two"),
            (vec!["--heap-samples", "3000"], "whole number"),
            (
                vec!["--max-delay", "1", "--adc-sample-rate", "1e8"],
                "overlap",
            ),
            (vec!["--dst", "127.0.0.1+2:9"], "divided evenly"),
            (vec!["--feng-id", "3"], "array-size"),
            (vec!["--max-delay=-1"], "max-delay"),
            (vec!["--w-cutoff=-0.5"], "cutoff"),
            (vec!["--w-cutoff", "inf"], "cutoff"),
            (vec!["--taps", "65"], "taps must be from 1 to 64"),
            (vec!["--taps", "0"], "taps must be from 1 to 64"),
            (vec!["--output-bits", "6"], "output bits must be 8 or 4"),
        ] {
            let e = EngineConfig::from_args(&args(&extra).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
        }
    }

    #[test]
    fn filter_design_from_the_command_line() {
        let c = EngineConfig::from_args(
            &args(&[
                "--window-function",
                "rect",
                "--w-cutoff",
                "0",
                "--taps",
                "1",
            ])
            .unwrap(),
        )
        .unwrap();
        let f = c.channelisation(0).output.filter;
        assert_eq!((f.window, f.w_cutoff), (WindowFunction::Rect, 0.0));
        // The default is the MeerKAT design.
        let c = EngineConfig::from_args(&args(&[]).unwrap()).unwrap();
        assert_eq!(c.channelisation(0).output.filter, FilterDesign::default());
        let e = args(&["--window-function", "hamming"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("hann or rect"), "{e}");
    }

    #[test]
    fn dither_and_output_bits_from_the_command_line() {
        let output = |extra: &[&str]| {
            EngineConfig::from_args(&args(extra).unwrap())
                .unwrap()
                .channelisation(0)
                .output
        };
        // On by default, with a seed of its own per start.
        let seeds: Vec<_> = (0..4).map(|_| output(&[]).dither).collect();
        assert!(seeds.iter().all(|s| s.is_some()), "{seeds:?}");
        assert!(seeds.windows(2).any(|w| w[0] != w[1]), "{seeds:?}");
        assert_eq!(output(&["--dither-seed", "77"]).dither, Some(77));
        assert_eq!(output(&["--no-dither"]).dither, None);
        assert!(args(&["--no-dither", "--dither-seed", "1"]).is_err());
        assert_eq!(output(&[]).bits, 8);
        assert_eq!(output(&["--output-bits", "4"]).bits, 4);
    }

    /// The configuration of `extra`, or the sentence that refuses it (clap's or the engine's).
    fn refusal(extra: &[&str]) -> String {
        match args(extra) {
            Err(e) => e.to_string(),
            Ok(a) => match EngineConfig::from_args(&a) {
                Err(e) => e.to_string(),
                Ok(c) => panic!("{extra:?} was accepted: {:?}", c.outputs),
            },
        }
    }

    fn config(extra: &[&str]) -> EngineConfig {
        EngineConfig::from_args(&args(extra).unwrap()).unwrap()
    }

    /// Without --wideband, --dst and the output flags make the one output named wideband, as
    /// before; --dst is then required.
    #[test]
    fn the_one_output_shorthand_is_unchanged() {
        let c = config(&["--channels", "1024", "--taps", "4", "--output-bits", "4"]);
        let [out] = &c.outputs[..] else {
            panic!("one output: {:?}", c.outputs)
        };
        assert_eq!(out.name, WIDEBAND);
        assert_eq!(out.dests, vec!["127.0.0.1:7150".parse().unwrap()]);
        assert_eq!((out.geometry.channels, out.geometry.taps), (1024, 4));
        assert_eq!(out.geometry.bits, 4);
        assert_eq!(out.gain, 1.0 / 16.0);
        assert_eq!(c.input.geometry.chunk_samples, 256 * 4 * 2048);
        let e = Cli::try_parse_from([
            "fengine",
            "--src-pol0",
            "127.0.0.1:1",
            "--src-pol1",
            "127.0.0.1:2",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("--dst"), "{e}");
    }

    /// Each --wideband output takes its own keys, and the output flags for the keys it leaves
    /// out (the gain's default follows its own bits).
    #[test]
    fn wideband_outputs_take_their_keys_and_the_flags_for_the_rest() {
        let c = config(&[
            "--wideband",
            "wide:dst=127.0.0.1+3:7150,channels=1024",
            "--wideband",
            "fine_4-bit:dst=127.0.1.1+7:7150,channels=4096,taps=4,bits=4,window=rect,w_cutoff=0.5,dither=off,gain=0.25",
            "--taps",
            "8",
            "--dither-seed",
            "10",
        ]);
        let [wide, fine] = &c.outputs[..] else {
            panic!("two outputs: {:?}", c.outputs)
        };
        assert_eq!(wide.name, "wide");
        let g = wide.geometry;
        assert_eq!(
            (g.channels, g.taps, g.bits, g.dither),
            (1024, 8, 8, Some(10))
        );
        assert_eq!(g.filter, FilterDesign::default());
        assert_eq!(wide.gain, 1.0);
        assert_eq!(wide.dests.len(), 4);
        assert_eq!(wide.send_threads, 2, "8 bits at 1712 Msample/s: 3.4 GB/s");
        assert_eq!(fine.name, "fine_4-bit");
        let g = fine.geometry;
        assert_eq!((g.channels, g.taps, g.bits, g.dither), (4096, 4, 4, None));
        assert_eq!(
            (g.filter.window, g.filter.w_cutoff),
            (WindowFunction::Rect, 0.5)
        );
        assert_eq!(fine.gain, 0.25);
        assert_eq!(fine.dests[7], "127.0.1.8:7150".parse().unwrap());
        assert_eq!(fine.send_threads, 1, "4 bits at 1712 Msample/s: 1.7 GB/s");
        assert_eq!(c.output_geometries(), vec![wide.geometry, fine.geometry]);

        // Seeds: --dither-seed S gives output k S + k; dither= wins; none given draws one each.
        let seeds = |extra: &[&str]| -> Vec<Option<u32>> {
            let mut v = vec![
                "--wideband",
                "a:dst=127.0.0.1:7150",
                "--wideband",
                "b:dst=127.0.0.1:7151",
                "--wideband",
                "c:dst=127.0.0.1:7152,dither=3",
            ];
            v.extend_from_slice(extra);
            config(&v)
                .outputs
                .iter()
                .map(|o| o.geometry.dither)
                .collect()
        };
        assert_eq!(seeds(&["--dither-seed", "7"]), [Some(7), Some(8), Some(3)]);
        let max = u32::MAX.to_string();
        assert_eq!(
            seeds(&["--dither-seed", max.as_str()]),
            [Some(u32::MAX), Some(0), Some(3)]
        );
        assert_eq!(seeds(&["--no-dither"]), [None, None, Some(3)]);
        let drawn = seeds(&[]);
        assert!(drawn.iter().all(Option::is_some), "{drawn:?}");
        assert!(drawn[0] != drawn[1] && drawn[2] == Some(3), "{drawn:?}");
        // The default gain follows each output's bits; --gain is everyone's default.
        let c = config(&[
            "--wideband",
            "a:dst=127.0.0.1:7150,bits=4",
            "--wideband",
            "b:dst=127.0.0.1:7151",
            "--sample-bits",
            "8",
        ]);
        assert_eq!([c.outputs[0].gain, c.outputs[1].gain], [0.25, 4.0]);
        let c = config(&[
            "--wideband",
            "a:dst=127.0.0.1:7150,bits=4",
            "--wideband",
            "b:dst=127.0.0.1:7151,gain=2",
            "--gain",
            "0.5",
        ]);
        assert_eq!([c.outputs[0].gain, c.outputs[1].gain], [0.5, 2.0]);
    }

    /// Each output keeps its own lag; the overlap covers the longest, and the chunk is H heaps of
    /// the widest output, a whole number of the other's heaps. Order does not matter.
    #[test]
    fn chunk_overlap_and_lags_of_1024_and_4096_channels() {
        let flags = [
            "--taps",
            "4",
            "--spectra-per-heap",
            "64",
            "--heaps-per-frame",
            "4",
            "--adc-sample-rate",
            "1e8",
            "--max-delay",
            "1e-5",
        ];
        let narrow = "narrow:dst=127.0.0.1:7150,channels=1024";
        let wide = "wide:dst=127.0.0.1:7151,channels=4096";
        for outputs in [[narrow, wide], [wide, narrow]] {
            let mut v = flags.to_vec();
            for o in outputs {
                v.extend(["--wideband", o]);
            }
            let c = config(&v);
            assert_eq!(c.max_delay_samples, 1000);
            let k = |name: &str| c.outputs.iter().position(|o| o.name == name).unwrap();
            let (n, w) = (k("narrow"), k("wide"));
            // 3 x 2048 + 1000 -> 8192 and 3 x 8192 + 1000 -> 32768; overlap 32768 + 1000.
            assert_eq!((c.outputs[n].lag, c.outputs[w].lag), (8192, 32768));
            assert_eq!(c.input.geometry.overlap_samples, 33768);
            assert_eq!(c.input.geometry.chunk_samples, 64 * 4 * 8192);
            assert_eq!(c.heaps_per_chunk(), 64 * 4 * 8192 / 4096);
            assert_eq!(c.channelisation(n).heaps_per_frame(), 16);
            assert_eq!(c.channelisation(w).heaps_per_frame(), 4);
            for k in 0..2 {
                c.channelisation(k).validate().unwrap();
                c.plan(k).validate(&c.channelisation(k)).unwrap();
            }
        }
        // The 1024-channel output alone: the same lag, as before (lag_and_overlap_cover_...).
        let mut v = flags.to_vec();
        v.extend(["--wideband", narrow]);
        let c = config(&v);
        assert_eq!(c.outputs[0].lag, 8192);
        assert_eq!(c.input.geometry.overlap_samples, 9192);
        assert_eq!(c.input.geometry.chunk_samples, 64 * 4 * 2048);
    }

    /// What --wideband outputs may not be: each refusal one sentence that names the output (or
    /// the offending part).
    #[test]
    fn bad_wideband_outputs_are_refused_by_name() {
        // `--wideband` before each spec.
        let wb = |specs: &[&'static str]| -> Vec<&'static str> {
            specs.iter().flat_map(|s| ["--wideband", *s]).collect()
        };
        let nine: Vec<String> = (0..9)
            .map(|k| format!("o{k}:dst=127.0.0.1:{}", 7150 + k))
            .collect();
        let nine: Vec<&str> = nine.iter().flat_map(|s| ["--wideband", s]).collect();
        let long = format!("{}:dst=127.0.0.1:7150", "x".repeat(33));
        let a = "a:dst=127.0.0.1:7150";
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (
                wb(&[a, "a:dst=127.0.0.1:7151"]),
                "output \"a\" is given twice",
            ),
            (
                wb(&["Wide:dst=127.0.0.1:7150"]),
                "output name \"Wide\" must be 1 to 32 characters from a-z, 0-9, _ and -.",
            ),
            (
                wb(&["a.b:dst=127.0.0.1:7150"]),
                "output name \"a.b\" must be",
            ),
            (wb(&[":dst=127.0.0.1:7150"]), "output name \"\" must be"),
            (vec!["--wideband", &long], "must be 1 to 32 characters"),
            (
                wb(&["status:dst=127.0.0.1:7150"]),
                "output name \"status\" would clash with the control API's routes",
            ),
            (wb(&["gains:dst=127.0.0.1:7150"]), "would clash"),
            (
                wb(&["a:dst=127.0.0.1+3:7150", "b:dst=127.0.0.3:7150"]),
                "outputs \"a\" and \"b\" both send to 127.0.0.3:7150",
            ),
            (
                wb(&[a, "b:dst=127.0.0.1+2:7151"]),
                "output \"b\": 4096 channels cannot be divided evenly over 3 output",
            ),
            (nine, "9 --wideband outputs is more than 8."),
            (
                wb(&[a, "b:dst=127.0.0.1:7151,channels=1000"]),
                "output \"b\": channels must be a power of two from 16 to 65536, not 1000",
            ),
            (
                wb(&[a, "b:dst=127.0.0.1:7151,taps=65"]),
                "output \"b\": taps must be from 1 to 64",
            ),
            (
                wb(&[a, "b:dst=127.0.0.1:7151,w_cutoff=-1"]),
                "output \"b\": the sinc cutoff must be",
            ),
            (
                wb(&["a:dst=127.0.0.1:0"]),
                "output \"a\": dst=127.0.0.1:0 needs a port other than 0.",
            ),
            (
                [
                    wb(&[
                        "a:dst=127.0.0.1:7150,channels=16",
                        "b:dst=127.0.0.1:7151,channels=1024,taps=64",
                    ]),
                    vec!["--heaps-per-frame", "1", "--spectra-per-heap", "8"],
                ]
                .concat(),
                "output \"b\"'s taps and --max-delay need exceeds a frame's chunk",
            ),
            (
                vec!["--dst", "127.0.0.1:7150", "--wideband", a],
                "cannot be used with",
            ),
        ];
        for (extra, want) in cases {
            let e = refusal(&extra);
            assert!(e.contains(want), "{extra:?}: {e:?} should say {want:?}");
            let line = e.lines().next().unwrap();
            assert!(
                line.ends_with('.') || line.contains("cannot be used with"),
                "{e:?}"
            );
        }
    }

    /// A key the parser does not know, or a value it cannot read, is named in the refusal.
    #[test]
    fn bad_wideband_keys_and_values_are_named() {
        for (spec, want) in [
            ("a", "\"a\" is not NAME:dst=ADDR[+N]:PORT"),
            ("a:", "output \"a\": needs dst=ADDR[+N]:PORT."),
            ("a:channels=1024", "output \"a\": needs dst=ADDR[+N]:PORT."),
            ("a:dst=127.0.0.1:7150,colour=red", "unknown key \"colour\""),
            ("a:dst=127.0.0.1:7150,taps", "\"taps\" is not key=value."),
            (
                "a:dst=127.0.0.1:7150,taps=4,taps=8",
                "the key taps is given twice.",
            ),
            (
                "a:dst=nowhere",
                "output \"a\": dst=nowhere: 'nowhere' is not ADDR[+N]:PORT.",
            ),
            (
                "a:dst=127.0.0.1:7150,channels=many",
                "channels=many is not a whole number",
            ),
            (
                "a:dst=127.0.0.1:7150,taps=-1",
                "taps=-1 is not a whole number",
            ),
            ("a:dst=127.0.0.1:7150,bits=6", "bits=6 must be 8 or 4."),
            (
                "a:dst=127.0.0.1:7150,window=hamming",
                "window=hamming: the window function must be hann or rect",
            ),
            (
                "a:dst=127.0.0.1:7150,w_cutoff=wide",
                "w_cutoff=wide is not a number.",
            ),
            (
                "a:dst=127.0.0.1:7150,dither=maybe",
                "dither=maybe must be a seed",
            ),
            ("a:dst=127.0.0.1:7150,gain=x", "gain=x is not a number."),
            (
                "a:dst=127.0.0.1:7150,gain=inf",
                "gain=inf is not a finite number.",
            ),
        ] {
            let e = spec.parse::<WidebandSpec>().unwrap_err();
            assert!(e.contains(want), "{spec:?}: {e:?} should say {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
            // clap passes the sentence on.
            let e = refusal(&["--wideband", spec]);
            assert!(e.contains(want), "{spec:?}: {e:?}");
        }
    }

    #[test]
    fn subcommands_parse() {
        let cli = Cli::try_parse_from(["fengine", "bench", "--backend", "null", "--frames", "3"])
            .unwrap();
        assert!(matches!(cli.command, Some(Command::Bench(b)) if b.frames == 3));
        let cli = Cli::try_parse_from([
            "fengine",
            "run",
            "--src-pol0",
            "127.0.0.1:1",
            "--src-pol1",
            "127.0.0.1:2",
            "--dst",
            "127.0.0.1:3",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(Command::Run(_))));
        assert!(Cli::try_parse_from(["fengine", "--channels", "16"]).is_err());
    }
}

//! The command line (`fengine run`, `fengine bench`) and the engine configuration derived from it:
//! the input and its outputs ([`InputSpec`], [`OutputSpec`]: `--dst` and the output flags describe
//! one output, [`WIDEBAND`]; each `--wideband NAME:key=value,...` ([`OutputArg::wideband`]) one output
//! of its own, the flags giving the keys it leaves out), the lags and overlap that `--max-delay`
//! implies, and the checks that turn a bad combination into one sentence ([`ConfigError`]).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use spead::transport::Endpoint;

use crate::backend::{Channelisation, Ddc, InputGeometry, OutputGeometry, POLS};
use crate::signal::ddc;
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
giving the keys it leaves out. Each --narrowband NAME:dst=...,channels=N,decimation=D,centre=HZ,... \
(beside --dst or --wideband, or alone; 8 outputs in all) makes a narrowband output: the band \
fs/(2D) wide around the centre, mixed down, filtered and subsampled by D = 8, 16 or 32, in n \
channels, each spectrum 2nD ADC samples apart. Each output has its own lag (its window less one \
step plus the max delay, rounded up to D and then to a step); the chunk is S x H times the \
longest step of any output, a whole number of every output's heaps.";

const AFTER_HELP: &str = "\
HTTP API (--control): GET /health, /status (JSON, outputs keyed by name), /metrics (Prometheus),
/delays, /gains, /outputs/NAME (its part of /status), /outputs/NAME/gains.
  PUT /delays {\"pol0\": {\"delay\": 1.5e-9, \"delay_rate\": 0, \"phase\": 0.1, \"phase_rate\": 0},
               \"pol1\": \"1.5e-9,0:0.1,0\", \"load_timestamp\": 123456789}
    Units s, s/s, rad, rad/s; |delay| <= --max-delay, |delay_rate| < 1,
    |phase_rate| <= pi x the sample rate. Load at an ADC timestamp, at \"load_time\"
    (Unix s; needs --sync-time), or, with neither, from the next frame. A polarisation left out
    keeps its model.
  PUT /gains {\"pol0\": 0.5, \"pol1\": [0.5, -0.1]}  or one [re, im] per channel: [[re, im], ...].
    Gains belong to an output: /outputs/NAME/gains is output NAME's, /gains the one named
    wideband (--dst's output; with --wideband, the one given that name, if any).
  PUT /outputs/NAME {\"centre\": 1.2e9}: a narrowband output's centre in Hz, from the next frame
    on; quantised to F = round(centre / fs 2^32) (/status reports the centre in use), its band
    inside 0 .. fs/2. Refused (400) for a wideband output.
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
--narrowband NAME:dst=ADDR[+N]:PORT,channels=N,decimation=8|16|32,centre=HZ,key=value,...
  (repeatable): the same keys (taps, bits, window, w_cutoff, dither, gain) and ddc_taps=L (the
  DDC filter, default 12 D). Default gain: sqrt(D) x --gain or its default (a narrowband
  channel holds 1/D of a wideband channel's noise power). The band, fs/(2D) wide, must lie
  inside 0 .. fs/2. Outputs are numbered wideband first, then narrowband, in the order given.

Logs go to stderr (RUST_LOG sets the filter, default info).

Examples:
  fengine --src-pol0 239.10.0.1+3:7148 --src-pol1 239.10.0.5+3:7148 --dst 239.10.1.1+3:7148 \\
          --interface 10.0.0.2 --channels 4096 --adc-sample-rate 1712e6 --sync-time 1700000000
  fengine --src-pol0 127.0.0.1:7148 --src-pol1 127.0.0.1:7149 --dst 127.0.0.1:7150 \\
          --channels 1024 --taps 4 --spectra-per-heap 64 --adc-sample-rate 5e7 --backend cpu \\
          --control 127.0.0.1:0
  fengine --src-pol0 239.10.0.1+3:7148 --src-pol1 239.10.0.5+3:7148 --interface 10.0.0.2 \\
          --adc-sample-rate 1712e6 --wideband wide:dst=239.10.1.1+3:7148,channels=4096 \\
          --wideband fine:dst=239.10.2.1+7:7148,channels=32768,bits=4 \\
          --narrowband nb:dst=239.10.3.1+3:7148,channels=32768,decimation=8,centre=400e6
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

/// What the CUDA backend keeps between its two wideband passes (`--fft-precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum FftPrecision {
    /// float32 throughout: within 1 LSB of the float64 reference in under 0.1% of values.
    #[default]
    Single,
    /// The rows between the two passes in float16, arithmetic in float32: half the bytes through
    /// device memory between the passes, at a cost to accuracy (kernels/NOTES.md measures it).
    Half,
}

impl FftPrecision {
    pub fn name(self) -> &'static str {
        match self {
            FftPrecision::Single => "single",
            FftPrecision::Half => "half",
        }
    }

    /// `None` where `backend` can compute at this precision, else why not, as a sentence.
    pub fn refusal(self, backend: BackendKind) -> Option<String> {
        match (self, backend) {
            (FftPrecision::Single, _) | (FftPrecision::Half, BackendKind::Cuda) => None,
            // auto then takes CUDA or refuses to start (app::make_backend); null computes nothing.
            (FftPrecision::Half, BackendKind::Auto | BackendKind::Null) => None,
            (FftPrecision::Half, b) => Some(format!(
                "--fft-precision half is the CUDA backend's (its two-pass kernels' rows in \
                 float16); the {} backend computes in float32 or float64 throughout: give \
                 --backend cuda, or leave --fft-precision at single.",
                b.name()
            )),
        }
    }
}

/// Which kernels the CUDA backend runs for a wideband output of 1024 channels and more
/// (`--wideband-kernels`); smaller ones take three passes either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum WidebandKernels {
    /// Two passes through device memory, the FFT split between them: the default, faster at
    /// every size they take (kernels/NOTES.md).
    #[default]
    TwoPass,
    /// Three passes (FIR, cuFFT, post-processing): the fallback, checked against float64 on its
    /// own, and what the two passes are measured against.
    ThreePass,
}

impl WidebandKernels {
    pub fn name(self) -> &'static str {
        match self {
            WidebandKernels::TwoPass => "two-pass",
            WidebandKernels::ThreePass => "three-pass",
        }
    }

    /// `None` where `backend` at `precision` can run these kernels, else why not, as a sentence.
    pub fn refusal(self, backend: BackendKind, precision: FftPrecision) -> Option<String> {
        match (self, precision, backend) {
            (WidebandKernels::TwoPass, _, _) => None,
            (WidebandKernels::ThreePass, FftPrecision::Half, _) => Some(
                "--fft-precision half is the two-pass kernels' (the rows between their passes in \
                 float16): leave --wideband-kernels at two-pass, or give --fft-precision single."
                    .into(),
            ),
            // auto without a GPU runs the CPU backend, whose output is the same to 1 LSB.
            (_, _, BackendKind::Cuda | BackendKind::Auto | BackendKind::Null) => None,
            (_, _, b) => Some(format!(
                "--wideband-kernels three-pass chooses among the CUDA backend's kernels; the {} \
                 backend has one set: give --backend cuda, or leave --wideband-kernels at two-pass.",
                b.name()
            )),
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
    /// unless --wideband or --narrowband is given, and not with --wideband.
    #[arg(
        long,
        value_name = "ADDR[+N]:PORT",
        required_unless_present_any = ["wideband", "narrowband"],
        conflicts_with = "wideband"
    )]
    pub dst: Option<Endpoint>,
    /// A wideband output of its own, instead of --dst (repeatable, at most 8 outputs in all):
    /// NAME:dst=ADDR[+N]:PORT and optionally channels=, taps=, bits=8|4, window=hann|rect,
    /// w_cutoff=, dither=SEED|off, gain=, comma-separated; keys left out take the output flags'
    /// values (see below).
    #[arg(
        long,
        value_name = "NAME:dst=ADDR[+N]:PORT,KEY=VALUE,...",
        value_parser = OutputArg::wideband
    )]
    pub wideband: Vec<OutputArg>,
    /// A narrowband output (repeatable; beside --dst or --wideband, or alone): n channels over
    /// fs/(2D) around a centre, NAME:dst=ADDR[+N]:PORT,channels=N,decimation=8|16|32,centre=HZ
    /// and optionally taps=, ddc_taps=, bits=, window=, w_cutoff=, dither=, gain= (see below).
    #[arg(
        long,
        value_name = "NAME:dst=ADDR[+N]:PORT,channels=N,decimation=D,centre=HZ,...",
        value_parser = OutputArg::narrowband
    )]
    pub narrowband: Vec<OutputArg>,
    /// Local IPv4 address of the interface to join multicast groups and send on (default: the
    /// kernel's choice).
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<Ipv4Addr>,
    /// Output channels n (a power of two, 16 to 65536); each spectrum takes 2n samples. This and
    /// the other output flags are also the defaults of every --wideband output (and, but for
    /// --channels, of every --narrowband output).
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
    /// Precision of the CUDA backend's wideband FFT between its two passes: single (float32), or
    /// half (the values between the passes in float16, rounded stochastically, arithmetic in
    /// float32; wideband outputs of 1024 channels and more): 8-15% faster, the
    /// noise floor 0.006 dB higher, the worst spur of a dithered tone -119 dB instead of -125,
    /// up to 0.9% of output values one LSB from float64. Needs --backend cuda (or auto with a
    /// GPU).
    #[arg(long, value_enum, default_value_t = FftPrecision::Single)]
    pub fft_precision: FftPrecision,
    /// The CUDA backend's kernels for a wideband output of 1024 channels and more: two-pass (the
    /// FIR and the FFT's first stages, then its last stages and everything after them; the
    /// default) or three-pass (FIR, cuFFT, post-processing: the fallback, a quarter to a third
    /// slower). Both are within 1 LSB of the float64 reference in under 0.1% of values. Needs
    /// --backend cuda (or auto).
    #[arg(long, value_enum, default_value_t = WidebandKernels::TwoPass)]
    pub wideband_kernels: WidebandKernels,
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
    /// that with 4-bit output, rms 1.1). A --narrowband output without gain= gets sqrt(D) times
    /// it, which leaves noise at the same level.
    #[arg(long, allow_negative_numbers = true)]
    pub gain: Option<f32>,
    /// Multicast TTL of the output.
    #[arg(long, default_value_t = 4)]
    pub ttl: u32,
    /// Output rate as a multiple of the input's data rate (2 x ADC rate bytes/s of spectra);
    /// above 1 so the sender catches up after a stall. 0 sends as fast as possible.
    #[arg(long, default_value_t = fgpu_api::engine::SEND_RATE_FACTOR, value_name = "FACTOR")]
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

/// One `--wideband` or `--narrowband NAME:dst=ADDR[+N]:PORT,key=value,...`: an output's kind,
/// name and destinations, and the keys it gives; `None` takes the value of the output flags
/// (`--channels`, `--taps`, `--output-bits`, `--window-function`, `--w-cutoff`,
/// `--dither-seed`/`--no-dither`, `--gain`). A narrowband output must give `channels`,
/// `decimation` and `centre` ([`OutputArg::narrowband`]); a wideband one gives none of the
/// narrowband keys.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputArg {
    pub kind: OutputKind,
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
    /// Narrowband: D, 8, 16 or 32 (checked when parsed).
    pub decimation: Option<usize>,
    /// Narrowband: the centre frequency in Hz, as given (quantised and checked against the
    /// sample rate by [`EngineConfig::from_args`]).
    pub centre: Option<f64>,
    /// Narrowband: L, the DDC filter's taps (default 12 D).
    pub ddc_taps: Option<usize>,
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

impl OutputArg {
    /// Parses a `--wideband` spec, `NAME:dst=ADDR[+N]:PORT,key=value,...`. Errors are one
    /// sentence naming the output and the key.
    pub fn wideband(s: &str) -> Result<Self, String> {
        Self::parse(s, OutputKind::Wideband)
    }

    /// Parses a `--narrowband` spec, `NAME:dst=ADDR[+N]:PORT,channels=N,decimation=8|16|32,
    /// centre=HZ,key=value,...`. Errors are one sentence naming the output and the key.
    pub fn narrowband(s: &str) -> Result<Self, String> {
        Self::parse(s, OutputKind::Narrowband)
    }

    fn parse(s: &str, kind: OutputKind) -> Result<Self, String> {
        let narrowband = kind == OutputKind::Narrowband;
        let Some((name, keys)) = s.split_once(':') else {
            let form = if narrowband {
                "NAME:dst=ADDR[+N]:PORT,channels=N,decimation=D,centre=HZ,..."
            } else {
                "NAME:dst=ADDR[+N]:PORT,key=value,..."
            };
            return Err(format!("{s:?} is not {form} (the name and a colon first)."));
        };
        check_output_name(name)?;
        let refuse = |msg: String| format!("output {name:?}: {msg}");
        let mut dst = None;
        let mut spec = OutputArg {
            kind,
            name: name.to_string(),
            dst: Endpoint { addrs: Vec::new() },
            channels: None,
            taps: None,
            bits: None,
            window: None,
            w_cutoff: None,
            dither: None,
            gain: None,
            decimation: None,
            centre: None,
            ddc_taps: None,
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
                "decimation" if narrowband => {
                    let d = whole("a whole number")
                        .ok()
                        .filter(|d| ddc::DECIMATIONS.contains(d));
                    spec.decimation = Some(d.ok_or_else(|| {
                        refuse(format!("decimation={value} must be 8, 16 or 32."))
                    })?);
                }
                "centre" if narrowband => {
                    let hz: f64 = value
                        .parse()
                        .ok()
                        .filter(|f: &f64| f.is_finite())
                        .ok_or_else(|| {
                            refuse(format!("centre={value} is not a frequency in Hz."))
                        })?;
                    spec.centre = Some(hz);
                }
                "ddc_taps" if narrowband => spec.ddc_taps = Some(whole("a whole number of taps")?),
                _ if narrowband => {
                    return Err(refuse(format!(
                        "unknown key {key:?}; the keys are dst, channels, decimation, centre, \
                         taps, ddc_taps, bits, window, w_cutoff, dither and gain."
                    )))
                }
                "decimation" | "centre" | "ddc_taps" => {
                    return Err(refuse(format!(
                        "{key}= belongs to a narrowband output (--narrowband), not a wideband one."
                    )))
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
        if narrowband {
            if spec.channels.is_none() {
                return Err(refuse("needs channels=N.".into()));
            }
            if spec.decimation.is_none() {
                return Err(refuse("needs decimation=8, 16 or 32.".into()));
            }
            if spec.centre.is_none() {
                return Err(refuse("needs centre=HZ.".into()));
            }
        }
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
    /// A narrowband output of CHANNELS channels and decimation D (8, 16 or 32) beside the
    /// wideband one, from the same input (repeatable): the figures are then the whole set's.
    #[arg(long, value_name = "CHANNELS:D", value_parser = parse_bench_narrowband)]
    pub narrowband: Vec<(usize, usize)>,
    /// Precision of the CUDA wideband FFT between its two passes: single or half (see `fengine
    /// run --help`).
    #[arg(long, value_enum, default_value_t = FftPrecision::Single)]
    pub fft_precision: FftPrecision,
    /// The CUDA backend's wideband kernels: two-pass or three-pass (see `fengine run --help`).
    #[arg(long, value_enum, default_value_t = WidebandKernels::TwoPass)]
    pub wideband_kernels: WidebandKernels,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

/// `--narrowband CHANNELS:D` of `fengine bench`.
fn parse_bench_narrowband(s: &str) -> Result<(usize, usize), String> {
    let parsed = s
        .split_once(':')
        .and_then(|(n, d)| Some((n.parse().ok()?, d.parse().ok()?)));
    match parsed {
        Some((n, d)) if crate::signal::ddc::DECIMATIONS.contains(&d) => Ok((n, d)),
        _ => Err(format!(
            "{s:?} is not CHANNELS:D with D 8, 16 or 32 (for example 32768:8)"
        )),
    }
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
    pub fft_precision: FftPrecision,
    pub wideband_kernels: WidebandKernels,
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
    /// Spectrum m of the frame whose chunk starts at T has timestamp T - lag + m step (step 2n,
    /// or 2nD for a narrowband output).
    pub lag: usize,
    /// Substream destinations: substream i carries channels [i c, (i+1) c), c = channels / N.
    pub dests: Vec<SocketAddrV4>,
    /// Initial complex gain (real) for every channel of both polarisations.
    pub gain: f32,
    /// Send threads (at least 1, at most one per substream).
    pub send_threads: usize,
    /// A narrowband output's mixer word at start (`ddc::mixer_word` of its `centre=`, checked);
    /// `None` for a wideband output. The control API may change it at run time.
    pub mixer: Option<u32>,
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

/// How far (input samples) a coarse delay of up to `max_delay_samples` either way moves an
/// output's windows: the delay itself for a wideband output; rounded up to a multiple of D for a
/// narrowband one, whose window moves by k = round(d / D) subsampled samples (|k| <=
/// ceil(max / D)), D input samples each.
pub fn delay_room(g: &OutputGeometry, max_delay_samples: usize) -> usize {
    round_up(max_delay_samples, g.decimation())
}

/// An output's lag (docs/signal-path.md, Timestamps): spectrum m of the frame whose chunk starts
/// at A has timestamp A - lag + m step, and its window starts at span offset overlap - lag + m
/// step - c (c the coarse delay in input samples, a multiple of D for narrowband). The last
/// spectrum's window, (M - 1) step + window - lag + room past the overlap at the most negative
/// delay, must end within the chunk of M steps: lag >= window - step + room, rounded up to a
/// step so that timestamps stay multiples of it. Wideband: (T - 1) 2n + max delay, as before.
pub fn output_lag(g: &OutputGeometry, max_delay_samples: usize) -> usize {
    let step = g.step();
    round_up(
        g.window().saturating_sub(step) + delay_room(g, max_delay_samples),
        step,
    )
}

/// The samples kept ahead of each chunk for outputs of these geometries and lags: the first
/// spectrum's window at the most positive delay starts at overlap - lag - room >= 0, so the
/// overlap is the largest lag + room, rounded up to a multiple of 8 (whole bytes at every sample
/// width) and of every decimation (the DDC's grid starts every span).
pub fn overlap_samples(
    outputs: &[OutputGeometry],
    lags: &[usize],
    max_delay_samples: usize,
) -> usize {
    let need = outputs
        .iter()
        .zip(lags)
        .map(|(g, lag)| lag + delay_room(g, max_delay_samples))
        .max()
        .unwrap_or(0);
    // Decimations are powers of two: the largest is a multiple of the others.
    let unit = outputs.iter().map(|g| g.decimation()).fold(8, usize::max);
    round_up(need, unit)
}

/// One output as the command line asks for it, every key filled in, before the engine-wide
/// derivation.
struct Requested {
    name: String,
    /// Made by `--wideband` or `--narrowband`: its refusals name it. `--dst`'s output is named
    /// by its flags.
    named: bool,
    dst: Endpoint,
    geometry: OutputGeometry,
    /// `None`: the default gain for its bits (and decimation).
    gain: Option<f32>,
    /// A narrowband output's `centre=`, Hz.
    centre: Option<f64>,
}

impl Requested {
    /// `msg` as a sentence that names the output where `--wideband` or `--narrowband` made it.
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

    /// The outputs the command line asks for, in order (`--dst`'s or the `--wideband` ones, then
    /// the `--narrowband` ones), each key given or taken from the output flags. Dither seeds: the
    /// output's own `dither=`, else none with `--no-dither`, else `--dither-seed` + k for output
    /// k, else a random seed unlike every other output's.
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
        let narrowband = a.narrowband.as_slice();
        match (&a.dst, a.wideband.as_slice()) {
            (Some(dst), []) => {
                wanted.push(Requested {
                    name: WIDEBAND.to_string(),
                    named: false,
                    dst: dst.clone(),
                    geometry: flags,
                    gain: a.gain,
                    centre: None,
                });
                seeds.push(flag_seed(0));
            }
            (None, []) if narrowband.is_empty() => {
                return Err("give --dst, or one or more --wideband or --narrowband outputs.".into())
            }
            (None, []) => {}
            (Some(_), [_, ..]) => return Err("give either --dst or --wideband, not both.".into()),
            (None, specs) => {
                for w in specs {
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
                        centre: None,
                    });
                    seeds.push(w.dither.or_else(|| flag_seed(seeds.len())));
                }
            }
        }
        for w in narrowband {
            // The parser demands channels, decimation and centre; the defaults only guard.
            let decimation = w.decimation.unwrap_or(ddc::DECIMATIONS[0]);
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
                    ddc: Some(Ddc {
                        decimation,
                        taps: w
                            .ddc_taps
                            .unwrap_or_else(|| ddc::default_ddc_taps(decimation)),
                    }),
                    ..flags
                },
                // --gain is a wideband gain: see `narrowband_gain`.
                gain: w.gain,
                centre: w.centre,
            });
            seeds.push(w.dither.or_else(|| flag_seed(seeds.len())));
        }
        if wanted.len() > MAX_OUTPUTS {
            return Err(format!(
                "{} outputs is more than {MAX_OUTPUTS}; an engine makes at most {MAX_OUTPUTS} \
                 (--dst or --wideband, and --narrowband, together).",
                wanted.len()
            ));
        }
        for (k, w) in wanted.iter().enumerate() {
            check_output_name(&w.name)?;
            if wanted[..k].iter().any(|o| o.name == w.name) {
                let dst = if w.name == WIDEBAND && a.dst.is_some() {
                    " (--dst's output is named wideband)"
                } else {
                    ""
                };
                return Err(format!(
                    "output {:?} is given twice{dst}; every output needs a name of its own.",
                    w.name
                ));
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
        if let Some(why) = a.fft_precision.refusal(a.backend) {
            return Err(why);
        }
        if let Some(why) = a.wideband_kernels.refusal(a.backend, a.fft_precision) {
            return Err(why);
        }
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
        // Windows must fit the span for any coarse delay within --max-delay (docs/signal-path.md,
        // `output_lag`, `overlap_samples`).
        let d = max_delay_samples as usize;
        let geometries: Vec<OutputGeometry> = wanted.iter().map(|w| w.geometry).collect();
        let lags: Vec<usize> = geometries.iter().map(|g| output_lag(g, d)).collect();
        let longest = (0..wanted.len())
            .max_by_key(|&k| {
                (
                    lags[k] + delay_room(&geometries[k], d),
                    std::cmp::Reverse(k),
                )
            })
            .expect("at least one output");
        let overlap = overlap_samples(&geometries, &lags, d);
        // Steps (2n, 2nD) are powers of two: the longest output heap is a whole number of every
        // output's.
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
            let whose = if several || wanted[longest].named {
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
        let mut mixers = Vec::with_capacity(wanted.len());
        for w in &wanted {
            mixers.push(match (w.geometry.ddc, w.centre) {
                (Some(ddc), Some(centre)) => Some(
                    ddc::mixer_word(centre, a.adc_sample_rate, ddc.decimation)
                        .map_err(|e| w.refuse(e.to_string()))?,
                ),
                (Some(_), None) => return Err(w.refuse("needs centre=HZ")),
                (None, _) => None,
            });
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
            .zip(mixers)
            .map(|((w, lag), mixer)| OutputSpec {
                send_threads: match a.send_threads {
                    // One kernel-UDP sender thread moves about 3 GB/s with GSO
                    // (docs/performance.md). Output bytes per input sample: 2 x bits / 8 for
                    // wideband, D times less for narrowband.
                    0 => {
                        let bytes_per_sample =
                            2.0 * w.geometry.bits as f64 / 8.0 / w.geometry.decimation() as f64;
                        (bytes_per_sample * a.adc_sample_rate / SEND_BYTES_PER_THREAD).ceil()
                            as usize
                    }
                    n => n,
                }
                .clamp(1, w.dst.addrs.len()),
                gain: match (w.gain, w.geometry.ddc) {
                    (Some(gain), _) => gain,
                    (None, None) => {
                        crate::signal::gain::default_gain(a.sample_bits, w.geometry.bits)
                    }
                    // --gain, or the default, is a wideband output's gain.
                    (None, Some(ddc)) => crate::signal::gain::narrowband_gain(
                        a.gain.unwrap_or_else(|| {
                            crate::signal::gain::default_gain(a.sample_bits, w.geometry.bits)
                        }),
                        ddc.decimation,
                    ),
                },
                kind: match w.geometry.ddc {
                    None => OutputKind::Wideband,
                    Some(_) => OutputKind::Narrowband,
                },
                geometry: w.geometry,
                lag,
                dests: w.dst.addrs,
                name: w.name,
                mixer,
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
            fft_precision: a.fft_precision,
            wideband_kernels: a.wideband_kernels,
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
/// gives `--dst`, `--wideband` or `--narrowband`.
#[cfg(test)]
pub(crate) fn test_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
    let mut v = vec![
        "fengine",
        "--src-pol0",
        "127.0.0.1:7148",
        "--src-pol1",
        "127.0.0.1:7149",
    ];
    let outputs_given = extra.iter().any(|f| {
        let flag = f.split_once('=').map_or(*f, |(flag, _)| flag);
        ["--dst", "--wideband", "--narrowband"].contains(&flag)
    });
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
            (
                vec!["--fft-precision", "half", "--backend", "cpu"],
                "--fft-precision half is the CUDA backend's",
            ),
            (
                vec!["--fft-precision", "half", "--backend", "reference"],
                "--backend cuda",
            ),
            (
                vec!["--wideband-kernels", "three-pass", "--backend", "cpu"],
                "--backend cuda",
            ),
            (
                vec![
                    "--wideband-kernels",
                    "three-pass",
                    "--fft-precision",
                    "half",
                ],
                "two-pass kernels'",
            ),
        ] {
            let e = EngineConfig::from_args(&args(&extra).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
        }
    }

    #[test]
    fn fft_precision_from_the_command_line() {
        let precision = |extra: &[&str]| config(extra).fft_precision;
        assert_eq!(precision(&[]), FftPrecision::Single);
        assert_eq!(
            precision(&["--fft-precision", "half", "--backend", "cuda"]),
            FftPrecision::Half
        );
        // auto must then find a GPU (app::make_backend); null computes nothing either way.
        assert_eq!(precision(&["--fft-precision", "half"]), FftPrecision::Half);
        assert_eq!(
            precision(&["--fft-precision", "half", "--backend", "null"]),
            FftPrecision::Half
        );
        let e = args(&["--fft-precision", "double"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("single") && e.contains("half"), "{e}");
    }

    #[test]
    fn wideband_kernels_from_the_command_line() {
        let kernels = |extra: &[&str]| config(extra).wideband_kernels;
        assert_eq!(kernels(&[]), WidebandKernels::TwoPass);
        for backend in ["cuda", "auto", "null"] {
            assert_eq!(
                kernels(&["--wideband-kernels", "three-pass", "--backend", backend]),
                WidebandKernels::ThreePass
            );
        }
        let e = args(&["--wideband-kernels", "one-pass"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("two-pass") && e.contains("three-pass"), "{e}");
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
            (nine, "9 outputs is more than 8;"),
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
            let e = OutputArg::wideband(spec).unwrap_err();
            assert!(e.contains(want), "{spec:?}: {e:?} should say {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
            // clap passes the sentence on.
            let e = refusal(&["--wideband", spec]);
            assert!(e.contains(want), "{spec:?}: {e:?}");
        }
    }

    /// A --narrowband output takes its keys (channels, decimation and centre required), the
    /// output flags for the common keys it leaves out, and a default gain sqrt(D) times the
    /// wideband one; its centre is quantised to the mixer word.
    #[test]
    fn narrowband_outputs_take_their_keys() {
        let c = config(&[
            "--dst",
            "127.0.0.1:7150",
            "--narrowband",
            "nb:dst=127.0.0.1+1:7151,channels=1024,decimation=16,centre=400e6",
            "--narrowband",
            "nb2:dst=127.0.0.1:7160,channels=256,decimation=32,centre=1e8,taps=4,ddc_taps=320,\
             bits=4,window=rect,w_cutoff=0.5,dither=off,gain=3",
            "--taps",
            "8",
            "--dither-seed",
            "10",
        ]);
        let [wide, nb, nb2] = &c.outputs[..] else {
            panic!("three outputs: {:?}", c.outputs)
        };
        assert_eq!(
            (wide.name.as_str(), wide.kind),
            (WIDEBAND, OutputKind::Wideband)
        );
        assert_eq!((wide.mixer, wide.geometry.ddc), (None, None));
        assert_eq!((nb.name.as_str(), nb.kind), ("nb", OutputKind::Narrowband));
        let g = nb.geometry;
        assert_eq!(
            (g.channels, g.taps, g.bits, g.dither, g.filter),
            (1024, 8, 8, Some(11), FilterDesign::default())
        );
        assert_eq!(g.ddc, Some(Ddc::new(16)));
        assert_eq!(g.ddc.unwrap().taps, 192);
        assert_eq!(g.step(), 2 * 1024 * 16);
        assert_eq!(nb.mixer, Some(ddc::mixer_word(400e6, 1712e6, 16).unwrap()));
        assert_eq!(nb.gain, 4.0, "sqrt(16) x the 10-bit, 8-bit default of 1");
        assert_eq!(nb.dests.len(), 2);
        assert_eq!(
            nb.send_threads, 1,
            "8 bits / 16 at 1712 Msample/s: 0.2 GB/s"
        );
        let g = nb2.geometry;
        assert_eq!((g.channels, g.taps, g.bits, g.dither), (256, 4, 4, None));
        assert_eq!(
            (g.filter.window, g.filter.w_cutoff),
            (WindowFunction::Rect, 0.5)
        );
        assert_eq!(
            g.ddc,
            Some(Ddc {
                decimation: 32,
                taps: 320
            })
        );
        assert_eq!(nb2.gain, 3.0);
        // The default gain follows the bits, --gain (a wideband gain) and D.
        let gain = |extra: &[&str]| {
            let mut v = vec![
                "--narrowband",
                "nb:dst=127.0.0.1:7151,channels=1024,decimation=8,centre=400e6",
            ];
            v.extend_from_slice(extra);
            let c = config(&v);
            assert_eq!(c.outputs.len(), 1, "a narrowband output alone");
            c.outputs[0].gain
        };
        assert_eq!(gain(&[]), 8f32.sqrt());
        assert_eq!(gain(&["--sample-bits", "8"]), 4.0 * 8f32.sqrt());
        assert_eq!(gain(&["--output-bits", "4"]), 8f32.sqrt() / 16.0);
        assert_eq!(gain(&["--gain", "0.5"]), 0.5 * 8f32.sqrt());
        // The quantised centre: F = round(f_c / fs 2^32).
        let c = config(&[
            "--adc-sample-rate",
            "1e8",
            "--narrowband",
            "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=12345678.9",
        ]);
        let word = (12345678.9 / 1e8 * 2f64.powi(32)).round() as u32;
        assert_eq!(c.outputs[0].mixer, Some(word));
    }

    /// A wideband and a narrowband output: each lag covers its window less a step plus the delay
    /// room (rounded up to D for narrowband), the overlap the larger lag plus its room (a multiple
    /// of 8 and of D), and the chunk H heaps of the longer heap (in samples).
    #[test]
    fn lags_overlap_and_chunk_of_a_wideband_and_a_narrowband_output() {
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
        let wide = "wide:dst=127.0.0.1:7150,channels=1024";
        let nb = "nb:dst=127.0.0.1:7151,channels=256,decimation=16,centre=3e7";
        // Wideband outputs come first, whatever the order of the flags.
        for order in [
            [("--wideband", wide), ("--narrowband", nb)],
            [("--narrowband", nb), ("--wideband", wide)],
        ] {
            let mut v = flags.to_vec();
            for (flag, spec) in order {
                v.extend([flag, spec]);
            }
            let c = config(&v);
            assert_eq!(c.max_delay_samples, 1000);
            let (w, n) = (&c.outputs[0], &c.outputs[1]);
            assert_eq!((w.name.as_str(), n.name.as_str()), ("wide", "nb"));
            // Wideband as before: 3 x 2048 + 1000 -> 8192.
            assert_eq!(w.lag, 8192);
            // Narrowband: step 2 x 256 x 16 = 8192; window (2 x 256 x 4 - 1) 16 + 192 = 32944;
            // room round_up(1000, 16) = 1008; 32944 - 8192 + 1008 = 25760 -> 32768.
            assert_eq!(n.geometry.step(), 8192);
            assert_eq!(n.geometry.window(), 32944);
            assert_eq!(n.lag, 32768);
            // max(8192 + 1000, 32768 + 1008) = 33776, a multiple of 16.
            assert_eq!(c.input.geometry.overlap_samples, 33776);
            assert_eq!(c.input.geometry.chunk_samples, 64 * 4 * 8192);
            assert_eq!(c.channelisation(0).heaps_per_frame(), 16);
            assert_eq!(c.channelisation(1).heaps_per_frame(), 4);
            for k in 0..2 {
                c.channelisation(k).validate().unwrap();
                c.plan(k).validate(&c.channelisation(k)).unwrap();
            }
        }
        // Whatever the shapes, every window fits at the extreme delays: the first spectrum's at
        // +max, the last one's at -max (k = round(d / D) subsampled samples, ties away).
        for (channels, taps, decimation, ddc_taps, delay) in [
            (64, 4, 8, 96, 1e-5),
            (16, 1, 8, 3, 1e-5),
            (1024, 16, 32, 384, 3.3e-6),
            (256, 2, 16, 1000, 0.0),
            (32, 8, 32, 40, 1.6e-7),
        ] {
            let spec = format!(
                "nb:dst=127.0.0.1:7151,channels={channels},decimation={decimation},\
                 centre=3e7,taps={taps},ddc_taps={ddc_taps}"
            );
            let max = delay.to_string();
            let c = config(&[
                "--narrowband",
                &spec,
                "--adc-sample-rate",
                "1e8",
                "--max-delay",
                &max,
                "--spectra-per-heap",
                "16",
                "--heap-samples",
                "512",
            ]);
            let g = c.channelisation(0);
            let (lag, dec) = (c.outputs[0].lag as i64, decimation as i64);
            let overlap = g.input.overlap_samples as i64;
            assert_eq!(overlap % 8, 0);
            assert_eq!(overlap % dec, 0);
            let d = c.max_delay_samples as f64;
            let k = (d / dec as f64).round() as i64;
            let first = overlap - lag - k * dec;
            let last =
                overlap - lag + (g.spectra_per_frame() as i64 - 1) * g.step() as i64 + k * dec;
            assert!(first >= 0, "{spec}: {first}");
            assert!(
                last + g.window() as i64 <= g.span_samples() as i64,
                "{spec}: {last}"
            );
            assert!(last <= g.max_offset() as i64);
        }
    }

    /// What a --narrowband output may not be: each refusal one sentence that names the output
    /// (and the key where one is at fault).
    #[test]
    fn bad_narrowband_outputs_are_refused_by_name() {
        let nb = |spec: &'static str| vec!["--narrowband", spec];
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=12,centre=4e8"),
                "output \"nb\": decimation=12 must be 8, 16 or 32.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=x,centre=4e8"),
                "decimation=x must be 8, 16 or 32.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,decimation=8,centre=4e8"),
                "output \"nb\": needs channels=N.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,centre=4e8"),
                "output \"nb\": needs decimation=8, 16 or 32.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8"),
                "output \"nb\": needs centre=HZ.",
            ),
            (
                nb("nb:channels=64,decimation=8,centre=4e8"),
                "output \"nb\": needs dst=ADDR[+N]:PORT.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,centre=5e8"),
                "the key centre is given twice.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=high"),
                "output \"nb\": centre=high is not a frequency in Hz.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=inf"),
                "centre=inf is not a frequency in Hz.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,colour=red"),
                "unknown key \"colour\"; the keys are dst, channels, decimation, centre",
            ),
            (
                nb("nb"),
                "\"nb\" is not NAME:dst=ADDR[+N]:PORT,channels=N,decimation=D,centre=HZ",
            ),
            (
                nb("Nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8"),
                "output name \"Nb\" must be",
            ),
            // The band, fs/(2D) = 107 MHz wide at D = 8, within 0 .. 856 MHz.
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=50e6"),
                "output \"nb\": a narrowband centre of 50000000 Hz",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=850e6"),
                "must lie from 53500000 Hz to 802500000 Hz.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=-1e6"),
                "output \"nb\": the narrowband centre -1000000 Hz lies outside 0 .. 856000000 Hz",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=2e9"),
                "lies outside 0 .. 856000000 Hz",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=1000,decimation=8,centre=4e8"),
                "output \"nb\": channels must be a power of two from 16 to 65536, not 1000.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,taps=65"),
                "output \"nb\": taps must be from 1 to 64",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,ddc_taps=0"),
                "output \"nb\": DDC taps must be from 1 to 4096, not 0.",
            ),
            (
                nb("nb:dst=127.0.0.1+2:7151,channels=64,decimation=8,centre=4e8"),
                "output \"nb\": 64 channels cannot be divided evenly over 3 output",
            ),
            (
                [
                    nb("nb:dst=127.0.0.1:7150,channels=64,decimation=8,centre=4e8"),
                    vec!["--dst", "127.0.0.1:7150"],
                ]
                .concat(),
                "outputs \"wideband\" and \"nb\" both send to 127.0.0.1:7150",
            ),
            (
                [
                    nb("wideband:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8"),
                    vec!["--dst", "127.0.0.1:7150"],
                ]
                .concat(),
                "output \"wideband\" is given twice (--dst's output is named wideband)",
            ),
            (
                [
                    nb("a:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8"),
                    vec!["--wideband", "a:dst=127.0.0.1:7150"],
                ]
                .concat(),
                "output \"a\" is given twice;",
            ),
            (
                vec![
                    "--wideband",
                    "a:dst=127.0.0.1:7150,decimation=8",
                    "--narrowband",
                    "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8",
                ],
                "output \"a\": decimation= belongs to a narrowband output (--narrowband), not a \
                 wideband one.",
            ),
            (
                [
                    nb("nb:dst=127.0.0.1:7151,channels=65536,decimation=32,centre=4e8,taps=64"),
                    vec!["--spectra-per-heap", "1", "--heaps-per-frame", "1"],
                ]
                .concat(),
                "output \"nb\"'s taps and --max-delay need exceeds a frame's chunk",
            ),
        ];
        for (extra, want) in cases {
            let e = refusal(&extra);
            assert!(e.contains(want), "{extra:?}: {e:?} should say {want:?}");
            assert!(e.lines().next().unwrap().ends_with('.'), "{e:?}");
        }
        // Eight outputs in all, wideband and narrowband together.
        let specs: Vec<String> = (0..9)
            .map(|k| {
                if k < 5 {
                    format!("w{k}:dst=127.0.0.1:{}", 7150 + k)
                } else {
                    format!(
                        "n{k}:dst=127.0.0.1:{},channels=64,decimation=8,centre=4e8",
                        7150 + k
                    )
                }
            })
            .collect();
        let mut v: Vec<&str> = Vec::new();
        for (k, s) in specs.iter().enumerate() {
            v.extend([if k < 5 { "--wideband" } else { "--narrowband" }, s]);
        }
        let e = refusal(&v);
        assert!(e.contains("9 outputs is more than 8;"), "{e}");
        assert_eq!(config(&v[..16]).outputs.len(), 8);
        // Without any output, clap says what is missing.
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

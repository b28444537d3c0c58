//! The command line as clap parses it: `fengine [run] ARGS` ([`RunArgs`]) and `fengine bench`
//! ([`BenchArgs`]), the value enums with the combinations they refuse, and the control token from
//! the environment.

use std::net::{Ipv4Addr, SocketAddr};

use clap::{Args, Parser, Subcommand, ValueEnum};
use placement::{CoreSet, Policy};
use spead::transport::Endpoint;

use super::error::ConfigError;
use super::help::{ABOUT, AFTER_HELP, LONG_ABOUT};
use super::output_arg::OutputArg;
use super::placement::AutoAffinity;
use crate::signal::weights::{self, WindowFunction};

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
    pub fn with_env_token(self) -> Result<Self, ConfigError> {
        self.with_token_from(std::env::var_os(CONTROL_TOKEN_ENV))
    }

    /// [`with_env_token`](Self::with_env_token) with the variable's value given.
    pub fn with_token_from(
        mut self,
        value: Option<std::ffi::OsString>,
    ) -> Result<Self, ConfigError> {
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
                .ok_or_else(|| ConfigError(format!("{CONTROL_TOKEN_ENV} is not valid UTF-8.")))?
                .parse()
                .map_err(|e| {
                    ConfigError(format!("{CONTROL_TOKEN_ENV} is not a usable token: {e}."))
                })?;
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
    /// katcp control and monitoring address, for katgpucbf's clients (aiokatcp, katcpcli, nc):
    /// ?gain, ?gain-all, ?delays and its sensors. Off unless given. katcp has no token, so the
    /// interface is named: 127.0.0.1:PORT for this host only, 0.0.0.0:PORT for every interface.
    /// katgpucbf's port, 7147, is --control's default: move --control to give it to katcp.
    #[arg(long, value_name = "ADDR:PORT")]
    pub katcp: Option<SocketAddr>,
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
    /// How long each receive thread holds a chunk open for heaps that arrive late or out of
    /// order, in seconds: rounded up to whole chunks, at least 3 (the default: 3 chunks). Every
    /// chunk reaches processing this much later (a chunk leaves the window when the stream is a
    /// window ahead of it), and the window's chunk buffers are allocated at start: the startup
    /// log and /status give the window's duration and memory.
    #[arg(long, value_name = "SECONDS")]
    pub recv_window: Option<f64>,
    /// Socket buffer size in bytes for each receive and the send socket (capped by the kernel's
    /// net.core.rmem_max / wmem_max).
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    pub socket_buffer: usize,
    /// Cores for the receive threads, as a list such as 0-3,8: receive thread j of polarisation
    /// p runs on the (p x threads-per-polarisation + j)-th core of the list, cycling through it
    /// when it is short (docs/placement.md). Default: wherever the kernel puts them.
    #[arg(long, value_name = "CORES", conflicts_with = "affinity")]
    pub src_affinity: Option<CoreSet>,
    /// Cores for the send threads, dealt out as --src-affinity's.
    #[arg(long, value_name = "CORES", conflicts_with = "affinity")]
    pub dst_affinity: Option<CoreSet>,
    /// Cores for the thread that pairs the polarisations' chunks (and the one that hands frames
    /// to the send threads).
    #[arg(long, value_name = "CORES", conflicts_with = "affinity")]
    pub pair_affinity: Option<CoreSet>,
    /// Cores for the thread that submits frames to the backend.
    #[arg(long, value_name = "CORES", conflicts_with = "affinity")]
    pub compute_affinity: Option<CoreSet>,
    /// auto: a core of its own for every stream thread (receive, pair, compute, send), one per
    /// physical core while the host has enough, from the cores this process may use; every other
    /// thread runs on what is left. The layout is logged at start and shown in GET /status.
    #[arg(long, value_enum, value_name = "auto")]
    pub affinity: Option<AutoAffinity>,
    /// Real-time scheduling for the stream threads: fifo:PRIORITY or rr:PRIORITY (1 to 99), or
    /// other (the default, normal scheduling). Needs CAP_SYS_NICE; refused at start otherwise.
    #[arg(long, default_value = "other", value_name = "fifo:PRIO|rr:PRIO")]
    pub realtime: Policy,
    /// Locks the process's memory (mlockall) at start, so that no page fault stalls a stream
    /// thread. Needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK; refused at start otherwise.
    #[arg(long)]
    pub lock_memory: bool,
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
    /// CHANNELS:8:PASS makes it one without discard (katgpucbf's VLBI mode), PASS its pass band's
    /// fraction of the band (0.598: 64 of 107 MHz).
    #[arg(long, value_name = "CHANNELS:D[:PASS]")]
    pub narrowband: Vec<crate::bench::BenchNarrowband>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{config, test_args as args};
    use crate::config::EngineConfig;
    use crate::signal::weights::FilterDesign;

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
                .unwrap_err()
                .to_string();
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

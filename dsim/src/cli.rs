//! The command line. Other projects' tests spawn `dsim` with these options: keep them stable.

use std::net::{Ipv4Addr, SocketAddr};

use ::placement::{CoreSet, Policy};
use clap::{Args, Parser, Subcommand};
use spead::transport::Endpoint;

use crate::bench::BenchArgs;
use crate::config::{self, BadRequest, Config, PolsRequest, SignalSpec, Tone};
use crate::faults::{FaultRules, FaultsRequest};
use crate::placement::{Affinity, PlacementRequest};
use crate::spec::{PolsError, SignalsRequest};

const ABOUT: &str = "Digitiser simulator: both polarisations of one digitiser as SPEAD streams \
in the MeerKAT digitiser format, paced to the wall clock, controlled over HTTP while running.";

const LONG_ABOUT: &str = "\
Digitiser simulator: both polarisations of one digitiser as SPEAD streams in the MeerKAT \
digitiser format of the digitiser ICD (M1000-0001-053), as katgpucbf's dsim sends it \
(SPEAD-64-48, one heap per packet: timestamp, digitiser id and status items, packed signed \
samples, most significant bit first), paced to the wall clock. The status item has bit 1 set \
when a sample of the heap saturated, |v| >= 2^(bits-1) - 1 once quantised, and how many did in \
bits 32-47. A descriptor heap (the four items' names, shapes and types; no timestamp) goes to \
the first address of polarisation 0 at start and every 5 s.

The signal is described per polarisation (--signal: tones with a phase, combs, Gaussian noise \
named by a seed, a delay and dither each), or in the common form of the flags --tone, --noise, \
--delay0/1 and --dither: tones common to both polarisations plus noise and dither independent per \
polarisation. Every component is delayed by its polarisation's delay; then it is quantised with \
saturation. It is computed once into a buffer of \
--buffer-heaps heaps that repeats; packets point into it, so sending costs no signal work. \
Tone frequencies are rounded to a whole number of cycles per buffer, so the buffer wraps \
without a phase jump; the repetition is harmless as long as the buffer is much longer than \
what a receiver analyses at once (the default, 8192 heaps of 4096 samples = 33.5 M samples, \
is 32 windows of a 16-tap 65536-point filter bank). The noise repeats with the buffer.

The heap with timestamp t leaves at sync_time + t / rate, or up to 200 us early (packets leave \
in bursts of GSO sends); after a stall the late heaps leave at --catch-up-rate times the rate \
until back on schedule, and a host that falls more than --max-late behind skips ahead to the heap \
due now rather than send later still. Heap k (timestamp / heap-samples) of a stream with destinations ADDR+N:PORT goes \
to address k mod (N+1); its heap counter is k.";

const AFTER_HELP: &str = "\
HTTP control (--control): GET /health, /status, /metrics (Prometheus), /signal, /rate, /faults; \
PUT /signal, per polarisation {\"pol1\": {\"components\": [{\"kind\": \"noise\", \"rms\": 0.05, \"seed\": 7}], \
\"delay\": 2.5}} (a polarisation left out keeps its signal) or in the common form {\"tones\": \
[{\"frequency\": 1.5e7, \"amplitude\": 0.5}], \"noise\": 0.05, \"dither\": true, \"delays\": [0, 2.5], \"seed\": 1} \
(fields left out are kept); the reply names the heap it applies from, \
PUT /rate {\"rate\": 1e9} (from a heap shortly ahead, named in the reply; timestamps stay continuous \
and the signal is unchanged in cycles per sample, so tone frequencies in Hz scale with the rate), PUT /faults {\"pol0\": {\"drop\": {\"probability\": 0.01, \"heaps\": [100], \
\"ranges\": [[200, 210]]}, \"duplicate\": {...}, \"reorder\": {..., \"window\": 4}, \"corrupt\": {...}, \"truncate\": {...}}} (corrupt overwrites the \
SPEAD magic byte; truncate sends the first half of the datagram).
Limits: a request body of at most 1 MiB, else 413; a request's headers within 20 s of the \
connection or of its previous reply, else the connection is closed; its body within 10 s of its \
headers, else 408; 64 connections at a time, more wait to be accepted. With --control-token (or \
DSIM_CONTROL_TOKEN), every change (PUT) needs the header \"Authorization: Bearer TOKEN\", else 401; \
GET stays open.

Logs go to stderr (RUST_LOG sets the filter, default info). On start dsim logs \
`control listening on ADDR:PORT` and `sending` with the sync time and first timestamp.

Examples:
  dsim --pol0-dest 127.0.0.1:7148 --pol1-dest 127.0.0.1:7149 --rate 1e8 --tone 1.5e7:0.5 \\
       --noise 0.05 --seed 1 --control 127.0.0.1:8080
  dsim --pol0-dest 127.0.0.1:7148 --pol1-dest 127.0.0.1:7149 --rate 1e8 --signal \
       '{\"pol0\": {\"components\": [{\"kind\": \"tone\", \"frequency\": 1.5e7, \"amplitude\": 0.5}, \
                  {\"kind\": \"noise\", \"rms\": 0.05, \"seed\": 7}]}, \
         \"pol1\": {\"components\": [{\"kind\": \"noise\", \"rms\": 0.05, \"seed\": 7}], \"delay\": 2.5}}'
  dsim --pol0-dest 239.10.0.1+3:7148 --pol1-dest 239.10.0.5+3:7148 --interface 10.0.0.2
  dsim bench --rate 6.3e9 --seconds 5";

#[derive(Parser, Debug)]
#[command(
    name = "dsim",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Send into a loopback sink in this process and report the rates sent and received.
    Bench(BenchArgs),
}

/// Why a command-line value cannot be used; clap prints the sentence after the option's name.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// A `--tone` without the colon.
    #[error("'{text}' is not FREQ_HZ:AMPLITUDE (e.g. 1.5e7:0.5)")]
    ToneForm { text: String },
    /// A `--tone` whose frequency is not a number.
    #[error("'{frequency}' in '{text}' is not a frequency in Hz")]
    ToneFrequency { frequency: String, text: String },
    /// A `--tone` whose amplitude is not a number.
    #[error("'{amplitude}' in '{text}' is not an amplitude (fraction of full scale)")]
    ToneAmplitude { amplitude: String, text: String },
    /// A `--signal @FILE` that cannot be read.
    #[error("cannot read the signal file '{path}': {error}")]
    SignalFile { path: String, error: std::io::Error },
    /// A `--signal` that is not the per-polarisation form.
    #[error("not a per-polarisation signal ({{\"pol0\": {{\"components\": [...], \"delay\": ..., \"dither\": ...}}, \"pol1\": ..., \"seed\": ...}}): {0}")]
    Signal(PolsError),
    /// A `--signals` spec that does not read (the parser's sentence).
    #[error("{0}")]
    Signals(crate::signal_lang::LangError),
    /// A `--faults` that is not a faults object.
    #[error("not a faults object: {0}")]
    FaultsJson(serde_json::Error),
    /// A `--faults` object that the fault rules refuse.
    #[error(transparent)]
    Faults(#[from] BadRequest),
    /// A `--sync-time` that is neither `now` nor a number.
    #[error("'{0}' is not a Unix time in seconds or 'now'")]
    SyncTime(String),
}

/// `FREQ_HZ:AMPLITUDE`, e.g. `1.5e7:0.5`.
pub fn parse_tone(s: &str) -> Result<Tone, ValueError> {
    let (f, a) = s
        .split_once(':')
        .ok_or_else(|| ValueError::ToneForm { text: s.into() })?;
    let frequency = f.trim().parse().map_err(|_| ValueError::ToneFrequency {
        frequency: f.into(),
        text: s.into(),
    })?;
    let amplitude = a.trim().parse().map_err(|_| ValueError::ToneAmplitude {
        amplitude: a.into(),
        text: s.into(),
    })?;
    Ok(Tone {
        frequency,
        amplitude,
    })
}

/// The per-polarisation signal: JSON, or `@FILE` holding it.
fn parse_signal(s: &str) -> Result<PolsRequest, ValueError> {
    let text = match s.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|error| ValueError::SignalFile {
            path: path.into(),
            error,
        })?,
        None => s.to_string(),
    };
    crate::spec::parse_pols(&text).map_err(ValueError::Signal)
}

/// A spec in katgpucbf's signal language, read now so that a bad one is refused at start.
fn parse_signals(s: &str) -> Result<SignalsRequest, ValueError> {
    crate::signal_lang::Program::parse_for(s, 2).map_err(ValueError::Signals)?;
    Ok(SignalsRequest {
        signals: s.into(),
        period: None,
    })
}

fn parse_faults(s: &str) -> Result<FaultsRequest, ValueError> {
    let f: FaultsRequest = serde_json::from_str(s).map_err(ValueError::FaultsJson)?;
    f.validate()?;
    Ok(f)
}

/// `now` or Unix seconds.
fn parse_sync_time(s: &str) -> Result<f64, ValueError> {
    if s == "now" {
        return Ok(crate::schedule::unix_now());
    }
    s.parse().map_err(|_| ValueError::SyncTime(s.into()))
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Destination(s) of polarisation 0: ADDR[+N]:PORT, N+1 consecutive IPv4 addresses
    /// (multicast groups or unicast hosts); heap k goes to address k mod (N+1).
    #[arg(long, value_name = "ADDR[+N]:PORT", required = true)]
    pub pol0_dest: Option<Endpoint>,

    /// Destination(s) of polarisation 1, as --pol0-dest.
    #[arg(long, value_name = "ADDR[+N]:PORT", required = true)]
    pub pol1_dest: Option<Endpoint>,

    /// ADC sample rate per polarisation, in samples/s (MeerKAT L-band by default). Also the
    /// send rate: heaps leave at rate / heap-samples per second per polarisation.
    #[arg(long, value_name = "SAMPLES_PER_S", default_value_t = config::DEFAULT_RATE)]
    pub rate: f64,

    /// Unix time (s, fractional allowed) of timestamp 0, or 'now'. Default: when sending starts.
    #[arg(long, value_name = "UNIX_S", value_parser = parse_sync_time)]
    pub sync_time: Option<f64>,

    /// Samples per heap (one heap per packet); a multiple of 8.
    #[arg(long, value_name = "SAMPLES", default_value_t = config::DEFAULT_HEAP_SAMPLES)]
    pub heap_samples: usize,

    /// Bits per sample, 2 to 16 (signed, packed most significant bit first).
    #[arg(long, value_name = "BITS", default_value_t = config::DEFAULT_SAMPLE_BITS)]
    pub sample_bits: u32,

    /// The signal per polarisation, as JSON or @FILE holding it: {"pol0": {"components": [...],
    /// "delay": SAMPLES, "dither": BOOL}, "pol1": {...}, "seed": U64}. A component is
    /// {"kind": "tone", "frequency": HZ, "amplitude": FRACTION, "phase": RAD},
    /// {"kind": "noise", "rms": FRACTION, "seed": U64} (the same seed is the same noise, in either
    /// polarisation) or {"kind": "comb", "start": HZ, "spacing": HZ, "count": N, "amplitude":
    /// FRACTION}. A polarisation left out gets the default signal (noise of 0.05, dithered).
    /// Instead of the common-form flags --tone, --noise, --dither, --no-dither, --delay0 and
    /// --delay1; --seed seeds the dither and the faults unless the JSON gives "seed".
    #[arg(
        long,
        value_name = "JSON|@FILE",
        value_parser = parse_signal,
        conflicts_with_all = ["tones", "noise", "dither", "no_dither", "delay0", "delay1"]
    )]
    pub signal: Option<PolsRequest>,

    /// The signal in katgpucbf's signal language (docs/signals.md), as katgpucbf's dsim takes
    /// it: e.g. "cw(0.5, 1e8); wgn(0.05);", one expression per polarisation each ended by ';' (a
    /// single one serves both). It repeats over the buffer; --seed is its dither seed. Instead
    /// of the other signal flags.
    #[arg(
        long,
        value_name = "SPEC",
        value_parser = parse_signals,
        conflicts_with_all = ["signal", "tones", "noise", "dither", "no_dither", "delay0", "delay1"]
    )]
    pub signals: Option<SignalsRequest>,

    /// A tone common to both polarisations: frequency in Hz (0 to rate/2; rounded to whole
    /// cycles per buffer) and amplitude as a fraction of full scale (1.0 = 2^(bits-1) counts).
    /// Repeat for several tones. Default: none.
    #[arg(long = "tone", value_name = "FREQ_HZ:AMPLITUDE", value_parser = parse_tone)]
    pub tones: Vec<Tone>,

    /// Gaussian noise rms as a fraction of full scale, independent per polarisation
    /// (0.05 of a 10-bit full scale is 25.6 counts); each polarisation's noise is delayed with
    /// it.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.05)]
    pub noise: f64,

    /// Add uniform dither of +-0.5 LSB before rounding (the default), independent per
    /// polarisation; it makes the mean quantisation error zero.
    #[arg(long, overrides_with = "no_dither")]
    pub dither: bool,

    /// Round without dither.
    #[arg(long, overrides_with = "dither")]
    pub no_dither: bool,

    /// Delay of polarisation 0 in samples (fractional allowed): it emits x(t + delay0), the
    /// geometric delay an engine loaded with the same delay removes. Applies to the tones and the
    /// noise (independent per polarisation in this form, so only the tones show it).
    #[arg(
        long,
        value_name = "SAMPLES",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub delay0: f64,

    /// Delay of polarisation 1 in samples, as --delay0.
    #[arg(
        long,
        value_name = "SAMPLES",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub delay1: f64,

    /// Seed of the dither and the random faults, and (in the common form) of each polarisation's
    /// noise: the same seed gives the same samples.
    #[arg(long, value_name = "U64", default_value_t = 1)]
    pub seed: u64,

    /// Heaps in the repeating signal buffer, per polarisation (rounded up to a whole number of
    /// send batches per thread; memory about heaps x packet bytes per polarisation). Make it
    /// much longer than any analysis window of the receiver: the signal repeats with it.
    #[arg(long, value_name = "HEAPS", default_value_t = config::DEFAULT_BUFFER_HEAPS)]
    pub buffer_heaps: usize,

    /// Send threads per polarisation; 0 picks one per 3 GB/s of the stream at the starting
    /// rate (a later PUT /rate does not add threads).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,

    /// IPv4 address of the local interface to send multicast from. Default: the kernel's route.
    #[arg(long, value_name = "IPV4")]
    pub interface: Option<Ipv4Addr>,

    /// Multicast time-to-live (hops).
    #[arg(long, value_name = "HOPS", default_value_t = 4)]
    pub ttl: u32,

    /// Digitiser (antenna) index; the digitiser id item is index x 2 + polarisation.
    #[arg(long, value_name = "INDEX", default_value_t = 0)]
    pub digitiser_id: u64,

    /// Stop after this many heaps per polarisation. Default: run until stopped.
    #[arg(long, value_name = "N")]
    pub heaps: Option<u64>,

    /// Stop after this many seconds of signal at the starting rate (a heap count fixed at start).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Serve the HTTP control API on ADDR:PORT (port 0: any free port; the address is logged
    /// as 'control listening on ADDR:PORT'). 127.0.0.1:PORT keeps it to this host; 0.0.0.0:PORT
    /// opens it to every interface, ideally with --control-token. Default: no control server.
    #[arg(long, value_name = "ADDR:PORT")]
    pub control: Option<SocketAddr>,

    /// Bearer token that every change (PUT) must carry as "Authorization: Bearer TOKEN", else
    /// 401; reads (GET) stay open. Prefer the environment variable: a command line shows in the
    /// process list. Default: no token, anyone who reaches the port may change the signal, rate
    /// and faults.
    #[arg(
        long,
        env = "DSIM_CONTROL_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub control_token: Option<fgpu_serve::Token>,

    /// Serve katcp on ADDR:PORT, for katgpucbf's clients (aiokatcp, katcpcli, nc): ?time and
    /// dsim's sensors (adc-sample-rate, sample-bits, sync-time, steady-state-timestamp,
    /// dither-seed). katcp has no token: 127.0.0.1:PORT keeps it to this host, 0.0.0.0:PORT opens
    /// it to every interface. Default: no katcp server.
    #[arg(long, value_name = "ADDR:PORT")]
    pub katcp: Option<SocketAddr>,

    /// When the run ends, send a SPEAD stream-stop heap to every destination.
    #[arg(long)]
    pub send_stop: bool,

    /// Faults to inject from the start, as the JSON body of PUT /faults, e.g.
    /// '{"pol0": {"drop": {"probability": 0.01}}}'. Default: none.
    #[arg(long, value_name = "JSON", value_parser = parse_faults)]
    pub faults: Option<FaultsRequest>,

    /// Socket send buffer per thread, in bytes (the kernel caps it at net.core.wmem_max).
    #[arg(long, value_name = "BYTES", default_value_t = 16 << 20)]
    pub socket_buffer: usize,

    /// Seconds a send thread may fall behind its schedule and still catch up. A stall within it
    /// (the host descheduled dsim) is made up at --catch-up-rate: no heap is lost, timestamps
    /// are unchanged, and the catch-up is counted (catch_ups, longest_catch_up_s,
    /// heaps_sent_late in /status). The default, 0.4 s, stays within the engine's receive window
    /// (about 0.5 s), past which the engine rejects late heaps as too old however they are
    /// paced. Beyond it the host cannot send the rate, and every send thread skips ahead to the
    /// heap due now, as a digitiser keeps to its clock: the skipped heaps are never sent
    /// (heaps_skipped in /status, a failure the harness puts on dsim, not the engine), and a
    /// later, lower rate starts on time instead of inheriting a backlog.
    #[arg(long, value_name = "SECONDS", default_value_t = config::DEFAULT_MAX_LATE)]
    pub max_late: f64,

    /// After a stall, late heaps leave at this multiple of the rate until back on schedule. The
    /// default, 1.1, is the engine's own catch-up pace (its --send-rate-factor): faster input
    /// only queues in the engine's buffers until they run out. A stall of L seconds takes
    /// L / (FACTOR - 1) to make up. Above 1, at most 100.
    #[arg(long, value_name = "FACTOR", default_value_t = config::DEFAULT_CATCH_UP_RATE)]
    pub catch_up_rate: f64,

    /// Cores for the send threads, as a list such as 0-3,8 (katgpucbf dsim's --affinity): send
    /// thread j of polarisation p runs on the (p x threads + j)-th core, cycling through the list
    /// when it is short. auto: a physical core of its own for each while the host has enough,
    /// and the rest of the process on what is left (docs/placement.md). Default: wherever the
    /// kernel puts them.
    #[arg(long, value_name = "CORES|auto")]
    pub affinity: Option<Affinity>,

    /// Cores for every other thread (building the signal, control, monitoring).
    #[arg(long, value_name = "CORES")]
    pub main_affinity: Option<CoreSet>,

    /// Real-time scheduling for the send threads: fifo:PRIORITY or rr:PRIORITY (1 to 99), or
    /// other (the default). Needs CAP_SYS_NICE; refused at start otherwise.
    #[arg(long, default_value = "other", value_name = "fifo:PRIO|rr:PRIO")]
    pub realtime: Policy,

    /// Locks the process's memory (mlockall) at start: the signal buffers never page out. Needs
    /// CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK; refused at start otherwise.
    #[arg(long)]
    pub lock_memory: bool,
}

impl RunArgs {
    pub fn to_config(&self) -> Config {
        // clap enforces the destinations; these defaults are never used from the command line.
        let dest = |d: &Option<Endpoint>| {
            d.clone().unwrap_or(Endpoint {
                addrs: vec!["127.0.0.1:7148".parse().expect("literal address")],
            })
        };
        let mut c = Config::new(dest(&self.pol0_dest), dest(&self.pol1_dest));
        c.rate = self.rate;
        c.sync_time = self.sync_time;
        c.heap_samples = self.heap_samples;
        c.sample_bits = self.sample_bits;
        c.signal = SignalSpec {
            tones: self.tones.clone(),
            noise: self.noise,
            dither: !self.no_dither,
            delays: [self.delay0, self.delay1],
            seed: self.seed,
        };
        c.buffer_heaps = self.buffer_heaps;
        c.threads = self.threads;
        c.interface = self.interface;
        c.ttl = self.ttl;
        c.digitiser_id = self.digitiser_id;
        c.heaps = self.heaps;
        c.duration = self.duration;
        c.control = self.control;
        c.control_token = self.control_token.clone();
        c.send_stop = self.send_stop;
        c.socket_buffer = self.socket_buffer;
        c.faults = self.faults.clone().unwrap_or_default();
        c.max_late = self.max_late;
        c.catch_up_rate = self.catch_up_rate;
        c.signal_pols = self.signal.clone();
        c.signals = self.signals.clone();
        c.placement = PlacementRequest {
            send: self.affinity.clone(),
            main: self.main_affinity.clone(),
            policy: self.realtime,
            lock_memory: self.lock_memory,
        };
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The placement flags reach the configuration; a bad list or policy is clap's sentence.
    #[test]
    fn placement_flags_parse_and_refuse_bad_values() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "dsim",
                "--pol0-dest",
                "127.0.0.1:1",
                "--pol1-dest",
                "127.0.0.1:2",
            ];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|c| c.run.to_config().placement)
        };
        let p = parse(&[
            "--affinity",
            "2-3",
            "--main-affinity",
            "0",
            "--realtime",
            "fifo:20",
            "--lock-memory",
        ])
        .unwrap();
        assert_eq!(p.send, Some(Affinity::Cores("2,3".parse().unwrap())));
        assert_eq!(p.main, Some(CoreSet::one(0)));
        assert_eq!(p.policy, Policy::Fifo(20));
        assert!(p.lock_memory);
        assert_eq!(
            parse(&["--affinity", "auto"]).unwrap().send,
            Some(Affinity::Auto)
        );
        assert_eq!(parse(&[]).unwrap(), PlacementRequest::default());
        for (flag, bad, says) in [
            ("--affinity", "1-", "is not a list of cores"),
            ("--main-affinity", "x", "is not a list of cores"),
            ("--realtime", "fifo:100", "is not a scheduling policy"),
        ] {
            let e = parse(&[flag, bad]).unwrap_err().to_string();
            assert!(e.contains(says), "{flag} {bad}: {e}");
        }
    }

    #[test]
    fn example_command_line_parses() {
        let cli = Cli::try_parse_from([
            "dsim",
            "--pol0-dest",
            "127.0.0.1:7148",
            "--pol1-dest",
            "239.1.2.3+3:7149",
            "--rate",
            "1e8",
            "--tone",
            "1.5e7:0.5",
            "--tone",
            "0:0.1",
            "--noise",
            "0.05",
            "--seed",
            "7",
            "--control",
            "127.0.0.1:0",
            "--sync-time",
            "1700000000.5",
            "--delay1",
            "-2.5",
            "--no-dither",
            "--heaps",
            "100",
            "--faults",
            r#"{"pol1": {"drop": {"heaps": [5]}}}"#,
        ])
        .unwrap();
        let c = cli.run.to_config();
        c.validate().unwrap();
        assert_eq!(c.rate, 1e8);
        assert_eq!(c.dests[1].addrs.len(), 4);
        assert_eq!(c.signal.tones.len(), 2);
        assert_eq!(c.signal.delays, [0.0, -2.5]);
        assert!(!c.signal.dither);
        assert_eq!(c.sync_time, Some(1_700_000_000.5));
        assert_eq!(c.heaps, Some(100));
        assert_eq!(c.faults.pol1.unwrap().drop.unwrap().heaps, vec![5]);
    }

    #[test]
    fn dither_is_on_by_default_and_last_flag_wins() {
        let base = [
            "dsim",
            "--pol0-dest",
            "127.0.0.1:1",
            "--pol1-dest",
            "127.0.0.1:2",
        ];
        let parse = |extra: &[&str]| {
            let args: Vec<&str> = base.iter().chain(extra).copied().collect();
            Cli::try_parse_from(args)
                .unwrap()
                .run
                .to_config()
                .signal
                .dither
        };
        assert!(parse(&[]));
        assert!(!parse(&["--no-dither"]));
        assert!(parse(&["--no-dither", "--dither"]));
    }

    const DESTS: [&str; 5] = [
        "dsim",
        "--pol0-dest",
        "127.0.0.1:1",
        "--pol1-dest",
        "127.0.0.1:2",
    ];

    fn with(extra: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(DESTS.iter().chain(extra).copied())
    }

    #[test]
    fn signal_takes_the_per_pol_form_as_json_or_a_file() {
        let json = r#"{"pol1": {"components": [{"kind": "noise", "rms": 0.1, "seed": 7},
                                              {"kind": "tone", "frequency": 1e6, "amplitude": 0.2, "phase": 1.5}],
                                "delay": 2.5, "dither": false}, "seed": 9}"#;
        let c = with(&["--signal", json, "--seed", "4"])
            .unwrap()
            .run
            .to_config();
        c.validate().unwrap();
        let s = c.start_signal();
        assert_eq!(s.seed, 9, "the JSON's seed wins over --seed");
        assert_eq!(s.pols[1].delay, 2.5);
        assert_eq!(s.pols[1].components.len(), 2);
        // pol0, left out, has the default signal: noise of 0.05 of its own, dithered.
        assert_eq!(
            s.pols[0],
            crate::spec::Signal::from_common(&SignalSpec {
                seed: 4,
                ..Default::default()
            })
            .pols[0]
        );

        let path = std::env::temp_dir().join(format!("dsim-signal-{}.json", std::process::id()));
        std::fs::write(&path, json).unwrap();
        let arg = format!("@{}", path.display());
        let from_file = with(&["--signal", &arg]).unwrap().run.to_config();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(from_file.signal_pols, c.signal_pols);
    }

    #[test]
    fn signal_refuses_the_common_flags_and_names_a_wrong_field() {
        let flags: [&[&str]; 6] = [
            &["--tone", "1e6:0.1"],
            &["--noise", "0.1"],
            &["--delay0", "2"],
            &["--delay1", "2"],
            &["--dither"],
            &["--no-dither"],
        ];
        for flag in flags {
            let args: Vec<&str> = ["--signal", "{}"].iter().chain(flag).copied().collect();
            let err = with(&args).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{flag:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains("--signal") && text.contains(flag[0]),
                "{text}"
            );
        }
        let err = with(&[
            "--signal",
            r#"{"pol0": {"components": [{"kind": "noise", "rms": 1}]}}"#,
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("pol0.components[0]: missing field `seed`"),
            "{err}"
        );
        let err = with(&["--signal", "@/nonexistent/signal.json"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read the signal file"), "{err}");
        // Values are checked by the configuration, with the sentence the API gives.
        let c = with(&["--signal", r#"{"pol1": {"components": [], "delay": 1e12}}"#])
            .unwrap()
            .run
            .to_config();
        assert!(c.validate().unwrap_err().0.contains("pol1 delay"));
    }

    #[test]
    fn value_errors_read_as_before() {
        let said = |e: ValueError| e.to_string();
        assert_eq!(
            said(parse_tone("5e6").unwrap_err()),
            "'5e6' is not FREQ_HZ:AMPLITUDE (e.g. 1.5e7:0.5)"
        );
        assert_eq!(
            said(parse_tone("x:0.5").unwrap_err()),
            "'x' in 'x:0.5' is not a frequency in Hz"
        );
        assert_eq!(
            said(parse_tone("1e6: y").unwrap_err()),
            "' y' in '1e6: y' is not an amplitude (fraction of full scale)"
        );
        assert_eq!(
            said(parse_sync_time("soon").unwrap_err()),
            "'soon' is not a Unix time in seconds or 'now'"
        );
        let e = said(parse_signal("[]").unwrap_err());
        assert!(
            e.starts_with("not a per-polarisation signal ({\"pol0\": {\"components\": [...]"),
            "{e}"
        );
        assert!(said(parse_faults("1").unwrap_err()).starts_with("not a faults object: "));
    }

    #[test]
    fn bad_values_are_refused_with_reasons() {
        let err = Cli::try_parse_from(["dsim", "--pol0-dest", "127.0.0.1:1"]).unwrap_err();
        assert!(err.to_string().contains("--pol1-dest"));
        let err = Cli::try_parse_from([
            "dsim",
            "--pol0-dest",
            "127.0.0.1:1",
            "--pol1-dest",
            "127.0.0.1:2",
            "--tone",
            "5e6",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("FREQ_HZ:AMPLITUDE"));
        assert!(Cli::try_parse_from(["dsim", "bench", "--seconds", "1"]).is_ok());
    }

    /// No control server unless asked for; a token is checked and never shown.
    #[test]
    fn control_is_off_by_default_and_its_token_checked() {
        let base = [
            "dsim",
            "--pol0-dest",
            "127.0.0.1:1",
            "--pol1-dest",
            "127.0.0.1:2",
        ];
        let parse = |extra: &[&str]| {
            let args: Vec<&str> = base.iter().chain(extra).copied().collect();
            Cli::try_parse_from(args).map(|c| c.run.to_config())
        };
        let c = parse(&[]).unwrap();
        assert_eq!(c.control, None);
        assert!(c.control_token.is_none());
        let c = parse(&["--control", "127.0.0.1:0", "--control-token", "t0k"]).unwrap();
        assert_eq!(format!("{:?}", c.control_token), "Some(Token(hidden))");
        for bad in ["", "t 0k"] {
            let e = parse(&["--control-token", bad]).unwrap_err().to_string();
            assert!(e.contains("control token"), "{e}");
        }
    }
}

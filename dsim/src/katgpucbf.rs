//! katgpucbf's `dsim` command line, as SARAO's katsdpcontroller generates it: recognised by
//! `--adc-sample-rate` (katgpucbf's dsim requires it; ours calls the rate `--rate`), parsed with
//! katgpucbf's flags and defaults ([`KatDsimArgs`]), and translated to the equivalent line of
//! ours ([`Translation`]), which our own [`Cli`] then parses. Flags that name a transport detail
//! done another way here become one start-up log line each; what cannot be honoured is refused
//! with a sentence. docs/katgpucbf.md lists every flag.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};

use clap::Parser;

use crate::cli::Cli;

/// katgpucbf's default signal, when the line gives no `--signals`.
pub const DEFAULT_SIGNALS: &str = "cw(1.0, 232101234.0);";

/// Whether `argv` is katgpucbf's form: it names `--adc-sample-rate`, which katgpucbf's dsim
/// requires and ours does not have.
pub fn is_katgpucbf_form(argv: &[OsString]) -> bool {
    argv.iter().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == "--adc-sample-rate" || a.starts_with("--adc-sample-rate=")
    })
}

/// Every flag of katgpucbf's `dsim/main.py` (and the shared ones of `katgpucbf/main.py`), with
/// katgpucbf's defaults.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "dsim",
    version,
    infer_long_args = true,
    args_override_self = true,
    about = "dsim reading katgpucbf's dsim command line (see docs/katgpucbf.md)."
)]
pub struct KatDsimArgs {
    /// ADC sample rate in Hz.
    #[arg(long, required = true)]
    pub adc_sample_rate: f64,
    /// Unix time of timestamp 0 (default: now).
    #[arg(long)]
    pub sync_time: Option<f64>,
    /// katgpucbf's signal language (default cw(1.0, 232101234.0);).
    #[arg(long)]
    pub signals: Option<String>,
    #[arg(long, default_value_t = 4096)]
    pub heap_samples: usize,
    #[arg(long, default_value_t = 10)]
    pub sample_bits: u32,
    /// Digitiser id of the first stream; the others follow.
    #[arg(long, default_value_t = 0)]
    pub first_id: u64,
    /// Core of the send thread (-1: not bound).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub affinity: i64,
    /// Network device to send on, by name (or IPv4 address).
    #[arg(long, required = true)]
    pub interface: String,
    #[arg(long, default_value_t = 4)]
    pub ttl: u32,
    #[arg(long, default_value_t = 1 << 20)]
    pub send_buffer: usize,
    /// ibverbs: the same packets go through kernel UDP sockets (GSO) here.
    #[arg(long)]
    pub ibv: bool,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub comp_vector: i64,
    /// Core of the main thread (-1: not bound).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub main_affinity: i64,
    /// Period of the signal in samples: here the repeating buffer's length.
    #[arg(long, default_value_t = 1 << 27)]
    pub period: usize,
    #[arg(long)]
    pub max_period: Option<usize>,
    #[arg(long)]
    pub dither_seed: Option<u64>,
    #[arg(long, default_value = "")]
    pub katcp_host: String,
    #[arg(long, default_value_t = 7147)]
    pub katcp_port: u16,
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    #[arg(long)]
    pub aiomonitor: bool,
    #[arg(long)]
    pub aiomonitor_host: Option<String>,
    #[arg(long)]
    pub aiomonitor_port: Option<u16>,
    #[arg(long)]
    pub aiomonitor_webui_port: Option<u16>,
    #[arg(long)]
    pub aioconsole_port: Option<u16>,
    /// Destinations, one per polarisation: X.X.X.X[+N]:PORT.
    #[arg(required = true, num_args = 1..)]
    pub dest: Vec<String>,
}

/// What a katgpucbf dsim line becomes.
#[derive(Debug, Clone)]
pub struct Translation {
    /// The equivalent `dsim ...` line of ours.
    pub argv: Vec<String>,
    /// One log line each for flags honoured another way.
    pub notes: Vec<String>,
    /// The `--signals` specification as given, `None` for katgpucbf's default.
    pub signals: Option<String>,
}

impl Translation {
    /// Translates `a`; the error is a sentence.
    pub fn new(a: &KatDsimArgs) -> Result<Self, String> {
        let mut argv = vec!["dsim".to_string()];
        let mut notes = Vec::new();
        let mut flag = |name: &str, value: String| {
            argv.push(format!("--{name}"));
            argv.push(value);
        };
        let [pol0, pol1] = a.dest.as_slice() else {
            let n = a.dest.len();
            return Err(format!(
                "the line gives {n} destination{}; this dsim sends two polarisations, one \
                 destination each.",
                if n == 1 { "" } else { "s" }
            ));
        };
        flag("pol0-dest", pol0.clone());
        flag("pol1-dest", pol1.clone());
        flag("rate", a.adc_sample_rate.to_string());
        if let Some(t) = a.sync_time {
            flag("sync-time", t.to_string());
        }
        flag("heap-samples", a.heap_samples.to_string());
        flag("sample-bits", a.sample_bits.to_string());
        if !a.first_id.is_multiple_of(2) {
            return Err(format!(
                "--first-id {} is odd; this dsim numbers a digitiser's streams 2k and 2k + 1 \
                 (--digitiser-id k): give an even first id.",
                a.first_id
            ));
        }
        flag("digitiser-id", (a.first_id / 2).to_string());
        match &a.signals {
            // A 1.0-amplitude CW at 232101234 Hz, nothing else, as katgpucbf's default.
            None => {
                flag("tone", "232101234:1".into());
                flag("noise", "0".into());
            }
            // katgpucbf's signal language, which this dsim reads too (docs/signals.md).
            Some(spec) => flag("signals", spec.clone()),
        }
        if let Some(seed) = a.dither_seed {
            flag("seed", seed.to_string());
        }
        let max_period = a.max_period.unwrap_or(a.period);
        if a.period == 0 || max_period == 0 {
            return Err("--period and --max-period must be positive.".into());
        }
        if !max_period.is_multiple_of(a.period) {
            return Err("--max-period must be a multiple of --period.".into());
        }
        if a.heap_samples == 0 || !max_period.is_multiple_of(a.heap_samples) {
            return Err("--max-period must be a multiple of --heap-samples.".into());
        }
        if max_period < 2 * a.heap_samples {
            return Err("--max-period must be at least 2 heaps.".into());
        }
        flag(
            "buffer-heaps",
            a.period.div_ceil(a.heap_samples).to_string(),
        );
        flag("interface", interface_address(&a.interface)?.to_string());
        flag("ttl", a.ttl.to_string());
        flag("socket-buffer", a.send_buffer.to_string());
        if a.affinity >= 0 {
            flag("affinity", a.affinity.to_string());
        }
        if a.main_affinity >= 0 {
            flag("main-affinity", a.main_affinity.to_string());
        }
        let katcp = katcp_address(&a.katcp_host, a.katcp_port)?;
        flag("katcp", katcp.to_string());
        let control = match a.prometheus_port {
            Some(port) => format!("0.0.0.0:{port}"),
            None => "127.0.0.1:0".into(),
        };
        flag("control", control.clone());
        notes.push(format!(
            "katcp on {katcp} (--katcp-host/--katcp-port, as katgpucbf's dsim); the HTTP API on \
             {control} (its GET /metrics is the Prometheus text)."
        ));
        if a.ibv {
            notes.push(
                "--ibv (and --comp-vector): this dsim sends the same SPEAD streams through \
                 kernel UDP sockets (GSO), not ibverbs."
                    .into(),
            );
        }
        if a.aiomonitor || a.aiomonitor_port.is_some() || a.aioconsole_port.is_some() {
            notes.push(
                "--aiomonitor and its ports: there is no Python event loop to inspect; nothing \
                 listens on those ports."
                    .into(),
            );
        }
        Ok(Self {
            argv,
            notes,
            signals: a.signals.clone(),
        })
    }

    /// Our own command line of [`argv`](Self::argv), with its checks.
    pub fn cli(&self) -> Result<Cli, String> {
        Cli::try_parse_from(&self.argv).map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.trim_start_matches("error: ").to_string()
        })
    }
}

/// The IPv4 address of the network device `name`, or `name` where it is an address.
fn interface_address(name: &str) -> Result<Ipv4Addr, String> {
    if let Ok(ip) = name.parse() {
        return Ok(ip);
    }
    let interfaces = if_addrs::get_if_addrs()
        .map_err(|e| format!("--interface: cannot list the network devices: {e}."))?;
    interfaces
        .iter()
        .filter(|i| i.name == name)
        .find_map(|i| match i.ip() {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        })
        .ok_or_else(|| {
            format!("--interface {name}: no network device of that name has an IPv4 address.")
        })
}

/// katcp's address: an empty host is every interface, as in katgpucbf.
fn katcp_address(host: &str, port: u16) -> Result<SocketAddr, String> {
    if host.is_empty() {
        return Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into());
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("--katcp-host {host}: cannot resolve it: {e}."))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| format!("--katcp-host {host}: it has no IPv4 address."))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../engine/tests/fixtures/dsim.args");

    fn fixture_argv() -> Vec<OsString> {
        FIXTURE
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| OsString::from(l.replace("enp193s0f0np0", "lo")))
            .collect()
    }

    fn translate(argv: &[OsString]) -> Result<Translation, String> {
        let a = KatDsimArgs::try_parse_from(argv).map_err(|e| e.to_string())?;
        Translation::new(&a)
    }

    #[test]
    fn the_generators_dsim_line_translates_flag_by_flag() {
        let argv = fixture_argv();
        assert!(is_katgpucbf_form(&argv));
        let t = translate(&argv).unwrap();
        assert_eq!(
            t.argv.join(" "),
            "dsim --pol0-dest 239.192.0.0+7:7148 --pol1-dest 239.192.0.8+7:7148 \
             --rate 1712000000 --sync-time 1700000000 --heap-samples 4096 --sample-bits 10 \
             --digitiser-id 0 --tone 232101234:1 --noise 0 --buffer-heaps 32768 \
             --interface 127.0.0.1 --ttl 4 --socket-buffer 1048576 --affinity 5 \
             --main-affinity 4 --katcp 0.0.0.0:37551 --control 0.0.0.0:37552"
        );
        assert!(t.notes.join(" ").contains("--ibv"), "{:?}", t.notes);
        let cli = t.cli().unwrap();
        let run = cli.run;
        assert_eq!(run.rate, 1712e6);
        assert_eq!(run.tones.len(), 1);
        assert_eq!(run.katcp, Some("0.0.0.0:37551".parse().unwrap()));
        assert_eq!(run.control, Some("0.0.0.0:37552".parse().unwrap()));
        // Our own lines are not katgpucbf's.
        let ours: Vec<OsString> = ["dsim", "--pol0-dest", "127.0.0.1:1", "--rate", "1e8"]
            .map(OsString::from)
            .to_vec();
        assert!(!is_katgpucbf_form(&ours));
    }

    /// A `--signals` line is passed on as ours, in katgpucbf's language.
    #[test]
    fn a_signals_spec_is_passed_on() {
        let mut argv = fixture_argv();
        argv.push(OsString::from("--signals=cw(0.5, 1e8);"));
        let t = translate(&argv).unwrap();
        let line = t.argv.join(" ");
        assert!(line.contains("--signals cw(0.5, 1e8);"), "{line}");
        assert!(!line.contains("--tone"), "{line}");
        let run = t.cli().unwrap().run;
        assert_eq!(
            run.signals.map(|s| s.signals).as_deref(),
            Some("cw(0.5, 1e8);")
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_with_a_sentence() {
        let with = |extra: &[&str], drop_dest: bool| {
            let mut argv = fixture_argv();
            if drop_dest {
                argv.pop();
            }
            argv.extend(extra.iter().map(OsString::from));
            translate(&argv).unwrap_err()
        };
        for (extra, drop_dest, want) in [
            (vec![], true, "the line gives 1 destination;"),
            (vec!["--first-id=3"], false, "--first-id 3 is odd"),
            (
                vec!["--max-period=100"],
                false,
                "--max-period must be a multiple of --period.",
            ),
            (
                vec!["--interface=nosuchdev0"],
                false,
                "no network device of that name",
            ),
        ] {
            let e = with(&extra, drop_dest);
            assert!(e.contains(want), "{extra:?}: {e:?} should say {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
        }
    }
}

//! fgpu's flags to this engine's: the `fengine run` line that does the same job
//! ([`Translation::argv`], parsed by our own [`Cli`] so that every check of ours applies), the
//! start-up notes for flags that name a transport detail done another way here, and the refusals,
//! one sentence each, for what this engine cannot honour.

use std::collections::BTreeSet;

use clap::Parser;
use placement::CoreSet;
use spead::transport::Endpoint;

use super::flags::FgpuArgs;
use super::network::{interface_address, katcp_address};
use super::output::{with_default_port, KatOutput, DEFAULT_WEIGHT_PASS};
use crate::config::error::{sentence, ConfigError};
use crate::config::{Cli, RunArgs};

/// The program name that selects katgpucbf's form.
pub const PROGRAM: &str = "fgpu";

/// katgpucbf's narrowband DDC length: this many taps per unit of decimation.
const KATGPUCBF_DDC_TAPS_RATIO: usize = 16;

/// What an fgpu command line becomes.
#[derive(Debug, Clone)]
pub struct Translation {
    /// The equivalent `fengine run ...` line.
    pub argv: Vec<String>,
    /// One log line each for flags honoured another way.
    pub notes: Vec<String>,
    /// Cores the process must be let onto before it starts (see [`Translation::new`]).
    pub widen_to: Option<CoreSet>,
}

impl Translation {
    /// Translates `a`. `started_on` is the process's cores as started: katsdpcontroller runs
    /// `taskset -c CORE fgpu ... --recv-affinity=R --send-affinity=S`, fgpu's Python thread on
    /// CORE and its stream threads on R and S. Where R and S lie outside `started_on`, the
    /// process is let onto them ([`widen_to`](Self::widen_to)) and the pairing and compute
    /// threads are kept on `started_on`, where fgpu keeps its Python thread.
    pub fn new(a: &FgpuArgs, started_on: &CoreSet) -> Result<Self, ConfigError> {
        refuse_unhonourable(a)?;
        let mut notes = Vec::new();
        let mut argv: Vec<String> = ["fengine", "run"].map(String::from).to_vec();
        let mut flag = |name: &str, value: String| {
            argv.push(format!("--{name}"));
            argv.push(value);
        };

        let [pol0, pol1] = sources(&a.src)?;
        flag("src-pol0", pol0);
        flag("src-pol1", pol1);
        flag("interface", interface(a)?);

        let outputs: Vec<&KatOutput> = a.wideband.iter().chain(&a.narrowband).collect();
        if outputs.is_empty() {
            return Err(ConfigError(
                "at least one --wideband or --narrowband argument is required.".into(),
            ));
        }
        let framing = Framing::new(a, &outputs)?;
        for o in &outputs {
            let kind = if o.narrowband {
                "narrowband"
            } else {
                "wideband"
            };
            flag(kind, output_spec(o)?);
        }
        flag("spectra-per-heap", framing.spectra_per_heap.to_string());
        flag("heaps-per-frame", framing.heaps_per_frame.to_string());
        if outputs.iter().any(|o| o.weight_pass.is_some()) {
            notes.push(
                "weight_pass=0.005 (katgpucbf's default) of the narrowband outputs names \
                 katgpucbf's DDC filter design; this engine's DDC filter is its own \
                 (docs/signal-path.md), with the ddc_taps given."
                    .into(),
            );
        }

        flag("adc-sample-rate", a.adc_sample_rate.to_string());
        flag("sync-time", a.sync_time.to_string());
        flag("sample-bits", a.dig_sample_bits.to_string());
        flag("heap-samples", a.recv_packet_samples.to_string());
        flag("feng-id", a.feng_id.to_string());
        flag("array-size", a.array_size.to_string());
        flag("packet-payload", a.send_packet_payload.to_string());
        flag("output-bits", a.send_sample_bits.to_string());
        if let Some(g) = a.gain {
            flag("gain", g.to_string());
        }
        flag("ttl", a.send_ttl.to_string());
        flag("send-rate-factor", a.send_rate_factor.to_string());
        // A delay of D samples on one polarisation and none on the other differ by D: this
        // engine keeps room for |delay| up to the difference fgpu allows.
        flag(
            "max-delay",
            (a.max_delay_diff as f64 / a.adc_sample_rate).to_string(),
        );
        flag(
            "socket-buffer",
            a.recv_buffer.max(a.send_buffer).to_string(),
        );
        if a.send_buffer != a.recv_buffer {
            notes.push(format!(
                "--recv-buffer {} and --send-buffer {}: this engine's sockets share one size \
                 (--socket-buffer), the larger.",
                a.recv_buffer, a.send_buffer
            ));
        }

        let katcp = katcp_address(&a.katcp_host, a.katcp_port)?;
        flag("katcp", katcp.to_string());
        let control = match a.prometheus_port {
            Some(port) => format!("0.0.0.0:{port}"),
            None => "127.0.0.1:0".into(),
        };
        flag("control", control.clone());
        notes.push(format!(
            "katcp on {katcp} (--katcp-host/--katcp-port, as fgpu); the HTTP API on {control} \
             ({}).",
            if a.prometheus_port.is_some() {
                "--prometheus-port: its GET /metrics is the Prometheus text"
            } else {
                "no --prometheus-port: loopback, a free port"
            }
        ));

        let widen_to = affinity(a, started_on, &mut flag, &mut notes)?;
        notes.extend(transport_notes(a));
        Ok(Self {
            argv,
            notes,
            widen_to,
        })
    }

    /// The run arguments of [`argv`](Self::argv), through our own command line's checks (and
    /// `FENGINE_CONTROL_TOKEN`, as for `fengine`).
    pub fn run_args(&self) -> Result<RunArgs, ConfigError> {
        let cli = Cli::try_parse_from(&self.argv).map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            ConfigError(sentence(first.trim_start_matches("error: ").to_string()))
        })?;
        let cli = cli.with_env_token()?;
        match cli.command {
            Some(crate::config::Command::Run(r)) => Ok(r),
            _ => unreachable!("the translation is a `fengine run` line"),
        }
    }
}

/// Flags with no honest counterpart here: one sentence each.
fn refuse_unhonourable(a: &FgpuArgs) -> Result<(), ConfigError> {
    if a.mask_timestamp {
        return Err(ConfigError(
            "--mask-timestamp works around a digitiser that sets the low bits of its \
             timestamps; this engine reads timestamps as they come and has no such mask: drop \
             the flag, or fix the digitiser."
                .into(),
        ));
    }
    if let Some(file) = &a.monitor_log {
        return Err(ConfigError(format!(
            "--monitor-log {file}: that file is katgpucbf's record of its Python queues, which \
             this engine does not have; drop the flag (GET /status and /metrics on the HTTP API \
             give this engine's counters)."
        )));
    }
    if a.use_peerdirect && !a.send_ibv {
        return Err(ConfigError("--use-peerdirect requires --send-ibv.".into()));
    }
    if a.recv_ibv && a.recv_affinity.len() != a.recv_comp_vector.len() {
        return Err(ConfigError(
            "--recv-comp-vector must have same length as --recv-affinity.".into(),
        ));
    }
    Ok(())
}

/// fgpu's source: endpoint lists, the first half of the addresses pol0's, the second pol1's;
/// each half must be consecutive addresses on one port (`ADDR+N:PORT`), as this engine takes.
fn sources(src: &str) -> Result<[String; 2], ConfigError> {
    let mut addrs = Vec::new();
    for part in src.split(',') {
        let e: Endpoint =
            with_default_port(part)
                .parse()
                .map_err(|e: spead::transport::EndpointError| {
                    if std::path::Path::new(src).exists() {
                        ConfigError(format!(
                    "{src} is a file: reading a pcap capture is katgpucbf's replay mode; this \
                     engine receives live streams only (replay the capture onto the network, \
                     for example with tcpreplay)."
                ))
                    } else {
                        ConfigError(format!("the source {src}: {}", sentence(e.to_string())))
                    }
                })?;
        addrs.extend(e.addrs);
    }
    if addrs.len() % 2 != 0 {
        return Err(ConfigError(format!(
            "the source {src} has {} addresses; fgpu takes the first half as polarisation 0 and \
             the second as polarisation 1, so it needs an even number.",
            addrs.len()
        )));
    }
    let (p0, p1) = addrs.split_at(addrs.len() / 2);
    let half = |pol: usize, part: &[std::net::SocketAddrV4]| {
        let first = part[0];
        let consecutive = part.iter().enumerate().all(|(i, a)| {
            a.port() == first.port() && u32::from(*a.ip()) == u32::from(*first.ip()) + i as u32
        });
        if consecutive {
            Ok(Endpoint {
                addrs: part.to_vec(),
            }
            .to_string())
        } else {
            Err(ConfigError(format!(
                "the source {src}: polarisation {pol}'s addresses must be consecutive on one port \
                 (ADDR+N:PORT), as this engine receives them."
            )))
        }
    };
    Ok([half(0, p0)?, half(1, p1)?])
}

/// The one interface this engine receives and sends on.
fn interface(a: &FgpuArgs) -> Result<String, ConfigError> {
    if a.recv_interface.is_empty() {
        return Err(ConfigError(
            "a live source requires --recv-interface.".into(),
        ));
    }
    let mut ips = BTreeSet::new();
    for name in &a.recv_interface {
        ips.insert(interface_address("--recv-interface", name)?);
    }
    for name in &a.send_interface {
        ips.insert(interface_address("--send-interface", name)?);
    }
    match Vec::from_iter(ips).as_slice() {
        [one] => Ok(one.to_string()),
        many => Err(ConfigError(format!(
            "--recv-interface {} and --send-interface {} name {} addresses; this engine \
             receives and sends on one interface (--interface): give the same device to both.",
            a.recv_interface.join(","),
            a.send_interface.join(","),
            many.len()
        ))),
    }
}

/// Spectra per heap and heaps per frame from fgpu's batch and chunk sizes.
struct Framing {
    spectra_per_heap: usize,
    heaps_per_frame: usize,
}

impl Framing {
    fn new(a: &FgpuArgs, outputs: &[&KatOutput]) -> Result<Self, ConfigError> {
        let mut spectra = None;
        for o in outputs {
            let jones = o.jones_per_batch.unwrap_or(a.jones_per_batch);
            if o.channels == 0 || jones == 0 || !jones.is_multiple_of(o.channels) {
                return Err(ConfigError(format!(
                    "output {}: jones_per_batch {jones} is not a whole number of its {}-channel \
                     spectra.",
                    o.name, o.channels
                )));
            }
            let s = jones / o.channels;
            match spectra {
                Some((s0, first)) if s0 != s => {
                    return Err(ConfigError(format!(
                        "outputs {first} and {} would have {s0} and {s} spectra per heap; this \
                         engine sends every output's heaps with the same number of spectra \
                         (--spectra-per-heap): give jones_per_batch = channels x one number of \
                         spectra.",
                        o.name
                    )))
                }
                Some(_) => {}
                None => spectra = Some((s, o.name.as_str())),
            }
        }
        let (s, _) = spectra.expect("at least one output");
        // Samples per spectrum of each output: 2n, times D for a narrowband one.
        let steps: Vec<usize> = outputs
            .iter()
            .map(|o| 2 * o.channels * o.decimation.unwrap_or(1))
            .collect();
        let max_step = *steps.iter().max().expect("at least one output");
        // A frame is H heaps of the longest-step output: at most --recv-chunk-samples of input,
        // and no output more than --send-chunk-jones (rounded up to whole heaps) in it.
        let by_input = a.recv_chunk_samples / (s * max_step);
        let by_output = outputs
            .iter()
            .zip(&steps)
            .map(|(o, step)| a.send_chunk_jones.div_ceil(s * o.channels) * step / max_step)
            .min()
            .unwrap_or(0);
        Ok(Self {
            spectra_per_heap: s,
            heaps_per_frame: by_input.min(by_output).max(1),
        })
    }
}

/// One output in this engine's `NAME:key=value,...` language.
fn output_spec(o: &KatOutput) -> Result<String, ConfigError> {
    let mut spec = format!(
        "{}:dst={},channels={},taps={},w_cutoff={},window={}",
        o.name,
        o.dst,
        o.channels,
        o.taps.unwrap_or(16),
        o.w_cutoff.unwrap_or(1.0),
        o.window_function.as_deref().unwrap_or("hann")
    );
    if o.dither.as_deref() == Some("none") {
        spec.push_str(",dither=off");
    }
    if o.narrowband {
        if let Some(w) = o.weight_pass.filter(|&w| w != DEFAULT_WEIGHT_PASS) {
            return Err(ConfigError(format!(
                "output {}: weight_pass={w} tunes katgpucbf's DDC filter design; this engine's \
                 DDC filter is a design of its own, so only katgpucbf's default, \
                 weight_pass={DEFAULT_WEIGHT_PASS}, is taken.",
                o.name
            )));
        }
        let d = o.decimation.expect("checked when parsed");
        // fgpu's default DDC length is 16 taps per subsampled sample: 16 D, or 32 D for a
        // VLBI (no-discard) output, which subsamples by 2D.
        let subsampling = if o.pass_bandwidth.is_some() { 2 * d } else { d };
        spec.push_str(&format!(
            ",decimation={d},centre={},ddc_taps={}",
            o.centre_frequency.expect("checked when parsed"),
            o.ddc_taps.unwrap_or(KATGPUCBF_DDC_TAPS_RATIO * subsampling)
        ));
        if let Some(hz) = o.pass_bandwidth {
            spec.push_str(&format!(",pass_bandwidth={hz}"));
        }
    }
    Ok(spec)
}

/// Receive and send cores, and the process's cores where those lie outside them.
fn affinity(
    a: &FgpuArgs,
    started_on: &CoreSet,
    flag: &mut impl FnMut(&str, String),
    notes: &mut Vec<String>,
) -> Result<Option<CoreSet>, ConfigError> {
    let cores = |name: &str, list: &[i64]| -> Result<Option<CoreSet>, ConfigError> {
        let bound: Vec<usize> = list
            .iter()
            .filter(|&&c| c >= 0)
            .map(|&c| c as usize)
            .collect();
        if bound.is_empty() {
            return Ok(None);
        }
        if bound.len() != list.len() {
            return Err(ConfigError(format!(
                "--{name} mixes cores and -1; this engine binds all its receive or send threads \
                 or none: give cores only, or -1 alone."
            )));
        }
        Ok(CoreSet::new(bound))
    };
    let recv = cores("recv-affinity", &a.recv_affinity)?;
    let send = cores("send-affinity", &[a.send_affinity])?;
    if let Some(r) = &recv {
        flag("src-affinity", r.to_string());
    }
    if let Some(s) = &send {
        flag("dst-affinity", s.to_string());
    }
    let stream: Vec<usize> = recv
        .iter()
        .chain(&send)
        .flat_map(|c| c.cores().to_vec())
        .collect();
    let Some(stream) = CoreSet::new(stream) else {
        return Ok(None);
    };
    if stream.is_subset(started_on) {
        return Ok(None);
    }
    flag("pair-affinity", started_on.to_string());
    flag("compute-affinity", started_on.to_string());
    notes.push(format!(
        "started on cores {started_on} (as fgpu's Python thread): the pairing and compute threads \
         stay there, the receive and send threads go to cores {stream}."
    ));
    let all = started_on.cores().iter().chain(stream.cores()).copied();
    Ok(CoreSet::new(all))
}

/// Flags that choose how fgpu moves data where this engine moves the same data another way.
fn transport_notes(a: &FgpuArgs) -> Vec<String> {
    let mut notes = Vec::new();
    if a.recv_ibv || a.send_ibv {
        notes.push(
            "--recv-ibv/--send-ibv (and their completion vectors): this engine receives and sends \
             the same SPEAD streams through kernel UDP sockets (GRO and GSO), not ibverbs."
                .into(),
        );
    }
    if a.use_vkgdr {
        notes.push(
            "--use-vkgdr: input chunks are assembled in pinned host memory and copied to the GPU."
                .into(),
        );
    }
    if a.use_peerdirect {
        notes.push(
            "--use-peerdirect: output is copied from the GPU and sent from host memory.".into(),
        );
    }
    if a.aiomonitor || a.aiomonitor_port.is_some() || a.aioconsole_port.is_some() {
        notes.push(
            "--aiomonitor and its ports: there is no Python event loop to inspect; nothing \
             listens on those ports."
                .into(),
        );
    }
    notes.push(format!(
        "--send-chunk-jones {} and --recv-chunk-samples {}: output leaves in frames of the \
         input, each at most that many samples and Jones vectors of any one output.",
        a.send_chunk_jones, a.recv_chunk_samples
    ));
    notes
}

//! Bringing the system under test up, for every command (and the qualification suite and the
//! live page to come): dsim and the engine reached by URL or launched here as child processes,
//! the engine's output the harness reads chosen (`--output`), the geometry settled from the
//! command line, that output's status and defaults, and the receiver started on its
//! destinations.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use placement::{Affinity, Policy};
use spead::transport::Endpoint;

use crate::band::Band;
use crate::control::{self, CounterNames, EngineGeometry, Tone};
use crate::feng_raw::OutputBits;
use crate::receive::{HeapSink, NoSink, ReceiveConfig, Receiver};
use crate::record::FilterDesign;
use crate::services::{self, ArraySpec, LocalSpec, Services};

/// Which of the engine's outputs a command receives and checks (every command that reads an
/// engine flattens this, through [`SystemArgs`]).
#[derive(Args, Clone, Debug, Default)]
pub struct OutputArgs {
    /// The engine output to receive and check, by the name the engine's /status gives it
    /// (`fengine --wideband NAME:...` or `--narrowband NAME:...`): the harness joins its
    /// destinations (unless --dst is given), sets its gains (/outputs/NAME/gains) and counts its
    /// skipped heaps. [default: the engine's only output, else the one named wideband]
    #[arg(long, value_name = "NAME", help_heading = "System")]
    pub output: Option<String>,
}

/// The system under test.
#[derive(Args, Clone, Debug)]
pub struct SystemArgs {
    /// Launch dsim and fengine here as child processes over loopback (instead of the URLs).
    #[arg(long, help_heading = "System")]
    pub local: bool,
    /// dsim's control URL (URL mode), e.g. http://dsim:8080; an array's, one per antenna,
    /// comma-separated. katcp://HOST:PORT reaches its katcp front, which reads its rate and sync
    /// time but sets no rate, signal or faults (max-rate, qualify and soak's rate steps need HTTP).
    #[arg(long, env = "HARNESS_DSIM_URL", help_heading = "System")]
    pub dsim_url: Option<String>,
    /// The engine's control URL (URL mode), e.g. http://fengine:8080; an array's, one per
    /// antenna, comma-separated, in feng_id order.
    /// katcp://HOST:PORT reaches an engine's katcp front (katgpucbf's fgpu, or this project's
    /// with --katcp): its gains, delays and sensors, its counters from --engine-metrics-url.
    #[arg(long, env = "HARNESS_ENGINE_URL", help_heading = "System")]
    pub engine_url: Option<String>,
    /// Where the engine's Prometheus metrics are, when --engine-url is katcp's: katgpucbf's
    /// --prometheus-port (http://HOST:PORT), or this project's engine's HTTP front. An array's,
    /// comma-separated as --engine-url.
    #[arg(long, env = "HARNESS_ENGINE_METRICS_URL", help_heading = "System")]
    pub engine_metrics_url: Option<String>,
    /// An array of N antennas (watch, max-rate): N engines (feng_id 0..N-1, array size N) send
    /// to the same output substreams, and their heaps are told apart by feng_id, each engine
    /// checked on its own and its heap counters against katgpucbf's rule. With --local, N dsims
    /// (digitiser ids 0..N-1, noise seeds --seed + i, one sync time) and N engines are launched;
    /// by URL, --dsim-url and --engine-url list N each. Default: one engine, whose feng_id is not
    /// looked at (several URLs: as many engines).
    #[arg(long, value_name = "N", help_heading = "System")]
    pub engines: Option<usize>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Engine output substreams to join, ADDR[+N]:PORT (N+1 consecutive addresses, multicast or
    /// unicast; the engine's --dst). In URL mode the default is the destinations the engine's
    /// /status gives the output (--output), and this is needed only where the status cannot be
    /// read; with --local the default is 127.0.0.1+(substreams-1) on a free port.
    #[arg(long, help_heading = "System")]
    pub dst: Option<String>,
    /// Interface address to join multicast groups on.
    #[arg(long, help_heading = "System")]
    pub interface: Option<Ipv4Addr>,
    /// Channels n. Default: the engine's /status in URL mode, 1024 with --local.
    #[arg(long, help_heading = "System")]
    pub channels: Option<usize>,
    /// PFB taps (for the response theory and gap prediction). Default: engine's /status, or 16.
    #[arg(long, help_heading = "System")]
    pub taps: Option<usize>,
    /// Spectra per output heap. Default: the engine's /status, else learned from the heap size.
    #[arg(long, help_heading = "System")]
    pub spectra_per_heap: Option<usize>,
    /// Bits per output component, 8 or 4 (one byte per complex value). With --local, passed to
    /// the engine as its --output-bits [default: the engine's, 8]. In URL mode the engine's
    /// /status says; this is used only where the status cannot be read, and a status that says
    /// otherwise is an error.
    #[arg(long, value_name = "8|4", help_heading = "System")]
    pub output_bits: Option<OutputBits>,
    /// Bits per input sample (full scale for the response's gain choice).
    #[arg(long, default_value_t = 10, help_heading = "System")]
    pub sample_bits: u32,
    /// ADC rate (sample/s per polarisation). With --local, dsim's starting rate [default: 1e8;
    /// max-rate: --high, so that dsim sizes its send threads for it]. In URL mode [default:
    /// dsim's /status].
    #[arg(long, help_heading = "System")]
    pub adc_rate: Option<f64>,
    /// Socket receive buffer per substream (bytes; capped by net.core.rmem_max).
    #[arg(long, default_value_t = 64 << 20, help_heading = "System")]
    pub rcvbuf: usize,
    /// Cores for the harness's receive threads (one per substream), as a list such as 2-3
    /// (thread i takes the i-th core, cycling) or auto (a physical core of its own for each while
    /// the host has enough); docs/placement.md. Default: wherever the kernel puts them.
    #[arg(long, value_name = "CORES|auto", help_heading = "System")]
    pub recv_affinity: Option<Affinity>,
    /// Real-time scheduling for the harness's receive threads: fifo:PRIORITY or rr:PRIORITY (1
    /// to 99), or other. Needs CAP_SYS_NICE; refused at start otherwise.
    #[arg(
        long,
        default_value = "other",
        value_name = "fifo:PRIO|rr:PRIO",
        help_heading = "System"
    )]
    pub realtime: Policy,
    /// Prometheus series of the engine's missing-input counter: words a series name must
    /// contain (comma-separated alternatives are summed). Against a katcp engine the default
    /// is katgpucbf's fgpu_input_missing_heaps.
    #[arg(long, default_value = "fengine missing input", help_heading = "System")]
    pub missing_metric: String,
    /// Prometheus series of the engine's skipped-output counter (output heaps not sent), as
    /// --missing-metric. Against a katcp engine the default is katgpucbf's
    /// fgpu_output_skipped_heaps.
    #[arg(
        long,
        default_value = "fengine skipped output, fengine send errors",
        help_heading = "System"
    )]
    pub skipped_metric: String,

    /// --local: output substreams (the engine's --dst gets ADDR+(substreams-1)).
    #[arg(long, default_value_t = 4, help_heading = "Local processes")]
    pub substreams: usize,
    /// --local: engine backend (cpu, cuda, null).
    #[arg(long, default_value = "cpu", help_heading = "Local processes")]
    pub backend: String,
    /// --local: the dsim binary [default: next to harness, else on PATH].
    #[arg(long, help_heading = "Local processes")]
    pub dsim_bin: Option<PathBuf>,
    /// --local: the fengine binary [default: next to harness, else on PATH].
    #[arg(long, help_heading = "Local processes")]
    pub fengine_bin: Option<PathBuf>,
    /// --local: extra dsim arguments, one string (quotes group), e.g. "--seed 3".
    #[arg(long, allow_hyphen_values = true, help_heading = "Local processes")]
    pub dsim_args: Option<String>,
    /// --local: extra fengine arguments, one string, e.g. "--sample-bits 10".
    #[arg(long, allow_hyphen_values = true, help_heading = "Local processes")]
    pub fengine_args: Option<String>,
    /// --local: dsim's tone, HZ:AMPL (amplitude a fraction of full scale). Default: the centre
    /// of channel n/4 (fs/8) at 0.5. With --engines, one for every antenna or a comma-separated
    /// list of one per antenna [default there: antenna i at the centre of channel
    /// n/4 + i n/(2N), so that each engine's tone has a channel of its own]. In URL mode, the
    /// tone dsim sends, where its /status cannot say (a dsim reached over katcp).
    #[arg(long, help_heading = "Local processes")]
    pub tone: Option<String>,
    /// dsim's Gaussian noise, fraction of full scale (--local: at start, else dsim's default
    /// 0.05; response: set for every step [default there: 0.001]).
    #[arg(long, help_heading = "Local processes")]
    pub noise: Option<f64>,
    /// --local: dsim's random seed.
    #[arg(long, help_heading = "Local processes")]
    pub seed: Option<u64>,
    /// --local: loopback addresses per polarisation from dsim to fengine (127.0.0.1+N-1, one
    /// port). Heap k goes to address k mod N, and fengine's receive threads (one per 2 GB/s of
    /// input, at most one per address) each take their share of them.
    #[arg(long, default_value_t = 1, help_heading = "Local processes")]
    pub input_addresses: usize,
    /// --local: seconds each process may take to answer /status.
    #[arg(long, default_value_t = 120.0, help_heading = "Local processes")]
    pub startup_timeout: f64,
    /// --local: directory for the children's logs [default: OUT_DIR/logs, or a temp dir].
    #[arg(long, help_heading = "Local processes")]
    pub log_dir: Option<PathBuf>,
    /// --local with --engines: deal the engines out to this many GPUs, engine i on CUDA device
    /// i mod G [default: every engine on the device it picks, 0].
    #[arg(
        long,
        value_name = "G",
        requires = "engines",
        help_heading = "Local processes"
    )]
    pub gpus: Option<usize>,
    /// --local with --engines: the CUDA devices to deal the engines out to, comma-separated
    /// (engine i on the (i mod count)-th), instead of --gpus.
    #[arg(
        long,
        value_name = "ID,...",
        value_delimiter = ',',
        requires = "engines",
        conflicts_with = "gpus",
        help_heading = "Local processes"
    )]
    pub gpu_ids: Vec<usize>,
}

/// The control URLs of a comma-separated list, blanks dropped.
fn url_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect()
}

/// The array the arguments ask for: None for one engine whose feng_id is not looked at,
/// Some(N) for N engines told apart. Checked before anything starts.
pub fn array_size(sys: &SystemArgs) -> Result<Option<usize>> {
    let urls = |u: &Option<String>| u.as_deref().map_or(0, |u| url_list(u).len());
    let (dsims, engines) = (urls(&sys.dsim_url), urls(&sys.engine_url));
    let n = match sys.engines {
        Some(0) => bail!("--engines must be at least 1: an array has one engine per antenna"),
        Some(n) => Some(n),
        None if !sys.local && engines.max(dsims) > 1 => Some(engines.max(dsims)),
        None => None,
    };
    if let (Some(n), false) = (n, sys.local) {
        if engines != n || dsims != n {
            bail!(
                "an array of {n} engines needs {n} engine URLs and {n} dsim URLs (comma-separated --engine-url and --dsim-url), not {engines} and {dsims}"
            );
        }
    }
    if sys.gpus == Some(0) {
        bail!("--gpus must be at least 1");
    }
    Ok(n)
}

/// Refuses an array for `command`, which measures one engine.
pub fn one_engine(sys: &SystemArgs, command: &str) -> Result<()> {
    if array_size(sys)?.is_some() {
        bail!("{command} measures one engine: leave out --engines and give one dsim and one engine URL");
    }
    Ok(())
}

/// The tone of each of an array's `antennas` at `rate` with `channels`: from --tone (one for
/// all, or one per antenna), else antenna i at the centre of channel n/4 + i n/(2N).
pub fn array_tones(
    tone: Option<&str>,
    antennas: usize,
    rate: f64,
    channels: usize,
) -> Result<Vec<Tone>> {
    match tone {
        Some(t) => {
            let tones = t.split(',').map(parse_tone).collect::<Result<Vec<_>>>()?;
            match tones.len() {
                1 => Ok(vec![tones[0]; antennas]),
                n if n == antennas => Ok(tones),
                n => bail!(
                    "--tone lists {n} tones for {antennas} antennas: give one, or one per antenna"
                ),
            }
        }
        None => Ok((0..antennas)
            .map(|i| {
                let channel = channels / 4 + i * channels / (2 * antennas);
                Tone {
                    frequency: channel as f64 * rate / (2 * channels) as f64,
                    amplitude: 0.5,
                }
            })
            .collect()),
    }
}

/// Geometry settled from the command line, the engine's status and defaults.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub channels: usize,
    pub taps: usize,
    pub spectra_per_heap: Option<usize>,
    /// The engine's PFB filter design, from its /status (the default design until it says).
    pub filter: FilterDesign,
    /// The engine's output format, from its /status (with --local, what it was told).
    pub bits: OutputBits,
    /// The frequencies the output's channels cover, from its kind (wideband until the engine
    /// says otherwise).
    pub band: Band,
}

/// The engine output the harness reads, and the engine's others.
#[derive(Clone, Debug, PartialEq)]
pub struct ChosenOutput {
    pub name: String,
    /// Every output the engine has, by name (the chosen one among them).
    pub outputs: Vec<String>,
}

/// A running system and the receiver on its output.
pub struct Setup {
    pub services: Services,
    pub rx: Receiver,
    pub geometry: Geometry,
    /// dsim's ADC rate (sample/s).
    pub adc_rate: Option<f64>,
    /// dsim's tone (antenna 0's in an array).
    pub tone: Option<Tone>,
    /// Each antenna's tone (antenna 0 alone without an array).
    pub tones: Vec<Option<Tone>>,
    /// The engines told apart by feng_id (None: one engine, its feng_id not looked at).
    pub array: Option<usize>,
    pub backend: String,
    /// Launched here (--local), rather than reached by URL.
    pub local: bool,
    /// The engine's output the harness reads (None when the engine's status could not be read).
    pub output: Option<ChosenOutput>,
}

impl Setup {
    /// The name of the output the harness reads, when known.
    pub fn output_name(&self) -> Option<&str> {
        self.output.as_ref().map(|o| o.name.as_str())
    }

    /// The output's name where it tells it apart: when the engine has several outputs.
    pub fn output_label(&self) -> Option<&str> {
        self.output
            .as_ref()
            .filter(|o| o.outputs.len() > 1)
            .map(|o| o.name.as_str())
    }
}

pub fn parse_tone(s: &str) -> Result<Tone> {
    let (f, a) = s.split_once(':').unwrap_or((s, "0.5"));
    Ok(Tone {
        frequency: f
            .trim()
            .parse()
            .with_context(|| format!("tone frequency in '{s}'"))?,
        amplitude: a
            .trim()
            .parse()
            .with_context(|| format!("tone amplitude in '{s}'"))?,
    })
}

pub fn counter_names(sys: &SystemArgs) -> CounterNames {
    CounterNames {
        missing_input: sys.missing_metric.clone(),
        skipped_output: sys.skipped_metric.clone(),
    }
}

/// Brings the system up: by URL, or launched here (`backend` overrides --backend). `sink` gets
/// the geometry and the substream count; None means only heaps are counted (no payload copy).
pub fn setup(
    sys: &SystemArgs,
    backend: &str,
    urls: Option<(&str, &str)>,
    out_dir: Option<&Path>,
    sink: impl FnOnce(&Geometry, usize) -> Option<Arc<dyn HeapSink>>,
) -> Result<Setup> {
    let array = array_size(sys)?;
    if sys.local {
        let channels = sys.channels.unwrap_or(1024);
        let mut geometry = Geometry {
            channels,
            taps: sys.taps.unwrap_or(16),
            spectra_per_heap: sys.spectra_per_heap,
            filter: FilterDesign::default(),
            // The receiver starts before the engine does: with the format the engine is told.
            bits: sys.output_bits.unwrap_or_default(),
            // The engine launched here has one output, --dst's, named wideband.
            band: Band::Wideband,
        };
        if sys.substreams == 0 {
            bail!("--substreams must be at least 1");
        }
        let dst: Endpoint = match &sys.dst {
            Some(d) => d.parse().map_err(anyhow::Error::msg)?,
            None => format!("127.0.0.1+{}:0", sys.substreams - 1)
                .parse()
                .map_err(anyhow::Error::msg)?,
        };
        let rate = sys.adc_rate.unwrap_or(100e6);
        let tones = match array {
            None => vec![match &sys.tone {
                Some(t) => parse_tone(t)?,
                None => Tone {
                    frequency: rate / 8.0,
                    amplitude: 0.5,
                },
            }],
            Some(n) => array_tones(sys.tone.as_deref(), n, rate, channels)?,
        };
        let tone = tones[0];
        let rx = start_receiver(
            sys,
            &dst,
            &geometry,
            array,
            sink(&geometry, dst.addrs.len()),
        )?;
        let log_dir = sys.log_dir.clone().unwrap_or_else(|| match out_dir {
            Some(d) => d.join("logs"),
            None => std::env::temp_dir().join(format!("harness-logs-{}", std::process::id())),
        });
        let spec = LocalSpec {
            dsim_bin: sys
                .dsim_bin
                .clone()
                .unwrap_or_else(|| services::sibling_binary("dsim")),
            fengine_bin: sys
                .fengine_bin
                .clone()
                .unwrap_or_else(|| services::sibling_binary("fengine")),
            dsim_args: services::split_args(sys.dsim_args.as_deref().unwrap_or("")),
            fengine_args: services::split_args(sys.fengine_args.as_deref().unwrap_or("")),
            backend: backend.to_string(),
            channels,
            taps: geometry.taps,
            spectra_per_heap: sys.spectra_per_heap,
            output_bits: sys.output_bits.map(OutputBits::bits),
            rate,
            tone: Some(tone),
            noise: sys.noise,
            seed: sys.seed,
            input_addresses: sys.input_addresses.clamp(1, 64),
            startup_timeout: Duration::from_secs_f64(sys.startup_timeout.max(0.1)),
            log_dir,
            array: array.map(|n| ArraySpec {
                antennas: n,
                gpus: match sys.gpus {
                    Some(g) => (0..g).collect(),
                    None => sys.gpu_ids.clone(),
                },
                tones: tones.iter().copied().map(Some).collect(),
                // Whole seconds: the same sync time for every dsim and engine.
                sync_time: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs() as f64),
            }),
        };
        let mut services = Services::launch(&spec, &rx.endpoint(), counter_names(sys))?;
        let chosen = choose(&mut services, sys.output.output.as_deref())
            .context("--local launches an engine of one output, named wideband")?;
        // --fengine-args may choose another filter design: the engine says which it runs.
        if let Some(c) = &chosen {
            geometry.filter = c.geometry.filter;
        }
        // ... or another output format, which the receiver, already started, cannot follow.
        check_output_bits(&services, geometry.bits)?;
        return Ok(Setup {
            services,
            rx,
            geometry,
            adc_rate: Some(rate),
            tone: Some(tone),
            tones: tones.into_iter().map(Some).collect(),
            array,
            backend: backend.to_string(),
            local: true,
            output: chosen.map(|c| c.output),
        });
    }
    let (dsim_url, engine_url) = match urls {
        Some(u) => u,
        None => (
            sys.dsim_url
                .as_deref()
                .context("URL mode needs --dsim-url (or use --local)")?,
            sys.engine_url
                .as_deref()
                .context("URL mode needs --engine-url (or use --local)")?,
        ),
    };
    let mut services = match array {
        None => Services::connect(
            dsim_url,
            engine_url,
            sys.engine_metrics_url.as_deref(),
            counter_names(sys),
        ),
        Some(_) if urls.is_some() => {
            bail!("an array is reached by --dsim-url and --engine-url lists only")
        }
        Some(_) => Services::connect_array(
            &url_list(dsim_url),
            &url_list(engine_url),
            &sys.engine_metrics_url
                .as_deref()
                .map(url_list)
                .unwrap_or_default(),
            counter_names(sys),
        )?,
    };
    let chosen = choose(&mut services, sys.output.output.as_deref())?;
    let eg = chosen.as_ref().map(|c| c.geometry);
    let status = services
        .dsim
        .status()
        .map_err(|e| tracing::warn!("dsim /status unreadable ({e:#})"))
        .ok();
    let bits = match eg {
        Some(g) => engine_bits(g.output_bits, services.engine.url())?,
        None => sys.output_bits.unwrap_or_default(),
    };
    if let Some(given) = sys.output_bits.filter(|&b| b != bits) {
        bail!(
            "the engine at {} sends {bits} output (its /status says), not the {given} of \
             --output-bits",
            services.engine.url()
        );
    }
    // Every engine of an array alike.
    check_output_bits(&services, bits)?;
    let geometry = Geometry {
        channels: sys
            .channels
            .or(eg.map(|g| g.channels))
            .context("--channels is needed (the engine's /status does not say)")?,
        taps: sys.taps.or(eg.map(|g| g.taps)).unwrap_or(16),
        spectra_per_heap: sys.spectra_per_heap.or(eg.map(|g| g.spectra_per_heap)),
        filter: eg.map(|g| g.filter).unwrap_or_default(),
        bits,
        band: eg.map(|g| g.band).unwrap_or_default(),
    };
    let dst = receive_endpoint(sys.dst.as_deref(), chosen.as_ref())?;
    let rx = start_receiver(
        sys,
        &dst,
        &geometry,
        array,
        sink(&geometry, dst.addrs.len()),
    )?;
    // Each antenna's tone from its dsim (antenna 0's read above); antenna 0's from --tone where
    // dsim's status cannot be read.
    let given_tone = match (&status, array, sys.tone.as_deref()) {
        (None, None, Some(t)) => Some(parse_tone(t)?),
        _ => None,
    };
    let tones: Vec<Option<Tone>> = services
        .antennas
        .iter()
        .enumerate()
        .map(|(i, a)| match i {
            0 => status
                .as_ref()
                .and_then(|s| s.strongest_tone())
                .or(given_tone),
            _ => a.dsim.status().ok().and_then(|s| s.strongest_tone()),
        })
        .collect();
    let adc_rate = sys
        .adc_rate
        .or(status.as_ref().map(|s| s.rate))
        .or(eg.map(|g| g.adc_sample_rate))
        // A dsim over katcp has no status, but a sensor of its rate.
        .or_else(|| services.dsim.adc_rate().ok());
    Ok(Setup {
        services,
        rx,
        geometry,
        adc_rate,
        tone: tones.first().copied().flatten(),
        tones,
        array,
        backend: backend.to_string(),
        local: false,
        output: chosen.map(|c| c.output),
    })
}

/// The output chosen of an engine, its geometry, and where it goes.
struct Chosen {
    output: ChosenOutput,
    geometry: EngineGeometry,
    /// Its destinations from the status (an error when they are not IPv4 ADDR:PORT).
    destinations: Result<Endpoint>,
}

/// Chooses the output the harness reads from antenna 0's engine's status
/// ([`control::choose_output`]) and tells every engine client. None (with a warning) when the
/// status cannot be read: then `wanted`, if given, is taken on trust.
fn choose(services: &mut Services, wanted: Option<&str>) -> Result<Option<Chosen>> {
    let status = match services.engine.status() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("engine /status unreadable ({e:#}); using the command line");
            if let Some(name) = wanted {
                services.select_output(name);
            }
            return Ok(None);
        }
    };
    let url = services.engine.url().to_string();
    let (name, out) =
        control::choose_output(&status, wanted).with_context(|| format!("the engine at {url}"))?;
    let chosen = Chosen {
        output: ChosenOutput {
            name: name.to_string(),
            outputs: status.outputs.keys().cloned().collect(),
        },
        geometry: EngineGeometry::of(&status, out)
            .with_context(|| format!("output {name} of the engine at {url}"))?,
        destinations: control::destinations(out)
            .with_context(|| format!("output {name} of the engine at {url}")),
    };
    services.select_output(name);
    Ok(Some(chosen))
}

/// Where the receiver listens in URL mode: `--dst` where given (with a warning when the engine
/// says the output goes elsewhere), else the chosen output's destinations.
fn receive_endpoint(dst: Option<&str>, chosen: Option<&Chosen>) -> Result<Endpoint> {
    let sent_to = chosen.map(|c| (c.output.name.as_str(), c.destinations.as_ref()));
    match (dst, sent_to) {
        (Some(d), sent_to) => {
            let given: Endpoint = d.parse()?;
            if let Some((name, Ok(e))) = sent_to {
                if e.addrs != given.addrs {
                    tracing::warn!(
                        "--dst {given} is not where output {name} goes ({e}, its /status says); \
                         receiving --dst as given"
                    );
                }
            }
            Ok(given)
        }
        (None, Some((_, Ok(e)))) => Ok(e.clone()),
        (None, Some((_, Err(e)))) => bail!("{e:#}: give --dst"),
        (None, None) => bail!(
            "URL mode needs --dst, the engine's output ADDR[+N]:PORT, where the engine's /status \
             (which names it) cannot be read"
        ),
    }
}

/// The output format an engine's /status names, or an error that says the harness cannot read it.
fn engine_bits(bits: u32, url: &str) -> Result<OutputBits> {
    OutputBits::from_bits(bits).with_context(|| {
        format!(
            "the engine at {url} sends {bits}-bit output, which the harness cannot read (8 or 4)"
        )
    })
}

/// Checks that every engine whose /status can be read sends the `bits` output the harness reads.
fn check_output_bits(services: &Services, bits: OutputBits) -> Result<()> {
    for a in &services.antennas {
        let Ok(g) = a.engine.geometry() else { continue };
        let sent = engine_bits(g.output_bits, a.engine.url())?;
        if sent != bits {
            bail!(
                "the engine at {} sends {sent} output, but the harness reads {bits}: give it \
                 --output-bits {} (with --local it passes it on to the engine; leave it out of \
                 --fengine-args)",
                a.engine.url(),
                sent.bits()
            );
        }
    }
    Ok(())
}

pub fn start_receiver(
    sys: &SystemArgs,
    dst: &Endpoint,
    g: &Geometry,
    array: Option<usize>,
    sink: Option<Arc<dyn HeapSink>>,
) -> Result<Receiver> {
    let mut cfg = ReceiveConfig::new(dst.addrs.clone(), g.channels);
    cfg.decimation = g.band.decimation();
    cfg.array = array;
    cfg.payload = sink.is_some();
    let sink = sink.unwrap_or_else(|| Arc::new(NoSink));
    cfg.spectra_per_heap = g.spectra_per_heap;
    cfg.bits = g.bits;
    cfg.interface = sys.interface;
    cfg.buffer_bytes = sys.rcvbuf;
    cfg.affinity = sys.recv_affinity.clone();
    cfg.realtime = sys.realtime;
    Ok(Receiver::start(&cfg, sink)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--recv-affinity` and `--realtime` parse as every receiving command takes them; a bad
    /// list or policy is clap's error with the placement crate's sentence.
    #[test]
    fn placement_flags_parse_and_refuse_bad_values() {
        #[derive(clap::Parser)]
        struct Line {
            #[command(flatten)]
            system: SystemArgs,
        }
        let parse = |args: &[&str]| {
            <Line as clap::Parser>::try_parse_from(
                std::iter::once("harness").chain(args.iter().copied()),
            )
            .map(|l| (l.system.recv_affinity, l.system.realtime))
        };
        let (a, p) = parse(&["--recv-affinity", "2-3", "--realtime", "rr:7"]).unwrap();
        assert_eq!(a, Some("2,3".parse().unwrap()));
        assert_eq!(p, Policy::Rr(7));
        assert_eq!(
            parse(&["--recv-affinity", "auto"]).unwrap().0,
            Some(Affinity::Auto)
        );
        assert_eq!(parse(&[]).unwrap(), (None, Policy::Other));
        let e = parse(&["--recv-affinity", "3-1"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is not a list of cores"), "{e}");
        let e = parse(&["--realtime", "fifo"]).err().unwrap().to_string();
        assert!(e.contains("is not a scheduling policy"), "{e}");
    }

    /// Output `fine` of an engine of two, going to `destinations`.
    fn chosen(destinations: Result<Endpoint>) -> Chosen {
        Chosen {
            output: ChosenOutput {
                name: "fine".into(),
                outputs: vec!["fine".into(), "wide".into()],
            },
            geometry: EngineGeometry {
                channels: 4096,
                taps: 16,
                spectra_per_heap: 256,
                adc_sample_rate: 1712e6,
                filter: FilterDesign::default(),
                output_bits: 8,
                band: Band::Wideband,
            },
            destinations,
        }
    }

    /// URL mode binds the chosen output's destinations; --dst, where given, wins; without the
    /// engine's status --dst is needed.
    #[test]
    fn the_receiver_binds_the_chosen_outputs_destinations() {
        let e: Endpoint = "239.10.2.0+3:7148".parse().unwrap();
        let c = chosen(Ok(e.clone()));
        assert_eq!(receive_endpoint(None, Some(&c)).unwrap().addrs, e.addrs);
        let given = receive_endpoint(Some("127.0.0.1:7150"), Some(&c)).unwrap();
        assert_eq!(given.to_string(), "127.0.0.1:7150");
        let given = receive_endpoint(Some("127.0.0.1+1:7150"), None).unwrap();
        assert_eq!(given.addrs.len(), 2);
        let err = receive_endpoint(None, None).unwrap_err().to_string();
        assert!(err.contains("needs --dst"), "{err}");
        let c = chosen(Err(anyhow::anyhow!(
            "output fine: destination \"x\" is not IPv4"
        )));
        let err = receive_endpoint(None, Some(&c)).unwrap_err().to_string();
        assert!(
            err.contains("not IPv4") && err.contains("give --dst"),
            "{err}"
        );
    }
}

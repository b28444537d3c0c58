//! The system under test, reached two ways: running services by URL (inside compose), or dsim
//! and fengine launched here as child processes over loopback (for hosts without Docker).
//! Either way it may be an array: N antennas, each a dsim and an engine, the engines sending to
//! the same output substreams.
//!
//! Children get their own process group (a terminal's Ctrl-C reaches only the harness, which then
//! stops them in order) and a parent-death signal (they die with the harness even if it is
//! killed outright). Their output goes to log files, whose tail is shown when one fails.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use spead::transport::Endpoint;

use crate::control::{CounterNames, Dsim, Engine, Tone};
use crate::signals;

/// How to launch dsim and fengine locally.
#[derive(Clone, Debug)]
pub struct LocalSpec {
    pub dsim_bin: PathBuf,
    pub fengine_bin: PathBuf,
    /// Extra arguments appended to each command line.
    pub dsim_args: Vec<String>,
    pub fengine_args: Vec<String>,
    /// Engine backend: cpu, cuda or null.
    pub backend: String,
    pub channels: usize,
    pub taps: usize,
    pub spectra_per_heap: Option<usize>,
    /// Bits per output component the engine is told (`--output-bits`); None: its default.
    pub output_bits: Option<u32>,
    /// Initial ADC sample rate (sample/s per polarisation).
    pub rate: f64,
    pub tone: Option<Tone>,
    pub noise: Option<f64>,
    pub seed: Option<u64>,
    /// Loopback addresses per polarisation (127.0.0.1+N-1) from dsim to the engine.
    pub input_addresses: usize,
    /// How long each may take to answer `/status` (the CUDA backend compiles kernels first).
    pub startup_timeout: Duration,
    /// Where the children's logs go.
    pub log_dir: PathBuf,
    /// An array of antennas rather than one dsim and one engine.
    pub array: Option<ArraySpec>,
}

/// The antennas of a local array: antenna i is dsim i (digitiser id i, noise seed `seed` + i,
/// `tones[i]`) feeding engine i (`--feng-id i --array-size N`, GPU `gpus[i mod len]` when GPUs
/// are named), each pair on its own loopback ports, every engine sending to the same output.
#[derive(Clone, Debug)]
pub struct ArraySpec {
    pub antennas: usize,
    /// CUDA devices the engines are dealt out to; empty: the engines choose (device 0).
    pub gpus: Vec<usize>,
    /// Each antenna's tone (None: no tone).
    pub tones: Vec<Option<Tone>>,
    /// The one sync time (Unix s) of every dsim and engine.
    pub sync_time: f64,
}

/// One antenna: its dsim and its engine.
#[derive(Clone)]
pub struct Antenna {
    pub dsim: Dsim,
    pub engine: Engine,
}

/// dsim and the engine, and the children when launched here (stopped on drop).
pub struct Services {
    /// Antenna 0's dsim and engine (the only ones without an array).
    pub dsim: Dsim,
    pub engine: Engine,
    /// Every antenna, antenna 0 first (one without an array).
    pub antennas: Vec<Antenna>,
    children: Vec<Proc>,
}

struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Services {
    /// Services already running, by URL (the engine's metrics at `metrics_url` where its
    /// control URL is katcp's).
    pub fn connect(
        dsim_url: &str,
        engine_url: &str,
        metrics_url: Option<&str>,
        names: CounterNames,
    ) -> Self {
        Self::of(
            vec![Antenna {
                dsim: Dsim::new(dsim_url),
                engine: Engine::connect(engine_url, metrics_url, names),
            }],
            Vec::new(),
        )
    }

    /// An array's services already running, by URL: antenna i is `dsim_urls[i]` and
    /// `engine_urls[i]` (the same number of each, at least one), its metrics at
    /// `metrics_urls[i]` where given.
    pub fn connect_array(
        dsim_urls: &[String],
        engine_urls: &[String],
        metrics_urls: &[String],
        names: CounterNames,
    ) -> Result<Self> {
        if dsim_urls.len() != engine_urls.len() || dsim_urls.is_empty() {
            bail!(
                "an array needs one dsim URL per engine URL; given {} and {}",
                dsim_urls.len(),
                engine_urls.len()
            );
        }
        let antennas = dsim_urls
            .iter()
            .zip(engine_urls)
            .enumerate()
            .map(|(i, (d, e))| Antenna {
                dsim: Dsim::new(d),
                engine: Engine::connect(e, metrics_urls.get(i).map(String::as_str), names.clone()),
            })
            .collect();
        Ok(Self::of(antennas, Vec::new()))
    }

    fn of(antennas: Vec<Antenna>, children: Vec<Proc>) -> Self {
        Self {
            dsim: antennas[0].dsim.clone(),
            engine: antennas[0].engine.clone(),
            antennas,
            children,
        }
    }

    /// Launches fengine (sending to `dst`, where the harness already listens), waits for its
    /// control port, then dsim feeding it, and waits for that. An array launches every engine,
    /// waits for them all, then every dsim.
    pub fn launch(spec: &LocalSpec, dst: &Endpoint, names: CounterNames) -> Result<Self> {
        std::fs::create_dir_all(&spec.log_dir)
            .with_context(|| format!("creating {}", spec.log_dir.display()))?;
        let antennas = spec.array.as_ref().map_or(1, |a| a.antennas.max(1));
        let plans = (0..antennas)
            .map(|i| AntennaPlan::new(spec, dst, i))
            .collect::<Result<Vec<_>>>()?;
        let mut me = Self::of(
            plans
                .iter()
                .map(|p| Antenna {
                    dsim: Dsim::new(&p.dsim_ctl),
                    engine: Engine::new(&p.engine_ctl, names.clone()),
                })
                .collect(),
            Vec::new(),
        );
        let tag = format!("{}-{}", spec.backend, std::process::id());
        for p in &plans {
            let log = spec.log_dir.join(format!("{}-{tag}.log", p.engine_name));
            me.spawn(&p.engine_name, &spec.fengine_bin, &p.engine_args, &log)?;
        }
        for (p, a) in plans.iter().zip(me.antennas.clone()) {
            me.wait_ready(&p.engine_name, spec.startup_timeout, || {
                a.engine.status_json().map(|_| ())
            })?;
        }
        for p in &plans {
            let log = spec.log_dir.join(format!("{}-{tag}.log", p.dsim_name));
            me.spawn(&p.dsim_name, &spec.dsim_bin, &p.dsim_args, &log)?;
        }
        for (p, a) in plans.iter().zip(me.antennas.clone()) {
            me.wait_ready(&p.dsim_name, spec.startup_timeout, || {
                a.dsim.status_json().map(|_| ())
            })?;
        }
        Ok(me)
    }

    /// Every engine client reads output `name` from now on (its gains, its counters).
    pub fn select_output(&mut self, name: &str) {
        self.engine.select_output(name);
        for a in &mut self.antennas {
            a.engine.select_output(name);
        }
    }

    /// The processes whose CPU time a trial reports: the children launched here, and the harness.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.children
            .iter()
            .map(|p| (p.name.clone(), p.child.id()))
            .chain([("harness".to_string(), std::process::id())])
            .collect()
    }

    pub fn is_local(&self) -> bool {
        !self.children.is_empty()
    }

    fn spawn(&mut self, name: &str, bin: &Path, args: &[String], log: &Path) -> Result<()> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        tracing::info!("starting {} {}", bin.display(), args.join(" "));
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {} (is it built?)", bin.display()))?;
        self.children.push(Proc {
            name: name.into(),
            child,
            log: log.to_path_buf(),
        });
        Ok(())
    }

    fn wait_ready(
        &mut self,
        name: &str,
        timeout: Duration,
        probe: impl Fn() -> Result<()>,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            self.check_alive()?;
            match probe() {
                Ok(()) => {
                    tracing::info!("{name} ready after {:.1} s", start.elapsed().as_secs_f64());
                    return Ok(());
                }
                Err(e) if start.elapsed() > timeout => {
                    let log = self
                        .children
                        .iter()
                        .find(|p| p.name == name)
                        .map(|p| tail(&p.log))
                        .unwrap_or_default();
                    bail!("{name} did not answer within {timeout:?}: {e:#}\n{log}");
                }
                Err(_) => signals::sleep(Duration::from_millis(100))?,
            }
        }
    }

    /// Errors (with the log's tail) if a child has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for p in &mut self.children {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "{} exited ({status}); log {}:\n{}",
                    p.name,
                    p.log.display(),
                    tail(&p.log)
                );
            }
        }
        Ok(())
    }

    /// Stops the children: SIGTERM, then SIGKILL after 5 s. dsim first, so the engine does not
    /// see its input stop while it still sends.
    pub fn stop(&mut self) {
        for mut p in self.children.drain(..).rev() {
            if let Ok(None) = p.child.try_wait() {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(p.child.id() as libc::pid_t, libc::SIGTERM) };
                let end = Instant::now() + Duration::from_secs(5);
                while Instant::now() < end && matches!(p.child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if let Ok(None) = p.child.try_wait() {
                    let _ = p.child.kill();
                }
            }
            let _ = p.child.wait();
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One antenna's command lines and control addresses, each process on ports of its own.
struct AntennaPlan {
    engine_name: String,
    dsim_name: String,
    engine_args: Vec<String>,
    dsim_args: Vec<String>,
    engine_ctl: String,
    dsim_ctl: String,
}

impl AntennaPlan {
    /// Antenna `i` of `spec` (the one antenna, named plainly `fengine` and `dsim`, without an
    /// array).
    fn new(spec: &LocalSpec, dst: &Endpoint, i: usize) -> Result<Self> {
        let [pol0, pol1] = free_udp_ports()?;
        let [engine_ctl, dsim_ctl] = free_tcp_ports()?;
        let lo = Ipv4Addr::LOCALHOST;
        let addr = |port| SocketAddrV4::new(lo, port).to_string();
        let input = |port| match spec.input_addresses {
            0 | 1 => addr(port),
            n => format!("{lo}+{}:{port}", n - 1),
        };
        let mut engine_args = vec![
            "--src-pol0".into(),
            input(pol0),
            "--src-pol1".into(),
            input(pol1),
            "--dst".into(),
            dst.to_string(),
            "--channels".into(),
            spec.channels.to_string(),
            "--taps".into(),
            spec.taps.to_string(),
            "--adc-sample-rate".into(),
            spec.rate.to_string(),
            "--backend".into(),
            spec.backend.clone(),
            "--control".into(),
            addr(engine_ctl),
        ];
        if let Some(s) = spec.spectra_per_heap {
            engine_args.extend(["--spectra-per-heap".into(), s.to_string()]);
        }
        if let Some(b) = spec.output_bits {
            engine_args.extend(["--output-bits".into(), b.to_string()]);
        }
        let mut dsim_args = vec![
            "--pol0-dest".into(),
            input(pol0),
            "--pol1-dest".into(),
            input(pol1),
            "--rate".into(),
            spec.rate.to_string(),
            "--control".into(),
            addr(dsim_ctl),
        ];
        let (tone, seed) = match &spec.array {
            None => (spec.tone, spec.seed),
            Some(a) => {
                engine_args.extend([
                    "--feng-id".into(),
                    i.to_string(),
                    "--array-size".into(),
                    a.antennas.to_string(),
                    "--sync-time".into(),
                    a.sync_time.to_string(),
                ]);
                if !a.gpus.is_empty() {
                    engine_args.extend(["--gpu".into(), a.gpus[i % a.gpus.len()].to_string()]);
                }
                dsim_args.extend([
                    "--digitiser-id".into(),
                    i.to_string(),
                    "--sync-time".into(),
                    a.sync_time.to_string(),
                ]);
                // Independent noise per antenna.
                (
                    a.tones.get(i).copied().flatten(),
                    Some(spec.seed.unwrap_or(1).wrapping_add(i as u64)),
                )
            }
        };
        engine_args.extend(spec.fengine_args.iter().cloned());
        if let Some(t) = tone {
            dsim_args.extend(["--tone".into(), format!("{}:{}", t.frequency, t.amplitude)]);
        }
        if let Some(n) = spec.noise {
            dsim_args.extend(["--noise".into(), n.to_string()]);
        }
        if let Some(s) = seed {
            dsim_args.extend(["--seed".into(), s.to_string()]);
        }
        dsim_args.extend(spec.dsim_args.iter().cloned());
        let (engine_name, dsim_name) = match spec.array {
            None => ("fengine".to_string(), "dsim".to_string()),
            Some(_) => (format!("fengine-{i}"), format!("dsim-{i}")),
        };
        Ok(Self {
            engine_name,
            dsim_name,
            engine_args,
            dsim_args,
            engine_ctl: addr(engine_ctl),
            dsim_ctl: addr(dsim_ctl),
        })
    }
}

/// The last lines of a log file (for error messages).
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(20);
    lines[from..].join("\n")
}

/// `N` distinct free UDP ports of 127.0.0.1 (as [`held_ports`] picks them).
pub fn free_udp_ports<const N: usize>() -> Result<[u16; N]> {
    held_ports(
        || UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)),
        UdpSocket::local_addr,
    )
}

/// `N` distinct free TCP ports of 127.0.0.1 (as [`held_ports`] picks them).
pub fn free_tcp_ports<const N: usize>() -> Result<[u16; N]> {
    held_ports(
        || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)),
        TcpListener::local_addr,
    )
}

/// `N` ports from `bind`, each socket held until all are picked: two picks in a row may
/// otherwise get the same port back.
fn held_ports<S, const N: usize>(
    bind: impl Fn() -> std::io::Result<S>,
    addr: impl Fn(&S) -> std::io::Result<std::net::SocketAddr>,
) -> Result<[u16; N]> {
    let held = (0..N)
        .map(|_| bind())
        .collect::<std::io::Result<Vec<S>>>()?;
    let mut ports = [0; N];
    for (p, s) in ports.iter_mut().zip(&held) {
        *p = addr(s)?.port();
    }
    Ok(ports)
}

pub fn free_udp_port() -> Result<u16> {
    Ok(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

pub fn free_tcp_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// A binary next to the running harness (`target/<profile>/`), or on the PATH.
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let dir = exe.parent()?;
            // Test binaries live one level down, in deps/.
            [dir.join(name), dir.parent()?.join(name)]
                .into_iter()
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Splits a command-line fragment on whitespace, honouring single and double quotes.
pub fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_arguments() {
        assert_eq!(
            split_args(" --tone 1e8:0.5  --name 'a b' \"\" x"),
            vec!["--tone", "1e8:0.5", "--name", "a b", "", "x"]
        );
        assert!(split_args("   ").is_empty());
    }

    #[test]
    fn ports_are_free() {
        assert_ne!(free_udp_port().unwrap(), 0);
        assert_ne!(free_tcp_port().unwrap(), 0);
        let [a, b, c] = free_tcp_ports().unwrap();
        assert!(a != b && b != c && a != c && a != 0);
        let [a, b] = free_udp_ports().unwrap();
        assert!(a != b && a != 0);
    }

    /// A small local system of the given binaries.
    fn small_spec(dsim: &str, fengine: &str, startup: Duration, log_dir: PathBuf) -> LocalSpec {
        LocalSpec {
            dsim_bin: dsim.into(),
            fengine_bin: fengine.into(),
            dsim_args: vec![],
            fengine_args: vec![],
            backend: "cpu".into(),
            channels: 64,
            taps: 4,
            spectra_per_heap: None,
            output_bits: None,
            rate: 1e6,
            tone: None,
            noise: None,
            seed: None,
            input_addresses: 1,
            startup_timeout: startup,
            log_dir,
            array: None,
        }
    }

    #[test]
    fn a_missing_binary_is_an_error_not_a_hang() {
        let spec = small_spec(
            "/nonexistent/dsim",
            "/nonexistent/fengine",
            Duration::from_secs(1),
            std::env::temp_dir().join("harness-test-logs"),
        );
        let dst: Endpoint = "127.0.0.1:9".parse().unwrap();
        let err = Services::launch(&spec, &dst, CounterNames::default())
            .err()
            .expect("no such binary");
        assert!(
            format!("{err:#}").contains("/nonexistent/fengine"),
            "{err:#}"
        );
    }

    #[test]
    fn a_child_that_exits_is_reported_with_its_log() {
        let dir = std::env::temp_dir().join(format!("harness-test-{}", std::process::id()));
        // `sh -c` ignores the engine arguments; it prints and exits.
        let spec = small_spec("/bin/false", "/bin/sh", Duration::from_secs(5), dir.clone());
        let dst: Endpoint = "127.0.0.1:9".parse().unwrap();
        let err = Services::launch(&spec, &dst, CounterNames::default())
            .err()
            .expect("sh exits at once");
        assert!(format!("{err:#}").contains("fengine exited"), "{err:#}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

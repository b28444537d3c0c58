//! The processes under test: the engine and dsim as child processes (their binaries found or
//! built), started with a run's configuration, with their logs kept for a failure's message.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fgpu_api::engine::Status;

use crate::capture::Output;
use crate::client::Control;
use crate::setup::Setup;

/// A child process whose stderr is collected; killed (by its own pid) when dropped.
pub(crate) struct Proc {
    name: &'static str,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Proc {
    pub(crate) fn spawn(name: &'static str, mut cmd: Command) -> Self {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Self {
            name,
            child,
            log,
            reader: Some(reader),
        }
    }

    /// Waits for a log line containing `needle`; returns the text after it.
    pub(crate) fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        loop {
            if let Some(rest) = self
                .log
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| l.find(needle).map(|i| l[i + needle.len()..].to_string()))
            {
                return rest;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}) before logging {needle:?}", self.name);
            }
            assert!(
                Instant::now() < end,
                "{} did not log {needle:?} in time",
                self.name
            );
            // Short: a test may have to act within milliseconds of a line (tests/e2e/signals.rs).
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// `ADDR:PORT` from the `control listening on ADDR:PORT` log line.
    pub(crate) fn control_addr(&mut self) -> SocketAddr {
        let rest = self.wait_for("control listening on ", Duration::from_secs(60));
        let token = rest.split_whitespace().next().unwrap_or_default();
        token
            .parse()
            .unwrap_or_else(|_| panic!("{}: bad control address {token:?}", self.name))
    }

    /// Sends SIGTERM and waits (at most `timeout`) for the process to exit; its exit status.
    pub(crate) fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        // Directly, not by running `kill`: that would take milliseconds.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0, "kill(SIGTERM) of {} failed", self.child.id());
        let end = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the child") {
                return status;
            }
            assert!(
                Instant::now() < end,
                "{} still runs {timeout:?} after SIGTERM",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends the process `signal` (SIGSTOP and SIGCONT: a host that deschedules it).
    pub(crate) fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which it keeps until waited for.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill {pid} {signal}");
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!("---- last lines of {} ----", self.name);
            let tail = &log[log.len().saturating_sub(40)..];
            for l in tail {
                eprintln!("{l}");
            }
        }
    }
}

/// The engine binary: `FENGINE_E2E_BIN_DIR/fengine` when that is set (binaries copied to a host
/// without cargo, such as a GPU host fed by `scripts/gpu-checks.sh stage`), else the one cargo built for this test.
pub(crate) fn fengine_binary() -> PathBuf {
    match std::env::var_os("FENGINE_E2E_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("fengine"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_fengine")),
    }
}

fn target_dir_and_profile() -> (PathBuf, String) {
    let exe = fengine_binary();
    let profile_dir = exe.parent().expect("binary has a directory").to_path_buf();
    let profile = profile_dir
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("debug")
        .to_string();
    (profile_dir, profile)
}

/// The dsim binary of the same profile, built if needed.
pub(crate) fn dsim_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let (dir, profile) = target_dir_and_profile();
            let path = dir.join("dsim");
            let no_build = std::env::var_os("FENGINE_E2E_NO_BUILD").is_some()
                || std::env::var_os("FENGINE_E2E_BIN_DIR").is_some();
            if !no_build {
                let cargo = option_env!("CARGO").unwrap_or("cargo");
                let cargo_profile = if profile == "debug" { "dev" } else { &profile };
                let status = Command::new(cargo)
                    .args([
                        "build",
                        "--quiet",
                        "-p",
                        "dsim",
                        "--bin",
                        "dsim",
                        "--profile",
                    ])
                    .arg(cargo_profile)
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .status();
                match status {
                    Ok(s) if s.success() => {}
                    other => eprintln!("cargo build -p dsim: {other:?} (using what exists)"),
                }
            }
            assert!(
                path.exists(),
                "{} is missing: run `cargo build -p dsim` (same profile) first",
                path.display()
            );
            path
        })
        .clone()
}

/// `fengine run` with the setup's geometry, receive threads and backend: sources `srcs`, outputs
/// `outputs_args` (its --dst or --wideband arguments), control on a free loopback port, logs at
/// info.
pub(crate) fn engine_command(
    setup: &Setup,
    srcs: &[String; 2],
    max_delay: f64,
    outputs_args: &[String],
) -> Command {
    let mut cmd = Command::new(fengine_binary());
    cmd.args(["run", "--src-pol0", &srcs[0], "--src-pol1", &srcs[1]])
        .args(["--recv-threads", &setup.recv_threads.to_string()])
        .args(outputs_args)
        .args(["--channels", &setup.channels.to_string()])
        .args(["--taps", &setup.taps.to_string()])
        .args(["--spectra-per-heap", &setup.spectra_per_heap.to_string()])
        .args(["--heaps-per-frame", &setup.heaps_per_frame.to_string()])
        .args(["--heap-samples", &setup.heap_samples.to_string()])
        .args(["--sample-bits", &setup.sample_bits.to_string()])
        .args(["--adc-sample-rate", &setup.rate.to_string()])
        .args(["--max-delay", &max_delay.to_string()])
        .args(["--backend", &setup.backend])
        .args(["--control", "127.0.0.1:0"])
        // Loopback never refuses data: keep the sockets within the kernel's default caps.
        .args(["--socket-buffer", &(4 << 20).to_string()])
        .env("RUST_LOG", "info");
    cmd
}

/// The engine, a receiver for each of its outputs, and dsim once started.
pub(crate) struct System {
    setup: Setup,
    engine: Proc,
    pub engine_ctl: Control,
    /// Where dsim sends each polarisation (ADDR[+N]:PORT).
    pub sources: [String; 2],
    pub dsim: Option<Proc>,
    dsim_ctl: Option<Control>,
    /// The receiver of the engine's output (of its first, with several).
    pub out: Output,
    /// The receivers of the engine's other outputs, in the order given (empty with one).
    pub more_outputs: Vec<Output>,
}

/// One `--wideband NAME:dst=...,channels=N,gain=G` output of [`System::start_outputs`].
#[derive(Clone, Debug)]
pub(crate) struct WidebandOutput {
    pub name: &'static str,
    pub channels: usize,
    pub gain: f64,
}

impl System {
    /// Starts the engine (sources on free ports) and a receiver for its output.
    pub(crate) fn start(setup: Setup, gain: f64, max_delay: f64) -> Self {
        Self::start_with_env(setup, gain, max_delay, &[])
    }

    /// [`start`](Self::start) with extra environment variables for the engine.
    pub(crate) fn start_with_env(
        setup: Setup,
        gain: f64,
        max_delay: f64,
        env: &[(&str, &str)],
    ) -> Self {
        let out = Output::start();
        let args = [
            "--dst".to_string(),
            out.addr.to_string(),
            "--gain".into(),
            gain.to_string(),
        ];
        Self::launch(setup, max_delay, env, &args, vec![out])
    }

    /// Starts the engine with several wideband outputs (`--wideband`, the setup's taps, bits and
    /// spectra per heap, each output its own channels and gain), each to a receiver of its own:
    /// the first's is [`out`](Self::out), the others' [`more_outputs`](Self::more_outputs).
    pub(crate) fn start_outputs(setup: Setup, outputs: &[WidebandOutput], max_delay: f64) -> Self {
        let receivers: Vec<Output> = outputs.iter().map(|_| Output::start()).collect();
        let args: Vec<String> = outputs
            .iter()
            .zip(&receivers)
            .flat_map(|(o, r)| {
                [
                    "--wideband".to_string(),
                    format!(
                        "{}:dst={},channels={},gain={}",
                        o.name, r.addr, o.channels, o.gain
                    ),
                ]
            })
            .collect();
        Self::launch(setup, max_delay, &[], &args, receivers)
    }

    /// Starts the engine with `outputs_args` (its --dst or --wideband outputs), whose receivers
    /// are `receivers` (at least one).
    fn launch(
        setup: Setup,
        max_delay: f64,
        env: &[(&str, &str)],
        outputs_args: &[String],
        mut receivers: Vec<Output>,
    ) -> Self {
        assert!(!receivers.is_empty(), "an engine has at least one output");
        let out = receivers.remove(0);
        // One address: port 0 and the engine reports the port. Several: one free port for all.
        let src = |_| {
            if setup.addresses == 1 {
                "127.0.0.1:0".to_string()
            } else {
                let port = std::net::UdpSocket::bind("127.0.0.1:0")
                    .and_then(|s| s.local_addr())
                    .expect("a free port")
                    .port();
                format!("127.0.0.1+{}:{port}", setup.addresses - 1)
            }
        };
        let srcs: [String; 2] = [0, 1].map(src);
        let mut cmd = engine_command(&setup, &srcs, max_delay, outputs_args);
        cmd.envs(env.iter().copied());
        let mut engine = Proc::spawn("fengine", cmd);
        let engine_ctl = Control::new(engine.control_addr());
        let status = engine_ctl.engine_status();
        let sources = [0, 1].map(|p| {
            if setup.addresses > 1 {
                return srcs[p].clone();
            }
            // Port 0 asked for: the engine's status says which port the socket got.
            status.input.pols[p]
                .sources
                .first()
                .unwrap_or_else(|| panic!("no bound source address of pol {p}: {status:?}"))
                .clone()
        });
        Self {
            setup,
            engine,
            engine_ctl,
            sources,
            dsim: None,
            dsim_ctl: None,
            out,
            more_outputs: receivers,
        }
    }

    /// The engine with a gain that puts a 0.25 full-scale tone at 64, and dsim sending that tone
    /// in channel n/3; returns once output flows.
    pub(crate) fn with_tone(setup: &Setup) -> Self {
        let gain = 64.0 / setup.tone_response(0.25);
        let mut sys = Self::start(setup.clone(), gain, 1e-6);
        sys.start_dsim(&setup.tone_args(&[setup.channels / 3], 0.25));
        sys.out.wait_count(4, Duration::from_secs(60));
        sys
    }

    /// Every output's receiver, in the order the outputs were given.
    pub(crate) fn outputs(&self) -> impl Iterator<Item = &Output> {
        std::iter::once(&self.out).chain(&self.more_outputs)
    }

    /// dsim's latest timestamp (from its status).
    pub(crate) fn dsim_timestamp(&self) -> u64 {
        self.dsim_ctl().get_json("/status")["timestamp"]
            .as_u64()
            .expect("dsim's status has its timestamp")
    }

    /// Starts dsim sending to the engine, with extra arguments.
    pub(crate) fn start_dsim(&mut self, extra: &[String]) {
        let mut p = self.spawn_dsim(&self.sources, extra);
        self.dsim_ctl = Some(Control::new(p.control_addr()));
        self.dsim = Some(p);
    }

    /// A dsim of its own for polarisation `pol` alone, as a digitiser per polarisation: its
    /// other polarisation goes to a port nobody reads. The caller owns it (two such share a
    /// clock when given the same --sync-time).
    pub(crate) fn start_dsim_for(&self, pol: usize, extra: &[String]) -> Proc {
        let nowhere = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port")
            .to_string();
        let mut dests = [nowhere.clone(), nowhere];
        dests[pol] = self.sources[pol].clone();
        self.spawn_dsim(&dests, extra)
    }

    fn spawn_dsim(&self, dests: &[String; 2], extra: &[String]) -> Proc {
        let s = &self.setup;
        let mut cmd = Command::new(dsim_binary());
        cmd.args(["--pol0-dest", &dests[0], "--pol1-dest", &dests[1]])
            .args(["--rate", &s.rate.to_string()])
            .args(["--heap-samples", &s.heap_samples.to_string()])
            .args(["--sample-bits", &s.sample_bits.to_string()])
            .args(["--control", "127.0.0.1:0"])
            .args(["--threads", "1"])
            .args(["--buffer-heaps", "1024"])
            .args(extra)
            .env("RUST_LOG", "info");
        Proc::spawn("dsim", cmd)
    }

    /// dsim's control API (dsim must be running).
    pub(crate) fn dsim_ctl(&self) -> &Control {
        self.dsim_ctl.as_ref().expect("dsim is running")
    }

    pub(crate) fn engine_status(&self) -> Status {
        self.engine_ctl.engine_status()
    }

    /// Checks the engine is alive and healthy.
    pub(crate) fn assert_engine_healthy(&mut self) {
        assert!(self.engine.alive(), "the engine exited");
        let (code, body) = self.engine_ctl.send("GET", "/health", None);
        assert_eq!(code, 200, "{body}");
    }
}

//! Toolkit of the container acceptance tests (tests/tests/*.rs): the locally built images
//! `fgpu/dsim`, `fgpu/fengine` and `fgpu/harness` (`:latest`, from docker/build.sh) started with
//! testcontainers on a network of their own, the harness run in a container, and HTTP to the
//! control APIs through their published ports on 127.0.0.1.
//!
//! Rules every test follows, through [`Session::start`]:
//! - Images missing (or no Docker): the test prints `skipped: ...` and passes, unless `CI` is set,
//!   where that is a failure. `FGPU_ACCEPTANCE=skip` (scripts/test --no-docker) skips always.
//! - Nothing is pulled: the images are checked to be present before any container is created
//!   (testcontainers pulls only when the daemon says an image is missing).
//! - One test at a time, across processes (a file lock): the pipeline needs the 2 cores.
//! - Containers and networks carry the label `fgpu-acceptance`; they are removed when the test
//!   ends, pass or fail, and leftovers of a killed run are removed before the next test starts.

pub mod docker_proxy;

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use testcontainers::core::ContainerPort;
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt};

/// The images under test, as docker/build.sh tags them.
pub const IMAGES: [(&str, &str); 3] = [
    ("fgpu/dsim", "latest"),
    ("fgpu/fengine", "latest"),
    ("fgpu/harness", "latest"),
];

/// Label on every container and network the tests make.
pub const LABEL: &str = "fgpu-acceptance";

/// The demo's CPU configuration (compose.yaml + compose.cpu.yaml), used by every test: a rate the
/// CPU backend sustains on a 2-core host with dsim, the harness and the test itself beside it.
pub const RATE: f64 = 16e6;
/// The tone: the centre of channel CHANNELS/4 (RATE/8).
pub const TONE_HZ: f64 = 2e6;
pub const CHANNELS: u64 = 4096;
pub const TAPS: u64 = 16;
pub const SPECTRA_PER_HEAP: u64 = 256;
pub const HEAP_SAMPLES: u64 = 4096;
pub const POL0_SRC: &str = "239.10.0.0+3:7148";
pub const POL1_SRC: &str = "239.10.0.4+3:7148";
pub const OUTPUT: &str = "239.10.1.0+15:7148";
pub const SUBSTREAMS: usize = 16;
/// Control port inside every container.
pub const CONTROL_PORT: u16 = 8080;

/// Timestamp step between consecutive output heaps of a substream (ADC samples).
pub const OUTPUT_STEP: u64 = SPECTRA_PER_HEAP * 2 * CHANNELS;

/// True when the CI variable says this is a CI run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// DOCKER_HOST as the process had it, before the shim replaced it for testcontainers.
static ORIGINAL_DOCKER_HOST: OnceLock<Option<String>> = OnceLock::new();

/// The docker CLI, talking to the daemon directly (not through the shim).
pub fn docker(args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("docker");
    cmd.args(args);
    match ORIGINAL_DOCKER_HOST.get() {
        Some(Some(h)) => {
            cmd.env("DOCKER_HOST", h);
        }
        Some(None) => {
            cmd.env_remove("DOCKER_HOST");
        }
        None => {}
    }
    let out = cmd
        .output()
        .with_context(|| format!("running docker {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "docker {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why the tests cannot run here, if they cannot: no Docker, or images not built.
fn missing_prerequisite() -> Option<String> {
    if let Err(e) = docker(&["version", "--format", "{{.Server.Version}}"]) {
        return Some(format!("Docker is not usable ({e:#})"));
    }
    let missing: Vec<String> = IMAGES
        .iter()
        .map(|(n, t)| format!("{n}:{t}"))
        .filter(|i| docker(&["image", "inspect", "--format", "{{.Id}}", i]).is_err())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "images not built: {} (docker/build.sh builds them)",
            missing.join(", ")
        )
    })
}

/// Points testcontainers at the daemon, through the API version shim when the daemon is older
/// than testcontainers' client (see [`docker_proxy`]). Once per process.
fn connect_testcontainers() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let original = std::env::var("DOCKER_HOST").ok();
        ORIGINAL_DOCKER_HOST.get_or_init(|| original.clone());
        let upstream = match original.as_deref() {
            None => PathBuf::from("/var/run/docker.sock"),
            Some(h) => match h.strip_prefix("unix://") {
                Some(p) => PathBuf::from(p),
                // A TCP or SSH daemon: used as it is (it has to speak testcontainers' API).
                None => return Ok(()),
            },
        };
        let daemon = docker_proxy::daemon_api_version(&upstream).map_err(|e| format!("{e:#}"))?;
        if daemon >= docker_proxy::CLIENT_API {
            return Ok(());
        }
        let sock = std::env::temp_dir().join(format!(
            "fgpu-acceptance-docker-{}.sock",
            std::process::id()
        ));
        docker_proxy::spawn(&sock, upstream, daemon).map_err(|e| format!("{e:#}"))?;
        eprintln!(
            "note: the Docker daemon speaks API {}.{}, testcontainers {}.{}: requests go through \
             a version shim at {}",
            daemon.0,
            daemon.1,
            docker_proxy::CLIENT_API.0,
            docker_proxy::CLIENT_API.1,
            sock.display()
        );
        // Read once, when testcontainers makes its client (after this).
        std::env::set_var("DOCKER_HOST", format!("unix://{}", sock.display()));
        Ok(())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Removes containers and networks left by a run that was killed.
fn remove_leftovers() {
    let filter = format!("label={LABEL}");
    if let Ok(ids) = docker(&["ps", "-aq", "--filter", &filter]) {
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            eprintln!("removing {} leftover test containers", ids.len());
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            let _ = docker(&args);
        }
    }
    if let Ok(ids) = docker(&["network", "ls", "-q", "--filter", &filter]) {
        for id in ids.split_whitespace() {
            let _ = docker(&["network", "rm", id]);
        }
    }
}

/// One test's hold on the machine: the cross-process lock and a unique name prefix.
pub struct Session {
    pub test: String,
    /// Prefix of every container and network name of this test.
    pub prefix: String,
    started: Instant,
    _lock: File,
}

impl Session {
    /// Starts a test, or returns None (after printing `skipped: ...`) when it must be skipped.
    /// Panics where a skip is not allowed (CI set and the images missing).
    pub fn start(test: &str) -> Option<Session> {
        if std::env::var("FGPU_ACCEPTANCE").is_ok_and(|v| v == "skip") {
            println!("skipped: {test}: FGPU_ACCEPTANCE=skip (scripts/test --no-docker)");
            return None;
        }
        if let Some(why) = missing_prerequisite() {
            if in_ci() {
                panic!("{test}: {why}; CI is set, so the container tests must run");
            }
            println!("skipped: {test}: {why}");
            return None;
        }
        let lock = lock_machine().expect("taking the acceptance test lock");
        remove_leftovers();
        connect_testcontainers().expect("connecting testcontainers to the Docker daemon");
        let prefix = format!("fgpu-at-{}-{test}", std::process::id()).replace('_', "-");
        eprintln!("== {test}: starting ({prefix})");
        Some(Session {
            test: test.into(),
            prefix,
            started: Instant::now(),
            _lock: lock,
        })
    }

    /// A user-defined bridge network for this test, MTU 9000 like compose.yaml's (the engine's
    /// 8 KiB packets go unfragmented).
    pub fn network(&self) -> Result<Network> {
        let name = format!("{}-net", self.prefix);
        docker(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--label",
            LABEL,
            "-o",
            "com.docker.network.driver.mtu=9000",
            &name,
        ])?;
        Ok(Network { name })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        eprintln!(
            "== {}: done in {:.1} s",
            self.test,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// One test at a time on this machine, whichever process runs it.
#[allow(clippy::incompatible_msrv)] // File::lock: the toolchain here is newer than the MSRV
fn lock_machine() -> Result<File> {
    let path = std::env::temp_dir().join("fgpu-acceptance.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if f.try_lock().is_err() {
        eprintln!(
            "waiting for another acceptance test run ({})",
            path.display()
        );
        f.lock()?;
    }
    Ok(f)
}

/// A Docker network, removed on drop (after the containers on it, which drop first).
pub struct Network {
    pub name: String,
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Err(e) = docker(&["network", "rm", &self.name]) {
            eprintln!("warning: {e:#}");
        }
    }
}

fn request(
    img: &str,
    net: &Network,
    container_name: &str,
    cmd: Vec<String>,
) -> testcontainers::core::ContainerRequest<GenericImage> {
    GenericImage::new(img, "latest")
        .with_cmd(cmd)
        .with_network(net.name.clone())
        .with_container_name(container_name)
        .with_label(LABEL, "1")
        .with_env_var("RUST_LOG", "info")
        .with_startup_timeout(Duration::from_secs(60))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// HTTP to a control API from the host, with timeouts and without treating 4xx as an error.
pub struct Http {
    agent: ureq::Agent,
    pub base: String,
}

impl Http {
    pub fn new(port: u16) -> Http {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            // A fresh connection per request: a server may close a connection after refusing a
            // request whose body it did not read, and a pooled one would then fail the next
            // request ("peer disconnected") for a reason that is not the one under test.
            .max_idle_connections(0)
            .build()
            .into();
        Http {
            agent,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Any method, any body: (status, body text).
    pub fn send(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<(u16, String)> {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.unwrap_or_default().to_vec())?;
        let mut resp = self
            .agent
            .run(req)
            .with_context(|| format!("{method} {}{path}", self.base))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Ok((status, text))
    }

    pub fn get_json(&self, path: &str) -> Result<Value> {
        let (status, text) = self.send("GET", path, None)?;
        if status != 200 {
            bail!("GET {path}: {status} {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("GET {path}: {text}"))
    }

    pub fn get_text(&self, path: &str) -> Result<String> {
        let (status, text) = self.send("GET", path, None)?;
        if status != 200 {
            bail!("GET {path}: {status} {text}");
        }
        Ok(text)
    }

    pub fn put_json(&self, path: &str, body: &Value) -> Result<Value> {
        let (status, text) = self.send("PUT", path, Some(body.to_string().as_bytes()))?;
        if status != 200 {
            bail!("PUT {path} {body}: {status} {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("PUT {path}: {text}"))
    }

    /// Raw bytes on a new TCP connection; returns what came back (empty if it was closed).
    pub fn raw(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let addr = self.base.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        // The server may close as soon as it has seen enough: a failed write is an answer too.
        let _ = s.write_all(bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        Ok(out)
    }

    /// Waits until GET /health answers 200.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<()> {
        wait_until(timeout, "GET /health to answer 200", || {
            Ok(matches!(self.send("GET", "/health", None), Ok((200, _))))
        })
    }
}

/// Polls `f` every 250 ms until it returns true; fails after `timeout`.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match f() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() > timeout {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The last `n` lines of a container's stdout and stderr.
pub fn log_tail(c: &Container<GenericImage>, n: usize) -> String {
    let mut text = String::from_utf8_lossy(&c.stdout_to_vec().unwrap_or_default()).into_owned();
    text.push_str(&String::from_utf8_lossy(
        &c.stderr_to_vec().unwrap_or_default(),
    ));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// dsim and the engine (CPU backend) on a network of their own, streaming.
/// Field order is drop order: the containers go before their network.
pub struct Pipeline {
    pub dsim: Container<GenericImage>,
    pub engine: Container<GenericImage>,
    pub net: Network,
    pub prefix: String,
}

impl Pipeline {
    /// Starts dsim, then the engine, and waits until output heaps are being sent.
    pub fn start(session: &Session) -> Result<Pipeline> {
        let net = session.network()?;
        let prefix = session.prefix.clone();
        let dsim = request(
            "fgpu/dsim",
            &net,
            &format!("{prefix}-dsim"),
            strings(&[
                "--pol0-dest",
                POL0_SRC,
                "--pol1-dest",
                POL1_SRC,
                "--rate",
                &RATE.to_string(),
                "--tone",
                &format!("{TONE_HZ}:0.5"),
                "--control",
                "0.0.0.0:8080",
            ]),
        )
        .start()
        .context("starting fgpu/dsim")?;
        let engine = request(
            "fgpu/fengine",
            &net,
            &format!("{prefix}-engine"),
            Self::engine_args(),
        )
        .start()
        .context("starting fgpu/fengine")?;
        let p = Pipeline {
            dsim,
            engine,
            net,
            prefix,
        };
        p.dsim_http()?.wait_healthy(Duration::from_secs(60))?;
        p.wait_engine_settled(Duration::from_secs(90))?;
        Ok(p)
    }

    fn engine_args() -> Vec<String> {
        strings(&[
            "--src-pol0",
            POL0_SRC,
            "--src-pol1",
            POL1_SRC,
            "--dst",
            OUTPUT,
            "--adc-sample-rate",
            &RATE.to_string(),
            "--channels",
            &CHANNELS.to_string(),
            "--taps",
            &TAPS.to_string(),
            "--spectra-per-heap",
            &SPECTRA_PER_HEAP.to_string(),
            "--heap-samples",
            &HEAP_SAMPLES.to_string(),
            "--backend",
            "cpu",
            "--control",
            "0.0.0.0:8080",
        ])
    }

    /// dsim's control API from the host (its published port).
    pub fn dsim_http(&self) -> Result<Http> {
        Ok(Http::new(
            self.dsim
                .get_host_port_ipv4(ContainerPort::Tcp(CONTROL_PORT))?,
        ))
    }

    /// The engine's control API from the host. The published port changes when the container
    /// restarts, so ask again after a restart.
    pub fn engine_http(&self) -> Result<Http> {
        Ok(Http::new(
            self.engine
                .get_host_port_ipv4(ContainerPort::Tcp(CONTROL_PORT))?,
        ))
    }

    /// Waits until the engine is healthy, sending, and settled: its missing-input count has not
    /// moved for 3 s (a starting engine can lose input while it warms up, more so on a loaded
    /// host). Returns the timestamp of its latest output heap then: heaps from there on must be
    /// clean.
    pub fn wait_engine_settled(&self, timeout: Duration) -> Result<u64> {
        let start = Instant::now();
        let mut http = None;
        wait_until(timeout, "the engine's control API", || {
            http = self.engine_http().ok();
            Ok(matches!(
                http.as_ref().map(|h| h.send("GET", "/health", None)),
                Some(Ok((200, _)))
            ))
        })?;
        let http = http.context("engine control")?;
        let left = timeout.saturating_sub(start.elapsed());
        // (heaps sent, heaps missing, since when both were so)
        let mut last: Option<(u64, u64, Instant)> = None;
        let mut settled_at = 0;
        wait_until(
            left,
            "the engine to send output without losing input for 3 s",
            || {
                let st = http.get_json("/status")?;
                let sent = st["output"]["heaps_sent"]
                    .as_u64()
                    .context("output.heaps_sent")?;
                let missing: u64 = (0..2)
                    .map(|p| st["input"][p]["heaps_missing"].as_u64().unwrap_or(0))
                    .sum();
                settled_at = st["output"]["last_timestamp"].as_u64().unwrap_or(0);
                Ok(match last {
                    Some((s0, m0, since)) if m0 == missing && sent > s0 => {
                        since.elapsed() >= Duration::from_secs(3)
                    }
                    _ => {
                        last = Some((sent, missing, Instant::now()));
                        false
                    }
                })
            },
        )
        .with_context(|| self.logs())?;
        Ok(settled_at)
    }

    /// Container DNS names on the network.
    pub fn dsim_url(&self) -> String {
        format!("http://{}-dsim:{CONTROL_PORT}", self.prefix)
    }
    pub fn engine_url(&self) -> String {
        format!("http://{}-engine:{CONTROL_PORT}", self.prefix)
    }

    /// Starts `harness watch` for `seconds` in a container on the network.
    pub fn start_watch(&self, seconds: u32) -> Result<RunningWatch> {
        let name = format!("{}-harness", self.prefix);
        let c = request(
            "fgpu/harness",
            &self.net,
            &name,
            strings(&[
                "watch",
                "--dst",
                OUTPUT,
                "--duration",
                &seconds.to_string(),
                "--dsim-url",
                &self.dsim_url(),
                "--engine-url",
                &self.engine_url(),
            ]),
        )
        .start()
        .context("starting fgpu/harness")?;
        Ok(RunningWatch {
            c,
            deadline: Instant::now() + Duration::from_secs(seconds as u64 + 120),
        })
    }

    /// A one-off container of the dsim image running `bash -c script` on the network (bash's
    /// /dev/udp and /dev/tcp make a small traffic source); returns its exit code and output.
    pub fn run_script(&self, role: &str, script: &str, timeout: Duration) -> Result<(i64, String)> {
        let c = GenericImage::new("fgpu/dsim", "latest")
            .with_entrypoint("bash")
            .with_cmd(["-c", script])
            .with_network(self.net.name.clone())
            .with_container_name(format!("{}-{role}", self.prefix))
            .with_label(LABEL, "1")
            .start()
            .with_context(|| format!("starting the {role} container"))?;
        let mut code = None;
        wait_until(timeout, &format!("the {role} container to exit"), || {
            code = c.exit_code()?;
            Ok(code.is_some())
        })?;
        Ok((code.unwrap_or(-1), log_tail(&c, 50)))
    }

    /// The last lines of dsim's and the engine's logs, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- dsim log (tail) ---\n{}\n--- engine log (tail) ---\n{}",
            log_tail(&self.dsim, 15),
            log_tail(&self.engine, 25)
        )
    }
}

/// `harness watch` running in its container.
pub struct RunningWatch {
    c: Container<GenericImage>,
    deadline: Instant,
}

/// What `harness watch` ended with.
#[derive(Debug)]
pub struct Watch {
    pub exit_code: i64,
    /// The JSON summary it printed on stdout.
    pub summary: Value,
    /// Its progress lines and logs (stderr).
    pub stderr: String,
}

impl RunningWatch {
    /// Waits for a progress line that reports heaps arriving: the harness is receiving.
    pub fn wait_receiving(&self, timeout: Duration) -> Result<()> {
        wait_until(timeout, "the harness to report heaps arriving", || {
            let err = String::from_utf8_lossy(&self.c.stderr_to_vec()?).into_owned();
            Ok(err
                .lines()
                .any(|l| progress_heaps_per_s(l).is_some_and(|h| h > 0.0)))
        })
        .with_context(|| log_tail(&self.c, 20))
    }

    /// Waits for the watch to end and reads its summary.
    pub fn finish(self) -> Result<Watch> {
        let timeout = self.deadline.saturating_duration_since(Instant::now());
        let mut code = None;
        wait_until(timeout, "harness watch to exit", || {
            code = self.c.exit_code()?;
            Ok(code.is_some())
        })
        .with_context(|| log_tail(&self.c, 20))?;
        let stdout = String::from_utf8_lossy(&self.c.stdout_to_vec()?).into_owned();
        let stderr = String::from_utf8_lossy(&self.c.stderr_to_vec()?).into_owned();
        let summary = serde_json::from_str(stdout.trim()).with_context(|| {
            format!("harness watch printed no JSON summary:\n{stdout}\n--- stderr ---\n{stderr}")
        })?;
        Ok(Watch {
            exit_code: code.unwrap_or(-1),
            summary,
            stderr,
        })
    }
}

/// The heaps/s of a `harness watch` progress line
/// (`[   3.0 s] 0.025 Gsample/s  191 heaps/s  gaps 0 ...`).
pub fn progress_heaps_per_s(line: &str) -> Option<f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "heaps/s")?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

impl Watch {
    /// Progress lines, for messages.
    pub fn progress_tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.stderr.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn u64_at(&self, pointer: &str) -> u64 {
        self.summary
            .pointer(pointer)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("no {pointer} in the summary: {:#}", self.summary))
    }

    /// Every substream's missing output timestamps, expanded from its [start, end) ranges.
    pub fn missing_per_substream(&self) -> Vec<Vec<u64>> {
        let subs = self.summary["per_substream"]
            .as_array()
            .expect("per_substream in the summary");
        subs.iter()
            .map(|s| {
                let mut out = Vec::new();
                for r in s["missing"].as_array().expect("missing ranges") {
                    let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                    let mut t = a;
                    while t < b {
                        out.push(t);
                        t += OUTPUT_STEP;
                    }
                }
                out
            })
            .collect()
    }
}

/// Output heaps (timestamps) that lose input when the digitiser heaps `dropped` are missing:
/// heap T holds spectra T + m 2n (m < S), and spectrum t0 reads samples [t0, t0 + taps 2n)
/// (zero delay), so heap T needs samples [T, T + (S - 1) 2n + taps 2n). `phase` is the output
/// timestamps' residue mod the step (from any output heap).
pub fn affected_output_heaps(dropped: &[u64], phase: u64) -> Vec<u64> {
    let span = (SPECTRA_PER_HEAP - 1) * 2 * CHANNELS + TAPS * 2 * CHANNELS;
    let mut out = std::collections::BTreeSet::new();
    for &k in dropped {
        let (lo, hi) = (k * HEAP_SAMPLES, (k + 1) * HEAP_SAMPLES);
        // First lattice point T with T + span > lo, through the last with T < hi.
        let start = lo.saturating_sub(span - 1);
        // The lattice point at or below `start`.
        let back = (start + OUTPUT_STEP - phase % OUTPUT_STEP) % OUTPUT_STEP;
        let mut t = start.saturating_sub(back);
        while t < hi {
            if t + span > lo {
                out.insert(t);
            }
            t += OUTPUT_STEP;
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line() {
        let l = "[   3.0 s] 0.025 Gsample/s  191 heaps/s  gaps 0  late 0";
        assert_eq!(progress_heaps_per_s(l), Some(191.0));
        assert_eq!(progress_heaps_per_s("demo-1  | starting"), None);
    }

    #[test]
    fn affected_heaps() {
        let span = (SPECTRA_PER_HEAP - 1) * 2 * CHANNELS + TAPS * 2 * CHANNELS;
        let phase = 12345 * 2 * CHANNELS % OUTPUT_STEP;
        // A dropped heap well inside one output heap's first spectra: that heap, and the
        // previous one when its last window reaches it.
        let t = 1000 * OUTPUT_STEP + phase;
        let k = t / HEAP_SAMPLES + 2;
        let got = affected_output_heaps(&[k], phase);
        for &h in &got {
            assert_eq!(h % OUTPUT_STEP, phase);
            assert!(h < (k + 1) * HEAP_SAMPLES && h + span > k * HEAP_SAMPLES);
        }
        assert!(got.contains(&t));
        assert_eq!(
            got.contains(&(t - OUTPUT_STEP)),
            t - OUTPUT_STEP + span > k * HEAP_SAMPLES
        );
        // Two drops close together share heaps (no duplicates).
        let two = affected_output_heaps(&[k, k + 1], phase);
        assert!(two.windows(2).all(|w| w[0] < w[1]));
    }
}

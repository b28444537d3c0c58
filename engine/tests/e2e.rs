//! End to end on loopback: the real `dsim` binary -> the real `fengine` binary -> a receiver in
//! this test (spead's `HeapAssembler`).
//!
//! - `tone_lands_in_its_channel`: a tone in channel k peaks in channel k of both polarisations at
//!   the amplitude the weights and gain predict.
//! - `dropped_heaps_give_exactly_the_predicted_gaps`: a dsim drop list removes exactly the output
//!   heaps whose spectra windows touch a dropped heap, the counters agree, the engine keeps going.
//! - `restarted_digitiser_is_followed`: dsim killed and started again (timestamps jump back to 0);
//!   clean output resumes within a few seconds without restarting the engine.
//! - `delay_step_aligns_polarisations`: PUT /delays with dsim's per-polarisation delays makes the
//!   cross-power phase flat across the band.
//!
//! The dsim binary is looked for next to the engine's (`target/<profile>/dsim`) and built with
//! `cargo build -p dsim` first (a no-op when it is fresh; set FENGINE_E2E_NO_BUILD=1 to skip).
//! FENGINE_E2E_BIN_DIR names a folder holding both `fengine` and `dsim` to use instead (for a
//! host without cargo: copy the binaries and this test's executable there).
//! Backend: FENGINE_TEST_BACKEND (default `cpu`; `cuda` on a GPU host).
//!
//! Sizes follow the build profile: in release (`cargo test -p fengine --release --test e2e`) 1024
//! channels, 4 taps, 64 spectra per heap at 32 Msample/s; in a debug build, where the CPU backend
//! manages well under 1 Msample/s, 256 channels at 0.25 Msample/s. The tests take turns (a lock)
//! so that they do not starve each other of the two cores.

use std::collections::{BTreeSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use num_complex::Complex64;
use serde_json::{json, Value};
use spead::assemble::{Event, HeapAssembler};
use spead::transport::{Receiver, SocketConfig, UdpSocket};
use spead::{items, Limits, RejectCounters};

/// One test at a time: each runs two busy processes on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The configuration of a run.
#[derive(Clone, Debug)]
struct Setup {
    channels: usize,
    taps: usize,
    spectra_per_heap: usize,
    heaps_per_frame: usize,
    heap_samples: usize,
    rate: f64,
    sample_bits: u32,
    backend: String,
    /// Source addresses per polarisation (127.0.0.1+N-1, one port) and engine receive threads.
    addresses: usize,
    recv_threads: usize,
}

impl Setup {
    fn new() -> Self {
        let backend = std::env::var("FENGINE_TEST_BACKEND").unwrap_or_else(|_| "cpu".into());
        if cfg!(debug_assertions) && backend != "cuda" {
            Self {
                channels: 256,
                taps: 4,
                spectra_per_heap: 16,
                heaps_per_frame: 2,
                heap_samples: 1024,
                rate: 0.25e6,
                sample_bits: 10,
                backend,
                addresses: 1,
                recv_threads: 1,
            }
        } else {
            Self {
                channels: 1024,
                taps: 4,
                spectra_per_heap: 64,
                heaps_per_frame: 4,
                heap_samples: 4096,
                rate: 32e6,
                sample_bits: 10,
                backend,
                addresses: 1,
                recv_threads: 1,
            }
        }
    }
    /// The same with each polarisation spread over four loopback addresses and received by two
    /// threads (two sockets each). Chunks of at least 128 heaps: dsim sends each address a run
    /// of up to 50 small heaps in one GSO send, and a thread with two addresses must find both
    /// runs inside its window of 3 chunks.
    fn with_lanes() -> Self {
        let base = Self::new();
        Self {
            addresses: 4,
            recv_threads: 2,
            heaps_per_frame: base.heaps_per_frame.max(16),
            ..base
        }
    }
    fn step(&self) -> u64 {
        2 * self.channels as u64
    }
    /// Timestamp difference between consecutive output heaps.
    fn heap_step(&self) -> u64 {
        self.spectra_per_heap as u64 * self.step()
    }
    /// Centre frequency of channel k.
    fn channel_hz(&self, k: usize) -> f64 {
        k as f64 * self.rate / self.step() as f64
    }
    /// |X_k| for a real tone of `amplitude` (fraction of full scale) at channel k's centre.
    fn tone_response(&self, amplitude: f64) -> f64 {
        let w = fengine::signal::weights::default_weights(self.channels, self.taps).unwrap();
        let counts = amplitude * (1u64 << (self.sample_bits - 1)) as f64;
        counts / 2.0 * fengine::signal::weights::dc_gain(&w)
    }
    fn seconds(&self, heaps: u64) -> Duration {
        Duration::from_secs_f64(heaps as f64 * self.heap_step() as f64 / self.rate)
    }
}

// ---------------------------------------------------------------- processes

/// A child process whose stderr is collected; killed (by its own pid) when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Proc {
    fn spawn(name: &'static str, mut cmd: Command) -> Self {
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
    fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
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
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ADDR:PORT` from the `control listening on ADDR:PORT` log line.
    fn control_addr(&mut self) -> SocketAddr {
        let rest = self.wait_for("control listening on ", Duration::from_secs(60));
        let token = rest.split_whitespace().next().unwrap_or_default();
        token
            .parse()
            .unwrap_or_else(|_| panic!("{}: bad control address {token:?}", self.name))
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kill(&mut self) {
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
            for l in log
                .iter()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                eprintln!("{l}");
            }
        }
    }
}

/// The engine binary: `FENGINE_E2E_BIN_DIR/fengine` when that is set (binaries copied to a host
/// without cargo, such as the GPU machine), else the one cargo built for this test.
fn fengine_binary() -> PathBuf {
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
fn dsim_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
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

// ---------------------------------------------------------------- HTTP

/// A minimal HTTP/1.1 client: one request per connection.
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (code, body) = http(addr, "GET", path, None);
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

fn put_json(addr: SocketAddr, path: &str, v: Value) -> Value {
    let (code, body) = http(addr, "PUT", path, Some(&v));
    assert_eq!(code, 200, "PUT {path} {v}: {body}");
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

// ---------------------------------------------------------------- output receiver

/// One output heap: (channels, spectra, pol, re/im) int8.
#[derive(Clone, Debug)]
struct OutHeap {
    timestamp: u64,
    data: Vec<i8>,
}

#[derive(Default)]
struct Seen {
    timestamps: BTreeSet<u64>,
    recent: VecDeque<OutHeap>,
    /// Heaps with a timestamp at or after `capture_from` are kept here (up to `capture_max`).
    captured: Vec<OutHeap>,
    capture_from: Option<u64>,
    capture_max: usize,
}

/// Receives the engine's output on 127.0.0.1 and remembers what came.
struct Output {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Output {
    fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &SocketConfig::default())
            .expect("bind the output receiver");
        let addr = socket.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut rx = Receiver::new(socket, 32);
            let limits = Limits {
                max_packet: 65_507,
                max_heap: 64 << 20,
            };
            let mut asm = HeapAssembler::new(limits, 64, Arc::new(RejectCounters::new()));
            let mut complete = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                if rx.recv(Duration::from_millis(50)).unwrap_or(0) == 0 {
                    continue;
                }
                for d in rx.datagrams() {
                    let _ = asm.add_datagram(d, &mut |e| {
                        if let Event::Complete(h) = e {
                            complete.push(h)
                        }
                    });
                }
                if complete.is_empty() {
                    continue;
                }
                let mut seen = s2.lock().unwrap();
                for h in complete.drain(..) {
                    let Ok(view) = h.view() else { continue };
                    let (Some(t), Some(raw)) = (
                        view.immediate(items::TIMESTAMP),
                        view.value(items::FENG_RAW),
                    ) else {
                        continue; // descriptors
                    };
                    let heap = OutHeap {
                        timestamp: t,
                        data: raw.iter().map(|&b| b as i8).collect(),
                    };
                    seen.timestamps.insert(t);
                    if seen.capture_from.is_some_and(|f| t >= f)
                        && seen.captured.len() < seen.capture_max
                    {
                        seen.captured.push(heap.clone());
                    }
                    seen.recent.push_back(heap);
                    if seen.recent.len() > 16 {
                        seen.recent.pop_front();
                    }
                }
            }
        });
        Self {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn newest(&self) -> Option<u64> {
        self.seen.lock().unwrap().timestamps.last().copied()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().timestamps.len()
    }

    /// Waits until a heap with timestamp >= `t` has arrived.
    fn wait_past(&self, t: u64, timeout: Duration) {
        let end = Instant::now() + timeout;
        while self.newest().is_none_or(|n| n < t) {
            assert!(
                Instant::now() < end,
                "no output heap at or after {t} in time (newest {:?})",
                self.newest()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `n` heaps have arrived in all.
    fn wait_count(&self, n: usize, timeout: Duration) {
        let end = Instant::now() + timeout;
        while self.count() < n {
            assert!(
                Instant::now() < end,
                "only {} output heaps in {timeout:?}",
                self.count()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Collects `n` heaps with timestamps from `from` on.
    fn capture(&self, from: u64, n: usize, timeout: Duration) -> Vec<OutHeap> {
        {
            let mut s = self.seen.lock().unwrap();
            s.captured.clear();
            s.capture_from = Some(from);
            s.capture_max = n;
        }
        let end = Instant::now() + timeout;
        loop {
            {
                let s = self.seen.lock().unwrap();
                if s.captured.len() >= n {
                    return s.captured.clone();
                }
            }
            assert!(
                Instant::now() < end,
                "fewer than {n} heaps from {from} in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn timestamps(&self) -> BTreeSet<u64> {
        self.seen.lock().unwrap().timestamps.clone()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sample (channel, spectrum, pol) of a heap as a complex number.
fn value(s: &Setup, h: &OutHeap, channel: usize, spectrum: usize, pol: usize) -> Complex64 {
    let i = ((channel * s.spectra_per_heap + spectrum) * 2 + pol) * 2;
    Complex64::new(h.data[i] as f64, h.data[i + 1] as f64)
}

// ---------------------------------------------------------------- the system

struct System {
    setup: Setup,
    engine: Proc,
    engine_ctl: SocketAddr,
    /// Where dsim sends each polarisation (ADDR[+N]:PORT).
    sources: [String; 2],
    dsim: Option<Proc>,
    dsim_ctl: Option<SocketAddr>,
    out: Output,
}

impl System {
    /// Starts the engine (sources on free ports) and a receiver for its output.
    fn start(setup: Setup, gain: f64, max_delay: f64) -> Self {
        let out = Output::start();
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
        let mut cmd = Command::new(fengine_binary());
        cmd.args(["run", "--src-pol0", &srcs[0], "--src-pol1", &srcs[1]])
            .args(["--recv-threads", &setup.recv_threads.to_string()])
            .args(["--dst", &out.addr.to_string()])
            .args(["--channels", &setup.channels.to_string()])
            .args(["--taps", &setup.taps.to_string()])
            .args(["--spectra-per-heap", &setup.spectra_per_heap.to_string()])
            .args(["--heaps-per-frame", &setup.heaps_per_frame.to_string()])
            .args(["--heap-samples", &setup.heap_samples.to_string()])
            .args(["--sample-bits", &setup.sample_bits.to_string()])
            .args(["--adc-sample-rate", &setup.rate.to_string()])
            .args(["--max-delay", &max_delay.to_string()])
            .args(["--gain", &gain.to_string()])
            .args(["--backend", &setup.backend])
            .args(["--control", "127.0.0.1:0"])
            // Loopback never refuses data: keep the sockets within the kernel's default caps.
            .args(["--socket-buffer", &(4 << 20).to_string()])
            .env("RUST_LOG", "info");
        let mut engine = Proc::spawn("fengine", cmd);
        let engine_ctl = engine.control_addr();
        let status = get_json(engine_ctl, "/status");
        let sources = [0, 1].map(|p| {
            if setup.addresses > 1 {
                return srcs[p].clone();
            }
            status["input"][p]["sources"][0]
                .as_str()
                .expect("bound source address")
                .to_string()
        });
        Self {
            setup,
            engine,
            engine_ctl,
            sources,
            dsim: None,
            dsim_ctl: None,
            out,
        }
    }

    /// Starts dsim sending to the engine, with extra arguments.
    fn start_dsim(&mut self, extra: &[String]) {
        let s = &self.setup;
        let mut cmd = Command::new(dsim_binary());
        cmd.args([
            "--pol0-dest",
            &self.sources[0],
            "--pol1-dest",
            &self.sources[1],
        ])
        .args(["--rate", &s.rate.to_string()])
        .args(["--heap-samples", &s.heap_samples.to_string()])
        .args(["--sample-bits", &s.sample_bits.to_string()])
        .args(["--control", "127.0.0.1:0"])
        .args(["--threads", "1"])
        .args(["--buffer-heaps", "1024"])
        .args(extra)
        .env("RUST_LOG", "info");
        let mut p = Proc::spawn("dsim", cmd);
        self.dsim_ctl = Some(p.control_addr());
        self.dsim = Some(p);
    }

    fn dsim_ctl(&self) -> SocketAddr {
        self.dsim_ctl.expect("dsim is running")
    }

    fn engine_status(&self) -> Value {
        get_json(self.engine_ctl, "/status")
    }

    /// Checks the engine is alive and healthy.
    fn assert_engine_healthy(&mut self) {
        assert!(self.engine.alive(), "the engine exited");
        let (code, body) = http(self.engine_ctl, "GET", "/health", None);
        assert_eq!(code, 200, "{body}");
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

/// Tones at channel centres, as dsim arguments.
fn tone_args(s: &Setup, channels: &[usize], amplitude: f64) -> Vec<String> {
    channels
        .iter()
        .flat_map(|&k| {
            [
                "--tone".to_string(),
                format!("{}:{amplitude}", s.channel_hz(k)),
            ]
        })
        .collect()
}

// ---------------------------------------------------------------- tests

#[test]
fn tone_lands_in_its_channel() {
    let _turn = serial();
    let t0 = Instant::now();
    let s = Setup::new();
    let k = s.channels / 4 + 3;
    let amplitude = 0.25;
    // Aim for a peak of 64 counts.
    let gain = 64.0 / s.tone_response(amplitude);
    let mut sys = System::start(s.clone(), gain, 1e-6);
    let mut args = tone_args(&s, &[k], amplitude);
    args.extend(["--noise".into(), "0.01".into()]);
    sys.start_dsim(&args);
    sys.out.wait_count(4, Duration::from_secs(60));
    let from = sys.out.newest().unwrap() + s.heap_step();
    let heaps = sys.out.capture(from, 4, Duration::from_secs(60));
    for pol in 0..2 {
        let mut power = vec![0.0; s.channels];
        let mut amp = 0.0;
        let mut n = 0.0;
        for h in &heaps {
            for (ch, p) in power.iter_mut().enumerate() {
                for sp in 0..s.spectra_per_heap {
                    *p += value(&s, h, ch, sp, pol).norm_sqr();
                }
            }
            for sp in 0..s.spectra_per_heap {
                amp += value(&s, h, k, sp, pol).norm();
                n += 1.0;
            }
        }
        let peak = (0..s.channels)
            .max_by(|&a, &b| power[a].total_cmp(&power[b]))
            .unwrap();
        assert_eq!(peak, k, "pol {pol}: peak in channel {peak}, not {k}");
        let mean = amp / n;
        assert!(
            (mean - 64.0).abs() < 64.0 * 0.03,
            "pol {pol}: channel {k} amplitude {mean:.2}, predicted 64"
        );
        // Away from the tone (and its neighbours, which see its skirt) the band is quiet.
        let far = (0..s.channels)
            .filter(|c| c.abs_diff(k) > 2)
            .map(|c| power[c])
            .fold(0.0, f64::max);
        assert!(
            far < power[k] * 1e-3,
            "pol {pol}: leakage {far} vs {}",
            power[k]
        );
    }
    let st = sys.engine_status();
    assert_eq!(st["backend"], s.backend.as_str());
    assert!(u(&st["output"]["heaps_sent"]) >= 4);
    sys.assert_engine_healthy();
    eprintln!(
        "tone_lands_in_its_channel: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Output heap timestamps (on the grid through `base`) in [lo, hi] whose spectra windows touch
/// any of `dropped` (digitiser heap indices).
fn predicted_missing(s: &Setup, base: u64, lo: u64, hi: u64, dropped: &[u64]) -> BTreeSet<u64> {
    let step = s.heap_step();
    // Samples one output heap depends on: its spectra's windows, back to back.
    let span = (s.spectra_per_heap as u64 - 1) * s.step() + s.step() * s.taps as u64;
    let first = base + (lo.saturating_sub(base)).div_ceil(step) * step;
    (0..)
        .map(|j| first + j * step)
        .take_while(|&t| t <= hi)
        .filter(|&t| {
            dropped.iter().any(|&k| {
                let (a, b) = (k * s.heap_samples as u64, (k + 1) * s.heap_samples as u64);
                t < b && t + span > a
            })
        })
        .collect()
}

#[test]
fn dropped_heaps_give_exactly_the_predicted_gaps() {
    dropped_heaps_case(Setup::new());
}

#[test]
fn dropped_heaps_give_exactly_the_predicted_gaps_with_receive_threads() {
    dropped_heaps_case(Setup::with_lanes());
}

fn dropped_heaps_case(s: Setup) {
    let _turn = serial();
    let t0 = Instant::now();
    let gain = 64.0 / s.tone_response(0.25);
    let mut sys = System::start(s.clone(), gain, 1e-6);
    sys.start_dsim(&tone_args(&s, &[s.channels / 3], 0.25));
    sys.out.wait_count(4, Duration::from_secs(60));
    // Clean flow first: no heap skipped since output started.
    let before = sys.engine_status();
    let dsim_now = u(&get_json(sys.dsim_ctl(), "/status")["timestamp"]);
    let hs = s.heap_samples as u64;
    // Drops about 1 s of output ahead: one heap of pol 0, a run of pol 1, and a heap of both
    // polarisations that holds the first sample of an output heap, so that it also lies in the
    // previous output heap's windows (two heaps lost). Far enough apart that the gaps are separate.
    let ahead = (s.rate as u64 / hs).max(64);
    let k0 = dsim_now / hs + ahead;
    let gap = 4 * s.heap_step() / hs + 8;
    let k1 = k0 + gap;
    let base = sys.out.timestamps().first().copied().unwrap();
    let boundary = base + ((k1 + gap) * hs - base).div_ceil(s.heap_step()) * s.heap_step();
    let k2 = boundary / hs;
    let pol0: Vec<u64> = vec![k0, k2];
    let pol1: Vec<u64> = vec![k1, k1 + 1, k1 + 2, k2];
    put_json(
        sys.dsim_ctl(),
        "/faults",
        json!({"pol0": {"drop": {"heaps": pol0}}, "pol1": {"drop": {"heaps": pol1}}}),
    );
    let lo = k0 * hs - 4 * s.heap_step();
    let hi = (k2 + 1) * hs + 4 * s.heap_step();
    sys.out.wait_past(
        hi + 2 * s.heap_step(),
        Duration::from_secs(60) + 4 * s.seconds(ahead),
    );
    // Let the counters catch up with the heaps on the wire.
    std::thread::sleep(Duration::from_millis(300));
    let after = sys.engine_status();

    let seen = sys.out.timestamps();
    let all: BTreeSet<u64> = {
        let first = base + lo.saturating_sub(base).div_ceil(s.heap_step()) * s.heap_step();
        (0..)
            .map(|j| first + j * s.heap_step())
            .take_while(|&t| t <= hi)
            .collect()
    };
    let mut dropped = pol0.clone();
    dropped.extend(&pol1);
    let missing = predicted_missing(&s, base, lo, hi, &dropped);
    // 1 + 1 + 2 heaps unless a run straddles a boundary too.
    assert!(
        missing.len() >= 4 && missing.len() < all.len(),
        "{missing:?}"
    );
    let got: BTreeSet<u64> = seen.range(lo..=hi).copied().collect();
    let expected: BTreeSet<u64> = all.difference(&missing).copied().collect();
    assert_eq!(
        got,
        expected,
        "received heaps differ from the prediction: missing {:?}, extra {:?}",
        expected.difference(&got).collect::<Vec<_>>(),
        got.difference(&expected).collect::<Vec<_>>()
    );
    let skipped = u(&after["output"]["heaps_skipped"]) - u(&before["output"]["heaps_skipped"]);
    assert_eq!(skipped, missing.len() as u64, "skipped-heap counter");
    for (p, drops) in [(0, pol0.len()), (1, pol1.len())] {
        let m = u(&after["input"][p]["heaps_missing"]) - u(&before["input"][p]["heaps_missing"]);
        assert_eq!(m, drops as u64, "missing-heap counter of pol {p}");
    }
    let metrics = http(sys.engine_ctl, "GET", "/metrics", None).1;
    assert!(metrics.contains("fengine_output_skipped_heaps_total{backend="));

    // Stray packets: future-dated, too old, wrong size, misaligned, without a timestamp. Each is
    // counted by reason and dropped without disturbing the stream.
    let now_ts = u(&sys.engine_status()["input"][0]["last_timestamp"]);
    let stray = |ts: Option<u64>, bytes: usize| -> Vec<u8> {
        let payload = vec![0u8; bytes];
        let mut its = vec![spead::HeapItem::addressed(items::ADC_SAMPLES, &payload)];
        if let Some(t) = ts {
            its.push(spead::HeapItem::immediate(items::TIMESTAMP, t));
        }
        let mut out = Vec::new();
        spead::HeapWriter::new(1 << 16).write(7, &its, |d| out = d.to_vec());
        out
    };
    let heap_bytes = s.heap_samples * s.sample_bits as usize / 8;
    // Heaps whose index k is a multiple of 4 belong on the first address (k mod addresses).
    let k_now = now_ts / hs / 4 * 4;
    let chunk_heaps = (s.heap_step() * s.heaps_per_frame as u64 / hs).div_ceil(4) * 4;
    let mut packets = vec![
        stray(Some((k_now + 1_000_000) * hs), heap_bytes),
        // Eight chunks back: behind every receive window.
        stray(Some(k_now.saturating_sub(8 * chunk_heaps) * hs), heap_bytes),
        stray(Some(k_now * hs), heap_bytes / 2),
        stray(Some(k_now * hs + 1), heap_bytes),
        stray(None, heap_bytes),
    ];
    if s.addresses > 1 {
        // A heap that belongs on the second address.
        packets.push(stray(Some((k_now + 1) * hs), heap_bytes));
    }
    let first_source = format!(
        "127.0.0.1:{}",
        sys.sources[0].rsplit_once(':').expect("ADDR:PORT").1
    );
    let before_stray = sys.engine_status();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for p in &packets {
        tx.send_to(p, &first_source).unwrap();
    }
    let now = sys.out.newest().unwrap();
    sys.out
        .wait_past(now + 4 * s.heap_step(), Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    let after_stray = sys.engine_status();
    let rejected = &after_stray["input"][0]["rejected"];
    let was = &before_stray["input"][0]["rejected"];
    let diff =
        |reason: &str| rejected[reason].as_u64().unwrap_or(0) - was[reason].as_u64().unwrap_or(0);
    assert_eq!(diff("too_new"), 1, "{rejected}");
    assert_eq!(diff("too_old"), 1, "{rejected}");
    assert_eq!(diff("wrong_heap_size"), 1, "{rejected}");
    assert_eq!(diff("misaligned"), 1, "{rejected}");
    assert_eq!(diff("missing_mandatory_item"), 1, "{rejected}");
    let wrong_destination = if s.addresses > 1 { 1 } else { 0 };
    assert_eq!(diff("wrong_destination"), wrong_destination, "{rejected}");
    // And it keeps going without a gap.
    assert_eq!(
        u(&after_stray["output"]["heaps_skipped"]),
        u(&before_stray["output"]["heaps_skipped"]),
        "stray packets disturbed the stream"
    );
    sys.assert_engine_healthy();
    eprintln!(
        "dropped heaps, {} receive thread(s) per pol: {} of {} heaps missing as predicted, {:.1} s",
        s.recv_threads,
        missing.len(),
        all.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// True when `heaps` holds `n` consecutive timestamps ending at its newest.
fn consecutive_tail(ts: &BTreeSet<u64>, step: u64, n: usize) -> bool {
    let tail: Vec<u64> = ts.iter().rev().take(n).copied().collect();
    tail.len() == n && tail.windows(2).all(|w| w[0] - w[1] == step)
}

#[test]
fn restarted_digitiser_is_followed() {
    restart_case(Setup::new());
}

#[test]
fn restarted_digitiser_is_followed_with_receive_threads() {
    restart_case(Setup::with_lanes());
}

fn restart_case(s: Setup) {
    let _turn = serial();
    let t0 = Instant::now();
    let k = s.channels / 5;
    let gain = 64.0 / s.tone_response(0.25);
    let mut sys = System::start(s.clone(), gain, 1e-6);
    let args = tone_args(&s, &[k], 0.25);
    // A sync time 100 s ago: timestamps start far from 0, so the restart below (no sync time:
    // timestamps from 0) jumps back.
    let old_sync = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 100.0;
    let mut first = args.clone();
    first.extend(["--sync-time".into(), format!("{old_sync}")]);
    sys.start_dsim(&first);
    sys.out.wait_count(4, Duration::from_secs(60));
    let old_newest = sys.out.newest().unwrap();
    assert!(old_newest > (50.0 * s.rate) as u64);

    if let Some(mut d) = sys.dsim.take() {
        d.kill();
    }
    std::thread::sleep(Duration::from_millis(300));
    let restarted = Instant::now();
    sys.start_dsim(&args);
    // Clean output: 4 consecutive heaps of the new stream.
    let limit = Duration::from_secs(10) + s.seconds(16);
    let recovered = loop {
        let ts: BTreeSet<u64> = sys
            .out
            .timestamps()
            .range(..old_newest / 2)
            .copied()
            .collect();
        if consecutive_tail(&ts, s.heap_step(), 4) {
            break restarted.elapsed();
        }
        assert!(
            restarted.elapsed() < limit,
            "no clean output {limit:?} after the restart"
        );
        sys.assert_engine_healthy();
        std::thread::sleep(Duration::from_millis(50));
    };
    // The new stream's content is right too.
    let newest_new = sys
        .out
        .timestamps()
        .range(..old_newest / 2)
        .next_back()
        .copied();
    let from = newest_new.unwrap() + s.heap_step();
    let heaps = sys.out.capture(from, 2, Duration::from_secs(30));
    assert!(heaps.iter().all(|h| h.timestamp < old_newest / 2));
    for pol in 0..2 {
        let mean: f64 = heaps
            .iter()
            .flat_map(|h| (0..s.spectra_per_heap).map(move |sp| (h, sp)))
            .map(|(h, sp)| value(&s, h, k, sp, pol).norm())
            .sum::<f64>()
            / (heaps.len() * s.spectra_per_heap) as f64;
        assert!(
            (mean - 64.0).abs() < 3.0,
            "pol {pol}: amplitude {mean} after restart"
        );
    }
    let st = sys.engine_status();
    for p in 0..2 {
        assert!(
            u(&st["input"][p]["resyncs"]) >= 1,
            "pol {p} did not resynchronise: {st}"
        );
    }
    sys.assert_engine_healthy();
    eprintln!(
        "restart, {} receive thread(s) per pol: clean output {:.2} s after the restart, {:.1} s in all",
        s.recv_threads,
        recovered.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// Phase (degrees) of the cross power X0 conj(X1) in each of `channels`.
fn cross_phases(s: &Setup, heaps: &[OutHeap], channels: &[usize]) -> Vec<f64> {
    channels
        .iter()
        .map(|&k| {
            let c: Complex64 = heaps
                .iter()
                .flat_map(|h| (0..s.spectra_per_heap).map(move |sp| (h, sp)))
                .map(|(h, sp)| value(s, h, k, sp, 0) * value(s, h, k, sp, 1).conj())
                .sum();
            c.arg().to_degrees()
        })
        .collect()
}

#[test]
fn delay_step_aligns_polarisations() {
    let _turn = serial();
    let t0 = Instant::now();
    let s = Setup::new();
    // dsim's geometric delays in samples: whole and fractional parts, opposite signs.
    let tau = [3.3, -1.6];
    let channels: Vec<usize> = (1..16).map(|i| i * s.channels / 16).collect();
    let amplitude = 0.04;
    let gain = 48.0 / s.tone_response(amplitude);
    let max_delay = 8.0 / s.rate;
    let mut sys = System::start(s.clone(), gain, max_delay);
    let mut args = tone_args(&s, &channels, amplitude);
    args.extend([
        "--noise".into(),
        "0.005".into(),
        format!("--delay0={}", tau[0]),
        format!("--delay1={}", tau[1]),
    ]);
    sys.start_dsim(&args);
    sys.out.wait_count(4, Duration::from_secs(60));
    let from = sys.out.newest().unwrap() + s.heap_step();
    let before = cross_phases(
        &s,
        &sys.out.capture(from, 2, Duration::from_secs(30)),
        &channels,
    );
    // Uncorrected, the phase runs across the band by 2 pi f (tau0 - tau1) / fs.
    let spread = |p: &[f64]| {
        let mean = p.iter().sum::<f64>() / p.len() as f64;
        p.iter().map(|x| (x - mean).abs()).fold(0.0, f64::max)
    };
    assert!(
        spread(&before) > 20.0,
        "phases before correction: {before:?}"
    );

    let reply = put_json(
        sys.engine_ctl,
        "/delays",
        json!({"pol0": {"delay": tau[0] / s.rate}, "pol1": {"delay": tau[1] / s.rate}}),
    );
    let loaded_at = u(&reply["pol0"]["load_timestamp"]);
    // Frames prepared after the request: a few chunks past the newest input at load time.
    let settle = loaded_at + 4 * (s.heaps_per_frame as u64 + 2) * s.heap_step();
    sys.out.wait_past(settle, Duration::from_secs(60));
    let heaps = sys
        .out
        .capture(settle + s.heap_step(), 2, Duration::from_secs(30));
    let after = cross_phases(&s, &heaps, &channels);
    let worst = after.iter().map(|p| p.abs()).fold(0.0, f64::max);
    assert!(
        spread(&after) < 3.0 && worst < 3.0,
        "phases after correction (degrees): {after:?}; before: {before:?}"
    );
    // serde_json parses floats to within an ulp.
    let echoed = get_json(sys.engine_ctl, "/delays")["pol1"]["delay"]
        .as_f64()
        .unwrap();
    assert!((echoed - tau[1] / s.rate).abs() < 1e-20, "{echoed}");
    // A delay beyond --max-delay is refused and changes nothing.
    let (code, body) = http(
        sys.engine_ctl,
        "PUT",
        "/delays",
        Some(&json!({"pol0": {"delay": 1.0}})),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("max-delay"), "{body}");
    sys.assert_engine_healthy();
    eprintln!(
        "delay_step_aligns_polarisations: max phase {worst:.2} deg after (spread {:.1} deg before), {:.1} s",
        spread(&before),
        t0.elapsed().as_secs_f64()
    );
}

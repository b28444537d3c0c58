//! The harness over katcp: dsim and a CPU engine started here with both fronts (HTTP and
//! `--katcp`), and `harness watch` run twice against them, once by their HTTP URLs and once by
//! `katcp://` (the engine's counters from its Prometheus metrics under katgpucbf's names). Both
//! runs must agree: clean, the tone in the same channel, no counter moved. The engine client over
//! katcp must read and set the gains and delays the HTTP front then reports. On a system of its
//! own, `harness qualify --quick` by either front of the engine must run and pass gains,
//! linearity, delay-rate, phase-rate, application-time, saturation and lost-data with the same
//! figures (delay loads at an ADC timestamp sent as Unix times, counters from the Prometheus
//! metrics).
//!
//! NEEDS THE OTHER BINARIES (see [`support`]): without them these tests print SKIP and pass,
//! except in CI (`CI` set), where they fail.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fgpu_api::engine::{DelayRequest, Gain, GainsRequest, PolDelay};
use harness::control::{CounterNames, Dsim, Engine};
use harness::services::{free_tcp_port, free_udp_port};
use serde_json::Value;
use support::{binaries, rate, CHANNELS, SPECTRA, TAPS};

/// A child process, killed (by its own pid) when dropped.
struct Proc(Child);

impl Proc {
    fn spawn(bin: &Path, args: &[String], log: &Path) -> Self {
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        Self(child)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `ready` holds, or fails with the log's tail.
fn wait_for(what: &str, log: &Path, ready: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            Instant::now() < end,
            "{what} did not answer in time:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `harness watch` for `secs` with `urls`; its summary and stderr.
fn watch(secs: u32, urls: &[String], summary: &Path) -> (Option<i32>, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["watch", "--duration", &secs.to_string(), "--json"])
        .arg(summary)
        .args(urls)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("harness watch {urls:?}:\n{err}");
    let text = std::fs::read_to_string(summary).unwrap_or_default();
    let v = serde_json::from_str(&text).unwrap_or(Value::Null);
    (out.status.code(), v, err)
}

/// dsim and a CPU engine with both fronts (HTTP and `--katcp`), killed when dropped, and
/// clients of each by each front.
struct System {
    _engine: Proc,
    _dsim: Proc,
    dir: PathBuf,
    fs: f64,
    tone_hz: f64,
    dst: String,
    engine_katcp: u16,
    http_engine: Engine,
    katcp_engine: Engine,
    http_dsim: Dsim,
    katcp_dsim: Dsim,
}

impl Drop for System {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One system at a time: the tests share the 2-core machine's loopback and cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts the system (its files under a folder named for `name`), once both fronts answer and
/// the engine has input; None (SKIP) without the binaries.
fn start(name: &str) -> Option<System> {
    let (dsim_bin, fengine_bin) = binaries()?;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("harness-katcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fs = rate();
    // The tone at the centre of channel 128.
    let tone_hz = 128.0 * fs / (2.0 * CHANNELS as f64);
    let (pol0, pol1, out) = (
        free_udp_port().unwrap(),
        free_udp_port().unwrap(),
        free_udp_port().unwrap(),
    );
    let ports: Vec<u16> = (0..4).map(|_| free_tcp_port().unwrap()).collect();
    let (engine_http, engine_katcp, dsim_http, dsim_katcp) =
        (ports[0], ports[1], ports[2], ports[3]);
    let sync = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let s = |x: &str| x.to_string();
    let dst = format!("127.0.0.1+1:{out}");
    let engine_args = vec![
        s("--src-pol0"),
        format!("127.0.0.1:{pol0}"),
        s("--src-pol1"),
        format!("127.0.0.1:{pol1}"),
        s("--dst"),
        dst.clone(),
        s("--channels"),
        CHANNELS.to_string(),
        s("--taps"),
        TAPS.to_string(),
        s("--spectra-per-heap"),
        SPECTRA.to_string(),
        s("--adc-sample-rate"),
        fs.to_string(),
        s("--sync-time"),
        sync.clone(),
        s("--backend"),
        s("cpu"),
        s("--control"),
        format!("127.0.0.1:{engine_http}"),
        s("--katcp"),
        format!("127.0.0.1:{engine_katcp}"),
    ];
    let engine_log = dir.join("fengine.log");
    let engine = Proc::spawn(&fengine_bin, &engine_args, &engine_log);
    let http_engine = Engine::new(&format!("127.0.0.1:{engine_http}"), CounterNames::default());
    let katcp_engine = Engine::connect(
        &format!("katcp://127.0.0.1:{engine_katcp}"),
        Some(http_engine.url()),
        CounterNames::default(),
    );
    wait_for("fengine", &engine_log, || {
        http_engine.status().is_ok() && katcp_engine.status_json().is_ok()
    });
    let dsim_args = vec![
        s("--pol0-dest"),
        format!("127.0.0.1:{pol0}"),
        s("--pol1-dest"),
        format!("127.0.0.1:{pol1}"),
        s("--rate"),
        fs.to_string(),
        s("--sync-time"),
        sync,
        s("--control"),
        format!("127.0.0.1:{dsim_http}"),
        s("--katcp"),
        format!("127.0.0.1:{dsim_katcp}"),
        s("--tone"),
        format!("{tone_hz}:0.5"),
        s("--buffer-heaps"),
        s("512"),
    ];
    let dsim_log = dir.join("dsim.log");
    let dsim = Proc::spawn(&dsim_bin, &dsim_args, &dsim_log);
    let http_dsim = Dsim::new(&format!("127.0.0.1:{dsim_http}"));
    let katcp_dsim = Dsim::new(&format!("katcp://127.0.0.1:{dsim_katcp}"));
    wait_for("dsim", &dsim_log, || {
        http_dsim.status().is_ok() && katcp_dsim.status_json().is_ok()
    });
    // The rate from dsim's sensor; what katgpucbf's dsim cannot do is one sentence.
    assert_eq!(katcp_dsim.adc_rate().unwrap(), fs);
    let err = format!("{:#}", katcp_dsim.set_rate(fs).unwrap_err());
    assert!(err.contains("sets its rate when it starts"), "{err}");
    wait_for("input", &engine_log, || {
        katcp_engine.newest_input().is_ok_and(|t| t > 0)
    });

    Some(System {
        _engine: engine,
        _dsim: dsim,
        dir,
        fs,
        tone_hz,
        dst,
        engine_katcp,
        http_engine,
        katcp_engine,
        http_dsim,
        katcp_dsim,
    })
}

#[test]
fn watch_over_katcp_gives_the_figures_it_gives_over_http() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(sys) = start("watch") else {
        return;
    };
    let System {
        dir,
        fs,
        tone_hz,
        dst,
        engine_katcp,
        http_engine,
        katcp_engine,
        http_dsim,
        katcp_dsim,
        ..
    } = &sys;
    let (fs, tone_hz, engine_katcp) = (*fs, *tone_hz, *engine_katcp);
    let s = |x: &str| x.to_string();
    // Counters: katgpucbf's names over katcp, this project's over HTTP, the same heaps.
    assert_eq!(
        katcp_engine.counter_names(),
        &CounterNames::katgpucbf(),
        "katgpucbf's names by default over katcp"
    );
    let (k, h) = (
        katcp_engine.counters().unwrap(),
        http_engine.counters().unwrap(),
    );
    assert!(
        (k.missing_input - h.missing_input).abs() <= 2.0,
        "katcp {k:?}, http {h:?}"
    );
    // Without a metrics URL, a sentence that asks for one.
    let bare = Engine::new(
        &format!("katcp://127.0.0.1:{engine_katcp}"),
        CounterNames::default(),
    );
    let err = format!("{:#}", bare.counters().unwrap_err());
    assert!(err.contains("--engine-metrics-url"), "{err}");
    let err = format!("{:#}", bare.status().unwrap_err());
    assert!(err.contains("has no status"), "{err}");

    // Gains set over katcp are what HTTP reads, and back.
    let mut katcp_engine = katcp_engine.clone();
    katcp_engine.select_output("wideband");
    let g = katcp_engine
        .set_gains(&GainsRequest {
            pol0: Some(Gain::Complex([0.5, -0.25])),
            pol1: Some(Gain::Real(2.0)),
        })
        .unwrap();
    assert_eq!(g.pol0, Gain::Complex([0.5, -0.25]));
    assert_eq!(g.pol1, Gain::Complex([2.0, 0.0]));
    assert_eq!(http_engine.gains().unwrap(), g);
    let unknown = format!(
        "{:#}",
        bare_with_output(engine_katcp, "nope")
            .set_gain(1.0)
            .unwrap_err()
    );
    assert!(unknown.contains("nope"), "{unknown}");
    // The engine's newest input over katcp is HTTP's, give or take the sensors' refresh.
    let (kt, ht) = (
        katcp_engine.newest_input().unwrap(),
        http_engine.newest_input().unwrap(),
    );
    assert!(
        kt.abs_diff(ht) as f64 <= fs,
        "newest input over katcp {kt}, over HTTP {ht}"
    );
    // Delays over katcp, loaded at once: the models HTTP reports.
    let model = PolDelay {
        delay: 1e-7,
        delay_rate: 0.0,
        phase: 0.5,
        phase_rate: 0.0,
    };
    let loaded = katcp_engine
        .set_delays(&DelayRequest::both(model, PolDelay::default()))
        .unwrap();
    assert_eq!((loaded.pol0.delay, loaded.pol0.phase), (1e-7, 0.5));
    let st = http_engine.status().unwrap();
    let d = st.delays.expect("the engine reports its delays");
    assert_eq!((d.pol0.delay, d.pol0.phase, d.pol1.delay), (1e-7, 0.5, 0.0));
    katcp_engine
        .set_delays(&DelayRequest::both(
            PolDelay::default(),
            PolDelay::default(),
        ))
        .unwrap();
    katcp_engine.set_gain(1.0 / 8.0).unwrap();

    // watch: over HTTP, then over katcp with the geometry from the command line.
    let http_urls = vec![
        s("--dsim-url"),
        http_dsim.url().to_string(),
        s("--engine-url"),
        http_engine.url().to_string(),
    ];
    let katcp_urls = vec![
        s("--dsim-url"),
        katcp_dsim.url().to_string(),
        s("--engine-url"),
        katcp_engine.url().to_string(),
        s("--engine-metrics-url"),
        http_engine.url().to_string(),
        s("--dst"),
        dst.clone(),
        s("--channels"),
        CHANNELS.to_string(),
        s("--taps"),
        TAPS.to_string(),
        s("--spectra-per-heap"),
        SPECTRA.to_string(),
        // A dsim over katcp does not say its tone.
        s("--tone"),
        format!("{tone_hz}:0.5"),
    ];
    // On a loaded host the CPU engine can fall behind its input: it then loses input heaps and
    // does not send the output heaps they feed, and counts both. Those gaps are the engine's
    // own loss, the same over either front; a pair of watches in which the engine counted loss
    // is run again (three pairs at most). A gap the engine did not count fails at once.
    let mut pair = 0;
    let (hc, hv, kc, kv, kerr) = loop {
        pair += 1;
        let (hc, hv, _) = watch(4, &http_urls, &dir.join("http.json"));
        let (kc, kv, kerr) = watch(4, &katcp_urls, &dir.join("katcp.json"));
        let counted = |v: &Value, counter: &str| {
            v["engine"][counter]
                .as_f64()
                .unwrap_or_else(|| panic!("the watch read no {counter} counter: {v:#}"))
        };
        for v in [&hv, &kv] {
            let gaps = v["sequence"]["gaps"].as_u64().unwrap_or(0);
            assert!(
                gaps == 0 || counted(v, "skipped_output") > 0.0,
                "{gaps} gaps that the engine did not count as skipped output heaps: {v:#}"
            );
        }
        let engine_lost =
            |v: &Value| counted(v, "skipped_output") > 0.0 || counted(v, "missing_input") > 0.0;
        if pair == 3 || !(engine_lost(&hv) || engine_lost(&kv)) {
            break (hc, hv, kc, kv, kerr);
        }
        eprintln!(
            "watch pair {pair}: the engine counted its own loss (over HTTP {}, over katcp {}); \
             watching again",
            hv["engine"], kv["engine"]
        );
    };
    assert_eq!((hc, kc), (Some(0), Some(0)), "http {hv:#}\nkatcp {kv:#}");
    for v in [&hv, &kv] {
        assert_eq!(v["ok"], true, "{v:#}");
        assert_eq!(v["sequence"]["gaps"], 0, "{v:#}");
        assert_eq!(v["malformed"], 0, "{v:#}");
        assert!(v["heaps"].as_u64().unwrap() > 0, "{v:#}");
        assert!(v["content"]["matched"].as_u64().unwrap() > 0, "{v:#}");
        assert_eq!(v["content"]["wrong_channel"], 0, "{v:#}");
    }
    for key in ["substreams", "step"] {
        assert_eq!(hv[key], kv[key], "{key}: http {hv:#}\nkatcp {kv:#}");
    }
    let heap_size = |v: &Value| v["heap_bytes"].as_u64().unwrap() / v["heaps"].as_u64().unwrap();
    assert_eq!(heap_size(&hv), heap_size(&kv));
    // Both read the engine's counters (katcp: katgpucbf's series), and neither moved.
    for v in [&hv, &kv] {
        assert_eq!(v["engine"]["skipped_output"], 0.0, "{v:#}");
        assert_eq!(v["engine"]["missing_input"], 0.0, "{v:#}");
    }
    let channel = |v: &Value| v["content"]["expected_channel"].as_f64().unwrap();
    assert!(
        (channel(&hv) - 128.0).abs() < 0.01 && (channel(&kv) - 128.0).abs() < 0.01,
        "the tone's channel expected: {} over HTTP, {} over katcp",
        channel(&hv),
        channel(&kv)
    );
    assert!(!kerr.contains("panicked"), "{kerr}");
}

/// qualify, the engine over HTTP and over katcp (dsim by HTTP: qualify writes its signals and
/// drop lists): gains and linearity, and the checks that need the engine's counters (saturation,
/// lost-data) and delay models loaded at an ADC timestamp (delay-rate, phase-rate,
/// application-time; over katcp sent as Unix times by dsim's sync time). Every check runs and
/// passes over both, with the same figures ([`compare_qualify`]).
#[test]
fn qualify_over_katcp_runs_every_check_with_the_figures_of_http() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(sys) = start("qualify") else {
        return;
    };
    let s = |x: &str| x.to_string();
    let qualify = |name: &str, engine: &[String]| -> Value {
        let out_dir = sys.dir.join(name);
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["qualify", "--quick", "--tests", QUALIFIED, "--out-dir"])
            .arg(&out_dir)
            .args(["--dsim-url", sys.http_dsim.url()])
            .args(engine)
            .output()
            .unwrap();
        eprintln!(
            "harness qualify ({name}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(out_dir.join("qualify.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    let http = qualify(
        "http",
        &[s("--engine-url"), sys.http_engine.url().to_string()],
    );
    // The engine by katcp, its counters from its Prometheus metrics, its geometry from the
    // command line; dsim stays HTTP's.
    let katcp = qualify(
        "katcp",
        &[
            s("--engine-url"),
            sys.katcp_engine.url().to_string(),
            s("--engine-metrics-url"),
            sys.http_engine.url().to_string(),
            s("--dst"),
            sys.dst.clone(),
            s("--channels"),
            CHANNELS.to_string(),
            s("--taps"),
            TAPS.to_string(),
            s("--spectra-per-heap"),
            SPECTRA.to_string(),
        ],
    );
    compare_qualify(&http, &katcp);
}

/// A katcp engine client told to read output `name`.
fn bare_with_output(port: u16, name: &str) -> Engine {
    let mut e = Engine::new(
        &format!("katcp://127.0.0.1:{port}"),
        CounterNames::default(),
    );
    e.select_output(name);
    e
}

/// The checks qualified over both fronts.
const QUALIFIED: &str =
    "gains,linearity,delay-rate,phase-rate,application-time,saturation,lost-data";

/// Both runs pass every check, in the same order. Every judged figure is on both sides, compared
/// by its kind: a count judged exact is the same count over both fronts wherever its target is
/// (application-time's spectrum, saturation's undriven counts, lost-data's missing heaps and
/// substreams; the output heaps lost-data predicts depend on where the drops fall, so there each
/// run equals its own prediction); a figure judged against an upper limit differs by no more
/// than that limit between the fronts (a residual, a ratio's distance from 1); a figure judged
/// against a lower limit, and every figure of gains and linearity, within a quarter. Every figure
/// is printed.
fn compare_qualify(http: &Value, katcp: &Value) {
    assert_eq!(http["pass"], true, "{http:#}");
    assert_eq!(katcp["pass"], true, "{katcp:#}");
    let (ht, kt) = (
        http["tests"].as_array().unwrap(),
        katcp["tests"].as_array().unwrap(),
    );
    let names: Vec<&str> = ht.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, QUALIFIED.split(',').collect::<Vec<_>>());
    assert_eq!(ht.len(), kt.len());
    let limit = |f: &Value| -> Option<(String, f64)> {
        let text = f["limit"].as_str()?;
        let (op, v) = text.split_once(' ')?;
        Some((op.to_string(), v.parse().ok()?))
    };
    for (h, k) in ht.iter().zip(kt) {
        let test = h["name"].as_str().unwrap();
        assert_eq!((&h["name"], &h["outcome"]), (&k["name"], &k["outcome"]));
        let (hf, kf) = (
            h["figures"].as_array().unwrap(),
            k["figures"].as_array().unwrap(),
        );
        for f in hf {
            let other = kf.iter().find(|g| g["name"] == f["name"]);
            eprintln!(
                "{test}: {}: http {} katcp {} {} (limit {})",
                f["name"].as_str().unwrap_or(""),
                f["value"],
                other.map_or(Value::Null, |g| g["value"].clone()),
                f["unit"].as_str().unwrap_or(""),
                f["limit"].as_str().unwrap_or("-")
            );
        }
        let judged = |fs: &[Value]| -> Vec<String> {
            fs.iter()
                .filter(|f| !f["pass"].is_null())
                .map(|f| f["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(judged(hf), judged(kf), "{test}: the judged figures");
        // gains and linearity: every figure, in the same order.
        let every = matches!(test, "gains" | "linearity");
        if every {
            assert_eq!(hf.len(), kf.len(), "{test}");
        }
        for a in hf.iter().filter(|f| every || !f["pass"].is_null()) {
            let b = kf.iter().find(|g| g["name"] == a["name"]).unwrap();
            let name = a["name"].as_str().unwrap();
            let (Some(x), Some(y)) = (a["value"].as_f64(), b["value"].as_f64()) else {
                continue;
            };
            let (la, lb) = (limit(a), limit(b));
            let what = format!("{test}: {name}: {x} over HTTP, {y} over katcp");
            match (la, lb) {
                (Some((op, want_a)), Some((_, want_b))) if op == "=" => {
                    assert_eq!((x, y), (want_a, want_b), "{what}");
                    if want_a == want_b {
                        assert_eq!(x, y, "{what}");
                    }
                }
                (Some((op, max)), _) if op == "<=" && !matches!(test, "gains" | "linearity") => {
                    assert!((x - y).abs() <= max, "{what}: further apart than {max}");
                }
                _ => assert!(
                    (x - y).abs() <= 0.25 * x.abs().max(y.abs()) + 0.05,
                    "{what}"
                ),
            }
        }
    }
}

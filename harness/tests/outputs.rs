//! `harness watch --output NAME` against an engine of several outputs: fengine with two
//! `--wideband` outputs (256 and 1024 channels) and a `--narrowband` one (256 channels, D = 8,
//! around a centre near the tone), each to destinations of its own, fed by dsim, both started
//! here and reached by URL as in compose. The harness, given no --dst, joins the destinations the
//! engine's /status gives the output named, and checks its heaps and the tone in the channel
//! that output's kind and shape predict; given no --output, it names the outputs to choose from.
//!
//! NEEDS THE OTHER BINARIES (see [`support`]): without them these tests print SKIP and pass,
//! except in CI (`CI` set), where they fail.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use harness::control::{CounterNames, Dsim, Engine};
use harness::services::{free_tcp_port, free_tcp_ports, free_udp_port, free_udp_ports};
use serde_json::Value;
use support::{binaries, rate, SPECTRA, TAPS};

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

/// One output of the engine under test.
struct Out {
    name: &'static str,
    /// `--wideband` or `--narrowband`.
    flag: &'static str,
    channels: u64,
    substreams: usize,
    /// Its keys after `dst=`.
    keys: String,
    /// The tone's channel in it.
    tone_channel: f64,
}

/// Each test here runs a whole system (dsim, an engine of several outputs, the harness) at a
/// rate that fills a 2-core host: two at once lose heaps to each other, so they take turns.
static ONE_SYSTEM: Mutex<()> = Mutex::new(());

fn one_system() -> MutexGuard<'static, ()> {
    ONE_SYSTEM.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn watch_checks_the_output_it_is_told_of_an_engine_of_three() {
    let _turn = one_system();
    let Some((dsim_bin, fengine_bin)) = binaries() else {
        return;
    };
    let dir: PathBuf = std::env::temp_dir().join(format!("harness-outputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Three outputs share the host's cores with dsim and the harness: half the usual rate.
    let fs = rate() / 2.0;
    // The tone at the centre of coarse channel 40, fine channel 160; the narrowband output
    // (fs/16 wide, channels fs/4096 apart) centred 20 of its channels above it, so that the tone
    // is at the centre of its channel 128 - 20 (85/1024 fs: a mixer word with no rounding).
    let tone_hz = 40.0 * fs / 512.0;
    let centre = tone_hz + 20.0 * fs / 4096.0;
    let outputs = [
        Out {
            name: "coarse",
            flag: "--wideband",
            channels: 256,
            substreams: 1,
            keys: "channels=256".into(),
            tone_channel: 40.0,
        },
        Out {
            name: "fine",
            flag: "--wideband",
            channels: 1024,
            substreams: 2,
            keys: "channels=1024".into(),
            tone_channel: 160.0,
        },
        Out {
            name: "nb",
            flag: "--narrowband",
            channels: 256,
            substreams: 1,
            keys: format!("channels=256,decimation=8,centre={centre}"),
            tone_channel: 108.0,
        },
    ];
    let [pol0, pol1] = free_udp_ports().unwrap();
    let [engine_ctl, dsim_ctl] = free_tcp_ports().unwrap();
    let s = |x: &str| x.to_string();
    let mut engine_args = vec![
        s("--src-pol0"),
        format!("127.0.0.1:{pol0}"),
        s("--src-pol1"),
        format!("127.0.0.1:{pol1}"),
        s("--taps"),
        TAPS.to_string(),
        s("--spectra-per-heap"),
        SPECTRA.to_string(),
        s("--heaps-per-frame"),
        s("2"),
        s("--adc-sample-rate"),
        fs.to_string(),
        s("--backend"),
        s("cpu"),
        s("--control"),
        format!("127.0.0.1:{engine_ctl}"),
    ];
    for o in &outputs {
        let port = free_udp_port().unwrap();
        engine_args.extend([
            s(o.flag),
            format!(
                "{}:dst=127.0.0.1+{}:{port},{}",
                o.name,
                o.substreams - 1,
                o.keys
            ),
        ]);
    }
    let engine_log = dir.join("fengine.log");
    let _engine = Proc::spawn(&fengine_bin, &engine_args, &engine_log);
    let engine = Engine::new(&format!("127.0.0.1:{engine_ctl}"), CounterNames::default());
    wait_for("fengine", &engine_log, || engine.status().is_ok());
    let dsim_args = vec![
        s("--pol0-dest"),
        format!("127.0.0.1:{pol0}"),
        s("--pol1-dest"),
        format!("127.0.0.1:{pol1}"),
        s("--rate"),
        fs.to_string(),
        s("--control"),
        format!("127.0.0.1:{dsim_ctl}"),
        s("--tone"),
        format!("{tone_hz}:0.5"),
        s("--buffer-heaps"),
        s("512"),
    ];
    let dsim_log = dir.join("dsim.log");
    let _dsim = Proc::spawn(&dsim_bin, &dsim_args, &dsim_log);
    let dsim = Dsim::new(&format!("127.0.0.1:{dsim_ctl}"));
    wait_for("dsim", &dsim_log, || dsim.status().is_ok());
    let urls = [
        s("--dsim-url"),
        dsim.url().to_string(),
        s("--engine-url"),
        engine.url().to_string(),
    ];

    // No --output, and no output named wideband: one sentence naming the outputs.
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["watch", "--duration", "1"])
        .args(&urls)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has 3 outputs (coarse, fine, nb)") && err.contains("--output NAME"),
        "{err}"
    );

    for o in &outputs {
        let name = o.name;
        let summary = dir.join(format!("{name}.json"));
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["watch", "--duration", "4", "--output", name, "--json"])
            .arg(&summary)
            .args(&urls)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("harness watch --output {name}:\n{err}");
        let text = std::fs::read_to_string(&summary).unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(out.status.code(), Some(0), "{name}: {v:#}\n{err}");
        assert_eq!(v["ok"], true, "{name}: {v:#}");
        assert_eq!(v["output"], name);
        // It joined the output's substreams, from the engine's /status.
        assert_eq!(v["substreams"], o.substreams, "{name}");
        assert!(
            err.contains(&format!("output {name} (of coarse, fine, nb) at 127.0.0.1")),
            "{name}: {err}"
        );
        // Heaps of this output's size: channels / substreams x spectra x 2 pols x 2 bytes.
        let heaps = v["heaps"].as_u64().unwrap();
        assert!(heaps > 0, "{name}: {v:#}");
        assert_eq!(
            v["heap_bytes"].as_u64().unwrap(),
            heaps * o.channels / o.substreams as u64 * SPECTRA * 4,
            "{name}"
        );
        assert_eq!(v["sequence"]["gaps"], 0, "{name}");
        assert_eq!(v["malformed"], 0, "{name}");
        // The tone in the channel this output's kind and shape predict, and found there.
        let expected = v["content"]["expected_channel"].as_f64().unwrap();
        assert!(
            (expected - o.tone_channel).abs() < 0.01,
            "{name}: tone expected in channel {expected}, not {}",
            o.tone_channel
        );
        assert!(
            v["content"]["matched"].as_u64().unwrap() > 0,
            "{name}: {v:#}"
        );
        assert_eq!(v["content"]["wrong_channel"], 0, "{name}");
        // Progress lines name the output among several.
        assert!(
            err.contains(&format!("s] output {name}  ")),
            "{name}: {err}"
        );
    }

    // The narrowband output's live page, as the compose demo's second watcher serves it: named,
    // its frequency axis the band around the centre (not wideband's k fs/2n); and a tone moved
    // at dsim from elsewhere (the other watcher's page, in the demo) is followed by its check.
    let width = fs / 4096.0;
    let page_port = free_tcp_port().unwrap();
    let page_log = dir.join("nb-page.log");
    let page_json = dir.join("nb-page.json");
    let mut page_args = vec![
        s("watch"),
        s("--duration"),
        s("12"),
        s("--output"),
        s("nb"),
        s("--http"),
        format!("127.0.0.1:{page_port}"),
        s("--json"),
        page_json.display().to_string(),
    ];
    page_args.extend(urls.iter().cloned());
    let mut watch = Proc::spawn(
        Path::new(env!("CARGO_BIN_EXE_harness")),
        &page_args,
        &page_log,
    );
    let frame = || -> Option<Value> {
        let url = format!("http://127.0.0.1:{page_port}/api/status");
        let text = ureq::get(&url)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        serde_json::from_str(&text).ok()
    };
    wait_for("the narrowband page", &page_log, || frame().is_some());
    let spectrum = frame().unwrap()["spectrum"].clone();
    assert_eq!(spectrum["output"], "nb", "{spectrum:#}");
    assert_eq!(spectrum["kind"], "narrowband", "{spectrum:#}");
    assert_eq!(
        spectrum["channel_width_hz"].as_f64(),
        Some(width),
        "{spectrum:#}"
    );
    let first = spectrum["first_channel_hz"].as_f64().unwrap();
    assert!(
        (first - (centre - 128.0 * width)).abs() < 1e-3,
        "{spectrum:#}"
    );
    assert_eq!(
        spectrum["expected_channel"].as_f64(),
        Some(108.0),
        "{spectrum:#}"
    );
    let moved = harness::control::Tone {
        frequency: tone_hz + 40.0 * width,
        amplitude: 0.5,
    };
    dsim.set_tone(moved, None).expect("moving dsim's tone");
    wait_for("the page's check to follow the tone", &page_log, || {
        frame().is_some_and(|f| {
            f["spectrum"]["expected_channel"]
                .as_f64()
                .is_some_and(|c| (c - 148.0).abs() < 0.01)
        })
    });
    let status = watch.0.wait().expect("harness watch exits");
    let text = std::fs::read_to_string(&page_json).unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let log = std::fs::read_to_string(&page_log).unwrap_or_default();
    // The new tone found where the check now expects it (whether an interval between the
    // move and its sighting was judged against the old channel is not asserted: up to a second).
    assert_eq!(
        v["content"]["last_peaks"][0]["channel"].as_f64(),
        Some(148.0),
        "{status}: {v:#}\n{log}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// What `harness qualify --quick --output NAME` left: its report, its stderr and exit status,
/// and the folder it wrote (for the HTML).
struct Qualified {
    report: Value,
    err: String,
    code: Option<i32>,
    dir: PathBuf,
}

/// Starts fengine (CPU) with a wideband output and the narrowband output `narrowband` (its
/// `--narrowband` value less `dst=`, which is added), and dsim beside it, and runs
/// `harness qualify --quick --output NAME` with `extra` arguments against them by URL. None when
/// the binaries are not built.
fn qualify_beside_wideband(name: &str, narrowband: &str, extra: &[&str]) -> Option<Qualified> {
    let _turn = one_system();
    let (dsim_bin, fengine_bin) = binaries()?;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("harness-qualify-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fs = rate();
    let [pol0, pol1, wide, narrow] = free_udp_ports().unwrap();
    let [engine_ctl, dsim_ctl] = free_tcp_ports().unwrap();
    let s = |x: &str| x.to_string();
    let engine_args = vec![
        s("--src-pol0"),
        format!("127.0.0.1:{pol0}"),
        s("--src-pol1"),
        format!("127.0.0.1:{pol1}"),
        s("--taps"),
        TAPS.to_string(),
        s("--spectra-per-heap"),
        SPECTRA.to_string(),
        s("--heaps-per-frame"),
        s("2"),
        s("--adc-sample-rate"),
        fs.to_string(),
        s("--backend"),
        s("cpu"),
        s("--control"),
        format!("127.0.0.1:{engine_ctl}"),
        s("--wideband"),
        format!("wideband:dst=127.0.0.1:{wide},channels=256"),
        s("--narrowband"),
        format!("{name}:dst=127.0.0.1:{narrow},{narrowband}"),
    ];
    let engine_log = dir.join("fengine.log");
    let engine_proc = Proc::spawn(&fengine_bin, &engine_args, &engine_log);
    let engine = Engine::new(&format!("127.0.0.1:{engine_ctl}"), CounterNames::default());
    wait_for("fengine", &engine_log, || engine.status().is_ok());
    let dsim_args = vec![
        s("--pol0-dest"),
        format!("127.0.0.1:{pol0}"),
        s("--pol1-dest"),
        format!("127.0.0.1:{pol1}"),
        s("--rate"),
        fs.to_string(),
        s("--control"),
        format!("127.0.0.1:{dsim_ctl}"),
        // A buffer longer than an integration, so that the noise does not repeat within one.
        s("--buffer-heaps"),
        s("2048"),
    ];
    let dsim_log = dir.join("dsim.log");
    let dsim_proc = Proc::spawn(&dsim_bin, &dsim_args, &dsim_log);
    let dsim = Dsim::new(&format!("127.0.0.1:{dsim_ctl}"));
    wait_for("dsim", &dsim_log, || dsim.status().is_ok());
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["qualify", "--quick", "--output", name])
        .args(extra)
        .arg("--out-dir")
        .arg(&dir)
        .args(["--dsim-url", dsim.url(), "--engine-url", engine.url()])
        .output()
        .unwrap();
    drop((dsim_proc, engine_proc));
    let text = std::fs::read_to_string(dir.join("qualify.json")).unwrap_or_default();
    Some(Qualified {
        report: serde_json::from_str(&text).unwrap_or(Value::Null),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
        dir,
    })
}

/// `harness qualify --quick --output nb` on the narrowband output of an engine of two, as the
/// demo's (a wideband output beside it): every test with a narrowband meaning and the DDC's
/// filter response run and pass, and the report names the output and its band.
#[test]
fn qualify_judges_the_narrowband_output_it_is_told_of() {
    // The demo's band: fs/16 wide around 9/64 fs (a mixer word with no rounding).
    let centre = 9.0 * rate() / 64.0;
    let Some(q) = qualify_beside_wideband(
        "nb",
        &format!("channels=256,decimation=8,centre={centre}"),
        &[],
    ) else {
        return;
    };
    let (report, err) = (&q.report, &q.err);
    let tests = report["tests"].as_array().cloned().unwrap_or_default();
    // Each test's outcome and figures, for the run's log (`--nocapture`).
    for t in &tests {
        eprintln!("{}: {} {}", t["name"], t["outcome"], t["figures"]);
    }
    let names: Vec<&str> = tests.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        tests.len(),
        14,
        "every test and filter-response: {names:?}\n{err}"
    );
    for t in &tests {
        assert_eq!(t["outcome"], "pass", "{}: {t:#}\n{err}", t["name"]);
    }
    assert_eq!(q.code, Some(0), "{err}");
    assert_eq!(report["system"]["output"], "nb");
    let band = &report["system"]["band"];
    assert_eq!(band["kind"], "narrowband");
    assert_eq!(band["centre_hz"].as_f64(), Some(centre));
    assert_eq!(band["decimation"], 8);
    let html = std::fs::read_to_string(q.dir.join("qualify.html")).unwrap();
    assert!(
        html.contains("of output nb (narrowband)"),
        "the report names it"
    );
    assert!(html.contains("band edge"), "the plots show the band");
    let _ = std::fs::remove_dir_all(q.dir);
}

/// `harness qualify --quick --output vlbi` on a no-discard narrowband output (katgpucbf's VLBI
/// mode) beside a wideband one: the DDC's filter response is held to katgpucbf's VLBI limits
/// (ripple 0.1 dB, aliases -80 dB) over the pass band, channelisation, gains and the delay
/// family judge the pass band, and the report names the output, its kind and its pass band.
#[test]
fn qualify_judges_a_no_discard_output_by_katgpucbfs_vlbi_limits() {
    let fs = rate();
    // fs/16 wide around 9/64 fs (a mixer word with no rounding), 0.6 of it pass band:
    // katgpucbf's qualification case, 64 of 107 MHz, is 0.598.
    let (centre, pass) = (9.0 * fs / 64.0, 0.6 * fs / 16.0);
    let Some(q) = qualify_beside_wideband(
        "vlbi",
        &format!("channels=256,decimation=8,centre={centre},pass_bandwidth={pass}"),
        &["--tests", "filter-response,channelisation,delay,gains"],
    ) else {
        return;
    };
    let (report, err) = (&q.report, &q.err);
    let tests = report["tests"].as_array().cloned().unwrap_or_default();
    assert_eq!(tests.len(), 4, "{err}");
    for t in &tests {
        assert_eq!(t["outcome"], "pass", "{}: {t:#}\n{err}", t["name"]);
    }
    assert_eq!(q.code, Some(0), "{err}");
    let band = &report["system"]["band"];
    assert_eq!(band["kind"], "narrowband_no_discard", "{band:#}");
    let edge = |i: usize| band["pass_band_hz"][i].as_f64().unwrap_or(f64::NAN);
    assert!(
        (edge(0) - (centre - pass / 2.0)).abs() < 1.0
            && (edge(1) - (centre + pass / 2.0)).abs() < 1.0,
        "{band:#}"
    );
    // The filter response against katgpucbf's VLBI limits, its pass band's edges measured.
    let filter = tests
        .iter()
        .find(|t| t["name"] == "filter-response")
        .unwrap();
    let figures = filter["figures"].as_array().cloned().unwrap_or_default();
    for f in &figures {
        eprintln!(
            "filter-response: {} = {} {}",
            f["name"], f["value"], f["unit"]
        );
    }
    let limit_of = |prefix: &str| {
        figures
            .iter()
            .find(|f| f["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .and_then(|f| f["limit"].as_str().map(String::from))
    };
    assert_eq!(
        limit_of("strongest alias").as_deref(),
        Some("<= -80"),
        "{filter:#}"
    );
    assert_eq!(
        limit_of("passband ripple").as_deref(),
        Some("<= 0.1"),
        "{filter:#}"
    );
    assert!(limit_of("lower pass band edge").is_some(), "{filter:#}");
    let html = std::fs::read_to_string(q.dir.join("qualify.html")).unwrap();
    assert!(
        html.contains("pass band edge"),
        "the plots show the pass band"
    );
    let _ = std::fs::remove_dir_all(q.dir);
}

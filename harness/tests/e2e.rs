//! End-to-end tests: the harness binary against real `dsim` and `fengine` binaries (CPU and null
//! backends) launched as local processes over loopback.
//!
//! NEEDS THE OTHER BINARIES (see [`support`]): without them these tests print SKIP and pass,
//! except in CI (`CI` set), where they fail.
//!
//! The tests run one at a time (a shared lock): each starts a whole system, at the rate
//! [`support::rate`] gives.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use harness::gaps::{engine_heap_span, outputs_hit};
use serde_json::Value;
use support::{binaries, rate, CHANNELS, SPECTRA, TAPS};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const HEAP_SAMPLES: u64 = 4096;

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harness-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the harness with the local-system arguments every test shares.
fn harness(args: &[&str], bins: &(PathBuf, PathBuf), dir: &Path, extra_dsim: &str) -> Output {
    let logs = dir.join("logs");
    // A short signal buffer: dsim rebuilds it on every tone change.
    let dsim_args = if extra_dsim.contains("--buffer-heaps") {
        extra_dsim.to_string()
    } else {
        format!("--buffer-heaps 512 {extra_dsim}")
    };
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .args(support::local_system(bins, &logs, &dsim_args))
        .output()
        .expect("harness runs");
    eprintln!(
        "harness {:?} exited {:?}\n--- stderr ---\n{}",
        args,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json_file(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn watch_clean_run_has_no_gaps_and_sees_the_tone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("watch-clean");
    let summary = dir.join("summary.json");
    let out = harness(
        &[
            "watch",
            "--duration",
            "5",
            "--quiet",
            "--json",
            summary.to_str().unwrap(),
        ],
        &bins,
        &dir,
        "",
    );
    let s = json_file(&summary);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(s["ok"], true);
    assert_eq!(s["sequence"]["gaps"], 0);
    assert_eq!(s["malformed"], 0);
    assert!(s["heaps"].as_u64().unwrap() > 0);
    assert!(
        s["content"]["matched"].as_u64().unwrap() > 0,
        "{:#}",
        s["content"]
    );
    assert_eq!(s["content"]["wrong_channel"], 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// 4-bit output (`--output-bits 4`, passed on to the engine): heaps of 2 bytes per channel and
/// spectrum, received whole and in sequence, and the tone found in its channel. dsim's noise is
/// low so that the tone stands far above it (the engine's default 4-bit gain leaves dsim's
/// default noise at about 1.1 counts rms per part, which also passes).
#[test]
fn watch_reads_4_bit_output_and_sees_the_tone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("watch-4bit");
    let summary = dir.join("summary.json");
    let out = harness(
        &[
            "watch",
            "--duration",
            "5",
            "--quiet",
            "--output-bits",
            "4",
            "--noise",
            "0.003",
            "--json",
            summary.to_str().unwrap(),
        ],
        &bins,
        &dir,
        "",
    );
    let s = json_file(&summary);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(s["ok"], true);
    assert_eq!(s["sequence"]["gaps"], 0);
    assert_eq!(s["malformed"], 0);
    assert_eq!(s["content"]["bad_shape"], 0);
    let heaps = s["heaps"].as_u64().unwrap();
    assert!(heaps > 0);
    // 4 substreams: CHANNELS / 4 channels x SPECTRA spectra x 2 pols, one byte per value.
    assert_eq!(
        s["heap_bytes"].as_u64().unwrap(),
        heaps * (CHANNELS / 4) * SPECTRA * 2,
        "heaps of 4-bit output"
    );
    assert!(
        s["content"]["matched"].as_u64().unwrap() > 0,
        "{:#}",
        s["content"]
    );
    assert_eq!(s["content"]["wrong_channel"], 0);
    assert_eq!(s["content"]["no_tone"], 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// An engine told `--output-bits 4` behind the harness's back (in --fengine-args) is caught as
/// soon as it answers /status, in one sentence that says what to give instead.
#[test]
fn an_engine_of_another_output_format_is_refused() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("watch-bits-mismatch");
    let mut args: Vec<String> = vec!["watch".into(), "--duration".into(), "5".into()];
    let mut system = support::local_system(&bins, &dir.join("logs"), "--buffer-heaps 512");
    let at = system.iter().position(|a| a == "--fengine-args").unwrap() + 1;
    system[at].push_str(" --output-bits 4");
    args.extend(system);
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sends 4-bit output, but the harness reads 8-bit")
            && err.contains("--output-bits 4"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn watch_reports_exactly_the_dropped_heaps_and_fails() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("watch-drops");
    let summary = dir.join("summary.json");
    // dsim's heap k (timestamp / 4096) counts from its start: drop one heap of pol0 about 2.5 s
    // in and three of pol1 about 3.5 s in. Single quotes keep the JSON's double quotes (the
    // harness splits --dsim-args as a shell would).
    let heaps_per_s = rate() / HEAP_SAMPLES as f64;
    let a = (2.5 * heaps_per_s) as u64;
    let b = (3.5 * heaps_per_s) as u64;
    let faults = format!(
        "--faults '{{\"pol0\":{{\"drop\":{{\"heaps\":[{a}]}}}},\"pol1\":{{\"drop\":{{\"ranges\":[[{b},{}]]}}}}}}'",
        b + 3
    );
    let out = harness(
        &[
            "watch",
            "--duration",
            "7",
            "--quiet",
            "--json",
            summary.to_str().unwrap(),
        ],
        &bins,
        &dir,
        &faults,
    );
    let s = json_file(&summary);
    assert_eq!(out.status.code(), Some(1), "gaps must fail the run: {s:#}");
    assert_eq!(s["ok"], false);
    let step = s["step"].as_u64().unwrap();
    assert_eq!(step, SPECTRA * 2 * CHANNELS);
    let span = engine_heap_span(CHANNELS, SPECTRA, TAPS);
    for sub in s["per_substream"].as_array().unwrap() {
        let first = sub["first_timestamp"].as_u64().unwrap();
        let newest = sub["newest_timestamp"].as_u64().unwrap();
        let lost = [(a, a + 1), (b, b + 3)];
        let mut want: Vec<u64> = lost
            .iter()
            .flat_map(|&(k0, k1)| {
                outputs_hit(
                    k0 * HEAP_SAMPLES,
                    k1 * HEAP_SAMPLES,
                    first % step,
                    step,
                    span,
                )
            })
            .collect();
        want.sort();
        want.dedup();
        assert!(
            want.first().is_some_and(|&w| w > first) && want.last().is_some_and(|&w| w < newest),
            "the drops must fall inside the watched span {first}..{newest}: {want:?}"
        );
        let got: Vec<u64> = sub["missing"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                let (s, e) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                (s..e).step_by(step as usize)
            })
            .collect();
        assert_eq!(got, want, "substream {}", sub["index"]);
        assert_eq!(sub["sequence"]["gaps"].as_u64().unwrap(), want.len() as u64);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The shared local system as an array of `engines` antennas, each at `rate`.
fn harness_array(args: &[&str], bins: &(PathBuf, PathBuf), dir: &Path, rate: f64) -> Output {
    let mut system = support::local_system(bins, &dir.join("logs"), "--buffer-heaps 512");
    let at = system.iter().position(|a| a == "--adc-rate").unwrap();
    system[at + 1] = rate.to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .args(system)
        .output()
        .expect("harness runs");
    eprintln!(
        "harness {:?} exited {:?}\n--- stderr ---\n{}",
        args,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn watch_follows_an_array_of_two_engines_each_on_its_own() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("watch-array");
    let summary = dir.join("summary.json");
    // Two antennas share the cores one has in the other tests.
    let out = harness_array(
        &[
            "watch",
            "--engines",
            "2",
            "--duration",
            "6",
            "--json",
            summary.to_str().unwrap(),
        ],
        &bins,
        &dir,
        rate() / 2.0,
    );
    let s = json_file(&summary);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(s["ok"], true, "{s:#}");
    let engines = s["engines"].as_array().unwrap();
    assert_eq!(engines.len(), 2);
    // Every substream has a lane per engine.
    assert_eq!(s["substreams"], 4);
    assert_eq!(s["per_substream"].as_array().unwrap().len(), 2 * 4);
    let mut tones = Vec::new();
    for (i, e) in engines.iter().enumerate() {
        assert_eq!(e["feng_id"], i);
        assert_eq!(e["ok"], true, "{e:#}");
        assert_eq!(e["sequence"]["gaps"], 0, "{e:#}");
        assert!(e["heaps"].as_u64().unwrap() > 0);
        let c = &e["content"];
        assert!(c["matched"].as_u64().unwrap() > 0, "{c:#}");
        assert_eq!(c["matched"], c["checked"], "{c:#}");
        // Each engine's strongest channel is its own antenna's tone.
        let expected = c["expected_channel"].as_f64().unwrap();
        assert_eq!(
            c["last_peaks"][0]["channel"].as_f64(),
            Some(expected.round())
        );
        tones.push(expected);
        let k = &e["heap_counters"];
        // Every heap's counter was checked (and those still arriving at the end).
        assert!(k["checked"].as_u64() >= e["heaps"].as_u64(), "{k:#}");
        assert_eq!(
            (k["wrong"].as_u64(), k["collisions"].as_u64()),
            (Some(0), Some(0))
        );
    }
    assert_ne!(tones[0], tones[1], "the antennas' tones differ");
    let agg = s["aggregate_rate"].as_f64().unwrap();
    assert!((agg / rate() - 1.0).abs() < 0.1, "aggregate {agg}");
    // Each engine was launched with its own id, the array's size and the common sync time.
    let logs: Vec<String> = std::fs::read_dir(dir.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for name in ["fengine-0", "fengine-1", "dsim-0", "dsim-1"] {
        assert!(
            logs.iter().any(|l| l.starts_with(name)),
            "{name} in {logs:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_array_arguments_get_one_sentence_before_anything_starts() {
    let harness = env!("CARGO_BIN_EXE_harness");
    for (args, needle) in [
        (
            vec!["watch", "--local", "--engines", "0"],
            "--engines must be at least 1",
        ),
        (
            vec![
                "watch",
                "--engines",
                "2",
                "--dsim-url",
                "http://a:1",
                "--engine-url",
                "http://b:1",
                "--dst",
                "127.0.0.1:9",
            ],
            "needs 2 engine URLs and 2 dsim URLs",
        ),
        (
            vec![
                "max-rate",
                "--local",
                "--engines",
                "2",
                "--gpus",
                "0",
                "--low",
                "1e6",
                "--high",
                "2e6",
            ],
            "--gpus must be at least 1",
        ),
        (
            vec![
                "watch",
                "--local",
                "--engines",
                "3",
                "--tone",
                "1e6:0.5,2e6:0.5",
            ],
            "lists 2 tones for 3 antennas",
        ),
    ] {
        let out = Command::new(harness).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
    }
}

#[test]
fn max_rate_local_writes_table_json_and_plot() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("max-rate");
    let r = rate();
    let (low, high, res) = ((r / 4.0).to_string(), r.to_string(), (r / 4.0).to_string());
    let out = harness(
        &[
            "max-rate",
            "--low",
            &low,
            "--high",
            &high,
            "--resolution",
            &res,
            "--warmup",
            "1",
            "--window",
            "2",
            "--settle",
            "3",
            "--repeats",
            "1",
            "--compare-null",
            "--out-dir",
            dir.to_str().unwrap(),
        ],
        &bins,
        &dir,
        "",
    );
    // Pass or fail depends on the machine; a result and the files must be there.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let report = json_file(&dir.join("max-rate.json"));
    let searches = report["searches"].as_array().unwrap();
    assert_eq!(searches.len(), 2);
    assert_eq!(searches[1]["backend"], "null");
    for s in searches {
        assert!(!s["trials"].as_array().unwrap().is_empty());
    }
    let table = std::fs::read_to_string(dir.join("max-rate.txt")).unwrap();
    assert!(table.contains("highest sustained rate"), "{table}");
    let svg = std::fs::read_to_string(dir.join("max-rate.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn response_for_1024_channels_matches_theory_to_half_a_db() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("response");
    let out = harness(
        &[
            "response",
            "--span",
            "1",
            "--steps-per-channel",
            "8",
            "--integration",
            "0.5",
            "--settle",
            "0.5",
            "--out-dir",
            dir.to_str().unwrap(),
        ],
        &bins,
        &dir,
        "",
    );
    let r = json_file(&dir.join("response.json"));
    let dev = r["max_deviation_db"].as_f64().unwrap_or(f64::INFINITY);
    assert!(dev <= 0.5, "max deviation {dev} dB: {:#}", r["points"]);
    assert!(r["compared"].as_u64().unwrap() >= 10);
    assert_eq!(out.status.code(), Some(0));
    assert!(std::fs::read_to_string(dir.join("response.svg"))
        .unwrap()
        .starts_with("<svg"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The qualification suite's quick subset on the CPU backend: every test runs and passes, and
/// the report is written (JSON and a self-contained HTML page with its plots).
#[test]
fn qualify_quick_subset_passes_on_the_cpu_backend() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bins) = binaries() else { return };
    let dir = out_dir("qualify");
    let out = harness(
        &["qualify", "--quick", "--out-dir", dir.to_str().unwrap()],
        &bins,
        &dir,
        // A buffer longer than an integration, so that the noise does not repeat within one.
        "--buffer-heaps 2048",
    );
    let report = json_file(&dir.join("qualify.json"));
    let tests = report["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 13, "every test of the suite ran");
    for t in tests {
        assert_eq!(
            t["outcome"],
            "pass",
            "{}: {}",
            t["name"],
            serde_json::to_string_pretty(t).unwrap()
        );
    }
    assert_eq!(report["pass"], true);
    assert_eq!(out.status.code(), Some(0));
    let html = std::fs::read_to_string(dir.join("qualify.html")).unwrap();
    assert!(
        html.matches("<svg").count() >= 13,
        "a plot per test at least"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Bad input: a test that does not exist, and an engine that cannot be reached, are named in
/// the error and the run exits 2.
#[test]
fn qualify_refuses_unknown_tests_and_unreachable_services() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(args)
            .output()
            .expect("harness runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["qualify", "--tests", "channelisation,sfdr", "--local"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("\"sfdr\"") && err.contains("group-delay"),
        "{err}"
    );
    let (code, err) = run(&[
        "qualify",
        "--dsim-url",
        "http://127.0.0.1:9",
        "--engine-url",
        "http://127.0.0.1:9",
        "--dst",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
    let help = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["qualify", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for name in [
        "channelisation",
        "linearity",
        "application-time",
        "lost-data",
    ] {
        assert!(help.contains(name), "--help lists {name}: {help}");
    }
}

//! `harness soak` against real `dsim` and `fengine` binaries (CPU backend) on loopback, scaled
//! down: a clean soak of 20 s with a sample every 4 s (memory judged from 12 s) passes and records every process's
//! resources and counters, and one with a heap dropped mid-soak fails on the losses it caused.
//!
//! NEEDS THE OTHER BINARIES (see [`support`]): without them these tests print SKIP and pass,
//! except in CI (`CI` set), where they fail.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;
use support::{binaries, rate};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harness-soak-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `harness soak` on the shared local system, its rate given by `rate_args` instead of
/// --adc-rate.
fn soak(args: &[&str], rate_args: &[String], dir: &Path, dsim_args: &str) -> Option<Output> {
    let bins = binaries()?;
    let mut system = support::local_system(&bins, &dir.join("logs"), dsim_args);
    let at = system.iter().position(|a| a == "--adc-rate").unwrap();
    system.drain(at..at + 2);
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("soak")
        .args(args)
        .args(rate_args)
        .args(["--out-dir", dir.to_str().unwrap()])
        .args(system)
        .output()
        .expect("harness runs");
    eprintln!(
        "harness soak exited {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out)
}

fn json_file(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// Half of a max rate read from a max-rate.json: every sample has every process's resources,
/// no loss counter moved, the rate is the one asked for, and the plots are written.
#[test]
fn a_clean_soak_passes_with_every_process_sampled() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir("clean");
    let max = dir.join("max-rate.json");
    std::fs::write(
        &max,
        format!(
            r#"{{"searches": [{{"backend": "cpu", "best": {}}}, {{"backend": "null", "best": 1e12}}]}}"#,
            2.0 * rate()
        ),
    )
    .unwrap();
    let rate_args = [
        "--max-rate-json".to_string(),
        max.display().to_string(),
        "--fraction".into(),
        "0.5".into(),
    ];
    let Some(out) = soak(
        &[
            "--duration",
            "20",
            "--interval",
            "4",
            // After the harness's interval feed (16 records, one a second) has filled.
            "--baseline",
            "12",
            "--warmup",
            "5",
        ],
        &rate_args,
        &dir,
        "--buffer-heaps 512",
    ) else {
        return;
    };
    let r = json_file(&dir.join("soak.json"));
    assert_eq!(out.status.code(), Some(0), "{:#}", r["reasons"]);
    assert_eq!(r["pass"], true);
    assert_eq!(r["rate"].as_f64(), Some(rate()));
    assert!(
        r["rate_source"].as_str().unwrap().starts_with("0.5 of "),
        "{}",
        r["rate_source"]
    );
    let samples = r["samples"].as_array().unwrap();
    let times: Vec<f64> = samples
        .iter()
        .map(|s| (s["elapsed_s"].as_f64().unwrap() / 4.0).round() * 4.0)
        .collect();
    assert_eq!(times, vec![0.0, 4.0, 8.0, 12.0, 16.0, 20.0]);
    for s in samples {
        for p in ["fengine", "dsim", "harness"] {
            let proc = &s["processes"][p];
            for key in [
                "resident_bytes",
                "open_fds",
                "threads",
                "start_time_seconds",
            ] {
                assert!(
                    proc[key].as_f64().is_some_and(|v| v > 0.0),
                    "{p} {key} at {}: {proc:#}",
                    s["elapsed_s"]
                );
            }
        }
        for key in [
            "harness_gaps",
            "harness_late",
            "harness_malformed",
            "harness_socket_drops",
            "engine_missing_input",
            "engine_skipped_output",
            "engine_input_socket_drops",
            "dsim_heaps_skipped",
            "content_wrong_channel",
        ] {
            assert_eq!(s["losses"][key].as_f64(), Some(0.0), "{key}: {s:#}");
        }
    }
    let received = r["received_rate"].as_f64().unwrap();
    assert!(
        (received / rate() - 1.0).abs() < 0.02,
        "received {received}"
    );
    for p in ["fengine", "dsim", "harness"] {
        let summary = &r["processes"][p];
        assert_eq!(summary["baseline_s"].as_f64().map(f64::round), Some(12.0));
        assert!(
            summary["peak_rss_bytes"].as_u64().unwrap() > 0,
            "{summary:#}"
        );
    }
    for svg in ["soak-rss.svg", "soak-growth.svg"] {
        let text = std::fs::read_to_string(dir.join(svg)).unwrap();
        assert!(
            text.starts_with("<svg") && text.contains("fengine"),
            "{svg}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A heap dropped by dsim a few seconds into the soak: the soak fails, naming the engine's
/// missing input and the gap the harness saw.
#[test]
fn a_dropped_heap_fails_the_soak() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir("drop");
    // dsim's heap k is its k-th since it started, about 2 s before the watch does: heap k at
    // 5 s is about 3 s into a soak after a 1 s warm-up.
    let heap = (5.0 * rate() / 4096.0) as u64;
    let faults =
        format!("--buffer-heaps 512 --faults '{{\"pol0\":{{\"drop\":{{\"heaps\":[{heap}]}}}}}}'");
    let Some(out) = soak(
        &[
            "--duration",
            "8",
            "--interval",
            "2",
            "--baseline",
            "2",
            "--warmup",
            "1",
        ],
        &["--adc-rate".into(), rate().to_string()],
        &dir,
        &faults,
    ) else {
        return;
    };
    let r = json_file(&dir.join("soak.json"));
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    assert_eq!(r["pass"], false);
    let reasons: Vec<&str> = r["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|x| x.starts_with("engine_missing_input: 1 ")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|x| x.starts_with("harness_gaps: ")),
        "{reasons:?}"
    );
    assert!(r["losses"]["engine_skipped_output"].as_f64().unwrap() > 0.0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("soak: FAIL"), "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

//! What the end-to-end tests share: the binaries of the system under test, and the arguments of
//! a small local system (dsim and a CPU engine on loopback) that a 2-core machine carries.
//!
//! The binaries are `dsim` and `fengine` next to the harness binary (`target/<profile>/`), as
//! `cargo test --workspace` builds them. The ADC rate is HARNESS_E2E_RATE (sample/s, default
//! 16e6); a debug build of the engine needs about 1e6.

#![allow(dead_code)] // each test file uses its part

pub(crate) mod cdp;

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) const CHANNELS: u64 = 1024;
pub(crate) const SPECTRA: u64 = 64;
pub(crate) const TAPS: u64 = 16;

pub(crate) fn rate() -> f64 {
    std::env::var("HARNESS_E2E_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(16e6)
}

/// Whether a missing prerequisite fails the test (in CI) rather than skipping it.
pub(crate) fn skip_or_fail(msg: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIP: {msg}");
}

/// The dsim and fengine binaries, if built (and real: a placeholder has no --src-pol0).
pub(crate) fn binaries() -> Option<(PathBuf, PathBuf)> {
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let dir = harness.parent().expect("binary has a directory");
    let dsim = dir.join("dsim");
    let fengine = dir.join("fengine");
    let real = |bin: &Path, flag: &str| {
        Command::new(bin)
            .arg("--help")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
            .unwrap_or(false)
    };
    if real(&dsim, "--pol0-dest") && real(&fengine, "--src-pol0") {
        return Some((dsim, fengine));
    }
    skip_or_fail(&format!(
        "dsim and fengine binaries not found (or not complete) in {}: build the workspace \
         (cargo test --workspace builds them)",
        dir.display()
    ));
    None
}

/// The harness arguments of the shared local system, after the command's own.
pub(crate) fn local_system(bins: &(PathBuf, PathBuf), logs: &Path, dsim_args: &str) -> Vec<String> {
    let s = |x: &str| x.to_string();
    vec![
        s("--local"),
        s("--dsim-bin"),
        bins.0.display().to_string(),
        s("--fengine-bin"),
        bins.1.display().to_string(),
        s("--channels"),
        CHANNELS.to_string(),
        s("--spectra-per-heap"),
        SPECTRA.to_string(),
        s("--taps"),
        TAPS.to_string(),
        s("--adc-rate"),
        rate().to_string(),
        s("--substreams"),
        s("4"),
        // Each polarisation over two loopback addresses, one engine receive thread each.
        s("--input-addresses"),
        s("2"),
        s("--log-dir"),
        logs.display().to_string(),
        s("--dsim-args"),
        s(dsim_args),
        // Small frames: the engine's latency is a few frames, and the tests are short. Two send
        // threads (two substreams each), so that the gap checks cover the split output.
        s("--fengine-args"),
        s("--heaps-per-frame 2 --send-threads 2 --recv-threads 2"),
    ]
}

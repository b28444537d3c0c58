//! SIGTERM stops the engine cleanly (exit status 0, its totals logged) however early it comes:
//! right after the first line the engine logs, before the pipeline or the control server has
//! started, and once it runs.

use std::process::Command;
use std::time::Duration;

use crate::setup::{serial, Setup};
use crate::system::{fengine_binary, Proc};

fn engine(s: &Setup) -> Proc {
    let mut cmd = Command::new(fengine_binary());
    cmd.args([
        "run",
        "--src-pol0",
        "127.0.0.1:0",
        "--src-pol1",
        "127.0.0.1:0",
    ])
    .args(["--dst", "127.0.0.1:9", "--control", "127.0.0.1:0"])
    .args(["--channels", &s.channels.to_string()])
    .args(["--taps", &s.taps.to_string()])
    .args(["--spectra-per-heap", &s.spectra_per_heap.to_string()])
    .args(["--heaps-per-frame", &s.heaps_per_frame.to_string()])
    .args(["--heap-samples", &s.heap_samples.to_string()])
    .args(["--sample-bits", &s.sample_bits.to_string()])
    .args(["--adc-sample-rate", &s.rate.to_string()])
    .args(["--max-delay", "1e-6"])
    .args(["--backend", &s.backend])
    .args(["--socket-buffer", &(4 << 20).to_string()])
    .env("RUST_LOG", "info");
    Proc::spawn("fengine", cmd)
}

fn stops_cleanly_after(line: &str) {
    let _turn = serial();
    let mut e = engine(&Setup::new());
    e.wait_for(line, Duration::from_secs(60));
    let status = e.terminate(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM after {line:?}: {status}");
    e.wait_for("SIGTERM: stopping", Duration::from_secs(5));
    e.wait_for("stopped", Duration::from_secs(5));
}

#[test]
fn sigterm_at_the_first_log_line_stops_the_engine_cleanly() {
    stops_cleanly_after("configuration: input");
}

#[test]
fn sigterm_once_running_stops_the_engine_cleanly() {
    stops_cleanly_after("control listening on ");
}

//! SIGTERM stops the engine cleanly (exit status 0, its totals logged) however early it comes:
//! right after the first line the engine logs, before the pipeline or the control server has
//! started, and once it runs.

use std::time::Duration;

use crate::setup::{serial, Setup};
use crate::system::{engine_command, Proc};

/// The engine on free ports, sending to the discard port, with no digitiser.
fn engine(s: &Setup) -> Proc {
    let srcs = ["127.0.0.1:0".to_string(), "127.0.0.1:0".to_string()];
    let outputs = ["--dst".to_string(), "127.0.0.1:9".to_string()];
    Proc::spawn("fengine", engine_command(s, &srcs, 1e-6, &outputs))
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

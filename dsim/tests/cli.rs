//! The dsim binary as other projects' tests use it: --help, argument errors, a run with the
//! control server found from the log, and SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{decode, Capture};

fn dsim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsim"))
}

#[test]
fn help_explains_every_option_with_its_unit_and_default() {
    let out = dsim().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for opt in [
        "--pol0-dest",
        "--pol1-dest",
        "--rate",
        "--sync-time",
        "--heap-samples",
        "--sample-bits",
        "--signal",
        "--tone",
        "--noise",
        "--dither",
        "--no-dither",
        "--delay0",
        "--delay1",
        "--seed",
        "--buffer-heaps",
        "--threads",
        "--interface",
        "--ttl",
        "--digitiser-id",
        "--heaps",
        "--duration",
        "--control",
        "--control-token",
        "--send-stop",
        "--faults",
    ] {
        assert!(help.contains(opt), "--help lacks {opt}");
    }
    for words in [
        "samples/s",
        "[default: 4096]",
        "[default: 10]",
        "[default: 8192]",
        "repeats",
        "control listening on",
        "PUT /signal",
        "x(t + delay0)",
    ] {
        assert!(help.contains(words), "--help lacks {words:?}");
    }
    let bench = dsim().args(["bench", "--help"]).output().unwrap();
    assert!(String::from_utf8(bench.stdout)
        .unwrap()
        .contains("--seconds"));
}

#[test]
fn bad_arguments_exit_with_a_reason() {
    let out = dsim()
        .args(["--pol0-dest", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pol1-dest"));

    let out = dsim()
        .args(["--pol0-dest", "127.0.0.1:1", "--pol1-dest", "127.0.0.1:2"])
        .args(["--sample-bits", "17"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sample width 17 bits is not between 2 and 16."),
        "{err}"
    );

    // The per-polarisation signal instead of the common-form flags, not with them.
    let out = dsim()
        .args(["--pol0-dest", "127.0.0.1:1", "--pol1-dest", "127.0.0.1:2"])
        .args([
            "--signal",
            r#"{"pol1": {"components": []}}"#,
            "--tone",
            "1e6:0.1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--signal") && err.contains("--tone") && err.contains("cannot be used with"),
        "{err}"
    );
    let out = dsim()
        .args(["--pol0-dest", "127.0.0.1:1", "--pol1-dest", "127.0.0.1:2"])
        .args(["--signal", r#"{"pol1": {"componets": []}}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pol1: unknown field `componets`"), "{err}");
}

/// Reads dsim's log lines from stderr on a thread; sends each one on.
fn log_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for(lines: &mpsc::Receiver<String>, needle: &str) -> String {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no log line with {needle:?}"));
        if let Some(at) = line.find(needle) {
            return line[at + needle.len()..].trim().to_string();
        }
    }
}

#[test]
fn runs_as_a_process_and_reports_its_control_address() {
    let cap = Capture::start([1, 1]);
    let mut child = dsim()
        .args(["--pol0-dest", &cap.endpoints[0].to_string()])
        .args(["--pol1-dest", &cap.endpoints[1].to_string()])
        .args([
            "--rate",
            "2e7",
            "--heaps",
            "2000",
            "--buffer-heaps",
            "96",
            "--threads",
            "1",
        ])
        .args(["--control", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = log_lines(&mut child);
    let addr = wait_for(&lines, "control listening on ");
    assert!(
        !addr.contains('\u{1b}'),
        "no colour codes when stderr is not a terminal"
    );
    let url = format!("http://{addr}/status");
    let status: serde_json::Value = ureq::get(&url)
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    assert_eq!(status["rate"], 2e7);
    assert_eq!(
        status["end_heap"].as_u64().unwrap() - status["first_heap"].as_u64().unwrap(),
        2000
    );
    let code = child.wait().unwrap();
    assert!(code.success());
    let got = cap.finish(Duration::from_millis(200));
    for arrivals in &got {
        assert_eq!(decode(arrivals, 10).0.len(), 2000);
    }
}

#[test]
fn sigterm_stops_it_cleanly() {
    let mut child = dsim()
        .args(["--pol0-dest", "127.0.0.1:9", "--pol1-dest", "127.0.0.1:9"])
        .args(["--rate", "1e6", "--buffer-heaps", "12", "--threads", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = log_lines(&mut child);
    wait_for(&lines, "sending");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_for(&lines, "SIGTERM: stopping");
    assert!(child.wait().unwrap().success());
}

/// DSIM_CONTROL_TOKEN sets the token: changes need it, reads do not, and --help names the
/// variable without showing its value.
#[test]
fn the_control_token_comes_from_the_environment() {
    let help = dsim()
        .arg("--help")
        .env("DSIM_CONTROL_TOKEN", "env-t0ken")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("[env: DSIM_CONTROL_TOKEN]"), "{help}");
    assert!(!help.contains("env-t0ken"), "--help shows the token");

    let mut child = dsim()
        .args(["--pol0-dest", "127.0.0.1:9", "--pol1-dest", "127.0.0.1:9"])
        .args(["--rate", "1e6", "--buffer-heaps", "12", "--threads", "1"])
        .args(["--control", "127.0.0.1:0"])
        .env("DSIM_CONTROL_TOKEN", "env-t0ken")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = log_lines(&mut child);
    let addr = wait_for(&lines, "control listening on ");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let url = |path: &str| format!("http://{addr}{path}");
    let put = |auth: Option<&str>| {
        let r = agent.put(url("/rate"));
        let r = match auth {
            Some(a) => r.header("Authorization", a),
            None => r,
        };
        r.send(r#"{"rate": 2e6}"#).unwrap().status().as_u16()
    };
    assert_eq!(put(None), 401);
    assert_eq!(put(Some("Bearer env-t0ke")), 401);
    assert_eq!(put(Some("Bearer env-t0ken")), 200);
    let status = agent.get(url("/status")).call().unwrap();
    assert_eq!(status.status().as_u16(), 200);
    let _ = child.kill();
    let _ = child.wait();
}

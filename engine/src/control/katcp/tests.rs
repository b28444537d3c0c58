//! The katcp front with a real client: aiokatcp (Python, from PyPI) drives every request, reads
//! every sensor and samples some (engine/tests/py/katcp_front.py); the pipeline's end of the
//! command queue and the engine's refusal count say what changed. Without aiokatcp the test skips
//! with a sentence, except under CI, where it fails.

use std::path::PathBuf;
use std::process::{Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::controller::tests::controller_with;
use super::*;
use crate::signal::power::InputPower;

/// True when aiokatcp can be imported; without it the test fails in CI and is skipped elsewhere.
fn aiokatcp_available() -> bool {
    let ok = Process::new("python3")
        .args(["-c", "import aiokatcp"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "aiokatcp is not installed: python3 -m pip install aiokatcp"
        );
        eprintln!("skipped: aiokatcp is not installed (python3 -m pip install aiokatcp)");
    }
    ok
}

/// A controller of a wideband output `wide` (16 channels) and a narrowband `nb` (64), sync time
/// 1e9, 1 MHz, --max-delay 1 ms; and a thread that counts the commands the pipeline would get.
fn engine() -> (Arc<Controller>, Arc<AtomicUsize>, Arc<AtomicBool>) {
    let (c, rx) = controller_with(&[
        "--wideband",
        "wide:dst=127.0.0.1:7150",
        "--narrowband",
        "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=200e3,taps=4",
        "--sync-time",
        "1e9",
    ]);
    let c = Arc::new(c);
    let commands = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (n, d) = (commands.clone(), done.clone());
    std::thread::spawn(move || {
        while !d.load(Relaxed) {
            if rx.recv_timeout(Duration::from_millis(20)).is_ok() {
                n.fetch_add(1, Relaxed);
            }
        }
    });
    (c, commands, done)
}

#[test]
fn aiokatcp_drives_every_request_and_sensor() {
    if !aiokatcp_available() {
        return;
    }
    let (c, commands, done) = engine();
    // The counters the script expects (katcp_front.py).
    let s = &c.stats;
    s.pols[0].digitiser_clip_samples.store(900, Relaxed);
    s.pols[1].record_input(
        InputPower {
            sum_squares: 511 * 511 / 2 * 1000,
            full_scale: 7,
        },
        1000,
        10,
    );
    s.outputs[0].saturated[1].store(3, Relaxed);
    for p in &s.pols {
        p.last_timestamp.store(4_096_000, Relaxed);
    }
    s.pols[1].heaps_missing.store(2, Relaxed);
    // Input keeps coming (and input1 keeps losing heaps) while the script runs.
    let feed = {
        let (c, done) = (c.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                for p in &c.stats.pols {
                    p.last_timestamp.fetch_add(1024, Relaxed);
                }
                c.stats.pols[1].heaps_missing.fetch_add(1, Relaxed);
            }
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(serve(listener, c.clone()));

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/katcp_front.py");
    let mut child = Process::new("python3")
        .arg(script)
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the aiokatcp script did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "aiokatcp script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count = |key: &str| -> usize {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} line in {stdout}"))
    };
    // Let the command counter catch up, then compare with what the script changed.
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, Relaxed);
    feed.join().unwrap();
    assert_eq!(commands.load(Relaxed), count("changes"));
    assert_eq!(s.control_rejected.load(Relaxed) as usize, count("refusals"));
    assert!(!c.running(), "?halt stops the engine");
}

/// The rx sensors go to error once no new timestamp has come for the timeout, and missing data
/// stops being an error once the timeout passes without more.
#[test]
fn rx_sensors_time_out() {
    let (c, _commands, done) = engine();
    let mut sensors = EngineSensors::new(&c);
    sensors.timeout = Duration::from_millis(50);
    let status = |s: &EngineSensors, n: &str| s.sensors.get(n).unwrap().reading.status;
    assert_eq!(
        status(&sensors, "input0.rx.timestamp"),
        Status::Error,
        "no data yet"
    );
    c.stats.pols[0].last_timestamp.store(8192, Relaxed);
    c.stats.pols[0].heaps_missing.store(1, Relaxed);
    sensors.refresh(&c);
    assert_eq!(status(&sensors, "input0.rx.timestamp"), Status::Nominal);
    assert_eq!(
        status(&sensors, "input0.rx.missing-unixtime"),
        Status::Error
    );
    assert_eq!(
        sensors
            .sensors
            .get("rx.device-status")
            .unwrap()
            .reading
            .value,
        Value::Text("degraded".into())
    );
    std::thread::sleep(Duration::from_millis(80));
    sensors.refresh(&c);
    assert_eq!(status(&sensors, "input0.rx.timestamp"), Status::Error);
    assert_eq!(status(&sensors, "input0.rx.unixtime"), Status::Error);
    assert_eq!(
        status(&sensors, "input0.rx.missing-unixtime"),
        Status::Nominal
    );
    c.stats.pols[0].last_timestamp.store(16384, Relaxed);
    sensors.refresh(&c);
    assert_eq!(status(&sensors, "input0.rx.timestamp"), Status::Nominal);
    done.store(true, Relaxed);
}

use katcp_server::{Status, Value};

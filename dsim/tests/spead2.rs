//! Interoperability: the dsim binary sends, Python spead2 (the reference implementation) receives
//! both polarisations and decodes heaps, items and samples.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsim::config::SignalSpec;
use dsim::signal::Generator;
use dsim::Signal;
use dsim::Tone;
use serde_json::Value;

const HEAPS: u64 = 64;
const HS: usize = 4096;
const N: usize = 65536;
const BIN: usize = 5000;
const RATE: f64 = 2e7;

/// True when spead2 can be used; without it the test fails in CI and is skipped elsewhere.
fn spead2_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import spead2, numpy"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "spead2 is not installed (CI is set, so this is an error): pip install spead2 numpy"
        );
        eprintln!("skipped: spead2 not installed");
    }
    ok
}

#[test]
fn spead2_decodes_what_dsim_sends() {
    if !spead2_available() {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/recv_dsim.py");
    let mut py = Command::new("python3")
        .arg(script)
        .args([
            HEAPS.to_string(),
            "10".into(),
            HS.to_string(),
            N.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Lines arrive on a channel, so a stuck interpreter fails the test instead of hanging it.
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = py.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let Ok(ready) = lines.recv_timeout(Duration::from_secs(60)) else {
        let _ = py.kill();
        panic!("the spead2 receiver did not start within 60 s");
    };
    let ports: Vec<&str> = ready.strip_prefix("PORTS ").unwrap().split(' ').collect();

    let freq = BIN as f64 * RATE / N as f64;
    let status = Command::new(env!("CARGO_BIN_EXE_dsim"))
        .args(["--pol0-dest", &format!("127.0.0.1:{}", ports[0])])
        .args(["--pol1-dest", &format!("127.0.0.1:{}", ports[1])])
        .args(["--rate", &RATE.to_string(), "--heaps", &HEAPS.to_string()])
        .args([
            "--tone",
            &format!("{freq}:0.5"),
            "--noise",
            "0.01",
            "--seed",
            "3",
        ])
        .args(["--buffer-heaps", "96", "--threads", "1", "--send-stop"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());

    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        if let Some(s) = py.try_wait().unwrap() {
            assert!(s.success(), "spead2 receiver failed");
            break lines.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        if Instant::now() > deadline {
            let _ = py.kill();
            panic!("spead2 did not see the stream stop");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pols: Vec<Value> = serde_json::from_str(&out).unwrap();

    // What dsim generated for the same settings (buffer of 96 heaps, one batch of 12 per thread).
    let spec = SignalSpec {
        tones: vec![Tone {
            frequency: freq,
            amplitude: 0.5,
        }],
        noise: 0.01,
        seed: 3,
        ..Default::default()
    };
    for (p, r) in pols.iter().enumerate() {
        assert_eq!(r["count"], HEAPS, "pol {p}: {r}");
        assert_eq!(r["contiguous"], true);
        assert_eq!(r["cnt_is_ts_over_heap_samples"], true);
        assert_eq!(r["ids"], serde_json::json!([p]));
        assert_eq!(r["statuses"], serde_json::json!([0]));
        assert_eq!(r["samples_per_heap"], serde_json::json!([HS]));
        assert_eq!(r["peak_bin"], BIN);
        let amp = r["peak_amplitude"].as_f64().unwrap();
        assert!((amp - 0.5).abs() < 0.005, "amplitude {amp}");

        let first = r["first_ts"].as_u64().unwrap() / HS as u64;
        let g = Generator::new(&Signal::from_common(&spec), RATE, p, HS, 10, 96 * HS as u64);
        let mut want = vec![0i16; HS];
        g.heap(first % 96, &mut want);
        let got: Vec<i16> = r["first_samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap() as i16)
            .collect();
        assert_eq!(
            got,
            want[..8],
            "pol {p}: spead2's samples are the generator's"
        );
    }
}

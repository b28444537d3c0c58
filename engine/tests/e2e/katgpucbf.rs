//! The engine started with the command line katsdpcontroller generates for fgpu
//! (tests/fixtures/fgpu-wideband-narrowband.args: one wideband and one narrowband output), run
//! as `fgpu` (a link to the engine's binary, as in the engine image), streams on both outputs.
//!
//! Only what this host forces is rewritten: the network device (`lo`), the multicast groups
//! (unicast loopback ports: the sources, and one receiver per output), the ports, the cores (this
//! host's), the ADC rate (16 Msample/s, which the CPU backend keeps up with) and the narrowband
//! centre (inside that band). `schedrr` is left out: as root it would give the engine SCHED_RR
//! on a shared machine. `taskset` stays, so the threads fgpu pins outside its start core are let
//! onto their cores as in a deployment.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

use crate::capture::Output;
use crate::client::Control;
use crate::setup::serial;
use crate::system::{dsim_binary, fengine_binary, Proc};

const RATE: f64 = 16e6;
/// The fixture's outputs: 4096 channels, 256 spectra a heap (jones_per_batch 2^20), both pols.
const HEAP_BYTES: usize = 4096 * 256 * 2 * 2;

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
        .port()
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
        .port()
}

/// The fixture's arguments, one a line, from `taskset` on (schedrr left out).
fn fixture() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fgpu-wideband-narrowband.args"
    );
    std::fs::read_to_string(path)
        .expect("the fixture")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .skip_while(|l| *l != "taskset")
        .map(String::from)
        .collect()
}

/// The first and last of the cores this test may use.
fn cores() -> (usize, usize) {
    let allowed = placement::CoreSet::allowed().expect("this process's cores");
    let c = allowed.cores();
    (c[0], c[c.len() - 1])
}

#[test]
fn the_generators_fgpu_line_streams_on_both_outputs() {
    let _turn = serial();
    if cfg!(debug_assertions) {
        eprintln!(
            "skipped: the fixture's 4096 channels need a release build (cargo test --release)"
        );
        return;
    }
    let wide = Output::start();
    let narrow = Output::start();
    let src = [free_port(), free_port()];
    let (katcp_port, prometheus_port) = (free_tcp_port(), free_tcp_port());
    let (first, last) = cores();
    let rewrite = |arg: &str| -> String {
        let arg = arg
            .replace("enp193s0f0np0", "lo")
            .replace("1712000000.0", &RATE.to_string())
            .replace("centre_frequency=300000000.0", "centre_frequency=4000000.0")
            .replace("239.192.0.16+3:7148", &wide.addr.to_string())
            .replace("239.192.0.20+3:7148", &narrow.addr.to_string())
            .replace(
                "239.192.0.0+7:7148,239.192.0.8+7:7148",
                &format!("127.0.0.1:{},127.0.0.1:{}", src[0], src[1]),
            )
            .replace("--katcp-port=37541", &format!("--katcp-port={katcp_port}"))
            .replace(
                "--prometheus-port=37542",
                &format!("--prometheus-port={prometheus_port}"),
            );
        match arg.as_str() {
            "10" => first.to_string(),
            "--recv-affinity=8" | "--recv-comp-vector=8" => arg.replace('8', &last.to_string()),
            "--send-affinity=9" | "--send-comp-vector=9" => arg.replace('9', &last.to_string()),
            _ => arg,
        }
    };
    let argv: Vec<String> = fixture().iter().map(|a| rewrite(a)).collect();
    assert_eq!(
        argv[..4],
        ["taskset", "-c", first.to_string().as_str(), "fgpu"]
    );
    // `fgpu` is the engine's binary under that name, as the engine image links it.
    let dir = std::env::temp_dir().join(format!("fgpu-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fgpu = dir.join("fgpu");
    let _ = std::fs::remove_file(&fgpu);
    std::os::unix::fs::symlink(fengine_binary(), &fgpu).unwrap();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..3]).arg(&fgpu).args(&argv[4..]);
    cmd.env("RUST_LOG", "info");
    let mut engine = Proc::spawn("fgpu", cmd);
    let line = engine.wait_for("katgpucbf form: running as ", Duration::from_secs(30));
    assert!(
        line.starts_with("fengine run --src-pol0 127.0.0.1:"),
        "{line}"
    );
    let http = engine.control_addr();
    assert_eq!(http.to_string(), format!("0.0.0.0:{prometheus_port}"));
    let control = Control::new(([127, 0, 0, 1], prometheus_port).into());

    let mut dsim = Command::new(dsim_binary());
    dsim.args(["--pol0-dest", &format!("127.0.0.1:{}", src[0])])
        .args(["--pol1-dest", &format!("127.0.0.1:{}", src[1])])
        .args(["--rate", &RATE.to_string()])
        .args(["--tone", "3e6:0.1", "--noise", "0.02", "--threads", "1"])
        .args(["--buffer-heaps", "1024"])
        .env("RUST_LOG", "info");
    let _dsim = Proc::spawn("dsim", dsim);

    // Both outputs stream, in heaps of the fixture's shape.
    for (name, rx) in [("wideband", &wide), ("narrowband", &narrow)] {
        rx.wait_count(3, Duration::from_secs(90));
        let from = rx.newest().unwrap() + 1;
        let heaps = rx.capture(from, 1, Duration::from_secs(60));
        assert_eq!(heaps[0].data.len(), HEAP_BYTES, "{name}: heap size");
        assert!(
            heaps[0].data.iter().any(|&v| v != 0),
            "{name}: a heap of zeros"
        );
        assert_eq!(rx.repeats(), 0, "{name}: a heap sent twice");
    }

    // katcp where --katcp-port put it (every interface), the HTTP API on --prometheus-port.
    let mut katcp = TcpStream::connect(("127.0.0.1", katcp_port)).expect("katcp answers");
    katcp
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    katcp.write_all(b"?watchdog\n").unwrap();
    let reply = BufReader::new(&katcp)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("!watchdog"))
        .expect("a reply to ?watchdog");
    assert_eq!(reply, "!watchdog ok");
    let metrics = control.get_text("/metrics");
    assert!(
        metrics.contains("# TYPE"),
        "Prometheus text: {metrics:.200}"
    );

    let status = engine.terminate(Duration::from_secs(30));
    assert!(status.success(), "the engine's exit: {status}");
    let _ = std::fs::remove_dir_all(dir);
}

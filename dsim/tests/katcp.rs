//! The katcp front against a running dsim, with a plain line client: `?time`, dsim's sensors as
//! katgpucbf names them, a change over HTTP seen in `steady-state-timestamp`, `?signals` and its
//! sensors, refusals, `?halt`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{config, Capture};
use dsim::Dsim;
use katcp_server::sensor::float;

struct Client {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
}

impl Client {
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.rd.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    }

    /// Every line up to and including the reply to `req`.
    fn ask(&mut self, req: &str) -> Vec<String> {
        self.wr.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut lines = Vec::new();
        loop {
            let l = self.line();
            let done = l.starts_with('!');
            lines.push(l);
            if done {
                return lines;
            }
        }
    }

    /// A sensor's `STATUS VALUE` through ?sensor-value.
    fn value(&mut self, name: &str) -> String {
        let got = self.ask(&format!("?sensor-value {name}"));
        assert_eq!(got.last().unwrap(), "!sensor-value ok 1", "{got:?}");
        let words: Vec<&str> = got[0].split(' ').collect();
        words[4..].join(" ")
    }
}

#[test]
fn katcp_reports_dsims_sensors_and_time() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = 1e7;
    cfg.control = Some("127.0.0.1:0".parse().unwrap());
    let d = Dsim::start(cfg).unwrap();
    let (addr, server) =
        dsim::katcp::start("127.0.0.1:0".parse().unwrap(), d.controller().clone()).unwrap();
    let wr = TcpStream::connect(addr).unwrap();
    wr.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut c = Client {
        rd: BufReader::new(wr.try_clone().unwrap()),
        wr,
    };
    assert_eq!(c.line(), "#version-connect katcp-protocol 5.1-MIB");
    c.line();
    assert!(c
        .line()
        .starts_with("#version-connect katcp-device katgpucbf-dsim-1.0 dsim-"));

    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let t = c.ask("?time");
    let t: f64 = t[0].strip_prefix("!time ok ").unwrap().parse().unwrap();
    assert!((t - before).abs() < 5.0, "{t} vs {before}");
    assert!(c.ask("?time now")[0].starts_with("!time fail ?time\\_takes\\_no\\_arguments"));

    let st = d.status();
    assert_eq!(c.value("adc-sample-rate"), "nominal 10000000.0");
    assert_eq!(
        c.value("sample-bits"),
        format!("nominal {}", st.sample_bits)
    );
    assert_eq!(
        c.value("sync-time"),
        format!("nominal {}", float(st.sync_time))
    );
    assert_eq!(
        c.value("dither-seed"),
        format!("nominal {}", st.signal.seed)
    );
    let steady = st.signal.from_heap * st.heap_samples as u64;
    assert_eq!(
        c.value("steady-state-timestamp"),
        format!("nominal {steady}")
    );
    assert_eq!(
        c.ask("?sensor-list adc-sample-rate")[0],
        "#sensor-list adc-sample-rate Rate\\_at\\_which\\_samples\\_are\\_generated Hz float"
    );

    // A change over HTTP moves the steady state to the heap it applies from.
    let change = d
        .controller()
        .set_signal(&serde_json::from_str(r#"{"noise": 0.1}"#).unwrap())
        .unwrap();
    let want = format!("nominal {}", change.from_timestamp);
    let mut got = String::new();
    for _ in 0..40 {
        got = c.value("steady-state-timestamp");
        if got == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(got, want);

    // ?signals: katgpucbf's language; the reply names the first timestamp carrying it, and the
    // sensors follow at once.
    let max_period = c.value("max-period");
    let buffer = (d.status().buffer_heaps * d.status().heap_samples) as u64;
    assert_eq!(max_period, format!("nominal {buffer}"));
    assert_eq!(c.value("signals"), "nominal \\@");
    let r = c.ask("?signals cw(0.1,1e6);\\_0; 4096");
    let ts: u64 = r[0]
        .strip_prefix("!signals ok ")
        .unwrap_or_else(|| panic!("{r:?}"))
        .parse()
        .unwrap();
    assert_eq!(ts % 4096, 0);
    assert!(ts >= change.from_timestamp);
    assert_eq!(c.value("signals"), "nominal cw(0.1,\\_1000000.0);\\_0.0;");
    assert_eq!(c.value("signals-orig"), "nominal cw(0.1,1e6);\\_0;");
    assert_eq!(c.value("period"), "nominal 4096");
    assert_eq!(c.value("steady-state-timestamp"), format!("nominal {ts}"));
    assert_eq!(d.status().signal.signals.unwrap().period, 4096);

    // A bad spec or period fails with one sentence and changes nothing.
    for (req, want) in [
        (
            "?signals wgn(0.1)",
            "!signals fail at\\_character\\_9:\\_expected\\_';'\\_after\\_the\\_expression,\\_found\\_the\\_end\\_of\\_the\\_spec.",
        ),
        (
            "?signals nodither(1)*2;",
            "!signals fail at\\_character\\_12:\\_signal\\_'nodither(1.0)'\\_cannot\\_be\\_used\\_in\\_a\\_larger\\_expression.",
        ),
        (
            "?signals 0; 4095",
            "!signals fail period\\_4095\\_does\\_not\\_divide\\_the\\_buffer",
        ),
        (
            "?signals 0; four",
            "!signals fail period\\_'four'\\_is\\_not\\_a\\_whole\\_number\\_of\\_samples.",
        ),
        (
            "?signals",
            "!signals fail ?signals\\_takes\\_a\\_spec\\_and\\_optionally\\_a\\_period,\\_not\\_0\\_argument(s).",
        ),
    ] {
        let got = c.ask(req);
        assert!(got[0].starts_with(want), "{req}: {got:?}");
    }
    assert_eq!(c.value("signals"), "nominal cw(0.1,\\_1000000.0);\\_0.0;");
    assert_eq!(c.value("period"), "nominal 4096");
    assert_eq!(c.ask("?halt"), ["!halt ok"]);
    assert_eq!(c.line(), "#disconnect server\\_shutting\\_down");
    d.wait();
    server.join().unwrap();
}

/// Whether python3 has aiokatcp; without it the test skips, except under CI.
fn aiokatcp_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import aiokatcp"])
        .stderr(std::process::Stdio::null())
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

#[test]
fn aiokatcp_sets_signals_and_reads_their_sensors() {
    if !aiokatcp_available() {
        return;
    }
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = 1e7;
    let d = Dsim::start(cfg).unwrap();
    let (addr, server) =
        dsim::katcp::start("127.0.0.1:0".parse().unwrap(), d.controller().clone()).unwrap();
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/katcp_signals.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(addr.port().to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "aiokatcp script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ts: u64 = stdout
        .trim()
        .strip_prefix("ok ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let st = d.status();
    assert_eq!(ts, st.signal.from_heap * st.heap_samples as u64);
    d.stop();
    server.join().unwrap();
}

//! The katcp front against a running dsim, with a plain line client: `?time`, dsim's sensors as
//! katgpucbf names them, a change over HTTP seen in `steady-state-timestamp`, refusals, `?halt`.

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

    assert!(c.ask("?signals wgn(0.1)")[0].starts_with("!signals invalid "));
    assert_eq!(c.ask("?halt"), ["!halt ok"]);
    assert_eq!(c.line(), "#disconnect server\\_shutting\\_down");
    d.wait();
    server.join().unwrap();
}

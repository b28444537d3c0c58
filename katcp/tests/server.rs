//! The server over TCP on loopback, with a plain line client: the informs on connection, the
//! standard requests, sampling strategies, the program's requests and refusals.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use katcp_server::{
    Answer, Config, Description, Handler, Reply, RequestHelp, SensorType, Sensors, Server, Status,
    Strategy, Value,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// `?echo ARGS...` answers them back after an inform; `?refuse` fails.
struct Echo;

impl Handler for Echo {
    fn requests(&self) -> Vec<RequestHelp> {
        vec![
            RequestHelp {
                name: "echo".into(),
                help: "Echo the arguments.\n?echo ARGS...".into(),
            },
            RequestHelp {
                name: "refuse".into(),
                help: "Always fails.".into(),
            },
        ]
    }

    fn handle(&self, name: &str, args: &[Vec<u8>]) -> Answer {
        match name {
            "echo" => Ok(Reply {
                informs: vec![vec![b"seen".to_vec()]],
                args: args.to_vec(),
            }),
            _ => Err("this request always fails.".into()),
        }
    }
}

struct Client {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> Self {
        let (rd, wr) = TcpStream::connect(addr).await.unwrap().into_split();
        Self {
            rd: BufReader::new(rd),
            wr,
        }
    }

    async fn line(&mut self) -> String {
        let mut l = String::new();
        timeout(Duration::from_secs(5), self.rd.read_line(&mut l))
            .await
            .expect("a line within 5 s")
            .unwrap();
        l.trim_end().to_string()
    }

    /// Sends `req`, returns every line up to and including the reply (`!`).
    async fn ask(&mut self, req: &str) -> Vec<String> {
        self.wr
            .write_all(format!("{req}\n").as_bytes())
            .await
            .unwrap();
        let mut lines = Vec::new();
        loop {
            let l = self.line().await;
            let done = l.starts_with('!');
            lines.push(l);
            if done {
                return lines;
            }
        }
    }
}

async fn start() -> (std::net::SocketAddr, Sensors, Arc<AtomicBool>) {
    let sensors = Sensors::new();
    sensors
        .add(
            Description::new("count", SensorType::Integer, "a count").units("heaps"),
            Value::Integer(0),
            Status::Nominal,
        )
        .unwrap();
    sensors
        .add(
            Description::new("busy", SensorType::Integer, "rate-limited").auto(
                Strategy::EventRate {
                    shortest: 60.0,
                    longest: f64::INFINITY,
                },
            ),
            Value::Integer(0),
            Status::Nominal,
        )
        .unwrap();
    sensors
        .add(
            Description::new(
                "device-status",
                SensorType::Discrete(vec!["ok".into(), "degraded".into(), "fail".into()]),
                "health",
            ),
            Value::Text("ok".into()),
            Status::Nominal,
        )
        .unwrap();
    let halted = Arc::new(AtomicBool::new(false));
    let h = halted.clone();
    let mut cfg = Config::new("test-1.0", "test-0.1");
    cfg.max_line = 4096;
    let server = Server::new(cfg, sensors.clone(), Arc::new(Echo), move || {
        h.store(true, Relaxed)
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, std::future::pending()));
    (addr, sensors, halted)
}

#[tokio::test]
async fn a_client_gets_the_version_informs_then_answers() {
    let (addr, _, halted) = start().await;
    let mut c = Client::connect(addr).await;
    assert_eq!(c.line().await, "#version-connect katcp-protocol 5.1-MIB");
    assert!(c
        .line()
        .await
        .starts_with("#version-connect katcp-library katcp-server-"));
    assert_eq!(
        c.line().await,
        "#version-connect katcp-device test-1.0 test-0.1"
    );
    assert_eq!(c.ask("?watchdog[3]").await, ["!watchdog[3] ok"]);
    let help = c.ask("?help").await;
    assert_eq!(help.last().unwrap(), "!help ok 11");
    assert!(
        help.contains(&"#help echo Echo\\_the\\_arguments.".to_string()),
        "{help:?}"
    );
    assert_eq!(
        c.ask("?help echo").await,
        [
            "#help echo Echo\\_the\\_arguments.\\n?echo\\_ARGS...",
            "!help ok 1"
        ]
    );
    assert_eq!(
        c.ask("?echo a\\_b \\@").await,
        ["#echo seen", "!echo ok a\\_b \\@"]
    );
    assert_eq!(
        c.ask("?refuse").await,
        ["!refuse fail this\\_request\\_always\\_fails."]
    );
    assert_eq!(
        c.ask("?nope").await,
        ["!nope invalid there\\_is\\_no\\_request\\_named\\_\"nope\";\\_?help\\_lists\\_them."]
    );
    assert_eq!(
        c.ask("?watchdog x").await,
        ["!watchdog fail ?watchdog\\_takes\\_no\\_arguments,\\_not\\_1\\_arguments."]
    );
    assert_eq!(c.ask("?log-level").await, ["!log-level ok warn"]);
    assert_eq!(c.ask("?log-level debug").await, ["!log-level ok debug"]);
    assert!(c.ask("?log-level loud").await[0]
        .starts_with("!log-level fail \"loud\"\\_is\\_not\\_a\\_log\\_level"));
    let v = c.ask("?version-list").await;
    assert_eq!(v.len(), 4);
    assert_eq!(v[3], "!version-list ok 3");
    let clients = c.ask("?client-list").await;
    assert_eq!(clients.len(), 2, "{clients:?}");
    // A malformed line is no request: a #log says so, and the connection goes on.
    c.wr.write_all(b"?bad\\x\n").await.unwrap();
    assert!(c.line().await.starts_with("#log error "));
    assert!(!halted.load(Relaxed));
    assert_eq!(c.ask("?halt").await, ["!halt ok"]);
    assert!(halted.load(Relaxed));
}

#[tokio::test]
async fn sensors_are_listed_read_and_sampled() {
    let (addr, sensors, _) = start().await;
    let mut c = Client::connect(addr).await;
    for _ in 0..3 {
        c.line().await;
    }
    assert_eq!(
        c.ask("?sensor-list count").await,
        [
            "#sensor-list count a\\_count heaps integer",
            "!sensor-list ok 1"
        ]
    );
    assert_eq!(
        c.ask("?sensor-list device-status").await[0],
        "#sensor-list device-status health \\@ discrete ok degraded fail"
    );
    assert_eq!(
        c.ask("?sensor-list /^b|^c/").await.last().unwrap(),
        "!sensor-list ok 2"
    );
    assert!(c.ask("?sensor-list /(/").await[0]
        .starts_with("!sensor-list fail \"/(/\"\\_is\\_not\\_a\\_regular\\_expression"));
    assert_eq!(
        c.ask("?sensor-value nope").await,
        ["!sensor-value fail there\\_is\\_no\\_sensor\\_named\\_\"nope\"."]
    );
    sensors
        .set_at("count", Value::Integer(5), Status::Warn, 100.25)
        .unwrap();
    assert_eq!(
        c.ask("?sensor-value count").await,
        ["#sensor-value 100.25 1 count warn 5", "!sensor-value ok 1"]
    );
    // event: the reading now, then each change, not a repeat.
    assert_eq!(
        c.ask("?sensor-sampling count event").await,
        [
            "#sensor-status 100.25 1 count warn 5",
            "!sensor-sampling ok count event"
        ]
    );
    sensors
        .set_at("count", Value::Integer(5), Status::Warn, 101.0)
        .unwrap();
    sensors
        .set_at("count", Value::Integer(6), Status::Warn, 102.0)
        .unwrap();
    assert_eq!(c.line().await, "#sensor-status 102.0 1 count warn 6");
    assert_eq!(
        c.ask("?sensor-sampling count").await,
        ["!sensor-sampling ok count event"]
    );
    // auto on a rate-limited sensor: the reading now, then nothing for a minute.
    assert_eq!(
        c.ask("?sensor-sampling busy,device-status auto")
            .await
            .last()
            .unwrap(),
        "!sensor-sampling ok busy,device-status auto"
    );
    sensors
        .set("busy", Value::Integer(1), Status::Nominal)
        .unwrap();
    // period: readings keep coming without changes.
    c.ask("?sensor-sampling count period 0.05").await;
    for _ in 0..3 {
        assert!(c.line().await.ends_with(" 1 count warn 6"));
    }
    c.ask("?sensor-sampling count none").await;
    for (req, want) in [
        (
            "?sensor-sampling count sometimes",
            "!sensor-sampling fail \"sometimes\"\\_is\\_not\\_a\\_sampling\\_strategy",
        ),
        (
            "?sensor-sampling count period 0",
            "!sensor-sampling fail strategy\\_period:\\_period\\_\"0\"\\_is\\_not",
        ),
        (
            "?sensor-sampling device-status differential 1",
            "!sensor-sampling fail strategy\\_differential\\_needs",
        ),
        (
            "?sensor-sampling count,count event",
            "!sensor-sampling fail sensor\\_\"count\"\\_is\\_named\\_twice.",
        ),
        (
            "?sensor-sampling",
            "!sensor-sampling fail ?sensor-sampling\\_takes\\_a\\_sensor\\_name",
        ),
    ] {
        // Pending period readings may still arrive before the reply.
        let got = c.ask(req).await;
        assert!(got.last().unwrap().starts_with(want), "{req}: {got:?}");
    }
    // Nothing was sampled while the refusals came: a change now sends nothing.
    sensors
        .set("count", Value::Integer(7), Status::Nominal)
        .unwrap();
    assert_eq!(c.ask("?watchdog").await, ["!watchdog ok"]);
}

#[tokio::test]
async fn a_line_too_long_closes_the_connection() {
    let (addr, _, _) = start().await;
    let mut c = Client::connect(addr).await;
    for _ in 0..3 {
        c.line().await;
    }
    c.wr.write_all(&vec![b'x'; 5000]).await.unwrap();
    assert_eq!(
        c.line().await,
        "#disconnect a\\_line\\_is\\_longer\\_than\\_4096\\_bytes"
    );
    assert_eq!(c.line().await, "", "closed");
}

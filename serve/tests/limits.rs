//! The limits against a real server on loopback, from raw TCP clients: a slow head is cut off, a
//! slow body gets 408, a large one 413, connections past the cap wait, the token guards changes
//! only, and shutdown does not wait for idle connections. Timeouts are shortened to seconds.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use fgpu_serve::{protect, serve, Limits};

/// A server of `GET /thing` ("ok") and `PUT /thing` (the body's length), counting the requests
/// that reached a handler.
struct Server {
    addr: SocketAddr,
    handled: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(limits: Limits) -> Self {
        let handled = Arc::new(AtomicUsize::new(0));
        let app = Router::new()
            .route(
                "/thing",
                get(|State(n): State<Arc<AtomicUsize>>| async move {
                    n.fetch_add(1, SeqCst);
                    "ok"
                })
                .put(
                    |State(n): State<Arc<AtomicUsize>>, body: Bytes| async move {
                        n.fetch_add(1, SeqCst);
                        body.len().to_string()
                    },
                ),
            )
            .with_state(handled.clone());
        let app = protect(app, &limits);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                serve(listener, app, &limits, async {
                    let _ = stopped.await;
                })
                .await;
            });
        });
        Self {
            addr,
            handled,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn connect(&self) -> TcpStream {
        let c = TcpStream::connect(self.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    }

    /// Sends `request` whole on a fresh connection: the reply's status code and body.
    fn exchange(&self, request: &[u8]) -> (u16, String) {
        let mut c = self.connect();
        c.write_all(request).unwrap();
        reply(&mut c)
    }

    /// Stops the server: how long `serve` took to return.
    fn stop(mut self) -> Duration {
        let t0 = Instant::now();
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
        t0.elapsed()
    }
}

/// Reads a reply to its end (the connection closes): status code and body.
fn reply(c: &mut TcpStream) -> (u16, String) {
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let code = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

fn limits() -> Limits {
    Limits::new(1000, None)
}

fn put(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "PUT /thing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const GET: &[u8] = b"GET /thing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// A client that sends its request's head one byte a second is cut off once the head timeout
/// has passed, with no reply and without reaching a handler.
#[test]
fn a_slow_head_is_cut_off() {
    let s = Server::start(Limits {
        header_timeout: Duration::from_secs(3),
        ..limits()
    });
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let t0 = Instant::now();
    let mut sent = 0;
    let closed_after = loop {
        if sent < GET.len() {
            // The server may already have closed: a write then fails, and the read below says so.
            if c.write_all(&GET[sent..sent + 1]).is_ok() {
                sent += 1;
            }
        }
        let mut buf = [0u8; 256];
        match c.read(&mut buf) {
            Ok(0) => break t0.elapsed(),
            Ok(n) => panic!(
                "a reply to a half-sent head: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break t0.elapsed(), // reset
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never cut off");
    };
    assert!(sent < GET.len(), "the whole head went out ({sent} bytes)");
    assert!(
        (Duration::from_millis(2500)..Duration::from_millis(5500)).contains(&closed_after),
        "cut off after {closed_after:?}, with a 3 s head timeout"
    );
    assert_eq!(s.handled.load(SeqCst), 0);
    // Others are served meanwhile and after.
    assert_eq!(s.exchange(GET), (200, "ok".into()));
    s.stop();
}

/// A body that trickles in gets 408 with a sentence once the body timeout has passed, and never
/// reaches the handler.
#[test]
fn a_slow_body_gets_408() {
    let s = Server::start(Limits {
        body_timeout: Duration::from_secs(2),
        ..limits()
    });
    let mut c = s.connect();
    let head = "PUT /thing HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n";
    c.write_all(head.as_bytes()).unwrap();
    let t0 = Instant::now();
    let writer = {
        let mut c = c.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..20 {
                if c.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let (code, body) = reply(&mut c);
    let took = t0.elapsed();
    assert_eq!(code, 408, "{body}");
    assert!(body.contains("did not arrive within 2 s"), "{body}");
    assert!(
        (Duration::from_millis(1500)..Duration::from_millis(4500)).contains(&took),
        "408 after {took:?}, with a 2 s body timeout"
    );
    drop(c);
    writer.join().unwrap();
    assert_eq!(s.handled.load(SeqCst), 0);
    s.stop();
}

/// A body past the limit gets 413 and one sentence, announced (Content-Length) or not (chunked),
/// and never reaches the handler; one at the limit is served. A body up to 4 times the limit is
/// read to its end first, so that the client, still sending, gets the reply and not a reset; a
/// larger one is refused as soon as its length is known, without waiting for it.
#[test]
fn a_body_over_the_limit_gets_413() {
    let s = Server::start(limits());
    let (code, body) = s.exchange(&put(&"x".repeat(3000), ""));
    assert_eq!(code, 413);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["error"],
        "the request body is larger than this server's limit of 1000 bytes."
    );
    let mut chunked =
        b"PUT /thing HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(format!("1f4\r\n{}\r\n", "y".repeat(500)).as_bytes());
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(s.exchange(&chunked).0, 413);
    let t0 = Instant::now();
    let head = b"PUT /thing HTTP/1.1\r\nHost: x\r\nContent-Length: 4001\r\n\r\n";
    assert_eq!(s.exchange(head).0, 413);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(s.handled.load(SeqCst), 0);
    assert_eq!(
        s.exchange(&put(&"x".repeat(1000), "")),
        (200, "1000".into())
    );
    assert_eq!(s.handled.load(SeqCst), 1);
    s.stop();
}

/// Past the cap, a connection waits unaccepted: its request is answered only once a served
/// connection closes.
#[test]
fn connections_past_the_cap_wait() {
    let s = Server::start(Limits {
        max_connections: 2,
        ..limits()
    });
    let first = s.connect();
    let _second = s.connect();
    let mut third = s.connect();
    third.write_all(GET).unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut buf = [0u8; 1];
    let waited = third.read(&mut buf);
    assert!(
        matches!(&waited, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "the third connection was answered while two were open: {waited:?}"
    );
    assert_eq!(s.handled.load(SeqCst), 0);
    drop(first);
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(reply(&mut third), (200, "ok".into()));
    s.stop();
}

/// With a token, PUT, POST and DELETE need it (401 and a sentence without it or with a wrong
/// one); GET does not.
#[test]
fn the_token_guards_changes_only() {
    let s = Server::start(Limits {
        token: Some("t0ken".parse().unwrap()),
        ..limits()
    });
    let refused = |request: Vec<u8>, says: &str| {
        let mut c = s.connect();
        c.write_all(&request).unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 401"), "{text}");
        assert!(
            text.to_ascii_lowercase()
                .contains("www-authenticate: bearer realm=\"control\""),
            "{text}"
        );
        assert!(text.contains(says), "{text}");
    };
    refused(put("{}", ""), "changes need the control token");
    refused(
        put("{}", "Authorization: Bearer t0ke\r\n"),
        "is not this server's",
    );
    refused(
        put("{}", "Authorization: Bearer t0kenn\r\n"),
        "is not this server's",
    );
    refused(
        put("{}", "Authorization: Basic t0ken\r\n"),
        "is not this server's",
    );
    for method in ["POST", "DELETE"] {
        refused(
            format!("{method} /thing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .into_bytes(),
            "changes need the control token",
        );
    }
    assert_eq!(s.handled.load(SeqCst), 0);
    assert_eq!(
        s.exchange(&put("{}", "Authorization: Bearer t0ken\r\n")),
        (200, "2".into())
    );
    assert_eq!(s.exchange(GET), (200, "ok".into()));
    assert_eq!(s.handled.load(SeqCst), 2);
    s.stop();
}

/// Stopping closes idle connections at once rather than waiting out their head timeout.
#[test]
fn stopping_does_not_wait_for_idle_connections() {
    let s = Server::start(limits());
    let mut idle = s.connect();
    assert_eq!(
        {
            idle.write_all(b"GET /thing HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut buf = [0u8; 12];
            idle.read_exact(&mut buf).unwrap();
            String::from_utf8_lossy(&buf).into_owned()
        },
        "HTTP/1.1 200"
    );
    let took = s.stop();
    assert!(took < Duration::from_secs(2), "stopping took {took:?}");
}

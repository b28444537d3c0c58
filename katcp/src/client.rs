//! A blocking katcp v5 client, for programs that drive a device one request at a time (the
//! harness): connect, send `?name[mid] args`, collect the informs that answer it and its reply.
//! Informs the device sends on its own (`#version-connect`, `#interface-changed`, sensor updates)
//! are passed over.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::message::{Kind, Message, MAX_MID};

/// Why a request got no good answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection could be made.
    #[error("cannot connect to the katcp device at {addr}: {source}")]
    Connect {
        /// `host:port` as given.
        addr: String,
        /// Why not.
        source: std::io::Error,
    },
    /// The connection failed, or closed, mid-request.
    #[error("the katcp device at {addr} went away during ?{request}: {source}")]
    Io {
        /// `host:port`.
        addr: String,
        /// The request.
        request: String,
        /// Why.
        source: std::io::Error,
    },
    /// No reply came in time.
    #[error("the katcp device at {addr} did not answer ?{request} within {timeout:?}")]
    Timeout {
        /// `host:port`.
        addr: String,
        /// The request.
        request: String,
        /// How long the client waited.
        timeout: Duration,
    },
    /// The device answered `fail` or `invalid`, with its reason.
    #[error("?{request} was refused ({code}): {reason}")]
    Refused {
        /// The request.
        request: String,
        /// `fail` or `invalid`.
        code: String,
        /// The device's own words.
        reason: String,
    },
    /// A reply of an unexpected shape.
    #[error("?{request}: {what}")]
    Unexpected {
        /// The request.
        request: String,
        /// What was wrong with the answer.
        what: String,
    },
}

/// A request's answer: its informs (in order) and its `ok` reply's arguments after `ok`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The informs carrying the request's id.
    pub informs: Vec<Message>,
    /// The reply's arguments after `ok`.
    pub args: Vec<Vec<u8>>,
}

impl Response {
    /// Reply argument `i` as text.
    pub fn arg(&self, i: usize) -> Option<&str> {
        self.args.get(i).and_then(|a| std::str::from_utf8(a).ok())
    }
}

/// One sensor's reading as `?sensor-value` gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct SensorReading {
    /// When it was read (Unix seconds).
    pub timestamp: f64,
    /// `nominal`, `warn`, `error`, ...
    pub status: String,
    /// The value as katcp writes it.
    pub value: String,
}

/// A connection to one katcp device.
pub struct Client {
    addr: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    timeout: Duration,
    last_mid: u32,
}

impl Client {
    /// Connects to `addr` (`host:port`); each request then waits up to `timeout` for its reply.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, ClientError> {
        let connect_err = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        let mut last = None;
        let mut stream = None;
        for a in addr.to_socket_addrs().map_err(connect_err)? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream =
            stream.ok_or_else(|| {
                connect_err(last.unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                }))
            })?;
        let _ = stream.set_nodelay(true);
        let writer = stream.try_clone().map_err(connect_err)?;
        Ok(Self {
            addr: addr.to_string(),
            reader: BufReader::new(stream),
            writer,
            timeout,
            last_mid: 0,
        })
    }

    /// The device's `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `?name args...` and waits for its reply: the informs and arguments of an `ok`, else
    /// [`ClientError::Refused`] with the device's reason.
    pub fn request<A: AsRef<[u8]>>(
        &mut self,
        name: &str,
        args: impl IntoIterator<Item = A>,
    ) -> Result<Response, ClientError> {
        self.last_mid = self.last_mid % MAX_MID + 1;
        let mid = self.last_mid;
        let io = |source| ClientError::Io {
            addr: self.addr.clone(),
            request: name.to_string(),
            source,
        };
        let line = Message::new(Kind::Request, name, Some(mid), args).encode();
        self.writer.write_all(&line).map_err(io)?;
        let deadline = Instant::now() + self.timeout;
        let mut informs = Vec::new();
        loop {
            let m = self.read_message(name, deadline)?;
            if m.mid != Some(mid) || m.name != name {
                continue;
            }
            match m.kind {
                Kind::Inform => informs.push(m),
                Kind::Reply => {
                    let code = m.arg_str(0).unwrap_or("").to_string();
                    let mut args = m.args;
                    if code == "ok" {
                        args.remove(0);
                        return Ok(Response { informs, args });
                    }
                    let reason = args
                        .iter()
                        .skip(1)
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ");
                    return Err(ClientError::Refused {
                        request: name.to_string(),
                        code,
                        reason: if reason.is_empty() {
                            "no reason given".into()
                        } else {
                            reason
                        },
                    });
                }
                Kind::Request => {}
            }
        }
    }

    /// The reading of sensor `name` (`?sensor-value name`).
    pub fn sensor_value(&mut self, name: &str) -> Result<SensorReading, ClientError> {
        let r = self.request("sensor-value", [name])?;
        let unexpected = |what: String| ClientError::Unexpected {
            request: format!("sensor-value {name}"),
            what,
        };
        let inform = r
            .informs
            .iter()
            .find(|m| m.arg_str(2) == Some(name))
            .ok_or_else(|| unexpected(format!("no reading of {name} came")))?;
        // #sensor-value TIMESTAMP COUNT NAME STATUS VALUE
        let text = |i: usize| inform.arg_str(i).unwrap_or("").to_string();
        Ok(SensorReading {
            timestamp: text(0)
                .parse()
                .map_err(|_| unexpected(format!("the timestamp {:?} is not a number", text(0))))?,
            status: text(3),
            value: text(4),
        })
    }

    /// Reads the next message, waiting until `deadline`; lines that are not katcp are skipped.
    fn read_message(&mut self, request: &str, deadline: Instant) -> Result<Message, ClientError> {
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = || ClientError::Timeout {
                addr: self.addr.clone(),
                request: request.to_string(),
                timeout: self.timeout,
            };
            if left.is_zero() {
                return Err(timeout());
            }
            let io = |source| ClientError::Io {
                addr: self.addr.clone(),
                request: request.to_string(),
                source,
            };
            self.reader
                .get_ref()
                .set_read_timeout(Some(left))
                .map_err(io)?;
            match self.reader.read_until(b'\n', &mut line) {
                Ok(0) => {
                    return Err(io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed",
                    )))
                }
                Ok(_) if line.ends_with(b"\n") => {
                    let text = line.strip_suffix(b"\n").unwrap_or(&line);
                    let text = text.strip_suffix(b"\r").unwrap_or(text);
                    if let Ok(m) = Message::parse(text) {
                        return Ok(m);
                    }
                    line.clear();
                }
                // A partial line (timeout mid-line): keep it and read on.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(timeout())
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A device that answers each line with `answer(line)` (raw katcp text) and says hello first.
    fn fake_device(answer: fn(&str) -> String) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let _ = s.write_all(b"#version-connect katcp-protocol 5.1-IMB\n");
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut line = String::new();
                    while r.read_line(&mut line).unwrap_or(0) > 0 {
                        let _ = s.write_all(answer(line.trim_end()).as_bytes());
                        line.clear();
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_request_collects_its_informs_and_reply_past_other_informs() {
        let addr = fake_device(|line| match line {
            "?sensor-value[1] rx.timestamp" => "#interface-changed\n\
                #sensor-value[1] 1700000000.5 1 rx.timestamp nominal 4096\n\
                #sensor-status 1.0 1 other nominal 3\n\
                !sensor-value[1] ok 1\n"
                .into(),
            "?gain[2] wide 0" => "!gain[2] ok 0.5+0j\n".into(),
            "?gain[3] wide 7" => "!gain[3] fail input\\_7\\_is\\_not\\_0\\_or\\_1.\n".into(),
            _ => String::new(),
        });
        let mut c = Client::connect(&addr, Duration::from_secs(5)).unwrap();
        let r = c.sensor_value("rx.timestamp").unwrap();
        assert_eq!(
            r,
            SensorReading {
                timestamp: 1700000000.5,
                status: "nominal".into(),
                value: "4096".into()
            }
        );
        assert_eq!(
            c.request("gain", ["wide", "0"]).unwrap().arg(0),
            Some("0.5+0j")
        );
        let err = c.request("gain", ["wide", "7"]).unwrap_err().to_string();
        assert_eq!(err, "?gain was refused (fail): input 7 is not 0 or 1.");
    }

    #[test]
    fn silence_is_a_timeout_and_absence_a_connect_error() {
        let addr = fake_device(|_| String::new());
        let mut c = Client::connect(&addr, Duration::from_millis(200)).unwrap();
        let t = Instant::now();
        let err = c.request("watchdog", None::<&str>).unwrap_err();
        assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(2));
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = Client::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(matches!(err, ClientError::Connect { .. }), "{err}");
    }

    /// Against this crate's own server: the standard requests and a sensor.
    #[test]
    fn talks_to_the_crates_server() {
        use crate::{Config, Description, Handler, RequestHelp, SensorType, Sensors, Server};
        struct NoRequests;
        impl Handler for NoRequests {
            fn requests(&self) -> Vec<RequestHelp> {
                Vec::new()
            }
            fn handle(&self, _: &str, _: &[Vec<u8>]) -> crate::Answer {
                Err("no such request".into())
            }
        }
        let sensors = Sensors::new();
        sensors
            .add(
                Description::new("rx.timestamp", SensorType::Integer, "newest"),
                crate::Value::Integer(123),
                crate::Status::Nominal,
            )
            .unwrap();
        let server = Server::new(
            Config::new("test-1.0", "test-0"),
            sensors,
            std::sync::Arc::new(NoRequests),
            || {},
        );
        let (addr, _) =
            crate::start_thread("127.0.0.1:0".parse().unwrap(), "katcp-test", move |l| {
                server.serve(l, std::future::pending())
            })
            .unwrap();
        let mut c = Client::connect(&addr.to_string(), Duration::from_secs(5)).unwrap();
        let r = c.sensor_value("rx.timestamp").unwrap();
        assert_eq!((r.status.as_str(), r.value.as_str()), ("nominal", "123"));
        assert!(c.request("watchdog", None::<&str>).unwrap().args.is_empty());
        let err = c.sensor_value("nothing").unwrap_err().to_string();
        assert!(err.contains("?sensor-value was refused"), "{err}");
        // The connection stays usable after a refusal.
        assert_eq!(c.sensor_value("rx.timestamp").unwrap().value, "123");
    }
}

//! One client's connection: a reader task that splits lines, and the loop that answers them,
//! sends what the client's samplers say, and writes it all out.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::{timeout, Instant};

use super::standard::Refused;
use super::Server;
use crate::message::{Kind, Message};
use crate::sampling::Sampler;
use crate::sensor::{float, now, Sensor};

/// What a reader task hands the connection: a line, or why reading stopped.
enum Line {
    Text(Vec<u8>),
    TooLong,
    Closed,
}

/// Reads lines (ended by `\n` or `\r`) of at most `max` bytes.
async fn read_lines(rd: OwnedReadHalf, max: usize, tx: mpsc::Sender<Line>) {
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        let buf = match rd.fill_buf().await {
            Ok([]) | Err(_) => {
                let _ = tx.send(Line::Closed).await;
                return;
            }
            Ok(buf) => buf,
        };
        let end = buf.iter().position(|c| *c == b'\n' || *c == b'\r');
        let take = end.map_or(buf.len(), |i| i + 1);
        line.extend_from_slice(&buf[..end.unwrap_or(buf.len())]);
        rd.consume(take);
        if line.len() > max {
            let _ = tx.send(Line::TooLong).await;
            return;
        }
        if end.is_some() {
            let text = std::mem::take(&mut line);
            // Blank lines (the \n of a \r\n) are no message.
            if !text.iter().all(u8::is_ascii_whitespace) && tx.send(Line::Text(text)).await.is_err()
            {
                return;
            }
        }
    }
}

/// One client's state: its socket, what is to be written, its samplers by sensor name.
pub(super) struct Connection {
    pub(super) server: Arc<Server>,
    pub(super) wr: tokio::net::tcp::OwnedWriteHalf,
    pub(super) out: Vec<u8>,
    pub(super) samplers: HashMap<String, Sampler>,
}

/// A `#sensor-status` or `#sensor-value` inform for `s`.
pub(super) fn reading_inform(name: &str, s: &Sensor) -> Message {
    let r = &s.reading;
    Message::inform(
        name,
        [
            float(r.timestamp).into_bytes(),
            b"1".to_vec(),
            s.description.name.clone().into_bytes(),
            r.status.name().as_bytes().to_vec(),
            r.value.encode(),
        ],
    )
}

impl Connection {
    pub(super) fn push(&mut self, m: Message) {
        self.out.extend_from_slice(&m.encode());
    }

    pub(super) async fn flush(&mut self) -> Result<(), ()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.out);
        match timeout(self.server.config.write_timeout, self.wr.write_all(&out)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    pub(super) async fn run(
        &mut self,
        rd: OwnedReadHalf,
        mut inbox: mpsc::UnboundedReceiver<Message>,
        mut stop: watch::Receiver<bool>,
    ) {
        let (tx, mut lines) = mpsc::channel(16);
        let reader = tokio::spawn(read_lines(rd, self.server.config.max_line, tx));
        let mut updates = self.server.sensors.subscribe();
        loop {
            if self.flush().await.is_err() {
                break; // the client does not read: drop it
            }
            let due = self.samplers.values().filter_map(|s| s.due).min();
            tokio::select! {
                line = lines.recv() => match line {
                    Some(Line::Text(l)) => self.line(&l),
                    Some(Line::TooLong) => {
                        let max = self.server.config.max_line;
                        self.push(Message::inform("disconnect", [format!("a line is longer than {max} bytes")]));
                        let _ = self.flush().await;
                        break;
                    }
                    Some(Line::Closed) | None => break,
                },
                u = updates.recv() => match u {
                    Ok(name) => self.sensor_updated(&name),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let names: Vec<String> = self.samplers.keys().cloned().collect();
                        for n in names {
                            self.sensor_updated(&n);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => {}
                },
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => self.timers(),
                Some(m) = inbox.recv() => self.push(m),
                _ = stop.changed() => {
                    self.push(Message::inform("disconnect", ["server shutting down"]));
                    let _ = self.flush().await;
                    break;
                }
            }
        }
        reader.abort();
    }

    /// Sends sensor `name`'s reading now if its sampler says so.
    fn sensor_updated(&mut self, name: &str) {
        let Some(sampler) = self.samplers.get_mut(name) else {
            return;
        };
        let Some(s) = self.server.sensors.get(name) else {
            return;
        };
        let now = Instant::now();
        if sampler.update(&s.reading, now) {
            sampler.sent(&s.reading, now);
            self.push(reading_inform("sensor-status", &s));
        }
    }

    /// Sends every reading whose time has come.
    fn timers(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, Instant)> = self
            .samplers
            .iter()
            .filter_map(|(n, s)| s.due.filter(|d| *d <= now).map(|d| (n.clone(), d)))
            .collect();
        for (name, at) in due {
            let Some(s) = self.server.sensors.get(&name) else {
                continue;
            };
            if let Some(sampler) = self.samplers.get_mut(&name) {
                sampler.sent(&s.reading, at);
            }
            self.push(reading_inform("sensor-status", &s));
        }
    }

    fn line(&mut self, l: &[u8]) {
        let m = match Message::parse(l) {
            Ok(m) => m,
            Err(e) => {
                let head = String::from_utf8_lossy(&l[..l.len().min(40)]).into_owned();
                self.push(Message::inform(
                    "log",
                    [
                        "error".to_string(),
                        float(now()),
                        "katcp".into(),
                        format!("malformed message \"{head}\": {e}"),
                    ],
                ));
                return;
            }
        };
        // Replies and informs from a client ask for nothing.
        if m.kind != Kind::Request {
            return;
        }
        let (status, args) = match self.request(&m) {
            Ok(()) => return,
            Err(Refused::Fail(s)) => ("fail", s),
            Err(Refused::Invalid(s)) => ("invalid", s),
        };
        self.push(Message::new(
            Kind::Reply,
            &m.name,
            m.mid,
            [status.to_string(), args],
        ));
    }

    pub(super) fn inform(&mut self, req: &Message, args: Vec<Vec<u8>>) {
        self.push(Message::new(Kind::Inform, &req.name, req.mid, args));
    }

    pub(super) fn reply(&mut self, req: &Message, args: Vec<Vec<u8>>) {
        let mut all = vec![b"ok".to_vec()];
        all.extend(args);
        self.push(Message::new(Kind::Reply, &req.name, req.mid, all));
    }
}

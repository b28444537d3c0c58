//! The device server: a tokio TCP listener, one task per client. On connection a client gets the
//! `#version-connect` informs; each request is answered in order, the standard ones here
//! (`?help`, `?watchdog`, `?version-list`, `?halt`, `?log-level`, `?client-list`,
//! `?sensor-list`, `?sensor-value`, `?sensor-sampling`), the program's through its [`Handler`].
//! Between requests the client's sampling strategies send `#sensor-status` informs.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::{timeout, Duration, Instant};

use crate::message::{Kind, Message};
use crate::sampling::{Sampler, Strategy};
use crate::sensor::{float, now, Sensor, Sensors};

/// What the katcp-protocol inform says: version 5.1, message ids (I), multiple clients (M), bulk
/// sensor sampling (B).
pub const PROTOCOL: &str = "5.1-MIB";

/// A program's answer to one of its requests: informs (each a list of arguments) sent before the
/// reply, then `!name ok ARGS...`; or `!name fail SENTENCE`.
pub type Answer = Result<Reply, String>;

/// A successful reply: informs first, then the reply's arguments after `ok`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// Informs named after the request, each its arguments.
    pub informs: Vec<Vec<Vec<u8>>>,
    /// The reply's arguments after `ok`.
    pub args: Vec<Vec<u8>>,
}

impl Reply {
    /// `!name ok` and nothing else.
    pub fn ok() -> Self {
        Self::default()
    }

    /// `!name ok ARGS...`.
    pub fn with<A: AsRef<[u8]>>(args: impl IntoIterator<Item = A>) -> Self {
        Self {
            informs: Vec::new(),
            args: args.into_iter().map(|a| a.as_ref().to_vec()).collect(),
        }
    }
}

/// One of the program's requests, for `?help`.
#[derive(Clone, Debug)]
pub struct RequestHelp {
    /// The name, without `?`.
    pub name: String,
    /// Its usage and what it does (the first line is the summary `?help` lists).
    pub help: String,
}

/// The program's own requests.
pub trait Handler: Send + Sync + 'static {
    /// The requests it handles, for `?help`.
    fn requests(&self) -> Vec<RequestHelp>;
    /// Handles `?name args...`; called only for the names [`Handler::requests`] lists.
    fn handle(&self, name: &str, args: &[Vec<u8>]) -> Answer;
}

/// The server's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The katcp-device API version (`#version-connect katcp-device VERSION BUILD`).
    pub device_version: String,
    /// The build state (the program and its version).
    pub build_state: String,
    /// The longest line a client may send, bytes: a longer one closes the connection.
    pub max_line: usize,
    /// Clients at a time; one more is told so and closed.
    pub max_clients: usize,
    /// How long a write to a client may wait (a client that reads nothing is closed).
    pub write_timeout: Duration,
}

impl Config {
    /// A device of API `device_version` built as `build_state`, lines of at most 1 MiB, 64
    /// clients, 10 s to take a write.
    pub fn new(device_version: &str, build_state: &str) -> Self {
        Self {
            device_version: device_version.into(),
            build_state: build_state.into(),
            max_line: 1 << 20,
            max_clients: 64,
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// The log levels of `?log-level`.
const LOG_LEVELS: [&str; 8] = [
    "all", "trace", "debug", "info", "warn", "error", "fatal", "off",
];

/// The standard requests and their help.
const STANDARD: [(&str, &str); 9] = [
    ("halt", "Halt the device server.\n?halt: stops the program; the reply comes first."),
    ("help", "Return help on the available requests.\n?help [NAME]: a #help inform per request (or for NAME), its description."),
    ("watchdog", "Check that the server is still alive.\n?watchdog: replies ok."),
    ("version-list", "Request the list of versions of roles and subcomponents.\n?version-list: #version-list informs: protocol, library, device."),
    ("log-level", "Query or set the current logging level.\n?log-level [LEVEL]: all, trace, debug, info, warn, error, fatal or off; replies the level."),
    ("client-list", "Request the list of connected clients.\n?client-list: a #client-list inform per client (ADDR:PORT)."),
    ("sensor-list", "Request the list of sensors.\n?sensor-list [NAME or /REGEX/]: #sensor-list NAME DESCRIPTION UNITS TYPE [VALUES...] per sensor."),
    ("sensor-value", "Request the value of a sensor or sensors.\n?sensor-value [NAME or /REGEX/]: #sensor-value TIMESTAMP 1 NAME STATUS VALUE per sensor."),
    ("sensor-sampling", "Configure or query the way a sensor is sampled.\n?sensor-sampling NAME[,NAME...] [STRATEGY [PARAMS...]]: none, auto, period P, event, differential D, event-rate SHORTEST LONGEST, differential-rate D SHORTEST LONGEST; updates come as #sensor-status TIMESTAMP 1 NAME STATUS VALUE."),
];

/// A device server: its settings, sensors, the program's requests and what `?halt` calls.
pub struct Server {
    config: Config,
    sensors: Sensors,
    handler: Arc<dyn Handler>,
    on_halt: Box<dyn Fn() + Send + Sync>,
    log_level: Mutex<&'static str>,
    clients: Mutex<BTreeMap<u64, (SocketAddr, mpsc::UnboundedSender<Message>)>>,
    next_client: AtomicU64,
}

impl Server {
    /// A server with `config`, reporting `sensors`, answering the program's requests with
    /// `handler`, and calling `on_halt` after it has answered `?halt`.
    pub fn new(
        config: Config,
        sensors: Sensors,
        handler: Arc<dyn Handler>,
        on_halt: impl Fn() + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            config,
            sensors,
            handler,
            on_halt: Box::new(on_halt),
            log_level: Mutex::new("warn"),
            clients: Mutex::default(),
            next_client: AtomicU64::new(0),
        })
    }

    /// The sensors it reports.
    pub fn sensors(&self) -> &Sensors {
        &self.sensors
    }

    /// Serves clients on `listener` until `shutdown` completes; then tells each client
    /// `#disconnect` and closes it.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, addr)) => {
                        let server = self.clone();
                        let stop = stop_rx.clone();
                        tasks.spawn(async move { server.client(stream, addr, stop).await });
                    }
                    Err(e) => {
                        tracing::warn!("katcp accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        let _ = stop_tx.send(true);
        // Each client's task sends #disconnect and ends; a stuck one is dropped after 1 s.
        let _ = timeout(Duration::from_secs(1), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
    }

    fn version_informs(&self) -> Vec<Vec<String>> {
        let lib = env!("CARGO_PKG_VERSION");
        vec![
            vec!["katcp-protocol".into(), PROTOCOL.into()],
            vec![
                "katcp-library".into(),
                format!("katcp-server-{lib}"),
                format!("katcp-server-{lib}"),
            ],
            vec![
                "katcp-device".into(),
                self.config.device_version.clone(),
                self.config.build_state.clone(),
            ],
        ]
    }

    /// One client, from connection to close.
    async fn client(
        self: Arc<Self>,
        stream: TcpStream,
        addr: SocketAddr,
        stop: watch::Receiver<bool>,
    ) {
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let mut conn = Connection {
            server: self.clone(),
            wr,
            out: Vec::new(),
            samplers: HashMap::new(),
        };
        let full = self
            .clients
            .lock()
            .map_or(true, |c| c.len() >= self.config.max_clients);
        if full {
            conn.push(Message::inform(
                "disconnect",
                [format!(
                    "too many clients ({} at most)",
                    self.config.max_clients
                )],
            ));
            let _ = conn.flush().await;
            return;
        }
        for v in self.version_informs() {
            conn.push(Message::inform("version-connect", v));
        }
        let id = self.next_client.fetch_add(1, Relaxed);
        let (tx, inbox) = mpsc::unbounded_channel();
        if let Ok(mut clients) = self.clients.lock() {
            for (_, other) in clients.values() {
                let _ = other.send(Message::inform("client-connected", [addr.to_string()]));
            }
            clients.insert(id, (addr, tx));
        }
        conn.run(rd, inbox, stop).await;
        if let Ok(mut clients) = self.clients.lock() {
            clients.remove(&id);
        }
    }
}

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
struct Connection {
    server: Arc<Server>,
    wr: tokio::net::tcp::OwnedWriteHalf,
    out: Vec<u8>,
    samplers: HashMap<String, Sampler>,
}

/// A `#sensor-status` or `#sensor-value` inform for `s`.
fn reading_inform(name: &str, s: &Sensor) -> Message {
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
    fn push(&mut self, m: Message) {
        self.out.extend_from_slice(&m.encode());
    }

    async fn flush(&mut self) -> Result<(), ()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.out);
        match timeout(self.server.config.write_timeout, self.wr.write_all(&out)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    async fn run(
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

    fn inform(&mut self, req: &Message, args: Vec<Vec<u8>>) {
        self.push(Message::new(Kind::Inform, &req.name, req.mid, args));
    }

    fn reply(&mut self, req: &Message, args: Vec<Vec<u8>>) {
        let mut all = vec![b"ok".to_vec()];
        all.extend(args);
        self.push(Message::new(Kind::Reply, &req.name, req.mid, all));
    }

    /// Answers request `m` (informs and `!ok`), or says why not.
    fn request(&mut self, m: &Message) -> Result<(), Refused> {
        let args: Vec<&str> = (0..m.args.len())
            .map(|i| {
                m.arg_str(i).ok_or_else(|| {
                    fail(format!(
                        "?{}: argument {} is not UTF-8 text.",
                        m.name,
                        i + 1
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        let at_most = |n: usize, what: &str| -> Result<(), Refused> {
            if args.len() > n {
                return Err(fail(format!(
                    "?{} takes {what}, not {} arguments.",
                    m.name,
                    args.len()
                )));
            }
            Ok(())
        };
        match m.name.as_str() {
            "watchdog" => {
                at_most(0, "no arguments")?;
                self.reply(m, vec![]);
            }
            "halt" => {
                at_most(0, "no arguments")?;
                self.reply(m, vec![]);
                (self.server.on_halt)();
            }
            "help" => {
                at_most(1, "at most one argument (a request name)")?;
                let mut all: Vec<(String, String)> = STANDARD
                    .iter()
                    .map(|(n, h)| (n.to_string(), h.to_string()))
                    .chain(
                        self.server
                            .handler
                            .requests()
                            .into_iter()
                            .map(|r| (r.name, r.help)),
                    )
                    .collect();
                all.sort();
                let chosen: Vec<(String, String)> = match args.first() {
                    None => all
                        .into_iter()
                        .map(|(n, h)| {
                            let first = h.lines().next().unwrap_or("").to_string();
                            (n, first)
                        })
                        .collect(),
                    Some(name) => {
                        let one: Vec<_> = all.into_iter().filter(|(n, _)| n == name).collect();
                        if one.is_empty() {
                            return Err(fail(format!(
                                "there is no request named \"{name}\"; ?help lists them."
                            )));
                        }
                        one
                    }
                };
                let n = chosen.len();
                for (name, h) in chosen {
                    self.inform(m, vec![name.into_bytes(), h.into_bytes()]);
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "version-list" => {
                at_most(0, "no arguments")?;
                let v = self.server.version_informs();
                let n = v.len();
                for i in v {
                    self.inform(m, i.into_iter().map(String::into_bytes).collect());
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "log-level" => {
                at_most(1, "at most one argument (a level)")?;
                let mut level = self
                    .server
                    .log_level
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if let Some(want) = args.first() {
                    *level = LOG_LEVELS.iter().find(|l| *l == want).ok_or_else(|| {
                        fail(format!(
                            "\"{want}\" is not a log level ({}).",
                            LOG_LEVELS.join(", ")
                        ))
                    })?;
                }
                let now = level.as_bytes().to_vec();
                drop(level);
                self.reply(m, vec![now]);
            }
            "client-list" => {
                at_most(0, "no arguments")?;
                let addrs: Vec<String> = self
                    .server
                    .clients
                    .lock()
                    .map(|c| c.values().map(|(a, _)| a.to_string()).collect())
                    .unwrap_or_default();
                let n = addrs.len();
                for a in addrs {
                    self.inform(m, vec![a.into_bytes()]);
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "sensor-list" | "sensor-value" => {
                at_most(1, "at most one argument (a sensor name or /regex/)")?;
                let sensors = self.select(args.first().copied())?;
                let n = sensors.len();
                for s in &sensors {
                    if m.name == "sensor-list" {
                        let d = &s.description;
                        let mut a = vec![
                            d.name.clone().into_bytes(),
                            d.description.clone().into_bytes(),
                            d.units.clone().into_bytes(),
                            d.kind.name().as_bytes().to_vec(),
                        ];
                        if let crate::SensorType::Discrete(values) = &d.kind {
                            a.extend(values.iter().map(|v| v.clone().into_bytes()));
                        }
                        self.inform(m, a);
                    } else {
                        let mut i = reading_inform("sensor-value", s);
                        i.mid = m.mid;
                        self.push(i);
                    }
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "sensor-sampling" => self.sensor_sampling(m, &args)?,
            name => {
                if !self
                    .server
                    .handler
                    .requests()
                    .iter()
                    .any(|r| r.name == name)
                {
                    return Err(Refused::Invalid(format!(
                        "there is no request named \"{name}\"; ?help lists them."
                    )));
                }
                let answer = self
                    .server
                    .handler
                    .handle(name, &m.args)
                    .map_err(Refused::Fail)?;
                for i in answer.informs {
                    self.inform(m, i);
                }
                self.reply(m, answer.args);
            }
        }
        Ok(())
    }

    /// The sensors `pattern` names (all without one), in name order.
    fn select(&self, pattern: Option<&str>) -> Result<Vec<Sensor>, Refused> {
        let sensors = &self.server.sensors;
        match pattern {
            None => Ok(sensors.select(|_| true)),
            Some(p) if p.len() > 1 && p.starts_with('/') && p.ends_with('/') => {
                let re = regex::Regex::new(&p[1..p.len() - 1]).map_err(|e| {
                    fail(format!(
                        "\"{p}\" is not a regular expression: {}.",
                        first_line(&e.to_string())
                    ))
                })?;
                Ok(sensors.select(|n| re.is_match(n)))
            }
            Some(name) => sensors
                .get(name)
                .map(|s| vec![s])
                .ok_or_else(|| fail(format!("there is no sensor named \"{name}\"."))),
        }
    }

    fn sensor_sampling(&mut self, m: &Message, args: &[&str]) -> Result<(), Refused> {
        let Some((&names, rest)) = args.split_first() else {
            return Err(fail("?sensor-sampling takes a sensor name, then optionally a strategy and its parameters.".into()));
        };
        let Some((&strategy, params)) = rest.split_first() else {
            // A query: one sensor.
            let s = self
                .server
                .sensors
                .get(names)
                .ok_or_else(|| fail(format!("there is no sensor named \"{names}\".")))?;
            let asked = self.samplers.get(names).map_or(Strategy::None, |s| s.asked);
            let mut a = vec![names.as_bytes().to_vec()];
            a.extend(asked.encode(&s.description.kind));
            self.reply(m, a);
            return Ok(());
        };
        let list: Vec<&str> = names.split(',').collect();
        let mut chosen = Vec::with_capacity(list.len());
        for (i, n) in list.iter().enumerate() {
            if list[..i].contains(n) {
                return Err(fail(format!("sensor \"{n}\" is named twice.")));
            }
            let s = self
                .server
                .sensors
                .get(n)
                .ok_or_else(|| fail(format!("there is no sensor named \"{n}\".")))?;
            let st = Strategy::parse(strategy, params, &s.description.kind)
                .map_err(|e| fail(e.to_string()))?;
            chosen.push((s, st));
        }
        let mut reply_strategy = vec![];
        for (s, st) in chosen {
            let name = s.description.name.clone();
            reply_strategy = st.encode(&s.description.kind);
            match Sampler::new(st, s.description.auto) {
                None => {
                    self.samplers.remove(&name);
                }
                Some(mut sampler) => {
                    // The reading now goes first, as aiokatcp sends it.
                    sampler.sent(&s.reading, Instant::now());
                    self.samplers.insert(name, sampler);
                    self.push(reading_inform("sensor-status", &s));
                }
            }
        }
        let mut a = vec![names.as_bytes().to_vec()];
        a.extend(reply_strategy);
        self.reply(m, a);
        Ok(())
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .last()
        .unwrap_or(s)
        .trim()
        .trim_end_matches('.')
        .to_string()
}

/// Why a request was not answered `ok`.
enum Refused {
    /// `!name fail SENTENCE`: a request of a known name that could not be done.
    Fail(String),
    /// `!name invalid SENTENCE`: no such request (as aiokatcp answers it).
    Invalid(String),
}

fn fail(s: String) -> Refused {
    Refused::Fail(s)
}

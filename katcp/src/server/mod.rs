//! The device server: a tokio TCP listener, one task per client. On connection a client gets the
//! `#version-connect` informs; each request is answered in order (`connection`), the standard ones
//! in `standard` (`?help`, `?watchdog`, `?version-list`, `?halt`, `?log-level`, `?client-list`,
//! `?sensor-list`, `?sensor-value`, `?sensor-sampling`), the program's through its [`Handler`].
//! Between requests the client's sampling strategies send `#sensor-status` informs.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout, Duration};

use crate::message::Message;
use crate::sensor::Sensors;

mod connection;
mod standard;

use connection::Connection;

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

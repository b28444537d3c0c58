//! Control and monitoring over HTTP (axum on a tokio runtime of its own thread):
//!
//! - `GET /health`: 200 while the pipeline runs, 503 once it is stopping.
//! - `GET /status`: [`fgpu_api::engine::Status`]: backend, timing, the input's counters, each
//!   output's shape and counters keyed by output name, queue depths, frame timing, loaded delays.
//! - `GET /metrics`: Prometheus text: the engine's counters, then the process's own resident
//!   memory, open descriptors, threads and CPU time under the standard `process_*` names
//!   (`fgpu_serve::process`).
//! - `PUT /delays`, `GET /delays`: per polarisation delay (s), delay rate (s/s), phase (rad), phase
//!   rate (rad/s), loaded at an ADC timestamp, a Unix time, or at once (`delays`).
//! - `PUT /outputs/{name}/gains`, `GET /outputs/{name}/gains`: one output's per polarisation
//!   complex gain, one value or one per channel; `/gains` is the wideband output's (`gains`).
//! - `GET /outputs/{name}`: one output's section of the status; `PUT /outputs/{name}` with
//!   `{"centre": HZ}`: a narrowband output's centre, from the next frame on (`outputs`).
//!
//! A bad request gets a 4xx with `{"error": "<one sentence>"}` and changes nothing. The thread
//! also turns SIGINT and SIGTERM into the engine's stop flag.
//!
//! In front of it all, `fgpu_serve` ([`limits`]): 64 connections at a time, a request's headers
//! within 20 s and its body within 10 s after them (else the connection is closed, or 408), a
//! body of at most [`max_body`] bytes (else 413), and with `--control-token` the bearer token on
//! every change (else 401). Its refusals are counted with the rest.

mod delays;
mod gains;
mod outputs;
mod status;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use crossbeam_channel::{Sender, TrySendError};
use num_complex::Complex32;
use serde_json::json;

use crate::backend::POLS;
use crate::config::EngineConfig;
use crate::metrics;
use crate::pipeline::Command;
use crate::stats::Stats;

pub use delays::{parse_delay_request, DelayContext, DelayUpdate, PolDelay};
pub use gains::{parse_gain_request, GainUpdate};
pub use outputs::parse_output_request;

/// What the control server has loaded into the pipeline, as its readers see it.
struct Loaded {
    /// Both polarisations' delay models (zero until one is loaded).
    delays: fgpu_api::engine::Delays,
    /// Whether a delay model has been loaded since start-up.
    delays_loaded: bool,
    /// Each output's gains per polarisation, one per channel, by output name.
    gains: BTreeMap<String, [Vec<Complex32>; POLS]>,
}

/// What the handlers share.
pub struct ControlState {
    pub cfg: EngineConfig,
    pub stats: Arc<Stats>,
    pub backend: &'static str,
    pub commands: Sender<Command>,
    pub stop: Arc<AtomicBool>,
    started: Instant,
    loaded: Mutex<Loaded>,
    /// What GET /metrics encodes: collectors reading `stats` at each scrape.
    metrics: prometheus_client::registry::Registry,
}

impl ControlState {
    pub fn new(
        cfg: EngineConfig,
        stats: Arc<Stats>,
        backend: &'static str,
        commands: Sender<Command>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        // Every output starts with its configured gain on every channel.
        let gains = cfg
            .outputs
            .iter()
            .map(|o| {
                let g = vec![Complex32::new(o.gain, 0.0); o.geometry.channels];
                (o.name.clone(), [g.clone(), g])
            })
            .collect();
        // One engine per process: the scrape target tells engines apart, no feng_id label.
        let labels = metrics::EngineLabels {
            backend,
            feng_id: None,
        };
        Self {
            metrics: metrics::registry(stats.clone(), &labels),
            loaded: Mutex::new(Loaded {
                delays: Default::default(),
                delays_loaded: false,
                gains,
            }),
            cfg,
            stats,
            backend,
            commands,
            stop,
            started: Instant::now(),
        }
    }

    /// The loaded state, or the 500 that a poisoned lock (a panicked handler) deserves.
    fn loaded(&self) -> Result<MutexGuard<'_, Loaded>, (StatusCode, String)> {
        self.loaded.lock().map_err(|_| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "state lock poisoned".into(),
            )
        })
    }
}

type Shared = Arc<ControlState>;

/// Bytes of request body allowed per channel of the largest output: a PUT of its gains gives one
/// `[re, im]` per channel for each of the two polarisations, and 64 bytes holds one written
/// compactly even as two float64 at full precision (`[-0.10000000149011612,0.5],` is 29; with
/// exponents and spaces at most about 54).
const BODY_BYTES_PER_CHANNEL: usize = POLS * 64;

/// The body limit of an engine with few channels: far above any delay model or single gain.
const MIN_BODY_BYTES: usize = 1 << 20;

/// Largest request body this engine accepts: 128 bytes per channel of its largest output, at
/// least 1 MiB (8 MiB at 65536 channels, the most an output may have).
pub fn max_body(cfg: &EngineConfig) -> usize {
    let channels = cfg.outputs.iter().map(|o| o.geometry.channels).max();
    (channels.unwrap_or(0) * BODY_BYTES_PER_CHANNEL).max(MIN_BODY_BYTES)
}

/// What the control server allows a client: [`max_body`], the token, `fgpu_serve`'s timeouts and
/// connection cap.
pub fn limits(cfg: &EngineConfig) -> fgpu_serve::Limits {
    fgpu_serve::Limits::new(max_body(cfg), cfg.control_token.clone())
}

/// The control thread's runtime, with SIGINT and SIGTERM already watched: made before the
/// pipeline starts, so that a signal sent as soon as the engine logs anything stops it cleanly
/// instead of finding no handler and killing the process.
pub struct ControlRuntime {
    rt: tokio::runtime::Runtime,
    signals: Signals,
}

impl ControlRuntime {
    pub fn new() -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the control runtime: {e}."))?;
        let signals = {
            use tokio::signal::unix::{signal, SignalKind};
            let _runtime = rt.enter();
            signal(SignalKind::interrupt())
                .and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
        };
        Ok(Self { rt, signals })
    }
}

/// Binds `state.cfg.control`, logs `control listening on ADDR:PORT`, and serves on `runtime`
/// until the stop flag is set (or SIGINT or SIGTERM sets it).
pub fn start(
    state: ControlState,
    runtime: ControlRuntime,
) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let addr = state.cfg.control;
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| format!("cannot listen for control requests on {addr}: {e}."))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the control address: {e}."))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot set up the control socket: {e}."))?;
    tracing::info!("control listening on {local}");
    let state = Arc::new(state);
    let ControlRuntime { rt, signals } = runtime;
    let handle = std::thread::Builder::new()
        .name("fengine-control".into())
        .spawn(move || rt.block_on(serve(listener, state, signals)))
        .map_err(|e| format!("cannot start the control thread: {e}."))?;
    Ok((local, handle))
}

type Signals = std::io::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>;

async fn serve(listener: std::net::TcpListener, state: Shared, signals: Signals) {
    let stop = state.stop.clone();
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("control socket unusable: {e}");
            stop.store(true, Relaxed);
            return;
        }
    };
    tokio::spawn(watch_signals(signals, stop.clone()));
    let wait = {
        let stop = stop.clone();
        async move {
            while !stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let limits = limits(&state.cfg);
    fgpu_serve::serve(listener, router(state), &limits, wait).await;
}

/// SIGINT or SIGTERM (`signals`, installed by [`ControlRuntime::new`]): stop the engine cleanly.
async fn watch_signals(signals: Signals, stop: Arc<AtomicBool>) {
    let (mut int, mut term) = match signals {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch for signals ({e}); stop the engine with SIGKILL");
            return;
        }
    };
    tokio::select! {
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
    }
    stop.store(true, Relaxed);
}

/// The routes behind `fgpu_serve`'s checks ([`limits`]), every refusal counted.
pub fn router(state: Shared) -> Router {
    let routes = Router::new()
        .route("/health", get(health))
        .route("/status", get(status::get_status))
        .route("/metrics", get(prometheus))
        .route("/delays", get(delays::get_delays).put(delays::put_delays))
        .route(
            "/gains",
            get(gains::get_wideband_gains).put(gains::put_wideband_gains),
        )
        .route(
            "/outputs/{name}/gains",
            get(gains::get_output_gains).put(gains::put_output_gains),
        )
        .route(
            "/outputs/{name}",
            get(outputs::get_output).put(outputs::put_output),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "that method is not allowed here: read with GET, change with PUT",
            )
        })
        .with_state(state.clone());
    fgpu_serve::protect(routes, &limits(&state.cfg)).layer(axum::middleware::from_fn_with_state(
        state,
        count_rejections,
    ))
}

/// Counts every refused request (4xx), whichever handler or extractor refused it.
async fn count_rejections(
    State(s): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(req).await;
    if response.status().is_client_error() {
        s.stats.control_rejected.fetch_add(1, Relaxed);
    }
    response
}

fn error(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({ "error": crate::config::sentence(msg) }))).into_response()
}

/// A handler's result: a JSON reply, or a refusal with its status code and sentence.
fn reply<T: serde::Serialize>(r: Result<T, (StatusCode, String)>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err((code, msg)) => error(code, msg),
    }
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such resource: try GET /status, /metrics, /health, /delays, /gains, /outputs/NAME, /outputs/NAME/gains or PUT /delays, /gains, /outputs/NAME (a narrowband output's centre), /outputs/NAME/gains",
    )
}

async fn health(State(s): State<Shared>) -> Response {
    if s.stop.load(Relaxed) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "stopping"})),
        )
            .into_response()
    } else {
        Json(json!({"status": "ok"})).into_response()
    }
}

async fn prometheus(State(s): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(&s.metrics),
    )
        .into_response()
}

/// Queues a command for the pipeline; a full or closed queue is a 503 (nothing changed).
fn send(tx: &Sender<Command>, c: Command) -> Result<(), (StatusCode, String)> {
    match tx.try_send(c) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(_)) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine has too many requests queued; try again".into(),
        )),
        Err(TrySendError::Disconnected(_)) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine is stopping".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control state over a small engine configuration, and the pipeline's end of its
    /// command queue.
    pub(super) fn state() -> (ControlState, crossbeam_channel::Receiver<Command>) {
        state_with(&[])
    }

    /// The same with `extra` flags.
    pub(super) fn state_with(
        extra: &[&str],
    ) -> (ControlState, crossbeam_channel::Receiver<Command>) {
        let mut flags = vec![
            "--channels",
            "16",
            "--taps",
            "4",
            "--spectra-per-heap",
            "256",
            "--heap-samples",
            "1024",
            "--adc-sample-rate",
            "1e6",
            "--max-delay",
            "1e-3",
        ];
        flags.extend_from_slice(extra);
        let args = crate::config::test_args(&flags).unwrap();
        let cfg = EngineConfig::from_args(&args).unwrap();
        let stats = Arc::new(Stats::for_config(&cfg));
        let (tx, rx) = crossbeam_channel::bounded(8);
        let st = ControlState::new(cfg, stats, "null", tx, Arc::new(AtomicBool::new(false)));
        (st, rx)
    }

    /// Sends raw HTTP requests to the control server of `s` (its router behind `fgpu_serve`, with
    /// the engine's limits); the status code and body of each reply.
    pub(super) fn exchange(s: Shared, requests: &[String]) -> Vec<(String, String)> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = limits(&s.cfg);
        let app = router(s);
        rt.spawn(
            async move { fgpu_serve::serve(listener, app, &limits, std::future::pending()).await },
        );
        requests
            .iter()
            .map(|req| {
                use std::io::{Read, Write};
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(req.as_bytes()).unwrap();
                let mut reply = String::new();
                c.read_to_string(&mut reply).unwrap();
                let body = reply
                    .split_once("\r\n\r\n")
                    .map_or("", |(_, b)| b)
                    .to_string();
                (reply[9..12].to_string(), body)
            })
            .collect()
    }

    /// Every refusal is counted, whichever layer refused it; good requests are not.
    #[test]
    fn refused_requests_are_counted() {
        let (s, _rx) = state();
        let s: Shared = Arc::new(s);
        let requests: Vec<String> = [
            "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "DELETE /gains HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "PUT /delays HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\n{bad}",
        ]
        .map(String::from)
        .into();
        let codes: Vec<String> = exchange(s.clone(), &requests)
            .into_iter()
            .map(|(code, _)| code)
            .collect();
        assert_eq!(codes, ["200", "404", "405", "400"]);
        assert_eq!(s.stats.control_rejected.load(Relaxed), 3);
    }

    fn put(path: &str, body: &str, extra: &str) -> String {
        format!(
            "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    }

    /// The body limit follows the largest output: 128 bytes per channel, at least 1 MiB, so 8 MiB
    /// at the most channels an output may have.
    #[test]
    fn the_body_limit_follows_the_channels() {
        let (s, _rx) = state();
        assert_eq!(max_body(&s.cfg), 1 << 20);
        let args = crate::config::test_args(&["--channels", "65536"]).unwrap();
        let cfg = EngineConfig::from_args(&args).unwrap();
        assert_eq!(max_body(&cfg), 8 << 20);
        // Room for the largest PUT /gains: one [re, im] per channel for both polarisations,
        // written as full float64 by a client that does not know the engine keeps f32.
        let pair = "[-0.10000000149011612,0.30000001192092896]";
        let list = vec![pair; 65536].join(",");
        let body = format!("{{\"pol0\":[{list}],\"pol1\":[{list}]}}");
        assert!(body.len() < max_body(&cfg), "{} bytes", body.len());
    }

    /// A body past the limit is refused with 413 and a sentence before it is parsed (here one that
    /// would be a valid gain but for its padding), changes nothing and is counted; one at the
    /// limit is taken.
    #[test]
    fn a_body_over_the_limit_is_refused_and_changes_nothing() {
        let (s, rx) = state();
        let s: Shared = Arc::new(s);
        let limit = max_body(&s.cfg);
        let padded = |len: usize| {
            let head = r#"{"pol0": 0.25"#;
            format!("{head}{}}}", " ".repeat(len - head.len() - 1))
        };
        let replies = exchange(
            s.clone(),
            &[
                put("/gains", &padded(limit + 1), ""),
                get("/gains"),
                put("/gains", &padded(limit), ""),
            ],
        );
        assert_eq!(replies[0].0, "413");
        let refusal: serde_json::Value = serde_json::from_str(&replies[0].1).unwrap();
        assert_eq!(
            refusal["error"],
            "the request body is larger than this server's limit of 1048576 bytes."
        );
        assert_eq!(
            (replies[1].0.as_str(), replies[1].1.as_str()),
            ("200", r#"{"pol0":[1.0,0.0],"pol1":[1.0,0.0]}"#)
        );
        assert_eq!(replies[2].0, "200", "{}", replies[2].1);
        assert_eq!(
            rx.try_iter().count(),
            1,
            "only the PUT at the limit reached the pipeline"
        );
        assert_eq!(s.stats.control_rejected.load(Relaxed), 1);
    }

    /// With --control-token, a change without the token or with another is refused (401, counted,
    /// nothing changed); with it, it is taken; reads need none.
    #[test]
    fn the_token_guards_changes_and_leaves_reads_open() {
        let (s, rx) = state_with(&["--control-token", "s3cret"]);
        let s: Shared = Arc::new(s);
        let body = r#"{"pol0": 0.5}"#;
        let replies = exchange(
            s.clone(),
            &[
                put("/gains", body, ""),
                put("/gains", body, "Authorization: Bearer s3cre\r\n"),
                put("/delays", r#"{"pol0": {"delay": 0}}"#, ""),
                get("/gains"),
                get("/status"),
                get("/metrics"),
                put("/gains", body, "Authorization: Bearer s3cret\r\n"),
                get("/gains"),
            ],
        );
        let codes: Vec<&str> = replies.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            codes,
            ["401", "401", "401", "200", "200", "200", "200", "200"]
        );
        for (_, body) in &replies[..3] {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let e = v["error"].as_str().unwrap();
            assert!(
                e.contains("Authorization: Bearer") && e.ends_with('.'),
                "{e}"
            );
        }
        assert_eq!(replies[3].1, r#"{"pol0":[1.0,0.0],"pol1":[1.0,0.0]}"#);
        assert_eq!(replies[7].1, r#"{"pol0":[0.5,0.0],"pol1":[1.0,0.0]}"#);
        assert_eq!(
            rx.try_iter().count(),
            1,
            "only the PUT with the token reached the pipeline"
        );
        assert_eq!(s.stats.control_rejected.load(Relaxed), 3);
    }
}

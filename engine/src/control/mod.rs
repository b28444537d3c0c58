//! Control and monitoring over HTTP (axum on a tokio runtime of its own thread):
//!
//! - `GET /health`: 200 while the pipeline runs, 503 once it is stopping.
//! - `GET /status`: [`fgpu_api::engine::Status`]: backend, timing, the input's counters, each
//!   output's shape and counters keyed by output name, queue depths, frame timing, loaded delays.
//! - `GET /metrics`: Prometheus text.
//! - `PUT /delays`, `GET /delays`: per polarisation delay (s), delay rate (s/s), phase (rad), phase
//!   rate (rad/s), loaded at an ADC timestamp, a Unix time, or at once ([`delays`]).
//! - `PUT /outputs/{name}/gains`, `GET /outputs/{name}/gains`: one output's per polarisation
//!   complex gain, one value or one per channel; `/gains` is the wideband output's ([`gains`]).
//!
//! A bad request gets a 4xx with `{"error": "<one sentence>"}` and changes nothing. The thread
//! also turns SIGINT and SIGTERM into the engine's stop flag.

mod delays;
mod gains;
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

pub use delays::PolDelay;

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

/// Binds `state.cfg.control`, logs `control listening on ADDR:PORT`, and serves until the stop
/// flag is set.
pub fn start(state: ControlState) -> Result<(SocketAddr, JoinHandle<()>), String> {
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
    let handle = std::thread::Builder::new()
        .name("fengine-control".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("cannot start the control runtime: {e}");
                    state.stop.store(true, Relaxed);
                    return;
                }
            };
            rt.block_on(serve(listener, state));
        })
        .map_err(|e| format!("cannot start the control thread: {e}."))?;
    Ok((local, handle))
}

async fn serve(listener: std::net::TcpListener, state: Shared) {
    let stop = state.stop.clone();
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("control socket unusable: {e}");
            stop.store(true, Relaxed);
            return;
        }
    };
    tokio::spawn(watch_signals(stop.clone()));
    let wait = {
        let stop = stop.clone();
        async move {
            while !stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    if let Err(e) = axum::serve(listener, router(state))
        .with_graceful_shutdown(wait)
        .await
    {
        tracing::error!("control server failed: {e}");
    }
}

/// SIGINT or SIGTERM: stop the engine cleanly.
async fn watch_signals(stop: Arc<AtomicBool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot watch for signals; stop the engine with SIGKILL");
        return;
    };
    tokio::select! {
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
    }
    stop.store(true, Relaxed);
}

pub fn router(state: Shared) -> Router {
    Router::new()
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
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "that method is not allowed here: read with GET, change with PUT",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_rejections,
        ))
        .with_state(state)
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
        "no such resource: try GET /status, /metrics, /health, /delays, /gains, /outputs/wideband/gains or PUT /delays, /gains, /outputs/wideband/gains",
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
        let args = crate::config::test_args(&[
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
        ])
        .unwrap();
        let cfg = EngineConfig::from_args(&args).unwrap();
        let stats = Arc::new(Stats::for_config(&cfg));
        let (tx, rx) = crossbeam_channel::bounded(8);
        let st = ControlState::new(cfg, stats, "null", tx, Arc::new(AtomicBool::new(false)));
        (st, rx)
    }

    /// Sends raw HTTP requests to a router serving `s`; the status code and body of each reply.
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
        let app = router(s);
        rt.spawn(async move { axum::serve(listener, app).await });
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
}

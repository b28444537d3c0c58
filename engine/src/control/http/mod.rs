//! The HTTP front (axum on a tokio runtime of its own thread), a thin adapter over the
//! [`Controller`]: each handler reads its body into the shared request type ([`body`]), calls the
//! controller and answers its reply as JSON, or its refusal with the status code chosen here
//! ([`Refusal`]) and `{"error": "<one sentence>"}`.
//!
//! - `GET /health`: 200 while the pipeline runs, 503 once it is stopping.
//! - `GET /status`: [`fgpu_api::engine::Status`]: backend, timing, the input's counters, each
//!   output's shape and counters keyed by output name, queue depths, frame timing, loaded delays.
//! - `GET /metrics`: Prometheus text: the engine's counters, then the process's own resident
//!   memory, open descriptors, threads and CPU time under the standard `process_*` names
//!   (`fgpu_serve::process`).
//! - `PUT /delays` ([`fgpu_api::engine::DelayRequest`]), `GET /delays`: per polarisation delay
//!   (s), delay rate (s/s), phase (rad), phase rate (rad/s), loaded at an ADC timestamp, a Unix
//!   time, or at once.
//! - `PUT /outputs/{name}/gains` ([`fgpu_api::engine::GainsRequest`]), `GET /outputs/{name}/gains`:
//!   one output's per polarisation complex gain, one value or one per channel; `/gains` is the
//!   wideband output's.
//! - `GET /outputs/{name}`: one output's section of the status; `PUT /outputs/{name}` with
//!   `{"centre": HZ}` ([`fgpu_api::engine::CentreRequest`]): a narrowband output's centre, from
//!   the next frame on.
//!
//! A bad request gets a 4xx with one sentence and changes nothing.
//!
//! In front of it all, `fgpu_serve` ([`limits`]): 64 connections at a time, a request's headers
//! within 20 s and its body within 10 s after them (else the connection is closed, or 408), a
//! body of at most [`max_body`] bytes (else 413), and with `--control-token` the bearer token on
//! every change (else 401). Its refusals are counted with the rest.

pub mod body;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fgpu_api::engine::WIDEBAND;
use serde_json::json;

use super::{ControlError, Controller};
use crate::backend::POLS;
use crate::config::EngineConfig;
use crate::metrics;

pub use body::{parse_delay_request, parse_gain_request, parse_output_request};
pub use body::{BodyError, RequestError};

type Shared = Arc<Controller>;

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

/// Why the HTTP front could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The control address could not be bound.
    #[error("cannot listen for control requests on {addr}: {source}.")]
    Listen {
        /// The address asked for (`--control`).
        addr: SocketAddr,
        /// Why not.
        source: std::io::Error,
    },
    /// The bound socket could not be read or set up.
    #[error("cannot set up the control socket: {0}.")]
    Socket(std::io::Error),
    /// Its runtime or thread could not start.
    #[error("cannot start the control thread: {0}.")]
    Thread(std::io::Error),
}

/// Binds the controller's `--control` address, logs `control listening on ADDR:PORT`, and serves
/// on a thread of its own until the engine stops.
pub fn start(controller: Shared) -> Result<(SocketAddr, JoinHandle<()>), StartError> {
    let addr = controller.config().control;
    let listener =
        std::net::TcpListener::bind(addr).map_err(|source| StartError::Listen { addr, source })?;
    let local = listener.local_addr().map_err(StartError::Socket)?;
    listener.set_nonblocking(true).map_err(StartError::Socket)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Thread)?;
    tracing::info!("control listening on {local}");
    let handle = std::thread::Builder::new()
        .name("fengine-control".into())
        .spawn(move || rt.block_on(serve(listener, controller)))
        .map_err(StartError::Thread)?;
    Ok((local, handle))
}

async fn serve(listener: std::net::TcpListener, c: Shared) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("control socket unusable: {e}");
            return;
        }
    };
    let wait = {
        let c = c.clone();
        async move {
            while c.running() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let limits = limits(c.config());
    fgpu_serve::serve(listener, router(c), &limits, wait).await;
}

/// The routes behind `fgpu_serve`'s checks ([`limits`]), every refusal counted.
pub fn router(c: Shared) -> Router {
    let routes = Router::new()
        .route("/health", get(health))
        .route("/status", get(status))
        .route("/metrics", get(prometheus))
        .route("/delays", get(delays).put(put_delays))
        .route("/gains", get(wideband_gains).put(put_wideband_gains))
        .route(
            "/outputs/{name}/gains",
            get(output_gains).put(put_output_gains),
        )
        .route("/outputs/{name}", get(output).put(put_output))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            Refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                "that method is not allowed here: read with GET, change with PUT.".into(),
            )
        })
        .with_state(c.clone());
    fgpu_serve::protect(routes, &limits(c.config()))
        .layer(axum::middleware::from_fn_with_state(c, count_refusals))
}

/// Counts every refused request (4xx), whichever handler or extractor refused it.
async fn count_refusals(
    State(c): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(req).await;
    if response.status().is_client_error() {
        c.count_refusal();
    }
    response
}

/// A refusal: its status code and its sentence, sent as `{"error": SENTENCE}`.
pub struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<ControlError> for Refusal {
    fn from(e: ControlError) -> Self {
        use ControlError as E;
        let code = match &e {
            E::NoSuchOutput { .. } => StatusCode::NOT_FOUND,
            E::Busy | E::Stopping => StatusCode::SERVICE_UNAVAILABLE,
            E::Poisoned => StatusCode::INTERNAL_SERVER_ERROR,
            E::TooManyPending { .. } => StatusCode::TOO_MANY_REQUESTS,
            E::NoPolarisation
            | E::TwoLoadTimes
            | E::LoadTimeNeedsSyncTime
            | E::LoadTimeNotAfterSync { .. }
            | E::LoadPastTimestamps { .. }
            | E::DelayText { .. }
            | E::NotFinite { .. }
            | E::DelayTooLarge { .. }
            | E::DelayRateTooLarge { .. }
            | E::PhaseRateTooLarge { .. }
            | E::GainCount { .. }
            | E::NoCentre { .. }
            | E::Centre { .. } => StatusCode::BAD_REQUEST,
        };
        Refusal(code, e.to_string())
    }
}

impl From<BodyError> for Refusal {
    fn from(e: BodyError) -> Self {
        Refusal(StatusCode::BAD_REQUEST, e.to_string())
    }
}

/// A handler's answer: the reply as JSON, or the refusal.
type Reply<T> = Result<Json<T>, Refusal>;

async fn not_found() -> Refusal {
    Refusal(
        StatusCode::NOT_FOUND,
        "no such resource: try GET /status, /metrics, /health, /delays, /gains, /outputs/NAME, /outputs/NAME/gains or PUT /delays, /gains, /outputs/NAME (a narrowband output's centre), /outputs/NAME/gains.".into(),
    )
}

async fn health(State(c): State<Shared>) -> Response {
    if c.running() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "stopping"})),
        )
            .into_response()
    }
}

async fn status(State(c): State<Shared>) -> Json<fgpu_api::engine::Status> {
    Json(c.status())
}

async fn prometheus(State(c): State<Shared>) -> Response {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], c.metrics()).into_response()
}

async fn delays(State(c): State<Shared>) -> Reply<fgpu_api::engine::Delays> {
    Ok(Json(c.delays()?))
}

async fn put_delays(State(c): State<Shared>, body: Bytes) -> Reply<fgpu_api::engine::Delays> {
    let req = body::delays(&body)?;
    Ok(Json(c.set_delays(&req)?))
}

async fn wideband_gains(State(c): State<Shared>) -> Reply<fgpu_api::engine::Gains> {
    Ok(Json(c.gains(WIDEBAND)?))
}

async fn put_wideband_gains(
    State(c): State<Shared>,
    body: Bytes,
) -> Reply<fgpu_api::engine::Gains> {
    set_gains(&c, WIDEBAND, &body)
}

async fn output_gains(
    State(c): State<Shared>,
    Path(name): Path<String>,
) -> Reply<fgpu_api::engine::Gains> {
    Ok(Json(c.gains(&name)?))
}

async fn put_output_gains(
    State(c): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Reply<fgpu_api::engine::Gains> {
    set_gains(&c, &name, &body)
}

fn set_gains(c: &Controller, output: &str, body: &[u8]) -> Reply<fgpu_api::engine::Gains> {
    // An unknown output is refused before its body is read; the channels name the shapes a gain
    // may take.
    let channels = c.channels(output)?;
    let req = body::gains(body, channels)?;
    Ok(Json(c.set_gains(output, &req)?))
}

async fn output(
    State(c): State<Shared>,
    Path(name): Path<String>,
) -> Reply<fgpu_api::engine::Output> {
    Ok(Json(c.output(&name)?))
}

async fn put_output(
    State(c): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Reply<fgpu_api::engine::Output> {
    // An unknown output is refused before its body is read.
    c.channels(&name)?;
    let req = body::centre(&body)?;
    Ok(Json(c.set_centre(&name, req.centre)?))
}

#[cfg(test)]
mod tests;

//! The HTTP control API (axum on its own small tokio runtime, so the send threads never share
//! a scheduler with it). JSON in and out; a bad request gets a 4xx and one sentence, and changes
//! nothing.
//!
//! | method and path | body | reply |
//! | --- | --- | --- |
//! | GET /health | | 200 `ok` |
//! | GET /status | | [`crate::Status`] |
//! | GET /metrics | | Prometheus text |
//! | GET /signal | | the signal in force ([`crate::spec::SignalStatus`]) |
//! | PUT /signal | [`crate::SignalRequest`]: per polarisation or common | [`crate::SignalChange`]: the heap it applies from |
//! | PUT /rate | `{"rate": samples_per_s}` | [`crate::RateChange`] |
//! | GET /faults, PUT /faults | [`crate::FaultsRequest`] | the faults in force |
//!
//! In front of it, `fgpu_serve` ([`limits`]): bodies of at most [`MAX_BODY`] bytes (413), a
//! request's headers within 20 s and its body within 10 s after them (else the connection is
//! closed, or 408), 64 connections at a time, and with a token the bearer token on every change
//! (401).

use std::net::SocketAddr;
use std::thread::JoinHandle;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;

use crate::config::RequestError;
use crate::Controller;

pub use fgpu_api::dsim::RateRequest;

/// Largest request body: 1 MiB, far above any signal, rate or faults request (a faults list of
/// 100 000 heap numbers is under 1 MiB).
pub const MAX_BODY: usize = 1 << 20;

/// What the control server allows a client: [`MAX_BODY`], the token, `fgpu_serve`'s timeouts
/// and connection cap.
pub fn limits(token: Option<fgpu_serve::Token>) -> fgpu_serve::Limits {
    fgpu_serve::Limits::new(MAX_BODY, token)
}

/// A refusal: status code and a sentence (sent as text, with a JSON twin for clients that ask).
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.1 });
        (self.0, Json(body)).into_response()
    }
}

impl From<RequestError> for Refusal {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Invalid(m) => Refusal(StatusCode::UNPROCESSABLE_ENTITY, m),
            RequestError::Conflict(m) => Refusal(StatusCode::CONFLICT, m),
        }
    }
}

/// Parses a JSON body whatever its content type (curl -d sends form encoding), with a sentence
/// on failure.
fn parse<T: DeserializeOwned>(what: &str, body: &Bytes) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal(
            StatusCode::BAD_REQUEST,
            format!("the body is not a valid {what} request: {e}."),
        )
    })
}

/// The API's routes, without the limits ([`protect`](fgpu_serve::protect) adds them).
pub fn router(controller: Controller) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/signal", get(signal).put(put_signal))
        .route("/rate", get(rate).put(put_rate))
        .route("/faults", get(faults).put(put_faults))
        .fallback(|| async {
            Refusal(
                StatusCode::NOT_FOUND,
                "no such endpoint; try GET /health, /status, /metrics, /signal, /rate, /faults, or PUT /signal, /rate, /faults.".into(),
            )
        })
        .method_not_allowed_fallback(|| async {
            Refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                "that method is not allowed here: read with GET, change with PUT.".into(),
            )
        })
        .with_state(controller)
}

async fn status(State(c): State<Controller>) -> impl IntoResponse {
    Json(c.status())
}

async fn metrics(State(c): State<Controller>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        c.metrics(),
    )
}

async fn signal(State(c): State<Controller>) -> impl IntoResponse {
    Json(c.signal())
}

async fn rate(State(c): State<Controller>) -> impl IntoResponse {
    Json(RateRequest {
        rate: c.status().rate,
    })
}

async fn faults(State(c): State<Controller>) -> impl IntoResponse {
    Json(c.faults())
}

async fn put_signal(State(c): State<Controller>, body: Bytes) -> Result<Response, Refusal> {
    // Read by its keys, so that an error names the form it was read as and the wrong field.
    let request = crate::spec::parse_request(&body)
        .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e.to_string()))?;
    // Building the buffer is CPU work of up to seconds: keep it off the async workers.
    let change = tokio::task::spawn_blocking(move || c.set_signal(&request))
        .await
        .map_err(|e| {
            Refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("building the signal failed: {e}."),
            )
        })??;
    Ok(Json(change).into_response())
}

async fn put_rate(State(c): State<Controller>, body: Bytes) -> Result<Response, Refusal> {
    let req: RateRequest = parse("rate", &body)?;
    Ok(Json(c.set_rate(req.rate)?).into_response())
}

async fn put_faults(State(c): State<Controller>, body: Bytes) -> Result<Response, Refusal> {
    let req = crate::faults::parse_request(&body)
        .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok(Json(c.set_faults(&req)?).into_response())
}

/// The server thread: its runtime, and how to shut it down.
pub struct ControlServer {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `addr` (port 0: any free port) before returning, so the address is known and a
    /// taken port is an error here, then serves on a thread of its own, with [`limits`].
    pub fn spawn(
        addr: SocketAddr,
        token: Option<fgpu_serve::Token>,
        controller: Controller,
    ) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot listen for control on {addr}: {e}."))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dsim-control")
            .enable_all()
            .build()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("dsim-control".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "control listener unusable");
                            return;
                        }
                    };
                    let limits = limits(token);
                    let app = fgpu_serve::protect(router(controller), &limits);
                    fgpu_serve::serve(listener, app, &limits, async {
                        let _ = rx.await;
                    })
                    .await;
                });
            })?;
        tracing::info!("control listening on {addr}");
        Ok(Self {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop();
    }
}

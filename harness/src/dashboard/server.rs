//! The page's HTTP side: the page itself (one file, nothing fetched from elsewhere), the frames
//! as server-sent events and as JSON, and the controls, which pass to dsim's and the engine's
//! control APIs. Behind the control servers' own limits (connections, timeouts, body size).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::{Published, Shared};
use crate::control::Tone;

const PAGE: &str = include_str!("page.html");

/// Control bodies are a few numbers.
const MAX_BODY: usize = 4096;

/// How long the content check rests after the page moves the tone: the new tone reaches the
/// output within a few heaps, and a partly old interval says nothing.
pub(super) const RETUNE_REST: Duration = Duration::from_secs(3);

pub(super) fn run(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("page: no runtime to serve it: {e}");
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("page: socket unusable: {e}");
                return;
            }
        };
        let mut closed = shared.closed.subscribe();
        let limits = fgpu_serve::Limits::new(MAX_BODY, None);
        let app = fgpu_serve::protect(router(shared), &limits);
        let shutdown = async move {
            let _ = closed.wait_for(|c| *c).await;
        };
        fgpu_serve::serve(listener, app, &limits, shutdown).await;
    });
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/events", get(events))
        .route("/api/status", get(status))
        .route("/api/tone", post(set_tone))
        .route("/api/gain", post(set_gain))
        .route("/api/delay", post(set_delay))
        .with_state(shared)
}

async fn page() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE))
}

/// The frames kept (so that a page opened late fills its waterfall at once), then each frame
/// as it is made.
async fn events(
    State(s): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribed before the backlog is read: a frame made in between comes twice, and the
    // second is skipped by its number, rather than not at all.
    let rx = s.subscribe();
    let backlog: VecDeque<Published> = s.kept();
    let last = backlog.back().map_or(0, |f| f.0);
    let frames = stream::unfold((backlog, rx), move |(mut backlog, mut rx)| async move {
        let next = match backlog.pop_front() {
            Some(f) => f,
            None => loop {
                match rx.as_mut()?.recv().await {
                    Ok(f) if f.0 <= last => continue,
                    Ok(f) => break f,
                    // A page too slow for the frames skips to the newest.
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            },
        };
        let event = Event::default().id(next.0.to_string()).data(&*next.1);
        Some((Ok(event), (backlog, rx)))
    });
    Sse::new(frames).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
struct Seq {
    seq: Option<u64>,
}

/// The latest frame, or frame `seq` while it is kept: what the page shows, as JSON.
async fn status(State(s): State<Arc<Shared>>, Query(q): Query<Seq>) -> Response {
    let found = match q.seq {
        Some(n) => s.frame(n).ok_or(format!(
            "frame {n} is not kept (the last {} are)",
            super::KEEP
        )),
        None => s
            .latest()
            .ok_or_else(|| "no interval yet: the first comes after a second".to_string()),
    };
    match found {
        Ok((_, json)) => (
            [(header::CONTENT_TYPE, "application/json")],
            json.to_string(),
        )
            .into_response(),
        Err(why) => refuse(StatusCode::NOT_FOUND, why),
    }
}

fn refuse(status: StatusCode, why: impl std::fmt::Display) -> Response {
    (
        status,
        Json(json!({ "ok": false, "error": why.to_string() })),
    )
        .into_response()
}

fn done(message: String) -> Response {
    Json(json!({ "ok": true, "message": message })).into_response()
}

/// Runs a blocking control call (the clients are synchronous) and answers with its outcome: a
/// refusal by the service passes on its reason as 502.
async fn call<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
    message: impl FnOnce(T) -> String,
) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => done(message(v)),
        Ok(Err(e)) => refuse(StatusCode::BAD_GATEWAY, format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn controls_off(s: &Shared) -> Option<Response> {
    (!s.ctx.controls).then(|| {
        refuse(
            StatusCode::FORBIDDEN,
            "the page is read-only (harness watch --http-read-only)",
        )
    })
}

/// A field of a control body that is not a finite number.
#[derive(Debug, thiserror::Error)]
#[error("{0} must be a finite number")]
struct NotFinite(&'static str);

/// A number from a control body, or why it is refused.
fn finite(name: &'static str, v: f64) -> Result<f64, NotFinite> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(NotFinite(name))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToneBody {
    frequency_hz: f64,
    amplitude: f64,
}

async fn set_tone(State(s): State<Arc<Shared>>, Json(b): Json<ToneBody>) -> Response {
    if let Some(r) = controls_off(&s) {
        return r;
    }
    let Some(dsim) = s.ctx.dsim.clone() else {
        return refuse(StatusCode::NOT_FOUND, "no dsim to control");
    };
    let tone = match finite("frequency_hz", b.frequency_hz).and_then(|frequency| {
        Ok(Tone {
            frequency,
            amplitude: finite("amplitude", b.amplitude)?,
        })
    }) {
        Ok(t) => t,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let shared = s.clone();
    call(
        move || dsim.set_tone(tone, None),
        move |_| {
            // The content check follows the tone, once it is through.
            if let Some(fs) = shared.ctx.adc_rate {
                let ctx = &shared.ctx;
                let channel = ctx.band.channel(tone.frequency, fs, ctx.channels);
                shared.ctx.expected.retune(channel, RETUNE_REST);
            }
            format!(
                "dsim: tone {:.6} MHz at amplitude {}",
                tone.frequency / 1e6,
                tone.amplitude
            )
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GainBody {
    gain: f64,
}

async fn set_gain(State(s): State<Arc<Shared>>, Json(b): Json<GainBody>) -> Response {
    if let Some(r) = controls_off(&s) {
        return r;
    }
    let Some(engine) = s.ctx.engine.clone() else {
        return refuse(StatusCode::NOT_FOUND, "no engine to control");
    };
    let gain = match finite("gain", b.gain) {
        Ok(g) => g,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    call(
        move || engine.set_gain(gain),
        move |_| format!("engine: gain {gain} on every channel of both polarisations"),
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DelayBody {
    delay_s: f64,
    #[serde(default)]
    phase_rad: f64,
}

async fn set_delay(State(s): State<Arc<Shared>>, Json(b): Json<DelayBody>) -> Response {
    if let Some(r) = controls_off(&s) {
        return r;
    }
    let Some(engine) = s.ctx.engine.clone() else {
        return refuse(StatusCode::NOT_FOUND, "no engine to control");
    };
    let (delay, phase) = match finite("delay_s", b.delay_s)
        .and_then(|d| Ok((d, finite("phase_rad", b.phase_rad)?)))
    {
        Ok(dp) => dp,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let model = fgpu_api::engine::PolDelay {
        delay,
        phase,
        ..Default::default()
    };
    let req = fgpu_api::engine::DelayRequest::both(model, model);
    call(
        move || engine.set_delays(&req),
        move |_| {
            format!(
                "engine: delay {:.3} ns, phase {phase:.4} rad on both polarisations",
                delay * 1e9
            )
        },
    )
    .await
}

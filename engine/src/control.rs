//! Control and monitoring over HTTP (axum on a tokio runtime of its own thread):
//!
//! - `GET /health`: 200 while the pipeline runs, 503 once it is stopping.
//! - `GET /status`: JSON: backend, geometry, timestamps, input and output counters, saturation,
//!   queue depths, frame timing, loaded delays.
//! - `GET /metrics`: Prometheus text.
//! - `PUT /delays`, `GET /delays`: per polarisation delay (s), delay rate (s/s), phase (rad), phase
//!   rate (rad/s), loaded at an ADC timestamp, a Unix time, or at once.
//! - `PUT /gains`, `GET /gains`: per polarisation complex gain, one value or one per channel.
//!
//! A bad request gets a 4xx with `{"error": "<one sentence>"}` and changes nothing. The thread
//! also turns SIGINT and SIGTERM into the engine's stop flag.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use crossbeam_channel::{Sender, TrySendError};
use num_complex::Complex32;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::backend::POLS;
use crate::config::EngineConfig;
use crate::metrics;
use crate::pipeline::Command;
use crate::signal::delay::DelayModel;
use crate::stats::Stats;

/// One polarisation's delay request (units as katgpucbf: s, s/s, rad, rad/s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolDelay {
    pub delay: f64,
    #[serde(default)]
    pub delay_rate: f64,
    #[serde(default)]
    pub phase: f64,
    #[serde(default)]
    pub phase_rate: f64,
}

/// A polarisation's delay as JSON fields or as katgpucbf's text `"delay,rate:phase,rate"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum PolDelaySpec {
    Fields(PolDelay),
    Text(String),
}

/// Body of PUT /delays. Polarisations left out keep their model.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DelayRequest {
    /// ADC sample count at which the values hold and from which they apply.
    load_timestamp: Option<u64>,
    /// The same as a Unix time in seconds (needs --sync-time).
    load_time: Option<f64>,
    pol0: Option<PolDelaySpec>,
    pol1: Option<PolDelaySpec>,
}

/// A loaded model as GET /delays shows it.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct LoadedDelay {
    #[serde(flatten)]
    values: PolDelay,
    /// ADC timestamp at which the values hold.
    load_timestamp: u64,
    /// First timestamp the model applies to (0: from the frame after the request).
    apply_from: u64,
}

struct Loaded {
    delays: [LoadedDelay; POLS],
    gains: [Vec<Complex32>; POLS],
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
}

impl ControlState {
    pub fn new(
        cfg: EngineConfig,
        stats: Arc<Stats>,
        backend: &'static str,
        commands: Sender<Command>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let wideband = &cfg.outputs[0];
        let gains = vec![Complex32::new(wideband.gain, 0.0); wideband.geometry.channels];
        Self {
            loaded: Mutex::new(Loaded {
                delays: Default::default(),
                gains: [gains.clone(), gains],
            }),
            cfg,
            stats,
            backend,
            commands,
            stop,
            started: Instant::now(),
        }
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
        .route("/status", get(status))
        .route("/metrics", get(prometheus))
        .route("/delays", get(get_delays).put(put_delays))
        .route("/gains", get(get_gains).put(put_gains))
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

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such resource: try GET /status, /metrics, /health, /delays, /gains or PUT /delays, /gains",
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
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(&s.stats, s.backend),
    )
        .into_response()
}

async fn status(State(s): State<Shared>) -> Response {
    Json(status_json(&s)).into_response()
}

fn status_json(s: &ControlState) -> Value {
    let cfg = &s.cfg;
    let (out, g) = (&cfg.outputs[0], cfg.channelisation(0));
    let st = &s.stats;
    let ost = &st.outputs[0];
    let input: Vec<Value> = (0..POLS)
        .map(|p| {
            let ps = &st.pols[p];
            let rejected: serde_json::Map<String, Value> = ps
                .rejects
                .snapshot()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.name().to_string(), json!(n)))
                .collect();
            let bound: Vec<String> = ps
                .bound
                .lock()
                .map(|b| b.iter().map(|a| a.to_string()).collect())
                .unwrap_or_default();
            json!({
                "pol": p,
                "sources": bound,
                "receive_threads": ps.chunk.get().map_or(0, |lanes| lanes.len()),
                "packets": ps.packets(),
                "heaps_received": ps.heaps_received(),
                "heaps_missing": ps.heaps_missing.load(Relaxed),
                "resyncs": ps.resyncs(),
                "unpaired_chunks": ps.unpaired_chunks.load(Relaxed),
                "socket_drops": ps.socket_drops.load(Relaxed),
                "last_timestamp": ps.last_timestamp.load(Relaxed),
                "rejected": rejected,
            })
        })
        .collect();
    let queues: serde_json::Map<String, Value> = st
        .queue_depths()
        .into_iter()
        .map(|(q, d)| (q.to_string(), json!(d)))
        .collect();
    let per_sub = |v: &[std::sync::atomic::AtomicU64]| -> Vec<u64> {
        v.iter().map(|c| c.load(Relaxed)).collect()
    };
    let delays = s
        .loaded
        .lock()
        .map(|l| json!({"pol0": l.delays[0], "pol1": l.delays[1]}))
        .unwrap_or(Value::Null);
    json!({
        "backend": s.backend,
        "running": !s.stop.load(Relaxed),
        "uptime_s": s.started.elapsed().as_secs_f64(),
        "feng_id": cfg.feng_id,
        "adc_sample_rate": cfg.fs,
        "sync_time": cfg.sync_time,
        "max_delay_s": cfg.max_delay,
        "geometry": {
            "channels": g.output.channels,
            "taps": g.output.taps,
            "sample_bits": g.input.sample_bits,
            "spectra_per_heap": g.output.spectra_per_heap,
            "heaps_per_frame": g.heaps_per_frame(),
            "chunk_samples": g.chunk_samples(),
            "overlap_samples": g.input.overlap_samples,
            "lag_samples": out.lag,
            "heap_samples": cfg.input.heap_samples,
            "substreams": out.substreams(),
            "channels_per_substream": out.substream_channels(),
        },
        "destinations": out.dests.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        "input": input,
        "output": {
            "heaps_sent": st.total_sent(),
            "heaps_skipped": st.total_skipped(),
            "heaps_sent_per_substream": per_sub(&ost.heaps_sent),
            "heaps_skipped_per_substream": per_sub(&ost.heaps_skipped),
            "packets": ost.packets_sent.load(Relaxed),
            "bytes": ost.bytes_sent.load(Relaxed),
            "send_errors": ost.send_errors.load(Relaxed),
            "last_timestamp": ost.last_output_timestamp.load(Relaxed),
        },
        "control": {
            "rejected_requests": st.control_rejected.load(Relaxed),
        },
        "saturated": (0..POLS).map(|p| ost.saturated[p].load(Relaxed)).collect::<Vec<_>>(),
        "frames": {
            "computed": st.frames_computed.load(Relaxed),
            "empty": st.frames_empty.load(Relaxed),
            "last_timestamp": st.last_frame_timestamp.load(Relaxed),
            "last_unix_time": st.last_frame_unix_ns.load(Relaxed) as f64 * 1e-9,
            "processing_s_last": st.chunk_time.last_ns.load(Relaxed) as f64 * 1e-9,
            "processing_s_mean": st.chunk_time.mean_seconds(),
        },
        "delay_out_of_span": st.delay_out_of_span.load(Relaxed),
        "queues": queues,
        "delays": delays,
    })
}

async fn get_delays(State(s): State<Shared>) -> Response {
    match s.loaded.lock() {
        Ok(l) => Json(json!({"pol0": l.delays[0], "pol1": l.delays[1]})).into_response(),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "state lock poisoned"),
    }
}

/// Parses katgpucbf's `"delay,delay_rate:phase,phase_rate"`.
fn parse_delay_text(pol: usize, text: &str) -> Result<PolDelay, String> {
    let bad = || {
        format!("pol{pol} delay \"{text}\" is not \"delay,delay_rate:phase,phase_rate\" (numbers)")
    };
    let (d, p) = text.split_once(':').ok_or_else(bad)?;
    let (delay, delay_rate) = d.split_once(',').ok_or_else(bad)?;
    let (phase, phase_rate) = p.split_once(',').ok_or_else(bad)?;
    let num = |s: &str| s.trim().parse::<f64>().map_err(|_| bad());
    Ok(PolDelay {
        delay: num(delay)?,
        delay_rate: num(delay_rate)?,
        phase: num(phase)?,
        phase_rate: num(phase_rate)?,
    })
}

/// Checks one polarisation's request against --max-delay.
fn check_delay(pol: usize, d: &PolDelay, max_delay: f64) -> Result<(), String> {
    for (name, v) in [
        ("delay", d.delay),
        ("delay_rate", d.delay_rate),
        ("phase", d.phase),
        ("phase_rate", d.phase_rate),
    ] {
        if !v.is_finite() {
            return Err(format!("pol{pol} {name} {v} is not a finite number"));
        }
    }
    if d.delay.abs() > max_delay * (1.0 + 1e-12) {
        return Err(format!(
            "pol{pol} delay {} s is beyond --max-delay ({max_delay} s) in size",
            d.delay
        ));
    }
    if d.delay_rate.abs() >= 1.0 {
        return Err(format!(
            "pol{pol} delay rate {} s/s is not below 1 in size",
            d.delay_rate
        ));
    }
    Ok(())
}

async fn put_delays(State(s): State<Shared>, body: Bytes) -> Response {
    match apply_delays(&s, &body) {
        Ok(v) => Json(v).into_response(),
        Err((code, msg)) => error(code, msg),
    }
}

fn apply_delays(s: &ControlState, body: &[u8]) -> Result<Value, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let req: DelayRequest = serde_json::from_slice(body).map_err(|e| {
        bad(format!(
            "the body is not a delay request ({e}); send e.g. {{\"pol0\": {{\"delay\": 1e-9, \"delay_rate\": 0, \"phase\": 0, \"phase_rate\": 0}}, \"load_timestamp\": 123}}"
        ))
    })?;
    let cfg = &s.cfg;
    let (load, apply_from) = match (req.load_timestamp, req.load_time) {
        (Some(_), Some(_)) => {
            return Err(bad("give load_timestamp or load_time, not both".into()));
        }
        (Some(t), None) => (t, t),
        (None, Some(unix)) => {
            let Some(sync) = cfg.sync_time else {
                return Err(bad(
                    "load_time (Unix seconds) needs the engine's --sync-time; give load_timestamp (ADC samples) instead".into(),
                ));
            };
            let t = (unix - sync) * cfg.fs;
            if !(t.is_finite() && t >= 0.0 && t < 2f64.powi(63)) {
                return Err(bad(format!(
                    "load_time {unix} is not a Unix time after the sync time {sync}"
                )));
            }
            let t = t.round() as u64;
            (t, t)
        }
        // At once: the values hold now (the newest input timestamp), from the next frame on.
        (None, None) => {
            let now = (0..POLS)
                .map(|p| s.stats.pols[p].last_timestamp.load(Relaxed))
                .max()
                .unwrap_or(0);
            (now, 0)
        }
    };
    if req.pol0.is_none() && req.pol1.is_none() {
        return Err(bad("give pol0, pol1 or both".into()));
    }
    let mut models: [Option<PolDelay>; POLS] = [None, None];
    for (pol, spec) in [req.pol0, req.pol1].into_iter().enumerate() {
        let Some(spec) = spec else { continue };
        let d = match spec {
            PolDelaySpec::Fields(d) => d,
            PolDelaySpec::Text(t) => parse_delay_text(pol, &t).map_err(bad)?,
        };
        check_delay(pol, &d, cfg.max_delay).map_err(bad)?;
        models[pol] = Some(d);
    }
    let mut loaded = s.loaded.lock().map_err(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "state lock poisoned".into(),
        )
    })?;
    for (pol, d) in models.iter().enumerate() {
        let Some(d) = d else { continue };
        let model = DelayModel {
            load_time: load,
            delay: d.delay,
            delay_rate: d.delay_rate,
            phase: d.phase,
            phase_rate: d.phase_rate,
        };
        send(
            &s.commands,
            Command::Delay {
                pol,
                apply_from,
                model,
            },
        )?;
        loaded.delays[pol] = LoadedDelay {
            values: *d,
            load_timestamp: load,
            apply_from,
        };
    }
    Ok(json!({"pol0": loaded.delays[0], "pol1": loaded.delays[1]}))
}

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

/// A gain as JSON: a number (real), `[re, im]`, or `[[re, im], ...]` with one per channel.
fn parse_gains(pol: usize, v: &Value, channels: usize) -> Result<Vec<Complex32>, String> {
    let usage = || {
        format!(
            "pol{pol} gain must be a number, [re, im], or a list of {channels} [re, im] pairs (one per channel)"
        )
    };
    let num = |x: &Value| -> Result<f32, String> {
        let f = x.as_f64().ok_or_else(usage)?;
        if !f.is_finite() || f.abs() > f32::MAX as f64 {
            return Err(format!("pol{pol} gain {f} is not a finite number"));
        }
        Ok(f as f32)
    };
    let pair = |x: &Value| -> Result<Complex32, String> {
        match x.as_array().map(Vec::as_slice) {
            Some([re, im]) => Ok(Complex32::new(num(re)?, num(im)?)),
            _ => Err(usage()),
        }
    };
    match v {
        Value::Number(_) => Ok(vec![Complex32::new(num(v)?, 0.0); channels]),
        Value::Array(a) if a.len() == 2 && a.iter().all(Value::is_number) => {
            Ok(vec![pair(v)?; channels])
        }
        Value::Array(a) if a.iter().all(Value::is_array) => {
            if a.len() != channels {
                return Err(format!(
                    "pol{pol} has {} gains; give one per channel ({channels}) or a single value",
                    a.len()
                ));
            }
            a.iter().map(pair).collect()
        }
        _ => Err(usage()),
    }
}

async fn put_gains(State(s): State<Shared>, body: Bytes) -> Response {
    match apply_gains(&s, &body) {
        Ok(v) => Json(v).into_response(),
        Err((code, msg)) => error(code, msg),
    }
}

fn apply_gains(s: &ControlState, body: &[u8]) -> Result<Value, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        bad(format!(
            "the body is not JSON ({e}); send e.g. {{\"pol0\": [0.5, 0], \"pol1\": 0.5}}"
        ))
    })?;
    let Some(obj) = v.as_object() else {
        return Err(bad("send an object with pol0 and/or pol1".into()));
    };
    if let Some(k) = obj.keys().find(|k| *k != "pol0" && *k != "pol1") {
        return Err(bad(format!("unknown field \"{k}\": give pol0 and/or pol1")));
    }
    if obj.is_empty() {
        return Err(bad("give pol0, pol1 or both".into()));
    }
    let channels = s.cfg.outputs[0].geometry.channels;
    let mut parsed: [Option<Vec<Complex32>>; POLS] = [None, None];
    for (pol, key) in ["pol0", "pol1"].iter().enumerate() {
        if let Some(g) = obj.get(*key) {
            parsed[pol] = Some(parse_gains(pol, g, channels).map_err(bad)?);
        }
    }
    let mut loaded = s.loaded.lock().map_err(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "state lock poisoned".into(),
        )
    })?;
    for (pol, g) in parsed.into_iter().enumerate() {
        let Some(g) = g else { continue };
        send(
            &s.commands,
            Command::Gains {
                output: 0,
                pol,
                gains: g.clone(),
            },
        )?;
        loaded.gains[pol] = g;
    }
    Ok(gains_json(&loaded.gains))
}

/// Gains as JSON: one `[re, im]` when every channel has the same gain, else one per channel.
fn gains_json(gains: &[Vec<Complex32>; POLS]) -> Value {
    // Shortest decimal of the f32 (0.1, not 0.10000000149011612).
    let num = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
    let pair = |x: &Complex32| json!([num(x.re), num(x.im)]);
    let one = |g: &Vec<Complex32>| -> Value {
        match g.first() {
            Some(first) if g.iter().all(|x| x == first) => pair(first),
            _ => Value::Array(g.iter().map(pair).collect()),
        }
    };
    json!({"pol0": one(&gains[0]), "pol1": one(&gains[1])})
}

async fn get_gains(State(s): State<Shared>) -> Response {
    match s.loaded.lock() {
        Ok(l) => Json(gains_json(&l.gains)).into_response(),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "state lock poisoned"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn state() -> (ControlState, crossbeam_channel::Receiver<Command>) {
        let cli = crate::config::Cli::try_parse_from([
            "fengine",
            "--src-pol0",
            "127.0.0.1:1",
            "--src-pol1",
            "127.0.0.1:2",
            "--dst",
            "127.0.0.1:3",
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
        let cfg = EngineConfig::from_args(&cli.run.unwrap()).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(8);
        let st = ControlState::new(
            cfg,
            Arc::new(Stats::new(&[(crate::config::WIDEBAND, 1)])),
            "null",
            tx,
            Arc::new(AtomicBool::new(false)),
        );
        (st, rx)
    }

    #[test]
    fn delays_are_validated_and_forwarded() {
        let (s, rx) = state();
        let ok = apply_delays(
            &s,
            br#"{"pol0": {"delay": 1e-4, "phase": 0.5}, "pol1": "2e-4,0:0.1,0", "load_timestamp": 1000}"#,
        )
        .unwrap();
        assert_eq!(ok["pol1"]["delay"], 2e-4);
        let cmds: Vec<Command> = rx.try_iter().collect();
        assert_eq!(cmds.len(), 2);
        assert!(matches!(
            cmds[1],
            Command::Delay { pol: 1, apply_from: 1000, model } if model.phase == 0.1 && model.load_time == 1000
        ));
        for (body, want) in [
            (&br#"{"pol0": {"delay": 1}}"#[..], "max-delay"),
            (
                br#"{"pol0": {"delay": 0, "phase": "x"}}"#,
                "not a delay request",
            ),
            (br#"{"pol0": "1,2"}"#, "delay,delay_rate"),
            (br#"{"pol2": {"delay": 0}}"#, "not a delay request"),
            (br#"{"load_time": 5, "pol0": {"delay": 0}}"#, "sync-time"),
            (br#"{}"#, "pol0, pol1"),
            (b"nonsense", "not a delay request"),
        ] {
            let (code, msg) = apply_delays(&s, body).unwrap_err();
            assert_eq!(code, StatusCode::BAD_REQUEST);
            assert!(msg.contains(want), "{msg:?} should mention {want:?}");
        }
        assert!(rx.try_recv().is_err(), "rejected requests change nothing");
    }

    /// Every refusal is counted, whichever layer refused it; good requests are not.
    #[test]
    fn refused_requests_are_counted() {
        let (s, _rx) = state();
        let s: Shared = Arc::new(s);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(s.clone());
        rt.spawn(async move { axum::serve(listener, app).await });
        let mut codes = Vec::new();
        for req in [
            "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "DELETE /gains HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "PUT /delays HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\n{bad}",
        ] {
            use std::io::{Read, Write};
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            let mut reply = String::new();
            c.read_to_string(&mut reply).unwrap();
            codes.push(reply[9..12].to_string());
        }
        assert_eq!(codes, ["200", "404", "405", "400"]);
        assert_eq!(s.stats.control_rejected.load(Relaxed), 3);
    }

    #[test]
    fn gains_take_three_shapes() {
        let (s, rx) = state();
        apply_gains(&s, br#"{"pol0": 0.5, "pol1": [1, -1]}"#).unwrap();
        let cmds: Vec<Command> = rx.try_iter().collect();
        assert!(
            matches!(&cmds[1], Command::Gains { pol: 1, gains, .. } if gains.len() == 16 && gains[3] == Complex32::new(1.0, -1.0))
        );
        let per: Vec<[f32; 2]> = (0..16).map(|k| [k as f32, 0.0]).collect();
        let body = serde_json::to_vec(&json!({ "pol0": per })).unwrap();
        let v = apply_gains(&s, &body).unwrap();
        assert_eq!(v["pol0"][15][0], 15.0);
        for (body, want) in [
            (&br#"{"pol0": [[1, 0]]}"#[..], "has 1 gains"),
            (br#"{"pol0": "x"}"#, "must be a number"),
            (br#"{"pol3": 1}"#, "unknown field"),
            (br#"[1]"#, "object"),
        ] {
            let (code, msg) = apply_gains(&s, body).unwrap_err();
            assert_eq!(code, StatusCode::BAD_REQUEST);
            assert!(msg.contains(want), "{msg:?} should mention {want:?}");
        }
    }

    #[test]
    fn status_has_the_documented_fields() {
        let (s, _rx) = state();
        let v = status_json(&s);
        for key in [
            "backend",
            "geometry",
            "input",
            "output",
            "saturated",
            "queues",
            "frames",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["geometry"]["channels"], 16);
    }
}

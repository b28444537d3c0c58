//! `PUT /delays` and `GET /delays`: each polarisation's delay model, as JSON fields or as
//! katgpucbf's text `"delay,delay_rate:phase,phase_rate"`, loaded at an ADC timestamp, a Unix time
//! or at once. Delays act on the input, so they belong to the engine, not to an output.

use std::sync::atomic::Ordering::Relaxed;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fgpu_api::engine::{DelayModel as LoadedDelay, Delays};
use serde::{Deserialize, Serialize};

use super::{reply, send, ControlState, Shared};
use crate::backend::POLS;
use crate::pipeline::Command;
use crate::stats::MAX_PENDING_DELAYS;

/// Timestamps are 48-bit (SPEAD-64-48): a load time at or past 2^48 can never come.
const TIMESTAMP_LIMIT: u64 = 1 << 48;
use crate::signal::delay::DelayModel;

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

pub(super) async fn get_delays(State(s): State<Shared>) -> Response {
    reply(s.loaded().map(|l| l.delays))
}

pub(super) async fn put_delays(State(s): State<Shared>, body: Bytes) -> Response {
    reply(apply_delays(&s, &body))
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

/// Checks one polarisation's request against --max-delay and the sample rate `fs`.
fn check_delay(pol: usize, d: &PolDelay, max_delay: f64, fs: f64) -> Result<(), String> {
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
    // Past half a turn per sample a fringe rate means nothing; far past it the phase overflows
    // within the timestamps the model applies to, and every frame would be flagged.
    let max_phase_rate = std::f64::consts::PI * fs;
    if d.phase_rate.abs() > max_phase_rate {
        return Err(format!(
            "pol{pol} phase rate {:e} rad/s is beyond pi times the sample rate ({max_phase_rate:e} rad/s) in size",
            d.phase_rate
        ));
    }
    Ok(())
}

/// What a PUT /delays body is checked against: the engine's settings and the newest input
/// timestamp (the load time of a request that names none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayContext {
    /// --max-delay, seconds.
    pub max_delay: f64,
    /// ADC sample rate, Hz.
    pub fs: f64,
    /// --sync-time: the Unix time of ADC timestamp 0, when given.
    pub sync_time: Option<f64>,
    /// The newest input timestamp of either polarisation.
    pub now: u64,
}

/// A checked PUT /delays body: the ADC timestamp at which the values hold, the first timestamp
/// they apply from (0: the next frame), and the model of each polarisation given (the others keep
/// theirs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayUpdate {
    pub load: u64,
    pub apply_from: u64,
    pub models: [Option<PolDelay>; POLS],
}

/// Parses and checks a PUT /delays body (JSON fields or katgpucbf's text per polarisation);
/// the error is one sentence naming what is wrong. Pure: nothing is loaded.
pub fn parse_delay_request(body: &[u8], ctx: &DelayContext) -> Result<DelayUpdate, String> {
    let req: DelayRequest = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the body is not a delay request ({e}); send e.g. {{\"pol0\": {{\"delay\": 1e-9, \"delay_rate\": 0, \"phase\": 0, \"phase_rate\": 0}}, \"load_timestamp\": 123}}"
        )
    })?;
    let (load, apply_from) = match (req.load_timestamp, req.load_time) {
        (Some(_), Some(_)) => {
            return Err("give load_timestamp or load_time, not both".into());
        }
        (Some(t), None) => (t, t),
        (None, Some(unix)) => {
            let Some(sync) = ctx.sync_time else {
                return Err(
                    "load_time (Unix seconds) needs the engine's --sync-time; give load_timestamp (ADC samples) instead".into(),
                );
            };
            let t = (unix - sync) * ctx.fs;
            if !(t.is_finite() && t >= 0.0 && t < 2f64.powi(63)) {
                return Err(format!(
                    "load_time {unix} is not a Unix time after the sync time {sync}"
                ));
            }
            let t = t.round() as u64;
            (t, t)
        }
        // At once: the values hold now (the newest input timestamp), from the next frame on.
        (None, None) => (ctx.now, 0),
    };
    if load >= TIMESTAMP_LIMIT {
        return Err(format!(
            "the load time is ADC sample {load}, past the stream's 48-bit timestamps (at most {})",
            TIMESTAMP_LIMIT - 1
        ));
    }
    if req.pol0.is_none() && req.pol1.is_none() {
        return Err("give pol0, pol1 or both".into());
    }
    let mut models: [Option<PolDelay>; POLS] = [None, None];
    for (pol, spec) in [req.pol0, req.pol1].into_iter().enumerate() {
        let Some(spec) = spec else { continue };
        let d = match spec {
            PolDelaySpec::Fields(d) => d,
            PolDelaySpec::Text(t) => parse_delay_text(pol, &t)?,
        };
        check_delay(pol, &d, ctx.max_delay, ctx.fs)?;
        models[pol] = Some(d);
    }
    Ok(DelayUpdate {
        load,
        apply_from,
        models,
    })
}

/// Validates a PUT /delays body, forwards each polarisation's model to the pipeline and
/// returns both models as now loaded.
fn apply_delays(s: &ControlState, body: &[u8]) -> Result<Delays, (StatusCode, String)> {
    let ctx = DelayContext {
        max_delay: s.cfg.max_delay,
        fs: s.cfg.fs,
        sync_time: s.cfg.sync_time,
        now: (0..POLS)
            .map(|p| s.stats.pols[p].last_timestamp.load(Relaxed))
            .max()
            .unwrap_or(0),
    };
    let DelayUpdate {
        load,
        apply_from,
        models,
    } = parse_delay_request(body, &ctx).map_err(|m| (StatusCode::BAD_REQUEST, m))?;
    // Models loaded ahead wait in the compute stage: bounded, so that a client looping on
    // future loads cannot grow the engine without limit.
    for (pol, d) in models.iter().enumerate() {
        let pending = s.stats.pending_delays[pol].load(Relaxed);
        if d.is_some() && apply_from > ctx.now && pending >= MAX_PENDING_DELAYS {
            return Err((
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "pol{pol} already has {pending} delay models waiting for their load time (at most {MAX_PENDING_DELAYS}); load fewer ahead"
                ),
            ));
        }
    }
    let mut loaded = s.loaded()?;
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
        let shown = LoadedDelay {
            delay: d.delay,
            delay_rate: d.delay_rate,
            phase: d.phase,
            phase_rate: d.phase_rate,
            load_timestamp: load,
            apply_from,
        };
        match pol {
            0 => loaded.delays.pol0 = shown,
            _ => loaded.delays.pol1 = shown,
        }
        loaded.delays_loaded = true;
    }
    Ok(loaded.delays)
}

#[cfg(test)]
mod tests {
    use super::super::tests::state;
    use super::*;

    #[test]
    fn delays_are_validated_and_forwarded() {
        let (s, rx) = state();
        let ok = apply_delays(
            &s,
            br#"{"pol0": {"delay": 1e-4, "phase": 0.5}, "pol1": "2e-4,0:0.1,0", "load_timestamp": 1000}"#,
        )
        .unwrap();
        assert_eq!(ok.pol1.delay, 2e-4);
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
            (
                br#"{"pol0": {"delay": 0}, "load_timestamp": 281474976710656}"#,
                "48-bit timestamps",
            ),
            (b"nonsense", "not a delay request"),
        ] {
            let (code, msg) = apply_delays(&s, body).unwrap_err();
            assert_eq!(code, StatusCode::BAD_REQUEST);
            assert!(msg.contains(want), "{msg:?} should mention {want:?}");
        }
        assert!(rx.try_recv().is_err(), "rejected requests change nothing");
    }

    /// A phase rate so large that the phase overflows within the timestamps the model applies to
    /// is refused (it was accepted, and every frame after a few minutes would have been flagged
    /// "delay model unusable"); up to pi times the sample rate, the model evaluates over the whole
    /// span of 48-bit timestamps. Found while writing the engine_delays fuzz target's rules.
    #[test]
    fn a_phase_rate_beyond_nyquist_is_refused() {
        let ctx = DelayContext {
            max_delay: 1e-3,
            fs: 1712e6,
            sync_time: None,
            now: 0,
        };
        let e = parse_delay_request(br#"{"pol0": {"delay": 0, "phase_rate": 1e306}}"#, &ctx)
            .unwrap_err();
        assert!(e.contains("pol0 phase rate 1e306 rad/s"), "{e}");
        let edge = std::f64::consts::PI * ctx.fs;
        let body = format!(r#"{{"pol1": "0,0:0,{}", "load_timestamp": 5}}"#, -edge);
        let d = parse_delay_request(body.as_bytes(), &ctx).unwrap().models[1].unwrap();
        let model = DelayModel {
            load_time: 5,
            delay: d.delay,
            delay_rate: d.delay_rate,
            phase: d.phase,
            phase_rate: d.phase_rate,
        };
        assert!(model.at(5 + (1 << 48), ctx.fs).is_ok());
    }

    /// Models waiting for their load time are bounded per polarisation: past the bound a future
    /// load is refused with 429 and nothing is sent; loads that apply at once still go through.
    #[test]
    fn models_waiting_ahead_are_bounded() {
        let (s, rx) = state();
        s.stats.pending_delays[1].store(MAX_PENDING_DELAYS, Relaxed);
        let (code, msg) =
            apply_delays(&s, br#"{"pol1": "1e-4,0:0,0", "load_timestamp": 99999}"#).unwrap_err();
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        assert!(msg.contains("pol1 already has 256"), "{msg}");
        assert!(rx.try_recv().is_err(), "a refused request changes nothing");
        // The other polarisation, and a load that applies at once, are not held back.
        apply_delays(&s, br#"{"pol0": "1e-4,0:0,0", "load_timestamp": 99999}"#).unwrap();
        apply_delays(&s, br#"{"pol1": "1e-4,0:0,0"}"#).unwrap();
        assert_eq!(rx.try_iter().count(), 2);
    }

    /// GET /delays keeps today's JSON: the four values, the load timestamp and apply_from.
    #[test]
    fn loaded_delays_read_back_as_before() {
        let (s, _rx) = state();
        apply_delays(&s, br#"{"pol0": "1e-4,0:0.5,0", "load_timestamp": 7}"#).unwrap();
        let v = serde_json::to_value(s.loaded.lock().unwrap().delays).unwrap();
        assert_eq!(
            v["pol0"],
            serde_json::json!({"delay": 1e-4, "delay_rate": 0.0, "phase": 0.5,
                "phase_rate": 0.0, "load_timestamp": 7, "apply_from": 7})
        );
        assert_eq!(v["pol1"]["delay"], 0.0);
    }
}

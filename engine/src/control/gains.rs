//! `PUT/GET /outputs/{name}/gains` and `PUT/GET /gains` (the wideband output's): each
//! polarisation's complex gain per channel, given as one real number, one `[re, im]`, or one
//! `[re, im]` per channel. Gains belong to an output (each has its own channels).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use fgpu_api::engine::WIDEBAND;
use num_complex::Complex32;
use serde_json::{json, Value};

use super::{reply, send, ControlState, Loaded, Shared};
use crate::backend::POLS;
use crate::pipeline::Command;

pub(super) async fn get_wideband_gains(State(s): State<Shared>) -> Response {
    reply(read_gains(&s, WIDEBAND))
}

pub(super) async fn put_wideband_gains(State(s): State<Shared>, body: Bytes) -> Response {
    reply(apply_gains(&s, WIDEBAND, &body))
}

pub(super) async fn get_output_gains(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Response {
    reply(read_gains(&s, &name))
}

pub(super) async fn put_output_gains(
    State(s): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    reply(apply_gains(&s, &name, &body))
}

/// The 404 for an output this engine does not have.
fn no_such_output(loaded: &Loaded, name: &str) -> (StatusCode, String) {
    let names: Vec<&str> = loaded.gains.keys().map(String::as_str).collect();
    (
        StatusCode::NOT_FOUND,
        format!(
            "this engine has no output named \"{name}\"; its outputs are: {}",
            names.join(", ")
        ),
    )
}

fn read_gains(s: &ControlState, output: &str) -> Result<Value, (StatusCode, String)> {
    let loaded = s.loaded()?;
    match loaded.gains.get(output) {
        Some(g) => Ok(gains_json(g)),
        None => Err(no_such_output(&loaded, output)),
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

/// Gains for each polarisation given (None: keeps its own), one per channel.
pub type GainUpdate = [Option<Vec<Complex32>>; POLS];

/// Parses and checks a PUT gains body for an output of `channels` channels; the error is one
/// sentence naming what is wrong. Pure: nothing is loaded.
pub fn parse_gain_request(body: &[u8], channels: usize) -> Result<GainUpdate, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        format!("the body is not JSON ({e}); send e.g. {{\"pol0\": [0.5, 0], \"pol1\": 0.5}}")
    })?;
    let Some(obj) = v.as_object() else {
        return Err("send an object with pol0 and/or pol1".into());
    };
    if let Some(k) = obj.keys().find(|k| *k != "pol0" && *k != "pol1") {
        return Err(format!("unknown field \"{k}\": give pol0 and/or pol1"));
    }
    if obj.is_empty() {
        return Err("give pol0, pol1 or both".into());
    }
    let mut parsed: GainUpdate = [None, None];
    for (pol, key) in ["pol0", "pol1"].iter().enumerate() {
        if let Some(g) = obj.get(*key) {
            parsed[pol] = Some(parse_gains(pol, g, channels)?);
        }
    }
    Ok(parsed)
}

/// Validates a PUT body for `output`'s gains, forwards them to the pipeline and returns the
/// output's gains as now loaded.
fn apply_gains(s: &ControlState, output: &str, body: &[u8]) -> Result<Value, (StatusCode, String)> {
    // The pipeline knows outputs by their index in the configuration.
    let Some(index) = s.cfg.outputs.iter().position(|o| o.name == output) else {
        return Err(no_such_output(&*s.loaded()?, output));
    };
    let channels = s.cfg.outputs[index].geometry.channels;
    let parsed = parse_gain_request(body, channels).map_err(|m| (StatusCode::BAD_REQUEST, m))?;
    let mut loaded = s.loaded()?;
    let gains = match loaded.gains.get_mut(output) {
        Some(g) => g,
        None => return Err(no_such_output(&loaded, output)),
    };
    for (pol, g) in parsed.into_iter().enumerate() {
        let Some(g) = g else { continue };
        send(
            &s.commands,
            Command::Gains {
                output: index,
                pol,
                gains: g.clone(),
            },
        )?;
        gains[pol] = g;
    }
    Ok(gains_json(gains))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::tests::{exchange, state};
    use super::*;

    #[test]
    fn gains_take_three_shapes() {
        let (s, rx) = state();
        apply_gains(&s, WIDEBAND, br#"{"pol0": 0.5, "pol1": [1, -1]}"#).unwrap();
        let cmds: Vec<Command> = rx.try_iter().collect();
        assert!(
            matches!(&cmds[1], Command::Gains { pol: 1, gains, .. } if gains.len() == 16 && gains[3] == Complex32::new(1.0, -1.0))
        );
        let per: Vec<[f32; 2]> = (0..16).map(|k| [k as f32, 0.0]).collect();
        let body = serde_json::to_vec(&json!({ "pol0": per })).unwrap();
        let v = apply_gains(&s, WIDEBAND, &body).unwrap();
        assert_eq!(v["pol0"][15][0], 15.0);
        for (body, want) in [
            (&br#"{"pol0": [[1, 0]]}"#[..], "has 1 gains"),
            (br#"{"pol0": "x"}"#, "must be a number"),
            (br#"{"pol3": 1}"#, "unknown field"),
            (br#"[1]"#, "object"),
        ] {
            let (code, msg) = apply_gains(&s, WIDEBAND, body).unwrap_err();
            assert_eq!(code, StatusCode::BAD_REQUEST);
            assert!(msg.contains(want), "{msg:?} should mention {want:?}");
        }
    }

    /// `/outputs/wideband/gains` and `/gains` are one resource; an unknown output is a 404 with
    /// a sentence that names the outputs there are, and changes nothing.
    #[test]
    fn gains_by_output_name() {
        let (s, rx) = state();
        let s: Shared = Arc::new(s);
        let put = |path: &str, body: &str| {
            format!(
                "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        let get =
            |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let replies = exchange(
            s.clone(),
            &[
                put("/outputs/wideband/gains", r#"{"pol0": 0.25}"#),
                get("/gains"),
                put("/outputs/nope/gains", r#"{"pol0": 2}"#),
                get("/outputs/nope/gains"),
                get("/outputs/wideband/gains"),
            ],
        );
        let codes: Vec<&str> = replies.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(codes, ["200", "200", "404", "404", "200"]);
        let body = |i: usize| -> Value { serde_json::from_str(&replies[i].1).unwrap() };
        assert_eq!(body(1)["pol0"], json!([0.25, 0.0]));
        assert_eq!(body(4), body(1));
        let refusal = body(2)["error"].as_str().unwrap().to_string();
        assert!(
            refusal.contains("\"nope\"") && refusal.contains("wideband") && refusal.ends_with('.'),
            "{refusal}"
        );
        assert_eq!(
            rx.try_iter().count(),
            1,
            "only the wideband PUT reached the pipeline"
        );
    }
}

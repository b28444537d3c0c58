//! `GET /outputs/{name}`: one output's section of `GET /status`. `PUT /outputs/{name}` with
//! `{"centre": HZ}`: a narrowband output's centre frequency, from a frame on, without a restart.
//!
//! The centre is quantised and checked as at start (`ddc::mixer_word`: the band, fs/(2D) wide,
//! must lie within 0 .. fs/2); the mixer word goes to the compute stage, which gives it to every
//! frame it prepares from then on (the frame's DDC and its delays' mixer term together), and the
//! status reports the quantised centre from the reply on.

use std::sync::atomic::Ordering::Relaxed;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use fgpu_api::engine::Output;
use serde_json::Value;

use super::{reply, send, status, ControlState, Shared};
use crate::backend::OutputKind;
use crate::pipeline::Command;
use crate::signal::ddc;

pub(super) async fn get_output(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    reply(index(&s, &name).map(|k| status::output(&s.cfg, &s.stats, k)))
}

pub(super) async fn put_output(
    State(s): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    reply(apply_output(&s, &name, &body))
}

/// The output's index in the configuration, or the 404 that names the outputs there are.
fn index(s: &ControlState, name: &str) -> Result<usize, (StatusCode, String)> {
    s.cfg
        .outputs
        .iter()
        .position(|o| o.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = s.cfg.outputs.iter().map(|o| o.name.as_str()).collect();
            (
                StatusCode::NOT_FOUND,
                format!(
                    "this engine has no output named \"{name}\"; its outputs are: {}",
                    names.join(", ")
                ),
            )
        })
}

/// Parses a `PUT /outputs/{name}` body, `{"centre": HZ}`: the centre asked for, in Hz (finite;
/// its range is the output's to check). The error is one sentence. Pure: nothing is loaded.
pub fn parse_output_request(body: &[u8]) -> Result<f64, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON ({e}); send e.g. {{\"centre\": 1.2e9}}"))?;
    let Some(obj) = v.as_object() else {
        return Err("send an object such as {\"centre\": 1.2e9} (Hz)".into());
    };
    if let Some(k) = obj.keys().find(|k| *k != "centre") {
        return Err(format!(
            "unknown field \"{k}\": an output's centre (Hz) is all that changes at run time"
        ));
    }
    match obj.get("centre") {
        None => Err("give centre, the narrowband output's centre frequency in Hz".into()),
        Some(c) => c
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| format!("centre {c} is not a frequency in Hz")),
    }
}

/// Checks a new centre for output `name` and hands its mixer word to the pipeline; the output's
/// section of the status as it now stands.
fn apply_output(s: &ControlState, name: &str, body: &[u8]) -> Result<Output, (StatusCode, String)> {
    let k = index(s, name)?;
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let centre = parse_output_request(body).map_err(bad)?;
    let OutputKind::Narrowband(ddc) = s.cfg.outputs[k].geometry.kind else {
        return Err(bad(format!(
            "output \"{name}\" is a wideband output: only a narrowband output has a centre to change"
        )));
    };
    let word = ddc::mixer_word(centre, s.cfg.fs, ddc.decimation)
        .map_err(|e| bad(format!("output \"{name}\": {e}")))?;
    // One change at a time, so that the status ends with the word the pipeline got last.
    let _one_at_a_time = s.loaded()?;
    send(
        &s.commands,
        Command::Centre {
            output: k,
            mixer: word,
        },
    )?;
    if let Some(m) = &s.stats.outputs[k].mixer {
        m.store(word, Relaxed);
    }
    Ok(status::output(&s.cfg, &s.stats, k))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::tests::{exchange, state_with};
    use super::*;

    /// A wideband output and a narrowband one of 64 channels, D = 8 around 200 kHz, at 1 MHz: the
    /// centre may lie from fs/(4D) = 31.25 kHz to fs/2 - fs/(4D) = 468.75 kHz.
    const FLAGS: [&str; 6] = [
        "--wideband",
        "wide:dst=127.0.0.1:7150",
        "--narrowband",
        "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=200e3,taps=4",
        "--control-token",
        "s3cret",
    ];

    fn put(path: &str, body: &str, token: bool) -> String {
        let auth = if token {
            "Authorization: Bearer s3cret\r\n"
        } else {
            ""
        };
        format!(
            "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    }

    #[test]
    fn parsing_names_what_is_wrong() {
        assert_eq!(parse_output_request(br#"{"centre": 1.5e8}"#), Ok(1.5e8));
        assert_eq!(parse_output_request(br#"{"centre": 3}"#), Ok(3.0));
        for (body, want) in [
            (&b"{centre"[..], "not JSON"),
            (b"[1]", "send an object"),
            (b"{}", "give centre"),
            (br#"{"center": 1e8}"#, "unknown field \"center\""),
            (br#"{"centre": 1e8, "gain": 1}"#, "unknown field \"gain\""),
            (br#"{"centre": "1e8"}"#, "is not a frequency in Hz"),
            (br#"{"centre": null}"#, "is not a frequency in Hz"),
        ] {
            let e = parse_output_request(body).unwrap_err();
            assert!(e.contains(want), "{e:?} should say {want:?}");
        }
    }

    /// A good centre is quantised, reaches the pipeline and shows in the status and metrics; a bad
    /// one, a wideband output, an unknown output or a missing token is a 4xx with a sentence and
    /// changes nothing.
    #[test]
    fn a_narrowband_centre_changes_at_run_time() {
        let (s, rx) = state_with(&FLAGS);
        let s: Shared = Arc::new(s);
        let fs = s.cfg.fs;
        let word = |hz: f64| ddc::mixer_word(hz, fs, 8).unwrap();
        let replies = exchange(
            s.clone(),
            &[
                get("/outputs/nb"),
                put("/outputs/nb", r#"{"centre": 300000.4}"#, true),
                get("/outputs/nb"),
                get("/status"),
                get("/metrics"),
                // Refused, each changing nothing:
                put("/outputs/nb", r#"{"centre": 3e5}"#, false),
                put("/outputs/nb", r#"{"centre": 470e3}"#, true),
                put("/outputs/nb", r#"{"centre": -1}"#, true),
                put("/outputs/nb", r#"{"centre": 3e5, "x": 1}"#, true),
                put("/outputs/wide", r#"{"centre": 3e5}"#, true),
                put("/outputs/nope", r#"{"centre": 3e5}"#, true),
                get("/outputs/nope"),
                get("/outputs/nb"),
            ],
        );
        let codes: Vec<&str> = replies.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            codes,
            [
                "200", "200", "200", "200", "200", "401", "400", "400", "400", "400", "404", "404",
                "200"
            ]
        );
        let json = |i: usize| -> Value { serde_json::from_str(&replies[i].1).unwrap() };
        let before = json(0);
        assert_eq!(before["kind"], "narrowband");
        assert_eq!(before["narrowband"]["mixer_word"], word(200e3));
        assert_eq!(before["narrowband"]["decimation"], 8);
        assert_eq!(before["narrowband"]["ddc_taps"], 96);
        assert_eq!(before["narrowband"]["bandwidth_hz"], 62500.0);
        // The reply and the status carry the quantised centre.
        let quantised = ddc::centre_frequency(word(300000.4), fs);
        assert!(quantised != 300000.4 && (quantised - 300000.4).abs() < fs / 2f64.powi(32));
        for v in [json(1), json(2), json(3)["outputs"]["nb"].clone()] {
            assert_eq!(v["narrowband"]["centre_hz"], quantised, "{v}");
            assert_eq!(v["narrowband"]["mixer_word"], word(300000.4));
        }
        let wide = &json(3)["outputs"]["wide"];
        assert_eq!(wide["kind"], "wideband");
        assert!(wide.get("narrowband").is_none(), "{wide}");
        let gauge = replies[4]
            .1
            .lines()
            .find_map(|l| {
                l.strip_prefix("fengine_output_centre_hz{backend=\"null\",output=\"nb\"} ")
            })
            .and_then(|v| v.parse::<f64>().ok());
        assert_eq!(gauge, Some(quantised), "{}", replies[4].1);
        assert!(!replies[4]
            .1
            .contains("output_centre_hz{backend=\"null\",output=\"wide\"}"));
        for (i, want) in [
            (5, "Authorization: Bearer"),
            (6, "must lie from 31250 Hz to 468750 Hz"),
            (7, "output \"nb\": the narrowband centre -1 Hz lies outside"),
            (8, "unknown field \"x\""),
            (9, "output \"wide\" is a wideband output"),
            (10, "no output named \"nope\"; its outputs are: wide, nb"),
            (11, "no output named \"nope\""),
        ] {
            let e = json(i)["error"].as_str().unwrap().to_string();
            assert!(
                e.contains(want) && e.ends_with('.'),
                "{i}: {e:?} should say {want:?}"
            );
        }
        assert_eq!(json(12), json(2), "the refusals changed nothing");
        let sent: Vec<Command> = rx.try_iter().collect();
        assert!(
            matches!(&sent[..], [Command::Centre { output: 1, mixer }] if *mixer == word(300000.4)),
            "{sent:?}"
        );
    }
}

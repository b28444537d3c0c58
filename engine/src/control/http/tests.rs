//! The HTTP front end to end: raw requests through `fgpu_serve`'s limits and the router to a
//! controller over a small configuration, each reply's status code and body checked.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use serde_json::{json, Value};

use super::super::controller::tests::{controller, controller_with};
use super::super::outputs::tests::FLAGS;
use super::*;
use crate::pipeline::Command;
use crate::signal::ddc;
use crate::stats::MAX_PENDING_DELAYS;

/// Sends raw HTTP requests to the control server of `c` (its router behind `fgpu_serve`, with
/// the engine's limits); the status code and body of each reply.
fn exchange(c: Shared, requests: &[String]) -> Vec<(String, String)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = limits(c.config());
    let app = router(c);
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

fn put(path: &str, body: &str, extra: &str) -> String {
    format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
}

/// The refusal's sentence in a reply body.
fn error_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap();
    v["error"].as_str().unwrap().to_string()
}

/// Every refusal is counted, whichever layer refused it; good requests are not.
#[test]
fn refused_requests_are_counted() {
    let (c, _rx) = controller();
    let c: Shared = Arc::new(c);
    let requests = [
        get("/status"),
        get("/nothing"),
        "DELETE /gains HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into(),
        put("/delays", "{bad}", ""),
    ];
    let replies = exchange(c.clone(), &requests);
    let codes: Vec<&str> = replies.iter().map(|(code, _)| code.as_str()).collect();
    assert_eq!(codes, ["200", "404", "405", "400"]);
    assert_eq!(c.stats.control_rejected.load(Relaxed), 3);
    assert_eq!(
        error_of(&replies[1].1),
        "no such resource: try GET /status, /metrics, /health, /delays, /gains, /outputs/NAME, /outputs/NAME/gains or PUT /delays, /gains, /outputs/NAME (a narrowband output's centre), /outputs/NAME/gains."
    );
    assert_eq!(
        error_of(&replies[2].1),
        "that method is not allowed here: read with GET, change with PUT."
    );
}

/// Each refusal of the controller gets the status code of its kind: 400 for a bad request, 404
/// for an unknown output, 429 for too many models waiting, 503 once the pipeline is gone; and
/// the sentence as the controller says it.
#[test]
fn refusals_get_their_status_codes() {
    let (c, rx) = controller();
    let c: Shared = Arc::new(c);
    c.stats.pending_delays[1].store(MAX_PENDING_DELAYS, Relaxed);
    let replies = exchange(
        c.clone(),
        &[
            put("/delays", r#"{"pol0": {"delay": 1}}"#, ""),
            put(
                "/delays",
                r#"{"pol1": "1e-4,0:0,0", "load_timestamp": 99999}"#,
                "",
            ),
            put("/delays", "nonsense", ""),
            put("/outputs/nope/gains", "nonsense", ""),
            put("/gains", r#"{"pol0": [[1, 0]]}"#, ""),
            put("/gains", r#"{"pol0": 0.5}"#, ""),
            get("/delays"),
        ],
    );
    let codes: Vec<&str> = replies.iter().map(|(code, _)| code.as_str()).collect();
    assert_eq!(codes, ["400", "429", "400", "404", "400", "200", "200"]);
    assert_eq!(
        error_of(&replies[0].1),
        "pol0 delay 1 s is beyond --max-delay (0.001 s) in size."
    );
    assert!(error_of(&replies[1].1).starts_with("pol1 already has 256 delay models"));
    assert!(error_of(&replies[2].1).starts_with("the body is not a delay request ("));
    assert_eq!(
        error_of(&replies[4].1),
        "pol0 has 1 gains; give one per channel (16) or a single value."
    );
    assert_eq!(
        serde_json::from_str::<Value>(&replies[6].1).unwrap()["pol0"]["delay"],
        0.0
    );
    drop(rx);
    let replies = exchange(c, &[put("/gains", r#"{"pol0": 0.5}"#, ""), get("/health")]);
    assert_eq!(replies[0].0, "503");
    assert_eq!(error_of(&replies[0].1), "the engine is stopping.");
    assert_eq!(replies[1], ("200".into(), r#"{"status":"ok"}"#.into()));
}

/// The body limit follows the largest output: 128 bytes per channel, at least 1 MiB, so 8 MiB
/// at the most channels an output may have.
#[test]
fn the_body_limit_follows_the_channels() {
    let (s, _rx) = controller();
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
    let (s, rx) = controller();
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
    let (s, rx) = controller_with(&["--control-token", "s3cret"]);
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

/// `/outputs/wideband/gains` and `/gains` are one resource; an unknown output is a 404 with
/// a sentence that names the outputs there are, and changes nothing.
#[test]
fn gains_by_output_name() {
    let (s, rx) = controller();
    let s: Shared = Arc::new(s);
    let put = |path: &str, body: &str| put(path, body, "");
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

/// A good centre is quantised, reaches the pipeline and shows in the status and metrics; a bad
/// one, a wideband output, an unknown output or a missing token is a 4xx with a sentence and
/// changes nothing.
#[test]
fn a_narrowband_centre_changes_at_run_time() {
    let (s, rx) = controller_with(&FLAGS);
    let put = |path: &str, body: &str, token: bool| {
        let auth = if token {
            "Authorization: Bearer s3cret\r\n"
        } else {
            ""
        };
        put(path, body, auth)
    };
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
        .find_map(|l| l.strip_prefix("fengine_output_centre_hz{backend=\"null\",output=\"nb\"} "))
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

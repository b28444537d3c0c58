//! The HTTP control API against a running dsim: reads, changes that take effect at the heap the
//! reply names, and bad requests that get a 4xx sentence and change nothing.

mod common;

use std::time::Duration;

use common::{config, contiguous, decode, slope, Capture};
use dsim::{Dsim, DsimHandle, Tone};
use serde_json::{json, Value};

const HS: u64 = 4096;

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

struct Reply {
    status: u16,
    body: String,
    content_type: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn call(d: &DsimHandle, method: &str, path: &str, body: Option<&str>) -> Reply {
    call_as(d, None, method, path, body)
}

/// [`call`] with `Authorization: Bearer TOKEN` when a token is given.
fn call_as(
    d: &DsimHandle,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Reply {
    let url = format!("http://{}{path}", d.control_addr().unwrap());
    let a = agent();
    let auth = token.map(|t| format!("Bearer {t}"));
    fn with<B>(r: ureq::RequestBuilder<B>, auth: &Option<String>) -> ureq::RequestBuilder<B> {
        match auth {
            Some(v) => r.header("authorization", v),
            None => r,
        }
    }
    let r = match (method, body) {
        ("GET", _) => with(a.get(&url), &auth).call(),
        ("POST", _) => with(a.post(&url), &auth).send(body.unwrap_or("")),
        (_, Some(b)) => with(a.put(&url), &auth).send(b),
        _ => with(a.put(&url), &auth).send_empty(),
    };
    let mut r = r.unwrap();
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    Reply {
        status: r.status().as_u16(),
        body: r.body_mut().read_to_string().unwrap(),
        content_type,
    }
}

/// Held by the test that measures timing and the one that builds a signal (CPU work that could
/// starve the first on a small machine).
static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn start(cap: &Capture, rate: f64, heaps: Option<u64>) -> DsimHandle {
    let mut cfg = config(cap);
    cfg.rate = rate;
    cfg.heaps = heaps;
    cfg.control = Some("127.0.0.1:0".parse().unwrap());
    Dsim::start(cfg).unwrap()
}

#[test]
fn reads_health_status_and_metrics() {
    let cap = Capture::start([1, 1]);
    let d = start(&cap, 1e7, None);
    std::thread::sleep(Duration::from_millis(300));
    let h = call(&d, "GET", "/health", None);
    assert_eq!((h.status, h.body.trim()), (200, "ok"));
    let s = call(&d, "GET", "/status", None).json();
    assert_eq!(s["rate"], 1e7);
    assert_eq!(s["state"], "running");
    assert_eq!(s["heap_samples"], 4096);
    assert!(s["pols"][0]["heaps_sent"].as_u64().unwrap() > 0);
    assert!(s["pols"][1]["bytes_sent"].as_u64().unwrap() > 0);
    assert!(s["timestamp"].as_u64().unwrap() > 0);
    for key in [
        "achieved_rate",
        "rate_error",
        "rate_ok",
        "sync_time",
        "signal",
    ] {
        assert!(s.get(key).is_some(), "status lacks {key}");
    }
    assert_eq!(s["pols"][0]["saturated_samples"], 0);
    let m = call(&d, "GET", "/metrics", None);
    assert_eq!(m.status, 200);
    assert!(
        m.content_type.starts_with("text/plain"),
        "{}",
        m.content_type
    );
    for line in m.body.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(
            series.starts_with("dsim_") || series.starts_with("process_"),
            "{line}"
        );
        value.parse::<f64>().unwrap();
    }
    assert!(m.body.contains("dsim_heaps_sent_total{pol=\"1\"}"));
    assert!(m.body.contains("# TYPE dsim_bytes_sent_total counter"));
    // The process's own resources, under Prometheus's standard names.
    for name in [
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_threads ",
    ] {
        assert!(
            m.body.contains(&format!("\n{name}")),
            "no {name}in\n{}",
            m.body
        );
    }
    // No noise (the tests' config), so no components; the default seed.
    let signal = call(&d, "GET", "/signal", None).json();
    assert_eq!(signal["pols"][0]["components"], json!([]));
    assert_eq!(signal["pols"][1]["dither"], true);
    assert_eq!(signal["seed"], 1);
    assert_eq!(signal, s["signal"]);
    assert_eq!(call(&d, "GET", "/rate", None).json()["rate"], 1e7);
    d.stop();
    drop(cap.finish(Duration::from_millis(50)));
}

#[test]
fn bad_requests_get_a_4xx_sentence_and_change_nothing() {
    let cap = Capture::start([1, 1]);
    let d = start(&cap, 1e7, None);
    let before = call(&d, "GET", "/status", None).json();
    let faults_before = call(&d, "GET", "/faults", None).body;
    let cases: &[(&str, &str, Option<&str>, u16, &str)] = &[
        ("PUT", "/rate", Some(r#"{"rate": -5}"#), 422, "rate -5"),
        ("PUT", "/rate", Some(r#"{"rate": 1e20}"#), 422, "outside"),
        (
            "PUT",
            "/rate",
            Some("fast please"),
            400,
            "not a valid rate request",
        ),
        (
            "PUT",
            "/rate",
            Some(r#"{"rtae": 1e8}"#),
            400,
            "unknown field",
        ),
        ("PUT", "/rate", None, 400, "not a valid rate request"),
        (
            "PUT",
            "/signal",
            Some(r#"{"tones": [{"frequency": 1e12, "amplitude": 0.5}]}"#),
            422,
            "tone 0 has frequency",
        ),
        ("PUT", "/signal", Some(r#"{"noise": -1}"#), 422, "noise -1"),
        (
            "PUT",
            "/signal",
            Some(r#"{"delays": [0]}"#),
            400,
            "read as the common form, and delays: invalid length 1",
        ),
        (
            "PUT",
            "/signal",
            Some(
                r#"{"pol0": {"components": [{"kind": "tone", "frequency": 1e6, "amplitude": 0.1, "phse": 0}]}}"#,
            ),
            400,
            "read as the per-polarisation form, and pol0.components[0]: unknown field `phse`",
        ),
        (
            "PUT",
            "/signal",
            Some(r#"{"pol1": {"components": [{"kind": "sawtooth"}]}}"#),
            400,
            "pol1.components[0].kind: unknown variant `sawtooth`",
        ),
        (
            "PUT",
            "/signal",
            Some(r#"{"pol0": {"components": []}, "noise": 0.1}"#),
            400,
            "per-polarisation form, and unknown field `noise`",
        ),
        (
            "PUT",
            "/signal",
            // A good pol0 does not go in with a bad pol1.
            Some(
                r#"{"pol0": {"components": [{"kind": "noise", "rms": 0.1, "seed": 1}]},
                    "pol1": {"components": [{"kind": "noise", "rms": 0.1, "seed": 1},
                                            {"kind": "comb", "start": 1e6, "spacing": 1e6, "count": 5000, "amplitude": 0.1}]}}"#,
            ),
            422,
            "pol1 component 1 (comb): count 5000 is not 1 to 4096",
        ),
        (
            "PUT",
            "/signal",
            Some(
                r#"{"pol0": {"components": [{"kind": "tone", "frequency": 6e6, "amplitude": 0.1}]}}"#,
            ),
            422,
            "pol0 component 0 (tone): frequency 6000000 Hz is outside 0 to 5000000 Hz",
        ),
        (
            "PUT",
            "/signal",
            Some(r#"{"pol0": {"components": [], "delay": 1e10}}"#),
            422,
            "pol0 delay is 10000000000 samples",
        ),
        (
            "PUT",
            "/signal",
            Some(r#"{"nosie": 0.1}"#),
            400,
            "unknown field",
        ),
        (
            "PUT",
            "/faults",
            Some(r#"{"pol0": {"drop": {"probability": 2}}}"#),
            422,
            "pol0.drop.probability 2",
        ),
        (
            "PUT",
            "/faults",
            Some(r#"{"pol1": {"reorder": {"window": 0}}}"#),
            422,
            "window 0",
        ),
        (
            "PUT",
            "/faults",
            Some(r#"{"pol2": {}}"#),
            400,
            "unknown field",
        ),
        ("GET", "/nowhere", None, 404, "no such endpoint"),
        ("POST", "/status", Some("{}"), 405, "not allowed"),
    ];
    for &(method, path, body, code, words) in cases {
        let r = call(&d, method, path, body);
        assert_eq!(r.status, code, "{method} {path} {body:?}: {}", r.body);
        let msg = r.json()["error"].as_str().unwrap().to_string();
        assert!(
            msg.contains(words),
            "{method} {path}: {msg:?} lacks {words:?}"
        );
        assert!(msg.ends_with('.'), "{msg:?} is not a sentence");
    }
    let after = call(&d, "GET", "/status", None).json();
    assert_eq!(after["rate"], before["rate"]);
    assert_eq!(after["signal"], before["signal"]);
    assert_eq!(call(&d, "GET", "/faults", None).body, faults_before);
    d.stop();
    drop(cap.finish(Duration::from_millis(50)));
}

#[test]
fn put_signal_applies_from_the_heap_the_reply_names() {
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = 2e7;
    cfg.control = Some("127.0.0.1:0".parse().unwrap());
    // A constant: 0.2 of full scale = 102.4 counts, rounded to 102 without dither.
    cfg.signal.tones = vec![Tone {
        frequency: 0.0,
        amplitude: 0.2,
    }];
    cfg.signal.dither = false;
    let d = Dsim::start(cfg).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let r = call(
        &d,
        "PUT",
        "/signal",
        Some(r#"{"tones": [{"frequency": 0, "amplitude": 0.4}]}"#),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let reply = r.json();
    let k = reply["from_heap"].as_u64().unwrap();
    assert_eq!(reply["from_timestamp"].as_u64().unwrap(), k * HS);
    for p in 0..2 {
        let pol = &reply["signal"]["pols"][p];
        assert_eq!(pol["components"][0]["amplitude"], 0.4);
        assert_eq!(pol["dither"], false, "fields left out are kept");
    }
    // Run on until well past the switch.
    while d
        .status()
        .pols
        .iter()
        .any(|p| p.timestamp.unwrap_or(0) < (k + 200) * HS)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = d.stop();
    assert!(
        k > status.first_heap,
        "the switch is ahead of what was sent when asked"
    );
    let got = cap.finish(Duration::from_millis(200));
    for arrivals in &got {
        let (heaps, _) = decode(arrivals, 10);
        assert_eq!(contiguous(&heaps, HS), status.first_heap * HS);
        assert!(heaps.iter().any(|h| h.heap_cnt >= k + 100));
        // Around the switch, and the first heap (unpacking everything is slow in debug builds).
        for h in heaps.iter().filter(|h| {
            h.heap_cnt + 100 > k && h.heap_cnt < k + 100 || h.heap_cnt == status.first_heap
        }) {
            let want = if h.heap_cnt < k { 102 } else { 205 };
            assert!(
                h.samples().iter().all(|&s| s == want),
                "heap {} (switch at {k}) is not {want}",
                h.heap_cnt
            );
        }
    }
}

#[test]
fn put_rate_changes_the_pace_and_keeps_timestamps_continuous() {
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let cap = Capture::start([1, 1]);
    let d = start(&cap, 1e7, None);
    std::thread::sleep(Duration::from_millis(700));
    let r = call(&d, "PUT", "/rate", Some(r#"{"rate": 2e7}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    let k = r.json()["from_heap"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let status = d.stop();
    assert_eq!(status.rate, 2e7);
    let got = cap.finish(Duration::from_millis(200));
    for arrivals in &got {
        let (heaps, _) = decode(arrivals, 10);
        contiguous(&heaps, HS);
        let mut before = Vec::new();
        let mut after = Vec::new();
        for (h, a) in heaps.iter().zip(arrivals) {
            let point = (h.timestamp as f64, a.at.elapsed().as_secs_f64());
            if h.heap_cnt < k {
                before.push(point);
            } else {
                after.push(point);
            }
        }
        // Arrival time falls as timestamps rise (elapsed counts back), so rates are -1/slope.
        let rate = |pts: &[(f64, f64)]| -1.0 / slope(pts);
        // Loose bounds: this shows the change; tests/pacing.rs holds the rate to 0.1%.
        assert!(
            (rate(&before) / 1e7 - 1.0).abs() < 0.03,
            "before {}",
            rate(&before)
        );
        assert!(
            (rate(&after) / 2e7 - 1.0).abs() < 0.03,
            "after {}",
            rate(&after)
        );
    }
}

#[test]
fn put_faults_drops_the_listed_heaps_and_counts_them() {
    let cap = Capture::start([1, 1]);
    let d = start(&cap, 2e7, None);
    std::thread::sleep(Duration::from_millis(100));
    let now = call(&d, "GET", "/status", None).json()["timestamp"]
        .as_u64()
        .unwrap()
        / HS;
    let drop = [now + 1000, now + 1001, now + 1500];
    let body = json!({"pol1": {"drop": {"heaps": drop}}}).to_string();
    let r = call(&d, "PUT", "/faults", Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["pol1"]["drop"]["heaps"], json!(drop));
    assert_eq!(
        call(&d, "GET", "/faults", None).json()["pol1"]["drop"]["heaps"],
        json!(drop)
    );
    // 2e7 / 4096 heaps/s: heap now + 1500 is due about 0.31 s from now.
    std::thread::sleep(Duration::from_millis(600));
    let m = call(&d, "GET", "/metrics", None).body;
    assert!(
        m.contains("dsim_faults_injected_total{pol=\"1\",kind=\"drop\"} 3"),
        "{m}"
    );
    let status = d.stop();
    assert_eq!(status.pols[1].faults_injected.dropped, 3);
    let got = cap.finish(Duration::from_millis(200));
    let (heaps, _) = decode(&got[1], 10);
    let seen: std::collections::BTreeSet<u64> = heaps.iter().map(|h| h.heap_cnt).collect();
    let (lo, hi) = (*seen.first().unwrap(), *seen.last().unwrap());
    let missing: Vec<u64> = (lo..=hi).filter(|k| !seen.contains(k)).collect();
    assert_eq!(missing, drop.to_vec());
}

/// The per-polarisation form replaces the polarisation it names (GET /signal and /status show it,
/// and the samples follow from the heap the reply names); the other keeps its signal. A common
/// form update then rebuilds both polarisations from the common form. A bad request changes
/// nothing.
#[test]
fn put_signal_per_polarisation_changes_one_and_the_common_form_rebuilds_both() {
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = 2e7;
    cfg.control = Some("127.0.0.1:0".parse().unwrap());
    // Constants, without dither: 0.2 of full scale = 102.4 counts, rounded to 102.
    cfg.signal.tones = vec![Tone {
        frequency: 0.0,
        amplitude: 0.2,
    }];
    cfg.signal.dither = false;
    let d = Dsim::start(cfg).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let before = call(&d, "GET", "/signal", None).json();

    // pol1 alone: 0.3 of full scale (153.6, rounded to 154), plus a tone at 0 Hz whose phase
    // pi/2 makes it zero and a silent comb (teeth on whole cycles per 96-heap buffer: 200, 600
    // and 1000 times rate / 4096).
    let body = json!({"pol1": {"components": [
        {"kind": "tone", "frequency": 0.0, "amplitude": 0.3},
        {"kind": "tone", "frequency": 0.0, "amplitude": 0.2, "phase": std::f64::consts::FRAC_PI_2},
        {"kind": "comb", "start": 976562.5, "spacing": 1953125.0, "count": 3, "amplitude": 0.0}],
        "dither": false}, "seed": 42})
    .to_string();
    let r = call(&d, "PUT", "/signal", Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    let reply = r.json();
    let k1 = reply["from_heap"].as_u64().unwrap();
    assert_eq!(reply["from_timestamp"].as_u64().unwrap(), k1 * HS);
    assert!(reply["from_unix_time"].as_f64().unwrap() > 1e9);
    let signal = &reply["signal"];
    assert_eq!(signal["pols"][0], before["pols"][0], "pol0 is kept");
    assert_eq!(signal["seed"], 42);
    assert_eq!(signal["from_heap"].as_u64(), Some(k1));
    assert_eq!(signal["pols"][1]["delay"], 0.0, "delay defaults to 0");
    assert_eq!(
        signal["pols"][1]["tone_frequencies"],
        json!([0.0, 0.0, 976562.5, 2929687.5, 4882812.5])
    );
    assert_eq!(signal["pols"][1]["components"][2]["kind"], "comb");
    assert_eq!(call(&d, "GET", "/signal", None).json(), *signal);
    assert_eq!(call(&d, "GET", "/status", None).json()["signal"], *signal);
    assert_eq!(d.status().signal.strongest_tone(1).unwrap().amplitude, 0.3);

    // A bad request changes nothing.
    let bad = r#"{"pol0": {"components": [{"kind": "noise", "rms": -1, "seed": 1}]}}"#;
    let r = call(&d, "PUT", "/signal", Some(bad));
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.body.contains("pol0 component 0 (noise): rms -1"),
        "{}",
        r.body
    );
    assert_eq!(call(&d, "GET", "/signal", None).json(), *signal);

    // The common form: both polarisations from the common form (0 Hz tone, no dither) with the
    // tone replaced: 0.4 of full scale, 204.8 rounded to 205.
    let r = call(
        &d,
        "PUT",
        "/signal",
        Some(r#"{"tones": [{"frequency": 0, "amplitude": 0.4}]}"#),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let reply = r.json();
    let k2 = reply["from_heap"].as_u64().unwrap();
    for p in 0..2 {
        let pol = &reply["signal"]["pols"][p];
        assert_eq!(
            pol["components"],
            json!([{"kind": "tone", "frequency": 0.0, "amplitude": 0.4, "phase": 0.0}])
        );
        assert_eq!(pol["dither"], false);
    }
    assert_eq!(reply["signal"]["seed"], 42, "the seed stays");

    while d
        .status()
        .pols
        .iter()
        .any(|p| p.timestamp.unwrap_or(0) < (k2 + 50) * HS)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = d.stop();
    let got = cap.finish(Duration::from_millis(200));
    for (p, arrivals) in got.iter().enumerate() {
        let (heaps, _) = decode(arrivals, 10);
        contiguous(&heaps, HS);
        // Around each switch (unpacking everything is slow in debug builds).
        for h in heaps.iter().filter(|h| {
            let near = |k: u64| h.heap_cnt + 50 > k && h.heap_cnt < k + 50;
            near(k1) || near(k2) || h.heap_cnt == status.first_heap
        }) {
            let want = match (p, h.heap_cnt) {
                (_, c) if c >= k2 => 205,
                (1, c) if c >= k1 => 154,
                _ => 102,
            };
            assert!(
                h.samples().iter().all(|&s| s == want),
                "pol {p} heap {} (switches at {k1}, {k2}) is not {want}",
                h.heap_cnt
            );
        }
    }
}

/// A body past the 1 MiB limit is refused with 413 and a sentence before it is parsed (here
/// faults that would be valid but for their padding) and changes nothing; one at the limit is
/// taken.
#[test]
fn a_body_over_the_limit_is_refused_and_changes_nothing() {
    let cap = Capture::start([1, 1]);
    let d = start(&cap, 1e7, None);
    let faults_before = call(&d, "GET", "/faults", None).body;
    let padded = |len: usize| {
        let head = r#"{"pol0": {"drop": {"heaps": [123456789]}}"#;
        format!("{head}{}}}", " ".repeat(len - head.len() - 1))
    };
    let r = call(
        &d,
        "PUT",
        "/faults",
        Some(&padded(dsim::control::MAX_BODY + 1)),
    );
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(
        r.json()["error"],
        "the request body is larger than this server's limit of 1048576 bytes."
    );
    assert_eq!(call(&d, "GET", "/faults", None).body, faults_before);
    let r = call(&d, "PUT", "/faults", Some(&padded(dsim::control::MAX_BODY)));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(call(&d, "GET", "/faults", None).body.contains("123456789"));
    d.stop();
    drop(cap.finish(Duration::from_millis(50)));
}

/// With a control token, a change without it or with another is refused (401, a sentence,
/// nothing changed); with it, it is taken; reads need none.
#[test]
fn the_token_guards_changes_and_leaves_reads_open() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.rate = 1e7;
    cfg.control = Some("127.0.0.1:0".parse().unwrap());
    cfg.control_token = Some("d-s3cret".parse().unwrap());
    let d = Dsim::start(cfg).unwrap();
    let rate = Some(r#"{"rate": 2e7}"#);
    for token in [None, Some("d-s3cre"), Some("d-s3cret2")] {
        let r = call_as(&d, token, "PUT", "/rate", rate);
        assert_eq!(r.status, 401, "token {token:?}: {}", r.body);
        let msg = r.json()["error"].as_str().unwrap().to_string();
        assert!(
            msg.contains("Authorization: Bearer") && msg.ends_with('.'),
            "{msg}"
        );
    }
    assert_eq!(call(&d, "PUT", "/faults", Some("{}")).status, 401);
    for path in [
        "/health", "/status", "/metrics", "/signal", "/rate", "/faults",
    ] {
        assert_eq!(call(&d, "GET", path, None).status, 200, "GET {path}");
    }
    assert_eq!(call(&d, "GET", "/rate", None).json()["rate"], 1e7);
    let r = call_as(&d, Some("d-s3cret"), "PUT", "/rate", rate);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(call(&d, "GET", "/rate", None).json()["rate"], 2e7);
    d.stop();
    drop(cap.finish(Duration::from_millis(50)));
}

#[test]
fn put_signal_takes_katgpucbfs_language_and_refuses_a_bad_spec_with_400() {
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let cap = Capture::start([1, 1]);
    let d = start(&cap, 2e7, None);
    std::thread::sleep(Duration::from_millis(150));
    let before = call(&d, "GET", "/signal", None).body;
    for (body, status, sentence) in [
        (
            r#"{"signals": "nodither(0.2)"}"#,
            400,
            "at character 14: expected ';' after the expression, found the end of the spec.",
        ),
        (
            r#"{"signals": "cw(0.1, 1e6); cw(0.1, 1e6); 1;"}"#,
            400,
            "the spec gives 3 signals; it must give 1 or 2 (one per polarisation, each ended by ';').",
        ),
        (
            r#"{"signals": "nodither(1) * 2;"}"#,
            400,
            "at character 13: signal 'nodither(1.0)' cannot be used in a larger expression.",
        ),
        (
            r#"{"signals": "0.1;", "perod": 3}"#,
            400,
            "the body names signals, so it was read as katgpucbf's signal language, and unknown field `perod`",
        ),
        (
            r#"{"signals": "0.1;", "period": 5}"#,
            422,
            "period 5 does not divide the buffer of",
        ),
    ] {
        let r = call(&d, "PUT", "/signal", Some(body));
        assert_eq!(r.status, status, "{body}: {}", r.body);
        let e = r.json()["error"].as_str().unwrap().to_string();
        assert!(e.contains(sentence), "{body}: {e:?}");
        assert!(e.ends_with('.'), "{e:?}");
    }
    assert_eq!(call(&d, "GET", "/signal", None).body, before);

    let spec = "nodither(0.2); nodither(-0.4);";
    let r = call(
        &d,
        "PUT",
        "/signal",
        Some(&json!({ "signals": spec }).to_string()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let reply = r.json();
    let k = reply["from_heap"].as_u64().unwrap();
    let lang = &reply["signal"]["signals"];
    assert_eq!(lang["signals_orig"], spec);
    assert_eq!(lang["signals"], spec);
    let buffer = lang["max_period"].as_u64().unwrap();
    assert_eq!(lang["period"].as_u64().unwrap(), buffer);
    assert_eq!(call(&d, "GET", "/signal", None).json()["signals"], *lang);
    while d
        .status()
        .pols
        .iter()
        .any(|p| p.timestamp.unwrap_or(0) < (k + 20) * HS)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    d.stop();
    let got = cap.finish(Duration::from_millis(200));
    // 0.2 and -0.4 of 511 counts, rounded half to even without dither.
    for (arrivals, want) in got.iter().zip([102, -204]) {
        let (heaps, _) = decode(arrivals, 10);
        let after: Vec<_> = heaps.iter().filter(|h| h.heap_cnt >= k).collect();
        assert!(after.len() >= 10);
        for h in after {
            assert!(
                h.samples().iter().all(|&s| s == want),
                "heap {} is not {want}",
                h.heap_cnt
            );
        }
    }
}

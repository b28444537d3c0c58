//! (4) Malformed control requests and garbage UDP sent at the engine's ports are rejected (and
//! the UDP counted by reason in GET /status) while good data keeps flowing with no gap.

use std::collections::BTreeMap;
use std::time::Duration;

use acceptance::{Http, Pipeline, Session};
use anyhow::{Context, Result};
use serde_json::Value;

/// Rejected input packets by (polarisation, reason), from the engine's GET /status.
fn rejected(engine: &Http) -> Result<BTreeMap<(usize, String), u64>> {
    let st = engine.engine_status()?;
    let mut out = BTreeMap::new();
    for pol in 0..2 {
        let input = st
            .input
            .pols
            .get(pol)
            .with_context(|| format!("input.pols[{pol}] in /status"))?;
        for (reason, n) in &input.rejected {
            out.insert((pol, reason.clone()), *n);
        }
    }
    Ok(out)
}

/// How many of each garbage datagram the sender sends to each polarisation's first group.
const ROUNDS: u64 = 40;

/// Datagrams that are not digitiser heaps, each with the reason the engine must give:
/// (reason, printf format of its bytes).
const GARBAGE: [(&str, &str); 6] = [
    ("too_short", "junk"),
    (
        "bad_magic",
        "this is not a SPEAD packet, only a line of text of a reasonable length",
    ),
    (
        "bad_version",
        r"\x53\x05\x02\x06\x00\x00\x00\x01\x80\x01\x00\x00\x00\x00\x00\x01",
    ),
    (
        "bad_flavour",
        r"\x53\x04\x03\x05\x00\x00\x00\x01\x80\x01\x00\x00\x00\x00\x00\x01",
    ),
    // 64 item pointers declared, one present.
    (
        "items_past_end",
        r"\x53\x04\x02\x06\x00\x00\x00\x40\x80\x01\x00\x00\x00\x00\x00\x01",
    ),
    // A well-formed header with one item, but no heap counter, size, offset or payload length.
    (
        "missing_standard_item",
        r"\x53\x04\x02\x06\x00\x00\x00\x01\x80\x05\x00\x00\x00\x00\x00\x07",
    ),
];

#[test]
fn garbage_is_rejected_and_counted_while_data_flows() -> Result<()> {
    let Some(session) = Session::start("garbage") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let engine = p.engine_http()?;
    let watch = p.watch_receiving(25)?;
    let delays = engine.get_json("/delays")?;
    let gains = engine.get_json("/gains")?;
    let rejected_before = rejected(&engine)?;

    // Malformed control requests: each refused with its status and a JSON error, none changes
    // anything.
    let big = vec![b'['; 3 << 20];
    let cases: Vec<(&str, &str, &[u8], u16)> = vec![
        ("PUT", "/delays", b"not json", 400),
        ("PUT", "/delays", br#"{"pol0": {"delay": 1.0}}"#, 400), // beyond --max-delay
        ("PUT", "/delays", br#"{"pol0": {"delay": "soon"}}"#, 400),
        ("PUT", "/delays", br#"{"pol2": {"delay": 0}}"#, 400),
        ("PUT", "/delays", br#"{"pol0": "1e-9,0:0"}"#, 400),
        (
            "PUT",
            "/delays",
            br#"{"pol0": {"delay": 0}, "load_timestamp": 1, "load_time": 2}"#,
            400,
        ),
        (
            "PUT",
            "/delays",
            br#"{"pol0": {"delay": 0, "delay_rate": 2}}"#,
            400,
        ),
        ("PUT", "/gains", br#"{"pol0": "loud"}"#, 400),
        ("PUT", "/gains", br#"{"pol0": [[1, 0], [1, 0]]}"#, 400), // not one per channel
        ("PUT", "/gains", b"[1, 2, 3]", 400),
        ("PUT", "/gains", &[0xff, 0xfe, 0x00, 0x7b], 400),
        ("DELETE", "/delays", b"", 405),
        ("POST", "/gains", b"{}", 405),
        ("PUT", "/status", b"{}", 405),
        ("GET", "/no/such/thing", b"", 404),
    ];
    for (method, path, body, want) in &cases {
        let (status, text) = engine.send(method, path, Some(body))?;
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        assert_eq!(
            status, *want,
            "{method} {path} {shown:?} -> {status} {text}"
        );
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{method} {path} {shown:?}: not a JSON error: {text}"))?;
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{method} {path} {shown:?}: {text}"
        );
    }
    // A body past the server's limit, and bytes that are not HTTP at all.
    // The server may answer 413 and close while the body is still going out: the client then
    // sees the connection reset instead of the status. Either way it was refused.
    match engine.send("PUT", "/gains", Some(&big)) {
        Ok((status, _)) => assert!((400..500).contains(&status), "3 MiB body -> {status}"),
        Err(e) => eprintln!("3 MiB body: connection closed by the server ({e:#})"),
    }
    let reply = engine.raw(b"\x16\x03\x01\x02\x00 not HTTP at all\r\n\r\n")?;
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 4") || reply.starts_with("HTTP/1.0 4"),
        "raw garbage got {reply:?}"
    );
    assert_eq!(
        engine.get_json("/delays")?,
        delays,
        "a refused request changed the delays"
    );
    assert_eq!(
        engine.get_json("/gains")?,
        gains,
        "a refused request changed the gains"
    );
    assert_eq!(engine.send("GET", "/health", None)?.0, 200);

    // Garbage UDP into both polarisations' input groups, from a container on the network.
    let mut script = String::from("set -e\nfor i in $(seq 1 ROUNDS); do\n");
    for g in ["239.10.0.0", "239.10.0.4"] {
        for (_, bytes) in GARBAGE {
            script.push_str(&format!("  printf '{bytes}' > /dev/udp/{g}/7148\n"));
        }
    }
    script.push_str("  sleep 0.02\ndone\necho sent\n");
    let script = script.replace("ROUNDS", &ROUNDS.to_string());
    let (code, out) = p.run_script("udp-garbage", &script, Duration::from_secs(60))?;
    assert_eq!(code, 0, "the garbage sender failed: {out}");
    // Counted: every datagram under its reason, on its polarisation.
    let mut counted = BTreeMap::new();
    acceptance::wait_until(
        Duration::from_secs(10),
        "the rejections to be counted",
        || {
            let now = rejected(&engine)?;
            counted = now
                .iter()
                .map(|(k, n)| (k.clone(), n - rejected_before.get(k).copied().unwrap_or(0)))
                .filter(|(_, d)| *d > 0)
                .collect();
            let want: u64 = 2 * ROUNDS * GARBAGE.len() as u64;
            Ok(counted.values().sum::<u64>() >= want)
        },
    )
    .ok();
    let mut expected = BTreeMap::new();
    for pol in 0..2 {
        for (reason, _) in GARBAGE {
            expected.insert((pol, reason.to_string()), ROUNDS);
        }
    }
    assert_eq!(counted, expected, "rejections counted by (pol, reason)");

    // And the good data flowed on: the watch around all of it is clean.
    let w = watch.finish()?;
    let s = &w.summary;
    let ctx = || w.context(&p);
    assert_eq!(w.exit_code, 0, "{}", ctx());
    assert_eq!(s["ok"], true, "{}", ctx());
    assert_eq!(w.u64_at("/sequence/gaps"), 0, "{}", ctx());
    assert_eq!(
        s["engine"]["missing_input"].as_f64(),
        Some(0.0),
        "{}",
        ctx()
    );
    let metrics = engine.get_text("/metrics")?;
    assert!(
        metrics.contains(
            "fengine_input_rejected_packets_total{backend=\"cpu\",pol=\"0\",reason=\"bad_magic\"}"
        ),
        "rejections in /metrics too"
    );
    // Every refusal that reached the router is counted (the 3 MiB body and the non-HTTP bytes
    // may be cut off before it, by the body limit or the HTTP parser).
    let refused = engine.engine_status()?.control.rejected_requests;
    assert!(
        (cases.len() as u64..=cases.len() as u64 + 2).contains(&refused),
        "{refused} refused control requests counted for {} sent",
        cases.len() + 2
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("fengine_control_rejected_requests_total")
                && l.ends_with(&format!(" {refused}"))),
        "the refusals in /metrics too"
    );
    println!(
        "garbage: {} malformed control requests refused; {} garbage datagrams rejected and \
         counted by reason; {} heaps, zero gaps meanwhile",
        cases.len() + 2,
        2 * ROUNDS * GARBAGE.len() as u64,
        w.u64_at("/heaps")
    );
    Ok(())
}

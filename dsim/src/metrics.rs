//! GET /metrics: the status in Prometheus text exposition format (version 0.0.4), written by hand.

use std::fmt::Write;

use crate::status::Status;

/// Content type Prometheus expects.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn value(&mut self, name: &str, labels: &str, v: f64) {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {v}");
        } else {
            let _ = writeln!(self.out, "{name}{{{labels}}} {v}");
        }
    }
}

pub fn render(s: &Status) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    f.header(
        "dsim_rate_samples_per_second",
        "gauge",
        "Requested samples per second per polarisation.",
    );
    f.value("dsim_rate_samples_per_second", "", s.rate);
    f.header(
        "dsim_timestamp_samples",
        "gauge",
        "Timestamp due now by the wall clock, in ADC samples.",
    );
    f.value("dsim_timestamp_samples", "", s.timestamp as f64);
    f.header(
        "dsim_rate_ok",
        "gauge",
        "1 when the achieved rate over the last 10 s is within 0.1% of the request.",
    );
    f.value("dsim_rate_ok", "", if s.rate_ok { 1.0 } else { 0.0 });
    if let Some(l) = s.late_s {
        f.header(
            "dsim_late_seconds",
            "gauge",
            "How late the latest heap left (negative: early).",
        );
        f.value("dsim_late_seconds", "", l);
    }

    type Get = fn(&crate::status::PolStatus) -> Option<f64>;
    let per_pol: [(&str, &str, &str, Get); 8] = [
        (
            "dsim_heaps_total",
            "counter",
            "Heaps whose timestamps have gone by (sent, dropped or held back).",
            |p| Some(p.heaps as f64),
        ),
        (
            "dsim_heaps_sent_total",
            "counter",
            "Datagrams sent, duplicates and corrupted ones included.",
            |p| Some(p.heaps_sent as f64),
        ),
        ("dsim_bytes_sent_total", "counter", "Bytes sent.", |p| {
            Some(p.bytes_sent as f64)
        }),
        (
            "dsim_saturated_samples_total",
            "counter",
            "Samples that saturated in the heaps sent.",
            |p| Some(p.saturated_samples as f64),
        ),
        (
            "dsim_send_errors_total",
            "counter",
            "Send calls that failed.",
            |p| Some(p.send_errors as f64),
        ),
        (
            "dsim_heaps_skipped_total",
            "counter",
            "Heaps never sent: the senders fell more than --max-late behind and skipped ahead.",
            |p| Some(p.heaps_skipped as f64),
        ),
        (
            "dsim_achieved_rate_samples_per_second",
            "gauge",
            "Achieved samples per second over the last 10 s.",
            |p| p.rate.achieved_rate,
        ),
        (
            "dsim_rate_error",
            "gauge",
            "Achieved rate over the last 10 s relative to the request, minus 1.",
            |p| p.rate.rate_error,
        ),
    ];
    for (name, kind, help, get) in per_pol {
        f.header(name, kind, help);
        for p in &s.pols {
            if let Some(v) = get(p) {
                f.value(name, &format!("pol=\"{}\"", p.pol), v);
            }
        }
    }
    let name = "dsim_faults_injected_total";
    f.header(name, "counter", "Faults injected, by kind.");
    for p in &s.pols {
        let c = p.faults_injected;
        for (kind, v) in [
            ("drop", c.dropped),
            ("duplicate", c.duplicated),
            ("reorder", c.reordered),
            ("corrupt", c.corrupted),
        ] {
            f.value(
                name,
                &format!("pol=\"{}\",kind=\"{kind}\"", p.pol),
                v as f64,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Every sample line is `name{labels} value` with a declared family.
    pub fn check_exposition(text: &str) {
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
            let name = series.split('{').next().unwrap();
            assert!(declared.contains(name), "{name} has no TYPE line");
        }
    }

    #[test]
    fn renders_valid_text() {
        let s: crate::status::Status = serde_json::from_value(serde_json::json!({
            "state": "running", "rate": 1e8, "achieved_rate": 1e8, "rate_error": 0.0,
            "rate_window_s": 10.0, "rate_ok": true, "late_s": 1e-6, "heaps_skipped": 0, "sync_time": 0.0,
            "implied_sync_time": 0.0, "timestamp": 4096, "heap_samples": 4096, "sample_bits": 10,
            "first_heap": 0, "end_heap": null, "threads_per_pol": 1, "heaps_per_batch": [12, 12],
            "buffer_heaps": 8192,
            "signal": {"tones": [], "noise": 0.05, "dither": true, "delays": [0.0, 0.0], "seed": 1,
                       "tone_frequencies": [], "from_heap": 0},
            "pols": [{"pol": 0, "destinations": "127.0.0.1:7148", "heaps": 5, "heaps_sent": 5,
                      "bytes_sent": 100, "saturated_samples": 0, "send_errors": 0, "heaps_skipped": 0, "timestamp": 4096,
                      "rate": {"achieved_rate": null, "expected_rate": null, "rate_error": null, "window_s": 0.0},
                      "faults_injected": {"dropped": 1, "duplicated": 0, "reordered": 0, "corrupted": 0},
                      "faults": {"drop": null, "duplicate": null, "reorder": null, "corrupt": null}}],
            "uptime_s": 1.0
        }))
        .unwrap();
        let text = super::render(&s);
        check_exposition(&text);
        assert!(text.contains("dsim_heaps_sent_total{pol=\"0\"} 5\n"));
        assert!(text.contains("dsim_faults_injected_total{pol=\"0\",kind=\"drop\"} 1\n"));
        assert!(!text.contains("dsim_achieved_rate_samples_per_second{"));
    }
}

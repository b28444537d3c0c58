//! GET /metrics: dsim's status in Prometheus text exposition format (version 0.0.4), through
//! `prometheus-client`: a collector reads the status, and so the counters, at each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::status::{PolStatus, Status};

/// Content type Prometheus expects.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Label pairs of one series.
type Labels = Vec<(&'static str, String)>;

/// Encodes whatever status `read` gives at each scrape.
struct StatusCollector<F>(F);

impl<F> std::fmt::Debug for StatusCollector<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusCollector")
    }
}

impl<F: Fn() -> Status + Send + Sync + 'static> Collector for StatusCollector<F> {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        encode_status(&(self.0)(), &mut enc)
    }
}

/// A registry whose collector calls `read` for the status at each scrape.
pub fn registry(read: impl Fn() -> Status + Send + Sync + 'static) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatusCollector(read)));
    registry
}

/// The text of one scrape of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail, and the collector's encoding does not either.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
    out
}

/// The exposition of one status.
pub fn render(s: &Status) -> String {
    let s = s.clone();
    encode(&registry(move || s.clone()))
}

fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    series: impl IntoIterator<Item = (Labels, M)>,
) -> std::fmt::Result {
    let mut f = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, m) in series {
        m.encode(f.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: V,
) -> std::fmt::Result {
    family(
        enc,
        name,
        help,
        MetricType::Gauge,
        [(Labels::new(), ConstGauge::new(v))],
    )
}

fn encode_status(s: &Status, enc: &mut DescriptorEncoder) -> std::fmt::Result {
    gauge(
        enc,
        "dsim_rate_samples_per_second",
        "Requested samples per second per polarisation.",
        s.rate,
    )?;
    gauge(
        enc,
        "dsim_timestamp_samples",
        "Timestamp due now by the wall clock, in ADC samples.",
        s.timestamp,
    )?;
    gauge(
        enc,
        "dsim_rate_ok",
        "1 when the achieved rate over the last 10 s is within 0.1% of the request.",
        u64::from(s.rate_ok),
    )?;
    if let Some(l) = s.late_s {
        gauge(
            enc,
            "dsim_late_seconds",
            "How late the latest heap left (negative: early).",
            l,
        )?;
    }
    gauge(
        enc,
        "dsim_longest_catch_up_seconds",
        "How far behind the longest catch-up after a stall began.",
        s.longest_catch_up_s,
    )?;
    let pol = |p: &PolStatus| vec![("pol", p.pol.to_string())];
    type Count = fn(&PolStatus) -> u64;
    // Counter names without `_total`, which the encoder appends.
    let counters: [(&str, &str, Count); 8] = [
        (
            "dsim_heaps",
            "Heaps whose timestamps have gone by (sent, dropped or held back).",
            |p| p.heaps,
        ),
        (
            "dsim_heaps_sent",
            "Datagrams sent, duplicates and corrupted ones included.",
            |p| p.heaps_sent,
        ),
        ("dsim_bytes_sent", "Bytes sent.", |p| p.bytes_sent),
        (
            "dsim_saturated_samples",
            "Samples that saturated in the heaps sent (at full scale, |v| >= 2^(bits-1) - 1).",
            |p| p.saturated_samples,
        ),
        ("dsim_send_errors", "Send calls that failed.", |p| {
            p.send_errors
        }),
        (
            "dsim_heaps_skipped",
            "Heaps never sent: the senders fell more than --max-late behind and skipped ahead.",
            |p| p.heaps_skipped,
        ),
        (
            "dsim_catch_ups",
            "Catch-ups: a send thread stalled and sent its backlog at --catch-up-rate times the rate.",
            |p| p.catch_ups,
        ),
        (
            "dsim_heaps_sent_late",
            "Heaps sent later than due during catch-ups (timestamps unchanged).",
            |p| p.heaps_sent_late,
        ),
    ];
    for (name, help, get) in counters {
        let series = s.pols.iter().map(|p| (pol(p), ConstCounter::new(get(p))));
        family(enc, name, help, MetricType::Counter, series)?;
    }
    type Rate = fn(&PolStatus) -> Option<f64>;
    let rates: [(&str, &str, Rate); 2] = [
        (
            "dsim_achieved_rate_samples_per_second",
            "Achieved samples per second over the last 10 s.",
            |p| p.rate.achieved_rate,
        ),
        (
            "dsim_rate_error",
            "Achieved rate over the last 10 s relative to the request, minus 1.",
            |p| p.rate.rate_error,
        ),
    ];
    for (name, help, get) in rates {
        let series = s
            .pols
            .iter()
            .filter_map(|p| Some((pol(p), ConstGauge::new(get(p)?))));
        family(enc, name, help, MetricType::Gauge, series)?;
    }
    let faults = s.pols.iter().flat_map(|p| {
        let c = p.faults_injected;
        [
            ("drop", c.dropped),
            ("duplicate", c.duplicated),
            ("reorder", c.reordered),
            ("corrupt", c.corrupted),
            ("truncate", c.truncated),
        ]
        .map(|(kind, v)| {
            let mut labels = pol(p);
            labels.push(("kind", kind.to_string()));
            (labels, ConstCounter::new(v))
        })
    });
    family(
        enc,
        "dsim_faults_injected",
        "Faults injected, by kind.",
        MetricType::Counter,
        faults,
    )
}

#[cfg(test)]
mod tests {
    /// Every sample line is `name{labels} value` with a declared family.
    pub(super) fn check_exposition(text: &str) {
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
            "signal": {"pols": [{"components": [{"kind": "noise", "rms": 0.05, "seed": 7}],
                                 "delay": 0.0, "dither": true, "tone_frequencies": []},
                                {"components": [], "delay": 0.0, "dither": true,
                                 "tone_frequencies": []}],
                       "seed": 1, "from_heap": 0},
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

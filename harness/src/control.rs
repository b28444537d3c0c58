//! HTTP control of dsim and the engine: the only place that knows their endpoints and JSON, so
//! that a change on their side is one edit here.
//!
//! - dsim: `GET /status`, `PUT /rate`, `PUT /signal`, `PUT /faults`, `GET /metrics`.
//! - fengine: `GET /status`, `GET /metrics` (Prometheus text, with the missing-input and
//!   skipped-output counters), `PUT /gains`.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// `host:port` or a URL, without a trailing slash.
pub fn normalise_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

#[derive(Clone)]
struct Client {
    base: String,
    agent: ureq::Agent,
}

impl Client {
    fn new(url: &str) -> Self {
        Self {
            base: normalise_url(url),
            agent: agent(Duration::from_secs(10)),
        }
    }

    fn get_json(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.agent
            .get(&url)
            .call()
            .and_then(|mut r| r.body_mut().read_json::<Value>())
            .with_context(|| format!("GET {url}"))
    }

    fn get_text(&self, path: &str) -> Result<String> {
        let url = format!("{}{path}", self.base);
        self.agent
            .get(&url)
            .call()
            .and_then(|mut r| r.body_mut().read_to_string())
            .with_context(|| format!("GET {url}"))
    }

    /// PUT a JSON body; the reply's JSON (Null when the reply is not JSON).
    fn put_json(&self, path: &str, body: &Value) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut reply = self
            .agent
            .put(&url)
            .send_json(body)
            .with_context(|| format!("PUT {url} {body}"))?;
        Ok(reply.body_mut().read_json::<Value>().unwrap_or(Value::Null))
    }
}

/// A tone dsim sends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tone {
    pub frequency: f64,
    /// Fraction of full scale.
    pub amplitude: f64,
}

/// What the harness reads from dsim's status.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DsimStatus {
    /// ADC sample rate per polarisation (sample/s).
    pub rate: Option<f64>,
    /// Timestamp of the heap being sent now.
    pub timestamp: Option<u64>,
    /// The strongest tone, if any.
    pub tone: Option<Tone>,
    /// Samples per heap.
    pub samples_per_heap: Option<u64>,
    /// Samples sent so far per polarisation (for the achieved rate).
    pub samples_sent: Option<f64>,
    /// Heaps dsim skipped because it fell behind its schedule (it could not send the rate).
    pub heaps_skipped: Option<u64>,
}

/// Why a run lost heaps when dsim skipped `n` of them: the sender, not the engine, fell behind.
pub fn dsim_skipped_reason(n: u64) -> String {
    format!("dsim fell behind and skipped {n} heaps: this host could not send the rate")
}

impl DsimStatus {
    pub fn parse(v: &Value) -> Self {
        Self {
            rate: find_number(v, &["rate", "adc_sample_rate", "sample_rate"]),
            timestamp: find_number(v, &["timestamp", "next_timestamp", "current_timestamp"])
                .map(|t| t as u64),
            tone: strongest_tone(v),
            samples_per_heap: find_number(v, &["heap_samples", "samples_per_heap"])
                .map(|t| t as u64),
            samples_sent: find_number(v, &["samples_sent", "samples"]),
            heaps_skipped: find_number(v, &["heaps_skipped"]).map(|n| n as u64),
        }
    }
}

/// The tone of largest amplitude in dsim's status: a `tones` array of objects with a frequency
/// and an amplitude, or a single `tone` object.
fn strongest_tone(v: &Value) -> Option<Tone> {
    let parse = |t: &Value| -> Option<Tone> {
        Some(Tone {
            frequency: find_number(t, &["frequency", "freq", "hz", "frequency_hz"])?,
            amplitude: find_number(t, &["amplitude", "ampl", "amp"]).unwrap_or(1.0),
        })
    };
    let mut tones: Vec<Tone> = Vec::new();
    visit(v, &mut |key, val| {
        if key == "tones" {
            if let Some(a) = val.as_array() {
                tones.extend(a.iter().filter_map(parse));
            }
        } else if key == "tone" {
            tones.extend(parse(val));
        }
    });
    tones
        .into_iter()
        .max_by(|a, b| a.amplitude.abs().total_cmp(&b.amplitude.abs()))
}

fn visit(v: &Value, f: &mut impl FnMut(&str, &Value)) {
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                f(k, val);
                visit(val, f);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| visit(x, f)),
        _ => {}
    }
}

/// The first number found under any of `keys` (tried in order), searched breadth-first so that
/// a top-level field wins over a nested one of the same name.
pub fn find_number(v: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| {
        let mut level = vec![v];
        while !level.is_empty() {
            let mut next = Vec::new();
            for node in level {
                match node {
                    Value::Object(m) => {
                        if let Some(x) = m.get(*k).and_then(Value::as_f64) {
                            return Some(x);
                        }
                        next.extend(m.values());
                    }
                    Value::Array(a) => next.extend(a.iter()),
                    _ => {}
                }
            }
            level = next;
        }
        None
    })
}

/// What dsim says after a signal change.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SignalApplied {
    /// First timestamp with the new signal.
    pub from_timestamp: Option<u64>,
    /// The tone's frequency as generated (dsim rounds to whole cycles per buffer).
    pub frequency: Option<f64>,
}

#[derive(Clone)]
pub struct Dsim(Client);

impl Dsim {
    pub fn new(url: &str) -> Self {
        Self(Client::new(url))
    }
    pub fn url(&self) -> &str {
        &self.0.base
    }
    pub fn status_json(&self) -> Result<Value> {
        self.0.get_json("/status")
    }
    pub fn status(&self) -> Result<DsimStatus> {
        self.status_json().map(|v| DsimStatus::parse(&v))
    }
    /// Sets the ADC sample rate (sample/s per polarisation).
    pub fn set_rate(&self, rate: f64) -> Result<()> {
        self.0
            .put_json("/rate", &json!({ "rate": rate }))
            .map(|_| ())
    }
    /// Replaces the tones with one (noise as given, else kept; dither kept).
    pub fn set_tone(&self, tone: Tone, noise: Option<f64>) -> Result<SignalApplied> {
        let mut body = json!({
            "tones": [{ "frequency": tone.frequency, "amplitude": tone.amplitude }],
        });
        if let Some(n) = noise {
            body["noise"] = json!(n);
        }
        let reply = self.0.put_json("/signal", &body)?;
        Ok(SignalApplied {
            from_timestamp: find_number(&reply, &["from_timestamp"]).map(|t| t as u64),
            frequency: reply
                .pointer("/signal/tone_frequencies/0")
                .and_then(Value::as_f64),
        })
    }
    /// Passes a fault description through unchanged (its shape is dsim's).
    pub fn set_faults(&self, faults: &Value) -> Result<()> {
        self.0.put_json("/faults", faults).map(|_| ())
    }
    pub fn metrics(&self) -> Result<String> {
        self.0.get_text("/metrics")
    }
}

/// The engine counters a max-rate trial watches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct EngineCounters {
    /// Input heaps (or samples) the engine did not receive.
    pub missing_input: f64,
    /// Output heaps the engine did not send.
    pub skipped_output: f64,
}

impl EngineCounters {
    /// What the counters moved by from `before` to `self`. A counter that went down means the
    /// engine restarted in between (its counters start again at zero): then all of its count is
    /// new.
    pub fn since(&self, before: &EngineCounters) -> EngineCounters {
        let delta = |a: f64, b: f64| if a < b { a } else { a - b };
        EngineCounters {
            missing_input: delta(self.missing_input, before.missing_input),
            skipped_output: delta(self.skipped_output, before.skipped_output),
        }
    }
}

/// Which Prometheus series hold the counters: a series counts if its name contains every word
/// of one of the comma-separated patterns (`missing input` matches
/// `fengine_input_missing_heaps_total`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CounterNames {
    pub missing_input: String,
    pub skipped_output: String,
}

impl Default for CounterNames {
    fn default() -> Self {
        Self {
            missing_input: "missing input".into(),
            skipped_output: "skipped output, send errors".into(),
        }
    }
}

#[derive(Clone)]
pub struct Engine {
    client: Client,
    names: CounterNames,
}

impl Engine {
    pub fn new(url: &str, names: CounterNames) -> Self {
        Self {
            client: Client::new(url),
            names,
        }
    }
    pub fn url(&self) -> &str {
        &self.client.base
    }
    pub fn status_json(&self) -> Result<Value> {
        self.client.get_json("/status")
    }
    pub fn metrics(&self) -> Result<String> {
        self.client.get_text("/metrics")
    }
    /// Reads the counters from `/metrics`; an engine without either series is an error (a
    /// trial that cannot see them must not pass).
    pub fn counters(&self) -> Result<EngineCounters> {
        let text = self.metrics()?;
        let samples = parse_prometheus(&text);
        let get = |pattern: &str| {
            sum_matching(&samples, pattern)
                .ok_or_else(|| anyhow!("engine /metrics has no series matching '{pattern}'"))
        };
        Ok(EngineCounters {
            missing_input: get(&self.names.missing_input)?,
            skipped_output: get(&self.names.skipped_output)?,
        })
    }
    /// Sets one real gain for every channel of both polarisations.
    pub fn set_gain(&self, gain: f64) -> Result<()> {
        self.client
            .put_json("/gains", &json!({ "pol0": gain, "pol1": gain }))
            .map(|_| ())
    }
    /// Engine geometry from `/status`, where it says.
    pub fn geometry(&self) -> Result<EngineGeometry> {
        let v = self.status_json()?;
        Ok(EngineGeometry::parse(&v))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct EngineGeometry {
    pub channels: Option<usize>,
    pub taps: Option<usize>,
    pub spectra_per_heap: Option<usize>,
    pub adc_sample_rate: Option<f64>,
}

impl EngineGeometry {
    pub fn parse(v: &Value) -> Self {
        let u = |keys: &[&str]| find_number(v, keys).map(|x| x as usize);
        Self {
            channels: u(&["channels", "n_channels"]),
            taps: u(&["taps"]),
            spectra_per_heap: u(&["spectra_per_heap"]),
            adc_sample_rate: find_number(v, &["adc_sample_rate", "sample_rate"]),
        }
    }
}

/// One Prometheus sample: metric name, label text, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: String,
    pub value: f64,
}

/// Parses Prometheus text exposition; comment lines and unparsable lines are skipped.
pub fn parse_prometheus(text: &str) -> Vec<Sample> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let (name, labels, rest) = match line.find('{') {
                Some(open) => {
                    let close = open + line[open..].find('}')?;
                    (&line[..open], &line[open + 1..close], &line[close + 1..])
                }
                None => {
                    let sp = line.find(char::is_whitespace)?;
                    (&line[..sp], "", &line[sp..])
                }
            };
            let value = rest.split_whitespace().next()?;
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().ok()?,
            };
            Some(Sample {
                name: name.trim().to_string(),
                labels: labels.to_string(),
                value,
            })
        })
        .collect()
}

/// Sum over every series whose name holds all the words of one of the comma-separated
/// patterns (creation-time series excluded); None when no series matches.
pub fn sum_matching(samples: &[Sample], patterns: &str) -> Option<f64> {
    let patterns: Vec<Vec<&str>> = patterns
        .split(',')
        .map(|p| p.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .collect();
    let mut hit = false;
    let total = samples
        .iter()
        .filter(|s| {
            !s.name.ends_with("_created")
                && patterns
                    .iter()
                    .any(|words| words.iter().all(|w| s.name.contains(w)))
        })
        .inspect(|_| hit = true)
        .map(|s| s.value)
        .sum();
    hit.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text() {
        let text = "# HELP x y\n# TYPE fengine_missing_input_heaps_total counter\n\
            fengine_missing_input_heaps_total{pol=\"0\"} 3\n\
            fengine_missing_input_heaps_total{pol=\"1\"} 4\n\
            fengine_missing_input_heaps_created 1.7e9\n\
            fengine_skipped_output_heaps_total 2 1700000000\n\
            weird{a=\"}\n\
            up +Inf\n";
        let s = parse_prometheus(text);
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].labels, "pol=\"0\"");
        assert_eq!(sum_matching(&s, "missing input"), Some(7.0));
        assert_eq!(sum_matching(&s, "skipped output"), Some(2.0));
        assert_eq!(sum_matching(&s, "nothing"), None);
        assert_eq!(sum_matching(&s, "skipped output, missing"), Some(9.0));
        assert_eq!(s[4].value, f64::INFINITY);
    }

    #[test]
    fn dsim_status_shapes() {
        let v = json!({
            "rate": 1712e6, "timestamp": 123456,
            "signal": { "tones": [
                { "frequency": 1e6, "amplitude": 0.1 },
                { "frequency": 2e6, "amplitude": 0.5 }
            ], "noise": 0.01 },
            "samples_per_heap": 4096
        });
        let s = DsimStatus::parse(&v);
        assert_eq!(s.rate, Some(1712e6));
        assert_eq!(s.timestamp, Some(123456));
        assert_eq!(
            s.tone,
            Some(Tone {
                frequency: 2e6,
                amplitude: 0.5
            })
        );
        assert_eq!(s.samples_per_heap, Some(4096));
        let s = DsimStatus::parse(&json!({"adc_sample_rate": 1e9, "tone": {"hz": 5.0}}));
        assert_eq!(s.rate, Some(1e9));
        assert_eq!(s.tone.map(|t| t.frequency), Some(5.0));
        assert_eq!(DsimStatus::parse(&json!({})), DsimStatus::default());
    }

    /// Requests a fake server saw: (method, path, body).
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

    /// A one-thread HTTP server answering every request with `reply(method, path)` and keeping
    /// what it was sent.
    fn fake_server(reply: fn(&str, &str) -> (u16, String)) -> (String, Seen) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap_or("").to_string(),
                    parts.next().unwrap_or("").to_string(),
                );
                let mut length = 0;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0u8; length];
                reader.read_exact(&mut body).unwrap();
                let (code, text) = reply(&method, &path);
                log.lock().unwrap().push((
                    method,
                    path,
                    String::from_utf8_lossy(&body).into_owned(),
                ));
                let _ = write!(
                    stream,
                    "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        (url, seen)
    }

    #[test]
    fn talks_to_dsim_and_the_engine_over_http() {
        let (url, seen) = fake_server(|method, path| match (method, path) {
            ("GET", "/status") => (
                200,
                r#"{"rate": 1e8, "timestamp": 4096, "heap_samples": 4096,
                "signal": {"tones": [{"frequency": 1.25e7, "amplitude": 0.5}]},
                "pols": [{"rate": {"achieved_rate": 1e8}}]}"#
                    .into(),
            ),
            ("PUT", "/signal") => (
                200,
                r#"{"from_heap": 10, "from_timestamp": 40960,
                "signal": {"tone_frequencies": [1.2500003e7]}}"#
                    .into(),
            ),
            ("GET", "/metrics") => (
                200,
                "fengine_input_missing_heaps_total{pol=\"0\"} 2\n\
                fengine_input_missing_heaps_total{pol=\"1\"} 3\n\
                fengine_output_skipped_heaps_total 4\nfengine_output_send_errors_total 1\n"
                    .into(),
            ),
            ("PUT", "/rate") | ("PUT", "/gains") => (200, "{}".into()),
            _ => (400, r#"{"error": "no"}"#.into()),
        });
        let dsim = Dsim::new(&url);
        let st = dsim.status().unwrap();
        assert_eq!(
            (st.rate, st.timestamp, st.samples_per_heap),
            (Some(1e8), Some(4096), Some(4096))
        );
        assert_eq!(st.tone.unwrap().frequency, 1.25e7);
        dsim.set_rate(2.5e9).unwrap();
        let applied = dsim
            .set_tone(
                Tone {
                    frequency: 1.25e7,
                    amplitude: 0.9,
                },
                Some(0.001),
            )
            .unwrap();
        assert_eq!(applied.from_timestamp, Some(40960));
        assert_eq!(applied.frequency, Some(1.2500003e7));
        // A refusal is an error with the request in it.
        let err = dsim.set_faults(&json!({"pol0": {}})).unwrap_err();
        assert!(format!("{err:#}").contains("/faults"), "{err:#}");
        let engine = Engine::new(&url, CounterNames::default());
        assert_eq!(
            engine.counters().unwrap(),
            EngineCounters {
                missing_input: 5.0,
                skipped_output: 5.0
            }
        );
        engine.set_gain(0.25).unwrap();
        let missing = Engine::new(
            &url,
            CounterNames {
                missing_input: "absent".into(),
                ..Default::default()
            },
        );
        assert!(missing.counters().is_err());
        let seen = seen.lock().unwrap();
        let body = |path: &str| -> Value {
            serde_json::from_str(&seen.iter().find(|s| s.1 == path).unwrap().2).unwrap()
        };
        assert_eq!(body("/rate"), json!({"rate": 2.5e9}));
        assert_eq!(
            body("/signal"),
            json!({"tones": [{"frequency": 1.25e7, "amplitude": 0.9}], "noise": 0.001})
        );
        assert_eq!(body("/gains"), json!({"pol0": 0.25, "pol1": 0.25}));
    }

    #[test]
    fn an_absent_service_is_an_error_not_a_hang() {
        let port = crate::services::free_tcp_port().unwrap();
        let t = std::time::Instant::now();
        assert!(Dsim::new(&format!("127.0.0.1:{port}")).status().is_err());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn urls() {
        assert_eq!(normalise_url("127.0.0.1:8080/"), "http://127.0.0.1:8080");
        assert_eq!(normalise_url("http://dsim:80"), "http://dsim:80");
    }

    #[test]
    fn engine_geometry() {
        let g = EngineGeometry::parse(&json!({"config": {"channels": 1024, "taps": 16,
            "spectra_per_heap": 256, "adc_sample_rate": 1.712e9}}));
        assert_eq!(g.channels, Some(1024));
        assert_eq!(g.taps, Some(16));
        assert_eq!(g.spectra_per_heap, Some(256));
    }

    #[test]
    fn counter_deltas_survive_an_engine_restart() {
        let c = |m, s| EngineCounters {
            missing_input: m,
            skipped_output: s,
        };
        let moved = c(10.0, 5.0).since(&c(4.0, 5.0));
        assert_eq!((moved.missing_input, moved.skipped_output), (6.0, 0.0));
        // Restarted: counters began again at zero, so everything they hold is new.
        let moved = c(3.0, 1.0).since(&c(40.0, 9.0));
        assert_eq!((moved.missing_input, moved.skipped_output), (3.0, 1.0));
    }
}

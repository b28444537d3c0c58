//! The engine and dsim over katcp (`katcp://HOST:PORT`), as katgpucbf's fgpu and dsim answer:
//!
//! - engine: `?gain STREAM INPUT [VALUES]`, `?gain-all STREAM VALUES`, `?delays STREAM START D0
//!   D1` (a load at an ADC timestamp sent as the Unix time the ADC clock gives it, which the
//!   engine turns back as katgpucbf does: [`Clock`]); the newest input timestamp from the
//!   `input{0,1}.rx.timestamp` sensors; its outputs from the `STREAM.dither-seed` sensors; its
//!   counters from its Prometheus port (`--engine-metrics-url`), under katgpucbf's names
//!   ([`CounterNames::katgpucbf`], [`EngineCounts::of_katgpucbf_metrics`]). katgpucbf's fgpu has
//!   no status: the output's geometry comes from the command line, and what needs the status
//!   says so.
//! - dsim: its sensors (`adc-sample-rate`, `sync-time`, ...). katgpucbf's dsim sets its rate at
//!   start and has no faults: those requests say so.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use fgpu_api::dsim::{FaultsRequest, SignalRequest};
use fgpu_api::engine::katgpucbf_text::{complex_text, parse_complex};
use fgpu_api::engine::{
    DelayModel, DelayRequest, Delays, Gain, Gains, GainsRequest, PolDelay, PolDelaySpec, Status,
    WIDEBAND,
};
use katcp_server::{Client, ClientError, Response};
use serde_json::{Map, Value};

use super::{
    Client as HttpClient, Clock, CounterNames, DsimControl, EngineControl, EngineCounts,
    SignalChange, Unavailable,
};

/// The scheme of a katcp front's URL.
pub(super) const SCHEME: &str = "katcp://";

/// How long a request may wait for its reply.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to a katcp device, made on first use and again after it breaks.
struct Link {
    url: String,
    addr: String,
    conn: Mutex<Option<Client>>,
}

impl Link {
    fn new(url: &str) -> Self {
        let url = url.trim().trim_end_matches('/');
        Self {
            url: url.to_string(),
            addr: url.trim_start_matches(SCHEME).to_string(),
            conn: Mutex::new(None),
        }
    }

    /// `?name args`, its `ok` answer; a connection that broke is made again once.
    fn request<A: AsRef<[u8]>>(&self, name: &str, args: &[A]) -> Result<Response> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        for attempt in 0..2 {
            if conn.is_none() {
                *conn = Some(Client::connect(&self.addr, TIMEOUT)?);
            }
            let c = conn.as_mut().expect("connected above");
            match c.request(name, args.iter().map(|a| -> &[u8] { a.as_ref() })) {
                // A connection that went away (the device restarted): once more on a new one.
                Err(e @ ClientError::Io { .. }) if attempt == 0 => {
                    tracing::debug!("{e}; connecting again");
                    *conn = None;
                }
                // A reply that never came may yet come: this connection is out of step.
                Err(e @ ClientError::Timeout { .. }) => {
                    *conn = None;
                    return Err(anyhow!(e));
                }
                r => return r.with_context(|| format!("the katcp device at {}", self.url)),
            }
        }
        unreachable!("the second attempt returns or fails")
    }

    /// Sensor `name`'s value, as text, with its status.
    fn sensor(&self, name: &str) -> Result<(String, String)> {
        let r = self.request("sensor-value", &[name])?;
        r.informs
            .iter()
            .find(|m| m.arg_str(2) == Some(name))
            .map(|m| {
                let text = |i| m.arg_str(i).unwrap_or("").to_string();
                (text(4), text(3))
            })
            .ok_or_else(|| anyhow!("the katcp device at {} sent no reading of {name}", self.url))
    }

    /// Every sensor as JSON: name to `{"status", "value"}`.
    fn sensors_json(&self) -> Result<Value> {
        let r = self.request::<&str>("sensor-value", &[])?;
        let mut all = Map::new();
        for m in &r.informs {
            if let (Some(name), Some(status), Some(value)) =
                (m.arg_str(2), m.arg_str(3), m.arg_str(4))
            {
                all.insert(
                    name.into(),
                    serde_json::json!({"status": status, "value": value}),
                );
            }
        }
        Ok(Value::Object(all))
    }

    /// The names of the sensors matching `regex` (`?sensor-list /regex/`).
    fn sensor_names(&self, regex: &str) -> Result<Vec<String>> {
        let r = self.request("sensor-list", &[format!("/{regex}/")])?;
        Ok(r.informs
            .iter()
            .filter_map(|m| m.arg_str(0).map(str::to_string))
            .collect())
    }
}

/// An F-engine over katcp: katgpucbf's fgpu, or this project's with `--katcp`.
pub(super) struct KatcpEngine {
    link: Link,
    metrics: Option<HttpClient>,
}

impl KatcpEngine {
    pub(super) fn new(url: &str, metrics_url: Option<&str>) -> Self {
        Self {
            link: Link::new(url),
            metrics: metrics_url.map(|m| HttpClient::new(m, "FENGINE_CONTROL_TOKEN")),
        }
    }

    /// The stream the requests name: `output` if chosen, else the engine's only output, else
    /// the one named wideband (outputs found by their `STREAM.dither-seed` sensors).
    fn stream(&self, output: Option<&str>) -> Result<String> {
        if let Some(o) = output {
            return Ok(o.to_string());
        }
        let names: Vec<String> = self
            .link
            .sensor_names(r"^[^.]+\.dither-seed$")?
            .into_iter()
            .filter_map(|n| n.strip_suffix(".dither-seed").map(str::to_string))
            .collect();
        match &names[..] {
            [one] => Ok(one.clone()),
            _ if names.iter().any(|n| n == WIDEBAND) => Ok(WIDEBAND.into()),
            [] => bail!("the engine at {} reports no output", self.link.url),
            _ => bail!(
                "the engine at {} has {} outputs ({}) and none named {WIDEBAND}: choose one with \
                 --output NAME",
                self.link.url,
                names.len(),
                names.join(", ")
            ),
        }
    }

    /// Input `pol`'s gains as `?gain STREAM POL` gives them.
    fn pol_gain(&self, stream: &str, pol: usize) -> Result<Gain> {
        let r = self
            .link
            .request("gain", &[stream.to_string(), pol.to_string()])?;
        let values = (0..r.args.len())
            .map(|i| {
                let t = r.arg(i).unwrap_or("");
                parse_complex(t).ok_or_else(|| anyhow!("?gain answered {t:?}, not a complex gain"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(match values[..] {
            [] => bail!("?gain {stream} {pol} answered no gain"),
            [one] => Gain::Complex(one),
            _ => Gain::PerChannel(values),
        })
    }

    /// Input `pol`'s delay model from its `STREAM.inputP.delay` sensor.
    fn pol_delay(&self, stream: &str, pol: usize) -> Result<DelayModel> {
        let name = format!("{stream}.input{pol}.delay");
        let (text, _) = self.link.sensor(&name)?;
        parse_delay_sensor(&text).with_context(|| format!("sensor {name} reads {text:?}"))
    }
}

/// One polarisation's gain as `?gain` values.
fn gain_values(g: &Gain) -> Vec<String> {
    match g {
        Gain::Real(x) => vec![complex_text([*x, 0.0])],
        Gain::Complex(z) => vec![complex_text(*z)],
        Gain::PerChannel(list) => list.iter().map(|z| complex_text(*z)).collect(),
    }
}

/// katgpucbf's delay model text, `delay,delay_rate:phase,phase_rate`.
fn delay_text(spec: &PolDelaySpec) -> String {
    match spec {
        PolDelaySpec::Text(t) => t.clone(),
        PolDelaySpec::Fields(PolDelay {
            delay,
            delay_rate,
            phase,
            phase_rate,
        }) => format!("{delay},{delay_rate}:{phase},{phase_rate}"),
    }
}

/// A delay sensor's `(loadmcnt, delay, delay-rate, phase, phase-rate)`.
fn parse_delay_sensor(text: &str) -> Result<DelayModel> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .context("not in parentheses")?;
    let f: Vec<&str> = inner.split(',').map(str::trim).collect();
    let [load, delay, delay_rate, phase, phase_rate] = f[..] else {
        bail!("not five values");
    };
    let num = |t: &str| {
        t.parse::<f64>()
            .with_context(|| format!("{t:?} is not a number"))
    };
    // katgpucbf's fgpu reads -1 until a model is loaded: the zero model it starts with, in
    // force from the stream's start.
    let load_timestamp = match load {
        "-1" => 0,
        t => t
            .parse::<u64>()
            .with_context(|| format!("{t:?} is not a timestamp (nor -1, no model loaded)"))?,
    };
    Ok(DelayModel {
        delay: num(delay)?,
        delay_rate: num(delay_rate)?,
        phase: num(phase)?,
        phase_rate: num(phase_rate)?,
        load_timestamp,
        apply_from: load_timestamp,
    })
}

/// Unix time now, seconds.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl EngineControl for KatcpEngine {
    fn url(&self) -> &str {
        &self.link.url
    }

    fn status(&self) -> Result<Status> {
        Err(Unavailable(format!(
            "the engine at {} is reached over katcp, which has no status (as katgpucbf's fgpu): \
             its output's geometry comes from the command line (--output, --channels, --dst, \
             --adc-rate)",
            self.link.url
        ))
        .into())
    }

    fn status_json(&self) -> Result<Value> {
        self.link.sensors_json()
    }

    fn metrics(&self) -> Result<String> {
        match &self.metrics {
            Some(m) => m.get_text("/metrics"),
            None => bail!(
                "the engine at {} is reached over katcp and its counters are Prometheus metrics: \
                 give --engine-metrics-url (katgpucbf's --prometheus-port)",
                self.link.url
            ),
        }
    }

    fn gains(&self, output: Option<&str>) -> Result<Gains> {
        let stream = self.stream(output)?;
        Ok(Gains {
            pol0: self.pol_gain(&stream, 0)?,
            pol1: self.pol_gain(&stream, 1)?,
        })
    }

    fn set_gains(&self, output: Option<&str>, req: &GainsRequest) -> Result<Gains> {
        let stream = self.stream(output)?;
        match (&req.pol0, &req.pol1) {
            (Some(a), Some(b)) if a == b => {
                let mut args = vec![stream.clone()];
                args.extend(gain_values(a));
                self.link.request("gain-all", &args)?;
            }
            (a, b) => {
                for (pol, g) in [a, b].into_iter().enumerate() {
                    if let Some(g) = g {
                        let mut args = vec![stream.clone(), pol.to_string()];
                        args.extend(gain_values(g));
                        self.link.request("gain", &args)?;
                    }
                }
            }
        }
        self.gains(Some(&stream))
    }

    fn set_delays(
        &self,
        output: Option<&str>,
        req: &DelayRequest,
        clock: Option<&Clock>,
    ) -> Result<Delays> {
        let stream = self.stream(output)?;
        let (Some(d0), Some(d1)) = (&req.pol0, &req.pol1) else {
            bail!("katgpucbf's ?delays loads both inputs' models at once: give both");
        };
        // katgpucbf's ?delays takes its start as a Unix time: an ADC timestamp goes by the
        // clock, and the engine turns it back into round((start - sync) * rate), within
        // [`Clock::round_trip_error`] samples of the timestamp asked for.
        let start = match (req.load_timestamp, req.load_time) {
            (Some(_), Some(_)) => bail!("give load_timestamp or load_time, not both"),
            (Some(ts), None) => {
                let Some(clock) = clock else {
                    return Err(Unavailable(format!(
                        "katgpucbf's ?delays takes its start as a Unix time, and the engine at {} \
                         is reached over katcp with no ADC clock known to turn timestamp {ts} \
                         into one (dsim's sync time and rate)",
                        self.link.url
                    ))
                    .into());
                };
                let unix = clock.unix(ts);
                tracing::debug!(
                    "delay model for timestamp {ts} sent as Unix time {unix}: the engine loads it \
                     {} samples off",
                    clock.round_trip_error(ts)
                );
                unix
            }
            (None, Some(unix)) => unix,
            // No load time: at once, which katgpucbf reads from a start time already past.
            (None, None) => unix_now(),
        };
        self.link.request(
            "delays",
            &[
                stream.clone(),
                format!("{start}"),
                delay_text(d0),
                delay_text(d1),
            ],
        )?;
        Ok(Delays {
            pol0: self.pol_delay(&stream, 0)?,
            pol1: self.pol_delay(&stream, 1)?,
        })
    }

    fn counts(&self, output: Option<&str>) -> Result<EngineCounts> {
        let stream = self.stream(output)?;
        let Some(m) = &self.metrics else {
            return Err(Unavailable(format!(
                "the engine at {} is reached over katcp and its counters are Prometheus \
                 metrics: give --engine-metrics-url (katgpucbf's --prometheus-port)",
                self.link.url
            ))
            .into());
        };
        let text = m.get_text("/metrics")?;
        EngineCounts::of_katgpucbf_metrics(&text, &stream)
            .with_context(|| format!("the engine's metrics at {}", m.base))
    }

    fn newest_input(&self) -> Result<u64> {
        let mut newest = 0;
        for pol in 0..2 {
            let (v, _) = self.link.sensor(&format!("input{pol}.rx.timestamp"))?;
            let ts: i64 = v
                .parse()
                .with_context(|| format!("input{pol}.rx.timestamp reads {v:?}"))?;
            newest = newest.max(ts.max(0) as u64);
        }
        Ok(newest)
    }

    fn steady_state(&self) -> Result<Option<u64>> {
        let (v, _) = self.link.sensor("steady-state-timestamp")?;
        let t: i64 = v
            .parse()
            .with_context(|| format!("steady-state-timestamp reads {v:?}"))?;
        Ok(Some(t.max(0) as u64))
    }

    fn default_counter_names(&self) -> CounterNames {
        CounterNames::katgpucbf()
    }
}

/// dsim over katcp: katgpucbf's dsim, or this project's with `--katcp`.
pub(super) struct KatcpDsim(Link);

impl KatcpDsim {
    pub(super) fn new(url: &str) -> Self {
        Self(Link::new(url))
    }

    /// What a request over HTTP does that katgpucbf's dsim cannot.
    fn cannot(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "the dsim at {} is reached over katcp, where katgpucbf's dsim {what}: give its HTTP \
             URL for this",
            self.0.url
        )
    }
}

impl DsimControl for KatcpDsim {
    fn url(&self) -> &str {
        &self.0.url
    }
    fn status_json(&self) -> Result<Value> {
        self.0.sensors_json()
    }
    fn status(&self) -> Result<fgpu_api::dsim::Status> {
        Err(self.cannot("has no status (its sensors say its rate and sync time)"))
    }
    fn adc_rate(&self) -> Result<f64> {
        let (v, _) = self.0.sensor("adc-sample-rate")?;
        v.parse()
            .with_context(|| format!("dsim's adc-sample-rate reads {v:?}"))
    }
    fn sync_time(&self) -> Result<f64> {
        let (v, _) = self.0.sensor("sync-time")?;
        v.parse()
            .with_context(|| format!("dsim's sync-time reads {v:?}"))
    }
    fn set_rate(&self, _rate: f64) -> Result<()> {
        Err(self.cannot("sets its rate when it starts, with no request to change it"))
    }
    fn set_signal(&self, _req: &SignalRequest) -> Result<SignalChange> {
        Err(self.cannot(
            "takes signals in its own language (?signals), which the harness does not write",
        ))
    }
    fn set_faults(&self, _faults: &FaultsRequest) -> Result<()> {
        Err(self.cannot("injects no faults"))
    }
    fn metrics(&self) -> Result<String> {
        Err(self.cannot("keeps its metrics on a Prometheus port"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_models_and_gains_as_katgpucbf_writes_them() {
        let d = parse_delay_sensor("(4096, 1e-09, 0.0, 0.5, -2.0)").unwrap();
        assert_eq!(
            (d.load_timestamp, d.delay, d.phase, d.phase_rate),
            (4096, 1e-9, 0.5, -2.0)
        );
        assert!(parse_delay_sensor("(1, 2, 3)").is_err());
        // katgpucbf's fgpu before any ?delays: its zero model, from the start.
        let d = parse_delay_sensor("(-1, 0.0, 0.0, 0.0, 0.0)").unwrap();
        assert_eq!((d.load_timestamp, d.delay, d.phase), (0, 0.0, 0.0));
        assert!(parse_delay_sensor("(-2, 0.0, 0.0, 0.0, 0.0)").is_err());
        assert!(parse_delay_sensor("4096, 0, 0, 0, 0").is_err());
        let spec = PolDelaySpec::Fields(PolDelay {
            delay: 1e-9,
            delay_rate: 0.0,
            phase: 0.5,
            phase_rate: -2.0,
        });
        assert_eq!(delay_text(&spec), "0.000000001,0:0.5,-2");
        assert_eq!(gain_values(&Gain::Real(0.25)), vec!["0.25+0j"]);
        assert_eq!(
            gain_values(&Gain::PerChannel(vec![[1.0, -0.5], [0.0, 2.0]])),
            vec!["1-0.5j", "0+2j"]
        );
    }
}

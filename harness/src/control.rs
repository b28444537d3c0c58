//! HTTP control of dsim and the engine: the only place that knows their endpoints, so that a
//! change on their side is one edit here. Requests are built, and replies read, as the types both
//! sides share ([`fgpu_api::dsim`], [`fgpu_api::engine`]), never by guessing keys.
//!
//! - dsim: `GET /status`, `PUT /rate`, `PUT /signal`, `PUT /faults`, `GET /metrics`.
//! - fengine: `GET /status`, `GET /metrics` (Prometheus text, with the missing-input and
//!   skipped-output counters, read by name pattern so that another engine's names can be given),
//!   `PUT /outputs/NAME/gains`, `PUT /delays`.
//!
//! An engine serves one or more outputs, keyed by name in its status. The harness reads one of
//! them ([`choose_output`]: `--output NAME`, else the engine's only output, else the one named
//! `wideband`); an [`Engine`] client told which ([`Engine::select_output`]) sends gains to that
//! output and counts only that output's skipped heaps.
//!
//! Services started with a control token (`--control-token`) refuse mutating requests without
//! it: the clients send `DSIM_CONTROL_TOKEN` and `FENGINE_CONTROL_TOKEN` from the environment.

mod katcp;

use std::sync::Arc;
use std::time::Duration;

use std::net::{SocketAddr, SocketAddrV4};

use anyhow::{anyhow, bail, Context, Result};
use fgpu_api::dsim::{FaultsRequest, RateRequest, SignalRequest, SignalUpdate};
use fgpu_api::engine::{DelayRequest, Delays, Gain, Gains, GainsRequest, Output, Status, WIDEBAND};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use spead::transport::Endpoint;

use crate::band::Band;

pub use fgpu_api::dsim::{SignalChange, Tone};

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        // A refusal's body says why: read it rather than turn the status into an error.
        .http_status_as_error(false)
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
    /// The bearer token mutating requests carry, when the service asks for one.
    token: Option<String>,
}

impl Client {
    /// A client of the service at `url`; its token, if any, from the environment variable
    /// `token_var` (the same one the service reads, so one export covers both ends, and local
    /// children inherit it).
    fn new(url: &str, token_var: &str) -> Self {
        Self {
            base: normalise_url(url),
            agent: agent(Duration::from_secs(10)),
            token: std::env::var(token_var)
                .ok()
                .filter(|t| !t.trim().is_empty()),
        }
    }

    fn get_json(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let text = self.get_text(path)?;
        serde_json::from_str(&text).with_context(|| format!("GET {url}: the reply is not JSON"))
    }

    /// GET a reply of type `T`; a reply of another shape is an error that says whose reply was
    /// expected (`what`).
    fn get_typed<T: DeserializeOwned>(&self, path: &str, what: &str) -> Result<T> {
        let url = format!("{}{path}", self.base);
        let text = self.get_text(path)?;
        serde_json::from_str(&text).map_err(|e| {
            anyhow!("GET {url} did not answer with {what} ({e}); is that the right service, of this version?")
        })
    }

    fn get_text(&self, path: &str) -> Result<String> {
        let url = format!("{}{path}", self.base);
        let mut reply = self
            .agent
            .get(&url)
            .call()
            .with_context(|| format!("GET {url}"))?;
        let body = reply.body_mut().read_to_string().unwrap_or_default();
        refused("GET", &url, reply.status(), &body)?;
        Ok(body)
    }

    /// PUT a request as JSON; the reply's text.
    fn put(&self, path: &str, body: &impl Serialize) -> Result<String> {
        let url = format!("{}{path}", self.base);
        let text = serde_json::to_string(body)?;
        let mut request = self
            .agent
            .put(&url)
            .header("content-type", "application/json");
        if let Some(t) = &self.token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let mut reply = request
            .send(&text)
            .with_context(|| format!("PUT {url} {}", shorten(&text)))?;
        let text = reply.body_mut().read_to_string().unwrap_or_default();
        refused("PUT", &url, reply.status(), &text)?;
        Ok(text)
    }

    /// PUT a request and read the reply as `T`; a reply of another shape is an error that says
    /// whose reply was expected (`what`).
    fn put_typed<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
        what: &str,
    ) -> Result<T> {
        let text = self.put(path, body)?;
        serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "PUT {}{path} did not answer with {what} ({e}); is that the right service, of this version?",
                self.base
            )
        })
    }
}

/// A body for an error message: at most 200 characters of it.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}... ({} bytes)", &text[..i], text.len()),
        None => text.to_string(),
    }
}

/// An error for a reply that is not a success, with the service's own words.
fn refused(method: &str, url: &str, status: ureq::http::StatusCode, body: &str) -> Result<()> {
    if status.is_success() {
        return Ok(());
    }
    let why = body.trim();
    let why = if why.is_empty() {
        "no reason given"
    } else {
        why
    };
    Err(anyhow!("{method} {url} was refused ({status}): {why}"))
}

/// Why a run lost heaps when dsim skipped `n` of them: the sender, not the engine, fell behind,
/// too far to catch up (stalls it made up are not losses: [`DsimLag`]).
pub fn dsim_skipped_reason(n: u64) -> String {
    format!(
        "dsim fell more than --max-late behind, too far to catch up, and skipped {n} heaps: this \
         host could not send the rate"
    )
}

/// What dsim says of falling behind over a run: stalls it made up (catch-ups, every heap sent,
/// late) and heaps it skipped, past --max-late (lost: a failure).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DsimLag {
    pub skipped: u64,
    pub catch_ups: u64,
    pub heaps_sent_late: u64,
}

impl DsimLag {
    pub fn of(s: &fgpu_api::dsim::Status) -> Self {
        Self {
            skipped: s.heaps_skipped,
            catch_ups: s.catch_ups,
            heaps_sent_late: s.heaps_sent_late,
        }
    }

    /// What moved since `before`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            skipped: self.skipped.saturating_sub(before.skipped),
            catch_ups: self.catch_ups.saturating_sub(before.catch_ups),
            heaps_sent_late: self.heaps_sent_late.saturating_sub(before.heaps_sent_late),
        }
    }

    /// The failure, when dsim skipped heaps: how many, and the stalls it did make up.
    pub fn failure(&self) -> Option<String> {
        (self.skipped > 0).then(|| {
            let mut why = dsim_skipped_reason(self.skipped);
            if self.catch_ups > 0 {
                why.push_str(&format!(
                    " (it caught up after {} other stalls)",
                    self.catch_ups
                ));
            }
            why
        })
    }
}

/// What dsim says after a signal change.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SignalApplied {
    /// First timestamp with the new signal.
    pub from_timestamp: u64,
    /// The tone's frequency as generated (dsim rounds to whole cycles per buffer).
    pub frequency: Option<f64>,
}

/// What the harness asks of dsim, whichever front reaches it: HTTP ([`HttpDsim`]) or katcp
/// ([`katcp::KatcpDsim`]); [`Dsim::new`] picks by the URL's scheme.
pub trait DsimControl: Send + Sync {
    fn url(&self) -> &str;
    /// Everything dsim reports, as JSON (a katcp dsim: its sensors).
    fn status_json(&self) -> Result<Value>;
    fn status(&self) -> Result<fgpu_api::dsim::Status>;
    /// The ADC sample rate in force (sample/s per polarisation).
    fn adc_rate(&self) -> Result<f64>;
    /// The Unix time of ADC timestamp 0 (katgpucbf's `sync-time`), s.
    fn sync_time(&self) -> Result<f64>;
    fn set_rate(&self, rate: f64) -> Result<()>;
    fn set_signal(&self, req: &SignalRequest) -> Result<SignalChange>;
    fn set_faults(&self, faults: &FaultsRequest) -> Result<()>;
    fn metrics(&self) -> Result<String>;
}

/// dsim's HTTP front.
struct HttpDsim(Client);

impl DsimControl for HttpDsim {
    fn url(&self) -> &str {
        &self.0.base
    }
    fn status_json(&self) -> Result<Value> {
        self.0.get_json("/status")
    }
    fn status(&self) -> Result<fgpu_api::dsim::Status> {
        self.0.get_typed("/status", "dsim's status")
    }
    fn adc_rate(&self) -> Result<f64> {
        Ok(self.status()?.rate)
    }
    fn sync_time(&self) -> Result<f64> {
        Ok(self.status()?.sync_time)
    }
    fn set_rate(&self, rate: f64) -> Result<()> {
        self.0.put("/rate", &RateRequest { rate }).map(|_| ())
    }
    fn set_signal(&self, req: &SignalRequest) -> Result<SignalChange> {
        self.0.put_typed("/signal", req, "dsim's signal change")
    }
    fn set_faults(&self, faults: &FaultsRequest) -> Result<()> {
        self.0.put("/faults", faults).map(|_| ())
    }
    fn metrics(&self) -> Result<String> {
        self.0.get_text("/metrics")
    }
}

/// Whether `url` names a katcp front (`katcp://HOST:PORT`).
pub fn is_katcp(url: &str) -> bool {
    url.trim().starts_with(katcp::SCHEME)
}

#[derive(Clone)]
pub struct Dsim(Arc<dyn DsimControl>);

impl Dsim {
    /// A client of the dsim at `url`: `katcp://HOST:PORT` over katcp, else over HTTP.
    pub fn new(url: &str) -> Self {
        if is_katcp(url) {
            Self(Arc::new(katcp::KatcpDsim::new(url)))
        } else {
            Self(Arc::new(HttpDsim(Client::new(url, "DSIM_CONTROL_TOKEN"))))
        }
    }
    pub fn url(&self) -> &str {
        self.0.url()
    }
    pub fn status_json(&self) -> Result<Value> {
        self.0.status_json()
    }
    pub fn status(&self) -> Result<fgpu_api::dsim::Status> {
        self.0.status()
    }
    /// The ADC sample rate in force (sample/s per polarisation).
    pub fn adc_rate(&self) -> Result<f64> {
        self.0.adc_rate()
    }
    /// The Unix time of ADC timestamp 0, s.
    pub fn sync_time(&self) -> Result<f64> {
        self.0.sync_time()
    }
    /// The ADC clock: the sync time and the rate in force.
    pub fn clock(&self) -> Result<Clock> {
        Ok(Clock {
            sync_time: self.sync_time()?,
            adc_rate: self.adc_rate()?,
        })
    }
    /// Sets the ADC sample rate (sample/s per polarisation).
    pub fn set_rate(&self, rate: f64) -> Result<()> {
        self.0.set_rate(rate)
    }
    /// Replaces the tones with one (noise as given, else kept; dither kept).
    pub fn set_tone(&self, tone: Tone, noise: Option<f64>) -> Result<SignalApplied> {
        let change = self.set_signal(&SignalRequest::Common(SignalUpdate {
            tones: Some(vec![tone]),
            noise,
            ..Default::default()
        }))?;
        Ok(SignalApplied {
            from_timestamp: change.from_timestamp,
            frequency: change
                .signal
                .pols
                .first()
                .and_then(|p| p.tone_frequencies.first().copied()),
        })
    }
    /// Sets the signal (either of dsim's forms); the reply names the first timestamp carrying it.
    pub fn set_signal(&self, req: &SignalRequest) -> Result<SignalChange> {
        self.0.set_signal(req)
    }
    /// Replaces the faults of each polarisation the request names (`PolFaults::default()`
    /// clears them).
    pub fn set_faults(&self, faults: &FaultsRequest) -> Result<()> {
        self.0.set_faults(faults)
    }
    pub fn metrics(&self) -> Result<String> {
        self.0.metrics()
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

/// An array's counters: every engine's summed.
impl std::iter::Sum for EngineCounters {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), |a, b| Self {
            missing_input: a.missing_input + b.missing_input,
            skipped_output: a.skipped_output + b.skipped_output,
        })
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
    /// This project's engine's series (`fengine_` ones: its `/metrics` has katgpucbf's `fgpu_`
    /// counters beside them, which would count the same heaps twice).
    fn default() -> Self {
        Self {
            missing_input: "fengine missing input".into(),
            skipped_output: "fengine skipped output, fengine send errors".into(),
        }
    }
}

impl CounterNames {
    /// katgpucbf's fgpu counters (Prometheus port): heaps missing on the input, and heaps not
    /// sent because input data was incomplete (it counts no send errors).
    pub fn katgpucbf() -> Self {
        Self {
            missing_input: "fgpu_input_missing_heaps".into(),
            skipped_output: "fgpu_output_skipped_heaps".into(),
        }
    }
}

/// The ADC clock shared by dsim and the engine: ADC timestamp 0 is Unix time `sync_time`, and
/// `adc_rate` samples pass a second. katgpucbf's `?delays` takes its start as a Unix time and
/// turns it into a sample count with these two (its `TimeConverter`); [`Clock::unix`] and
/// [`Clock::timestamp`] are the same arithmetic, in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Clock {
    pub sync_time: f64,
    pub adc_rate: f64,
}

impl Clock {
    /// The Unix time of ADC timestamp `ts` (katgpucbf's `adc_to_unix`), the nearest float64.
    pub fn unix(&self, ts: u64) -> f64 {
        ts as f64 / self.adc_rate + self.sync_time
    }

    /// The ADC timestamp an engine loads for Unix time `unix` (katgpucbf's
    /// `round(unix_to_adc(start))`, and this project's engine's).
    pub fn timestamp(&self, unix: f64) -> i64 {
        ((unix - self.sync_time) * self.adc_rate).round() as i64
    }

    /// How far (samples) the timestamp an engine loads for `ts` sent as a Unix time lands from
    /// `ts`: float64 seconds near 1.8e9 are 2.4e-7 s apart, so at most 1.2e-7 s times the rate.
    pub fn round_trip_error(&self, ts: u64) -> i64 {
        self.timestamp(self.unix(ts)) - ts as i64
    }
}

/// An output's saturation counters: complex values clamped per polarisation, out of `values`
/// computed per polarisation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Clamped {
    pub clamped: [u64; 2],
    pub values: u64,
}

/// The engine's counters for the chosen output, read at one moment, and how far its input,
/// computation and output had got then, where the front says it with them. Over HTTP all of it
/// comes from one `/status`; over katcp the counters come from one scrape of the Prometheus
/// metrics (katgpucbf's series), and the progress is not said with them (its sensors are sampled
/// apart): `None`, and what needs it takes it from dsim and the harness's own receiver.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EngineCounts {
    /// The newest input timestamp received, either polarisation.
    pub newest_input: Option<u64>,
    /// The input timestamp of the newest frame computed (its counters then cover it).
    pub computed_through: Option<u64>,
    /// The timestamp of the newest output heap sent.
    pub sent_through: Option<u64>,
    /// Digitiser heaps missing, both polarisations.
    pub missing_input: u64,
    /// The output's heaps not sent because their input was incomplete.
    pub skipped_output: u64,
    /// The output's saturation counters, where the front has them.
    pub clamped: Option<Clamped>,
    /// Input packets rejected, by reason, where the front says.
    pub rejected: Option<std::collections::BTreeMap<String, u64>>,
    /// Input packets the kernel dropped at the engine's full sockets, where the front says.
    pub socket_drops: Option<u64>,
}

impl EngineCounts {
    /// From one status of an engine, for its output `out`: the values of a frame are
    /// `heaps_per_frame * spectra_per_heap * channels` per polarisation, and its saturation
    /// counts are added where a frame is computed, as `frames.computed`.
    pub fn of_status(st: &Status, out: &Output) -> Self {
        let rejected = st.input.pols.iter().flat_map(|p| p.rejected.iter()).fold(
            std::collections::BTreeMap::new(),
            |mut by, (r, n)| {
                *by.entry(r.clone()).or_insert(0) += *n;
                by
            },
        );
        Self {
            newest_input: Some(
                st.input
                    .pols
                    .iter()
                    .map(|p| p.last_timestamp)
                    .max()
                    .unwrap_or(0),
            ),
            computed_through: Some(st.frames.last_timestamp),
            sent_through: Some(out.last_timestamp),
            missing_input: st.heaps_missing(),
            skipped_output: out.heaps_skipped,
            clamped: Some(Clamped {
                clamped: [
                    out.saturated.first().copied().unwrap_or(0),
                    out.saturated.get(1).copied().unwrap_or(0),
                ],
                values: st.frames.computed
                    * (out.heaps_per_frame * out.spectra_per_heap * out.channels) as u64,
            }),
            rejected: Some(rejected),
            socket_drops: Some(st.input.pols.iter().map(|p| p.socket_drops).sum()),
        }
    }

    /// From katgpucbf's Prometheus series of output `stream`: `fgpu_input_missing_heaps{pol}`,
    /// `fgpu_output_skipped_heaps{stream}`, and where present `fgpu_output_clipped_samples
    /// {stream, pol}` out of `fgpu_output_samples{stream}` (complex samples of both
    /// polarisations: half of them per polarisation). katgpucbf adds both of the last where a
    /// heap is sent, so that their ratio is exact at any moment.
    pub fn of_katgpucbf_metrics(text: &str, stream: &str) -> Result<Self> {
        let samples = parse_prometheus(text);
        let of_stream = |s: &&Sample| label(&s.labels, "stream").is_none_or(|o| o == stream);
        let sum = |name: &str, pol: Option<usize>| -> Option<f64> {
            let mine: Vec<Sample> = samples
                .iter()
                .filter(of_stream)
                .filter(|s| pol.is_none_or(|p| label(&s.labels, "pol") == Some(&p.to_string())))
                .cloned()
                .collect();
            sum_matching(&mine, name)
        };
        let need = |name: &str| {
            sum(name, None).ok_or_else(|| anyhow!("the engine's metrics have no {name} series"))
        };
        let clamped = match (
            sum("fgpu_output_clipped_samples", Some(0)),
            sum("fgpu_output_clipped_samples", Some(1)),
            sum("fgpu_output_samples", None),
        ) {
            (Some(a), Some(b), Some(v)) => Some(Clamped {
                clamped: [a as u64, b as u64],
                values: v as u64 / 2,
            }),
            _ => None,
        };
        Ok(Self {
            newest_input: None,
            computed_through: None,
            sent_through: None,
            missing_input: need("fgpu_input_missing_heaps")? as u64,
            skipped_output: need("fgpu_output_skipped_heaps")? as u64,
            clamped,
            rejected: None,
            socket_drops: None,
        })
    }
}

/// What an engine's front cannot do (katcp, as katgpucbf's fgpu, has no status; it loads delay
/// models at Unix times only, so that a load at an ADC timestamp needs the ADC clock; its
/// counters need its Prometheus metrics): what needs it says so in this sentence and is not run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// What the harness asks of an engine, whichever front reaches it: HTTP ([`HttpEngine`]) or
/// katcp ([`katcp::KatcpEngine`], katgpucbf's requests, sensors and Prometheus names);
/// [`Engine::connect`] picks by the URL's scheme. `output` is the output chosen, if any.
pub trait EngineControl: Send + Sync {
    fn url(&self) -> &str;
    /// The engine's full status (an engine reached over katcp has none: an error that says so).
    fn status(&self) -> Result<Status>;
    /// Everything the engine reports, as JSON (a katcp engine: its sensors).
    fn status_json(&self) -> Result<Value>;
    /// Prometheus text.
    fn metrics(&self) -> Result<String>;
    fn gains(&self, output: Option<&str>) -> Result<Gains>;
    fn set_gains(&self, output: Option<&str>, req: &GainsRequest) -> Result<Gains>;
    /// Loads delay models; a load at an ADC timestamp goes as a Unix time where the front takes
    /// one, by `clock`.
    fn set_delays(
        &self,
        output: Option<&str>,
        req: &DelayRequest,
        clock: Option<&Clock>,
    ) -> Result<Delays>;
    /// The newest input timestamp received, either polarisation.
    fn newest_input(&self) -> Result<u64>;
    /// The chosen output's counters, read at one moment ([`EngineCounts`]).
    fn counts(&self, output: Option<&str>) -> Result<EngineCounts>;
    /// katgpucbf's `steady-state-timestamp`: heaps from this timestamp on reflect every request
    /// answered so far, where the front says (None over HTTP).
    fn steady_state(&self) -> Result<Option<u64>> {
        Ok(None)
    }
    /// The series that hold its counters when the command line names none.
    fn default_counter_names(&self) -> CounterNames {
        CounterNames::default()
    }
}

/// The engine's HTTP front.
struct HttpEngine(Client);

/// Where the chosen output's gains live.
fn gains_path(output: Option<&str>) -> String {
    match output {
        Some(name) => format!("/outputs/{name}/gains"),
        None => "/gains".into(),
    }
}

impl EngineControl for HttpEngine {
    fn url(&self) -> &str {
        &self.0.base
    }
    fn status(&self) -> Result<Status> {
        self.0.get_typed("/status", "an F-engine's status")
    }
    fn status_json(&self) -> Result<Value> {
        self.0.get_json("/status")
    }
    fn metrics(&self) -> Result<String> {
        self.0.get_text("/metrics")
    }
    fn gains(&self, output: Option<&str>) -> Result<Gains> {
        self.0.get_typed(&gains_path(output), "an F-engine's gains")
    }
    fn set_gains(&self, output: Option<&str>, req: &GainsRequest) -> Result<Gains> {
        self.0
            .put_typed(&gains_path(output), req, "an F-engine's gains")
    }
    fn set_delays(
        &self,
        _output: Option<&str>,
        req: &DelayRequest,
        _clock: Option<&Clock>,
    ) -> Result<Delays> {
        self.0.put_typed("/delays", req, "an F-engine's delays")
    }
    fn counts(&self, output: Option<&str>) -> Result<EngineCounts> {
        let st = self.status()?;
        let (_, out) = choose_output(&st, output)?;
        Ok(EngineCounts::of_status(&st, out))
    }
    fn newest_input(&self) -> Result<u64> {
        let st = self.status()?;
        Ok(st
            .input
            .pols
            .iter()
            .map(|p| p.last_timestamp)
            .max()
            .unwrap_or(0))
    }
}

#[derive(Clone)]
pub struct Engine {
    link: Arc<dyn EngineControl>,
    names: CounterNames,
    /// The output this client reads and sets gains of; None until chosen (then gains go to
    /// `/gains`, the engine's output named wideband, and counters are not told apart).
    output: Option<String>,
    /// The ADC clock, where known: a front that loads delay models at Unix times needs it.
    clock: Option<Clock>,
}

impl Engine {
    /// A client of the engine at `url` (its metrics from its own front), counting `names`.
    pub fn new(url: &str, names: CounterNames) -> Self {
        Self::connect(url, None, names)
    }
    /// A client of the engine at `url`: `katcp://HOST:PORT` over katcp, its Prometheus metrics
    /// from `metrics_url` (katgpucbf's `--prometheus-port`); else over HTTP. Counter names left
    /// at their default become the engine's own ([`EngineControl::default_counter_names`]).
    pub fn connect(url: &str, metrics_url: Option<&str>, names: CounterNames) -> Self {
        let link: Arc<dyn EngineControl> = if is_katcp(url) {
            Arc::new(katcp::KatcpEngine::new(url, metrics_url))
        } else {
            Arc::new(HttpEngine(Client::new(url, "FENGINE_CONTROL_TOKEN")))
        };
        let names = if names == CounterNames::default() {
            link.default_counter_names()
        } else {
            names
        };
        Self {
            link,
            names,
            output: None,
            clock: None,
        }
    }
    /// The ADC clock (dsim's sync time and rate, which the engine shares): a delay model loaded
    /// at an ADC timestamp goes to a front that takes Unix times by it.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = Some(clock);
    }
    pub fn url(&self) -> &str {
        self.link.url()
    }
    /// Reads output `name` from now on: its geometry, its gains, its skipped heaps.
    pub fn select_output(&mut self, name: &str) {
        self.output = Some(name.to_string());
    }
    /// The output chosen with [`select_output`](Self::select_output), if any.
    pub fn output_name(&self) -> Option<&str> {
        self.output.as_deref()
    }
    /// The output this client reads in `status`: the one selected, else [`choose_output`]'s
    /// default. The error names the engine and its outputs.
    pub fn output_in<'a>(&self, status: &'a Status) -> Result<(&'a str, &'a Output)> {
        choose_output(status, self.output.as_deref())
            .with_context(|| format!("the engine at {}", self.url()))
    }
    /// Which series hold the counters.
    pub fn counter_names(&self) -> &CounterNames {
        &self.names
    }
    pub fn status_json(&self) -> Result<Value> {
        self.link.status_json()
    }
    pub fn metrics(&self) -> Result<String> {
        self.link.metrics()
    }
    /// Reads the counters from the metrics; an engine without either series is an error (a
    /// trial that cannot see them must not pass).
    pub fn counters(&self) -> Result<EngineCounters> {
        let text = self.metrics()?;
        let mut samples = parse_prometheus(&text);
        // Another output's series (labelled with its name: `output`, katgpucbf's `stream`) are
        // not this output's loss.
        if let Some(name) = &self.output {
            samples.retain(|s| {
                label(&s.labels, "output")
                    .or_else(|| label(&s.labels, "stream"))
                    .is_none_or(|o| o == name)
            });
        }
        let get = |pattern: &str| {
            sum_matching(&samples, pattern).ok_or_else(|| {
                anyhow!(
                    "the engine's metrics at {} have no series matching '{pattern}'",
                    self.url()
                )
            })
        };
        Ok(EngineCounters {
            missing_input: get(&self.names.missing_input)?,
            skipped_output: get(&self.names.skipped_output)?,
        })
    }
    /// Sets one real gain for every channel of both polarisations of the chosen output.
    pub fn set_gain(&self, gain: f64) -> Result<()> {
        self.set_gains(&GainsRequest::both(Gain::Real(gain)))
            .map(|_| ())
    }
    pub fn status(&self) -> Result<fgpu_api::engine::Status> {
        self.link.status()
    }
    /// Sets the chosen output's gains: per polarisation a number, `[re, im]`, or one
    /// `[re, im]` per channel; the gains now loaded.
    pub fn set_gains(&self, req: &GainsRequest) -> Result<Gains> {
        self.link.set_gains(self.output.as_deref(), req)
    }
    /// The chosen output's gains (`GainsRequest::from` loads them again).
    pub fn gains(&self) -> Result<Gains> {
        self.link.gains(self.output.as_deref())
    }
    /// Loads delay models (katgpucbf's units); both polarisations' models now loaded.
    pub fn set_delays(&self, req: &DelayRequest) -> Result<Delays> {
        self.link
            .set_delays(self.output.as_deref(), req, self.clock.as_ref())
    }
    /// The chosen output's counters and the engine's progress, read at one moment.
    pub fn counts(&self) -> Result<EngineCounts> {
        self.link.counts(self.output.as_deref())
    }
    /// The newest input timestamp the engine has received.
    pub fn newest_input(&self) -> Result<u64> {
        self.link.newest_input()
    }
    /// The timestamp from which heaps reflect every request answered so far, where the engine
    /// says (katcp's `steady-state-timestamp`).
    pub fn steady_state(&self) -> Result<Option<u64>> {
        self.link.steady_state()
    }
    /// The chosen output's shape and the ADC rate, from `/status`.
    pub fn geometry(&self) -> Result<EngineGeometry> {
        let status = self.status()?;
        let (name, out) = self.output_in(&status)?;
        EngineGeometry::of(&status, out)
            .with_context(|| format!("output {name} of the engine at {}", self.url()))
    }
}

/// The output the harness reads of an engine whose status is `status`: `wanted` (`--output`)
/// if given, else the engine's only output, else the one named [`WIDEBAND`]. Errors list the
/// engine's outputs.
pub fn choose_output<'a>(
    status: &'a Status,
    wanted: Option<&str>,
) -> Result<(&'a str, &'a Output)> {
    let names = || {
        status
            .outputs
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(name) = wanted {
        return match status.outputs.get_key_value(name) {
            Some((n, o)) => Ok((n.as_str(), o)),
            None => bail!("has no output named {name:?} (its outputs: {})", names()),
        };
    }
    if status.outputs.len() == 1 {
        let (n, o) = status.outputs.iter().next().expect("one output");
        return Ok((n.as_str(), o));
    }
    match status.outputs.get_key_value(WIDEBAND) {
        Some((n, o)) => Ok((n.as_str(), o)),
        None if status.outputs.is_empty() => bail!("reports no output"),
        None => bail!(
            "has {} outputs ({}) and none named {WIDEBAND}: choose one with --output NAME",
            status.outputs.len(),
            names()
        ),
    }
}

/// The substreams an output sends to, as the receiver binds them (substream i at index i).
pub fn destinations(output: &Output) -> Result<Endpoint> {
    let addrs = output
        .destinations
        .iter()
        .map(|d| match d.parse::<SocketAddr>() {
            Ok(SocketAddr::V4(a)) => Ok(a),
            _ => Err(anyhow!("destination {d:?} is not an IPv4 ADDR:PORT")),
        })
        .collect::<Result<Vec<SocketAddrV4>>>()?;
    if addrs.is_empty() {
        bail!("the output lists no destinations");
    }
    Ok(Endpoint { addrs })
}

/// The value of label `key` in a Prometheus label text (`a="x",output="wide"`).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = labels;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim().trim_start_matches(',').trim();
        let value = &rest[eq + 2..];
        let end = value.find('"')?;
        if name == key {
            return Some(&value[..end]);
        }
        rest = &value[end + 1..];
    }
    None
}

/// What the harness needs to know of the engine's chosen output to receive and check it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EngineGeometry {
    pub channels: usize,
    pub taps: usize,
    pub spectra_per_heap: usize,
    pub adc_sample_rate: f64,
    pub filter: crate::record::FilterDesign,
    /// Bits per output component, as the engine says (8 or 4; an older engine says nothing: 8).
    pub output_bits: u32,
    /// The frequencies its channels cover.
    pub band: Band,
}

impl EngineGeometry {
    /// The geometry of `output`, one of the outputs of the engine whose status is `status`; an
    /// error when its band cannot be told ([`Band::of`]).
    pub fn of(status: &Status, output: &Output) -> Result<Self> {
        Ok(Self {
            channels: output.channels,
            taps: output.taps,
            spectra_per_heap: output.spectra_per_heap,
            adc_sample_rate: status.adc_sample_rate,
            filter: crate::record::FilterDesign {
                rect: output.window_function == "rect",
                w_cutoff: output.w_cutoff,
            },
            output_bits: output.bits,
            band: Band::of(output)?,
        })
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

    #[test]
    fn dsim_lag_fails_on_skips_and_names_the_catch_ups() {
        let before = DsimLag {
            skipped: 10,
            catch_ups: 1,
            heaps_sent_late: 50,
        };
        let made_up = DsimLag {
            skipped: 10,
            catch_ups: 4,
            heaps_sent_late: 900,
        }
        .since(&before);
        assert_eq!((made_up.catch_ups, made_up.heaps_sent_late), (3, 850));
        assert_eq!(made_up.failure(), None, "stalls made up are no loss");
        let skipped = DsimLag {
            skipped: 2218,
            catch_ups: 4,
            heaps_sent_late: 900,
        }
        .since(&before);
        assert_eq!(
            skipped.failure().unwrap(),
            "dsim fell more than --max-late behind, too far to catch up, and skipped 2208 heaps: \
             this host could not send the rate (it caught up after 3 other stalls)"
        );
    }

    use super::*;
    use fgpu_api::dsim::PolFaults;
    use serde_json::json;

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

    /// A dsim status as dsim serves it, with one tone and `skipped` heaps skipped.
    /// One polarisation's signal as dsim reports it: two tones and noise.
    fn signal() -> Value {
        json!({"components": [{"kind": "tone", "frequency": 1e6, "amplitude": 0.1},
                              {"kind": "tone", "frequency": 1.25e7, "amplitude": 0.5},
                              {"kind": "noise", "rms": 0.05, "seed": 1}],
               "delay": 0.0, "dither": true, "tone_frequencies": [1e6, 1.25e7]})
    }

    fn dsim_status_text(skipped: u64) -> String {
        let pol = |p: usize| {
            json!({"pol": p, "destinations": "127.0.0.1:7148", "heaps": 5, "heaps_sent": 5,
                "bytes_sent": 100, "saturated_samples": 0, "send_errors": 0, "heaps_skipped": 0,
                "timestamp": 4096,
                "rate": {"achieved_rate": 1e8, "expected_rate": 1e8, "rate_error": 0.0,
                         "window_s": 1.0},
                "faults_injected": {"dropped": 0, "duplicated": 0, "reordered": 0, "corrupted": 0},
                "faults": {"drop": null, "duplicate": null, "reorder": null, "corrupt": null}})
        };
        json!({
            "state": "running", "rate": 1e8, "achieved_rate": 1e8, "rate_error": 0.0,
            "rate_window_s": 1.0, "rate_ok": true, "late_s": 1e-6, "heaps_skipped": skipped,
            "sync_time": 0.0, "implied_sync_time": 0.0, "timestamp": 4096, "heap_samples": 4096,
            "sample_bits": 10, "first_heap": 0, "end_heap": null, "threads_per_pol": 1,
            "heaps_per_batch": [12, 12], "buffer_heaps": 8192,
            "signal": {"pols": [signal(), signal()], "seed": 1, "from_heap": 0},
            "pols": [pol(0), pol(1)],
            "uptime_s": 1.0
        })
        .to_string()
    }

    /// An engine status as the engine serves it: one wideband output.
    fn engine_status_text() -> String {
        engine_status_text_bits(8)
    }

    /// As [`engine_status_text`], of output with `bits` per component.
    fn engine_status_text_bits(bits: u32) -> String {
        use fgpu_api::engine::*;
        let wideband = Output {
            kind: OutputKind::Wideband,
            channels: 1024,
            taps: 16,
            window_function: "hann".into(),
            bits,
            dither_seed: None,
            w_cutoff: 1.0,
            spectra_per_heap: 256,
            heaps_per_frame: 4,
            lag_samples: 30_720,
            substreams: 1,
            channels_per_substream: 1024,
            destinations: vec!["127.0.0.1:7150".into()],
            heaps_sent: 0,
            heaps_skipped: 0,
            heaps_sent_per_substream: vec![0],
            heaps_skipped_per_substream: vec![0],
            packets: 0,
            bytes: 0,
            send_errors: 0,
            last_timestamp: 0,
            saturated: vec![0, 0],
            narrowband: None,
        };
        serde_json::to_string(&Status {
            backend: "cpu".into(),
            fft_precision: "single".into(),
            wideband_kernels: "two-pass".into(),
            running: true,
            uptime_s: 1.0,
            feng_id: 0,
            adc_sample_rate: 1.712e9,
            sync_time: None,
            max_delay_s: 0.0,
            input: Input {
                sample_bits: 10,
                heap_samples: 4096,
                chunk_samples: 1 << 20,
                overlap_samples: 30_720,
                pols: vec![PolInput::default(), PolInput::default()],
                recv_window: None,
            },
            outputs: [(WIDEBAND.to_string(), wideband)].into(),
            frames: Frames::default(),
            delay_out_of_span: 0,
            delays: None,
            queues: Default::default(),
            control: Control::default(),
            threads: Vec::new(),
            placement: Default::default(),
        })
        .unwrap()
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
            ("GET", "/status") => (200, dsim_status_text(3)),
            ("PUT", "/signal") => (
                200,
                r#"{"from_heap": 10, "from_timestamp": 40960, "from_unix_time": 1.0,
                "signal": {"pols": [{"components": [{"kind": "tone", "frequency": 1.25e7,
                "amplitude": 0.9}], "delay": 0, "dither": true, "tone_frequencies": [1.2500003e7]}],
                "seed": 1, "from_heap": 10}}"#
                    .into(),
            ),
            ("GET", "/metrics") => (
                200,
                "fengine_input_missing_heaps_total{pol=\"0\"} 2\n\
                fengine_input_missing_heaps_total{pol=\"1\"} 3\n\
                fengine_output_skipped_heaps_total 4\nfengine_output_send_errors_total 1\n"
                    .into(),
            ),
            ("PUT", "/rate") => (200, "{}".into()),
            ("PUT", "/gains") => (200, r#"{"pol0": [0.25, 0], "pol1": [0.25, 0]}"#.into()),
            _ => (400, "pol0: no faults here".into()),
        });
        let dsim = Dsim::new(&url);
        let st = dsim.status().unwrap();
        assert_eq!(
            (st.rate, st.timestamp, st.heap_samples, st.heaps_skipped),
            (1e8, 4096, 4096, 3)
        );
        assert_eq!(st.strongest_tone().unwrap().frequency, 1.25e7);
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
        assert_eq!(applied.from_timestamp, 40960);
        assert_eq!(applied.frequency, Some(1.2500003e7));
        // A refusal is an error with the request in it.
        let clear = FaultsRequest {
            pol0: Some(PolFaults::default()),
            pol1: None,
        };
        let err = dsim.set_faults(&clear).unwrap_err();
        assert!(format!("{err:#}").contains("/faults"), "{err:#}");
        // ... and the service's reason.
        assert!(format!("{err:#}").contains("no faults here"), "{err:#}");
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
            json!({"tones": [{"frequency": 1.25e7, "amplitude": 0.9}], "noise": 0.001,
                "dither": null, "delays": null, "seed": null})
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

    /// An engine of two outputs: `wide` (the one of [`engine_status_text`], 1024 channels to
    /// 127.0.0.1:7150) and `fine` (4096 channels, 4-bit, to 239.10.2.0+3:7148).
    fn two_outputs() -> fgpu_api::engine::Status {
        let mut st: fgpu_api::engine::Status = serde_json::from_str(&engine_status_text()).unwrap();
        let wide = st.outputs.remove(WIDEBAND).unwrap();
        let mut fine = wide.clone();
        fine.channels = 4096;
        fine.substreams = 4;
        fine.channels_per_substream = 1024;
        fine.bits = 4;
        fine.destinations = (0..4).map(|i| format!("239.10.2.{i}:7148")).collect();
        st.outputs.insert("wide".into(), wide);
        st.outputs.insert("fine".into(), fine);
        st
    }

    fn two_outputs_text() -> String {
        serde_json::to_string(&two_outputs()).unwrap()
    }

    /// `--output NAME`, else the only output, else the one named wideband; else an error that
    /// lists the outputs.
    #[test]
    fn the_output_read_is_chosen_by_name_or_by_default() {
        let st = two_outputs();
        let (name, out) = choose_output(&st, Some("fine")).unwrap();
        assert_eq!((name, out.channels), ("fine", 4096));
        let err = choose_output(&st, None).unwrap_err().to_string();
        assert!(
            err.contains("has 2 outputs (fine, wide)") && err.contains("--output NAME"),
            "{err}"
        );
        let err = choose_output(&st, Some("nope")).unwrap_err().to_string();
        assert!(
            err.contains("no output named \"nope\" (its outputs: fine, wide)"),
            "{err}"
        );
        // Among several, the one named wideband.
        let mut three = st.clone();
        three
            .outputs
            .insert(WIDEBAND.into(), st.outputs["wide"].clone());
        assert_eq!(choose_output(&three, None).unwrap().0, WIDEBAND);
        // The only output, whatever its name.
        let mut one = st.clone();
        one.outputs.remove("wide");
        assert_eq!(choose_output(&one, None).unwrap().0, "fine");
        one.outputs.clear();
        let err = choose_output(&one, None).unwrap_err().to_string();
        assert!(err.contains("reports no output"), "{err}");
        // Where each goes, as the receiver binds it.
        assert_eq!(
            destinations(&st.outputs["fine"]).unwrap().to_string(),
            "239.10.2.0+3:7148"
        );
        assert_eq!(
            destinations(&st.outputs["wide"]).unwrap().to_string(),
            "127.0.0.1:7150"
        );
        let mut odd = st.outputs["wide"].clone();
        odd.destinations = vec!["[::1]:7150".into()];
        assert!(destinations(&odd).is_err());
        odd.destinations.clear();
        assert!(destinations(&odd).is_err());
    }

    #[test]
    fn prometheus_labels() {
        let l = r#"backend="cpu",output="wide",substream="1""#;
        assert_eq!(label(l, "output"), Some("wide"));
        assert_eq!(label(l, "substream"), Some("1"));
        assert_eq!(label(l, "backend"), Some("cpu"));
        assert_eq!(label(l, "pol"), None);
        assert_eq!(label("", "output"), None);
    }

    /// A client told the output reads that output's geometry, sets its gains and counts only its
    /// skipped heaps; one not told finds no default among two outputs and says which there are.
    #[test]
    fn an_engine_client_reads_the_output_it_is_told() {
        let (url, seen) = fake_server(|method, path| match (method, path) {
            ("GET", "/status") => (200, two_outputs_text()),
            ("GET", "/metrics") => (
                200,
                "fengine_input_missing_heaps_total{backend=\"cpu\",pol=\"0\"} 2\n\
                fengine_output_skipped_heaps_total{backend=\"cpu\",output=\"wide\"} 4\n\
                fengine_output_skipped_heaps_total{backend=\"cpu\",output=\"fine\"} 1\n\
                fengine_output_send_errors_total{backend=\"cpu\",output=\"fine\"} 2\n"
                    .into(),
            ),
            ("PUT", "/outputs/fine/gains") => {
                (200, r#"{"pol0": [0.5, 0], "pol1": [0.5, 0]}"#.into())
            }
            ("GET", "/outputs/fine/gains") => (200, r#"{"pol0": [[1, 0]], "pol1": 2}"#.into()),
            _ => (404, "no such resource".into()),
        });
        let mut engine = Engine::new(&url, CounterNames::default());
        let err = format!("{:#}", engine.geometry().unwrap_err());
        assert!(err.contains(&url) && err.contains("(fine, wide)"), "{err}");
        // Every output's skipped heaps, not told which.
        assert_eq!(engine.counters().unwrap().skipped_output, 7.0);
        engine.select_output("fine");
        assert_eq!(engine.output_name(), Some("fine"));
        let g = engine.geometry().unwrap();
        assert_eq!(
            (g.channels, g.output_bits, g.band),
            (4096, 4, Band::Wideband)
        );
        assert_eq!(
            engine.counters().unwrap(),
            EngineCounters {
                missing_input: 2.0,
                skipped_output: 3.0
            }
        );
        engine.set_gain(0.5).unwrap();
        assert_eq!(
            engine.gains().unwrap(),
            Gains {
                pol0: Gain::PerChannel(vec![[1.0, 0.0]]),
                pol1: Gain::Real(2.0)
            }
        );
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter().any(|s| s.0 == "PUT"
                && s.1 == "/outputs/fine/gains"
                && s.2 == r#"{"pol0":0.5,"pol1":0.5}"#),
            "{seen:?}"
        );
    }

    /// The engine's status gives the wideband geometry; a reply of another shape is an error
    /// that says what was expected.
    #[test]
    fn engine_geometry_and_a_reply_of_another_shape() {
        let (url, _) = fake_server(|_, path| match path {
            "/status" => (200, engine_status_text()),
            _ => (200, r#"{"channels": 1024}"#.into()),
        });
        let g = Engine::new(&url, CounterNames::default())
            .geometry()
            .unwrap();
        assert_eq!(
            (g.channels, g.taps, g.spectra_per_heap, g.adc_sample_rate),
            (1024, 16, 256, 1.712e9)
        );
        assert_eq!(g.output_bits, 8);
        let (url, _) = fake_server(|_, _| (200, engine_status_text_bits(4)));
        let g = Engine::new(&url, CounterNames::default())
            .geometry()
            .unwrap();
        assert_eq!(g.output_bits, 4);
        let (url, _) = fake_server(|_, _| (200, r#"{"config": {"channels": 1024}}"#.into()));
        let err = format!(
            "{:#}",
            Engine::new(&url, CounterNames::default())
                .status()
                .unwrap_err()
        );
        assert!(
            err.contains("an F-engine's status") && err.contains("/status"),
            "{err}"
        );
        let err = format!("{:#}", Dsim::new(&url).status().unwrap_err());
        assert!(err.contains("dsim's status"), "{err}");
    }

    /// An ADC timestamp sent as a Unix time comes back within the float64 rounding (2 samples at
    /// 16 Msample/s, 206 at MeerKAT's 1712), and the arithmetic is katgpucbf's (an engine given
    /// the Unix time of the sample 1 s past the sync loads that sample).
    #[test]
    fn adc_timestamps_round_trip_through_unix_time() {
        let slow = Clock {
            sync_time: 1_765_000_000.0,
            adc_rate: 16e6,
        };
        assert_eq!(slow.unix(16_000_000), 1_765_000_001.0);
        assert_eq!(slow.timestamp(1_765_000_001.0), 16_000_000);
        let meerkat = Clock {
            sync_time: 1_765_000_000.0,
            adc_rate: 1_712e6,
        };
        // Float64 seconds near 1.8e9 are 2.4e-7 s apart: half that, times the rate, at most.
        for clock in [slow, meerkat] {
            let bound = (1.2e-7 * clock.adc_rate).ceil() as i64;
            let hour = clock.adc_rate as u64 * 3600;
            let worst = (0..2000u64)
                .map(|i| clock.round_trip_error(hour + i * 7919).abs())
                .max()
                .unwrap();
            assert!(
                worst > 0 && worst <= bound,
                "{worst} samples, bound {bound}"
            );
        }
    }

    /// katgpucbf's Prometheus series: the chosen stream's counters, the input's of both pols,
    /// the clipped samples out of half the complex samples (both pols); without the clip series,
    /// no saturation counters; without the missing-heap series, an error.
    #[test]
    fn engine_counts_from_katgpucbfs_metrics() {
        let text = "fgpu_input_missing_heaps_total{pol=\"0\"} 1\n\
            fgpu_input_missing_heaps_total{pol=\"1\"} 3\n\
            fgpu_output_skipped_heaps_total{stream=\"wideband\"} 5\n\
            fgpu_output_skipped_heaps_total{stream=\"narrow\"} 50\n\
            fgpu_output_samples_total{stream=\"wideband\"} 2000\n\
            fgpu_output_samples_total{stream=\"narrow\"} 9000\n\
            fgpu_output_clipped_samples_total{stream=\"wideband\",pol=\"0\"} 7\n\
            fgpu_output_clipped_samples_total{stream=\"wideband\",pol=\"1\"} 9\n\
            fgpu_output_clipped_samples_total{stream=\"narrow\",pol=\"1\"} 90\n";
        let c = EngineCounts::of_katgpucbf_metrics(text, "wideband").unwrap();
        assert_eq!((c.missing_input, c.skipped_output), (4, 5));
        assert_eq!(
            c.clamped,
            Some(Clamped {
                clamped: [7, 9],
                values: 1000
            })
        );
        assert_eq!(
            (c.newest_input, c.computed_through, c.socket_drops),
            (None, None, None)
        );
        let bare: String = text
            .lines()
            .filter(|l| !l.contains("clipped"))
            .map(|l| format!("{l}\n"))
            .collect();
        let c = EngineCounts::of_katgpucbf_metrics(&bare, "wideband").unwrap();
        assert_eq!(c.clamped, None);
        let err = EngineCounts::of_katgpucbf_metrics("up 1\n", "wideband").unwrap_err();
        assert!(
            err.to_string().contains("fgpu_input_missing_heaps"),
            "{err}"
        );
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

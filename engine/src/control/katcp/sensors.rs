//! The engine's katcp sensors, named, typed and described as katgpucbf's fgpu has them, set from
//! the controller's status: every half second, and at once after a change made over katcp.
//!
//! - `steady-state-timestamp`: heaps from this ADC timestamp on reflect every katcp request
//!   answered so far (conservatively: the start of the first chunk no heap of which had arrived
//!   when the request was answered, or a delay model's later load time).
//! - `device-status` (ok or degraded): the worst status of every other sensor;
//!   `rx.device-status`: the same over the `input*.rx.*` sensors.
//! - `input{0,1}.dig-clip-cnt`: digitiser samples saturated (the digitiser's own status item).
//! - `input{0,1}.dig-rms-dbfs`: the input's rms in dBFS, nominal from -30 to -10, warn from -33
//!   to -7, else error (katgpucbf's bounds); the latest whole frame's, where katgpucbf averages a
//!   second.
//! - `input{0,1}.rx.timestamp`, `.rx.unixtime`: the newest digitiser timestamp received, and as a
//!   Unix time (needs `--sync-time`); error once none has come for the timeout.
//! - `input{0,1}.rx.missing-unixtime`: when heaps were last found missing, error until the timeout
//!   has passed without more.
//! - per output: `NAME.dither-seed`, `NAME.input{0,1}.eq` (gains), `NAME.input{0,1}.delay` (the
//!   polarisation's model: delays are the engine's, so every output shows the same),
//!   `NAME.input{0,1}.feng-clip-cnt` (output values saturated).
//!
//! katgpucbf's busy counters (clip counts, rx timestamps) sample at most once a second under
//! `auto`, and so do these.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use katcp_server::sensor::now;
use katcp_server::{Description, SensorType, Sensors, Status, Strategy, Value};

use super::text::{delay_sensor, eq_sensor};
use crate::backend::POLS;
use crate::control::Controller;

/// How often the sensors are read from the status.
pub const REFRESH: Duration = Duration::from_millis(500);

/// katgpucbf's bounds of a good input level, dBFS: nominal within, warn within the outer pair.
const RMS_NOMINAL: (f64, f64) = (-30.0, -10.0);
const RMS_WARN: (f64, f64) = (-33.0, -7.0);

/// `auto` for a busy counter: at most one update a second (katgpucbf's rate-limited sensors).
const RATE_LIMITED: Strategy = Strategy::EventRate {
    shortest: 1.0,
    longest: f64::INFINITY,
};

/// The status of an input level of `db` dBFS.
fn rms_status(db: f64) -> Status {
    if (RMS_NOMINAL.0..=RMS_NOMINAL.1).contains(&db) {
        Status::Nominal
    } else if db > RMS_WARN.0 && db < RMS_WARN.1 {
        Status::Warn
    } else {
        Status::Error
    }
}

/// What the refresh remembers between readings: per polarisation, the newest timestamp and
/// missing-heap count seen and when each last changed.
#[derive(Default)]
struct Seen {
    timestamp: [Option<(u64, Instant)>; POLS],
    missing: [(u64, Option<Instant>); POLS],
    steady: u64,
}

/// The engine's sensors and what keeps them current.
pub struct EngineSensors {
    pub sensors: Sensors,
    /// How long without new data before the rx sensors say error (katgpucbf: ten chunks, at
    /// least a second).
    pub(super) timeout: Duration,
    seen: Mutex<Seen>,
}

fn add(s: &Sensors, d: Description, v: Value, st: Status) {
    // Names and types are fixed here: a failure is a bug of this file, found by its tests.
    if let Err(e) = s.add(d, v, st) {
        tracing::error!("katcp sensor: {e}");
    }
}

impl EngineSensors {
    /// The sensors of the engine `c` controls, with their first readings.
    pub fn new(c: &Controller) -> Self {
        let s = Sensors::new();
        let int = SensorType::Integer;
        let text = SensorType::String;
        let health = SensorType::Discrete(vec!["ok".into(), "degraded".into(), "fail".into()]);
        add(
            &s,
            Description::new(
                "steady-state-timestamp",
                int.clone(),
                "Heaps with this timestamp or greater are guaranteed to reflect the effects of previous katcp requests.",
            ),
            Value::Integer(0),
            Status::Nominal,
        );
        let ok = || Value::Text("ok".into());
        add(
            &s,
            Description::new("device-status", health.clone(), "Overall engine health"),
            ok(),
            Status::Nominal,
        );
        add(
            &s,
            Description::new(
                "rx.device-status",
                health,
                "Engine is receiving a good, clean data stream",
            ),
            ok(),
            Status::Nominal,
        );
        for p in 0..POLS {
            let name = |n: &str| format!("input{p}.{n}");
            add(
                &s,
                Description::new(
                    &name("dig-clip-cnt"),
                    int.clone(),
                    "Number of digitiser samples that are saturated",
                )
                .auto(RATE_LIMITED),
                Value::Integer(0),
                Status::Nominal,
            );
            add(
                &s,
                Description::new(
                    &name("dig-rms-dbfs"),
                    SensorType::Float,
                    "Digitiser ADC average power",
                )
                .units("dBFS"),
                Value::Float(0.0),
                Status::Unknown,
            );
            add(
                &s,
                Description::new(
                    &name("rx.timestamp"),
                    int.clone(),
                    "The timestamp (in samples) of the last chunk of data received",
                )
                .auto(RATE_LIMITED),
                Value::Integer(-1),
                Status::Error,
            );
            add(
                &s,
                Description::new(
                    &name("rx.unixtime"),
                    SensorType::Timestamp,
                    "The timestamp (in UNIX time) of the last chunk of data received",
                )
                .auto(RATE_LIMITED),
                Value::Timestamp(-1.0),
                Status::Error,
            );
            add(
                &s,
                Description::new(
                    &name("rx.missing-unixtime"),
                    SensorType::Timestamp,
                    "The timestamp (in UNIX time) when missing data was last detected",
                )
                .auto(RATE_LIMITED),
                Value::Timestamp(-1.0),
                Status::Nominal,
            );
        }
        let st = c.status();
        for (out, o) in &st.outputs {
            let (seed, seed_status) = match o.dither_seed {
                Some(seed) => (seed.to_string(), Status::Nominal),
                None => ("none".to_string(), Status::Inactive),
            };
            add(
                &s,
                Description::new(
                    &format!("{out}.dither-seed"),
                    text.clone(),
                    "Random seed used in dithering for quantisation",
                ),
                Value::Text(seed),
                seed_status,
            );
            for p in 0..POLS {
                let name = |n: &str| format!("{out}.input{p}.{n}");
                add(
                    &s,
                    Description::new(&name("eq"), text.clone(), "For this input, the complex, unitless, per-channel digital scaling factors implemented prior to requantisation"),
                    Value::Text(String::new()),
                    Status::Unknown,
                );
                add(
                    &s,
                    Description::new(&name("delay"), text.clone(), "The delay settings for this input: (loadmcnt <ADC sample count when model was loaded>, delay <in seconds>, delay-rate <unit-less or, seconds-per-second>, phase <radians>, phase-rate <radians per second>)."),
                    Value::Text(String::new()),
                    Status::Unknown,
                );
                add(
                    &s,
                    Description::new(
                        &name("feng-clip-cnt"),
                        int.clone(),
                        "Number of output samples that are saturated",
                    )
                    .auto(RATE_LIMITED),
                    Value::Integer(0),
                    Status::Nominal,
                );
            }
        }
        let chunk_s = c.cfg.input.geometry.chunk_samples as f64 / c.cfg.fs;
        let me = Self {
            sensors: s,
            timeout: Duration::from_secs_f64((10.0 * chunk_s).max(1.0)),
            seen: Mutex::default(),
        };
        me.refresh(c);
        me
    }

    /// Sets `name` to `value` and `status` if either changed (a repeat would wake every `auto`
    /// sampler for nothing).
    fn put(&self, name: &str, value: Value, status: Status) {
        let same = self
            .sensors
            .get(name)
            .is_some_and(|s| s.reading.value == value && s.reading.status == status);
        if !same {
            if let Err(e) = self.sensors.set(name, value, status) {
                tracing::error!("katcp sensor: {e}");
            }
        }
    }

    /// Marks a change answered now: heaps from the first chunk not yet begun reflect it, and a
    /// delay model only from its load time (`at_least`).
    pub fn changed(&self, c: &Controller, at_least: u64) {
        let chunk = c.cfg.input.geometry.chunk_samples.max(1) as u64;
        let newest = (0..POLS)
            .map(|p| {
                c.stats.pols[p]
                    .last_timestamp
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .max()
            .unwrap_or(0);
        let bound = (newest / chunk + 1) * chunk;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.steady = seen.steady.max(bound).max(at_least);
        let steady = seen.steady as i64;
        drop(seen);
        self.put(
            "steady-state-timestamp",
            Value::Integer(steady),
            Status::Nominal,
        );
        self.refresh(c);
    }

    /// Reads the status, gains and delays, and sets every sensor that changed.
    pub fn refresh(&self, c: &Controller) {
        let st = c.status();
        let delays = c.delays().unwrap_or_default();
        let models = [delays.pol0, delays.pol1];
        let unix = |ts: u64| st.sync_time.map(|t0| t0 + ts as f64 / st.adc_sample_rate);
        let now_i = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for (p, pol) in st.input.pols.iter().enumerate().take(POLS) {
            let name = |n: &str| format!("input{p}.{n}");
            self.put(
                &name("dig-clip-cnt"),
                Value::Integer(pol.digitiser_clip_samples as i64),
                Status::Nominal,
            );
            match pol.rms_dbfs {
                Some(db) => self.put(&name("dig-rms-dbfs"), Value::Float(db), rms_status(db)),
                None => self.put(&name("dig-rms-dbfs"), Value::Float(0.0), Status::Unknown),
            }
            // The newest timestamp: nominal while it moves, error once it has stood still for
            // the timeout (or never came).
            let ts = pol.last_timestamp;
            if ts > 0 && seen.timestamp[p].is_none_or(|(t, _)| t != ts) {
                seen.timestamp[p] = Some((ts, now_i));
            }
            if let Some((t, since)) = seen.timestamp[p] {
                let status = if now_i - since > self.timeout {
                    Status::Error
                } else {
                    Status::Nominal
                };
                self.put(&name("rx.timestamp"), Value::Integer(t as i64), status);
                match unix(t) {
                    Some(u) => self.put(&name("rx.unixtime"), Value::Timestamp(u), status),
                    None => self.put(
                        &name("rx.unixtime"),
                        Value::Timestamp(-1.0),
                        Status::Unknown,
                    ),
                }
            }
            // Missing heaps: error from the reading that found them until the timeout passes.
            let (count, _) = seen.missing[p];
            if pol.heaps_missing > count {
                seen.missing[p] = (pol.heaps_missing, Some(now_i));
                let when = unix(ts).unwrap_or_else(now);
                self.put(
                    &name("rx.missing-unixtime"),
                    Value::Timestamp(when),
                    Status::Error,
                );
            } else if let (_, Some(since)) = seen.missing[p] {
                if now_i - since > self.timeout {
                    let v = self
                        .sensors
                        .get(&name("rx.missing-unixtime"))
                        .map(|s| s.reading.value);
                    self.put(
                        &name("rx.missing-unixtime"),
                        v.unwrap_or(Value::Timestamp(-1.0)),
                        Status::Nominal,
                    );
                    seen.missing[p].1 = None;
                }
            }
        }
        drop(seen);
        for (out, o) in &st.outputs {
            let gains = c.gains(out).ok();
            for (p, model) in models.iter().enumerate() {
                let name = |n: &str| format!("{out}.input{p}.{n}");
                if let Some(g) = &gains {
                    let g = if p == 0 { &g.pol0 } else { &g.pol1 };
                    self.put(&name("eq"), Value::Text(eq_sensor(g)), Status::Nominal);
                }
                self.put(
                    &name("delay"),
                    Value::Text(delay_sensor(model)),
                    Status::Nominal,
                );
                let clipped = o.saturated.get(p).copied().unwrap_or(0);
                self.put(
                    &name("feng-clip-cnt"),
                    Value::Integer(clipped as i64),
                    Status::Nominal,
                );
            }
        }
        self.aggregate("rx.device-status", |n| {
            n.starts_with("input") && n.contains(".rx.")
        });
        self.aggregate("device-status", |n| !n.ends_with("device-status"));
    }

    /// Sets aggregate `name` from the worst status of the sensors `over` picks: ok while none is
    /// worse than nominal, else degraded (as katgpucbf's device status).
    fn aggregate(&self, name: &str, over: impl Fn(&str) -> bool) {
        let worst = self
            .sensors
            .select(|n| over(n))
            .iter()
            .map(|s| s.reading.status.severity())
            .max()
            .unwrap_or(0);
        let (v, st) = if worst == 0 {
            ("ok", Status::Nominal)
        } else {
            ("degraded", Status::Warn)
        };
        self.put(name, Value::Text(v.into()), st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_level_has_katgpucbfs_bounds() {
        assert_eq!(rms_status(-20.0), Status::Nominal);
        assert_eq!(rms_status(-31.0), Status::Warn);
        assert_eq!(rms_status(-8.0), Status::Warn);
        assert_eq!(rms_status(-40.0), Status::Error);
        assert_eq!(rms_status(-7.0), Status::Error);
    }
}

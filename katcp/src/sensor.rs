//! Sensors: what a device reports, each a name, a description, units, a type, and a reading (a
//! value, a status and the time it was taken). The program owns a [`Sensors`] registry and
//! sets readings; every connection's sampling strategies follow the changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;

use crate::sampling::Strategy;

/// A sensor's status, as katcp names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// No reading yet, or none that means anything.
    Unknown,
    /// The value is as it should be.
    Nominal,
    /// The value needs watching.
    Warn,
    /// The value is out of range: something is wrong.
    Error,
    /// The sensor itself has failed.
    Failure,
    /// The sensor cannot be reached.
    Unreachable,
    /// The sensor is not in use.
    Inactive,
}

impl Status {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Status::Unknown => "unknown",
            Status::Nominal => "nominal",
            Status::Warn => "warn",
            Status::Error => "error",
            Status::Failure => "failure",
            Status::Unreachable => "unreachable",
            Status::Inactive => "inactive",
        }
    }

    /// How bad it is, for aggregates: unknown and inactive count as nominal, as aiokatcp's
    /// device status does.
    pub fn severity(self) -> u8 {
        match self {
            Status::Unknown | Status::Nominal | Status::Inactive => 0,
            Status::Warn => 1,
            Status::Error => 2,
            Status::Failure | Status::Unreachable => 3,
        }
    }
}

/// A sensor's type and, for a discrete sensor, the values it may take.
#[derive(Clone, Debug, PartialEq)]
pub enum SensorType {
    /// A whole number.
    Integer,
    /// A real number.
    Float,
    /// 1 or 0.
    Boolean,
    /// One of a fixed list of words.
    Discrete(Vec<String>),
    /// Any text.
    String,
    /// A Unix time in seconds.
    Timestamp,
}

impl SensorType {
    /// The name on the wire (`#sensor-list`).
    pub fn name(&self) -> &'static str {
        match self {
            SensorType::Integer => "integer",
            SensorType::Float => "float",
            SensorType::Boolean => "boolean",
            SensorType::Discrete(_) => "discrete",
            SensorType::String => "string",
            SensorType::Timestamp => "timestamp",
        }
    }

    /// Whether the differential strategies apply (a value with a size).
    pub fn numeric(&self) -> bool {
        matches!(
            self,
            SensorType::Integer | SensorType::Float | SensorType::Timestamp
        )
    }
}

/// A sensor's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// For [`SensorType::Integer`].
    Integer(i64),
    /// For [`SensorType::Float`].
    Float(f64),
    /// For [`SensorType::Boolean`].
    Boolean(bool),
    /// For [`SensorType::Discrete`] and [`SensorType::String`].
    Text(String),
    /// For [`SensorType::Timestamp`]: Unix seconds.
    Timestamp(f64),
}

impl Value {
    /// The value on the wire.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Value::Integer(n) => n.to_string().into_bytes(),
            Value::Float(x) | Value::Timestamp(x) => float(*x).into_bytes(),
            Value::Boolean(b) => if *b { b"1" } else { b"0" }.to_vec(),
            Value::Text(s) => s.clone().into_bytes(),
        }
    }

    /// The value as a number, for the differential strategies.
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Integer(n) => Some(*n as f64),
            Value::Float(x) | Value::Timestamp(x) => Some(*x),
            _ => None,
        }
    }
}

/// A real number as Python's `repr` writes it (which aiokatcp sends and reads): the shortest
/// decimal that reads back the same, `.0` on whole numbers, an exponent below 1e-4 or from 1e16.
pub fn float(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust's shortest exponent form (1e-5, 1.5e300); Python writes the sign and two digits.
        let s = format!("{x:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let s = format!("{x}");
    if s.contains('.') {
        s
    } else {
        s + ".0"
    }
}

/// A reading: a value, its status and when it held (Unix seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// Unix seconds.
    pub timestamp: f64,
    /// The status.
    pub status: Status,
    /// The value.
    pub value: Value,
}

/// The time now, Unix seconds.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A sensor's fixed description.
#[derive(Clone, Debug)]
pub struct Description {
    /// The name: letters, digits, dots, dashes and underscores.
    pub name: String,
    /// One sentence.
    pub description: String,
    /// Units (empty when none).
    pub units: String,
    /// The type.
    pub kind: SensorType,
    /// What `auto` means for this sensor (katgpucbf rate-limits busy counters to one update a
    /// second with event-rate).
    pub auto: Strategy,
}

impl Description {
    /// A sensor called `name` of type `kind`, described by `description`, with no units;
    /// `auto` sends every update.
    pub fn new(name: &str, kind: SensorType, description: &str) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            units: String::new(),
            kind,
            auto: Strategy::Auto,
        }
    }

    /// The same with units.
    pub fn units(self, units: &str) -> Self {
        Self {
            units: units.into(),
            ..self
        }
    }

    /// The same, `auto` meaning `strategy`.
    pub fn auto(self, strategy: Strategy) -> Self {
        Self {
            auto: strategy,
            ..self
        }
    }
}

/// A sensor: its description and its reading now.
#[derive(Clone, Debug)]
pub struct Sensor {
    /// What it is.
    pub description: Arc<Description>,
    /// The reading now.
    pub reading: Reading,
}

/// Why a sensor could not be added or set.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SensorError {
    /// Two sensors of one name.
    #[error("a sensor named \"{0}\" is already registered.")]
    Duplicate(String),
    /// A name with a space or another character katcp names do not have.
    #[error("\"{0}\" is not a sensor name (letters, digits, dots, dashes and underscores).")]
    BadName(String),
    /// No sensor of that name.
    #[error("there is no sensor named \"{0}\".")]
    Unknown(String),
    /// A value of another type than the sensor's.
    #[error("sensor \"{0}\" does not take a value of that type.")]
    WrongType(String),
}

/// An update, sent to every connection: the sensor's name.
pub(crate) type Update = Arc<str>;

/// The device's sensors, shared by the program (which sets them) and the server (which reports
/// them). Cheap to clone.
#[derive(Clone)]
pub struct Sensors {
    inner: Arc<Mutex<BTreeMap<String, Sensor>>>,
    updates: broadcast::Sender<Update>,
}

impl Default for Sensors {
    fn default() -> Self {
        Self::new()
    }
}

fn matches(kind: &SensorType, v: &Value) -> bool {
    match (kind, v) {
        (SensorType::Integer, Value::Integer(_))
        | (SensorType::Float, Value::Float(_))
        | (SensorType::Boolean, Value::Boolean(_))
        | (SensorType::String, Value::Text(_))
        | (SensorType::Timestamp, Value::Timestamp(_)) => true,
        (SensorType::Discrete(values), Value::Text(s)) => values.contains(s),
        _ => false,
    }
}

impl Sensors {
    /// No sensors yet.
    pub fn new() -> Self {
        // A connection that falls this far behind re-reads every sensor it samples.
        let (updates, _) = broadcast::channel(4096);
        Self {
            inner: Arc::default(),
            updates,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Sensor>> {
        // A panic while holding the map leaves it consistent (each change is one insert).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a sensor with its first reading.
    pub fn add(&self, d: Description, value: Value, status: Status) -> Result<(), SensorError> {
        let name_ok = !d.name.is_empty()
            && d.name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
        if !name_ok {
            return Err(SensorError::BadName(d.name));
        }
        if !matches(&d.kind, &value) {
            return Err(SensorError::WrongType(d.name));
        }
        let mut map = self.lock();
        if map.contains_key(&d.name) {
            return Err(SensorError::Duplicate(d.name));
        }
        let reading = Reading {
            timestamp: now(),
            status,
            value,
        };
        map.insert(
            d.name.clone(),
            Sensor {
                description: Arc::new(d),
                reading,
            },
        );
        Ok(())
    }

    /// Sets sensor `name`'s reading, taken now.
    pub fn set(&self, name: &str, value: Value, status: Status) -> Result<(), SensorError> {
        self.set_at(name, value, status, now())
    }

    /// Sets sensor `name`'s reading, taken at `timestamp` (Unix seconds). Every connection that
    /// samples it hears of it (`event` strategies send it when value or status changed).
    pub fn set_at(
        &self,
        name: &str,
        value: Value,
        status: Status,
        timestamp: f64,
    ) -> Result<(), SensorError> {
        {
            let mut map = self.lock();
            let s = map
                .get_mut(name)
                .ok_or_else(|| SensorError::Unknown(name.into()))?;
            if !matches(&s.description.kind, &value) {
                return Err(SensorError::WrongType(name.into()));
            }
            s.reading = Reading {
                timestamp,
                status,
                value,
            };
        }
        // No receiver (no client connected) is not an error.
        let _ = self.updates.send(Arc::from(name));
        Ok(())
    }

    /// Sensor `name` now.
    pub fn get(&self, name: &str) -> Option<Sensor> {
        self.lock().get(name).cloned()
    }

    /// Every sensor now, by name, chosen by `keep`.
    pub fn select(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<Sensor> {
        self.lock()
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(_, s)| s.clone())
            .collect()
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.updates.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_writes_them() {
        for (x, want) in [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (1.5e300, "1.5e+300"),
            (1e16, "1e+16"),
            (123456789012345.0, "123456789012345.0"),
            (f64::MIN, "-1.7976931348623157e+308"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(float(x), want);
        }
    }

    #[test]
    fn sensors_refuse_bad_names_types_and_duplicates() {
        let s = Sensors::new();
        let d = |n: &str| Description::new(n, SensorType::Integer, "a count");
        s.add(d("input0.dig-clip-cnt"), Value::Integer(0), Status::Nominal)
            .unwrap();
        for (r, want) in [
            (
                s.add(d("input0.dig-clip-cnt"), Value::Integer(0), Status::Nominal),
                "a sensor named \"input0.dig-clip-cnt\" is already registered.",
            ),
            (
                s.add(d("a b"), Value::Integer(0), Status::Nominal),
                "\"a b\" is not a sensor name (letters, digits, dots, dashes and underscores).",
            ),
            (
                s.set("input0.dig-clip-cnt", Value::Float(1.0), Status::Nominal),
                "sensor \"input0.dig-clip-cnt\" does not take a value of that type.",
            ),
            (
                s.set("nope", Value::Integer(1), Status::Nominal),
                "there is no sensor named \"nope\".",
            ),
        ] {
            assert_eq!(r.unwrap_err().to_string(), want);
        }
        let disc = Description::new(
            "device-status",
            SensorType::Discrete(vec!["ok".into(), "degraded".into()]),
            "health",
        );
        assert!(s
            .add(disc, Value::Text("broken".into()), Status::Nominal)
            .is_err());
        s.set_at("input0.dig-clip-cnt", Value::Integer(5), Status::Warn, 10.0)
            .unwrap();
        let r = s.get("input0.dig-clip-cnt").unwrap().reading;
        assert_eq!(
            (r.value, r.status, r.timestamp),
            (Value::Integer(5), Status::Warn, 10.0)
        );
    }
}

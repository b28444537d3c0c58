//! Sampling strategies (`?sensor-sampling NAME STRATEGY PARAMS`): which readings of a sensor a
//! connection is sent as `#sensor-status`, with aiokatcp's semantics: on setting a strategy the
//! reading now is sent at once; `event` sends a changed value or status; `differential D` a value
//! more than D from the last one sent (or a changed status); the `-rate` forms at most once per
//! SHORTEST and at least once per LONGEST seconds; `period P` every P seconds; `auto` what the
//! sensor chose (by default every update); `none` nothing.

use tokio::time::{Duration, Instant};

use crate::sensor::{float, Reading, SensorType, Status, Value};

/// The shortest period (and rate bound) a client may ask for: faster would flood the connection.
pub const MIN_PERIOD_S: f64 = 1e-3;

/// A sampling strategy and its parameters (seconds, or the sensor's units for a difference).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// Nothing is sent.
    None,
    /// The sensor's own choice ([`crate::Description::auto`]); by default every update.
    Auto,
    /// Every period seconds.
    Period(f64),
    /// When the value or the status changes.
    Event,
    /// When the value moves by more than the difference, or the status changes.
    Differential(f64),
    /// As `Event`, at most once per `shortest` and at least once per `longest` seconds.
    EventRate {
        /// Seconds.
        shortest: f64,
        /// Seconds (may be infinite).
        longest: f64,
    },
    /// As `Differential`, at most once per `shortest` and at least once per `longest` seconds.
    DifferentialRate {
        /// The sensor's units.
        difference: f64,
        /// Seconds.
        shortest: f64,
        /// Seconds (may be infinite).
        longest: f64,
    },
}

/// Why a strategy was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StrategyError {
    /// A name katcp does not have.
    #[error("\"{0}\" is not a sampling strategy (none, auto, period, event, differential, event-rate, differential-rate).")]
    Unknown(String),
    /// Too few or too many parameters.
    #[error("strategy {name} takes {want} parameter(s) ({what}), not {given}.")]
    Count {
        /// The strategy.
        name: &'static str,
        /// How many it takes.
        want: usize,
        /// What they are.
        what: &'static str,
        /// How many were given.
        given: usize,
    },
    /// A parameter that is not a number in range.
    #[error("strategy {name}: {what} \"{text}\" is not {rule}.")]
    Param {
        /// The strategy.
        name: &'static str,
        /// Which parameter.
        what: &'static str,
        /// As given.
        text: String,
        /// What it must be.
        rule: &'static str,
    },
    /// A differential strategy on a sensor without a size.
    #[error("strategy {0} needs an integer, float or timestamp sensor.")]
    NotNumeric(&'static str),
}

const PERIOD_RULE: &str = "a number of seconds of at least 0.001";

impl Strategy {
    /// The strategy's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Auto => "auto",
            Strategy::Period(_) => "period",
            Strategy::Event => "event",
            Strategy::Differential(_) => "differential",
            Strategy::EventRate { .. } => "event-rate",
            Strategy::DifferentialRate { .. } => "differential-rate",
        }
    }

    /// Reads `name params...` for a sensor of type `kind`.
    pub fn parse(name: &str, params: &[&str], kind: &SensorType) -> Result<Self, StrategyError> {
        let (key, want, what): (&'static str, usize, &'static str) = match name {
            "none" => ("none", 0, "none"),
            "auto" => ("auto", 0, "none"),
            "event" => ("event", 0, "none"),
            "period" => ("period", 1, "period in seconds"),
            "differential" => ("differential", 1, "difference"),
            "event-rate" => ("event-rate", 2, "shortest and longest period in seconds"),
            "differential-rate" => (
                "differential-rate",
                3,
                "difference, shortest and longest period in seconds",
            ),
            _ => return Err(StrategyError::Unknown(name.into())),
        };
        if params.len() != want {
            return Err(StrategyError::Count {
                name: key,
                want,
                what,
                given: params.len(),
            });
        }
        let num = |i: usize, what: &'static str, rule: &'static str, ok: fn(f64) -> bool| {
            params[i]
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| ok(*x))
                .ok_or_else(|| StrategyError::Param {
                    name: key,
                    what,
                    text: params[i].into(),
                    rule,
                })
        };
        let period = |x: f64| x.is_finite() && x >= MIN_PERIOD_S;
        let shortest = |x: f64| x.is_finite() && x >= 0.0;
        let longest = |x: f64| x >= MIN_PERIOD_S;
        let difference = |x: f64| x.is_finite() && x >= 0.0;
        if key.starts_with("differential") && !kind.numeric() {
            return Err(StrategyError::NotNumeric(key));
        }
        let diff_rule = "a finite number of at least 0";
        Ok(match key {
            "none" => Strategy::None,
            "auto" => Strategy::Auto,
            "event" => Strategy::Event,
            "period" => Strategy::Period(num(0, "period", PERIOD_RULE, period)?),
            "differential" => Strategy::Differential(num(0, "difference", diff_rule, difference)?),
            "event-rate" => Strategy::EventRate {
                shortest: num(
                    0,
                    "shortest period",
                    "a number of seconds of at least 0",
                    shortest,
                )?,
                longest: num(1, "longest period", PERIOD_RULE, longest)?,
            },
            _ => Strategy::DifferentialRate {
                difference: num(0, "difference", diff_rule, difference)?,
                shortest: num(
                    1,
                    "shortest period",
                    "a number of seconds of at least 0",
                    shortest,
                )?,
                longest: num(2, "longest period", PERIOD_RULE, longest)?,
            },
        })
    }

    /// The strategy and its parameters as a reply gives them, a difference in the sensor's type.
    pub fn encode(&self, kind: &SensorType) -> Vec<Vec<u8>> {
        let diff = |d: f64| match kind {
            SensorType::Integer => (d as i64).to_string(),
            _ => float(d),
        };
        let mut out = vec![self.name().to_string()];
        match *self {
            Strategy::None | Strategy::Auto | Strategy::Event => {}
            Strategy::Period(p) => out.push(float(p)),
            Strategy::Differential(d) => out.push(diff(d)),
            Strategy::EventRate { shortest, longest } => {
                out.extend([float(shortest), float(longest)])
            }
            Strategy::DifferentialRate {
                difference,
                shortest,
                longest,
            } => out.extend([diff(difference), float(shortest), float(longest)]),
        }
        out.into_iter().map(String::into_bytes).collect()
    }
}

/// One connection's sampling of one sensor.
#[derive(Debug)]
pub(crate) struct Sampler {
    /// As the client asked (the reply to a query gives it).
    pub(crate) asked: Strategy,
    /// Every update counts as a change (`auto` without a choice of the sensor's).
    always: bool,
    difference: Option<f64>,
    shortest: Duration,
    longest: Option<Duration>,
    last_time: Instant,
    last: Option<(Value, Status)>,
    /// A change is waiting for `due`.
    changed: bool,
    /// When the next reading is to be sent, if a time is set.
    pub(crate) due: Option<Instant>,
}

fn secs(x: f64) -> Duration {
    Duration::try_from_secs_f64(x).unwrap_or(Duration::MAX)
}

impl Sampler {
    /// A sampler for `asked` (None for `none`), `auto` resolved to `auto_means`.
    pub(crate) fn new(asked: Strategy, auto_means: Strategy) -> Option<Self> {
        let effective = if asked == Strategy::Auto {
            auto_means
        } else {
            asked
        };
        let (always, difference, shortest, longest) = match effective {
            Strategy::None => return None,
            Strategy::Auto => (true, None, 0.0, None),
            Strategy::Event => (false, None, 0.0, None),
            // A period samples on its clock alone: a change waits for the next tick.
            Strategy::Period(p) => (false, Some(f64::INFINITY), p, Some(p)),
            Strategy::Differential(d) => (false, Some(d), 0.0, None),
            Strategy::EventRate { shortest, longest } => (false, None, shortest, Some(longest)),
            Strategy::DifferentialRate {
                difference,
                shortest,
                longest,
            } => (false, Some(difference), shortest, Some(longest)),
        };
        Some(Self {
            asked,
            always,
            difference,
            shortest: secs(shortest),
            longest: longest.filter(|l| l.is_finite()).map(secs),
            last_time: Instant::now(),
            last: None,
            changed: false,
            due: None,
        })
    }

    /// Records that `reading` is sent at `at` (scheduled time) and sets the next time due.
    pub(crate) fn sent(&mut self, reading: &Reading, at: Instant) {
        self.last_time = at;
        self.last = Some((reading.value.clone(), reading.status));
        self.changed = false;
        self.due = self.longest.map(|l| (at + l).max(Instant::now()));
    }

    /// A new reading: whether to send it now (else it may have set `due`).
    pub(crate) fn update(&mut self, reading: &Reading, now: Instant) -> bool {
        if self.changed {
            return false; // already waiting to send at `due`
        }
        let changed = match &self.last {
            None => true,
            Some((value, status)) => {
                self.always
                    || *status != reading.status
                    || match self.difference {
                        None => *value != reading.value,
                        Some(d) => match (value.number(), reading.value.number()) {
                            (Some(a), Some(b)) => (b - a).abs() > d,
                            _ => *value != reading.value,
                        },
                    }
            }
        };
        if !changed {
            return false;
        }
        let at = self.last_time + self.shortest;
        if self.shortest.is_zero() || now >= at {
            return true;
        }
        self.changed = true;
        self.due = Some(at);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(v: i64, status: Status) -> Reading {
        Reading {
            timestamp: 0.0,
            status,
            value: Value::Integer(v),
        }
    }

    #[test]
    fn strategies_parse_and_encode_back() {
        let int = SensorType::Integer;
        for (name, params, want) in [
            ("none", &[][..], "none"),
            ("auto", &[], "auto"),
            ("event", &[], "event"),
            ("period", &["0.5"], "period 0.5"),
            ("differential", &["3"], "differential 3"),
            ("event-rate", &["1", "inf"], "event-rate 1.0 inf"),
            (
                "differential-rate",
                &["2", "0.1", "10"],
                "differential-rate 2 0.1 10.0",
            ),
        ] {
            let s = Strategy::parse(name, params, &int).unwrap();
            let words: Vec<String> = s
                .encode(&int)
                .into_iter()
                .map(|w| String::from_utf8(w).unwrap())
                .collect();
            assert_eq!(words.join(" "), want);
        }
    }

    #[test]
    fn bad_strategies_are_sentences() {
        for (name, params, kind, want) in [
            ("sometimes", &[][..], SensorType::Integer, "\"sometimes\" is not a sampling strategy (none, auto, period, event, differential, event-rate, differential-rate)."),
            ("period", &[], SensorType::Integer, "strategy period takes 1 parameter(s) (period in seconds), not 0."),
            ("period", &["0"], SensorType::Integer, "strategy period: period \"0\" is not a number of seconds of at least 0.001."),
            ("period", &["nan"], SensorType::Integer, "strategy period: period \"nan\" is not a number of seconds of at least 0.001."),
            ("event-rate", &["-1", "2"], SensorType::Integer, "strategy event-rate: shortest period \"-1\" is not a number of seconds of at least 0."),
            ("differential", &["1"], SensorType::String, "strategy differential needs an integer, float or timestamp sensor."),
        ] {
            assert_eq!(Strategy::parse(name, params, &kind).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn event_sends_changes_only_and_differential_needs_a_step() {
        let t = Instant::now();
        let mut e = Sampler::new(Strategy::Event, Strategy::Auto).unwrap();
        e.sent(&reading(1, Status::Nominal), t);
        assert!(!e.update(&reading(1, Status::Nominal), t));
        assert!(e.update(&reading(2, Status::Nominal), t));
        e.sent(&reading(2, Status::Nominal), t);
        assert!(e.update(&reading(2, Status::Warn), t));
        let mut d = Sampler::new(Strategy::Differential(5.0), Strategy::Auto).unwrap();
        d.sent(&reading(0, Status::Nominal), t);
        assert!(!d.update(&reading(5, Status::Nominal), t));
        assert!(d.update(&reading(6, Status::Nominal), t));
        let mut a = Sampler::new(Strategy::Auto, Strategy::Auto).unwrap();
        a.sent(&reading(0, Status::Nominal), t);
        assert!(
            a.update(&reading(0, Status::Nominal), t),
            "auto sends every update"
        );
        assert!(Sampler::new(Strategy::None, Strategy::Auto).is_none());
    }

    #[test]
    fn rates_hold_a_change_until_the_shortest_period() {
        let t = Instant::now();
        let rate = Strategy::EventRate {
            shortest: 1.0,
            longest: 10.0,
        };
        let mut s = Sampler::new(rate, Strategy::Auto).unwrap();
        s.sent(&reading(0, Status::Nominal), t);
        assert_eq!(s.due, Some(t + Duration::from_secs(10)));
        assert!(!s.update(&reading(1, Status::Nominal), t));
        assert_eq!(s.due, Some(t + Duration::from_secs(1)));
        assert!(
            !s.update(&reading(2, Status::Nominal), t),
            "one send pending"
        );
        let later = t + Duration::from_secs(2);
        s.sent(&reading(2, Status::Nominal), t + Duration::from_secs(1));
        assert!(s.update(&reading(3, Status::Nominal), later));
        let mut p = Sampler::new(Strategy::Period(0.5), Strategy::Auto).unwrap();
        p.sent(&reading(0, Status::Nominal), t);
        assert!(
            !p.update(&reading(9, Status::Nominal), t),
            "a period ignores changes"
        );
        assert_eq!(p.due, Some(t + Duration::from_millis(500)));
    }
}

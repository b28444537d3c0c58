//! The standard requests every katcp device answers: help, halt, watchdog, version-list,
//! log-level, client-list, sensor-list, sensor-value, sensor-sampling; and the way to the
//! program's own.

use tokio::time::Instant;

use super::connection::{reading_inform, Connection};
use crate::message::Message;
use crate::sampling::{Sampler, Strategy};
use crate::sensor::Sensor;

/// The log levels of `?log-level`.
const LOG_LEVELS: [&str; 8] = [
    "all", "trace", "debug", "info", "warn", "error", "fatal", "off",
];

/// The standard requests and their help.
const STANDARD: [(&str, &str); 9] = [
    ("halt", "Halt the device server.\n?halt: stops the program; the reply comes first."),
    ("help", "Return help on the available requests.\n?help [NAME]: a #help inform per request (or for NAME), its description."),
    ("watchdog", "Check that the server is still alive.\n?watchdog: replies ok."),
    ("version-list", "Request the list of versions of roles and subcomponents.\n?version-list: #version-list informs: protocol, library, device."),
    ("log-level", "Query or set the current logging level.\n?log-level [LEVEL]: all, trace, debug, info, warn, error, fatal or off; replies the level."),
    ("client-list", "Request the list of connected clients.\n?client-list: a #client-list inform per client (ADDR:PORT)."),
    ("sensor-list", "Request the list of sensors.\n?sensor-list [NAME or /REGEX/]: #sensor-list NAME DESCRIPTION UNITS TYPE [VALUES...] per sensor."),
    ("sensor-value", "Request the value of a sensor or sensors.\n?sensor-value [NAME or /REGEX/]: #sensor-value TIMESTAMP 1 NAME STATUS VALUE per sensor."),
    ("sensor-sampling", "Configure or query the way a sensor is sampled.\n?sensor-sampling NAME[,NAME...] [STRATEGY [PARAMS...]]: none, auto, period P, event, differential D, event-rate SHORTEST LONGEST, differential-rate D SHORTEST LONGEST; updates come as #sensor-status TIMESTAMP 1 NAME STATUS VALUE."),
];

impl Connection {
    /// Answers request `m` (informs and `!ok`), or says why not.
    pub(super) fn request(&mut self, m: &Message) -> Result<(), Refused> {
        let args: Vec<&str> = (0..m.args.len())
            .map(|i| {
                m.arg_str(i).ok_or_else(|| {
                    fail(format!(
                        "?{}: argument {} is not UTF-8 text.",
                        m.name,
                        i + 1
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        let at_most = |n: usize, what: &str| -> Result<(), Refused> {
            if args.len() > n {
                return Err(fail(format!(
                    "?{} takes {what}, not {} arguments.",
                    m.name,
                    args.len()
                )));
            }
            Ok(())
        };
        match m.name.as_str() {
            "watchdog" => {
                at_most(0, "no arguments")?;
                self.reply(m, vec![]);
            }
            "halt" => {
                at_most(0, "no arguments")?;
                self.reply(m, vec![]);
                (self.server.on_halt)();
            }
            "help" => {
                at_most(1, "at most one argument (a request name)")?;
                let mut all: Vec<(String, String)> = STANDARD
                    .iter()
                    .map(|(n, h)| (n.to_string(), h.to_string()))
                    .chain(
                        self.server
                            .handler
                            .requests()
                            .into_iter()
                            .map(|r| (r.name, r.help)),
                    )
                    .collect();
                all.sort();
                let chosen: Vec<(String, String)> = match args.first() {
                    None => all
                        .into_iter()
                        .map(|(n, h)| {
                            let first = h.lines().next().unwrap_or("").to_string();
                            (n, first)
                        })
                        .collect(),
                    Some(name) => {
                        let one: Vec<_> = all.into_iter().filter(|(n, _)| n == name).collect();
                        if one.is_empty() {
                            return Err(fail(format!(
                                "there is no request named \"{name}\"; ?help lists them."
                            )));
                        }
                        one
                    }
                };
                let n = chosen.len();
                for (name, h) in chosen {
                    self.inform(m, vec![name.into_bytes(), h.into_bytes()]);
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "version-list" => {
                at_most(0, "no arguments")?;
                let v = self.server.version_informs();
                let n = v.len();
                for i in v {
                    self.inform(m, i.into_iter().map(String::into_bytes).collect());
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "log-level" => {
                at_most(1, "at most one argument (a level)")?;
                let mut level = self
                    .server
                    .log_level
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if let Some(want) = args.first() {
                    *level = LOG_LEVELS.iter().find(|l| *l == want).ok_or_else(|| {
                        fail(format!(
                            "\"{want}\" is not a log level ({}).",
                            LOG_LEVELS.join(", ")
                        ))
                    })?;
                }
                let now = level.as_bytes().to_vec();
                drop(level);
                self.reply(m, vec![now]);
            }
            "client-list" => {
                at_most(0, "no arguments")?;
                let addrs: Vec<String> = self
                    .server
                    .clients
                    .lock()
                    .map(|c| c.values().map(|(a, _)| a.to_string()).collect())
                    .unwrap_or_default();
                let n = addrs.len();
                for a in addrs {
                    self.inform(m, vec![a.into_bytes()]);
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "sensor-list" | "sensor-value" => {
                at_most(1, "at most one argument (a sensor name or /regex/)")?;
                let sensors = self.select(args.first().copied())?;
                let n = sensors.len();
                for s in &sensors {
                    if m.name == "sensor-list" {
                        let d = &s.description;
                        let mut a = vec![
                            d.name.clone().into_bytes(),
                            d.description.clone().into_bytes(),
                            d.units.clone().into_bytes(),
                            d.kind.name().as_bytes().to_vec(),
                        ];
                        if let crate::SensorType::Discrete(values) = &d.kind {
                            a.extend(values.iter().map(|v| v.clone().into_bytes()));
                        }
                        self.inform(m, a);
                    } else {
                        let mut i = reading_inform("sensor-value", s);
                        i.mid = m.mid;
                        self.push(i);
                    }
                }
                self.reply(m, vec![n.to_string().into_bytes()]);
            }
            "sensor-sampling" => self.sensor_sampling(m, &args)?,
            name => {
                if !self
                    .server
                    .handler
                    .requests()
                    .iter()
                    .any(|r| r.name == name)
                {
                    return Err(Refused::Invalid(format!(
                        "there is no request named \"{name}\"; ?help lists them."
                    )));
                }
                let answer = self
                    .server
                    .handler
                    .handle(name, &m.args)
                    .map_err(Refused::Fail)?;
                for i in answer.informs {
                    self.inform(m, i);
                }
                self.reply(m, answer.args);
            }
        }
        Ok(())
    }

    /// The sensors `pattern` names (all without one), in name order.
    fn select(&self, pattern: Option<&str>) -> Result<Vec<Sensor>, Refused> {
        let sensors = &self.server.sensors;
        match pattern {
            None => Ok(sensors.select(|_| true)),
            Some(p) if p.len() > 1 && p.starts_with('/') && p.ends_with('/') => {
                let re = regex::Regex::new(&p[1..p.len() - 1]).map_err(|e| {
                    fail(format!(
                        "\"{p}\" is not a regular expression: {}.",
                        first_line(&e.to_string())
                    ))
                })?;
                Ok(sensors.select(|n| re.is_match(n)))
            }
            Some(name) => sensors
                .get(name)
                .map(|s| vec![s])
                .ok_or_else(|| fail(format!("there is no sensor named \"{name}\"."))),
        }
    }

    fn sensor_sampling(&mut self, m: &Message, args: &[&str]) -> Result<(), Refused> {
        let Some((&names, rest)) = args.split_first() else {
            return Err(fail("?sensor-sampling takes a sensor name, then optionally a strategy and its parameters.".into()));
        };
        let Some((&strategy, params)) = rest.split_first() else {
            // A query: one sensor.
            let s = self
                .server
                .sensors
                .get(names)
                .ok_or_else(|| fail(format!("there is no sensor named \"{names}\".")))?;
            let asked = self.samplers.get(names).map_or(Strategy::None, |s| s.asked);
            let mut a = vec![names.as_bytes().to_vec()];
            a.extend(asked.encode(&s.description.kind));
            self.reply(m, a);
            return Ok(());
        };
        let list: Vec<&str> = names.split(',').collect();
        let mut chosen = Vec::with_capacity(list.len());
        for (i, n) in list.iter().enumerate() {
            if list[..i].contains(n) {
                return Err(fail(format!("sensor \"{n}\" is named twice.")));
            }
            let s = self
                .server
                .sensors
                .get(n)
                .ok_or_else(|| fail(format!("there is no sensor named \"{n}\".")))?;
            let st = Strategy::parse(strategy, params, &s.description.kind)
                .map_err(|e| fail(e.to_string()))?;
            chosen.push((s, st));
        }
        let mut reply_strategy = vec![];
        for (s, st) in chosen {
            let name = s.description.name.clone();
            reply_strategy = st.encode(&s.description.kind);
            match Sampler::new(st, s.description.auto) {
                None => {
                    self.samplers.remove(&name);
                }
                Some(mut sampler) => {
                    // The reading now goes first, as aiokatcp sends it.
                    sampler.sent(&s.reading, Instant::now());
                    self.samplers.insert(name, sampler);
                    self.push(reading_inform("sensor-status", &s));
                }
            }
        }
        let mut a = vec![names.as_bytes().to_vec()];
        a.extend(reply_strategy);
        self.reply(m, a);
        Ok(())
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .last()
        .unwrap_or(s)
        .trim()
        .trim_end_matches('.')
        .to_string()
}

/// Why a request was not answered `ok`.
pub(super) enum Refused {
    /// `!name fail SENTENCE`: a request of a known name that could not be done.
    Fail(String),
    /// `!name invalid SENTENCE`: no such request (as aiokatcp answers it).
    Invalid(String),
}

fn fail(s: String) -> Refused {
    Refused::Fail(s)
}

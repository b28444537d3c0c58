//! The katcp front (`--katcp ADDR:PORT`): katgpucbf's dsim requests and sensors over katcp v5, for
//! aiokatcp clients, beside the HTTP front and over the same [`Controller`].
//!
//! - `?time`: the Unix time now on this host, seconds.
//! - `?signals SPEC [PERIOD]`: puts a spec in katgpucbf's signal language in force (period in
//!   samples, dividing `max-period`; left out, `max-period`) and replies with the first timestamp
//!   that carries it; a bad spec or period fails with one sentence and changes nothing. The
//!   signal is built before the reply, on this front's thread: other katcp clients wait that
//!   long (HTTP does not).
//! - the standard requests (`katcp-server`); `?halt` stops sending, as SIGTERM does.
//! - sensors, named, typed and described as katgpucbf's dsim has them: `adc-sample-rate` (Hz, the
//!   rate in force), `sample-bits`, `sync-time` (s, Unix time of timestamp 0),
//!   `steady-state-timestamp` (the first timestamp of the signal in force: from there on heaps
//!   reflect every change answered so far), `dither-seed`, `signals` (the spec in force written
//!   out reproducibly), `signals-orig` (as given), `period`, `max-period` (the buffer); read from
//!   the status every half second, and at once after `?signals`. While the signal in force was
//!   given in another form, `signals` and `signals-orig` are empty and `period` is the buffer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use katcp_server::sensor::{float, now};
pub use katcp_server::StartError;
use katcp_server::{
    Answer, Config, Description, Handler, Reply, RequestHelp, SensorType, Sensors, Server, Status,
    Value,
};

use crate::spec::SignalsRequest;
use crate::{Controller, SignalRequest};

/// The katcp-device API this front follows: katgpucbf's dsim requests and sensors.
pub const DEVICE_API: &str = "katgpucbf-dsim-1.0";

/// How often the sensors are read from the status.
const REFRESH: Duration = Duration::from_millis(500);

/// dsim's own requests.
struct Requests {
    controller: Controller,
    sensors: Sensors,
}

impl Handler for Requests {
    fn requests(&self) -> Vec<RequestHelp> {
        vec![
            RequestHelp {
                name: "time".into(),
                help: "Return the current UNIX timestamp.\n?time: seconds, on this host's clock."
                    .into(),
            },
            RequestHelp {
                name: "signals".into(),
                help: "Update the signals that are generated.\n?signals SPEC [PERIOD]: SPEC in katgpucbf's signal language, one expression per polarisation; PERIOD in samples, dividing max-period. Replies with the first timestamp that carries the new signals.".into(),
            },
        ]
    }

    fn handle(&self, name: &str, args: &[Vec<u8>]) -> Answer {
        match name {
            "signals" => self.signals(args),
            _ => {
                if !args.is_empty() {
                    return Err(format!(
                        "?time takes no arguments, not {} argument(s).",
                        args.len()
                    ));
                }
                Ok(Reply::with([float(now())]))
            }
        }
    }
}

impl Requests {
    fn signals(&self, args: &[Vec<u8>]) -> Answer {
        let (spec, period) = match args {
            [spec] => (spec, None),
            [spec, period] => (spec, Some(period)),
            _ => {
                return Err(format!(
                    "?signals takes a spec and optionally a period, not {} argument(s).",
                    args.len()
                ))
            }
        };
        let signals = String::from_utf8(spec.clone())
            .map_err(|_| "the spec is not UTF-8 text.".to_string())?;
        let period = period
            .map(|p| {
                std::str::from_utf8(p)
                    .ok()
                    .and_then(|p| p.parse::<u64>().ok())
                    .ok_or_else(|| {
                        format!(
                            "period '{}' is not a whole number of samples.",
                            String::from_utf8_lossy(p)
                        )
                    })
            })
            .transpose()?;
        let request = SignalRequest::Signals(SignalsRequest { signals, period });
        let change = self
            .controller
            .set_signal(&request)
            .map_err(|e| e.to_string())?;
        refresh(&self.sensors, &self.controller);
        Ok(Reply::with([change.from_timestamp.to_string()]))
    }
}

/// The sensors, with their first readings from `c`'s status.
fn sensors(c: &Controller) -> Sensors {
    let s = Sensors::new();
    let st = c.status();
    let add = |d: Description, v: Value| {
        // Names and types are fixed here: a failure is a bug of this file, found by its tests.
        if let Err(e) = s.add(d, v, Status::Nominal) {
            tracing::error!("katcp sensor: {e}");
        }
    };
    add(
        Description::new(
            "adc-sample-rate",
            SensorType::Float,
            "Rate at which samples are generated",
        )
        .units("Hz"),
        Value::Float(st.rate),
    );
    add(
        Description::new(
            "sample-bits",
            SensorType::Integer,
            "Number of bits in each output sample",
        ),
        Value::Integer(i64::from(st.sample_bits)),
    );
    add(
        Description::new(
            "sync-time",
            SensorType::Float,
            "The UNIX time corresponding to timestamp 0",
        )
        .units("s"),
        Value::Float(st.sync_time),
    );
    add(
        Description::new(
            "steady-state-timestamp",
            SensorType::Integer,
            "Heaps with this timestamp or greater are guaranteed to reflect the effects of previous katcp requests.",
        ),
        Value::Integer(steady_state(&st)),
    );
    add(
        Description::new(
            "dither-seed",
            SensorType::String,
            "Random seed used in dithering for quantisation",
        ),
        Value::Text(st.signal.seed.to_string()),
    );
    let [signals_orig, signals, period, max_period] = signal_readings(&st);
    add(
        Description::new(
            "signals-orig",
            SensorType::String,
            "User-provided string used to define the signals",
        ),
        signals_orig,
    );
    add(
        Description::new(
            "signals",
            SensorType::String,
            "String reproducibly describing how the signals are generated",
        ),
        signals,
    );
    add(
        Description::new(
            "period",
            SensorType::Integer,
            "Number of samples after which the signals will be repeated",
        ),
        period,
    );
    add(
        Description::new(
            "max-period",
            SensorType::Integer,
            "Maximum period that may be passed to ?signals",
        ),
        max_period,
    );
    s
}

/// `signals-orig`, `signals`, `period` and `max-period` from the status.
fn signal_readings(st: &crate::Status) -> [Value; 4] {
    let buffer = (st.buffer_heaps * st.heap_samples) as i64;
    match &st.signal.signals {
        Some(l) => [
            Value::Text(l.signals_orig.clone()),
            Value::Text(l.signals.clone()),
            Value::Integer(l.period as i64),
            Value::Integer(l.max_period as i64),
        ],
        None => [
            Value::Text(String::new()),
            Value::Text(String::new()),
            Value::Integer(buffer),
            Value::Integer(buffer),
        ],
    }
}

/// The first timestamp of the signal in force.
fn steady_state(st: &crate::Status) -> i64 {
    (st.signal.from_heap * st.heap_samples as u64) as i64
}

/// Sets each sensor whose value changed.
fn refresh(s: &Sensors, c: &Controller) {
    let st = c.status();
    let [signals_orig, signals, period, max_period] = signal_readings(&st);
    for (name, v) in [
        ("signals-orig", signals_orig),
        ("signals", signals),
        ("period", period),
        ("max-period", max_period),
        ("adc-sample-rate", Value::Float(st.rate)),
        ("sample-bits", Value::Integer(i64::from(st.sample_bits))),
        ("sync-time", Value::Float(st.sync_time)),
        ("steady-state-timestamp", Value::Integer(steady_state(&st))),
        ("dither-seed", Value::Text(st.signal.seed.to_string())),
    ] {
        if s.get(name).is_some_and(|r| r.reading.value != v) {
            if let Err(e) = s.set(name, v, Status::Nominal) {
                tracing::error!("katcp sensor: {e}");
            }
        }
    }
}

/// Serves on `listener` until dsim finishes, refreshing the sensors every half second.
pub async fn serve(listener: tokio::net::TcpListener, c: Controller) {
    let s = sensors(&c);
    let halt = c.clone();
    let mut cfg = Config::new(DEVICE_API, concat!("dsim-", env!("CARGO_PKG_VERSION")));
    cfg.max_line = 1 << 16;
    let requests = Requests {
        controller: c.clone(),
        sensors: s.clone(),
    };
    let server = Server::new(cfg, s.clone(), Arc::new(requests), move || {
        tracing::info!("katcp ?halt: stopping");
        halt.request_stop();
    });
    let refresher = {
        let c = c.clone();
        async move {
            let mut tick = tokio::time::interval(REFRESH);
            while !c.is_finished() {
                tick.tick().await;
                refresh(&s, &c);
            }
        }
    };
    let finished = {
        let c = c.clone();
        async move {
            while !c.is_finished() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    tokio::join!(refresher, server.serve(listener, finished));
}

/// Binds `addr`, logs `katcp listening on ADDR:PORT`, and serves on a thread of its own until
/// dsim finishes.
pub fn start(addr: SocketAddr, c: Controller) -> Result<(SocketAddr, JoinHandle<()>), StartError> {
    katcp_server::start_thread(addr, "dsim-katcp", move |l| serve(l, c))
}

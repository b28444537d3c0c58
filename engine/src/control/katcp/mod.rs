//! The katcp front (`--katcp ADDR:PORT`): katgpucbf's fgpu requests and sensors over katcp v5,
//! for aiokatcp clients, beside the HTTP front and over the same [`Controller`].
//!
//! - `?gain STREAM INPUT [VALUES...]`: with no values, the input's gains (one value when every
//!   channel has the same, else one per channel); with one value or one per channel, sets them.
//! - `?gain-all STREAM VALUES...|default`: the same gains for both inputs; `default` restores the
//!   output's configured gain.
//! - `?delays STREAM START-TIME D0 D1`: each input's model `delay,delay_rate:phase,phase_rate`
//!   (s, s/s, rad, rad/s), loaded at START-TIME (Unix seconds; needs `--sync-time`). Delays are
//!   the engine's: STREAM must name an output, and every output follows them.
//! - the standard requests (`katcp-server`), `?halt` asking the engine to stop as SIGTERM does.
//!
//! A request the controller refuses gets `!NAME fail SENTENCE` with the sentence the HTTP front
//! gives, and changes nothing; so does one whose arguments do not read ([`text::ArgError`]).
//! Every refusal is counted with the HTTP front's. The sensors are in [`sensors`].

pub mod sensors;
pub mod text;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fgpu_api::engine::{DelayRequest, Gain, GainsRequest, PolDelaySpec};
pub use katcp_server::StartError;
use katcp_server::{Answer, Config, Handler, Reply, RequestHelp, Server};

use super::Controller;
use sensors::EngineSensors;
use text::{gain_values, parse_complex, ArgError};

/// The katcp-device API this front follows: katgpucbf's fgpu requests and sensors, in part.
pub const DEVICE_API: &str = "katgpucbf-fgpu-1.0";

/// The engine's requests, answered through the controller.
pub struct EngineRequests {
    c: Arc<Controller>,
    sensors: Arc<EngineSensors>,
}

const GAIN_USAGE: &str =
    "an output name, an input (0 or 1) and optionally gains (one, or one per channel)";
const GAIN_ALL_USAGE: &str = "an output name and gains (one, one per channel, or \"default\")";
const DELAYS_USAGE: &str = "an output name, a start time (Unix seconds) and two delay models \"delay,delay_rate:phase,phase_rate\" (one per input)";

/// The arguments as text.
fn texts(args: &[Vec<u8>]) -> Result<Vec<&str>, ArgError> {
    args.iter()
        .enumerate()
        .map(|(i, a)| std::str::from_utf8(a).map_err(|_| ArgError::NotText(i + 1)))
        .collect()
}

/// One gain, or one per channel, as the shared request type.
fn gain(values: &[&str]) -> Result<Gain, ArgError> {
    let parsed = values
        .iter()
        .map(|v| parse_complex(v).ok_or_else(|| ArgError::Gain(v.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(match parsed[..] {
        [one] => Gain::Complex(one),
        _ => Gain::PerChannel(parsed),
    })
}

/// A refusal: the front's sentence or the controller's.
enum Refusal {
    Args(ArgError),
    Control(super::ControlError),
}

impl From<ArgError> for Refusal {
    fn from(e: ArgError) -> Self {
        Refusal::Args(e)
    }
}

impl From<super::ControlError> for Refusal {
    fn from(e: super::ControlError) -> Self {
        Refusal::Control(e)
    }
}

impl EngineRequests {
    fn gain(&self, args: &[&str]) -> Result<Reply, Refusal> {
        let count = |given| ArgError::Count {
            request: "gain",
            usage: GAIN_USAGE,
            given,
        };
        let [stream, input, values @ ..] = args else {
            return Err(count(args.len()).into());
        };
        self.c.channels(stream)?;
        let pol = match *input {
            "0" => 0,
            "1" => 1,
            other => return Err(ArgError::Input(other.into()).into()),
        };
        if values.is_empty() {
            let g = self.c.gains(stream)?;
            return Ok(Reply::with(gain_values(if pol == 0 {
                &g.pol0
            } else {
                &g.pol1
            })));
        }
        // The controller checks the count of values (and names the channels).
        let g = gain(values)?;
        let req = if pol == 0 {
            GainsRequest {
                pol0: Some(g),
                pol1: None,
            }
        } else {
            GainsRequest {
                pol0: None,
                pol1: Some(g),
            }
        };
        self.c.set_gains(stream, &req)?;
        self.sensors.changed(&self.c, 0);
        Ok(Reply::ok())
    }

    fn gain_all(&self, args: &[&str]) -> Result<Reply, Refusal> {
        let [stream, values @ ..] = args else {
            return Err(ArgError::Count {
                request: "gain-all",
                usage: GAIN_ALL_USAGE,
                given: 0,
            }
            .into());
        };
        self.c.channels(stream)?;
        let g = match values {
            [] => {
                return Err(ArgError::Count {
                    request: "gain-all",
                    usage: GAIN_ALL_USAGE,
                    given: args.len(),
                }
                .into())
            }
            ["default"] => {
                let k = self.c.output_index(stream)?;
                Gain::Real(f64::from(self.c.cfg.outputs[k].gain))
            }
            values => gain(values)?,
        };
        self.c.set_gains(stream, &GainsRequest::both(g))?;
        self.sensors.changed(&self.c, 0);
        Ok(Reply::ok())
    }

    fn delays(&self, args: &[&str]) -> Result<Reply, Refusal> {
        let [stream, start, d0, d1] = args else {
            return Err(ArgError::Count {
                request: "delays",
                usage: DELAYS_USAGE,
                given: args.len(),
            }
            .into());
        };
        self.c.channels(stream)?;
        let load_time = start
            .parse::<f64>()
            .map_err(|_| ArgError::StartTime(start.to_string()))?;
        let req = DelayRequest {
            load_time: Some(load_time),
            load_timestamp: None,
            pol0: Some(PolDelaySpec::Text(d0.to_string())),
            pol1: Some(PolDelaySpec::Text(d1.to_string())),
        };
        let loaded = self.c.set_delays(&req)?;
        let load = loaded.pol0.load_timestamp.max(loaded.pol1.load_timestamp);
        self.sensors.changed(&self.c, load);
        Ok(Reply::ok())
    }
}

impl Handler for EngineRequests {
    fn requests(&self) -> Vec<RequestHelp> {
        let help = |name: &str, text: &str| RequestHelp {
            name: name.into(),
            help: text.into(),
        };
        vec![
            help("gain", "Set or query the eq gains.\n?gain STREAM INPUT [VALUES...]: no values: the input's gains; one value (every channel) or one per channel: sets them. Values are complex, as 1, 0.5-0.25j or 2j."),
            help("gain-all", "Set the eq gains for all inputs.\n?gain-all STREAM VALUES...|default: one value, one per channel, or default (the output's configured gain)."),
            help("delays", "Add a new first-order polynomial to the delay and fringe correction model.\n?delays STREAM START-TIME D0 D1: each Dp is delay,delay_rate:phase,phase_rate (s, s/s, rad, rad/s) for input p, loaded at START-TIME (Unix seconds). Delays act on the input: every output follows them."),
        ]
    }

    fn handle(&self, name: &str, args: &[Vec<u8>]) -> Answer {
        let result = texts(args).map_err(Refusal::from).and_then(|a| match name {
            "gain" => self.gain(&a),
            "gain-all" => self.gain_all(&a),
            _ => self.delays(&a),
        });
        result.map_err(|r| {
            self.c.count_refusal();
            match r {
                Refusal::Args(e) => e.to_string(),
                Refusal::Control(e) => e.to_string(),
            }
        })
    }
}

/// The longest line a client may send: a gain per channel of the largest output, each up to 64
/// bytes, with room for the rest.
fn max_line(c: &Controller) -> usize {
    let channels = c
        .cfg
        .outputs
        .iter()
        .map(|o| o.geometry.channels)
        .max()
        .unwrap_or(0);
    (channels * 64 + 4096).max(1 << 20)
}

/// The server over controller `c`: its sensors and requests; `?halt` stops the engine.
pub fn server(c: Arc<Controller>) -> (Arc<Server>, Arc<EngineSensors>) {
    let sensors = Arc::new(EngineSensors::new(&c));
    let handler = Arc::new(EngineRequests {
        c: c.clone(),
        sensors: sensors.clone(),
    });
    let mut cfg = Config::new(DEVICE_API, concat!("fengine-", env!("CARGO_PKG_VERSION")));
    cfg.max_line = max_line(&c);
    let halt = c.clone();
    let server = Server::new(cfg, sensors.sensors.clone(), handler, move || {
        tracing::info!("katcp ?halt: stopping");
        halt.request_stop();
    });
    (server, sensors)
}

/// Serves on `listener` until the engine stops, refreshing the sensors every half second.
pub async fn serve(listener: tokio::net::TcpListener, c: Arc<Controller>) {
    let (server, sensors) = server(c.clone());
    let refresh = {
        let c = c.clone();
        async move {
            let mut tick = tokio::time::interval(sensors::REFRESH);
            while c.running() {
                tick.tick().await;
                sensors.refresh(&c);
            }
        }
    };
    let stopped = {
        let c = c.clone();
        async move {
            while c.running() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    tokio::join!(refresh, server.serve(listener, stopped));
}

/// Binds `--katcp`, logs `katcp listening on ADDR:PORT`, and serves on a thread of its own until
/// the engine stops. None when `--katcp` is not given.
pub fn start(c: Arc<Controller>) -> Result<Option<(SocketAddr, JoinHandle<()>)>, StartError> {
    let Some(addr) = c.config().katcp else {
        return Ok(None);
    };
    katcp_server::start_thread(addr, "fengine-katcp", move |l| serve(l, c)).map(Some)
}

#[cfg(test)]
mod tests;

//! A katcp v5 device server, as SARAO's correlator engines (aiokatcp) speak it, and a client:
//! the message codec ([`message`]), a sensor registry the program updates ([`Sensors`]), the
//! sampling strategies a client chooses per sensor ([`Strategy`]), a tokio TCP server
//! ([`Server`]) that answers the standard requests itself and the program's own through its
//! [`Handler`], and a blocking client ([`Client`]) that drives such a device one request at a time.
//!
//! Written here rather than taken from crates.io: the `katcp` crate (0.1.7, last released in
//! August 2022) has the message type and a nom parser with the v5 escapes, but no server, no
//! sensor registry or sampling strategies and nothing async; it keeps arguments as UTF-8
//! `String`s (katcp's are bytes) and brings nom, chrono and a proc-macro crate. What a server needs
//! on top of a codec is most of the work, and the codec itself is short (`message`).

pub mod client;
pub mod message;
pub mod sampling;
pub mod sensor;
pub mod server;
mod thread;

pub use client::{Client, ClientError, Response, SensorReading};
pub use message::{Kind, Message, ParseError};
pub use sampling::{Strategy, StrategyError};
pub use sensor::{Description, Reading, SensorError, SensorType, Sensors, Status, Value};
pub use server::{Answer, Config, Handler, Reply, RequestHelp, Server};
pub use thread::{start_thread, StartError};

//! The engine's control: one protocol-free [`Controller`] and the fronts that carry it.
//!
//! - [`Controller`] owns what is loaded (delay models, each output's gains), every check of a
//!   request and every command to the pipeline. It takes and answers the shared types of
//!   `fgpu_api::engine` ([`DelayRequest`](fgpu_api::engine::DelayRequest),
//!   [`GainsRequest`](fgpu_api::engine::GainsRequest), a centre in Hz; [`Status`](fgpu_api::engine::Status),
//!   [`Delays`](fgpu_api::engine::Delays), [`Gains`](fgpu_api::engine::Gains),
//!   [`Output`](fgpu_api::engine::Output)) and refuses with a [`ControlError`], one sentence per
//!   reason and no protocol in it. Its operations are one module per resource: `delays`,
//!   `gains`, `outputs` (a narrowband centre), `status`.
//! - [`http`]: the HTTP front (axum behind `fgpu_serve`'s limits): reads each body into the
//!   shared request type, calls the controller, answers JSON, and chooses each refusal's status
//!   code from the error's variant.
//!
//! - [`katcp`]: the katcp front (`--katcp`), katgpucbf's `?gain`, `?gain-all`, `?delays` and its
//!   sensors over the `katcp-server` crate: parses each request's arguments into the same
//!   request types, calls the same [`Controller`] (shared as an `Arc`), and answers a refusal
//!   `!NAME fail SENTENCE` with the controller's sentence; the checks and the sentences stay in
//!   the controller, once.
//!
//! Stopping on SIGINT and SIGTERM is the program's (`main.rs`), not a front's: a front stops
//! serving once [`Controller::running`] is false.

mod controller;
mod delays;
mod error;
mod gains;
pub mod http;
pub mod katcp;
mod outputs;
mod status;

pub use controller::Controller;
pub use delays::{check_delay_request, DelayContext, DelayUpdate};
pub use error::ControlError;
pub use gains::{check_gains, GainUpdate};
pub use http::{parse_delay_request, parse_gain_request, parse_output_request};

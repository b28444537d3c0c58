//! The F-engine: receive digitiser samples, channelise them, send 8-bit spectra.
//!
//! - [`signal`]: the maths shared by every backend (weights, sample unpacking, delay model,
//!   quantisation), fixed in docs/signal-path.md.
//! - [`backend`]: the signal path behind one trait: `reference` (float64 oracle), `cpu`, `cuda`, `null`.

pub mod backend;
pub mod bench;
pub mod signal;

pub mod app;
pub mod config;
pub mod control;
pub mod metrics;
pub mod pipeline;
pub mod stats;

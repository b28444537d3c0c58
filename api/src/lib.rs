//! The control plane's data types, shared by the servers that produce them and the clients that
//! read them: the engine's `GET /status` ([`engine::Status`]) and the requests its control takes
//! ([`engine::DelayRequest`], [`engine::GainsRequest`], [`engine::CentreRequest`]), dsim's status
//! and requests ([`dsim`], moved here from dsim). A field added here is added for every reader at
//! once, and a client never guesses a key.
//!
//! The types are plain data: no validation, no behaviour. The servers fill them from their
//! counters; the harness, the acceptance tests and the live page deserialise them.

#![warn(missing_docs)]

pub mod dsim;
pub mod engine;

//! The F-engine test bed's harness: watches the engine's output for gaps and wrong content,
//! binary-searches the highest sample rate the system sustains, and measures the channel
//! response (paper, sections 5.2 and 5.4). The `harness` binary is only its command line: each
//! command is a module here, so that other front ends (a qualification suite, a live page) can
//! run the same pieces.
//!
//! Bringing the system up and reaching it:
//! - [`bringup`]: the system under test, by URL or launched here, and the receiver on its output.
//! - [`services`]: reaching dsim and the engine by URL, or launching them as local processes.
//! - [`control`]: their HTTP APIs, and which of the engine's outputs the harness reads.
//! - [`signals`]: Ctrl-C handling, so that child processes are always stopped.
//!
//! Measuring (loops that produce records and never print):
//! - [`receive`]: join the output substreams, assemble heaps, track each substream's sequence.
//! - [`gaps`]: pure sequence logic (gaps, late, duplicates) and the test bed's oracle of which
//!   output heaps a lost input heap takes with it.
//! - [`feng_raw`]: the output heaps' values, 8-bit or 4-bit, as the harness reads them.
//! - [`content`]: per-channel power, strongest channel, the tone check.
//! - [`band`]: which frequency each channel of an output holds (by the output's kind).
//! - [`watch`]: the `watch` loop, one record per interval, published on a [`feed`].
//! - [`search`]: the binary search with repeats, over any trial function.
//! - [`trial`]: one max-rate trial against the real system.
//! - [`cpu`]: where the host's cores went during a trial (per process, and host-wide).
//! - [`response`]: the channel response measurement and its theory.
//! - [`soak`]: the chain at one rate for a long time, every process's memory, descriptors and
//!   threads and every loss counter sampled once an interval, and the verdict on them.
//! - [`qualify`]: the qualification suite (channelisation, linearity, gains, delays, timing,
//!   counters), run on a test bench of dsim, engine and receiver.
//!
//! Records and their readers:
//! - [`record`]: what the loops produce (per interval, per trial, per step) and the reports.
//! - [`feed`]: a record stream several readers can follow.
//! - [`render`]: progress lines, tables, JSON and SVG from the records.
//! - [`dashboard`]: the live page of `watch --http`, another reader of the watch feed.
//!
//! - [`commands`]: `watch`, `max-rate`, `response`, `qualify` and `soak`, each wiring the above together.

pub mod band;
pub mod bringup;
pub mod commands;
pub mod content;
pub mod control;
pub mod cpu;
pub mod dashboard;
pub mod feed;
pub mod feng_raw;
pub mod gaps;
pub mod qualify;
pub mod receive;
pub mod record;
pub mod render;
pub mod response;
pub mod search;
pub mod services;
pub mod signals;
pub mod soak;
pub mod stalls;
pub mod trial;
pub mod watch;

/// Formats a sample rate in Gsample/s with three decimals.
pub fn gsps(rate: f64) -> String {
    format!("{:.3}", rate / 1e9)
}

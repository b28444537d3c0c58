//! The F-engine test bed's harness: watches the engine's output for gaps and wrong content,
//! binary-searches the highest sample rate the system sustains, and measures the channel
//! response (paper, sections 5.2 and 5.4).
//!
//! - [`receive`]: join the output substreams, assemble heaps, track each substream's sequence.
//! - [`gaps`]: pure sequence logic (gaps, late, duplicates) and which output heaps a lost input
//!   heap takes with it.
//! - [`content`]: per-channel power, strongest channel, the tone check.
//! - [`search`]: the binary search with repeats, over any trial function.
//! - [`trial`]: one max-rate trial against the real system.
//! - [`cpu`]: where the host's cores went during a trial (per process, and host-wide).
//! - [`services`]: reaching dsim and the engine by URL, or launching them as local processes.
//! - [`control`]: their HTTP APIs.
//! - [`report`]: tables, JSON and SVG plots.
//! - [`response`]: the channel response measurement and its theory.
//! - [`watch`]: the `watch` command.
//! - [`signals`]: Ctrl-C handling, so that child processes are always stopped.

pub mod content;
pub mod control;
pub mod cpu;
pub mod gaps;
pub mod receive;
pub mod report;
pub mod response;
pub mod search;
pub mod services;
pub mod signals;
pub mod trial;
pub mod watch;

/// Formats a sample rate in Gsample/s with three decimals.
pub fn gsps(rate: f64) -> String {
    format!("{:.3}", rate / 1e9)
}

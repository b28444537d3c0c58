//! Renderers: records in, text and files out. The loops that measure never print; these turn
//! their records into what people and programs read.
//!
//! - [`progress`]: the lines on stderr while a command runs.
//! - [`report`]: the max-rate table, JSON files and SVG plots.
//! - [`plot`]: one qualification plot as SVG, for that page.

pub mod plot;
pub mod progress;
pub mod report;

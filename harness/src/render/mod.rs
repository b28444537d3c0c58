//! Renderers: records in, text and files out. The loops that measure never print; these turn
//! their records into what people and programs read.
//!
//! - [`progress`]: the lines on stderr while a command runs.
//! - [`report`]: the max-rate table, JSON files and SVG plots.
//! - [`html`]: the qualification report, one self-contained page and its JSON.
//! - [`plot`]: one qualification plot as SVG, for that page.
//! - [`index`]: a report folder's index.html, linking every report in it.
//! - [`soak`]: the soak's progress lines, summary, JSON and plots of memory over time.

pub mod html;
pub mod index;
pub mod plot;
pub mod progress;
pub mod report;
pub mod soak;

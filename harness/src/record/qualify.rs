//! What `harness qualify` produces: per test its requirement, the figures measured against it,
//! its plots and its outcome; and the report made of them. The suite fills these in and never
//! renders; [`render::html`](crate::render::html) draws the report, plots as inline SVG.

use serde::{Deserialize, Serialize};

/// The whole qualification run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QualifyReport {
    /// Unix time the run began.
    pub started_unix: f64,
    pub duration_s: f64,
    /// What was qualified.
    pub system: SystemUnderTest,
    /// True for the quick subset (fewer positions, shorter integrations).
    pub quick: bool,
    /// In the order run.
    pub tests: Vec<TestRecord>,
    /// True when every test ran and passed.
    pub pass: bool,
}

/// The engine and signal source qualified.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SystemUnderTest {
    pub engine_url: String,
    /// The engine output qualified, by name (reports from before several outputs: none).
    #[serde(default)]
    pub output: Option<String>,
    pub dsim_url: String,
    /// The engine's backend as it reports it ("cuda", "cpu", ...).
    pub backend: String,
    pub channels: usize,
    pub taps: usize,
    pub spectra_per_heap: usize,
    pub adc_sample_rate: f64,
    pub sample_bits: u32,
    /// Bits per output component (8 or 4; reports from before 4-bit output: 8).
    #[serde(default = "eight")]
    pub output_bits: u32,
    pub harness_version: String,
    /// The frequencies the judged output covers (reports from before: none).
    #[serde(default)]
    pub band: Option<JudgedBand>,
}

/// The band of the output judged: its kind and the frequencies its channels cover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgedBand {
    /// "wideband", "narrowband" or "narrowband_no_discard".
    pub kind: String,
    /// The channels' outer edges, Hz.
    pub low_hz: f64,
    pub high_hz: f64,
    /// A narrowband output's centre (channel n/2), Hz.
    pub centre_hz: Option<f64>,
    /// ADC samples per sample the PFB reads (1 for wideband).
    pub decimation: usize,
    /// A no-discard output's pass band, Hz (low, high): the channels judged within the band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_band_hz: Option<(f64, f64)>,
}

impl JudgedBand {
    /// One line: "narrowband, 1.7500 .. 2.7500 MHz around 2.2500 MHz, decimation 8".
    pub fn describe(&self) -> String {
        let mhz = |f: f64| format!("{:.4}", f / 1e6);
        let pass = self.pass_band_hz.map_or(String::new(), |(lo, hi)| {
            format!(", pass band {} .. {} MHz", mhz(lo), mhz(hi))
        });
        match self.centre_hz {
            Some(c) => format!(
                "{}, {} .. {} MHz around {} MHz, decimation {}{pass}",
                self.kind,
                mhz(self.low_hz),
                mhz(self.high_hz),
                mhz(c),
                self.decimation
            ),
            None => format!(
                "{}, {} .. {} MHz",
                self.kind,
                mhz(self.low_hz),
                mhz(self.high_hz)
            ),
        }
    }
}

fn eight() -> u32 {
    8
}

/// How a test ended. A test that could not run is neither a pass nor a fail: it says why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail { reason: String },
    NotRun { reason: String },
}

impl Outcome {
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Pass)
    }
    /// "pass", "FAIL" or "not run".
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail { .. } => "FAIL",
            Outcome::NotRun { .. } => "not run",
        }
    }
}

/// One test of the suite.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestRecord {
    /// The name `--tests` takes, e.g. "channelisation".
    pub name: String,
    /// A title for people, e.g. "Channelisation and SFDR".
    pub title: String,
    /// The requirement, in one sentence with its numbers.
    pub requirement: String,
    /// How it was measured, in a sentence or two.
    pub method: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The figures measured; the headline one first.
    pub figures: Vec<Figure>,
    pub plots: Vec<Plot>,
    pub duration_s: f64,
}

/// One measured figure, with the limit it is held to where there is one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
    /// The limit, as text ("<= 0.1", ">= 53"), when this figure is judged.
    pub limit: Option<String>,
    /// Whether this figure met its limit (None: not judged).
    pub pass: Option<bool>,
}

impl Figure {
    /// A figure reported but not judged.
    pub fn info(name: &str, value: f64, unit: &str) -> Self {
        Self {
            name: name.into(),
            value,
            unit: unit.into(),
            limit: None,
            pass: None,
        }
    }
    /// A figure that must be at least `min`.
    pub fn at_least(name: &str, value: f64, unit: &str, min: f64) -> Self {
        Self {
            name: name.into(),
            value,
            unit: unit.into(),
            limit: Some(format!(">= {min}")),
            pass: Some(value >= min),
        }
    }
    /// A figure that must be at most `max`.
    pub fn at_most(name: &str, value: f64, unit: &str, max: f64) -> Self {
        Self {
            name: name.into(),
            value,
            unit: unit.into(),
            limit: Some(format!("<= {max}")),
            pass: Some(value <= max),
        }
    }
    /// A figure that must equal `want` exactly (counts, channels, spectra).
    pub fn exactly(name: &str, value: f64, unit: &str, want: f64) -> Self {
        Self {
            name: name.into(),
            value,
            unit: unit.into(),
            limit: Some(format!("= {want}")),
            pass: Some(value == want),
        }
    }
}

/// A plot, described as data: the renderer draws it (SVG), so the JSON carries the same numbers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Plot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Logarithmic x axis (values must be positive).
    #[serde(default)]
    pub x_log: bool,
    pub series: Vec<Series>,
    /// Horizontal lines (limits, floors), e.g. the SFDR requirement.
    #[serde(default)]
    pub hlines: Vec<Level>,
    /// Vertical lines (an expected channel, a load timestamp).
    #[serde(default)]
    pub vlines: Vec<Level>,
}

/// One data series of a plot.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// Joined by straight lines (a theory curve, a spectrum).
    #[default]
    Line,
    /// Markers only (measurements).
    Points,
}

/// A labelled horizontal or vertical line at `value`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub label: String,
    pub value: f64,
}

//! The checks, one module per family, and the helpers they share.

use super::{Check, Geometry};
use crate::record::qualify::{Level, Plot, Series, Style};

mod channelisation;
mod counters;
mod delay;
mod filter;
mod gains;
mod lost_data;
mod shape;
mod timing;

pub(super) static ALL: &[Check] = &[
    channelisation::CHANNELISATION,
    shape::SHAPE,
    filter::FILTER_RESPONSE,
    channelisation::LINEARITY,
    gains::GAINS,
    delay::DELAY,
    delay::DELAY_ENABLE,
    delay::PHASE,
    delay::DELAY_RATE,
    delay::PHASE_RATE,
    timing::APPLICATION_TIME,
    timing::GROUP_DELAY,
    counters::SATURATION,
    lost_data::LOST_DATA,
];

/// dsim's noise (fraction of full scale) where a check does not need another.
pub(super) const NOISE: f64 = 0.05;

/// At most this many points per plotted series (a spectrum is reduced by max-hold).
const PLOT_POINTS: usize = 1024;

/// A spectrum in dB relative to `reference`, reduced to at most [`PLOT_POINTS`] points by
/// keeping the largest of each run of channels (so no spur is hidden).
pub(super) fn spectrum_series(name: &str, power: &[f64], reference: f64) -> Series {
    let run = power.len().div_ceil(PLOT_POINTS).max(1);
    let points = power
        .chunks(run)
        .enumerate()
        .map(|(i, c)| {
            let (k, p) = c
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(k, &p)| (i * run + k, p))
                .unwrap_or((i * run, 0.0));
            let db = if p > 0.0 && reference > 0.0 {
                10.0 * (p / reference).log10()
            } else {
                -150.0
            };
            (k as f64, db.max(-150.0))
        })
        .collect();
    Series {
        name: name.into(),
        style: Style::Line,
        points,
    }
}

/// A channel axis's label that says which frequencies the channels are: the band judged.
pub(super) fn channel_axis(g: &Geometry, what: &str) -> String {
    let (lo, hi) = g.band.edges_hz(g.adc_rate, g.channels);
    let mhz = |f: f64| format!("{:.4}", f / 1e6);
    match g.band.centre_hz(g.adc_rate) {
        Some(c) => format!(
            "{what} of the {} band {} .. {} MHz (channel {} at {} MHz)",
            g.band.kind(),
            mhz(lo),
            mhz(hi),
            g.channels / 2,
            mhz(c)
        ),
        None => format!(
            "{what} of the {} band {} .. {} MHz",
            g.band.kind(),
            mhz(lo),
            mhz(hi)
        ),
    }
}

/// Every `step`-th point of a series, so that scatter plots stay light.
pub(super) fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let step = points.len().div_ceil(PLOT_POINTS).max(1);
    points.into_iter().step_by(step).collect()
}

pub(super) fn points(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        style: Style::Points,
        points: thin(points),
    }
}

pub(super) fn line(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        style: Style::Line,
        points,
    }
}

pub(super) fn level(label: &str, value: f64) -> Level {
    Level {
        label: label.into(),
        value,
    }
}

pub(super) fn plot(title: &str, x: &str, y: &str, series: Vec<Series>) -> Plot {
    Plot {
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        series,
        ..Plot::default()
    }
}

/// A deterministic uniform number in [0, 1) for index i (splitmix64), so random gains and
/// positions are the same in every run.
pub(super) fn uniform(seed: u64, i: u64) -> f64 {
    let mut x = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(i.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

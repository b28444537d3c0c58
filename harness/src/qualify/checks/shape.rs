//! Channel shape: the `response` measurement (paper, 5.2) folded into the suite, judged on its
//! deviation from the theory and on its -3 dB and -53 dB widths.

use std::time::Duration;

use anyhow::{Context, Result};

use super::{level, line, plot, points};
use crate::qualify::analysis::width_at;
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::record::qualify::Figure;
use crate::response::{self, ResponseConfig, ResponseGeometry};

/// Largest deviation from the theory, above -60 dB, that passes.
const TOLERANCE_DB: f64 = 0.5;
const FLOOR_DB: f64 = -60.0;
/// Largest difference of a measured width from the theory's, in channels.
const WIDTH_TOLERANCE: f64 = 0.02;

pub(super) const SHAPE: Check = Check {
    name: "shape",
    title: "Channel shape",
    requirement: "The response of channel n/4 to a tone stepped across it lies within 0.5 dB of |FT of the PFB weights|^2 wherever the theory is above -60 dB, and its -3 dB and -53 dB widths are within 0.02 channels of the theory's. (katgpucbf: CBF-REQ-0126)",
    method: "harness response: the tone steps across the channel (16 steps per channel over +-2 channels in a full run, 8 over +-1.5 in the quick one); at each step the gain puts the tone near 40 counts and is divided out; the cross-power of the polarisations (independent noise and dither) is integrated. Widths are interpolated between the measured points, and the theory's at the same offsets the same way.",
    run: shape,
    needs_ddc: false,
};

fn shape(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    b.clear_delays()?;
    let (span, steps, integration) = if plan.quick {
        (1.5, 8, 0.3f64)
    } else {
        (2.0, 16, 1.0)
    };
    let config = ResponseConfig {
        channel: b.response.channel(),
        span,
        steps_per_channel: steps,
        integration: Duration::from_secs_f64(integration.max(g.seconds(plan.spectra / 4))),
        settle: Duration::from_secs_f64(0.3 + 2.0 * g.chunk_samples as f64 / g.adc_rate),
        amplitude: 0.9,
        noise: Some(0.001),
        target: response::scaled_level(40.0, g.output_bits),
        max_gain: 1000.0,
        floor_db: FLOOR_DB,
        tolerance_db: TOLERANCE_DB,
        set_gains: true,
    };
    let geometry = ResponseGeometry {
        filter: g.filter,
        channels: g.channels,
        taps: g.taps,
        sample_bits: g.sample_bits,
        output_bits: g.output_bits,
        adc_rate: g.adc_rate,
        band: g.band,
    };
    let r = response::measure(
        &b.services,
        &b.rx,
        &b.response,
        config,
        geometry,
        &mut |s| {
            progress(&format!(
                "shape: step {}/{} offset {:+.3}: {:.2} dB (theory {:.2})",
                s.step,
                s.steps,
                s.point.offset,
                10.0 * s.point.power.max(1e-30).log10(),
                s.point.theory_db
            ))
        },
    )
    .context("measuring the channel response")?;
    let measured: Vec<(f64, f64)> = r
        .points
        .iter()
        .filter_map(|p| Some((p.offset, p.measured_db?)))
        .collect();
    let theory_at: Vec<(f64, f64)> = r.points.iter().map(|p| (p.offset, p.theory_db)).collect();
    let mut m = Measured::default();
    m.figures.push(Figure::at_most(
        "largest deviation from the theory above -60 dB",
        r.max_deviation_db.unwrap_or(f64::INFINITY),
        "dB",
        TOLERANCE_DB,
    ));
    for lvl in [-3.0, -53.0] {
        let want = width_at(&theory_at, lvl);
        let got = width_at(&measured, lvl);
        match (got, want) {
            (Some(got), Some(want)) => {
                m.figures.push(Figure::at_most(
                    &format!("{lvl} dB width, measured less theory ({want:.4} channels)"),
                    (got - want).abs(),
                    "channels",
                    WIDTH_TOLERANCE,
                ));
                m.figures
                    .push(Figure::info(&format!("{lvl} dB width"), got, "channels"));
            }
            _ => {
                m.failure = Some(format!(
                    "the {lvl} dB width could not be measured within +-{span} channels"
                ))
            }
        }
    }
    m.figures
        .push(Figure::info("points compared", r.compared as f64, ""));
    let theory = response::theory_curve(&geometry, -span, span, 801);
    let mut p = plot(
        &format!("response of channel {}", r.config.channel),
        "offset from the channel centre (channels)",
        "dB",
        vec![line("theory", theory), points("measured", measured)],
    );
    p.hlines.push(level("-3 dB", -3.0));
    p.hlines.push(level("-53 dB", -53.0));
    m.plots.push(p);
    Ok(m)
}

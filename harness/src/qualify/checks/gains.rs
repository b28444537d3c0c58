//! Gains: random complex gains per channel, measured as the ratio of the polarisations.

use anyhow::Result;
use fgpu_api::engine::{Gain, GainsRequest};
use num_complex::Complex64;

use super::{level, plot, points, uniform, NOISE};
use crate::qualify::analysis::deg;
use crate::qualify::bench::noise;
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::record::qualify::Figure;

const MAGNITUDE_DB: f64 = 0.1;
const PHASE_DEG: f64 = 0.5;

pub(super) const GAINS: Check = Check {
    name: "gains",
    title: "Gains",
    requirement: "Random complex gains per channel (magnitude within +-6 dB, any phase) are applied as set: the measured ratio is within 0.1 dB and the phase within 0.5 degree in every channel (a no-discard output: every channel of its pass band). (katgpucbf: CBF-REQ-0119)",
    method: "The same noise (one seed) in both polarisations, no delay. Polarisation 0 gets one real gain (the noise at 12 counts rms), polarisation 1 that gain times a random complex number per channel. Per channel, <x1 conj(x0)> / <|x0|^2> is the gain ratio; the independent dither and rounding of the two add no bias to the cross term.",
    run: gains,
    needs_ddc: false,
};

fn gains(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let n = g.channels;
    b.clear_delays()?;
    let g0 = g.noise_gain(12.0, NOISE);
    // The engine keeps gains in float32: send them so (a compact body, ~28 bytes a channel),
    // and hold the measurement to exactly what was sent.
    let pol1: Vec<[f32; 2]> = (0..n as u64)
        .map(|k| {
            let db = (uniform(301, k) - 0.5) * 12.0;
            let phase = (uniform(302, k) - 0.5) * std::f64::consts::TAU;
            let w = Complex64::from_polar(10f64.powf(db / 20.0), phase) * g0;
            [w.re as f32, w.im as f32]
        })
        .collect();
    let g0 = g0 as f32 as f64;
    let wanted: Vec<Complex64> = pol1
        .iter()
        .map(|w| Complex64::new(w[0] as f64, w[1] as f64) / g0)
        .collect();
    let signal_from = b.set_signal(vec![noise(NOISE, 303)], vec![noise(NOISE, 303)])?;
    // The values the engine keeps (float32), so that what is judged is what was loaded; summed
    // from where both the gains and the signal hold (dsim's switch can come after the gains').
    let from = b
        .set_gains(&GainsRequest {
            pol0: Some(Gain::Real(g0)),
            pol1: Some(Gain::PerChannel(
                pol1.iter().map(|w| [w[0] as f64, w[1] as f64]).collect(),
            )),
        })?
        .max(signal_from);
    progress("gains: random gains loaded; integrating");
    // The worst of every channel's phase is judged: with the noise at 12 counts rms, 500
    // spectra left the worst of 4096 channels within a few hundredths of a degree of the 0.5
    // degree limit (0.507 once), so integrate four times that and halve the estimate's spread.
    let int = b.integrate(from, (plan.spectra * 2).max(200))?;
    // A no-discard output's roll-off holds the noise well below the dither and rounding that
    // each polarisation adds on its own, which biases the ratio there: judge its pass band, as
    // its other checks do (every channel of any other output).
    let pass = g.pass_channels();
    let mut worst_db = 0.0f64;
    let mut worst_deg = 0.0f64;
    let mut mags = Vec::with_capacity(n);
    let mut phases = Vec::with_capacity(n);
    for (k, want) in wanted.iter().enumerate().filter(|(k, _)| pass.contains(k)) {
        let p0 = int.power[0][k];
        let r = if p0 > 0.0 {
            int.cross[k] / p0
        } else {
            Complex64::default()
        };
        let err = r / want;
        let e_db = 20.0 * err.norm().max(1e-30).log10();
        let e_deg = deg(err.arg());
        worst_db = worst_db.max(e_db.abs());
        worst_deg = worst_deg.max(e_deg.abs());
        mags.push((
            20.0 * wanted[k].norm().log10(),
            20.0 * r.norm().max(1e-30).log10(),
        ));
        phases.push((deg(want.arg()), deg(r.arg())));
    }
    let judged = mags.len();
    progress(&format!(
        "gains: worst {worst_db:.4} dB, {worst_deg:.4} degree over {judged} of {n} channels"
    ));
    // Back to one gain for both.
    b.set_gain(g0)?;
    let mut m = Measured::default();
    m.figures.push(Figure::at_most(
        "worst magnitude error",
        worst_db,
        "dB",
        MAGNITUDE_DB,
    ));
    m.figures.push(Figure::at_most(
        "worst phase error",
        worst_deg,
        "degree",
        PHASE_DEG,
    ));
    m.figures
        .push(Figure::info("channels checked", judged as f64, ""));
    m.figures
        .push(Figure::info("spectra integrated", int.spectra as f64, ""));
    let mut p = plot(
        "gain magnitude: measured against set",
        "set (dB)",
        "measured (dB)",
        vec![points("channels", mags)],
    );
    p.hlines.push(level("0 dB", 0.0));
    m.plots.push(p);
    m.plots.push(plot(
        "gain phase: measured against set",
        "set (degree)",
        "measured (degree)",
        vec![points("channels", phases)],
    ));
    Ok(m)
}

//! Timing: a delay model loaded for a future timestamp takes effect at exactly the predicted
//! spectrum, and the group delay (where in a spectrum's window an input event lands).

use anyhow::Result;
use fgpu_api::engine::{DelayRequest, PolDelay};
use num_complex::Complex64;

use super::{level, line, plot, points, NOISE};
use crate::band::Band;
use crate::qualify::analysis::crossing;
use crate::qualify::bench::{noise, tone};
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::record::qualify::Figure;
use crate::response::design_weights;

pub(super) const APPLICATION_TIME: Check = Check {
    name: "application-time",
    title: "Delay application time",
    requirement: "A delay model loaded for a future timestamp T takes effect at exactly the first spectrum whose timestamp is at or after T: every spectrum before it has the old model, every one from it the new. (katgpucbf: CBF-REQ-0077)",
    method: "The same noise in both polarisations, no delay. A model for polarisation 1 (delay 2.25 samples, phase pi/2) is loaded for a timestamp half a spectrum past a spectrum boundary (an engine that takes its load time as a Unix time, as katgpucbf's over katcp, lands within a few samples of it, in the same spectrum). Per spectrum, the cross-power of every channel is weighted by the conjugate of the new model's phase and summed: near its magnitude under the new model, near zero under the old one.",
    run: application_time,
    needs_ddc: false,
};

pub(super) const GROUP_DELAY: Check = Check {
    name: "group-delay",
    title: "Group delay",
    requirement: "A tone switched on at timestamp F reaches half its final amplitude in the spectrum the PFB's window (a narrowband output's: behind its DDC filter) predicts: the measured group delay is within 0.1 spectrum (0.2 n D samples, D = 1 for wideband) of the theory.",
    method: "dsim switches a tone at a channel centre on at a known timestamp F (its reply names it). The tone channel's amplitude is traced spectrum by spectrum as the windows slide over F; the timestamp where it crosses half its final value, interpolated, gives the group delay F - t_half. The theory is the same construction on the PFB's weights (the partial sums of the window), interpolated the same way; for a narrowband output the PFB's inputs are D samples apart and its linear-phase DDC filter of L taps delays the switch by (L - 1)/2 samples.",
    run: group_delay,
    needs_ddc: false,
};

/// The model's delay (samples) and phase (radians).
const D: f64 = 2.25;
const P: f64 = std::f64::consts::FRAC_PI_2;

fn application_time(b: &Bench, _plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let n = g.channels;
    let step = g.step();
    if g.max_delay_samples < D + 1.0 {
        return Ok(Measured::not_run(format!(
            "the engine's --max-delay ({:.2} samples) is below the {D} samples this test loads",
            g.max_delay_samples
        )));
    }
    b.clear_delays()?;
    b.set_gain(g.noise_gain(15.0, NOISE))?;
    let from = b.set_signal(vec![noise(NOISE, 501)], vec![noise(NOISE, 501)])?;
    let start = from.max(b.after_now()?);
    // Half a spectrum past a boundary, some spectra on: an engine that takes its load time as a
    // Unix time (katgpucbf's ?delays) loads it within a few samples of this (float64 seconds:
    // `Clock::round_trip_error`), far from either boundary, so the first spectrum with the new
    // model is the same one.
    let t_load = (start + 16 * step).div_ceil(step) * step + step / 2;
    let want = t_load.div_ceil(step) * step;
    // Across a wideband output the delay's turn spans several radians, so the old model
    // (nothing) sums to about zero against the new one's phases at P = pi/2. Across a narrowband
    // output it spans D times less: the phase is set opposite the band's mean turn instead, so
    // that the old model sums to about -1.
    let p = match g.band.centre_hz(g.adc_rate) {
        None => P,
        Some(centre) => (std::f64::consts::PI + std::f64::consts::TAU * centre * D / g.adc_rate)
            .rem_euclid(std::f64::consts::TAU),
    };
    let pol1 = PolDelay {
        delay: D / g.adc_rate,
        phase: p,
        ..Default::default()
    };
    let req = DelayRequest::both(PolDelay::default(), pol1).at(t_load);
    b.services.engine.set_delays(&req)?;
    // The new model turns the channel centred on sky frequency f of x1 conj(x0) by
    // P - 2 pi f D / fs (pi k D / n in wideband channel k; a narrowband output's mixer turn is
    // part of it); weight by its conjugate.
    let weights: Vec<Complex64> = (0..n)
        .map(|k| {
            let turn = std::f64::consts::TAU * g.frequency(k as f64) * D / g.adc_rate;
            Complex64::from_polar(1.0, -(p - turn))
        })
        .collect();
    let trace = b.trace(want - 12 * step, want + 12 * step, weights, 0)?;
    b.clear_delays()?;
    let scale = trace.values().map(|p| p.cross.norm()).fold(0.0, f64::max);
    let mut first_new = None;
    let mut unclear = Vec::new();
    let mut series = Vec::new();
    for (&t, p) in &trace {
        let score = p.cross.re / scale.max(1e-30);
        series.push((t as f64 - want as f64, score));
        let new = score > 0.6;
        if !new && score > 0.4 {
            unclear.push(t);
        }
        if new && first_new.is_none() {
            first_new = Some(t);
        }
        // Every spectrum must sit on its side of the predicted one.
        if new != (t >= want) {
            unclear.push(t);
        }
    }
    let mut m = Measured::default();
    let Some(first) = first_new else {
        m.failure = Some(format!(
            "no spectrum in {}..{} shows the new model",
            want - 12 * step,
            want + 12 * step
        ));
        return Ok(m);
    };
    let off = (first as f64 - want as f64) / step as f64;
    progress(&format!(
        "application-time: loaded for {t_load}, first spectrum with it {first} (predicted {want}: {off:+} spectra)"
    ));
    m.figures.push(Figure::exactly(
        "first spectrum with the new model, less the predicted one",
        off,
        "spectra",
        0.0,
    ));
    m.figures.push(Figure::exactly(
        "spectra on the wrong side of it, or unclear",
        unclear.len() as f64,
        "spectra",
        0.0,
    ));
    m.figures
        .push(Figure::info("spectra traced", trace.len() as f64, ""));
    let mut p = plot(
        "match to the new model, per spectrum",
        "spectrum timestamp less the predicted first (samples)",
        "match (1: new model, 0: old)",
        vec![points("spectra", series)],
    );
    p.vlines.push(level("predicted first spectrum", 0.0));
    p.vlines
        .push(level("load timestamp", t_load as f64 - want as f64));
    m.plots.push(p);
    Ok(m)
}

fn group_delay(b: &Bench, _plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let n = g.channels;
    let step = g.step();
    // A channel well inside the band (and in a no-discard output's pass band).
    let pass = g.pass_channels();
    let c = (n / 4 + n / 16).clamp(*pass.start(), *pass.end());
    let f = g.frequency(c as f64);
    let a = 0.25;
    b.clear_delays()?;
    let quiet = 0.002;
    let gain_from = b.set_gain(b.gain_for(a, 100.0))?;
    let from = b.set_signal(vec![noise(quiet, 601)], vec![noise(quiet, 602)])?;
    // The quiet signal and the gain must hold for a whole window before the switch.
    b.wait_input(from.max(gain_from) + g.window() + g.chunk_samples as u64)?;
    let change = b.signal_change(
        vec![tone(f, a), noise(quiet, 601)],
        vec![tone(f, a), noise(quiet, 602)],
        [0.0, 0.0],
    )?;
    let on = change.from_timestamp;
    let lo = (on / step).saturating_sub(g.taps as u64 + 4) * step;
    let hi = (on / step + 6) * step;
    let trace = b.trace(lo, hi, vec![], c)?;
    let amp: Vec<(f64, f64)> = trace
        .iter()
        .map(|(&t, p)| (t as f64, (p.probe[0].norm() + p.probe[1].norm()) / 2.0))
        .collect();
    let settled: Vec<f64> = amp
        .iter()
        .filter(|x| x.0 >= on as f64)
        .map(|x| x.1)
        .collect();
    let mut m = Measured::default();
    if settled.is_empty() {
        m.failure = Some("no spectrum after the switch was traced".into());
        return Ok(m);
    }
    let full = settled.iter().sum::<f64>() / settled.len() as f64;
    let measured: Vec<(f64, f64)> = amp.iter().map(|&(t, y)| (t, y / full)).collect();
    // The theory: spectrum t0 sees the tone in PFB inputs i >= (on - t0) / S of its window,
    // input i reading ADC samples from t0 + i S (S = D, 2D without discard). A narrowband
    // output's DDC filter is linear phase: in its passband it delays by (L - 1)/2 samples, so
    // input i holds the tone once t0 + i S + (L - 1)/2 >= on (wideband: S = L = 1).
    let d = g.band.subsampling() as f64;
    let ddc_delay = (g.band.ddc_taps() as f64 - 1.0) / 2.0;
    let w = design_weights(g.band.pfb_design_channels(n), g.taps, g.filter);
    let total: f64 = w.iter().sum();
    let theory: Vec<(f64, f64)> = measured
        .iter()
        .map(|&(t, _)| {
            let first = ((on as f64 - ddc_delay - t) / d).ceil().max(0.0) as usize;
            let part: f64 = w.iter().skip(first).sum();
            (t, (part / total).abs())
        })
        .collect();
    let (Some(t_half), Some(t_theory)) = (crossing(&measured, 0.5), crossing(&theory, 0.5)) else {
        m.failure = Some("the tone's amplitude never crossed half its final value".into());
        return Ok(m);
    };
    let gd = on as f64 - t_half;
    let gd_theory = on as f64 - t_theory;
    progress(&format!(
        "group-delay: switched on at {on}; half amplitude at {t_half:.1}: {gd:.1} samples (theory {gd_theory:.1})"
    ));
    m.figures.push(Figure::at_most(
        "group delay less the theory",
        (gd - gd_theory).abs() / step as f64,
        "spectra",
        0.1,
    ));
    m.figures.push(Figure::info("group delay", gd, "samples"));
    m.figures
        .push(Figure::info("group delay", gd / g.adc_rate * 1e6, "us"));
    m.figures
        .push(Figure::info("group delay, theory", gd_theory, "samples"));
    m.figures.push(Figure::info(
        "half the window (n taps D), for reference",
        (n * g.taps) as f64 * d,
        "samples",
    ));
    if g.band != Band::Wideband {
        m.figures.push(Figure::info(
            "the DDC filter's part, (L - 1)/2",
            ddc_delay,
            "samples",
        ));
    }
    let x = |t: f64| (t - on as f64) / step as f64;
    let mut p = plot(
        "tone channel amplitude as the windows slide over the switch",
        "spectrum timestamp less the switch (spectra)",
        "amplitude / final",
        vec![
            points(
                "measured",
                measured.iter().map(|&(t, y)| (x(t), y)).collect(),
            ),
            line("theory", theory.iter().map(|&(t, y)| (x(t), y)).collect()),
        ],
    );
    p.hlines.push(level("half", 0.5));
    m.plots.push(p);
    Ok(m)
}

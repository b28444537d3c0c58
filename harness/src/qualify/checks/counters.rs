//! Counters: saturation driven on purpose is counted as the harness sees it.

use anyhow::Result;

use super::{plot, points, NOISE};
use crate::qualify::bench::{noise, tone};
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::record::qualify::Figure;

pub(super) const SATURATION: Check = Check {
    name: "saturation",
    title: "Saturation counters",
    requirement: "A tone driven into clipping makes the engine count clamped output values at the rate the harness sees them (within 5%); an undriven signal counts none.",
    method: "A tone of 1.5 full scale (the digitiser clips) at a gain that would put it at 400 counts; the engine's per-polarisation saturation counter over a stretch is divided by the values it counts it out of (its status; over katcp katgpucbf's Prometheus counters fgpu_output_clipped_samples and fgpu_output_samples), and compared with the fraction of values at the clamp the harness counts in the output. Then a tone at 50 counts: neither counts any. dsim's count of clipped input samples is reported.",
    run: saturation,
    needs_ddc: false,
};

/// The engine's saturation counters and the values they count out of, per polarisation (both
/// counted at one place, where a frame is computed or a heap sent, and read at one moment, so
/// that their ratio needs no alignment with the output): from the status over HTTP, from
/// katgpucbf's `fgpu_output_clipped_samples` and `fgpu_output_samples` over katcp. None where
/// the engine does not count them, with the reason.
fn engine_counts(b: &Bench) -> Result<Result<([u64; 2], u64), String>> {
    let c = b.services.engine.counts()?;
    Ok(c.clamped.map(|s| (s.clamped, s.values)).ok_or_else(|| {
        format!(
            "the engine at {} does not count its clamped output values with the values they \
             are out of (over katcp: katgpucbf's fgpu_output_clipped_samples and \
             fgpu_output_samples in its Prometheus metrics)",
            b.services.engine.url()
        )
    }))
}

fn dsim_clipped(b: &Bench) -> Result<u64> {
    Ok(b.services
        .dsim
        .status()?
        .pols
        .iter()
        .map(|p| p.saturated_samples)
        .sum())
}

fn saturation(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let c = g.channels / 4;
    let f = g.frequency(c as f64);
    b.clear_delays()?;
    let mut m = Measured::default();
    let mut fractions = Vec::new();
    for (i, (a, counts)) in [(1.5f64, 400.0), (0.25, 50.0)].into_iter().enumerate() {
        let gain_from = b.set_gain(b.gain_for(a.min(1.0), counts))?;
        let from = b.set_signal(
            vec![tone(f, a), noise(NOISE, 701)],
            vec![tone(f, a), noise(NOISE, 702)],
        )?;
        b.wait_computed(from.max(gain_from) + g.window())?;
        let clipped0 = dsim_clipped(b)?;
        let (sat0, values0) = match engine_counts(b)? {
            Ok(c) => c,
            Err(why) => return Ok(Measured::not_run(why)),
        };
        let start = b.after_now()?;
        let int = b.integrate(start, plan.spectra)?;
        let (sat1, values1) = match engine_counts(b)? {
            Ok(c) => c,
            Err(why) => return Ok(Measured::not_run(why)),
        };
        let clipped = dsim_clipped(b)? - clipped0;
        let computed = values1.saturating_sub(values0).max(1) as f64;
        let seen = int.values.max(1) as f64;
        for pol in 0..2 {
            let engine = (sat1[pol] - sat0[pol]) as f64 / computed;
            let harness = int.saturated[pol] as f64 / seen;
            progress(&format!(
                "saturation: tone {a} of full scale, pol {pol}: engine {:.3e}, harness {:.3e} of values clamped; dsim clipped {clipped} samples",
                engine, harness
            ));
            fractions.push((harness, engine));
            if i == 0 {
                let ratio = if harness > 0.0 { engine / harness } else { 0.0 };
                m.figures.push(Figure::at_most(
                    &format!(
                        "pol {pol}, driven: engine's count rate against the harness's, |ratio - 1|"
                    ),
                    (ratio - 1.0).abs(),
                    "",
                    0.05,
                ));
                m.figures.push(Figure::at_least(
                    &format!("pol {pol}, driven: values the harness saw clamped"),
                    int.saturated[pol] as f64,
                    "values",
                    1.0,
                ));
            } else {
                m.figures.push(Figure::exactly(
                    &format!("pol {pol}, undriven: values clamped (engine counter)"),
                    (sat1[pol] - sat0[pol]) as f64,
                    "values",
                    0.0,
                ));
                m.figures.push(Figure::exactly(
                    &format!("pol {pol}, undriven: values clamped (harness)"),
                    int.saturated[pol] as f64,
                    "values",
                    0.0,
                ));
            }
        }
        m.figures.push(Figure::info(
            &format!("dsim: input samples clipped with a tone of {a} full scale"),
            clipped as f64,
            "samples",
        ));
    }
    m.plots.push(plot(
        "fraction of output values clamped: engine against harness",
        "harness",
        "engine",
        vec![points("polarisations and levels", fractions)],
    ));
    Ok(m)
}

//! Counters: saturation driven on purpose is counted as the harness sees it, and a dsim drop
//! list gives exactly the flagged output the test bed's oracle predicts.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use fgpu_api::dsim::{FaultsRequest, PolFaults, Selector};

use super::{plot, points, NOISE};
use crate::gaps::outputs_hit;
use crate::qualify::bench::{noise, tone};
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::record::qualify::Figure;
use crate::signals;

pub(super) const SATURATION: Check = Check {
    name: "saturation",
    title: "Saturation counters",
    requirement: "A tone driven into clipping makes the engine count clamped output values at the rate the harness sees them (within 5%); an undriven signal counts none.",
    method: "A tone of 1.5 full scale (the digitiser clips) at a gain that would put it at 400 counts; the engine's per-polarisation saturation counter over a stretch is divided by the values it computed, and compared with the fraction of values at the clamp the harness counts in the output. Then a tone at 50 counts: neither counts any. dsim's count of clipped input samples is reported.",
    run: saturation,
    needs_ddc: false,
};

pub(super) const LOST_DATA: Check = Check {
    name: "lost-data",
    title: "Lost data",
    requirement: "Digitiser heaps dropped on purpose (one of polarisation 0, three of polarisation 1) remove exactly the output heaps the test bed's oracle predicts in every substream, and the engine counts exactly the heaps it missed.",
    method: "dsim's drop list names heaps about a second ahead; the harness's receiver tracks every substream's timestamps; the oracle (harness::gaps::outputs_hit, written from the signal path's definition, not the engine's code) predicts which output heaps' windows touch a dropped heap (a narrowband output's windows read (2nT - 1) D + L samples each, its spectra 2nD apart).",
    run: lost_data,
    needs_ddc: false,
};

/// The engine's saturation counters and the values it computed per polarisation (both counted
/// where a frame is computed, so that their ratio needs no alignment with the output).
fn engine_counts(b: &Bench) -> Result<([u64; 2], u64)> {
    let st = b.services.engine.status()?;
    let (_, out) = b.services.engine.output_in(&st)?;
    let sat = [
        out.saturated.first().copied().unwrap_or(0),
        out.saturated.get(1).copied().unwrap_or(0),
    ];
    let values =
        st.frames.computed * (out.heaps_per_frame * out.spectra_per_heap * out.channels) as u64;
    Ok((sat, values))
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
        let (sat0, values0) = engine_counts(b)?;
        let start = b.after_now()?;
        let int = b.integrate(start, plan.spectra)?;
        let (sat1, values1) = engine_counts(b)?;
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

fn lost_data(b: &Bench, _plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let dsim = b.services.dsim.status()?;
    let hs = dsim.heap_samples as u64;
    let out_step = g.spectra_per_heap as u64 * g.step();
    let span = g.heap_span();
    // About a second ahead, and past the engine's frames in flight.
    let ahead = (g.adc_rate as u64).max(6 * g.chunk_samples as u64) / hs + 8;
    let k0 = dsim.timestamp / hs + ahead;
    let gap = (4 * out_step + span) / hs + 8;
    let k1 = k0 + gap;
    let before = b.services.engine.status()?;
    let drop = |selector: Selector| PolFaults {
        drop: Some(selector),
        ..Default::default()
    };
    b.services.dsim.set_faults(&FaultsRequest {
        pol0: Some(drop(Selector {
            heaps: vec![k0],
            ..Default::default()
        })),
        pol1: Some(drop(Selector {
            ranges: vec![[k1, k1 + 3]],
            ..Default::default()
        })),
    })?;
    let none = FaultsRequest {
        pol0: Some(PolFaults::default()),
        pol1: Some(PolFaults::default()),
    };
    progress(&format!(
        "lost-data: dropping heap {k0} of pol 0 and {k1}..{} of pol 1",
        k1 + 2
    ));
    let lo = (k0 * hs).saturating_sub(span + out_step);
    let hi = (k1 + 3) * hs + span;
    let waited = Instant::now();
    let limit = Duration::from_secs_f64(3.0 * (hi - dsim.timestamp) as f64 / g.adc_rate + 30.0);
    let snap = loop {
        let snap = b.rx.snapshot();
        if snap
            .substreams
            .iter()
            .all(|s| s.newest_timestamp.is_some_and(|t| t > hi + 2 * out_step))
        {
            break snap;
        }
        if waited.elapsed() > limit {
            let _ = b.services.dsim.set_faults(&none);
            bail!("the output did not pass timestamp {hi} within {limit:?}");
        }
        signals::sleep(Duration::from_millis(50)).map_err(|_| anyhow!("interrupted"))?;
    };
    b.services.dsim.set_faults(&none)?;
    let after = b.services.engine.status()?;
    let mut m = Measured::default();
    let mut matched = 0;
    let mut predicted_total = 0;
    let mut plotted = Vec::new();
    for s in &snap.substreams {
        let phase = s.first_timestamp.unwrap_or(0) % out_step;
        let want: BTreeSet<u64> = [(k0, k0 + 1), (k1, k1 + 3)]
            .iter()
            .flat_map(|&(a, e)| outputs_hit(a * hs, e * hs, phase, out_step, span))
            .filter(|t| (lo..=hi).contains(t))
            .collect();
        let got: BTreeSet<u64> = s
            .missing
            .iter()
            .flat_map(|&(a, e)| (a..e).step_by(out_step as usize))
            .filter(|t| (lo..=hi).contains(t))
            .collect();
        predicted_total += want.len();
        if want == got {
            matched += 1;
        } else {
            progress(&format!(
                "lost-data: substream {}: predicted {want:?}, missing {got:?}",
                s.index
            ));
        }
        if s.index == 0 {
            plotted = want
                .iter()
                .map(|&t| ((t as f64 - (k0 * hs) as f64) / out_step as f64, 1.0))
                .chain(
                    got.iter()
                        .map(|&t| ((t as f64 - (k0 * hs) as f64) / out_step as f64, 0.0)),
                )
                .collect();
        }
    }
    let substreams = snap.substreams.len();
    m.figures.push(Figure::exactly(
        "substreams whose missing heaps are exactly the predicted ones",
        matched as f64,
        "substreams",
        substreams as f64,
    ));
    m.figures.push(Figure::exactly(
        "digitiser heaps the engine counted missing",
        (after.heaps_missing() - before.heaps_missing()) as f64,
        "heaps",
        4.0,
    ));
    // This output's: the engine's other outputs lose heaps of their own.
    let skipped = |st: &fgpu_api::engine::Status| -> Result<u64> {
        Ok(b.services.engine.output_in(st)?.1.heaps_skipped)
    };
    m.figures.push(Figure::exactly(
        "output heaps the engine skipped",
        (skipped(&after)? - skipped(&before)?) as f64,
        "heaps",
        predicted_total as f64,
    ));
    m.plots.push(plot(
        "substream 0: predicted (1) and missing (0) output heaps",
        "output heap after the first drop",
        "",
        vec![points("heaps", plotted)],
    ));
    Ok(m)
}

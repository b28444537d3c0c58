//! Channelisation and SFDR, and linearity: tones stepped across the band, and one tone stepped
//! down in level.

use anyhow::Result;

use super::{channel_axis, level, line, plot, points, spectrum_series, NOISE};
use crate::content::db;
use crate::qualify::analysis::{argmax, sfdr_db};
use crate::qualify::bench::{noise, tone};
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::record::qualify::Figure;

/// The SFDR a channeliser must reach (MeerKAT's requirement, as katgpucbf qualifies it).
const SFDR_DB: f64 = 53.0;
/// The output level of the tone (counts of the 8-bit output).
const TONE_COUNTS: f64 = 110.0;
/// The per-channel noise at the output (complex rms, counts): enough to dither the 8-bit
/// rounding, so that a spur below one count still shows in the mean.
const NOISE_COUNTS: f64 = 0.5;

pub(super) const CHANNELISATION: Check = Check {
    name: "channelisation",
    title: "Channelisation and SFDR",
    requirement: "At every tone position, in both polarisations, the strongest channel is the tone's, and the spurious-free dynamic range is at least 53 dB. (katgpucbf: CBF-REQ-0126)",
    method: "A tone at the centre of a channel, stepped across the band (32 positions in a full run), in both polarisations with independent noise and dither. The cross-power of the polarisations is integrated per channel, so that their independent noise averages away while the tone and any spur it makes stay; SFDR is the tone channel's cross-power over the strongest other channel's. Levels: the tone at 110 counts of the 8-bit output, the noise at 0.5 counts rms, enough to dither the output rounding.",
    run: channelisation,
    needs_ddc: false,
};

fn channelisation(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let n = g.channels;
    // The tone's amplitude that, at the gain putting it at TONE_COUNTS, leaves the noise at
    // NOISE_COUNTS: the processing gain of the PFB decides it (and a narrowband channel's
    // 1/D of the noise power).
    let ratio = b.gain_for(1.0, 1.0); // gain per unit amplitude for one count
    let d = g.band.subsampling() as f64;
    let amplitude =
        (NOISE * TONE_COUNTS / NOISE_COUNTS * ratio * g.full_scale() / d.sqrt()).min(0.5);
    let gain = b.gain_for(amplitude, TONE_COUNTS);
    b.set_gain(gain)?;
    b.clear_delays()?;
    // Tones in the pass band only: a no-discard output's roll-off aliases by design.
    let pass = g.pass_channels();
    let (start, span) = (*pass.start(), pass.end() + 1 - pass.start());
    let (first, last) = (start.max(1), (*pass.end()).min(n - 1).max(1));
    let positions = plan.positions.clamp(1, span.saturating_sub(1).max(1));
    let mut worst: Option<(f64, usize, Vec<f64>)> = None;
    let mut sfdrs = Vec::new();
    let mut right = 0usize;
    let mut misses = Vec::new();
    for i in 0..positions {
        let c = (start + ((i as f64 + 0.5) * span as f64 / positions as f64) as usize)
            .clamp(first, last);
        let f = g.frequency(c as f64);
        let from = b.set_signal(
            vec![tone(f, amplitude), noise(NOISE, 101)],
            vec![tone(f, amplitude), noise(NOISE, 102)],
        )?;
        // Twice the usual: the floor of the cross-power falls as the square root of it.
        let int = b.integrate(from, 2 * plan.spectra)?;
        let cross = int.mean_cross_power();
        let peaks = [
            argmax(&int.mean_spectrum(0)),
            argmax(&int.mean_spectrum(1)),
            argmax(&cross),
        ];
        if peaks.iter().all(|&p| p == c) {
            right += 1;
        } else {
            misses.push(format!("tone in channel {c}: peaks at {peaks:?}"));
        }
        let (sfdr, spur) = sfdr_db(&cross, c);
        progress(&format!(
            "channelisation: {}/{positions} channel {c}: peak {:?}, SFDR {sfdr:.1} dB (spur in channel {})",
            i + 1,
            peaks,
            spur.map_or("-".into(), |s| s.to_string())
        ));
        sfdrs.push((c as f64, sfdr));
        if worst.as_ref().is_none_or(|w| sfdr < w.0) {
            worst = Some((sfdr, c, cross));
        }
    }
    let worst_sfdr = sfdrs.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    let mut m = Measured::default();
    m.figures
        .push(Figure::at_least("worst SFDR", worst_sfdr, "dB", SFDR_DB));
    m.figures.push(Figure::exactly(
        "positions with the peak in the tone's channel (both polarisations)",
        right as f64,
        "of positions",
        positions as f64,
    ));
    m.figures
        .push(Figure::info("tone amplitude", amplitude, "of full scale"));
    m.figures.push(Figure::info("gain", gain, ""));
    m.figures.push(Figure::info(
        "spectra per position",
        2.0 * plan.spectra as f64,
        "",
    ));
    // dsim's signal repeats every buffer: beyond one period the noise repeats too, and the
    // cross-power's floor stops falling.
    if let Ok(d) = b.services.dsim.status() {
        let period = (d.buffer_heaps * d.heap_samples) as u64 / g.step();
        m.figures.push(Figure::info(
            "spectra of distinct noise per position (dsim's buffer)",
            period.min(2 * plan.spectra) as f64,
            "",
        ));
    }
    if !misses.is_empty() {
        m.failure = Some(misses.join("; "));
    }
    let mut p = plot(
        "SFDR per tone position",
        &channel_axis(&g, "tone channel"),
        "SFDR (dB)",
        vec![points("measured", sfdrs)],
    );
    p.hlines.push(level("requirement 53 dB", SFDR_DB));
    m.plots.push(p);
    if let Some((sfdr, c, cross)) = worst {
        let peak = cross[c];
        let mut p = plot(
            &format!("cross-power spectrum at the worst position (channel {c}, SFDR {sfdr:.1} dB)"),
            &channel_axis(&g, "channel"),
            "dB relative to the tone",
            vec![spectrum_series("cross-power", &cross, peak)],
        );
        p.hlines.push(level("-53 dB", -SFDR_DB));
        p.vlines.push(level("tone", c as f64));
        m.plots.push(p);
    }
    Ok(m)
}

/// Largest deviation from the ideal line that passes (dB).
const LINEARITY_DB: f64 = 1.0;
/// Levels visited: 2^-i of full scale.
const LEVELS: i32 = 10;

pub(super) const LINEARITY: Check = Check {
    name: "linearity",
    title: "Linearity",
    requirement: "A tone at 2^-i of full scale, i = 0..9: its output power lies within 1 dB of the ideal line (power proportional to amplitude squared) above the noise.",
    method: "A tone at the centre of channel n/4 in noise of 0.05 full scale; at each level the engine's gain puts the tone near 100 counts (or the noise near 24 counts rms, whichever is lower) and is divided out. The tone's power is its channel's mean power less the median channel's (the noise floor), both polarisations averaged. The ideal line has slope 20 dB per decade of amplitude, its offset fitted to all levels; the absolute level against the theory ((a/2) sum(w) G)^2 is reported too.",
    run: linearity,
    needs_ddc: false,
};

fn linearity(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let c = g.channels / 4;
    let f = g.frequency(c as f64);
    b.clear_delays()?;
    let noise_gain = g.noise_gain(24.0, NOISE);
    let mut measured = Vec::new();
    let mut theory_offsets = Vec::new();
    for i in 0..LEVELS {
        let a = 2f64.powi(-i);
        let gain = b.gain_for(a, 100.0).min(noise_gain);
        b.set_gain(gain)?;
        let from = b.set_signal(
            vec![tone(f, a), noise(NOISE, 201)],
            vec![tone(f, a), noise(NOISE, 202)],
        )?;
        let int = b.integrate(from, plan.spectra)?;
        let mut tone_power = 0.0;
        let mut floor_power = 0.0;
        for pol in 0..2 {
            let s = int.mean_spectrum(pol);
            let mut others: Vec<f64> = s
                .iter()
                .enumerate()
                .filter(|&(k, _)| k.abs_diff(c) > 2)
                .map(|(_, &p)| p)
                .collect();
            others.sort_by(f64::total_cmp);
            let floor = others.get(others.len() / 2).copied().unwrap_or(0.0);
            tone_power += (s[c] - floor) / 2.0;
            floor_power += floor / 2.0;
        }
        let input_db = db(a * a);
        let out_db = db(tone_power / (gain * gain));
        // Theory: (a/2 sum(w) FS)^2 counts^2 per unit gain.
        let theory_db = db((b.gain_for(a, 1.0)).powi(-2));
        theory_offsets.push(out_db - theory_db);
        progress(&format!(
            "linearity: 2^-{i} of full scale: gain {gain:.4}, tone {:.1} dB over the noise, {:.2} dB from theory",
            db(tone_power / floor_power.max(1e-30)),
            out_db - theory_db
        ));
        measured.push((a, input_db, out_db, tone_power > 0.0));
    }
    let usable: Vec<(f64, f64)> = measured
        .iter()
        .filter(|m| m.3 && m.2.is_finite())
        .map(|m| (m.1, m.2 - m.1))
        .collect();
    let offset = usable.iter().map(|p| p.1).sum::<f64>() / usable.len().max(1) as f64;
    let deviations: Vec<(f64, f64)> = measured
        .iter()
        .map(|m| (m.0, m.2 - (m.1 + offset)))
        .collect();
    let worst = deviations.iter().map(|d| d.1.abs()).fold(0.0f64, |a, d| {
        if d.is_finite() {
            a.max(d)
        } else {
            f64::INFINITY
        }
    });
    let mut m = Measured::default();
    m.figures.push(Figure::at_most(
        "largest deviation from the ideal line",
        worst,
        "dB",
        LINEARITY_DB,
    ));
    m.figures.push(Figure::exactly(
        "levels above the noise",
        usable.len() as f64,
        "of levels",
        LEVELS as f64,
    ));
    let mean_theory = theory_offsets.iter().sum::<f64>() / theory_offsets.len().max(1) as f64;
    m.figures.push(Figure::info(
        "mean level against the theory ((a/2) sum(w) G)^2",
        mean_theory,
        "dB",
    ));
    let mut p = plot(
        "output power against input amplitude",
        "tone amplitude (fraction of full scale)",
        "output power / gain^2 (dB)",
        vec![
            points("measured", measured.iter().map(|m| (m.0, m.2)).collect()),
            line(
                "ideal (slope 20 dB/decade)",
                measured.iter().map(|m| (m.0, m.1 + offset)).collect(),
            ),
        ],
    );
    p.x_log = true;
    m.plots.push(p);
    let mut p = plot(
        "deviation from the ideal line",
        "tone amplitude (fraction of full scale)",
        "deviation (dB)",
        vec![points("measured", deviations)],
    );
    p.x_log = true;
    p.hlines.push(level("+1 dB", LINEARITY_DB));
    p.hlines.push(level("-1 dB", -LINEARITY_DB));
    m.plots.push(p);
    Ok(m)
}

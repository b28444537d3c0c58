//! Filter response of a narrowband output's DDC: the passband ripple across the kept band, its
//! edges, and the rejection of every tone outside the band that folds onto a channel centre
//! (katgpucbf's VLBI `test_filter_response`, applied to the output at hand).
//!
//! A tone at sky frequency f reaches the DDC's subsampled output at f - f_c, folded modulo
//! fs/S (S = D, or 2D for an output without discard); so the tones f_k(c) + m fs/S (and, as
//! the input is real, m fs/S - f_k(c)), m != 0, land on channel c's centre f_k(c) after
//! subsampling, and only the DDC filter stops them. Without discard only the pass band is
//! judged: the roll-off beyond it aliases onto itself by design.

use std::ops::RangeInclusive;

use anyhow::Result;

use super::{level, plot, points};
use crate::band::Band;
use crate::content::db;
use crate::qualify::bench::{noise, tone};
use crate::qualify::{Bench, Check, Geometry, Measured, Plan};
use crate::record::qualify::Figure;
use crate::response::design_weights;

pub(super) const FILTER_RESPONSE: Check = Check {
    name: "filter-response",
    title: "Filter response (DDC)",
    requirement: "A narrowband output's DDC filter: the response at channel centres across the pass band (its edge channels included) varies by at most 0.1 dB, and no tone outside the band that folds onto a channel centre of the pass band shows in that channel above -60 dB of an in-band tone of the same amplitude (-80 dB for an output without discard). An output without discard (katgpucbf's VLBI mode) is held to katgpucbf's VLBI filter response: ripple 0.1 dB and aliases -80 dB over its pass band. The kind with discard keeps only the flat middle of its filter, and katgpucbf sets it no alias limit, so its alias limit is this engine's DDC design target (docs/signal-path.md). Outputs without a DDC: not applicable.",
    method: "Tones at the centres of channels across the pass band (its edge channels and the centre n/2 among them: 0 and n-1 with discard), all at once, their amplitudes summing to 0.9 full scale, in both polarisations with independent quiet noise and dither, the gain putting each at 100 counts; a channel's cross-power over (gain x amplitude) squared is its response. Then every frequency within 0 .. fs/2 outside the band that folds onto the centre of one of several of those channels after the DDC's subsampling by S (f_c(c) + m fs/S and m fs/S - f_c(c); S = D, or 2D without discard), in rounds of one tone per channel (their amplitudes summing to 0.9 full scale; one tone a round, at 0.9 full scale, against the -80 dB limit, whose floor must lie lower), at a gain raised so that a leak at the limit would stand at about 30 counts (as far as the noise allows); its channel's response, relative to the in-band response of that channel, is the alias's level. The channels are far apart: a tone leaves no trace in another's. The measurement floor (the cross-power's noise in the channels without a tone) is reported beside it.",
    run: filter_response,
    needs_ddc: true,
};

/// The limits an output kind's DDC is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FilterLimits {
    /// Largest peak-to-peak variation of the response across the kept band, dB.
    pub ripple_db: f64,
    /// Highest alias level, dB relative to an in-band tone.
    pub alias_db: f64,
}

/// The limits for an output of this band; None where there is no DDC filter to judge.
pub(crate) fn limits(band: &Band) -> Option<FilterLimits> {
    match band {
        Band::Wideband => None,
        // The transition falls into the discarded half of the PFB's bins: the kept band is all
        // passband. katgpucbf's ripple limit; its narrowband qualification has no alias limit,
        // so the DDC's design target (60 dB, docs/signal-path.md).
        Band::Narrowband {
            pass_fraction: None,
            ..
        } => Some(FilterLimits {
            ripple_db: 0.1,
            alias_db: -60.0,
        }),
        // No discard (katgpucbf's VLBI mode): the whole of the PFB's band is kept, its roll-off
        // included, so the pass band is judged by katgpucbf's VLBI limits.
        Band::Narrowband { .. } => Some(FilterLimits {
            ripple_db: 0.1,
            alias_db: -80.0,
        }),
    }
}

/// An in-band tone's output level (counts).
const TONE_COUNTS: f64 = 100.0;
/// dsim's noise under the tones (fraction of full scale): little, so that the raised gain of
/// the alias measurement does not clip it.
const QUIET: f64 = 0.002;
/// The noise a channel may carry at the raised gain, counts rms (8-bit output: room below 127).
const NOISE_CAP_COUNTS: f64 = 8.0;
/// Where a leak at the limit should stand at the raised gain, dB below TONE_COUNTS.
const LEAK_HEADROOM_DB: f64 = 10.0;

/// The channels the passband is sampled at: the pass band's two edge channels, the centre n/2
/// and `positions` spread across the pass band.
fn passband_channels(pass: RangeInclusive<usize>, n: usize, positions: usize) -> Vec<usize> {
    let (first, last) = (*pass.start(), *pass.end());
    let span = (last + 1 - first) as f64;
    let mut c: Vec<usize> = (0..positions)
        .map(|i| first + ((i as f64 + 0.5) * span / positions as f64) as usize)
        .chain([first, n / 2, last])
        .filter(|c| pass.contains(c))
        .collect();
    c.sort_unstable();
    c.dedup();
    c
}

/// The frequencies in (0, fs/2), outside the band's edges, that land on channel `c`'s centre
/// after the DDC's subsampling by S; one channel's width clear of DC, Nyquist and the band.
pub(crate) fn aliases_of(g: &Geometry, c: usize) -> Vec<f64> {
    let fs = g.adc_rate;
    let d = g.band.subsampling() as f64;
    let f = g.frequency(c as f64);
    let (lo, hi) = g.band.edges_hz(fs, g.channels);
    let width = g.band.channel_width(fs, g.channels);
    let orders = (d as i64) + 1;
    let mut out: Vec<f64> = (-orders..=orders)
        .filter(|&m| m != 0)
        .flat_map(|m| {
            let shift = m as f64 * fs / d;
            [f + shift, shift - f]
        })
        .filter(|&a| a > width && a < fs / 2.0 - width && (a < lo - width || a > hi + width))
        .collect();
    out.sort_by(f64::total_cmp);
    out.dedup_by(|a, b| (*a - *b).abs() < width / 2.0);
    out
}

/// The largest sum of tone amplitudes one measurement plays (fraction of full scale): the tones
/// together never clip the digitiser.
const PEAK: f64 = 0.9;

/// Tones (frequency, the channel it lands on), each of `amplitude`, all at once in both
/// polarisations (independent quiet noise), integrated: per tone its channel's mean cross-power,
/// and the median of the channels without a tone (the floor). The tones land on channels far
/// apart, where the PFB leaves no trace of one in another's channel.
fn measure(
    b: &Bench,
    plan: &Plan,
    tones: &[(f64, usize)],
    amplitude: f64,
    gain_from: u64,
) -> Result<(Vec<f64>, f64)> {
    let signal = |seed| {
        tones
            .iter()
            .map(|&(f, _)| tone(f, amplitude))
            .chain([noise(QUIET, seed)])
            .collect::<Vec<_>>()
    };
    let from = b.set_signal(signal(901), signal(902))?;
    let int = b.integrate(from.max(gain_from), plan.spectra)?;
    let cross = int.mean_cross_power();
    let toned: Vec<usize> = tones.iter().map(|t| t.1).collect();
    let mut others: Vec<f64> = cross
        .iter()
        .enumerate()
        .filter(|(k, _)| !toned.contains(k))
        .map(|(_, &p)| p)
        .collect();
    others.sort_by(f64::total_cmp);
    let floor = others.get(others.len() / 2).copied().unwrap_or(0.0);
    Ok((toned.iter().map(|&c| cross[c]).collect(), floor))
}

/// The aliases of every target channel in rounds of at most one per channel, so that each
/// round's tones land on different channels.
fn alias_rounds(g: &Geometry, targets: &[usize]) -> Vec<Vec<(f64, usize)>> {
    let per: Vec<Vec<f64>> = targets.iter().map(|&c| aliases_of(g, c)).collect();
    let rounds = per.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds)
        .map(|j| {
            targets
                .iter()
                .zip(&per)
                .filter_map(|(&c, a)| a.get(j).map(|&f| (f, c)))
                .collect()
        })
        .collect()
}

fn filter_response(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let g = b.geometry;
    let Some(lim) = limits(&g.band) else {
        return Ok(Measured::not_run(format!(
            "a {} output has no DDC filter",
            g.band.kind()
        )));
    };
    let n = g.channels;
    let mhz = |f: f64| f / 1e6;
    b.clear_delays()?;
    // The passband: a tone at every channel sampled, all at once, at the gain that puts each
    // at TONE_COUNTS. A response is a channel's power per unit gain and amplitude, squared.
    let pass_range = g.pass_channels();
    let (first, last) = (*pass_range.start(), *pass_range.end());
    let channels = passband_channels(pass_range, n, plan.positions.max(2));
    let a0 = PEAK / channels.len() as f64;
    let g0 = b.gain_for(a0, TONE_COUNTS);
    let from = b.set_gain(g0)?;
    let tones: Vec<(f64, usize)> = channels
        .iter()
        .map(|&c| (g.frequency(c as f64), c))
        .collect();
    let (powers, _) = measure(b, plan, &tones, a0, from)?;
    let mut pass = Vec::new();
    for (&c, p) in channels.iter().zip(powers) {
        let r = p / (g0 * g0 * a0 * a0);
        progress(&format!(
            "filter-response: passband channel {c} ({:.4} MHz): {:.4} dB",
            mhz(g.frequency(c as f64)),
            db(r)
        ));
        pass.push((c, r));
    }
    let centre = pass
        .iter()
        .find(|p| p.0 == n / 2)
        .map_or(1.0, |p| p.1)
        .max(1e-300);
    let rel: Vec<(usize, f64)> = pass.iter().map(|&(c, r)| (c, db(r / centre))).collect();
    let top = rel.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
    let bottom = rel.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let mut m = Measured::default();
    m.figures.push(Figure::at_most(
        "passband ripple (peak to peak over the channels sampled)",
        top - bottom,
        "dB",
        lim.ripple_db,
    ));
    for &(c, label) in &[(first, "lower"), (last, "upper")] {
        if let Some(&(_, r)) = rel.iter().find(|r| r.0 == c) {
            m.figures.push(Figure::at_most(
                &format!("{label} pass band edge (channel {c}) against the centre, |dB|"),
                r.abs(),
                "dB",
                lim.ripple_db,
            ));
        }
    }
    // The aliases, in rounds of one tone per target channel, at a gain raised to see a leak at
    // the limit; capped by the noise it lifts.
    let targets: Vec<usize> = {
        let k = (plan.positions / 2).max(2);
        let mut t: Vec<usize> = channels
            .iter()
            .copied()
            .step_by(channels.len().div_ceil(k).max(1))
            .chain([first, last])
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    };
    // A limit of -80 dB needs the floor further down than the tones of a shared round allow
    // (each at 0.9 full scale over their number): one tone a round then.
    let per_round = if lim.alias_db < -70.0 {
        1
    } else {
        targets.len()
    };
    let rounds: Vec<Vec<(f64, usize)>> = alias_rounds(&g, &targets)
        .into_iter()
        .flat_map(|r| r.chunks(per_round).map(<[_]>::to_vec).collect::<Vec<_>>())
        .collect();
    let a1 = PEAK / rounds.iter().map(Vec::len).max().unwrap_or(1).max(1) as f64;
    let w = design_weights(g.band.pfb_design_channels(n), g.taps, g.filter);
    let energy: f64 = w.iter().map(|x| x * x).sum();
    let lsb = 1.0 / g.full_scale();
    let input_rms = (QUIET * QUIET + lsb * lsb / 12.0).sqrt() * g.full_scale();
    let noise_counts_per_gain = input_rms * (energy / g.band.subsampling() as f64).sqrt();
    let boost = 10f64.powf((-lim.alias_db - LEAK_HEADROOM_DB) / 20.0);
    let g1 = (b.gain_for(a1, TONE_COUNTS) * boost)
        .min(NOISE_CAP_COUNTS / noise_counts_per_gain.max(1e-30));
    let from = b.set_gain(g1)?;
    let mut aliases = Vec::new();
    let mut floors = Vec::new();
    for (i, round) in rounds.iter().enumerate() {
        let (powers, floor) = measure(b, plan, round, a1, from)?;
        for (&(f, c), p) in round.iter().zip(powers) {
            let inband = pass
                .iter()
                .find(|p| p.0 == c)
                .map_or(centre, |p| p.1)
                .max(1e-300);
            let unit = g1 * g1 * a1 * a1 * inband;
            let leak = db(p / unit);
            let floor_db = db(floor / unit);
            progress(&format!(
                "filter-response: round {}/{}: tone at {:.4} MHz, onto channel {c}: {leak:.1} dB (floor {floor_db:.1} dB)",
                i + 1,
                rounds.len(),
                mhz(f)
            ));
            aliases.push((f, c, leak));
            floors.push(floor_db);
        }
    }
    let worst = aliases.iter().max_by(|a, b| a.2.total_cmp(&b.2)).copied();
    match worst {
        Some((f, c, leak)) => {
            m.figures.push(Figure::at_most(
                &format!("strongest alias ({:.4} MHz onto channel {c})", mhz(f)),
                leak,
                "dB",
                lim.alias_db,
            ));
        }
        None => m.failure = Some("no frequency outside the band folds onto it".into()),
    }
    m.figures.push(Figure::info(
        "aliases measured",
        aliases.len() as f64,
        "tones",
    ));
    let median_floor = {
        let mut f = floors.clone();
        f.sort_by(f64::total_cmp);
        f.get(f.len() / 2).copied().unwrap_or(f64::NAN)
    };
    m.figures.push(Figure::info(
        "measurement floor (median of the other channels' cross-power)",
        median_floor,
        "dB",
    ));
    m.figures.push(Figure::info(
        "gain raised for the aliases by (per unit amplitude)",
        db((g1 * a1 / (g0 * a0)).powi(2)),
        "dB",
    ));
    let (lo, hi) = g.band.edges_hz(g.adc_rate, n);
    // The band's edges, and a no-discard output's pass band within them.
    let mut edges = vec![level("band edge", mhz(lo)), level("band edge", mhz(hi))];
    if g.band.pass_fraction().is_some() {
        let (p_lo, p_hi) = g.band.pass_band_hz(g.adc_rate, n);
        edges.push(level("pass band edge", mhz(p_lo)));
        edges.push(level("pass band edge", mhz(p_hi)));
    }
    let pass_points: Vec<(f64, f64)> = rel
        .iter()
        .map(|&(c, r)| (mhz(g.frequency(c as f64)), r))
        .collect();
    let mut p = plot(
        "DDC filter response: the band's channel centres, and the tones that fold onto them",
        "sky frequency (MHz)",
        "dB relative to the band's centre channel",
        vec![
            points(
                "in the band (tone at a channel centre)",
                pass_points.clone(),
            ),
            points(
                "outside the band (in the channel it folds onto)",
                aliases.iter().map(|a| (mhz(a.0), a.2)).collect(),
            ),
        ],
    );
    p.hlines.push(level(
        &format!("alias limit {} dB", lim.alias_db),
        lim.alias_db,
    ));
    p.vlines.extend(edges.clone());
    m.plots.push(p);
    let mut p = plot(
        "passband: response at channel centres across the band",
        "sky frequency (MHz)",
        "dB relative to the band's centre channel",
        vec![points("channel centres", pass_points)],
    );
    p.vlines.extend(edges.clone());
    p.hlines.push(level(
        &format!("+{} dB", lim.ripple_db / 2.0),
        lim.ripple_db / 2.0,
    ));
    p.hlines.push(level(
        &format!("-{} dB", lim.ripple_db / 2.0),
        -lim.ripple_db / 2.0,
    ));
    m.plots.push(p);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::band::fold;

    fn geometry(band: Band) -> Geometry {
        Geometry {
            channels: 256,
            taps: 4,
            spectra_per_heap: 64,
            adc_rate: 16e6,
            sample_bits: 8,
            max_delay_samples: 1600.0,
            chunk_samples: 1 << 20,
            filter: crate::record::FilterDesign::default(),
            output_bits: crate::feng_raw::OutputBits::Eight,
            band,
        }
    }

    /// Every alias lies outside the band and lands on the channel's centre once mixed down and
    /// subsampled (folded modulo fs/D onto the baseband of the channel).
    #[test]
    fn aliases_fold_onto_the_channel_centre() {
        // 2.25 MHz at 16 Msample/s, D = 8: the band 1.75 .. 2.75 MHz.
        let band = Band::Narrowband {
            mixer_word: (2.25e6 / 16e6 * 4_294_967_296.0f64).round() as u32,
            decimation: 8,
            ddc_taps: 96,
            pass_fraction: None,
        };
        // fs/2 holds D/2 images of the band's fs/D spacing on each side of the mirror.
        assert_aliases_fold(band, &[0, 17, 128, 255], 8.0, 6);
    }

    /// Every alias of each of `channels` lies in 0 .. fs/2 outside the band, at least `least`
    /// of them, and one of the real tone's components, mixed down, folds onto the channel's
    /// centre modulo fs/S.
    fn assert_aliases_fold(band: Band, channels: &[usize], s: f64, least: usize) {
        let g = geometry(band);
        let fs = g.adc_rate;
        let (lo, hi) = band.edges_hz(fs, g.channels);
        let f_c = band.centre_hz(fs).unwrap();
        for &c in channels {
            let want = g.frequency(c as f64) - f_c;
            let a = aliases_of(&g, c);
            assert!(a.len() >= least, "channel {c}: {a:?}");
            for f in a {
                assert!(f > 0.0 && f < fs / 2.0 && (f < lo || f > hi), "{f}");
                let on = [f, -f].iter().any(|&x| {
                    let base = (x - f_c).rem_euclid(fs / s);
                    let d = (base - want.rem_euclid(fs / s)).abs();
                    d < 1e-6 || (fs / s - d) < 1e-6
                });
                assert!(on, "channel {c}: {f} does not fold onto it");
                assert_eq!(fold(f, fs), f);
            }
        }
    }

    #[test]
    fn limits_by_kind() {
        assert_eq!(limits(&Band::Wideband), None);
        let nb = Band::Narrowband {
            mixer_word: 1 << 29,
            decimation: 8,
            ddc_taps: 96,
            pass_fraction: None,
        };
        assert_eq!(
            limits(&nb),
            Some(FilterLimits {
                ripple_db: 0.1,
                alias_db: -60.0
            })
        );
    }

    /// Every alias of every target is measured once, and no round puts two tones on a channel.
    #[test]
    fn alias_rounds_cover_every_alias_one_per_channel() {
        let band = Band::Narrowband {
            mixer_word: (2.25e6 / 16e6 * 4_294_967_296.0f64).round() as u32,
            decimation: 8,
            ddc_taps: 96,
            pass_fraction: None,
        };
        let g = geometry(band);
        let targets = [0, 64, 128, 255];
        let rounds = alias_rounds(&g, &targets);
        let mut all: Vec<(u64, usize)> = rounds
            .iter()
            .flatten()
            .map(|&(f, c)| (f as u64, c))
            .collect();
        for r in &rounds {
            let mut c: Vec<usize> = r.iter().map(|t| t.1).collect();
            c.dedup();
            assert_eq!(c.len(), r.len(), "{r:?}");
        }
        let mut want: Vec<(u64, usize)> = targets
            .iter()
            .flat_map(|&c| aliases_of(&g, c).into_iter().map(move |f| (f as u64, c)))
            .collect();
        all.sort_unstable();
        want.sort_unstable();
        assert_eq!(all, want);
        let most = targets.iter().map(|&c| aliases_of(&g, c).len()).max();
        assert_eq!(Some(rounds.len()), most);
    }

    #[test]
    fn passband_takes_the_edges_and_the_centre() {
        let c = passband_channels(0..=1023, 1024, 8);
        assert_eq!(c.first(), Some(&0));
        assert_eq!(c.last(), Some(&1023));
        assert!(c.contains(&512));
        assert_eq!(c.len(), 11);
        // A no-discard output's pass band: its own edges, nothing in the roll-off.
        let c = passband_channels(206..=818, 1024, 8);
        assert_eq!((c.first(), c.last()), (Some(&206), Some(&818)));
        assert!(c.contains(&512));
    }

    /// A no-discard output (D 8, so subsampled by 16): the limits are katgpucbf's VLBI ones,
    /// and every alias of a pass-band channel folds onto it modulo fs/(2D), from outside the
    /// band.
    #[test]
    fn no_discard_aliases_fold_modulo_the_output_rate() {
        let band = Band::Narrowband {
            mixer_word: (2.25e6 / 16e6 * 4_294_967_296.0f64).round() as u32,
            decimation: 8,
            ddc_taps: 256,
            pass_fraction: Some(0.6),
        };
        assert_eq!(
            limits(&band),
            Some(FilterLimits {
                ripple_db: 0.1,
                alias_db: -80.0
            })
        );
        // fs/2 holds about 2D/2 images of the fs/(2D) band on each side of the mirror.
        let pass = band.pass_channels(256);
        assert_aliases_fold(band, &[*pass.start(), 128, *pass.end()], 16.0, 12);
    }
}

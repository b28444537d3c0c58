//! The no-discard ("VLBI") narrowband output's DDC filter (docs/signal-path.md §Narrowband without
//! discard), as katgpucbf designs it: the band fs/(2D) is subsampled by 2D, so that the PFB's n
//! points cover exactly the band and every bin is kept. Nothing is left to hide the filter's
//! roll-off in, so the filter is a Parks-McClellan (remez) design, flat over the user's pass band
//! and with its roll-off placed symmetrically about the output Nyquist frequency fs/(4D): after
//! subsampling half of the roll-off aliases, but onto the other half of it, never onto the pass
//! band.
//!
//! In units of the output rate fs/(2D) (katgpucbf's `fs = subsampling`): pass band 0 .. p/2, stop
//! band 1 - p/2 .. 2D/2, where p is the pass band's fraction of the band; weights `weight` and 1.
//! katgpucbf scales the taps by sqrt(2D); here the taps keep remez's unit passband gain and the
//! engine's gain carries the scale (`gain::narrowband_gain` with the subsampling factor).

use pm_remez::{pm_remez, Band, PMParameters};

use super::ddc::filter_response;
use super::{bail, Result};

/// katgpucbf's default passband weight (relative to the stopband's 1).
pub const DEFAULT_WEIGHT_PASS: f64 = 0.005;

/// The default DDC length in multiples of the decimation: katgpucbf's 16 taps per subsampled
/// sample, 32 D (256, 512 or 1024 taps).
pub const DEFAULT_TAPS_PER_DECIMATION: usize = 32;

/// The Remez exchange's iteration limit (katgpucbf's `maxiter`).
const MAX_ITERATIONS: usize = 1000;

/// The decimations a no-discard output takes: 8 (katgpucbf's VLBI mode, 107 MHz of 1712
/// Msample/s). For 16 and 32 the default designs (512 and 1024 taps, a stopband error 2e-4 of the
/// passband's) lose pm-remez's float64 Remez exchange for some pass bands ("not enough
/// alternating error extrema"), and its arbitrary-precision mode takes 26 s for D 8 already.
pub const DECIMATIONS: [usize; 1] = [8];

/// Checks a no-discard output's decimation, with a sentence saying what is wrong.
pub fn check_decimation(decimation: usize) -> Result<()> {
    if !DECIMATIONS.contains(&decimation) {
        bail!("a no-discard narrowband output takes decimation 8, not {decimation}");
    }
    Ok(())
}

/// The flat part of a no-discard output's band and how the design weighs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PassBand {
    /// p: the pass band's width as a fraction of the output band fs/(2D), in (0, 1).
    pub fraction: f64,
    /// The pass band's weight in the design, relative to the stop band's 1.
    pub weight: f64,
}

impl PassBand {
    /// The pass band of `pass_hz` Hz of a band `bandwidth_hz` wide, with katgpucbf's default
    /// weight; checked.
    pub fn new(pass_hz: f64, bandwidth_hz: f64) -> Result<Self> {
        let p = Self {
            fraction: pass_hz / bandwidth_hz,
            weight: DEFAULT_WEIGHT_PASS,
        };
        p.validate()?;
        Ok(p)
    }

    /// Checks the fraction and weight, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        if !(self.fraction > 0.0 && self.fraction < 1.0) {
            bail!(
                "the pass bandwidth must be more than 0 and less than the band, not {} of it",
                self.fraction
            );
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            bail!(
                "the pass band's weight must be positive, not {}",
                self.weight
            );
        }
        Ok(())
    }
}

/// The default no-discard DDC length for `decimation`: [`DEFAULT_TAPS_PER_DECIMATION`] times it.
pub fn default_taps(decimation: usize) -> usize {
    DEFAULT_TAPS_PER_DECIMATION * decimation
}

/// The band edges in cycles per ADC sample for decimation D: (pass edge, stop edge), i.e.
/// p/2 and 1 - p/2 output-rate units, the output rate being 1/(2D).
pub fn band_edges(decimation: usize, pass: PassBand) -> (f64, f64) {
    let unit = 1.0 / (2 * decimation) as f64;
    (
        0.5 * pass.fraction * unit,
        (1.0 - 0.5 * pass.fraction) * unit,
    )
}

/// The DDC filter h of `taps` taps for a no-discard output of decimation `decimation`
/// (subsampling 2D): katgpucbf's `scipy.signal.remez(taps, [0, p/2, 1 - p/2, D], [1, 0],
/// weight=[weight, 1], fs=2D)`, without its sqrt(2D) scale.
pub fn ddc_filter(decimation: usize, taps: usize, pass: PassBand) -> Result<Vec<f64>> {
    check_decimation(decimation)?;
    pass.validate()?;
    if !(2..=super::ddc::MAX_DDC_TAPS).contains(&taps) {
        bail!(
            "the DDC needs 2 to {} taps, not {taps}",
            super::ddc::MAX_DDC_TAPS
        );
    }
    let (pass_edge, stop_edge) = band_edges(decimation, pass);
    let bands = (|| {
        Ok::<_, pm_remez::error::Error>(vec![
            Band::new(0.0, pass_edge)?,
            Band::new(stop_edge, 0.5)?,
        ])
    })();
    let middle = 0.5 * (pass_edge + stop_edge);
    let desired = move |f: f64| if f < middle { 1.0 } else { 0.0 };
    let weight = move |f: f64| if f < middle { pass.weight } else { 1.0 };
    let design = bands
        .and_then(|bands| PMParameters::new(taps, bands, desired, weight))
        .and_then(|mut params| {
            use pm_remez::ParametersBuilder;
            params.set_max_iterations(MAX_ITERATIONS);
            pm_remez(&params)
        });
    match design {
        Ok(d) => Ok(d.impulse_response),
        Err(e) => bail!("the no-discard DDC filter could not be designed: {e}"),
    }
}

/// How a DDC filter meets a no-discard output's requirements, from its response on a fine grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterFigures {
    /// Peak-to-peak ripple of |H|^2 over the pass band, dB (of power).
    pub ripple_db: f64,
    /// The strongest response that aliases onto the pass band after subsampling by 2D, relative
    /// to the pass band's peak, dB.
    pub alias_db: f64,
}

/// Measures `h` for decimation D and pass band `pass`: |H(f)| on `points` frequencies across the
/// pass band for the ripple, and on as many across each alias of the pass band, f + k/(2D) for
/// every k != 0 up to the input's Nyquist frequency, for the worst alias.
pub fn figures(h: &[f64], decimation: usize, pass: PassBand, points: usize) -> FilterFigures {
    let (pass_edge, _) = band_edges(decimation, pass);
    let db = |f: f64| 20.0 * filter_response(h, f).norm().log10();
    let grid = (0..=points).map(|i| pass_edge * (2.0 * i as f64 / points as f64 - 1.0));
    let passband: Vec<f64> = grid.clone().map(db).collect();
    let top = passband.iter().cloned().fold(f64::MIN, f64::max);
    let bottom = passband.iter().cloned().fold(f64::MAX, f64::min);
    let rate = 1.0 / (2 * decimation) as f64;
    let mut alias = f64::MIN;
    for k in 1..=decimation {
        for f in grid.clone() {
            // The response is symmetric (real taps), so f + k rate covers the negative aliases too.
            let g = f + k as f64 * rate;
            if g <= 0.5 {
                alias = alias.max(db(g));
            }
        }
    }
    FilterFigures {
        ripple_db: top - bottom,
        alias_db: alias - top,
    }
}

/// The channels of n that form the pass band, as katgpucbf's qualification counts them:
/// ceil(n/2 (1 - p)) up to and including floor(n/2 (1 + p)).
pub fn pass_channels(channels: usize, pass: PassBand) -> std::ops::Range<i64> {
    let half = channels as f64 / 2.0;
    let lo = (half * (1.0 - pass.fraction)).ceil() as i64;
    let hi = (half * (1.0 + pass.fraction)).floor() as i64 + 1;
    lo..hi
}

/// katgpucbf's reading of a swept-tone response (qualification, test_vlbi): `power[i]` is what a
/// tone at the centre of channel c = i - n/2 (c from -n/2 to 3n/2, twice the band; channel n/2
/// the centre) gives in channel c mod n, where it lands. Ripple: peak to peak over the tones in
/// the pass band channels; alias: the strongest tone from outside them that lands in one of them,
/// relative to the strongest tone of all.
pub fn sweep_figures(power: &[f64], channels: usize, pass: PassBand) -> FilterFigures {
    let n = channels as i64;
    let band = pass_channels(channels, pass);
    let top = power.iter().cloned().fold(f64::MIN, f64::max);
    let db = |p: f64| 10.0 * (p / top).log10();
    let (mut hi, mut lo, mut alias) = (f64::MIN, f64::MAX, f64::MIN);
    for (i, &p) in power.iter().enumerate() {
        let c = i as i64 - n / 2;
        if band.contains(&c) {
            hi = hi.max(db(p));
            lo = lo.min(db(p));
        } else if band.contains(&c.rem_euclid(n)) {
            alias = alias.max(db(p));
        }
    }
    FilterFigures {
        ripple_db: hi - lo,
        alias_db: alias,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The qualification's case (katgpucbf's test_vlbi): 1712 Msample/s, 107 MHz out (D 8), a
    /// 64 MHz pass band.
    fn vlbi_pass() -> PassBand {
        PassBand::new(64e6, 1712e6 / 16.0).unwrap()
    }

    #[test]
    // One decimation for now: D 16 and 32 join the list once their designs converge.
    #[allow(clippy::single_element_loop)]
    fn the_design_meets_katgpucbfs_requirements() {
        for (d, pass) in [(8, vlbi_pass())] {
            let h = ddc_filter(d, default_taps(d), pass).unwrap();
            assert_eq!(h.len(), default_taps(d));
            let f = figures(&h, d, pass, 512);
            println!(
                "no-discard D {d}, L {}, pass {:.3} of the band: ripple {:.4} dB, worst alias {:.1} dB",
                h.len(),
                pass.fraction,
                f.ripple_db,
                f.alias_db
            );
            assert!(f.ripple_db < 0.1, "D {d}: ripple {} dB", f.ripple_db);
            assert!(f.alias_db < -80.0, "D {d}: alias {} dB", f.alias_db);
        }
    }

    /// katgpucbf's taps for D 8 (256 taps, p = 64/107), from `scipy.signal.remez` 1.16 as
    /// `_generate_ddc_weights_no_discard` calls it, before its sqrt(16) scale: both ends and the
    /// middle. scipy works on a grid and stops 4% short of the minimax error that pm-remez
    /// reaches, so the taps agree to 7.4e-5 of the largest (4.3e-6), not to float32 rounding.
    const SCIPY_D8: [(usize, f64); 8] = [
        (0, 4.33142897e-07),
        (1, 6.64828231e-07),
        (2, 1.14467209e-06),
        (3, 1.81927192e-06),
        (126, 0.05790464),
        (127, 0.05859941),
        (128, 0.05859941),
        (129, 0.05790464),
    ];

    #[test]
    fn the_taps_are_katgpucbfs() {
        let h = ddc_filter(8, 256, vlbi_pass()).unwrap();
        for (k, want) in SCIPY_D8 {
            assert!(
                (h[k] - want).abs() < 5e-6,
                "tap {k}: {} against scipy's {want}",
                h[k]
            );
        }
        let sum: f64 = h.iter().sum();
        assert!((sum - 0.9999206976).abs() < 1e-4, "DC gain {sum}");
        if let Ok(path) = std::env::var("NO_DISCARD_TAPS") {
            let text: Vec<String> = h.iter().map(|v| format!("{v:.17e}")).collect();
            std::fs::write(path, text.join("\n")).unwrap();
        }
    }

    #[test]
    fn a_too_short_filter_fails_the_requirements() {
        // The measurement can fail: 4 taps per subsampled sample leave aliases far above -80 dB.
        let pass = vlbi_pass();
        let h = ddc_filter(8, 64, pass).unwrap();
        assert!(figures(&h, 8, pass, 512).alias_db > -80.0);
    }

    #[test]
    fn bad_pass_bands_are_refused() {
        assert!(PassBand::new(0.0, 1e6).is_err());
        assert!(PassBand::new(1e6, 1e6).is_err());
        assert!(PassBand::new(f64::NAN, 1e6).is_err());
        assert!(ddc_filter(8, 1, vlbi_pass()).is_err());
        let e = ddc_filter(16, 512, vlbi_pass()).unwrap_err();
        assert!(e.0.contains("decimation 8, not 16"), "{e}");
    }
}

//! The suite's arithmetic, apart from any I/O so that it is tested on its own: spurious-free
//! dynamic range, straight-line fits, phase slopes across the band, the time a ramp crosses its
//! half-way point, and the widths of a channel's response.

use num_complex::Complex64;

use crate::content::db;

/// Spurious-free dynamic range of a power spectrum: the peak channel's power over the strongest
/// other channel's, in dB; and that channel.
pub fn sfdr_db(power: &[f64], peak: usize) -> (f64, Option<usize>) {
    let spur = power
        .iter()
        .enumerate()
        .filter(|&(c, _)| c != peak)
        .max_by(|a, b| a.1.total_cmp(b.1));
    match spur {
        Some((c, &p)) if p > 0.0 => (db(power[peak] / p), Some(c)),
        // No power outside the peak at all: the range is at least the peak over one LSB^2.
        Some((c, _)) => (db(power[peak].max(1.0)), Some(c)),
        None => (f64::INFINITY, None),
    }
}

/// The strongest channel.
pub fn argmax(power: &[f64]) -> usize {
    power
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(c, _)| c)
}

/// Least-squares line y = a + b x: (a, b).
pub fn fit_line(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    if points.is_empty() {
        return (0.0, 0.0);
    }
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x / n, b + y / n));
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(a, b), &(x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - b * mx, b)
}

/// A straight phase across channels, phi_k = offset + slope k (radians), fitted to cross-powers
/// without unwrapping: a first slope from the mean product of neighbours (which no wrap
/// disturbs), then the line fitted by least squares to what is left of each channel's phase once
/// that slope and the mean phase are taken out (small, so it does not wrap), each channel
/// weighted by its magnitude; the offset from the de-rotated sum.
///
/// The neighbour products alone make a poor slope: their mean is one of differences, which
/// telescopes, so each channel's own error enters it undiminished by the number of channels,
/// and more where a channel's magnitude goes with its error, as when the phase turns within the
/// integration (a delay rate). The least-squares line averages every channel's error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhaseLine {
    /// Phase at channel 0, radians in (-pi, pi].
    pub offset: f64,
    /// Radians per channel.
    pub slope: f64,
}

impl PhaseLine {
    pub fn fit(cross: &[Complex64], channels: &[usize]) -> Self {
        let mut lag = Complex64::default();
        for w in channels.windows(2) {
            if w[1] == w[0] + 1 {
                lag += cross[w[1]] * cross[w[0]].conj() / (cross[w[0]].norm() + 1e-300);
            }
        }
        let derotated = |slope: f64| -> Complex64 {
            channels
                .iter()
                .map(|&k| cross[k] * Complex64::from_polar(1.0, -slope * k as f64))
                .sum()
        };
        let rough = lag.arg();
        let mean = derotated(rough).arg();
        // (channel, phase left, weight) per channel.
        let left: Vec<(f64, f64, f64)> = channels
            .iter()
            .map(|&k| {
                let z = cross[k] * Complex64::from_polar(1.0, -(rough * k as f64 + mean));
                (k as f64, z.arg(), z.norm())
            })
            .collect();
        let w: f64 = left.iter().map(|p| p.2).sum();
        let slope = if w > 0.0 {
            let km = left.iter().map(|p| p.2 * p.0).sum::<f64>() / w;
            let rm = left.iter().map(|p| p.2 * p.1).sum::<f64>() / w;
            let (sxy, sxx) = left.iter().fold((0.0, 0.0), |(a, b), &(k, r, w)| {
                (a + w * (k - km) * (r - rm), b + w * (k - km) * (k - km))
            });
            rough + if sxx > 0.0 { sxy / sxx } else { 0.0 }
        } else {
            rough
        };
        Self {
            offset: derotated(slope).arg(),
            slope,
        }
    }

    /// The line's phase at channel k, radians.
    pub fn at(&self, k: usize) -> f64 {
        self.offset + self.slope * k as f64
    }

    /// Each channel's phase less the line's, wrapped to (-pi, pi].
    pub fn residuals(&self, cross: &[Complex64], channels: &[usize]) -> Vec<(usize, f64)> {
        channels
            .iter()
            .map(|&k| {
                let r = cross[k] * Complex64::from_polar(1.0, -self.at(k));
                (k, r.arg())
            })
            .collect()
    }
}

/// Each channel's phase less a model's, wrapped to (-pi, pi].
pub fn phase_errors(
    cross: &[Complex64],
    channels: &[usize],
    model: impl Fn(usize) -> f64,
) -> Vec<(usize, f64)> {
    channels
        .iter()
        .map(|&k| (k, (cross[k] * Complex64::from_polar(1.0, -model(k))).arg()))
        .collect()
}

/// The x at which a rising sequence of (x, y) first reaches `level`, by linear interpolation
/// between the samples either side.
pub fn crossing(points: &[(f64, f64)], level: f64) -> Option<f64> {
    points.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        (y0 < level && y1 >= level).then(|| x0 + (level - y0) / (y1 - y0) * (x1 - x0))
    })
}

/// The full width (in channels) over which a response, sampled at (offset, dB) points sorted by
/// offset and peaking near 0, stays above `level_db`: the distance between the crossings either
/// side of the peak, interpolated.
pub fn width_at(points: &[(f64, f64)], level_db: f64) -> Option<f64> {
    let peak = points
        .iter()
        .enumerate()
        .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1))?
        .0;
    let rising = crossing(&points[..=peak], level_db)?;
    let falling: Vec<(f64, f64)> = points[peak..].iter().rev().copied().collect();
    let falling = crossing(&falling, level_db)?;
    Some(falling - rising)
}

/// Radians to degrees.
pub fn deg(rad: f64) -> f64 {
    rad.to_degrees()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sfdr_is_peak_over_the_strongest_other_channel() {
        let p = [1.0, 2.0, 1e6, 10.0, 3.0];
        let (d, spur) = sfdr_db(&p, 2);
        assert!((d - 50.0).abs() < 1e-9);
        assert_eq!(spur, Some(3));
        assert_eq!(argmax(&p), 2);
    }

    #[test]
    fn fits_a_line() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 - 2.0 * i as f64)).collect();
        let (a, b) = fit_line(&pts);
        assert!((a - 3.0).abs() < 1e-12 && (b + 2.0).abs() < 1e-12);
    }

    #[test]
    fn phase_line_fits_through_wraps() {
        // A slope of 0.3 rad per channel wraps many times over 100 channels.
        let cross: Vec<Complex64> = (0..100)
            .map(|k| Complex64::from_polar(2.0, 1.1 + 0.3 * k as f64))
            .collect();
        let ch: Vec<usize> = (5..95).collect();
        let l = PhaseLine::fit(&cross, &ch);
        assert!((l.slope - 0.3).abs() < 1e-12, "{l:?}");
        assert!((l.offset - 1.1).abs() < 1e-9, "{l:?}");
        assert!(l.residuals(&cross, &ch).iter().all(|r| r.1.abs() < 1e-9));
        let e = phase_errors(&cross, &ch, |k| 1.1 + 0.3 * k as f64 + 0.01);
        assert!(e.iter().all(|r| (r.1 + 0.01).abs() < 1e-9));
    }

    /// A small deterministic generator for the test below (splitmix64).
    struct Mix(u64);
    impl Mix {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
        /// Exponentially distributed with mean 1: the power of one spectrum's noise in a channel.
        fn power(&mut self) -> f64 {
            -(1.0 - self.uniform()).ln()
        }
    }

    /// What a delay rate does to an integration: channel k (sky frequency f0 + k df) turns by
    /// 2 pi f d(t) / fs, d drifting linearly over the spectra summed, each spectrum weighted by
    /// its own noise power. The sum's phase is the line at the window's middle, plus a small
    /// error per channel whose size and magnitude go together. The slope must come out within
    /// an eighth of a narrowband output's delay-rate limit (0.08 samples; 2nD / 2 pi samples per
    /// radian per channel; the demo's band: 1024 channels, D = 8, 2.25 MHz at 16 Msample/s, one
    /// sample of drift per window). The neighbour products alone, the slope before its
    /// least-squares refinement, missed it.
    #[test]
    fn phase_line_slope_is_unbiased_by_a_drift_within_the_integration() {
        let (n, spectra, fs) = (1024usize, 1000usize, 16e6);
        let per_radian = (2 * n * 8) as f64 / std::f64::consts::TAU;
        let df = fs / (2 * n * 8) as f64;
        let f0 = 2.25e6 - (n / 2) as f64 * df;
        let (mid, drift) = (-5.5, 1.0);
        let ch: Vec<usize> = (1..n).collect();
        let mut rng = Mix(17);
        let mut worst: f64 = 0.0;
        for _ in 0..6 {
            let cross: Vec<Complex64> = (0..n)
                .map(|k| {
                    let f = f0 + k as f64 * df;
                    (0..spectra)
                        .map(|m| {
                            let d = mid + drift * ((m as f64 + 0.5) / spectra as f64 - 0.5);
                            let turn = std::f64::consts::TAU * f * d / fs;
                            Complex64::from_polar(rng.power(), turn)
                        })
                        .sum()
                })
                .collect();
            let want = std::f64::consts::TAU * df * mid / fs;
            let got = PhaseLine::fit(&cross, &ch).slope;
            worst = worst.max(((got - want) * per_radian).abs());
        }
        assert!(worst < 0.01, "slope off by {worst:.4} samples");
    }

    #[test]
    fn crossing_and_width() {
        let ramp = [(0.0, 0.0), (1.0, 0.2), (2.0, 0.6), (3.0, 1.0)];
        assert!((crossing(&ramp, 0.5).unwrap() - 1.75).abs() < 1e-12);
        assert_eq!(crossing(&ramp, 2.0), None);
        // A triangle peaking at 0 dB at offset 0, -10 dB at +-1.
        let tri: Vec<(f64, f64)> = (-4..=4)
            .map(|i| (i as f64 / 2.0, -10.0 * (i as f64 / 2.0).abs()))
            .collect();
        assert!((width_at(&tri, -3.0).unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(width_at(&tri, -30.0), None);
    }
}

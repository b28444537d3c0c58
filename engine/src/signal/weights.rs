//! PFB weights (docs/signal-path.md: Hann x sinc, unit energy) and the channel response they imply.

use super::{bail, Result};

/// The sinc cutoff the design uses unless told otherwise.
pub const DEFAULT_CUTOFF: f64 = 1.0;

/// `sin(pi x) / (pi x)`, 1 at 0.
pub fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = std::f64::consts::PI * x;
        px.sin() / px
    }
}

/// The 2nT PFB weights for `channels` = n and `taps` = T, in the order they multiply the window's
/// samples: w[t + 2n j] weights sample t of tap j. Scaled so that the sum of squares is 1.
pub fn pfb_weights(channels: usize, taps: usize, w_cutoff: f64) -> Result<Vec<f64>> {
    if channels == 0 || taps == 0 {
        bail!("PFB weights need at least one channel and one tap, not {channels} and {taps}");
    }
    if !(w_cutoff.is_finite() && w_cutoff > 0.0) {
        bail!("the sinc cutoff must be a positive number, not {w_cutoff}");
    }
    let step = 2 * channels;
    let len = step * taps;
    let pi = std::f64::consts::PI;
    let mut w: Vec<f64> = (0..len)
        .map(|i| {
            let hann = (pi * i as f64 / (len - 1) as f64).sin().powi(2);
            let x = (i as f64 + 0.5) / step as f64 - taps as f64 / 2.0;
            hann * sinc(w_cutoff * x)
        })
        .collect();
    let energy: f64 = w.iter().map(|v| v * v).sum();
    if energy.is_nan() || energy <= 0.0 {
        bail!("PFB weights for {channels} channels and {taps} taps are all zero");
    }
    let scale = energy.sqrt().recip();
    w.iter_mut().for_each(|v| *v *= scale);
    Ok(w)
}

/// The weights with the default cutoff.
pub fn default_weights(channels: usize, taps: usize) -> Result<Vec<f64>> {
    pfb_weights(channels, taps, DEFAULT_CUTOFF)
}

/// W(delta) = sum_i w_i exp(i pi delta (i - c) / n), c the window's centre: the complex gain of
/// channel k for a complex tone at frequency k + delta channels, up to a phase that depends only on
/// where the window starts. Real for symmetric weights.
fn transform(weights: &[f64], channels: usize, offset: f64) -> (f64, f64) {
    let theta = std::f64::consts::PI * offset / channels as f64;
    let centre = (weights.len() as f64 - 1.0) / 2.0;
    let (mut re, mut im) = (0.0, 0.0);
    for (i, &w) in weights.iter().enumerate() {
        let (s, c) = (theta * (i as f64 - centre)).sin_cos();
        re += w * c;
        im += w * s;
    }
    (re, im)
}

/// Amplitude gain of a channel for a tone at its centre: |W(0)| = sum of the weights. A real tone
/// `A cos(...)` at the centre of channel k (0 < k < n) gives |X_k| = A/2 times this.
pub fn dc_gain(weights: &[f64]) -> f64 {
    weights.iter().sum::<f64>().abs()
}

/// Power response |W(offset)|^2 of a channel to a unit complex tone `offset` channels from its
/// centre (fractional offsets allowed).
pub fn response(weights: &[f64], channels: usize, offset: f64) -> f64 {
    let (re, im) = transform(weights, channels, offset);
    re * re + im * im
}

/// [`response`] in dB relative to the response at the channel centre (0 dB at `offset` 0).
pub fn response_db(weights: &[f64], channels: usize, offset: f64) -> f64 {
    let peak = dc_gain(weights).powi(2);
    10.0 * (response(weights, channels, offset) / peak).log10()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_energy_and_symmetric() {
        for (n, t) in [(16, 1), (1024, 4), (4096, 16)] {
            let w = default_weights(n, t).unwrap();
            assert_eq!(w.len(), 2 * n * t);
            let e: f64 = w.iter().map(|v| v * v).sum();
            assert!((e - 1.0).abs() < 1e-12, "energy {e}");
            for i in 0..w.len() {
                assert!(
                    (w[i] - w[w.len() - 1 - i]).abs() < 1e-15,
                    "asymmetric at {i}"
                );
            }
            // Hann endpoints.
            assert!(w[0].abs() < 1e-15 && w[w.len() - 1].abs() < 1e-15);
        }
    }

    #[test]
    fn matches_formula_by_hand() {
        // n = 1, T = 2: 4 weights, Hann over 3 intervals, sinc at -0.75, -0.25, 0.25, 0.75.
        let w = pfb_weights(1, 2, 1.0).unwrap();
        let pi = std::f64::consts::PI;
        let raw: Vec<f64> = (0..4)
            .map(|i| {
                let h = (pi * i as f64 / 3.0).sin().powi(2);
                let x = (i as f64 + 0.5) / 2.0 - 1.0;
                h * (pi * x).sin() / (pi * x)
            })
            .collect();
        let norm = raw.iter().map(|v| v * v).sum::<f64>().sqrt();
        for i in 0..4 {
            assert!((w[i] - raw[i] / norm).abs() < 1e-15);
        }
    }

    #[test]
    fn response_shape() {
        let w = default_weights(1024, 16).unwrap();
        assert!(response_db(&w, 1024, 0.0).abs() < 1e-12);
        // Cutoff 1 puts the -6 dB point (half amplitude) near the channel edge.
        let edge = response_db(&w, 1024, 0.5);
        assert!((-7.0..-5.0).contains(&edge), "edge {edge} dB");
        // Far channels are deeply suppressed.
        for off in [2.0, 3.5, 10.0] {
            let db = response_db(&w, 1024, off);
            assert!(db < -50.0, "{off} channels: {db} dB");
        }
    }

    #[test]
    fn bad_arguments() {
        assert!(pfb_weights(0, 4, 1.0).is_err());
        assert!(pfb_weights(16, 0, 1.0).is_err());
        assert!(pfb_weights(16, 4, f64::NAN).is_err());
        assert!(pfb_weights(16, 4, -1.0).is_err());
    }
}

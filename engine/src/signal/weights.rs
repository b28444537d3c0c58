//! PFB weights (docs/signal-path.md: a taper, Hann or rectangular, times sinc, unit energy) and
//! the channel response they imply.

use super::{bail, Result};

/// The sinc cutoff the design uses unless told otherwise.
pub const DEFAULT_CUTOFF: f64 = 1.0;

/// The taper the sinc is multiplied by (katgpucbf's window function).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WindowFunction {
    /// sin^2(pi i / (2nT - 1)): the MeerKAT design.
    #[default]
    Hann,
    /// 1 everywhere: with one tap and a cutoff of 0, the PFB is a plain FFT.
    Rect,
}

impl WindowFunction {
    pub const ALL: [WindowFunction; 2] = [WindowFunction::Hann, WindowFunction::Rect];

    /// The name on the command line and in the status.
    pub fn name(self) -> &'static str {
        match self {
            WindowFunction::Hann => "hann",
            WindowFunction::Rect => "rect",
        }
    }
}

/// A window function's name that is not one of [`WindowFunction::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the window function must be hann or rect, not {0:?}")]
pub struct UnknownWindow(pub String);

impl std::str::FromStr for WindowFunction {
    type Err = UnknownWindow;
    fn from_str(s: &str) -> std::result::Result<Self, UnknownWindow> {
        Self::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| UnknownWindow(s.to_string()))
    }
}

/// The PFB filter's design: its taper and the sinc's cutoff (1: a passband one channel wide,
/// -6 dB at the channel's edges; more widens it, less narrows it; 0: no sinc at all).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterDesign {
    pub window: WindowFunction,
    pub w_cutoff: f64,
}

impl Default for FilterDesign {
    fn default() -> Self {
        Self {
            window: WindowFunction::Hann,
            w_cutoff: DEFAULT_CUTOFF,
        }
    }
}

/// A sinc cutoff that is not a number 0 or more.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("the sinc cutoff must be a number 0 or more, not {0}")]
pub struct BadCutoff(pub f64);

impl FilterDesign {
    /// Checks the cutoff.
    pub fn validate(&self) -> std::result::Result<(), BadCutoff> {
        if !(self.w_cutoff.is_finite() && self.w_cutoff >= 0.0) {
            return Err(BadCutoff(self.w_cutoff));
        }
        Ok(())
    }
}

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
pub fn pfb_weights(channels: usize, taps: usize, design: FilterDesign) -> Result<Vec<f64>> {
    if channels == 0 || taps == 0 {
        bail!("PFB weights need at least one channel and one tap, not {channels} and {taps}");
    }
    if let Err(e) = design.validate() {
        bail!("{e}");
    }
    let step = 2 * channels;
    let len = step * taps;
    let pi = std::f64::consts::PI;
    let mut w: Vec<f64> = (0..len)
        .map(|i| {
            let taper = match design.window {
                WindowFunction::Hann => (pi * i as f64 / (len - 1) as f64).sin().powi(2),
                WindowFunction::Rect => 1.0,
            };
            let x = (i as f64 + 0.5) / step as f64 - taps as f64 / 2.0;
            taper * sinc(design.w_cutoff * x)
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

/// The weights of the default design (Hann, cutoff 1).
pub fn default_weights(channels: usize, taps: usize) -> Result<Vec<f64>> {
    pfb_weights(channels, taps, FilterDesign::default())
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
        let w = pfb_weights(1, 2, FilterDesign::default()).unwrap();
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
    fn rect_with_one_tap_and_no_sinc_is_a_plain_fft() {
        let design = FilterDesign {
            window: WindowFunction::Rect,
            w_cutoff: 0.0,
        };
        let w = pfb_weights(8, 1, design).unwrap();
        assert!(w.iter().all(|&v| (v - 0.25).abs() < 1e-15), "{w:?}");
        // With taps and the sinc, the rectangular taper leaves the sinc's own sidelobes: the
        // Hann design suppresses them far deeper.
        let rect = FilterDesign {
            window: WindowFunction::Rect,
            w_cutoff: 1.0,
        };
        let (r, h) = (
            pfb_weights(1024, 16, rect).unwrap(),
            default_weights(1024, 16).unwrap(),
        );
        assert!(response_db(&r, 1024, 3.5) > response_db(&h, 1024, 3.5) + 20.0);
    }

    #[test]
    fn window_functions_by_name() {
        for w in WindowFunction::ALL {
            assert_eq!(w.name().parse::<WindowFunction>(), Ok(w));
        }
        assert!("hamming"
            .parse::<WindowFunction>()
            .unwrap_err()
            .to_string()
            .contains("hann or rect"));
    }

    #[test]
    fn bad_arguments() {
        let cutoff = |w_cutoff| FilterDesign {
            w_cutoff,
            ..Default::default()
        };
        assert!(pfb_weights(0, 4, cutoff(1.0)).is_err());
        assert!(pfb_weights(16, 0, cutoff(1.0)).is_err());
        assert!(pfb_weights(16, 4, cutoff(f64::NAN)).is_err());
        assert!(pfb_weights(16, 4, cutoff(-1.0)).is_err());
        assert!(pfb_weights(16, 4, cutoff(0.0)).is_ok());
    }
}

//! The two-pass CUDA kernels with their rows in float16 (`--fft-precision half`), modelled in
//! float64: the one rounding they add, and nothing else, so that the GPU can be held to this model
//! as tightly as the float32 path is held to the plain reference.
//!
//! The kernels take the n-point complex FFT of z_u = g_2u + i g_2u+1 (the real 2n-point one's
//! even and odd samples) as R x A (n = R A, u = i + A j, k = R k1 + k2):
//! ```text
//!   V_i[k2] = W_n^{i k2} sum_j z_{i + A j} W_R^{j k2}   (pass 1, written out as the rows)
//!   Z[R k1 + k2] = sum_i V_i[k2] W_A^{i k1}               (pass 2)
//! ```
//! and then the real-FFT fix-up X_k = (Z_k + conj Z_{n-k} - i W_2n^k (Z_k - conj Z_{n-k})) / 2.
//! In float16 the rows are V s, s a power of two ([`row_scale`]) that keeps every value inside
//! float16's range, rounded stochastically ([`round_stochastic`]); pass 2 divides by s again.
//!
//! Stochastic rounding, because rounding to nearest is a deterministic function of the signal:
//! its errors on a dithered tone add up to spurs at -96 dB, against -124.7 with float32 rows
//! (kernels/HISTORY.md, "Float16 rows"). Rounded up with the probability of the dropped fraction, the error has
//! mean zero whatever the signal, as the output dither's has. The random bits are counter-based,
//! as the dither's (`signal::dither`): `h = lowbias32(key ^ (c * 0x9E3779B9))` with the frame's
//! key ([`frame_key`]) and the value's counter c = (2m + pol) n + u (spectrum m of the frame,
//! u = k2 A + i its place among the rows, wrapping at 2^32); the real part takes h's low 13 bits,
//! the imaginary part bits 16 to 28.

use std::sync::Arc;

use num_complex::Complex64;
use rustfft::{Fft, FftPlanner};

use super::dither::{lowbias32, spectrum_key};

/// The seed of [`frame_key`]: any constant, as long as both sides share it.
const ROW_SEED: u32 = 0xF16_0B5E;

/// The key of the rows' random bits for the frame whose first spectrum has timestamp `t0`.
pub fn frame_key(t0: u64) -> u32 {
    spectrum_key(ROW_SEED, t0)
}

/// The random bits of row value u (k2 A + i) of polarisation `pol` in spectrum `m` of the frame
/// with key `key`, for an n-channel output: (real's, imaginary's), 13 bits each.
pub fn row_bits(key: u32, m: usize, pol: usize, channels: usize, u: usize) -> (u32, u32) {
    let c = (m as u32)
        .wrapping_mul(2)
        .wrapping_add(pol as u32)
        .wrapping_mul(channels as u32)
        .wrapping_add(u as u32)
        .wrapping_mul(0x9E37_79B9);
    let h = lowbias32(key ^ c);
    (h & 0x1fff, (h >> 16) & 0x1fff)
}

/// `x` as the kernels round it: to float32, `bits` (13) added to the float32's bits, then
/// truncated toward zero onto float16's grid (normal or subnormal). Unbiased: it rounds up with
/// the probability of the dropped fraction.
pub fn round_stochastic(x: f64, bits: u32) -> f64 {
    let f = f32::from_bits((x as f32).to_bits() + bits);
    let exponent = ((f.to_bits() >> 23) & 0xff) as i32 - 127;
    debug_assert!(exponent < 16, "{x} is outside float16's range");
    let step = 2f64.powi(exponent.max(-14) - 10);
    (f as f64 / step).trunc() * step
}

/// The largest row value the scale allows: float16 holds up to 65504, and float32 arithmetic
/// before the rounding may overshoot the bound by a hair.
const ROW_LIMIT: f64 = 32768.0;

/// The power of two the two-pass kernels scale their float16 rows by: the largest for which no row
/// value can exceed 2^15, whatever the samples. `|V_i[k2]|` is at most R times the largest |z_u|,
/// and |z_u| at most full scale (2^(bits-1)) times the sum of |w| over the taps of samples 2u and
/// 2u + 1. `weights` are the output's, w[t + 2n j] (see `weights::pfb_weights`).
pub fn row_scale(weights: &[f64], channels: usize, sample_bits: u32, r: usize) -> f64 {
    let step = 2 * channels;
    let taps = weights.len() / step;
    let tap_sum = |t: usize| (0..taps).map(|j| weights[t + step * j].abs()).sum::<f64>();
    let widest = (0..channels)
        .map(|u| tap_sum(2 * u) + tap_sum(2 * u + 1))
        .fold(0.0, f64::max);
    let bound = r as f64 * widest * 2f64.powi(sample_bits as i32 - 1);
    if bound <= 0.0 {
        return 1.0;
    }
    2f64.powi((ROW_LIMIT / bound).log2().floor() as i32)
}

/// The real 2n-point FFT as the two-pass kernels take it with float16 rows.
pub struct HalfRowsFft {
    channels: usize,
    r: usize,
    scale: Option<f64>,
    columns: Arc<dyn Fft<f64>>,
    rows: Arc<dyn Fft<f64>>,
}

impl HalfRowsFft {
    /// For n = `channels` split as R = `r` x A, rows scaled by `scale` before rounding (`None`:
    /// not rounded, the split alone in float64).
    pub fn new(
        channels: usize,
        r: usize,
        scale: Option<f64>,
        planner: &mut FftPlanner<f64>,
    ) -> Self {
        assert!(
            r > 0 && channels.is_multiple_of(r),
            "R must divide the channels: {channels} / {r}"
        );
        Self {
            channels,
            r,
            scale,
            columns: planner.plan_fft_forward(r),
            rows: planner.plan_fft_forward(channels / r),
        }
    }

    /// X_k for k < n of the 2n real samples `g`, spectrum `m` of polarisation `pol` in the frame
    /// with key `key` ([`frame_key`]).
    pub fn process(&self, g: &[f64], key: u32, m: usize, pol: usize) -> Vec<Complex64> {
        let (n, r) = (self.channels, self.r);
        let a = n / r;
        assert_eq!(g.len(), 2 * n, "the FFT takes 2n samples");
        let z = |u: usize| Complex64::new(g[2 * u], g[2 * u + 1]);
        let w = |num: usize, den: usize| {
            Complex64::from_polar(1.0, -2.0 * std::f64::consts::PI * num as f64 / den as f64)
        };
        // rows[k2][i] = V_i[k2], rounded.
        let mut rows = vec![Complex64::new(0.0, 0.0); n];
        let mut column = vec![Complex64::new(0.0, 0.0); r];
        for i in 0..a {
            for (j, c) in column.iter_mut().enumerate() {
                *c = z(i + a * j);
            }
            self.columns.process(&mut column);
            for (k2, c) in column.iter().enumerate() {
                let v = c * w((i * k2) % n, n);
                let u = k2 * a + i;
                rows[u] = match self.scale {
                    None => v,
                    Some(s) => {
                        let (re, im) = row_bits(key, m, pol, n, u);
                        Complex64::new(
                            round_stochastic(v.re * s, re) / s,
                            round_stochastic(v.im * s, im) / s,
                        )
                    }
                };
            }
        }
        for row in rows.chunks_exact_mut(a) {
            self.rows.process(row);
        }
        // Z[R k1 + k2] = rows[k2][k1].
        let big_z = |k: usize| rows[(k % r) * a + k / r];
        (0..n)
            .map(|k| {
                let (zk, pk) = (big_z(k), big_z((n - k) % n).conj());
                let i = Complex64::new(0.0, 1.0);
                (zk + pk - i * w(k, 2 * n) * (zk - pk)) / 2.0
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::weights;
    use rand::{Rng, SeedableRng};

    fn plain_fft(g: &[f64]) -> Vec<Complex64> {
        let mut buf: Vec<Complex64> = g.iter().map(|&x| Complex64::new(x, 0.0)).collect();
        FftPlanner::new()
            .plan_fft_forward(g.len())
            .process(&mut buf);
        buf.truncate(g.len() / 2);
        buf
    }

    /// Unrounded, the split is the FFT (to float64's error); rounded, the error is float16's:
    /// about 2^-12 of the values' rms (half a step of 2^-11, uniform), and no more.
    #[test]
    fn the_split_is_the_fft_and_the_rounding_costs_float16() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        for (channels, r) in [(1024, 16), (4096, 16), (32768, 32), (65536, 64)] {
            let g: Vec<f64> = (0..2 * channels)
                .map(|_| rng.random_range(-100.0..100.0))
                .collect();
            let want = plain_fft(&g);
            let rms = (want.iter().map(|x| x.norm_sqr()).sum::<f64>() / channels as f64).sqrt();
            let err = |scale| {
                let mut planner = FftPlanner::new();
                let got = HalfRowsFft::new(channels, r, scale, &mut planner).process(&g, 7, 3, 1);
                let e2 = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).norm_sqr())
                    .sum::<f64>();
                (e2 / channels as f64).sqrt() / rms
            };
            let exact = err(None);
            // |V| <= R 100 sqrt(2): the largest power of two keeping that under 2^15.
            let scale = 2f64.powi((ROW_LIMIT / (r as f64 * 142.0)).log2().floor() as i32);
            let half = err(Some(scale));
            println!("{channels} channels, R = {r}: split {exact:.1e}, float16 rows {half:.2e} of the rms");
            assert!(exact < 1e-13, "{channels}: {exact}");
            assert!(half > 5e-5 && half < 5e-4, "{channels}: {half}");
        }
    }

    /// Stochastic rounding lands on float16 values, one of the two around x, and on average on
    /// x itself wherever float16 is normal (from 2^-14: full scale maps to 2^15, so below that
    /// lie values 2^-29 of full scale, where 13 random bits are too few and it truncates).
    #[test]
    fn stochastic_rounding_is_float16_and_unbiased() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(16);
        for x in [1.0 / 3.0, -1234.567, 7.1e-4, 65000.0 / 3.0, -2.5e-3, 0.0] {
            let (lo, hi) = {
                let h = half::f16::from_f64(x).to_f64();
                let next = |v: f64, up: bool| {
                    let b = half::f16::from_f64(v).to_bits();
                    half::f16::from_bits(if (v >= 0.0) == up { b + 1 } else { b - 1 }).to_f64()
                };
                if h <= x {
                    (h, next(h, true))
                } else {
                    (next(h, false), h)
                }
            };
            let draws = 1 << 16;
            let mut sum = 0.0;
            for _ in 0..draws {
                let q = round_stochastic(x, rng.random_range(0..0x2000));
                assert_eq!(half::f16::from_f64(q).to_f64(), q, "{x}: {q} is a float16");
                assert!(
                    q == lo || q == hi || (x == 0.0 && q == 0.0),
                    "{x}: {q} not in [{lo}, {hi}]"
                );
                sum += q;
            }
            let mean = sum / draws as f64;
            // Unbiased to within the float32 step of x and the sampling noise of 2^16 draws.
            let tol = (hi - lo) * 4.0 / (draws as f64).sqrt() + x.abs() * 1e-7;
            assert!((mean - x).abs() <= tol, "{x}: mean {mean}");
        }
    }

    /// The scale keeps full-scale input of every width inside float16, with room for a doubling
    /// at most.
    #[test]
    fn row_scale_keeps_full_scale_in_range() {
        for (channels, taps, bits) in [(1024, 16, 10), (32768, 16, 16), (4096, 4, 8)] {
            let w = weights::default_weights(channels, taps).unwrap();
            let (r, _) = kernels::fused_split(channels, &kernels::Tuning::half_rows());
            let s = row_scale(&w, channels, bits, r);
            assert_eq!(s.log2().fract(), 0.0, "a power of two: {s}");
            // The worst row value: every sample at full scale with its weight's sign, all
            // columns adding in phase (k2 = 0).
            let step = 2 * channels;
            let full = 2f64.powi(bits as i32 - 1);
            let worst = (0..channels)
                .map(|u| {
                    (0..taps)
                        .map(|j| w[2 * u + step * j].abs() + w[2 * u + 1 + step * j].abs())
                        .sum::<f64>()
                })
                .fold(0.0, f64::max)
                * full
                * r as f64
                * s;
            assert!(worst <= ROW_LIMIT && worst > ROW_LIMIT / 2.0, "{worst}");
        }
    }
}

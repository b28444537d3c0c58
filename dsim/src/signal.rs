//! Signal generation for one polarisation: tones (exact, at the delayed time), Gaussian noise,
//! uniform dither, then rounding to `sample_bits` with saturation.
//!
//! The signal fills a buffer of `period` samples that repeats, so tone frequencies are rounded to
//! a whole number of cycles per period: the buffer then wraps without a phase jump. Each heap of
//! the buffer draws its noise and dither from its own generator seeded by (seed, pol, heap), so
//! heaps can be generated in any order, on any number of threads, with the same result.
//!
//! Delay: pol p emits x(t + delay[p]) (docs/signal-path.md). Tones are evaluated exactly at the
//! delayed time. Noise is not delayed: it is independent between polarisations, so a shift of it
//! would be invisible to any correlation.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use crate::config::SignalSpec;

/// A tone as generated: whole cycles per buffer period, amplitude in counts.
#[derive(Clone, Copy, Debug)]
struct ToneGen {
    cycles: u64,
    amplitude: f64,
    /// Phase (in cycles, 0..1) that the delay adds.
    delay_phase: f64,
}

/// Generates the samples of one polarisation's repeating buffer.
#[derive(Clone, Debug)]
pub struct Generator {
    bits: u32,
    heap_samples: usize,
    period: u64,
    tones: Vec<ToneGen>,
    noise: f64,
    dither: bool,
    seed: u64,
    pol: usize,
}

/// Whole cycles per `period` samples nearest to `frequency` Hz at `rate` samples/s.
pub fn cycles_per_period(frequency: f64, rate: f64, period: u64) -> u64 {
    (frequency / rate * period as f64).round().max(0.0) as u64
}

impl Generator {
    /// `spec` is assumed valid (`SignalSpec::validate`); `period` is the buffer length in samples.
    pub fn new(
        spec: &SignalSpec,
        rate: f64,
        pol: usize,
        heap_samples: usize,
        bits: u32,
        period: u64,
    ) -> Self {
        let scale = full_scale(bits);
        let delay = spec.delays[pol];
        let tones = spec
            .tones
            .iter()
            .map(|t| {
                let cycles = cycles_per_period(t.frequency, rate, period);
                let delay_cycles = cycles as f64 / period as f64 * delay;
                ToneGen {
                    cycles,
                    amplitude: t.amplitude * scale,
                    delay_phase: delay_cycles.rem_euclid(1.0),
                }
            })
            .collect();
        Self {
            bits,
            heap_samples,
            period,
            tones,
            noise: spec.noise * scale,
            dither: spec.dither,
            seed: spec.seed,
            pol,
        }
    }

    /// The frequencies actually generated, in Hz at `rate`.
    pub fn tone_frequencies(&self, rate: f64) -> Vec<f64> {
        self.tones
            .iter()
            .map(|t| t.cycles as f64 * rate / self.period as f64)
            .collect()
    }

    /// The tones alone (no noise or dither, not quantised) at sample `t`, in counts.
    pub fn tones_at(&self, t: u64) -> f64 {
        self.tones
            .iter()
            .map(|g| g.amplitude * (std::f64::consts::TAU * self.phase(g, t)).cos())
            .sum()
    }

    /// Phase of a tone in cycles (0..1) at sample `t`: exact integer arithmetic for the sample
    /// index, so precision does not decay over a long buffer.
    fn phase(&self, g: &ToneGen, t: u64) -> f64 {
        let whole = (g.cycles as u128 * (t % self.period) as u128 % self.period as u128) as f64;
        (whole / self.period as f64 + g.delay_phase).fract()
    }

    /// Fills `out` (`heap_samples` long) with heap `h` of the buffer; returns how many samples
    /// saturated.
    pub fn heap(&self, h: u64, out: &mut [i16]) -> u32 {
        let n = self.heap_samples.min(out.len());
        let out = &mut out[..n];
        let t0 = h * self.heap_samples as u64;
        let mut acc = vec![0f64; n];
        for g in &self.tones {
            // Rotate a phasor from an exact start: error after a heap is ~n ulp, far below 1 LSB.
            let (mut s, mut c) = (std::f64::consts::TAU * self.phase(g, t0)).sin_cos();
            let (ds, dc) = (std::f64::consts::TAU * g.cycles as f64 / self.period as f64).sin_cos();
            for a in acc.iter_mut() {
                *a += g.amplitude * c;
                (c, s) = (c * dc - s * ds, s * dc + c * ds);
            }
        }
        let mut rng = SmallRng::seed_from_u64(heap_seed(self.seed, self.pol, h));
        let (lo, hi) = spead::samples::range(self.bits);
        let (lo, hi) = (lo as f64, hi as f64);
        let mut saturated = 0;
        for (o, &a) in out.iter_mut().zip(&acc) {
            let mut v = a;
            if self.noise > 0.0 {
                let z: f64 = StandardNormal.sample(&mut rng);
                v += self.noise * z;
            }
            if self.dither {
                v += rng.random::<f64>() - 0.5;
            }
            let q = v.round_ties_even();
            if q < lo || q > hi {
                saturated += 1;
            }
            *o = q.clamp(lo, hi) as i16;
        }
        saturated
    }
}

/// Counts per unit amplitude: 2^(bits-1), so amplitude 1.0 spans the whole range (and saturates
/// by one count at the positive peak, as a real ADC driven to full scale does).
pub fn full_scale(bits: u32) -> f64 {
    (1u64 << (bits - 1)) as f64
}

/// splitmix64: a well-mixed 64-bit hash, used to derive independent seeds.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn heap_seed(seed: u64, pol: usize, h: u64) -> u64 {
    mix(mix(mix(seed) ^ pol as u64) ^ h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Tone;

    fn spec(tones: Vec<Tone>, noise: f64, dither: bool) -> SignalSpec {
        SignalSpec {
            tones,
            noise,
            dither,
            delays: [0.0, 0.0],
            seed: 3,
        }
    }

    fn samples(g: &Generator, heaps: u64, hs: usize) -> Vec<i16> {
        let mut all = vec![0i16; heaps as usize * hs];
        for (h, chunk) in all.chunks_mut(hs).enumerate() {
            g.heap(h as u64, chunk);
        }
        all
    }

    #[test]
    fn frequencies_snap_to_whole_cycles_per_period() {
        assert_eq!(cycles_per_period(1.0e6, 1.0e8, 1000), 10);
        assert_eq!(cycles_per_period(1.04e6, 1.0e8, 1000), 10);
        let s = spec(
            vec![Tone {
                frequency: 1.04e6,
                amplitude: 0.5,
            }],
            0.0,
            false,
        );
        let g = Generator::new(&s, 1e8, 0, 8, 10, 1000);
        assert_eq!(g.tone_frequencies(1e8), vec![1.0e6]);
    }

    #[test]
    fn tones_are_exact_and_wrap_without_a_jump() {
        let period = 64 * 16;
        let s = spec(
            vec![Tone {
                frequency: 3.0 / period as f64 * 1e6,
                amplitude: 0.9,
            }],
            0.0,
            false,
        );
        let g = Generator::new(&s, 1e6, 0, 64, 16, period);
        let x = samples(&g, 16, 64);
        for (t, &v) in x.iter().enumerate() {
            let want =
                0.9 * 32768.0 * (std::f64::consts::TAU * 3.0 * t as f64 / period as f64).cos();
            assert!((v as f64 - want.round().min(32767.0)).abs() <= 1.0, "t={t}");
        }
        // Heap 16 (one period on) equals heap 0.
        let mut again = vec![0i16; 64];
        g.heap(16, &mut again);
        assert_eq!(again, x[..64]);
    }

    #[test]
    fn delay_advances_the_tone() {
        // x(t + tau): with tau = 2 samples, pol 1 at t equals pol 0 at t + 2.
        let mut s = spec(
            vec![Tone {
                frequency: 5e4,
                amplitude: 0.5,
            }],
            0.0,
            false,
        );
        s.delays = [0.0, 2.0];
        let g0 = Generator::new(&s, 1e6, 0, 64, 12, 6400);
        let g1 = Generator::new(&s, 1e6, 1, 64, 12, 6400);
        for t in [0u64, 5, 100, 6399] {
            assert!((g1.tones_at(t) - g0.tones_at(t + 2)).abs() < 1e-9);
        }
    }

    #[test]
    fn saturation_is_counted_and_clamped() {
        let s = spec(
            vec![Tone {
                frequency: 0.0,
                amplitude: 2.0,
            }],
            0.0,
            false,
        );
        let g = Generator::new(&s, 1e6, 0, 64, 10, 640);
        let mut out = vec![0i16; 64];
        assert_eq!(g.heap(0, &mut out), 64);
        assert!(out.iter().all(|&v| v == 511));
    }

    #[test]
    fn noise_rms_and_dither_mean() {
        let hs = 4096;
        let s = spec(vec![], 0.05, true);
        let g = Generator::new(&s, 1e8, 0, hs, 10, 64 * hs as u64);
        let x = samples(&g, 16, hs);
        let rms = (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len() as f64).sqrt();
        let want = (25.6f64.powi(2) + 2.0 / 12.0).sqrt();
        assert!((rms / want - 1.0).abs() < 0.02, "rms {rms} want {want}");

        // A constant of 0.3 full scale = 153.6 counts: plain rounding always errs by 0.4;
        // dither makes the mean right.
        let dc = |dither| {
            let s = spec(
                vec![Tone {
                    frequency: 0.0,
                    amplitude: 0.3,
                }],
                0.0,
                dither,
            );
            let g = Generator::new(&s, 1e8, 0, hs, 10, 64 * hs as u64);
            let x = samples(&g, 8, hs);
            x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64 - 153.6
        };
        assert!((dc(false) - 0.4).abs() < 1e-9);
        assert!(dc(true).abs() < 0.01, "mean error {}", dc(true));
    }

    #[test]
    fn pols_have_independent_noise_and_seed_reproduces() {
        let s = spec(vec![], 0.1, true);
        let a = samples(&Generator::new(&s, 1e8, 0, 1024, 10, 8192), 4, 1024);
        let b = samples(&Generator::new(&s, 1e8, 1, 1024, 10, 8192), 4, 1024);
        let again = samples(&Generator::new(&s, 1e8, 0, 1024, 10, 8192), 4, 1024);
        assert_eq!(a, again);
        let dot: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
        let norm = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>();
        assert!((dot / norm).abs() < 4.0 / (a.len() as f64).sqrt());
    }
}

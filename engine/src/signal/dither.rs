//! Output dither (docs/signal-path.md §Dither): before rounding, each real and imaginary part gets
//! a uniform value in (-1/2, 1/2) LSB, so that a signal weaker than one step still shows in the
//! mean of the output instead of rounding away.
//!
//! The values are counter-based: a pure function of the output's seed, the spectrum's timestamp,
//! the channel and the polarisation, so every backend (the float64 reference, the CPU, each CUDA
//! thread) computes the same value for the same output element without any state to carry between
//! frames, and a run is reproducible from its seed. Two hashes make it:
//! 1. per spectrum (on the host, once per spectrum): `key = high 32 bits of
//!    splitmix64(t0 + seed * 0x9E3779B97F4A7C15)`, t0 the spectrum's timestamp;
//! 2. per complex value: `h = lowbias32(key ^ ((2 k + pol) * 0x9E3779B9))` (Chris Wellons' 32-bit
//!    integer hash, cheap on a GPU); the real part's dither comes from the high 16 bits of h, the
//!    imaginary part's from the low 16: `u -> (2 u + 1 - 65536) / 131072`.
//!
//! The 65536 values are symmetric about zero (mean exactly 0), at most 0.49999 in magnitude (an
//! integer never moves to the next one), and exact in float32, so float64 and float32 paths add
//! the same number.

/// splitmix64's finaliser (Steele, Lea, Flood 2014).
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// lowbias32 (Wellons, "Prospecting for hash functions"): a full-avalanche 32-bit permutation.
#[inline(always)]
pub fn lowbias32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// The key of the spectrum with timestamp `t0` (ADC samples, modulo 2^64) of an output seeded
/// with `seed`.
#[inline]
pub fn spectrum_key(seed: u32, t0: u64) -> u32 {
    (splitmix64(t0.wrapping_add(u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15))) >> 32) as u32
}

/// A 16-bit draw as dither: `(2 u + 1 - 65536) / 131072`, in (-1/2, 1/2), exact in `f32`.
#[inline(always)]
fn scale(u: u32) -> f32 {
    (2 * u as i32 + 1 - 65536) as f32 * (1.0 / 131072.0)
}

/// The dither of channel `channel`, polarisation `pol` of the spectrum with key `key`: (real,
/// imaginary).
#[inline(always)]
pub fn value(key: u32, channel: usize, pol: usize) -> [f32; 2] {
    let counter = ((2 * channel + pol) as u32).wrapping_mul(0x9E37_79B9);
    let h = lowbias32(key ^ counter);
    [scale(h >> 16), scale(h & 0xffff)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_symmetric_exact_and_below_half() {
        assert_eq!(scale(0), -65535.0 / 131072.0);
        assert_eq!(scale(65535), 65535.0 / 131072.0);
        assert_eq!(scale(32767), -1.0 / 131072.0);
        assert_eq!(scale(32768), 1.0 / 131072.0);
        for u in 0..65536u32 {
            let d = scale(u);
            assert_eq!(d, -scale(65535 - u));
            assert!(d.abs() < 0.5);
            assert_eq!(d as f64, (2.0 * u as f64 + 1.0 - 65536.0) / 131072.0);
            // An integer never rounds to its neighbour.
            assert_eq!((127.0f32 + d).round_ties_even(), 127.0);
            assert_eq!((-3.0f32 + d).round_ties_even(), -3.0);
        }
    }

    #[test]
    fn draws_are_uniform_and_independent_of_neighbours() {
        // 2^20 values over channels and spectra: mean near 0, variance near 1/12, and adjacent
        // channels uncorrelated.
        let (mut sum, mut sq, mut cross, mut count) = (0.0f64, 0.0f64, 0.0f64, 0u32);
        for t in 0..256u64 {
            let key = spectrum_key(7, t * 2048);
            let mut prev = value(key, 0, 0)[0] as f64;
            for k in 0..2048 {
                for pol in 0..2 {
                    let [re, im] = value(key, k, pol);
                    let (re, im) = (re as f64, im as f64);
                    sum += re + im;
                    sq += re * re + im * im;
                    cross += prev * re;
                    prev = re;
                    count += 2;
                }
            }
        }
        let n = count as f64;
        assert!(
            (sum / n).abs() < 3.0 * (1.0 / 12.0f64).sqrt() / n.sqrt(),
            "mean {}",
            sum / n
        );
        assert!((sq / n - 1.0 / 12.0).abs() < 0.001, "variance {}", sq / n);
        assert!(
            (cross / (n / 2.0)).abs() < 0.001,
            "correlation {}",
            cross / (n / 2.0)
        );
    }

    #[test]
    fn keys_depend_on_seed_and_timestamp() {
        assert_eq!(spectrum_key(1, 4096), spectrum_key(1, 4096));
        assert_ne!(spectrum_key(1, 4096), spectrum_key(2, 4096));
        assert_ne!(spectrum_key(1, 4096), spectrum_key(1, 8192));
        assert_ne!(value(5, 3, 0), value(5, 3, 1));
        assert_ne!(value(5, 3, 0), value(5, 4, 0));
    }
}

//! 8-bit quantisation (docs/signal-path.md): round to nearest with ties to even (CUDA's `cvt.rni`),
//! clamp to [-127, 127]. A complex value counts as saturated when either part was clamped.
//! NaN quantises to 0 and does not count as saturated.

use num_complex::{Complex32, Complex64};

/// Largest magnitude an output component takes.
pub const LIMIT: i8 = 127;

/// One component: the rounded, clamped value and whether it was clamped.
#[inline]
pub fn quantise_f64(x: f64) -> (i8, bool) {
    let r = x.round_ties_even();
    if r > LIMIT as f64 {
        (LIMIT, true)
    } else if r < -LIMIT as f64 {
        (-LIMIT, true)
    } else {
        (r as i8, false) // NaN casts to 0
    }
}

/// As [`quantise_f64`] for `f32`, computed exactly the same way.
#[inline]
pub fn quantise_f32(x: f32) -> (i8, bool) {
    // f32 -> f64 is exact, so there is one definition of rounding.
    quantise_f64(x as f64)
}

/// As [`quantise_f32`], written so that it vectorises without SSE4.1's `roundps`: adding
/// 1.5 * 2^23 rounds ties to even under the default rounding mode (for |x| <= 2^22), and the integer
/// then sits in the low bits of the sum's bit pattern. Clamping to +-128 first keeps x in range
/// without changing the result.
#[inline(always)]
pub fn quantise_f32_fast(x: f32) -> (i8, bool) {
    const MAGIC: f32 = 12_582_912.0;
    let x = if x.is_nan() { 0.0 } else { x };
    let c = x.clamp(-128.0, 128.0);
    let v = (c + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32;
    let limit = LIMIT as i32;
    (v.clamp(-limit, limit) as i8, v.abs() > limit)
}

/// Quantises every value of `y` into `out` (the shorter decides) and returns how many complex
/// values saturated.
#[inline(always)]
pub fn quantise_slice_c32(y: &[Complex32], out: &mut [[i8; 2]]) -> u64 {
    let mut saturated = 0u64;
    for (o, v) in out.iter_mut().zip(y) {
        let (re, sr) = quantise_f32_fast(v.re);
        let (im, si) = quantise_f32_fast(v.im);
        *o = [re, im];
        saturated += u64::from(sr | si);
    }
    saturated
}

/// Both parts of a complex value, and whether either was clamped.
#[inline]
pub fn quantise_c64(z: Complex64) -> ([i8; 2], bool) {
    let (re, sr) = quantise_f64(z.re);
    let (im, si) = quantise_f64(z.im);
    ([re, im], sr || si)
}

/// As [`quantise_c64`] for `Complex32`.
#[inline(always)]
pub fn quantise_c32(z: Complex32) -> ([i8; 2], bool) {
    let (re, sr) = quantise_f32_fast(z.re);
    let (im, si) = quantise_f32_fast(z.im);
    ([re, im], sr || si)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_to_even() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (0.49999997, 0),
            (0.50000006, 1),
            (3.7, 4),
            (-3.7, -4),
            (126.5, 126),
            (-126.5, -126),
        ];
        for (x, want) in cases {
            assert_eq!(quantise_f64(x), (want, false), "{x}");
            assert_eq!(quantise_f32(x as f32), (want, false), "{x}");
            assert_eq!(quantise_f32_fast(x as f32), (want, false), "{x}");
        }
    }

    #[test]
    fn clamps_and_flags() {
        let cases = [
            (127.0, 127, false),
            (127.49, 127, false),
            (127.5, 127, true), // rounds to 128 (even), then clamps
            (128.0, 127, true),
            (1e30, 127, true),
            (f64::INFINITY, 127, true),
            (-127.0, -127, false),
            (-127.5, -127, true),
            (-128.0, -127, true),
            (-1e30, -127, true),
            (f64::NEG_INFINITY, -127, true),
            (f64::NAN, 0, false),
        ];
        for (x, want, sat) in cases {
            assert_eq!(quantise_f64(x), (want, sat), "{x}");
            assert_eq!(quantise_f32(x as f32), (want, sat), "{x}");
            assert_eq!(quantise_f32_fast(x as f32), (want, sat), "{x}");
        }
    }

    #[test]
    fn fast_path_agrees_on_a_dense_grid() {
        // Every quarter and a spread of other values from -200 to 200.
        for i in -800..=800 {
            let x = i as f32 / 4.0;
            assert_eq!(quantise_f32_fast(x), quantise_f32(x), "{x}");
            let y = x + 0.1234567;
            assert_eq!(quantise_f32_fast(y), quantise_f32(y), "{y}");
            let z = f32::from_bits(x.to_bits().wrapping_add(1));
            assert_eq!(quantise_f32_fast(z), quantise_f32(z), "{z}");
        }
    }

    #[test]
    fn complex_counts_once() {
        assert_eq!(
            quantise_c64(Complex64::new(200.0, -300.0)),
            ([127, -127], true)
        );
        assert_eq!(quantise_c64(Complex64::new(1.5, -300.0)), ([2, -127], true));
        assert_eq!(quantise_c64(Complex64::new(2.5, -3.5)), ([2, -4], false));
        assert_eq!(quantise_c32(Complex32::new(200.0, 0.5)), ([127, 0], true));
        assert_eq!(quantise_c32(Complex32::new(-0.5, 126.5)), ([0, 126], false));
        let y = [
            Complex32::new(200.0, 0.5),
            Complex32::new(-0.5, 126.5),
            Complex32::new(1.5, -127.5),
            Complex32::new(f32::NAN, -2.5),
        ];
        let mut out = [[0i8; 2]; 4];
        assert_eq!(quantise_slice_c32(&y, &mut out), 2);
        assert_eq!(out, [[127, 0], [0, 126], [2, -127], [0, -2]]);
    }
}

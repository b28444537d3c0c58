//! Output quantisation (docs/signal-path.md): add the dither if the output has it, round to nearest
//! with ties to even (CUDA's `cvt.rni`), clamp to [-L, L] with L = 127 for 8-bit and 7 for 4-bit
//! output. A complex value counts as saturated when either part was clamped. NaN quantises to 0
//! and does not count as saturated.

use num_complex::{Complex32, Complex64};

use super::dither;

/// Largest magnitude an 8-bit output component takes.
pub const LIMIT: i8 = 127;

/// Largest magnitude a component of a `bits`-bit output takes: 127 for 8 bits, 7 for 4 (the
/// symmetric range; the most negative code is never produced).
pub fn limit(bits: u32) -> i8 {
    ((1i32 << (bits - 1)) - 1) as i8
}

/// One component: the rounded, clamped value and whether it was clamped.
#[inline]
pub fn quantise_f64(x: f64, limit: i8) -> (i8, bool) {
    let r = x.round_ties_even();
    if r > limit as f64 {
        (limit, true)
    } else if r < -limit as f64 {
        (-limit, true)
    } else {
        (r as i8, false) // NaN casts to 0
    }
}

/// As [`quantise_f64`] for `f32`, computed exactly the same way.
#[inline]
pub fn quantise_f32(x: f32, limit: i8) -> (i8, bool) {
    // f32 -> f64 is exact, so there is one definition of rounding.
    quantise_f64(x as f64, limit)
}

/// As [`quantise_f32`], written so that it vectorises without SSE4.1's `roundps`: adding
/// 1.5 * 2^23 rounds ties to even under the default rounding mode (for |x| <= 2^22), and the integer
/// then sits in the low bits of the sum's bit pattern. Clamping to +-128 first keeps x in range
/// without changing the result.
#[inline(always)]
pub fn quantise_f32_fast(x: f32, limit: i8) -> (i8, bool) {
    const MAGIC: f32 = 12_582_912.0;
    let x = if x.is_nan() { 0.0 } else { x };
    let c = x.clamp(-128.0, 128.0);
    let v = (c + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32;
    let limit = limit as i32;
    (v.clamp(-limit, limit) as i8, v.abs() > limit)
}

/// Quantises one spectrum `y` (channel k at `y[k]`) of polarisation `pol` into `out` (the shorter
/// decides), dithered with the spectrum's key if `dither` is given, and returns how many complex
/// values saturated. The dither is added in `f32`, as the CUDA kernel adds it.
#[inline(always)]
pub fn quantise_spectrum_c32(
    y: &[Complex32],
    out: &mut [[i8; 2]],
    limit: i8,
    pol: usize,
    dither: Option<u32>,
) -> u64 {
    let mut saturated = 0u64;
    for (k, (o, v)) in out.iter_mut().zip(y).enumerate() {
        let d = dither.map_or([0.0; 2], |key| dither::value(key, k, pol));
        let (re, sr) = quantise_f32_fast(v.re + d[0], limit);
        let (im, si) = quantise_f32_fast(v.im + d[1], limit);
        *o = [re, im];
        saturated += u64::from(sr | si);
    }
    saturated
}

/// Both parts of a complex value plus its dither `d` (zero for none), and whether either was
/// clamped. The sum is exact in float64 (the dither has 17 significant bits).
#[inline]
pub fn quantise_c64(z: Complex64, d: [f32; 2], limit: i8) -> ([i8; 2], bool) {
    let (re, sr) = quantise_f64(z.re + d[0] as f64, limit);
    let (im, si) = quantise_f64(z.im + d[1] as f64, limit);
    ([re, im], sr || si)
}

/// As [`quantise_c64`] for `Complex32`, the sum in float32.
#[inline(always)]
pub fn quantise_c32(z: Complex32, d: [f32; 2], limit: i8) -> ([i8; 2], bool) {
    let (re, sr) = quantise_f32_fast(z.re + d[0], limit);
    let (im, si) = quantise_f32_fast(z.im + d[1], limit);
    ([re, im], sr || si)
}

/// One byte of 4-bit output: the real part in the high nibble, the imaginary part in the low,
/// each two's complement (katgpucbf's packing).
#[inline(always)]
pub fn pack4(q: [i8; 2]) -> u8 {
    ((q[0] as u8) << 4) | (q[1] as u8 & 0x0f)
}

/// The two parts of a byte of 4-bit output (sign-extended).
#[inline]
pub fn unpack4(b: u8) -> [i8; 2] {
    [(b as i8) >> 4, ((b << 4) as i8) >> 4]
}

/// Stores complex value `e` of a `bits`-bit output: bytes 2e and 2e + 1, or byte e packed.
#[inline(always)]
pub fn store(out: &mut [u8], e: usize, q: [i8; 2], bits: u32) {
    if bits == 4 {
        out[e] = pack4(q);
    } else {
        out[2 * e] = q[0] as u8;
        out[2 * e + 1] = q[1] as u8;
    }
}

/// Every component of a `bits`-bit output, in order (real, imaginary, real, ...).
pub fn components(out: &[u8], bits: u32) -> Vec<i8> {
    if bits == 4 {
        out.iter().flat_map(|&b| unpack4(b)).collect()
    } else {
        out.iter().map(|&b| b as i8).collect()
    }
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
            assert_eq!(quantise_f64(x, LIMIT), (want, false), "{x}");
            assert_eq!(quantise_f32(x as f32, LIMIT), (want, false), "{x}");
            assert_eq!(quantise_f32_fast(x as f32, LIMIT), (want, false), "{x}");
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
            assert_eq!(quantise_f64(x, LIMIT), (want, sat), "{x}");
            assert_eq!(quantise_f32(x as f32, LIMIT), (want, sat), "{x}");
            assert_eq!(quantise_f32_fast(x as f32, LIMIT), (want, sat), "{x}");
        }
    }

    #[test]
    fn fast_path_agrees_on_a_dense_grid() {
        // Every quarter and a spread of other values from -200 to 200.
        for i in -800..=800 {
            let x = i as f32 / 4.0;
            for limit in [LIMIT, 7] {
                assert_eq!(quantise_f32_fast(x, limit), quantise_f32(x, limit), "{x}");
                let y = x + 0.1234567;
                assert_eq!(quantise_f32_fast(y, limit), quantise_f32(y, limit), "{y}");
                let z = f32::from_bits(x.to_bits().wrapping_add(1));
                assert_eq!(quantise_f32_fast(z, limit), quantise_f32(z, limit), "{z}");
            }
        }
    }

    #[test]
    fn complex_counts_once() {
        let no = [0.0; 2];
        assert_eq!(
            quantise_c64(Complex64::new(200.0, -300.0), no, LIMIT),
            ([127, -127], true)
        );
        assert_eq!(
            quantise_c64(Complex64::new(1.5, -300.0), no, LIMIT),
            ([2, -127], true)
        );
        assert_eq!(
            quantise_c64(Complex64::new(2.5, -3.5), no, LIMIT),
            ([2, -4], false)
        );
        assert_eq!(
            quantise_c32(Complex32::new(200.0, 0.5), no, LIMIT),
            ([127, 0], true)
        );
        assert_eq!(
            quantise_c32(Complex32::new(-0.5, 126.5), no, LIMIT),
            ([0, 126], false)
        );
        let y = [
            Complex32::new(200.0, 0.5),
            Complex32::new(-0.5, 126.5),
            Complex32::new(1.5, -127.5),
            Complex32::new(f32::NAN, -2.5),
        ];
        let mut out = [[0i8; 2]; 4];
        assert_eq!(quantise_spectrum_c32(&y, &mut out, LIMIT, 0, None), 2);
        assert_eq!(out, [[127, 0], [0, 126], [2, -127], [0, -2]]);
    }

    #[test]
    fn four_bits_clamp_at_seven_and_pack_in_nibbles() {
        assert_eq!(limit(8), 127);
        assert_eq!(limit(4), 7);
        assert_eq!(quantise_f64(7.49, 7), (7, false));
        assert_eq!(quantise_f64(7.5, 7), (7, true));
        assert_eq!(quantise_f64(-9.0, 7), (-7, true));
        assert_eq!(quantise_f32_fast(-7.5, 7), (-7, true));
        assert_eq!(pack4([7, -7]), 0x79);
        assert_eq!(pack4([-1, 3]), 0xf3);
        assert_eq!(pack4([-7, 0]), 0x90);
        for re in -7..=7 {
            for im in -7..=7 {
                assert_eq!(unpack4(pack4([re, im])), [re, im]);
            }
        }
    }

    #[test]
    fn dither_is_added_before_rounding_and_the_same_in_both_precisions() {
        let key = dither::spectrum_key(3, 1 << 20);
        let y: Vec<Complex32> = (0..512)
            .map(|k| Complex32::new(k as f32 * 0.37 - 90.0, 0.2 - k as f32 * 0.11))
            .collect();
        let mut out = vec![[0i8; 2]; y.len()];
        quantise_spectrum_c32(&y, &mut out, LIMIT, 1, Some(key));
        let mut moved = 0;
        for (k, (v, q)) in y.iter().zip(&out).enumerate() {
            let d = dither::value(key, k, 1);
            let z = Complex64::new(v.re as f64, v.im as f64);
            assert_eq!(quantise_c64(z, d, LIMIT).0, *q, "channel {k}");
            assert_eq!(quantise_c32(*v, d, LIMIT).0, *q, "channel {k}");
            moved += usize::from(quantise_c64(z, [0.0; 2], LIMIT).0 != *q);
        }
        // The dither moves a value to its other neighbour with probability equal to its distance from
        // the nearest integer: about 44% of complex values have a part moved, and none further.
        assert!(moved > 100 && moved < 400, "{moved}");
        for (v, q) in y.iter().zip(&out) {
            assert!((v.re - q[0] as f32).abs() < 1.0 && (v.im - q[1] as f32).abs() < 1.0);
        }
    }
}

//! Digitiser samples on the wire: signed two's-complement integers of `bits` bits (2 to 16),
//! packed back to back, most significant bit first (docs/wire-formats.md). This module is the single
//! source of truth for that format; dsim packs with it and every receiver unpacks with it.
//!
//! 8, 10, 12 and 16 bits take fast paths that work on whole groups of samples ending on a byte
//! boundary (1, 4, 2 and 1 samples); other widths, and the ragged ends, use a bit accumulator.
//!
//! Preconditions (programmer errors, so they panic rather than return errors): `bits` in 2..=16
//! (check configuration with [`check_bits`]), and buffers long enough for the samples asked for.

/// Narrowest supported sample width.
pub const MIN_BITS: u32 = 2;
/// Widest supported sample width.
pub const MAX_BITS: u32 = 16;

/// The widths digitisers send and the engine accepts, each with a fast path here (dsim can
/// generate any width from [`MIN_BITS`] to [`MAX_BITS`]).
pub const SAMPLE_BITS: [u32; 4] = [8, 10, 12, 16];

/// Why a sample width is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sample width {0} bits is not between 2 and 16")]
pub struct BadWidth(pub u32);

/// Accepts a sample width of 2 to 16 bits.
pub fn check_bits(bits: u32) -> Result<(), BadWidth> {
    if (MIN_BITS..=MAX_BITS).contains(&bits) {
        Ok(())
    } else {
        Err(BadWidth(bits))
    }
}

/// Bytes that `n` samples of `bits` bits take (rounded up to a whole byte; pad bits are zero).
pub const fn packed_len(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(8)
}

/// The range of a `bits`-bit signed sample: (min, max), e.g. (-512, 511) for 10 bits.
pub const fn range(bits: u32) -> (i16, i16) {
    let half = 1i32 << (bits - 1);
    (-half as i16, (half - 1) as i16)
}

fn assert_bits(bits: u32) {
    assert!(
        (MIN_BITS..=MAX_BITS).contains(&bits),
        "sample width {bits} is not 2 to 16 bits"
    );
}

/// Packs `samples` into the first [`packed_len`] bytes of `out`. Values outside the range of
/// `bits` bits keep only their low bits: callers quantise and saturate first.
///
/// Panics if `bits` is not 2..=16 or `out` is shorter than [`packed_len`].
pub fn pack(samples: &[i16], bits: u32, out: &mut [u8]) {
    assert_bits(bits);
    let out = &mut out[..packed_len(samples.len(), bits)];
    // Fast path over whole groups, then the generic path for the tail (it starts on a byte).
    let (done, at) = match bits {
        8 => {
            for (o, &s) in out.iter_mut().zip(samples) {
                *o = s as u8;
            }
            (samples.len(), samples.len())
        }
        16 => {
            for (o, &s) in out.chunks_exact_mut(2).zip(samples) {
                o.copy_from_slice(&s.to_be_bytes());
            }
            (samples.len(), samples.len() * 2)
        }
        10 => {
            let groups = samples.len() / 4;
            for (o, s) in out.chunks_exact_mut(5).zip(samples.chunks_exact(4)) {
                let m = |v: i16| (v as u64) & 0x3ff;
                let w = (m(s[0]) << 30) | (m(s[1]) << 20) | (m(s[2]) << 10) | m(s[3]);
                o.copy_from_slice(&w.to_be_bytes()[3..]);
            }
            (groups * 4, groups * 5)
        }
        12 => {
            let groups = samples.len() / 2;
            for (o, s) in out.chunks_exact_mut(3).zip(samples.chunks_exact(2)) {
                let m = |v: i16| (v as u32) & 0xfff;
                let w = (m(s[0]) << 12) | m(s[1]);
                o.copy_from_slice(&w.to_be_bytes()[1..]);
            }
            (groups * 2, groups * 3)
        }
        _ => (0, 0),
    };
    pack_generic(&samples[done..], bits, &mut out[at..]);
}

/// Bit-accumulator packing; `out` starts on a byte boundary and holds exactly the packed bytes.
fn pack_generic(samples: &[i16], bits: u32, out: &mut [u8]) {
    let mask = (1u64 << bits) - 1;
    let mut acc = 0u64;
    let mut held = 0u32;
    let mut at = 0;
    for &s in samples {
        acc = (acc << bits) | (s as u64 & mask);
        held += bits;
        while held >= 8 {
            held -= 8;
            out[at] = (acc >> held) as u8;
            at += 1;
        }
    }
    if held > 0 {
        out[at] = (acc << (8 - held)) as u8;
    }
}

/// Sample `i` of a packed buffer, sign-extended. Panics if `bits` is not 2..=16 or the sample lies
/// past the end of `packed`.
pub fn sample(packed: &[u8], bits: u32, i: usize) -> i16 {
    assert_bits(bits);
    let bit = i * bits as usize;
    let byte = bit / 8;
    assert!(
        packed_len(i + 1, bits) <= packed.len(),
        "sample {i} lies past {} packed bytes",
        packed.len()
    );
    // Read 4 bytes big-endian (zero-padded past the end) and take the field from the top.
    let mut word = [0u8; 4];
    let avail = (packed.len() - byte).min(4);
    word[..avail].copy_from_slice(&packed[byte..byte + avail]);
    let w = u32::from_be_bytes(word) << (bit % 8);
    ((w as i32) >> (32 - bits)) as i16
}

/// Unpacks `out.len()` samples starting at sample `first`. Panics if `bits` is not 2..=16 or the
/// samples run past the end of `packed`.
pub fn unpack(packed: &[u8], bits: u32, first: usize, out: &mut [i16]) {
    unpack_into(packed, bits, first, out);
}

/// As [`unpack`], into `f32` (what float backends and FFT checks want; exact: every sample fits
/// in 24 bits).
pub fn unpack_f32(packed: &[u8], bits: u32, first: usize, out: &mut [f32]) {
    unpack_into(packed, bits, first, out);
}

/// As [`unpack`], into `f64` (the float64 reference).
pub fn unpack_f64(packed: &[u8], bits: u32, first: usize, out: &mut [f64]) {
    unpack_into(packed, bits, first, out);
}

/// Sample `i`, sign-extended, for the head and tail of a fast unpack (the caller has checked the
/// bounds): a sample of at most 16 bits starting at most 7 bits into a byte lies within 3 bytes.
#[inline]
fn one(packed: &[u8], bits: u32, i: usize) -> i16 {
    let bit = i * bits as usize;
    let byte = bit / 8;
    let mut w = 0u32;
    for k in 0..3 {
        w = (w << 8) | *packed.get(byte + k).unwrap_or(&0) as u32;
    }
    let w = (w << 8) << (bit % 8);
    ((w as i32) >> (32 - bits)) as i16
}

fn unpack_into<T: From<i16> + Copy>(packed: &[u8], bits: u32, first: usize, out: &mut [T]) {
    assert_bits(bits);
    let end = first.checked_add(out.len());
    assert!(
        end.is_some_and(|end| packed_len(end, bits) <= packed.len()),
        "samples {first}..{first}+{} run past {} packed bytes",
        out.len(),
        packed.len()
    );
    match bits {
        8 => unpack_groups::<T, 8, 1, 1>(packed, first, out),
        10 => unpack_groups::<T, 10, 4, 5>(packed, first, out),
        12 => unpack_groups::<T, 12, 2, 3>(packed, first, out),
        16 => unpack_groups::<T, 16, 1, 2>(packed, first, out),
        _ => {
            for (k, o) in out.iter_mut().enumerate() {
                *o = sample(packed, bits, first + k).into();
            }
        }
    }
}

/// The fast path: groups of `G` samples in `B` bytes (the smallest run that fills whole bytes:
/// 4 samples in 5 bytes at 10 bits, 2 in 3 at 12), with a misaligned head and a short tail read
/// one sample at a time. Monomorphised per width so that the shifts are constants.
#[inline(always)]
fn unpack_groups<T: From<i16> + Copy, const BITS: u32, const G: usize, const B: usize>(
    packed: &[u8],
    first: usize,
    out: &mut [T],
) {
    let len = out.len();
    let head = ((G - first % G) % G).min(len);
    for (k, o) in out[..head].iter_mut().enumerate() {
        *o = one(packed, BITS, first + k).into();
    }
    let groups = (len - head) / G;
    let start = (first + head) * BITS as usize / 8; // a group boundary is a byte boundary
    let body = &packed[start..start + groups * B];
    let (middle, tail) = out[head..].split_at_mut(groups * G);
    for (bytes, o) in body.chunks_exact(B).zip(middle.chunks_exact_mut(G)) {
        // Top-align the group in a word; each sample is then the top BITS bits after a shift.
        let mut w = 0u64;
        for &b in bytes {
            w = (w << 8) | b as u64;
        }
        w <<= 64 - 8 * B;
        for (j, o) in o.iter_mut().enumerate() {
            *o = ((((w << (BITS as usize * j)) as i64) >> (64 - BITS)) as i16).into();
        }
    }
    let done = head + groups * G;
    for (k, o) in tail.iter_mut().enumerate() {
        *o = one(packed, BITS, first + done + k).into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format written out one bit at a time: the reference the fast paths must match.
    fn pack_bitwise(samples: &[i16], bits: u32) -> Vec<u8> {
        let mut out = vec![0u8; packed_len(samples.len(), bits)];
        for (i, &s) in samples.iter().enumerate() {
            for b in 0..bits {
                let bit = (s as u16 >> (bits - 1 - b)) & 1;
                let at = i * bits as usize + b as usize;
                out[at / 8] |= (bit as u8) << (7 - at % 8);
            }
        }
        out
    }

    /// Every value of the width, in a scrambled order, `n` of them.
    fn test_samples(bits: u32, n: usize) -> Vec<i16> {
        let (lo, hi) = range(bits);
        let span = hi as i64 - lo as i64 + 1;
        (0..n as i64)
            .map(|k| (lo as i64 + (k * 7919 + k * k) % span) as i16)
            .collect()
    }

    #[test]
    fn ten_bit_layout_by_hand() {
        // -1 = 11_1111_1111, 1 = 00_0000_0001, -512 = 10_0000_0000, 511 = 01_1111_1111
        let mut out = [0u8; 5];
        pack(&[-1, 1, -512, 511], 10, &mut out);
        assert_eq!(
            out,
            [
                0b1111_1111,
                0b1100_0000,
                0b0001_1000,
                0b0000_0001,
                0b1111_1111
            ]
        );
    }

    #[test]
    fn twelve_and_sixteen_bit_layout_by_hand() {
        let mut out = [0u8; 3];
        pack(&[-2048, 0x123], 12, &mut out);
        assert_eq!(out, [0x80, 0x01, 0x23]);
        let mut out = [0u8; 4];
        pack(&[-2, 0x1234], 16, &mut out);
        assert_eq!(out, [0xff, 0xfe, 0x12, 0x34]);
    }

    #[test]
    fn pack_matches_bitwise_reference_every_width_and_length() {
        for bits in MIN_BITS..=MAX_BITS {
            for n in [0, 1, 2, 3, 5, 7, 8, 9, 63, 257] {
                let s = test_samples(bits, n);
                let mut out = vec![0xaau8; packed_len(n, bits)];
                pack(&s, bits, &mut out);
                assert_eq!(out, pack_bitwise(&s, bits), "{bits} bits, {n} samples");
            }
        }
    }

    #[test]
    fn round_trip_every_width_and_offset() {
        for bits in MIN_BITS..=MAX_BITS {
            let s = test_samples(bits, 301);
            let mut packed = vec![0u8; packed_len(s.len(), bits)];
            pack(&s, bits, &mut packed);
            for first in [0, 1, 2, 3, 4, 5, 17] {
                for len in [0, 1, 3, 8, 301 - first] {
                    let mut back = vec![0i16; len];
                    unpack(&packed, bits, first, &mut back);
                    assert_eq!(back, s[first..first + len], "{bits} bits from {first}");
                    let mut f = vec![0f32; len];
                    unpack_f32(&packed, bits, first, &mut f);
                    assert!(f.iter().zip(&back).all(|(&a, &b)| a == b as f32));
                    let mut d = vec![0f64; len];
                    unpack_f64(&packed, bits, first, &mut d);
                    assert!(d.iter().zip(&back).all(|(&a, &b)| a == b as f64));
                }
            }
            assert_eq!(sample(&packed, bits, 300), s[300]);
        }
    }

    #[test]
    fn out_of_range_values_keep_low_bits() {
        let mut out = [0u8; 5];
        pack(&[512, -513, 0, 0], 10, &mut out); // 512 -> -512, -513 -> 511
        let mut back = [0i16; 4];
        unpack(&out, 10, 0, &mut back);
        assert_eq!(back, [-512, 511, 0, 0]);
    }

    #[test]
    fn widths_and_ranges() {
        assert!(check_bits(1).is_err() && check_bits(17).is_err());
        assert!(check_bits(2).is_ok() && check_bits(16).is_ok());
        assert_eq!(range(10), (-512, 511));
        assert_eq!(range(16), (i16::MIN, i16::MAX));
        assert_eq!(range(2), (-2, 1));
        assert_eq!(packed_len(4096, 10), 5120);
        assert_eq!(packed_len(3, 3), 2);
    }

    #[test]
    #[should_panic(expected = "run past")]
    fn unpack_past_the_end_panics_with_a_reason() {
        let mut out = [0i16; 5];
        unpack(&[0u8; 5], 10, 0, &mut out);
    }
}

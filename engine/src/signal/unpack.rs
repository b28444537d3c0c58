//! Packed digitiser samples: signed two's complement of 8, 10, 12 or 16 bits, back to back, most
//! significant bit first (docs/wire-formats.md). Same layout as `spead::samples`; this version returns
//! errors instead of panicking and has a fast path per width.
//!
//! A *group* is the smallest run of samples that fills whole bytes (4 samples in 5 bytes at 10 bits,
//! 2 in 3 at 12). Reads from any sample index work: a misaligned head and a short tail are read one
//! sample at a time, the groups in between by the fast path.

use super::{bail, Result};

/// The widths the engine accepts.
pub const WIDTHS: [u32; 4] = [8, 10, 12, 16];

fn check_width(bits: u32) -> Result<()> {
    if !WIDTHS.contains(&bits) {
        bail!("sample width must be 8, 10, 12 or 16 bits, not {bits}");
    }
    Ok(())
}

/// Bytes that `samples` samples of `bits` bits take, rounded up to a whole byte.
pub const fn packed_len(samples: usize, bits: u32) -> usize {
    (samples * bits as usize).div_ceil(8)
}

/// The smallest and largest value a `bits`-bit sample holds.
pub const fn sample_range(bits: u32) -> (i16, i16) {
    let half = 1i32 << (bits - 1);
    (-half as i16, (half - 1) as i16)
}

/// Packs `samples` into the front of `out`; the unused low bits of a final partial byte are zero.
/// `spead::samples::pack` with the width, length and range checked first, as errors.
pub fn pack(samples: &[i16], bits: u32, out: &mut [u8]) -> Result<()> {
    check_width(bits)?;
    let need = packed_len(samples.len(), bits);
    if out.len() < need {
        bail!(
            "{} samples of {bits} bits need {need} bytes, the buffer has {}",
            samples.len(),
            out.len()
        );
    }
    let (lo, hi) = sample_range(bits);
    if let Some((i, s)) = samples
        .iter()
        .enumerate()
        .find(|(_, s)| !(lo..=hi).contains(*s))
    {
        bail!("sample {i} ({s}) does not fit in {bits} bits ({lo} to {hi})");
    }
    // Checked: `spead::samples::pack` cannot panic on these arguments.
    spead::samples::pack(samples, bits, out);
    Ok(())
}

/// Sample `i`, sign-extended. The caller has checked that it lies inside `packed`.
#[inline]
fn one(packed: &[u8], bits: u32, i: usize) -> i16 {
    let bit = i * bits as usize;
    let byte = bit / 8;
    // A sample of at most 16 bits starting at most 7 bits into a byte lies within 3 bytes.
    let mut w = 0u32;
    for k in 0..3 {
        w = (w << 8) | *packed.get(byte + k).unwrap_or(&0) as u32;
    }
    let w = (w << 8) << (bit % 8);
    ((w as i32) >> (32 - bits)) as i16
}

/// A number a sample converts to exactly.
pub trait Sample: Copy {
    fn from_i16(v: i16) -> Self;
}
impl Sample for i16 {
    #[inline(always)]
    fn from_i16(v: i16) -> Self {
        v
    }
}
impl Sample for f32 {
    #[inline(always)]
    fn from_i16(v: i16) -> Self {
        v as f32
    }
}
impl Sample for f64 {
    #[inline(always)]
    fn from_i16(v: i16) -> Self {
        v as f64
    }
}

/// Unpacks `out.len()` samples from sample `first`: groups of `G` samples in `B` bytes.
#[inline(always)]
fn unpack_groups<T: Sample, const BITS: u32, const G: usize, const B: usize>(
    packed: &[u8],
    first: usize,
    out: &mut [T],
) {
    let len = out.len();
    let head = ((G - first % G) % G).min(len);
    for (k, o) in out[..head].iter_mut().enumerate() {
        *o = T::from_i16(one(packed, BITS, first + k));
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
            *o = T::from_i16((((w << (BITS as usize * j)) as i64) >> (64 - BITS)) as i16);
        }
    }
    let done = head + groups * G;
    for (k, o) in tail.iter_mut().enumerate() {
        *o = T::from_i16(one(packed, BITS, first + done + k));
    }
}

/// Unpacks `out.len()` samples starting at sample index `first` (any index, not only
/// byte-aligned), converting each to `T`.
pub fn unpack<T: Sample>(packed: &[u8], bits: u32, first: usize, out: &mut [T]) -> Result<()> {
    check_read(packed, bits, first, out.len())?;
    match bits {
        8 => unpack_groups::<T, 8, 1, 1>(packed, first, out),
        10 => unpack_groups::<T, 10, 4, 5>(packed, first, out),
        12 => unpack_groups::<T, 12, 2, 3>(packed, first, out),
        _ => unpack_groups::<T, 16, 1, 2>(packed, first, out),
    }
    Ok(())
}

fn check_read(packed: &[u8], bits: u32, first: usize, len: usize) -> Result<()> {
    check_width(bits)?;
    let end = first.checked_add(len);
    match end {
        Some(end) if packed_len(end, bits) <= packed.len() => Ok(()),
        _ => bail!(
            "samples {first}..{first}+{len} of {bits} bits lie beyond the buffer of {} bytes",
            packed.len()
        ),
    }
}

/// [`unpack`] to `i16`.
pub fn unpack_i16(packed: &[u8], bits: u32, first: usize, out: &mut [i16]) -> Result<()> {
    unpack(packed, bits, first, out)
}

/// [`unpack`] to `f32` (exact: every sample fits in 24 bits).
pub fn unpack_f32(packed: &[u8], bits: u32, first: usize, out: &mut [f32]) -> Result<()> {
    unpack(packed, bits, first, out)
}

/// [`unpack`] to `f64`.
pub fn unpack_f64(packed: &[u8], bits: u32, first: usize, out: &mut [f64]) -> Result<()> {
    unpack(packed, bits, first, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ten_bit_layout_by_hand() {
        // -1 = 11_1111_1111, 1 = 00_0000_0001, -512 = 10_0000_0000, 511 = 01_1111_1111
        let mut out = [0u8; 5];
        pack(&[-1, 1, -512, 511], 10, &mut out).unwrap();
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
        let mut back = [0i16; 4];
        unpack_i16(&out, 10, 0, &mut back).unwrap();
        assert_eq!(back, [-1, 1, -512, 511]);
    }

    #[test]
    fn twelve_bit_partial_byte_is_zero_padded() {
        let mut out = [0xAAu8; 3];
        pack(&[-1], 12, &mut out).unwrap();
        assert_eq!(out, [0xFF, 0xF0, 0xAA]);
    }

    fn samples_for(bits: u32, len: usize, seed: u64) -> Vec<i16> {
        let (lo, hi) = sample_range(bits);
        let span = hi as i64 - lo as i64 + 1;
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (lo as i64 + (x % span as u64) as i64) as i16
            })
            .collect()
    }

    #[test]
    fn round_trip_every_width_every_offset() {
        for bits in WIDTHS {
            let (lo, hi) = sample_range(bits);
            let mut s = samples_for(bits, 203, bits as u64);
            s[0] = lo;
            s[1] = hi;
            s[2] = -1;
            s[3] = 0;
            let mut packed = vec![0u8; packed_len(s.len(), bits)];
            pack(&s, bits, &mut packed).unwrap();
            // Agrees with the transport crate's packing.
            let mut theirs = vec![0u8; packed.len()];
            spead::samples::pack(&s, bits, &mut theirs);
            assert_eq!(packed, theirs, "{bits} bits");
            for first in 0..12 {
                for len in [0, 1, 2, 3, 5, 8, 13, s.len() - first] {
                    let mut a = vec![i16::MIN; len];
                    unpack_i16(&packed, bits, first, &mut a).unwrap();
                    assert_eq!(a, s[first..first + len], "{bits} bits from {first}, {len}");
                    let mut f = vec![f32::NAN; len];
                    unpack_f32(&packed, bits, first, &mut f).unwrap();
                    let mut d = vec![f64::NAN; len];
                    unpack_f64(&packed, bits, first, &mut d).unwrap();
                    for k in 0..len {
                        assert_eq!(f[k], s[first + k] as f32);
                        assert_eq!(d[k], s[first + k] as f64);
                    }
                }
            }
        }
    }

    #[test]
    fn errors_not_panics() {
        let mut buf = [0u8; 4];
        assert!(pack(&[1, 2], 9, &mut buf).is_err());
        assert!(pack(&[128], 8, &mut buf).is_err());
        assert!(pack(&[512], 10, &mut buf).is_err());
        assert!(pack(&[0; 4], 10, &mut buf).is_err()); // needs 5 bytes
        let mut out = [0i16; 4];
        assert!(unpack_i16(&buf, 10, 0, &mut out[..3]).is_ok()); // 30 bits fit in 4 bytes
        assert!(unpack_i16(&buf, 10, 0, &mut out).is_err());
        assert!(unpack_i16(&buf, 8, usize::MAX, &mut out).is_err());
        assert!(unpack_i16(&buf, 7, 0, &mut out).is_err());
    }

    proptest! {
        #[test]
        fn round_trip_prop(bits_i in 0usize..4, len in 0usize..100, first in 0usize..40, seed: u64) {
            let bits = WIDTHS[bits_i];
            let s = samples_for(bits, len + first, seed);
            let mut packed = vec![0u8; packed_len(s.len(), bits)];
            pack(&s, bits, &mut packed).unwrap();
            let mut back = vec![0i16; len];
            unpack_i16(&packed, bits, first, &mut back).unwrap();
            prop_assert_eq!(&back[..], &s[first..]);
        }
    }
}

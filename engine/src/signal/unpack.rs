//! Packed digitiser samples, checked: `spead::samples` (the one implementation of the format and
//! its fast paths) behind checks that turn a bad width, a short buffer or an out-of-range value
//! into an error rather than a panic, for the widths the engine accepts
//! ([`spead::samples::SAMPLE_BITS`]).

use spead::samples::{packed_len, range, SAMPLE_BITS};

use super::{bail, Result};

fn check_width(bits: u32) -> Result<()> {
    if !SAMPLE_BITS.contains(&bits) {
        bail!("sample width must be 8, 10, 12 or 16 bits, not {bits}");
    }
    Ok(())
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
    let (lo, hi) = range(bits);
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

/// Unpacks `out.len()` samples starting at sample index `first` (any index, not only
/// byte-aligned).
pub fn unpack_i16(packed: &[u8], bits: u32, first: usize, out: &mut [i16]) -> Result<()> {
    check_read(packed, bits, first, out.len())?;
    spead::samples::unpack(packed, bits, first, out);
    Ok(())
}

/// [`unpack_i16`] to `f32` (exact: every sample fits in 24 bits).
pub fn unpack_f32(packed: &[u8], bits: u32, first: usize, out: &mut [f32]) -> Result<()> {
    check_read(packed, bits, first, out.len())?;
    spead::samples::unpack_f32(packed, bits, first, out);
    Ok(())
}

/// [`unpack_i16`] to `f64`.
pub fn unpack_f64(packed: &[u8], bits: u32, first: usize, out: &mut [f64]) -> Result<()> {
    check_read(packed, bits, first, out.len())?;
    spead::samples::unpack_f64(packed, bits, first, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The layout itself is `spead::samples`' to test (`ten_bit_layout_by_hand` there); here the
    /// checked path round-trips the extremes.
    #[test]
    fn ten_bit_extremes_round_trip() {
        let mut out = [0u8; 5];
        pack(&[-1, 1, -512, 511], 10, &mut out).unwrap();
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
        let (lo, hi) = range(bits);
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
        for bits in SAMPLE_BITS {
            let (lo, hi) = range(bits);
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
            let bits = SAMPLE_BITS[bits_i];
            let s = samples_for(bits, len + first, seed);
            let mut packed = vec![0u8; packed_len(s.len(), bits)];
            pack(&s, bits, &mut packed).unwrap();
            let mut back = vec![0i16; len];
            unpack_i16(&packed, bits, first, &mut back).unwrap();
            prop_assert_eq!(&back[..], &s[first..]);
        }
    }
}

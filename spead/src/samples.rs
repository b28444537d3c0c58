//! Digitiser samples on the wire: signed two's-complement integers of `bits` bits (2 to 16),
//! packed back to back, most significant bit first.

/// Bytes that `n` samples of `bits` bits take (rounded up to a whole byte).
pub const fn packed_len(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(8)
}

/// Packs `samples` into `out` (which must hold [`packed_len`] bytes). Values outside the range of
/// `bits` bits keep only their low bits: callers quantise and saturate first.
pub fn pack(samples: &[i16], bits: u32, out: &mut [u8]) {
    assert!(
        (2..=16).contains(&bits),
        "sample width {bits} is not 2 to 16 bits"
    );
    let out = &mut out[..packed_len(samples.len(), bits)];
    match bits {
        8 => {
            for (o, &s) in out.iter_mut().zip(samples) {
                *o = s as u8;
            }
        }
        16 => {
            for (o, &s) in out.chunks_exact_mut(2).zip(samples) {
                o.copy_from_slice(&s.to_be_bytes());
            }
        }
        _ => {
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
    }
}

/// Sample `i` of a packed buffer, sign-extended.
pub fn sample(packed: &[u8], bits: u32, i: usize) -> i16 {
    let bit = i * bits as usize;
    let byte = bit / 8;
    // Read 4 bytes big-endian (zero-padded past the end) and take the field from the top.
    let mut word = [0u8; 4];
    let avail = packed.len().saturating_sub(byte).min(4);
    word[..avail].copy_from_slice(&packed[byte..byte + avail]);
    let w = u32::from_be_bytes(word) << (bit % 8);
    ((w as i32) >> (32 - bits)) as i16
}

/// Unpacks `out.len()` samples starting at sample `first`.
pub fn unpack(packed: &[u8], bits: u32, first: usize, out: &mut [i16]) {
    match bits {
        8 => {
            for (o, &b) in out.iter_mut().zip(&packed[first..]) {
                *o = b as i8 as i16;
            }
        }
        16 => {
            for (o, b) in out.iter_mut().zip(packed[first * 2..].chunks_exact(2)) {
                *o = i16::from_be_bytes([b[0], b[1]]);
            }
        }
        _ => {
            for (k, o) in out.iter_mut().enumerate() {
                *o = sample(packed, bits, first + k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn round_trip_every_width() {
        for bits in 2..=16u32 {
            let lo = -(1i32 << (bits - 1));
            let hi = (1i32 << (bits - 1)) - 1;
            let samples: Vec<i16> = (0..257)
                .map(|k| (lo + (k * 7919) % (hi - lo + 1)) as i16)
                .collect();
            let mut packed = vec![0u8; packed_len(samples.len(), bits)];
            pack(&samples, bits, &mut packed);
            let mut back = vec![0i16; samples.len() - 3];
            unpack(&packed, bits, 3, &mut back);
            assert_eq!(back, samples[3..], "{bits} bits");
            assert_eq!(sample(&packed, bits, 256), samples[256]);
        }
    }
}

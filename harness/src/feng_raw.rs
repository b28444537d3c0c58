//! Reading a heap's `feng_raw`: per channel (major), per spectrum, both polarisations' complex
//! values, in one of the engine's two output formats (docs/wire-formats.md):
//!
//! - 8-bit: two int8 per value (real, imaginary), 4 bytes per channel and spectrum;
//! - 4-bit: one byte per value, the real part in the high nibble and the imaginary part in the low,
//!   each 4-bit two's complement (katgpucbf's packing), 2 bytes per channel and spectrum.
//!
//! Either way each component is clamped to +-limit (127, or 7), and the most negative code is
//! never produced. The engine says which format it sends in its `/status` (`bits` per output).
//! This is the harness's own copy of the packing, independent of the engine's.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Bits per output component: the format of `feng_raw`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub enum OutputBits {
    /// Two int8 per complex value.
    #[default]
    Eight,
    /// One byte per complex value, real part in the high nibble.
    Four,
}

impl OutputBits {
    /// The format of `bits` per component; None for a width the engine does not send.
    pub fn from_bits(bits: u32) -> Option<Self> {
        match bits {
            8 => Some(Self::Eight),
            4 => Some(Self::Four),
            _ => None,
        }
    }

    /// Bits per component: 8 or 4.
    pub fn bits(self) -> u32 {
        match self {
            Self::Eight => 8,
            Self::Four => 4,
        }
    }

    /// Bytes of one complex value.
    pub fn value_bytes(self) -> usize {
        match self {
            Self::Eight => 2,
            Self::Four => 1,
        }
    }

    /// Bytes of one channel of one spectrum: both polarisations' values.
    pub fn spectrum_bytes(self) -> usize {
        2 * self.value_bytes()
    }

    /// The clamp: the largest magnitude a component takes.
    pub fn limit(self) -> i32 {
        match self {
            Self::Eight => 127,
            Self::Four => 7,
        }
    }

    /// Both polarisations' values (re, im) of one channel of one spectrum: `x` holds
    /// [`spectrum_bytes`](Self::spectrum_bytes) bytes (more are ignored).
    #[inline(always)]
    pub fn decode(self, x: &[u8]) -> [[i32; 2]; 2] {
        match self {
            Self::Eight => [
                [i32::from(x[0] as i8), i32::from(x[1] as i8)],
                [i32::from(x[2] as i8), i32::from(x[3] as i8)],
            ],
            Self::Four => [unpack4(x[0]).map(i32::from), unpack4(x[1]).map(i32::from)],
        }
    }

    /// Whether a value has a component at the clamp (the engine clamped it, or it rounded to the
    /// limit exactly).
    #[inline(always)]
    pub fn at_limit(self, v: [i32; 2]) -> bool {
        let l = self.limit();
        v[0].abs() >= l || v[1].abs() >= l
    }
}

impl fmt::Display for OutputBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-bit", self.bits())
    }
}

/// Why a value is not an output format the harness reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputBitsError {
    /// A width the engine may send but the harness does not unpack.
    #[error("{0}-bit output is not one the harness reads (8 or 4)")]
    Unsupported(u32),
    /// Text that is not a number.
    #[error("'{0}' is not a number of bits (8 or 4)")]
    NotANumber(String),
}

impl TryFrom<u32> for OutputBits {
    type Error = OutputBitsError;
    fn try_from(bits: u32) -> Result<Self, OutputBitsError> {
        Self::from_bits(bits).ok_or(OutputBitsError::Unsupported(bits))
    }
}

impl From<OutputBits> for u32 {
    fn from(b: OutputBits) -> u32 {
        b.bits()
    }
}

impl std::str::FromStr for OutputBits {
    type Err = OutputBitsError;
    fn from_str(s: &str) -> Result<Self, OutputBitsError> {
        let bits: u32 = s
            .trim()
            .parse()
            .map_err(|_| OutputBitsError::NotANumber(s.into()))?;
        Self::try_from(bits)
    }
}

/// One byte of 4-bit output: (real, imaginary), each sign-extended from its nibble.
#[inline(always)]
pub fn unpack4(b: u8) -> [i8; 2] {
    [(b as i8) >> 4, ((b << 4) as i8) >> 4]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nibble's two's complement code, written out by hand rather than computed.
    fn code(v: i8) -> u8 {
        const CODES: [u8; 16] = [
            0b1000, 0b1001, 0b1010, 0b1011, 0b1100, 0b1101, 0b1110, 0b1111, // -8..-1
            0b0000, 0b0001, 0b0010, 0b0011, 0b0100, 0b0101, 0b0110, 0b0111, // 0..7
        ];
        CODES[(v + 8) as usize]
    }

    #[test]
    fn every_pair_of_nibbles_unpacks_to_its_parts() {
        for re in -7..=7i8 {
            for im in -7..=7i8 {
                let b = code(re) << 4 | code(im);
                assert_eq!(unpack4(b), [re, im], "byte {b:#04x}");
            }
        }
    }

    #[test]
    fn nibbles_are_sign_extended() {
        assert_eq!(unpack4(0x77), [7, 7]);
        assert_eq!(unpack4(0x99), [-7, -7]);
        assert_eq!(unpack4(0xf1), [-1, 1]);
        assert_eq!(unpack4(0x1f), [1, -1]);
        assert_eq!(
            unpack4(0x0f),
            [0, -1],
            "a negative low nibble does not borrow from the high"
        );
        assert_eq!(unpack4(0xf0), [-1, 0]);
        assert_eq!(
            unpack4(0x88),
            [-8, -8],
            "the code never produced still reads as -8"
        );
        assert_eq!(unpack4(0x00), [0, 0]);
    }

    #[test]
    fn both_formats_decode_a_channel_of_a_spectrum() {
        let eight = OutputBits::Eight;
        assert_eq!(eight.decode(&[127, 0x81, 0xff, 5]), [[127, -127], [-1, 5]]);
        let four = OutputBits::Four;
        assert_eq!(four.decode(&[0x79, 0xf1]), [[7, -7], [-1, 1]]);
        assert_eq!((eight.spectrum_bytes(), four.spectrum_bytes()), (4, 2));
        assert_eq!((eight.limit(), four.limit()), (127, 7));
        assert!(four.at_limit([0, -7]) && four.at_limit([7, 0]) && !four.at_limit([6, -6]));
        assert!(eight.at_limit([-127, 0]) && !eight.at_limit([7, -7]));
    }

    #[test]
    fn widths_parse_and_serialise_as_numbers() {
        assert_eq!("4".parse::<OutputBits>(), Ok(OutputBits::Four));
        assert_eq!(" 8".parse::<OutputBits>(), Ok(OutputBits::Eight));
        assert_eq!(
            "6".parse::<OutputBits>().unwrap_err().to_string(),
            "6-bit output is not one the harness reads (8 or 4)"
        );
        assert_eq!(
            "x".parse::<OutputBits>().unwrap_err().to_string(),
            "'x' is not a number of bits (8 or 4)"
        );
        assert_eq!(serde_json::to_string(&OutputBits::Four).unwrap(), "4");
        assert_eq!(
            serde_json::from_str::<OutputBits>("8").unwrap(),
            OutputBits::Eight
        );
        assert!(serde_json::from_str::<OutputBits>("16").is_err());
        assert_eq!(OutputBits::default(), OutputBits::Eight);
        assert_eq!(OutputBits::Four.to_string(), "4-bit");
    }
}

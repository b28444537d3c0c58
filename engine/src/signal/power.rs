//! Input sensors (docs/signal-path.md §Input sensors): per polarisation and frame, the integer sum
//! of squared samples of the new chunk and the count of samples at full scale. Integers, so every
//! backend reports the same figures; the engine turns them into the rms in dBFS.
//!
//! Full scale is katgpucbf's rule for a saturated sample (its dsim's count, which its F-engine
//! reports as `dig-clip-cnt`): |v| >= 2^(bits-1) - 1, so -512, -511 and 511 at 10 bits. A
//! digitiser that clips symmetrically (to +-511) has all its clipped samples counted.

/// What silence reads (a finite number JSON can carry): below any input with a sample off zero
/// (one LSB of 16-bit input in a frame of 2^33 samples is -170 dBFS).
pub const SILENCE_DBFS: f64 = -200.0;

/// What a backend measured of one polarisation's chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputPower {
    /// Sum of the squared samples (exact: at most 2^30 per sample, 2^33 samples a frame).
    pub sum_squares: u64,
    /// Samples at full scale: |v| >= 2^(bits-1) - 1.
    pub full_scale: u64,
}

impl InputPower {
    /// The measure of `samples` (integer values, as any of the unpackers gives them) of
    /// `bits`-bit input.
    pub fn of<T: Copy + Into<f64>>(samples: &[T], bits: u32) -> Self {
        let full = saturation_level(bits);
        let mut p = Self::default();
        for &s in samples {
            let v = s.into() as i64;
            p.sum_squares += (v * v) as u64;
            p.full_scale += u64::from(v.abs() >= full);
        }
        p
    }

    /// The rms of `samples` samples of `bits`-bit input in dB relative to full scale, 0 dBFS being
    /// a sine wave that just reaches the largest code (katgpucbf's `dig-rms-dbfs`): 10 log10(mean
    /// square / ((2^(bits-1) - 1)^2 / 2)), no lower than [`SILENCE_DBFS`].
    pub fn rms_dbfs(&self, samples: usize, bits: u32) -> f64 {
        let full = ((1u64 << (bits - 1)) - 1) as f64;
        let mean = self.sum_squares as f64 / samples.max(1) as f64;
        (10.0 * (mean / (full * full / 2.0)).log10()).max(SILENCE_DBFS)
    }
}

/// The magnitude from which a `bits`-bit sample counts as saturated: 2^(bits-1) - 1.
pub fn saturation_level(bits: u32) -> i64 {
    (1i64 << (bits - 1)) - 1
}

/// Two parts' measures together.
impl std::ops::Add for InputPower {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        Self {
            sum_squares: self.sum_squares + other.sum_squares,
            full_scale: self.full_scale + other.full_scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_full_scale_counts() {
        let p = InputPower::of(&[3i16, -4, 511, -512, 0, 511], 10);
        assert_eq!(p.sum_squares, 9 + 16 + 511 * 511 * 2 + 512 * 512);
        assert_eq!(p.full_scale, 3);
        let q = InputPower::of(&[127.0f64, -128.0, -127.0, 126.0, -126.0], 8);
        assert_eq!(q.full_scale, 3);
        assert_eq!((p + q).full_scale, 6);
        let r = InputPower::of(&[-32768i16; 4], 16);
        assert_eq!((r.sum_squares, r.full_scale), (4 << 30, 4));
    }

    /// katgpucbf's rule: |v| >= 2^(bits-1) - 1 saturated, so at 10 bits -512, -511 and 511
    /// count and -510 and 510 do not; a digitiser clipping to +-511 has both ends counted.
    #[test]
    fn full_scale_is_katgpucbfs_saturation_rule() {
        for (v, saturated) in [
            (-512i16, true),
            (-511, true),
            (-510, false),
            (510, false),
            (511, true),
        ] {
            assert_eq!(
                InputPower::of(&[v], 10).full_scale,
                u64::from(saturated),
                "{v}"
            );
        }
        let symmetric = [-511i16, 511, -511, 511];
        assert_eq!(InputPower::of(&symmetric, 10).full_scale, 4);
        assert_eq!(
            InputPower::of(&[-32768i16, -32767, 32767, 32766], 16).full_scale,
            3
        );
    }

    #[test]
    fn a_full_scale_sine_is_zero_dbfs() {
        let n = 1 << 16;
        let s: Vec<f64> = (0..n)
            .map(|t| {
                (511.0 * (2.0 * std::f64::consts::PI * 1000.5 * t as f64 / n as f64).sin()).round()
            })
            .collect();
        let db = InputPower::of(&s, 10).rms_dbfs(n, 10);
        assert!(db.abs() < 0.01, "{db}");
        // A tenth of the amplitude: -20 dB.
        let s: Vec<f64> = s.iter().map(|x| (x / 10.0).round()).collect();
        let db = InputPower::of(&s, 10).rms_dbfs(n, 10);
        assert!((db + 20.0).abs() < 0.05, "{db}");
        assert_eq!(InputPower::default().rms_dbfs(n, 10), SILENCE_DBFS);
    }
}

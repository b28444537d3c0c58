//! The narrowband outputs' DDC: which kernel makes it (`ddc`, or `ddc_set` on the tensor cores),
//! its launch shapes and its taps as the kernel reads them.

use crate::launch::{DDC_BLOCK, DDC_TILE};
use crate::Config;

/// Outputs per row of `ddc_set`'s GEMM (the kernel's `MMA_P`).
const MMA_P: usize = 4;
/// The most shared memory a `ddc_set` block may take (of the H100's 227 KB a block may have):
/// enough for L = 4096 taps at D = 32 with 12-bit samples.
const DDC_SET_SMEM: usize = 160 * 1024;

/// Taps per phase of the DDC as the `ddc` kernel reads them: ceil(L / D), rounded up to a whole
/// number of tiles when it takes more than one.
fn ddc_phase_taps(ddc_taps: usize, decimation: usize) -> usize {
    let w = ddc_taps.div_ceil(decimation.max(1));
    let tile = w.clamp(1, DDC_TILE);
    w.next_multiple_of(tile)
}

/// The DDC's taps as the `ddc` kernel reads them, [phase tap p][phase q]: L rounded up to whole
/// phases and tiles (zeros after L).
fn ddc_padded_taps(ddc_taps: usize, decimation: usize) -> usize {
    ddc_phase_taps(ddc_taps, decimation) * decimation.max(1)
}

impl Config {
    /// Whether `ddc_set` makes this narrowband output's DDC, on the tensor cores (else `ddc`, in
    /// the output's own module).
    pub fn ddc_mma(&self) -> bool {
        self.decimation > 1
            && self.tuning.ddc_mma
            && self.sample_bits <= 12
            && self.mma_smem_bytes() + 4 * self.mma_raw_words() <= DDC_SET_SMEM
    }

    /// Taps per phase of the DDC, ceil(L / D).
    pub(crate) fn taps_per_phase(&self) -> usize {
        self.ddc_taps.div_ceil(self.decimation.max(1))
    }

    /// `ddc_set`'s GEMM depth in steps of 16 (`MmaShape::K16`).
    fn mma_k16(&self) -> usize {
        ((MMA_P - 1 + self.taps_per_phase()) * self.decimation).div_ceil(16)
    }

    /// Samples a `ddc_set` block reads for this output (`MmaShape::SAMPLES`).
    fn mma_samples(&self) -> usize {
        (self.mma_outputs_per_block() - MMA_P) * self.decimation + 16 * self.mma_k16()
    }

    /// `ddc_set`'s shared memory for this output's float16 samples: `MmaShape::WORDS` words.
    pub fn mma_smem_bytes(&self) -> usize {
        let (d, samples) = (self.decimation, self.mma_samples());
        (samples + 8 * (samples / (4 * d)) + 8) / 2 * 4
    }

    /// The packed words a `ddc_set` block stages for this output.
    pub fn mma_raw_words(&self) -> usize {
        self.mma_samples() * self.sample_bits as usize / 32
    }

    /// `ddc_set`'s outputs per block (`MmaShape::OUT`).
    fn mma_outputs_per_block(&self) -> usize {
        self.tuning.ddc_set_span / self.decimation.max(1)
    }

    /// Subsampled samples each block of the DDC kernel makes.
    pub fn ddc_outputs_per_block(&self) -> usize {
        if self.ddc_mma() {
            self.mma_outputs_per_block()
        } else {
            DDC_BLOCK * self.tuning.ddc_outputs
        }
    }

    /// Bytes of [`Self::ddc_taps_table`].
    pub fn ddc_taps_table_bytes(&self) -> usize {
        if self.ddc_mma() {
            self.mma_k16() * 32 * 16
        } else {
            8 * ddc_padded_taps(self.ddc_taps, self.decimation)
        }
    }

    /// The DDC's taps z_k (k < L, complex as (re, im)) as the DDC kernel reads them, and the
    /// factor the kernel scales its sums by.
    ///
    /// For `ddc`, float32 pairs [phase tap p][phase q], zero-padded to whole phases and tiles;
    /// scale 1. For `ddc_set`, each lane's B fragments of the GEMM, `[k-step][lane]`, as float16
    /// pairs (hi rows 2t, 2t + 1; hi rows 2t + 8, 2t + 9; the same for lo) of column g = lane / 4,
    /// with G[i][2b + c] = part c of z_{i - bD} times 2^e, hi + lo the tap to 22 bits, and 2^e
    /// putting the largest tap in [2^14, 2^15) (float16 keeps the smallest taps normal); scale
    /// 2^-e.
    pub fn ddc_taps_table(&self, z: &[(f64, f64)]) -> (Vec<u8>, f32) {
        if !self.ddc_mma() {
            let bytes = (0..ddc_padded_taps(self.ddc_taps, self.decimation))
                .flat_map(|k| {
                    let (re, im) = z.get(k).copied().unwrap_or((0.0, 0.0));
                    [re as f32, im as f32]
                })
                .flat_map(f32::to_ne_bytes)
                .collect();
            return (bytes, 1.0);
        }
        let largest = z
            .iter()
            .map(|&(re, im)| re.abs().max(im.abs()))
            .fold(0.0, f64::max);
        let e = if largest > 0.0 {
            14 - largest.log2().floor() as i32
        } else {
            0
        };
        let scale = 2f64.powi(e);
        let d = self.decimation as isize;
        let g_at = |i: usize, col: usize| -> f64 {
            let k = i as isize - (col / 2) as isize * d;
            match usize::try_from(k).ok().and_then(|k| z.get(k)) {
                Some(&(re, im)) => [re, im][col % 2] * scale,
                None => 0.0,
            }
        };
        let split = |v: f64| {
            let hi = half::f16::from_f64(v);
            (hi, half::f16::from_f64(v - hi.to_f64()))
        };
        let pair =
            |a: half::f16, b: half::f16| u32::from(a.to_bits()) | u32::from(b.to_bits()) << 16;
        let bytes = (0..self.mma_k16())
            .flat_map(|k| (0..32).map(move |lane| (k, lane)))
            .flat_map(|(k, lane)| {
                let (g, t) = (lane / 4, lane % 4);
                let rows = [16 * k + 2 * t, 16 * k + 2 * t + 8];
                let [(h0, l0), (h1, l1), (h2, l2), (h3, l3)] =
                    [rows[0], rows[0] + 1, rows[1], rows[1] + 1].map(|i| split(g_at(i, g)));
                [pair(h0, h1), pair(h2, h3), pair(l0, l1), pair(l2, l3)]
            })
            .flat_map(u32::to_ne_bytes)
            .collect();
        (bytes, (1.0 / scale) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::cfg;
    use crate::Tuning;

    #[test]
    fn ddc_mma_table_holds_each_tap_in_its_place_to_22_bits() {
        let cfg = Config {
            decimation: 8,
            ddc_taps: 12 * 8 + 1, // odd: 13 taps per phase, the last phase padded
            ..cfg()
        };
        assert!(cfg.ddc_mma());
        let z: Vec<(f64, f64)> = (0..cfg.ddc_taps)
            .map(|k| {
                (
                    (k as f64 * 0.37 + 0.5).sin() * 1e-2,
                    (k as f64 * 0.11).cos() * 3e-6,
                )
            })
            .collect();
        let (bytes, scale) = cfg.ddc_taps_table(&z);
        assert_eq!(bytes.len(), cfg.ddc_taps_table_bytes());
        // The largest tap, 1e-2 or nearly, lands in [2^14, 2^15).
        assert_eq!(scale, 2f32.powi(-(14 + 7)));
        let f16s: Vec<f64> = bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_bits(u16::from_ne_bytes([b[0], b[1]])).to_f64())
            .collect();
        // k-steps of 16: (4 - 1 + 13) 8 = 128 deep.
        let k16 = f16s.len() / (32 * 8);
        assert_eq!(k16, 8);
        let mut seen = 0;
        for k in 0..k16 {
            for lane in 0..32 {
                let (g, t) = (lane / 4, lane % 4);
                let f = &f16s[8 * (32 * k + lane)..][..8];
                let rows = [
                    16 * k + 2 * t,
                    16 * k + 2 * t + 1,
                    16 * k + 2 * t + 8,
                    16 * k + 2 * t + 9,
                ];
                for (r, i) in rows.into_iter().enumerate() {
                    // Column g: output b = g / 2, part g % 2; row i reads z_{i - 8b}.
                    let want = (i as isize - 8 * (g / 2) as isize)
                        .try_into()
                        .ok()
                        .and_then(|k: usize| z.get(k))
                        .map_or(0.0, |&(re, im)| [re, im][g % 2]);
                    let got = (f[r] + f[4 + r]) * scale as f64;
                    assert!(
                        (got - want).abs() <= want.abs() * 2f64.powi(-21),
                        "{got} {want}"
                    );
                    seen += usize::from(want != 0.0);
                }
            }
        }
        // Every tap appears once per output of the row: 4 outputs x 2 parts.
        assert_eq!(seen, 4 * 2 * cfg.ddc_taps);
    }

    #[test]
    fn ddc_kernel_choice() {
        let nb = |bits, decimation, ddc_taps, ddc_mma| Config {
            sample_bits: bits,
            decimation,
            ddc_taps,
            nb_points: 8192,
            tuning: Tuning {
                ddc_mma,
                ..Tuning::default()
            },
            ..cfg()
        };
        assert!(nb(12, 32, 384, true).ddc_mma());
        assert!(
            !nb(16, 8, 96, true).ddc_mma(),
            "16-bit samples are not exact in float16"
        );
        assert!(!nb(10, 8, 96, false).ddc_mma());
        // The longest DDC fits a block's shared memory at every decimation.
        for d in [8, 16, 32] {
            let c = nb(12, d, 4096, true);
            assert!(c.ddc_mma(), "D {d}");
            assert!(c.mma_smem_bytes() + 4 * c.mma_raw_words() <= 160 * 1024);
        }
        assert!(!cfg().ddc_mma(), "wideband");
        assert_eq!(nb(10, 8, 96, true).ddc_outputs_per_block(), 8192 / 8);
        assert_eq!(nb(10, 8, 96, false).ddc_outputs_per_block(), DDC_BLOCK * 7);
        // Every warp needs a whole tile (64 outputs) of every output.
        let wide = |decimation| Config {
            tuning: Tuning {
                ddc_mma_warps: 8,
                ddc_set_span: 8192,
                ..Tuning::default()
            },
            ..nb(10, decimation, 12 * decimation, true)
        };
        assert!(wide(16).validate().is_ok());
        assert!(wide(32)
            .validate()
            .unwrap_err()
            .to_string()
            .contains("at least 512 outputs"));
    }
}

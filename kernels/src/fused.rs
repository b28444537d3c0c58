//! The two wideband passes (`fused_fir`, `fused_post`): whether an output takes them, and their
//! FFT's split and launch shapes.

use crate::launch::{FIR_TMA_WORDS, FUSED_MIN_CHANNELS, FUSED_POST_THREADS, FUSED_TILE};
use crate::{Config, Tuning};

/// The two-pass split n = R x A of an n-channel output's complex FFT with R from
/// [`Tuning::fused_min_r`] to [`Tuning::fused_max_r`] (or their defaults): (R, A), as [`Config::fused_split`] says.
pub fn fused_split(channels: usize, tuning: &Tuning) -> (usize, usize) {
    let a = match channels / tuning.min_r(channels) {
        a if a >= 64 => a,
        _ => channels / 16,
    };
    let a = a.clamp(1, 1024).max(channels / tuning.max_r());
    (channels / a, a)
}

impl Config {
    /// Whether this output runs the two-pass wideband kernels (see [`Tuning::fused`]).
    pub fn fused(&self) -> bool {
        self.tuning.fused
            && self.decimation == 1
            && self.channels >= FUSED_MIN_CHANNELS
            && self.channels <= self.tuning.fused_max_channels
            && self.tuning.fir_batch == 16
    }

    /// The two-pass split n = R x A of the n-point complex FFT: (R, A). R is
    /// [`Tuning::fused_min_r`] (16, or 32 from 4096 channels with float32 rows) while A is at
    /// most 1024, then A stays 1024 while R grows to [`Tuning::fused_max_r`], and then A grows
    /// (to 2048: 65536 channels with R = 32).
    pub fn fused_split(&self) -> (usize, usize) {
        fused_split(self.channels, &self.tuning)
    }

    /// Threads per `fused_post` block: 16 points of one transform each, 4 transforms at once
    /// (256 where A <= 1024, A / 4 above).
    pub fn fused_post_threads(&self) -> usize {
        FUSED_POST_THREADS.max(self.fused_split().1 / 4)
    }

    /// Bytes of one complex value of the rows between the two passes: 4 in float16
    /// ([`Tuning::half_rows`]), else 8.
    pub fn fused_row_bytes(&self) -> usize {
        if self.tuning.half_rows {
            4
        } else {
            8
        }
    }

    /// Columns of each of the R column groups a `fused_fir` block takes (it runs R x this many
    /// threads): [`Tuning::fused_fir_columns`], 8 unless set.
    pub fn fused_columns(&self) -> usize {
        match self.tuning.fused_fir_columns {
            0 => 8,
            c => c,
        }
    }

    /// Whether a sliding `fused_fir` batch loads at word steps ([`Tuning::fused_fir_word_steps`]).
    pub(crate) fn fused_fir_word_steps(&self) -> bool {
        let r = self.fused_split().0;
        self.tuning.fused_fir_word_steps.unwrap_or(r == 16)
    }

    /// Sample pairs a sliding `fused_fir` batch loads a batch ahead ([`Tuning::fused_fir_ahead`]).
    pub(crate) fn fused_fir_ahead(&self) -> usize {
        let (r, a) = self.fused_split();
        let by_copies = self.tuning.fused_fir_tma && (self.tuning.half_rows || a >= 512);
        self.tuning
            .fused_fir_ahead
            .unwrap_or(if r == 16 && !by_copies { 4 } else { 0 })
    }

    /// Steps ahead whose rows a `fused_post` block prefetches ([`Tuning::fused_post_prefetch`]).
    pub(crate) fn fused_post_prefetch(&self) -> usize {
        let a = self.fused_split().1;
        self.tuning
            .fused_post_prefetch
            .unwrap_or(if a >= 512 { 1 } else { 0 })
    }

    /// Whether a sliding `fused_fir` batch's words come by tensor copy ([`Tuning::fused_fir_tma`]).
    pub fn fused_fir_tma(&self) -> bool {
        self.tuning.fused_fir_tma && self.fused_fir_ahead() == 0 && self.fused_columns() <= 8
    }

    /// [`Tuning::fused_post_gather`], or its default, at most the channels a `fused_post` thread
    /// takes of a row (8, or 4 below A = 512).
    pub(crate) fn fused_post_gather(&self) -> usize {
        let a = self.fused_split().1;
        // F2_J in fused.cu: from A = 512 a thread takes one polarisation, so twice the channels.
        let per_row = if a >= 512 { 8 } else { 4 };
        let g = match self.tuning.fused_post_gather {
            0 if a == 1024 => 4,
            0 if a >= 512 => 8,
            0 => 1,
            g => g,
        };
        // The kernel takes a divisor of the row's channels: a power of two.
        1 << g.min(per_row).ilog2()
    }

    /// [`Tuning::fused_post_ahead`], or its default: below A = 512.
    pub(crate) fn fused_post_ahead(&self) -> bool {
        self.tuning
            .fused_post_ahead
            .unwrap_or(self.fused_split().1 < 512)
    }

    /// Row loads a `fused_post` step issues during the step before ([`Tuning::fused_post_early`]).
    pub(crate) fn fused_post_early(&self) -> usize {
        let a = self.fused_split().1;
        let default = match (self.tuning.half_rows, a) {
            (true, _) => 8,
            (false, 64) => 4,
            (false, 256) => 16,
            (false, 512) => 0,
            (false, _) => 8,
        };
        self.tuning.fused_post_early.unwrap_or(default).min(16)
    }

    /// Dynamic shared memory of a `fused_fir` block: a batch of its FIR's values, and with
    /// [`Config::fused_fir_tma`] two batches' boxes of words.
    pub fn fused_fir_smem(&self) -> usize {
        let (r, _) = self.fused_split();
        let buffers = if self.fused_fir_ahead() > 0 { 2 } else { 1 };
        let boxes = match self.fused_fir_tma() {
            true => 2 * 4 * self.tuning.fir_batch * r * FIR_TMA_WORDS,
            false => 0,
        };
        buffers * 8 * self.tuning.fir_batch * r * self.fused_columns() + boxes
    }

    /// Spectra a `fused_post` block transforms at once (4 transforms a spectrum, 16 points a
    /// thread: 1024 / A where A <= 1024, else 1), and spectra per block (its tile's: at least 8;
    /// see [`Tuning::fused_tile`]).
    pub fn fused_post_spectra(&self) -> (usize, usize) {
        let a = self.fused_split().1;
        let tile = match self.tuning.fused_tile {
            0 => FUSED_TILE.max(16 * a),
            t => t,
        };
        let at_once = 4 * self.fused_post_threads() / a;
        (at_once, (tile / (2 * a)).max(at_once))
    }

    /// Dynamic shared memory of a `fused_post` block: its rows (padded one value in 16), the
    /// later FFT stages' twiddles and the output tile (`F2_SMEM_FLOAT2` and the tile in
    /// fused.cu).
    pub fn fused_post_smem(&self) -> usize {
        let (_, a) = self.fused_split();
        let (at_once, spectra) = self.fused_post_spectra();
        // Twiddles of the stages after the first (radix 16): P L each, P = min(16, A / L).
        let (mut twiddles, mut l) = (0, 16);
        while l < a {
            let p = (a / l).min(16);
            twiddles += p * l;
            l *= p;
        }
        let qjones = if self.output_bits == 4 { 2 } else { 4 };
        8 * (4 * at_once * (a + a / 16) + twiddles) + 2 * a * spectra * qjones
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source;
    use crate::testing::{cfg, wide};

    #[test]
    fn two_pass_splits() {
        // Each channel's run at least 8 spectra by default. Two passes run from 1024 channels up
        // unless told otherwise.
        let three_pass = Config {
            channels: 65536,
            tuning: Tuning {
                fused_max_channels: 32768,
                ..Tuning::default()
            },
            ..cfg()
        };
        assert!(!three_pass.fused());
        assert!(Config {
            channels: 65536,
            ..cfg()
        }
        .fused());
        assert!(wide(65536, 8, 0).fused());
        // The splits: R = 16 up to 2048 channels, 32 from 4096 (float32 rows, tensor copies),
        // then A = 1024 up to R = 32 (or 64), then A grows.
        for (channels, max_r, split, post_threads) in [
            (1024, 0, (16, 64), 256),
            (2048, 0, (16, 128), 256),
            (4096, 0, (32, 128), 256),
            (16384, 0, (32, 512), 256),
            (32768, 0, (32, 1024), 256),
            (65536, 0, (32, 2048), 512),
            (65536, 64, (64, 1024), 256),
        ] {
            let mut c = wide(channels, 0, 0);
            c.tuning.fused_max_r = max_r;
            assert_eq!(c.fused_split(), split, "{channels} {max_r}");
            assert_eq!(c.fused_post_threads(), post_threads, "{channels} {max_r}");
            assert!(c.fused_post_smem() <= 227 * 1024, "{channels} {max_r}");
        }
        assert_eq!(fused_split(65536, &Tuning::half_rows()), (32, 2048));
        // R = 16 up to 16384 channels with float16 rows, or without tensor copies.
        let no_copies = Tuning {
            fused_fir_tma: false,
            ..Tuning::default()
        };
        for t in [Tuning::half_rows(), no_copies] {
            assert_eq!(fused_split(4096, &t), (16, 256));
            assert_eq!(fused_split(16384, &t), (16, 1024));
        }
        // At least 32 rows where that leaves A >= 64: 2048 to 32768 channels.
        let at_least_32 = Tuning {
            fused_min_r: 32,
            ..Tuning::default()
        };
        for (channels, split) in [
            (1024, (16, 64)),
            (2048, (32, 64)),
            (4096, (32, 128)),
            (16384, (32, 512)),
            (32768, (32, 1024)),
            (65536, (32, 2048)),
        ] {
            assert_eq!(fused_split(channels, &at_least_32), split, "{channels}");
        }
        for channels in [1024, 4096, 16384, 32768, 65536] {
            let (_, a) = wide(channels, 0, 0).fused_split();
            let (at_once, spectra) = wide(channels, 0, 0).fused_post_spectra();
            assert!(
                spectra >= 8 && spectra.is_multiple_of(at_once),
                "{channels}"
            );
            assert_eq!(2 * a * spectra, 8192.max(16 * a), "{channels}");
        }
    }

    #[test]
    fn fir_pairs_ahead() {
        // 4 pairs a batch ahead at R = 16 (two batches in shared memory) where tensor copies do
        // not take the batch instead (float32 rows below A = 512, or no tensor copies), none at
        // R = 32 and 64.
        let ahead = |channels, fused_fir_ahead, fused_max_r| Config {
            channels,
            tuning: Tuning {
                fused_fir_ahead,
                fused_max_r,
                ..Tuning::default()
            },
            ..cfg()
        };
        let no_copies = |channels| Config {
            tuning: Tuning {
                fused_fir_tma: false,
                ..Tuning::default()
            },
            ..ahead(channels, None, 0)
        };
        let half = |channels| Config {
            tuning: Tuning {
                half_rows: true,
                ..Tuning::default()
            },
            ..ahead(channels, None, 0)
        };
        for (c, pairs) in [
            (ahead(1024, None, 0), 4),
            (ahead(2048, None, 0), 4),
            (ahead(4096, None, 0), 0),
            (ahead(8192, None, 0), 0),
            (ahead(16384, None, 0), 0),
            (no_copies(16384), 4),
            (half(1024), 0),
            (half(16384), 0),
            (ahead(32768, None, 0), 0),
            (ahead(65536, None, 64), 0),
        ] {
            assert_eq!(c.fused_fir_ahead(), pairs, "{c:?}");
            assert!(source(&c).contains(&format!("#define FIR_AHEAD {pairs}\n")));
        }
        // One batch of values with no pairs ahead (and no tensor copies' boxes), two with.
        let mut one = ahead(2048, Some(0), 0);
        one.tuning.fused_fir_tma = false;
        assert_eq!(
            ahead(2048, None, 0).fused_fir_smem(),
            2 * one.fused_fir_smem()
        );
        assert!(ahead(4096, Some(16), 0).validate().is_ok());
        let e = ahead(4096, Some(17), 0).validate().unwrap_err();
        assert!(
            e.to_string()
                .contains("at most a batch's 16 sample pairs ahead, not 17"),
            "{e:?}"
        );
    }

    #[test]
    fn fir_samples_by_tensor_copy_where_no_pairs_go_ahead() {
        let with = |channels, fused_fir_ahead, fused_fir_columns| Config {
            channels,
            tuning: Tuning {
                fused_fir_ahead,
                fused_fir_columns,
                ..Tuning::default()
            },
            ..cfg()
        };
        // On by default where no pairs go ahead: R >= 32, R = 16 from A = 512 (or with float16
        // rows), or R = 16 when told.
        for (c, tma) in [
            (with(2048, None, 0), false),
            (with(2048, Some(0), 0), true),
            (with(4096, None, 0), true),
            (with(8192, None, 0), true),
            (with(16384, Some(4), 0), false),
            (with(32768, None, 0), true),
            (with(65536, None, 0), true),
            (with(32768, None, 16), false),
        ] {
            assert_eq!(c.fused_fir_tma(), tma, "{c:?}");
            let define = format!("#define FIR_TMA {}\n", u32::from(tma));
            assert!(source(&c).contains(&define));
        }
        // Two boxes of 16 spectra x R groups x FIR_TMA_WORDS words beside the batch of values.
        let loads = Config {
            tuning: Tuning {
                fused_fir_tma: false,
                ..Tuning::default()
            },
            ..with(32768, None, 0)
        };
        let boxes = 2 * 16 * 32 * FIR_TMA_WORDS * 4;
        assert_eq!(
            with(32768, None, 0).fused_fir_smem(),
            loads.fused_fir_smem() + boxes
        );
    }

    #[test]
    fn post_row_barriers_by_default() {
        for (channels, on) in [(1024, true), (65536, true), (32768, false)] {
            let c = Config {
                channels,
                tuning: Tuning {
                    fused_post_row_sync: on,
                    ..Tuning::default()
                },
                ..cfg()
            };
            let define = format!("#define POST_ROW_SYNC {}\n", u32::from(on));
            assert!(source(&c).contains(&define), "{channels}");
        }
        assert!(Tuning::default().fused_post_row_sync);
    }

    #[test]
    fn post_gathers_divide_a_row() {
        let with = |channels, gather| Config {
            channels,
            tuning: Tuning {
                fused_post_gather: gather,
                ..Tuning::default()
            },
            ..cfg()
        };
        // Defaults by A (R = 32 from 4096 channels): 1 below 512, 8 at 512 and 2048, 4 at 1024;
        // asked-for values round down to a power of two within the row's 4 or 8 channels.
        for (channels, gather, expect) in [
            (4096, 0, 1),
            (16384, 0, 8),
            (32768, 0, 4),
            (65536, 0, 8),
            (32768, 3, 2),
            (32768, 16, 8),
            (4096, 8, 4),
        ] {
            let c = with(channels, gather);
            assert_eq!(
                c.fused_post_gather(),
                expect,
                "{channels} channels, {gather}"
            );
            assert!(source(&c).contains(&format!("#define POST_GATHER {expect}\n")));
        }
    }

    #[test]
    fn post_early_loads_by_a() {
        let with = |channels, half_rows, fused_post_early| Config {
            channels,
            tuning: Tuning {
                half_rows,
                fused_post_early,
                ..Tuning::default()
            },
            ..cfg()
        };
        // Float32 rows by A (1024: 64; 2048 and 4096: 128; 8192: 256; 16384: 512; 32768: 1024;
        // 65536: 2048), float16 rows 8 at every A; asked-for counts above 16 are 16.
        for (channels, half, early, expect) in [
            (1024, false, None, 4),
            (2048, false, None, 8),
            (4096, false, None, 8),
            (8192, false, None, 16),
            (16384, false, None, 0),
            (32768, false, None, 8),
            (65536, false, None, 8),
            (8192, true, None, 8),
            (16384, true, None, 8),
            (32768, false, Some(3), 3),
            (32768, false, Some(40), 16),
        ] {
            let c = with(channels, half, early);
            assert_eq!(
                c.fused_post_early(),
                expect,
                "{channels} channels, {half}, {early:?}"
            );
            assert!(source(&c).contains(&format!("#define POST_EARLY {expect}\n")));
        }
    }

    #[test]
    fn post_rows_prefetched_where_a_is_512_on() {
        // One step ahead from A = 512 (16384 channels with R = 32), none below.
        let with = |channels, fused_post_prefetch| Config {
            channels,
            tuning: Tuning {
                fused_post_prefetch,
                ..Tuning::default()
            },
            ..cfg()
        };
        for (channels, steps) in [(1024, 0), (8192, 0), (16384, 1), (32768, 1), (65536, 1)] {
            let c = with(channels, None);
            assert_eq!(c.fused_post_prefetch(), steps, "{channels}");
            assert!(source(&c).contains(&format!("#define POST_PREFETCH {steps}\n")));
        }
        assert_eq!(with(32768, Some(0)).fused_post_prefetch(), 0);
        assert!(with(4096, Some(4)).validate().is_ok());
        let e = with(4096, Some(5)).validate().unwrap_err();
        assert!(
            e.to_string().contains("at most 4 steps ahead, not 5"),
            "{e:?}"
        );
    }
}

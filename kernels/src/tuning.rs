//! Launch-shape choices that change speed, not results, and their measured defaults.

#[cfg(doc)]
use crate::{Config, FUSED_MIN_CHANNELS, POSTPROC_TILE};

/// Launch-shape choices that change speed, not results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Spectra whose new samples `pfb_fir` loads together (memory-level parallelism).
    pub fir_batch: usize,
    /// Threads per block of `pfb_fir` (at most; never more than the channels).
    pub fir_block: usize,
    /// Thread rows per block of `postproc`: a divisor of [`POSTPROC_TILE`].
    pub postproc_rows: usize,
    /// Consecutive subsampled samples each `ddc` thread computes: odd (so that a warp's
    /// shared-memory reads fall in distinct banks), at most `MAX_DDC_OUTPUTS` (15).
    pub ddc_outputs: usize,
    /// The DDC on the tensor cores (`ddc_set`) where the samples are exact in float16 (at most 12
    /// bits) and the GPU has them (sm_80 on); else `ddc` on the FMA pipe.
    pub ddc_mma: bool,
    /// Warps per block of `ddc_set`: 4 or 8, each with at least one 16-row tile of every
    /// output (64 outputs).
    pub ddc_mma_warps: usize,
    /// Input samples each `ddc_set` block covers, whatever the output (8192 or 16384): it makes
    /// `ddc_set_span / S` outputs of each (S the DDC's decimation, [`crate::Config::decimation`]).
    pub ddc_set_span: usize,
    /// The fewest points (P: 2n, or n without discard) for which a narrowband output's FFT is
    /// unzipped by 4: where cuFFT would take two passes through memory.
    pub nb_unzip_from: usize,
    /// A wideband output of [`FUSED_MIN_CHANNELS`] to [`Tuning::fused_max_channels`] channels
    /// runs in two passes (`fused_fir`, `fused_post`: the FFT our own, split between them)
    /// instead of three (`pfb_fir`, cuFFT, `postproc`): the default, faster at those sizes
    /// (kernels/DESIGN.md). Off, the three passes are the fallback.
    pub fused: bool,
    /// The most channels for which [`Tuning::fused`] takes two passes: all (65536 included,
    /// where they measured 900 µs a frame against the three passes' 1040, H100).
    pub fused_max_channels: usize,
    /// Spectra per chunk of the two-pass kernels (a multiple of 16; 0: the whole frame). In
    /// chunks, `fused_post` reads each chunk's rows while `fused_fir` makes the next, from L2.
    /// Slower than whole frames at every chunk size measured (64 to 512 spectra: the kernels
    /// side by side each have half an SM's warps; kernels/HISTORY.md, "After version 19: the two passes side by side").
    pub fused_chunk: usize,
    /// Spectra each `fused_fir` block slides through (a multiple of 16; 0: 512, fewer where
    /// fewer blocks than fit on the GPU at once would have all the work).
    pub fused_fir_spectra: usize,
    /// Columns of each column group a `fused_fir` block takes: 4, 8 or 16, at most 512 / R
    /// (0: 8, so R x 8 threads).
    pub fused_fir_columns: usize,
    /// How a sliding `fused_fir` batch finds its 16 new sample pairs: at constant word steps from
    /// one offset (`Some(true)`: 32 loads back to back, no offsets read), or each from its own
    /// offset (`Some(false)`). `None`: word steps at R = 16 only; at R = 32 and 64 their burst of
    /// loads throttles the load/store queue, and per-offset loads measured 2.5-5.5% faster in
    /// `fused_fir` with float32 or float16 rows (H200; kernels/HISTORY.md, "Version 12").
    pub fused_fir_word_steps: Option<bool>,
    /// How many of a sliding `fused_fir` batch's 16 new sample pairs are loaded while the batch
    /// before is transformed (0 to 16), so that their latency passes behind that work: the block
    /// then keeps two batches in shared memory (one barrier a batch instead of two) and reads
    /// its weights again for each batch (from L1), so that their registers can hold the pairs.
    /// 0: none, one batch in shared memory. `None`: 4 at R = 16 (`fused_fir` 6-8% faster at
    /// 1024-16384 channels with float32 rows, 4% with float16; H200), 0 at R = 32 and 64, where
    /// no count measured faster (kernels/HISTORY.md, "Version 14"). More than 8 spill registers.
    /// Where tensor copies take a sliding batch instead (sm_90), `None` is 0 at R = 16 too with
    /// float16 rows, and with float32 rows from A = 512 (8192 and 16384 channels where
    /// [`Tuning::fused_min_r`] is 16; by default float32 rows take R = 32 there): there they
    /// measured faster than pairs ahead, and below A = 512 in float32 slower (kernels/HISTORY.md,
    /// "Version 18").
    pub fused_fir_ahead: Option<usize>,
    /// Where no pairs are loaded ahead (by default R >= 32, and R = 16 with float16 rows or
    /// A >= 512) and a group has at most 8 columns, a
    /// sliding `fused_fir` batch's sample words come into shared memory by one bulk tensor copy
    /// a block (TMA, sm_90), issued a batch ahead, instead of 32 loads a thread: `fused_fir`
    /// 18% faster at 32768 and 65536 channels (H200; kernels/HISTORY.md, "Version 17"). On.
    pub fused_fir_tma: bool,
    /// How many of its steps ahead a `fused_post` block has a step's rows prefetched into L2
    /// (`cp.async.bulk.prefetch`, sm_90 on), 0 to 4 (0: none). `None`: 1 where A >= 512
    /// (16384 channels on with float32 rows, 8192 with float16: `fused_post` 4-9% faster, H200),
    /// none below, where it measured slower (kernels/HISTORY.md, "Version 15").
    pub fused_post_prefetch: Option<usize>,
    /// `fused_post`'s FFT stages wait on barriers of each transform's own A / 16 threads (its
    /// warp's where A <= 512, else a named barrier of its own), and the block or half meets only
    /// where its threads read other transforms' values: 2 barriers of the group a step instead
    /// of 4 to 6 (on: kernels/HISTORY.md, "Version 16"). Off, every barrier is the group's.
    pub fused_post_row_sync: bool,
    /// Channels of a row whose operands (its values, its partner's, its rotation) `fused_post`
    /// reads from shared memory together, before it quantises and stores any of them: 1, 2, 4
    /// or 8 (at most the 8 a thread takes of a row, or 4 below A = 512; other values round down
    /// to one of these). 0: 8 where A is 512 or 2048, 4 where A = 1024, 1 below A = 512
    /// (kernels/HISTORY.md, "Version 20").
    pub fused_post_gather: usize,
    /// Whether `fused_post` reads the next [`Tuning::fused_post_gather`] channels' operands
    /// before it works on the ones it has. `None`: below A = 512 only.
    pub fused_post_ahead: Option<bool>,
    /// How many of a `fused_post` step's 16 row loads a thread issues during the step before,
    /// ahead of that step's post-processing (0 to 16; more are taken as 16), so that their
    /// latency passes behind that work rather than after the barrier that starts the step.
    /// `None`: with float16 rows 8; with float32 rows 4 at A = 64, 8 at A = 128, 1024 and 2048,
    /// 16 at A = 256 and none at A = 512, where more measured slower (`fused_post` 1-4% faster
    /// at the others, H200; kernels/HISTORY.md, "Version 21").
    pub fused_post_early: Option<usize>,
    /// The most rows R of the two-pass split (see [`Config::fused_split`]): 32 or 64 (0: 32). At
    /// 65536 channels, 32 makes A = 2048: `fused_post` blocks of 512 threads, one an SM (rows and
    /// tile take 214 KB of shared memory), which beat R = 64 with float32 rows (H100, version 10)
    /// and, since `fused_post`'s polarisation halves (version 13, H200), with float16 rows too
    /// (722.8 against 747.3 µs a frame; kernels/HISTORY.md).
    pub fused_max_r: usize,
    /// The fewest rows R of the two-pass split: 16 or 32, where that leaves A >= 64. 0: 32 with
    /// float32 rows and tensor copies where it leaves A >= 128 (4096 to 16384 channels), else 16.
    /// With tensor copies `fused_fir` costs about the same at R = 32 as at 16, and `fused_post`
    /// less on shorter rows: 1-7% faster whole frames at 4096-16384 channels, but 5% slower at
    /// 2048 (A = 64), and with float16 rows slower at every size, their rounding costing
    /// `fused_fir` more at R = 32 (H200; kernels/HISTORY.md, "Version 18").
    pub fused_min_r: usize,
    /// Values in a `fused_post` block's output tile, 2A channels x its spectra: a power of two
    /// (0: `FUSED_TILE` (8192) or 16 A, whichever is more, so that each channel's run is at least 8
    /// spectra).
    pub fused_tile: usize,
    /// Not a launch shape but a precision (`--fft-precision half`): the two-pass kernels keep the
    /// rows between their passes in float16 instead of float32, 4 bytes a complex value instead
    /// of 8, rounded stochastically; the arithmetic stays float32. It changes the output:
    /// kernels/HISTORY.md ("Float16 rows") measures by how much. Outputs on the three passes are
    /// not affected.
    pub half_rows: bool,
    /// Not a kernel's but the pipeline's: each output beyond the first runs on a stream of its
    /// own, so that one output's kernels fill what another's leave idle (bandwidth against
    /// arithmetic); else all run in turn on one stream.
    pub concurrent_outputs: bool,
}

impl Tuning {
    /// The defaults with float16 rows ([`Tuning::half_rows`]).
    pub fn half_rows() -> Self {
        Self {
            half_rows: true,
            ..Self::default()
        }
    }

    /// [`Tuning::fused_max_r`], or its default.
    pub(crate) fn max_r(&self) -> usize {
        match self.fused_max_r {
            0 => 32,
            r => r,
        }
    }

    /// [`Tuning::fused_min_r`] for an output of `channels`, or its default.
    pub(crate) fn min_r(&self, channels: usize) -> usize {
        match self.fused_min_r {
            0 if self.fused_fir_tma && !self.half_rows && channels / 32 >= 128 => 32,
            0 => 16,
            r => r,
        }
    }
}

impl Default for Tuning {
    /// Measured on an H100 at 32768 channels, 16 taps, 10 bits (`cuda_bench`, table d).
    fn default() -> Self {
        Self {
            fir_batch: 16,
            fir_block: 128,
            postproc_rows: 4,
            ddc_outputs: 7,
            ddc_mma: true,
            ddc_mma_warps: 4,
            ddc_set_span: 8192,
            nb_unzip_from: 32768,
            fused: true,
            fused_max_channels: usize::MAX,
            fused_chunk: 0,
            fused_fir_spectra: 0,
            fused_fir_columns: 0,
            fused_fir_word_steps: None,
            fused_fir_ahead: None,
            fused_fir_tma: true,
            fused_post_prefetch: None,
            fused_post_row_sync: true,
            fused_post_gather: 0,
            fused_post_ahead: None,
            fused_post_early: None,
            fused_max_r: 0,
            fused_min_r: 0,
            fused_tile: 0,
            half_rows: false,
            concurrent_outputs: true,
        }
    }
}

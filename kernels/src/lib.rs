//! CUDA C sources of the F-engine kernels, specialised per configuration.
//!
//! [`source`] prepends the configuration as `#define`s to the kernels, so that NVRTC compiles one
//! module per configuration with every loop bound and index a compile-time constant. The sources
//! are self-contained (no includes), as NVRTC needs.
//!
//! - `pfb_fir`: unpacks the packed samples, applies the per-spectrum window offset (coarse delay)
//!   and the PFB FIR, and writes float32 in the order the unzipped FFT reads.
//! - (cuFFT: batched complex FFTs of [`Config::fft_len`] points, done by the host crate.)
//! - `postproc`: twiddles and 4-point FFTs (the rest of the unzipped FFT), the real-FFT fix-up, fine
//!   delay, fringe phase, gain, dither, quantisation to 8 or 4 bits with saturation counts, and
//!   the transpose into heap layout through shared memory.
//! - `input_power`: the input sensors, the chunk's integer sum of squares and full-scale samples
//!   per polarisation (after `pfb_fir`'s `load_pair`, which it reuses).
//! - `fused_fir` and `fused_post` ([`Tuning::fused`], the default from 1024 channels up): the
//!   wideband output in two passes instead of three, the FFT our own (n = R x A: the R-point FFTs
//!   after the FIR, the A-point ones before the post-processing).
//! - Narrowband outputs ([`Config::decimation`] > 1) add `ddc` (mix, low-pass filter and
//!   subsample), `nb_fir` (the complex PFB), cuFFT's 2n-point complex transforms and
//!   `nb_postproc` (the centre half of the bins, delay, gain, dither, quantisation).

const COMMON: &str = include_str!("common.cuh");
const PFB_FIR: &str = include_str!("pfb_fir.cu");
const POSTPROC: &str = include_str!("postproc.cu");
const INPUT_POWER: &str = include_str!("input_power.cu");
const NARROWBAND: &str = include_str!("narrowband.cu");
const DDC_SET: &str = include_str!("ddc_set.cu");
const FUSED: &str = include_str!("fused.cu");

/// Kernel names, as `extern "C"` in the sources.
pub const PFB_FIR_KERNEL: &str = "pfb_fir";
pub const POSTPROC_KERNEL: &str = "postproc";
pub const INPUT_POWER_KERNEL: &str = "input_power";
pub const DDC_KERNEL: &str = "ddc";
pub const NB_FIR_KERNEL: &str = "nb_fir";
pub const NB_POSTPROC_KERNEL: &str = "nb_postproc";
pub const DDC_SET_KERNEL: &str = "ddc_set";
pub const FUSED_FIR_KERNEL: &str = "fused_fir";
pub const FUSED_POST_KERNEL: &str = "fused_post";
/// The fewest channels the two-pass wideband kernels take (their R x A split needs A >= 128).
pub const FUSED_MIN_CHANNELS: usize = 1024;
/// Threads per block of `fused_post` where A <= 1024 (two blocks an SM); where A = 2048, A / 4
/// (one block an SM).
pub const FUSED_POST_THREADS: usize = 256;
/// The fewest values in a `fused_post` block's output tile (2A channels x spectra per block)
/// unless [`Tuning::fused_tile`] says otherwise: 32 KB at 8 bits. Where A = 1024 it takes 16384
/// (64 KB), so that each channel's run is 8 spectra, 32 bytes: shorter runs write part of a
/// device-memory sector each, and measured 12-20% slower.
pub const FUSED_TILE: usize = 8192;
/// Words of each (spectrum, column group) a `fused_fir` tensor copy brings
/// ([`Tuning::fused_fir_tma`]): the 6 to 9 its 8 columns span at 10 to 16 bits from any word,
/// from the word before rounded down to 16 bytes.
pub const FIR_TMA_WORDS: usize = 12;
/// The most outputs one `ddc_set` launch serves.
pub const DDC_SET_MAX: usize = 8;
/// Threads per block of the narrowband kernels but `ddc` (their `__launch_bounds__`).
pub const NARROWBAND_BLOCK: usize = 256;
/// Threads per block of `ddc`.
pub const DDC_BLOCK: usize = 128;
/// Spectra each `nb_fir` thread computes (sliding its window while the delay holds).
pub const NB_FIR_RUN: usize = 64;
/// `nb_postproc`'s block: `NB_POST_TILE` channels x `NB_POST_TILE` spectra, run by
/// `NB_POST_TILE` x `NB_POST_ROWS` threads. Must match `narrowband.cu`.
pub const NB_POST_TILE: usize = 32;
pub const NB_POST_ROWS: usize = 8;
/// Taps per phase for which a `ddc` thread holds samples in registers at once.
pub const DDC_TILE: usize = 16;
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
pub fn ddc_padded_taps(ddc_taps: usize, decimation: usize) -> usize {
    ddc_phase_taps(ddc_taps, decimation) * decimation.max(1)
}

/// The n-point complex FFT is split into `UNZIP` FFTs of n / UNZIP points (cuFFT) and
/// UNZIP-point FFTs in the post-processing kernel (paper, section 4.2).
pub const UNZIP: usize = 4;

/// Post-processing block: `POSTPROC_TILE` column pairs x `POSTPROC_TILE` spectra, run by
/// `POSTPROC_TILE` x [`Tuning::postproc_rows`] threads. Must match `postproc.cu`.
pub const POSTPROC_TILE: usize = 32;

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
    /// shared-memory reads fall in distinct banks), at most [`MAX_DDC_OUTPUTS`].
    pub ddc_outputs: usize,
    /// The DDC on the tensor cores (`ddc_set`) where the samples are exact in float16 (at most 12
    /// bits) and the GPU has them (sm_80 on); else `ddc` on the FMA pipe.
    pub ddc_mma: bool,
    /// Warps per block of `ddc_set`: 4 or 8, each with at least one 16-row tile of every
    /// output (64 outputs).
    pub ddc_mma_warps: usize,
    /// Input samples each `ddc_set` block covers, whatever the output (8192 or 16384): it makes
    /// `ddc_set_span / D` outputs of each.
    pub ddc_set_span: usize,
    /// The fewest points (2n) for which a narrowband output's FFT is unzipped by 4: where
    /// cuFFT would take two passes through memory.
    pub nb_unzip_from: usize,
    /// A wideband output of [`FUSED_MIN_CHANNELS`] to [`Tuning::fused_max_channels`] channels
    /// runs in two passes (`fused_fir`, `fused_post`: the FFT our own, split between them)
    /// instead of three (`pfb_fir`, cuFFT, `postproc`): the default, faster at those sizes
    /// (kernels/NOTES.md). Off, the three passes are the fallback.
    pub fused: bool,
    /// The most channels for which [`Tuning::fused`] takes two passes: all (65536 included,
    /// where they measured 900 µs a frame against the three passes' 1040, H100).
    pub fused_max_channels: usize,
    /// Spectra per chunk of the two-pass kernels (a multiple of 16; 0: the whole frame). In
    /// chunks, `fused_post` reads each chunk's rows while `fused_fir` makes the next, from L2.
    /// Slower than whole frames at every chunk size measured (64 to 512 spectra: the kernels
    /// side by side each have half an SM's warps; kernels/NOTES.md, "Stop 45").
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
    /// `fused_fir` with float32 or float16 rows (H200; kernels/NOTES.md, "Version 12").
    pub fused_fir_word_steps: Option<bool>,
    /// How many of a sliding `fused_fir` batch's 16 new sample pairs are loaded while the batch
    /// before is transformed (0 to 16), so that their latency passes behind that work: the block
    /// then keeps two batches in shared memory (one barrier a batch instead of two) and reads
    /// its weights again for each batch (from L1), so that their registers can hold the pairs.
    /// 0: none, one batch in shared memory. `None`: 4 at R = 16 (`fused_fir` 6-8% faster at
    /// 1024-16384 channels with float32 rows, 4% with float16; H200), 0 at R = 32 and 64, where
    /// no count measured faster (kernels/NOTES.md, "Version 14"). More than 8 spill registers.
    /// Where tensor copies take a sliding batch instead (sm_90), `None` is 0 at R = 16 too with
    /// float16 rows, and with float32 rows from A = 512 (8192 and 16384 channels where
    /// [`Tuning::fused_min_r`] is 16; by default float32 rows take R = 32 there): there they
    /// measured faster than pairs ahead, and below A = 512 in float32 slower (kernels/NOTES.md,
    /// "Version 18").
    pub fused_fir_ahead: Option<usize>,
    /// Where no pairs are loaded ahead (by default R >= 32, and R = 16 with float16 rows or
    /// A >= 512) and a group has at most 8 columns, a
    /// sliding `fused_fir` batch's sample words come into shared memory by one bulk tensor copy
    /// a block (TMA, sm_90), issued a batch ahead, instead of 32 loads a thread: `fused_fir`
    /// 18% faster at 32768 and 65536 channels (H200; kernels/NOTES.md, "Version 17"). On.
    pub fused_fir_tma: bool,
    /// How many of its steps ahead a `fused_post` block has a step's rows prefetched into L2
    /// (`cp.async.bulk.prefetch`, sm_90 on), 0 to 4 (0: none). `None`: 1 where A >= 512
    /// (16384 channels on with float32 rows, 8192 with float16: `fused_post` 4-9% faster, H200),
    /// none below, where it measured slower (kernels/NOTES.md, "Version 15").
    pub fused_post_prefetch: Option<usize>,
    /// `fused_post`'s FFT stages wait on barriers of each transform's own A / 16 threads (its
    /// warp's where A <= 512, else a named barrier of its own), and the block or half meets only
    /// where its threads read other transforms' values: 2 barriers of the group a step instead
    /// of 4 to 6 (on: kernels/NOTES.md, "Version 16"). Off, every barrier is the group's.
    pub fused_post_row_sync: bool,
    /// Channels of a row whose operands (its values, its partner's, its rotation) `fused_post`
    /// reads from shared memory together, before it quantises and stores any of them: 1, 2, 4
    /// or 8 (at most the 8 a thread takes of a row, or 4 below A = 512; other values round down
    /// to one of these). 0: 8 where A is 512 or 2048, 4 where A = 1024, 1 below A = 512
    /// (kernels/NOTES.md, "Version 20").
    pub fused_post_gather: usize,
    /// Whether `fused_post` reads the next [`Tuning::fused_post_gather`] channels' operands
    /// before it works on the ones it has. `None`: below A = 512 only.
    pub fused_post_ahead: Option<bool>,
    /// How many of a `fused_post` step's 16 row loads a thread issues during the step before,
    /// ahead of that step's post-processing (0 to 16; more are taken as 16), so that their
    /// latency passes behind that work rather than after the barrier that starts the step.
    /// `None`: with float16 rows 8; with float32 rows 4 at A = 64, 8 at A = 128, 1024 and 2048,
    /// 16 at A = 256 and none at A = 512, where more measured slower (`fused_post` 1-4% faster
    /// at the others, H200; kernels/NOTES.md, "Version 21").
    pub fused_post_early: Option<usize>,
    /// The most rows R of the two-pass split (see [`Config::fused_split`]): 32 or 64 (0: 32). At
    /// 65536 channels, 32 makes A = 2048: `fused_post` blocks of 512 threads, one an SM (rows and
    /// tile take 214 KB of shared memory), which beat R = 64 with float32 rows (H100, version 10)
    /// and, since `fused_post`'s polarisation halves (version 13, H200), with float16 rows too
    /// (722.8 against 747.3 µs a frame; kernels/NOTES.md).
    pub fused_max_r: usize,
    /// The fewest rows R of the two-pass split: 16 or 32, where that leaves A >= 64. 0: 32 with
    /// float32 rows and tensor copies where it leaves A >= 128 (4096 to 16384 channels), else 16.
    /// With tensor copies `fused_fir` costs about the same at R = 32 as at 16, and `fused_post`
    /// less on shorter rows: 1-7% faster whole frames at 4096-16384 channels, but 5% slower at
    /// 2048 (A = 64), and with float16 rows slower at every size, their rounding costing
    /// `fused_fir` more at R = 32 (H200; kernels/NOTES.md, "Version 18").
    pub fused_min_r: usize,
    /// Values in a `fused_post` block's output tile, 2A channels x its spectra: a power of two
    /// (0: [`FUSED_TILE`] or 16 A, whichever is more, so that each channel's run is at least 8
    /// spectra).
    pub fused_tile: usize,
    /// Not a launch shape but a precision (`--fft-precision half`): the two-pass kernels keep the
    /// rows between their passes in float16 instead of float32, 4 bytes a complex value instead
    /// of 8, rounded stochastically; the arithmetic stays float32. It changes the output:
    /// kernels/NOTES.md ("Float16 rows") measures by how much. Outputs on the three passes are
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
    pub fn max_r(&self) -> usize {
        match self.fused_max_r {
            0 => 32,
            r => r,
        }
    }

    /// [`Tuning::fused_min_r`] for an output of `channels`, or its default.
    pub fn min_r(&self, channels: usize) -> usize {
        match self.fused_min_r {
            0 if self.fused_fir_tma && !self.half_rows && channels / 32 >= 128 => 32,
            0 => 16,
            r => r,
        }
    }
}

/// The most outputs per `ddc` thread (its accumulators and samples are registers).
pub const MAX_DDC_OUTPUTS: usize = 15;

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

/// The two-pass split n = R x A of an n-channel output's complex FFT with R from
/// [`Tuning::min_r`] to [`Tuning::max_r`]: (R, A), as [`Config::fused_split`] says.
pub fn fused_split(channels: usize, tuning: &Tuning) -> (usize, usize) {
    let a = match channels / tuning.min_r(channels) {
        a if a >= 64 => a,
        _ => channels / 16,
    };
    let a = a.clamp(1, 1024).max(channels / tuning.max_r());
    (channels / a, a)
}

/// What a compiled module is specialised for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub channels: usize,
    pub taps: usize,
    pub sample_bits: u32,
    pub spectra_per_heap: usize,
    /// Bits per output component: 8, or 4 (packed two to a byte).
    pub output_bits: u32,
    /// Whether `postproc` adds the output dither (keys per spectrum from the host).
    pub dither: bool,
    /// 1 for a wideband output; a narrowband output's decimation D (8, 16 or 32).
    pub decimation: usize,
    /// A narrowband output's DDC filter length L (unused for wideband).
    pub ddc_taps: usize,
    pub tuning: Tuning,
}

/// A configuration the kernels cannot run, with a sentence saying why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Points of each cuFFT transform.
    pub fn fft_len(&self) -> usize {
        self.channels / UNZIP
    }

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
    pub fn fused_fir_word_steps(&self) -> bool {
        let r = self.fused_split().0;
        self.tuning.fused_fir_word_steps.unwrap_or(r == 16)
    }

    /// Sample pairs a sliding `fused_fir` batch loads a batch ahead ([`Tuning::fused_fir_ahead`]).
    pub fn fused_fir_ahead(&self) -> usize {
        let (r, a) = self.fused_split();
        let by_copies = self.tuning.fused_fir_tma && (self.tuning.half_rows || a >= 512);
        self.tuning
            .fused_fir_ahead
            .unwrap_or(if r == 16 && !by_copies { 4 } else { 0 })
    }

    /// Steps ahead whose rows a `fused_post` block prefetches ([`Tuning::fused_post_prefetch`]).
    pub fn fused_post_prefetch(&self) -> usize {
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
    pub fn fused_post_gather(&self) -> usize {
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
    pub fn fused_post_ahead(&self) -> bool {
        self.tuning
            .fused_post_ahead
            .unwrap_or(self.fused_split().1 < 512)
    }

    /// Row loads a `fused_post` step issues during the step before ([`Tuning::fused_post_early`]).
    pub fn fused_post_early(&self) -> usize {
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

    /// A narrowband output's unzip factor: its FFT is `nb_unzip` transforms of 2n / `nb_unzip`
    /// points per spectrum (1 or 4).
    pub fn nb_unzip(&self) -> usize {
        if 2 * self.channels >= self.tuning.nb_unzip_from {
            UNZIP
        } else {
            1
        }
    }

    /// Whether `ddc_set` makes this narrowband output's DDC, on the tensor cores (else `ddc`, in
    /// the output's own module).
    pub fn ddc_mma(&self) -> bool {
        self.decimation > 1
            && self.tuning.ddc_mma
            && self.sample_bits <= 12
            && self.mma_smem_bytes() + 4 * self.mma_raw_words() <= DDC_SET_SMEM
    }

    /// Taps per phase of the DDC, ceil(L / D).
    fn taps_per_phase(&self) -> usize {
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
    /// For `ddc`, float32 pairs [phase tap p][phase q], zero-padded (see [`ddc_padded_taps`]);
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

    /// Threads per block of `pfb_fir` (one per column pair; a block never straddles spectra).
    pub fn fir_block(&self) -> usize {
        self.channels.min(self.tuning.fir_block)
    }

    /// Checks what the kernels assume, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check().map_err(ConfigError)
    }

    fn check(&self) -> Result<(), String> {
        if !self.channels.is_power_of_two() || self.channels < 16 {
            return Err(format!(
                "the kernels need a power of two of at least 16 channels, not {}",
                self.channels
            ));
        }
        if self.taps == 0 {
            return Err("the kernels need at least one tap".into());
        }
        if !spead::samples::SAMPLE_BITS.contains(&self.sample_bits) {
            return Err(format!(
                "the kernels read 8, 10, 12 or 16-bit samples, not {}",
                self.sample_bits
            ));
        }
        if self.spectra_per_heap == 0 {
            return Err("spectra per heap must be positive".into());
        }
        if self.output_bits != 8 && self.output_bits != 4 {
            return Err(format!(
                "the kernels write 8 or 4-bit output, not {}",
                self.output_bits
            ));
        }
        if ![1, 8, 16, 32].contains(&self.decimation) {
            return Err(format!(
                "the kernels decimate by 8, 16 or 32 (1: wideband), not {}",
                self.decimation
            ));
        }
        if self.decimation > 1 && self.ddc_taps == 0 {
            return Err("a narrowband output needs at least one DDC tap".into());
        }
        let t = &self.tuning;
        if t.fir_batch == 0 || !t.fir_block.is_power_of_two() || t.fir_block > 1024 {
            return Err(format!(
                "bad pfb_fir tuning {t:?}: batch >= 1, block a power of two up to 1024"
            ));
        }
        if t.postproc_rows == 0 || !POSTPROC_TILE.is_multiple_of(t.postproc_rows) {
            return Err(format!(
                "postproc rows must divide {POSTPROC_TILE}, not {}",
                t.postproc_rows
            ));
        }
        if ![0, 4, 8, 16].contains(&t.fused_fir_columns) {
            return Err(format!(
                "fused_fir takes 4, 8 or 16 columns a group, not {}",
                t.fused_fir_columns
            ));
        }
        if t.fused_fir_ahead.is_some_and(|k| k > t.fir_batch) {
            return Err(format!(
                "fused_fir can load at most a batch's {} sample pairs ahead, not {}",
                t.fir_batch,
                self.fused_fir_ahead()
            ));
        }
        if t.fused_post_prefetch.is_some_and(|k| k > 4) {
            return Err(format!(
                "fused_post prefetches rows at most 4 steps ahead, not {}",
                self.fused_post_prefetch()
            ));
        }
        if self.fused() && self.fused_split().0 * self.fused_columns() > 512 {
            return Err(format!(
                "fused_fir's blocks take at most 512 threads: {} columns of {} groups is more",
                self.fused_columns(),
                self.fused_split().0
            ));
        }
        if ![0, 16, 32].contains(&t.fused_min_r) {
            return Err(format!(
                "the two passes split their FFT into at least 16 or 32 rows, not {}",
                t.fused_min_r
            ));
        }
        if ![0, 32, 64].contains(&t.fused_max_r) {
            return Err(format!(
                "the two passes split their FFT into at most 32 or 64 rows, not {}",
                t.fused_max_r
            ));
        }
        if t.fused_tile != 0 && (!t.fused_tile.is_power_of_two() || t.fused_tile > 32768) {
            return Err(format!(
                "fused_post's tile takes a power of two of values up to 32768, not {}",
                t.fused_tile
            ));
        }
        if ![4, 8].contains(&t.ddc_mma_warps) || ![8192, 16384].contains(&t.ddc_set_span) {
            return Err(format!(
                "ddc_set takes 4 or 8 warps and spans of 8192 or 16384 samples, not {} and {}",
                t.ddc_mma_warps, t.ddc_set_span
            ));
        }
        if self.decimation > 1
            && !(t.ddc_set_span / self.decimation).is_multiple_of(64 * t.ddc_mma_warps)
        {
            return Err(format!(
                "ddc_set's {} warps need at least {} outputs a block at D {}: a span of {} samples \
                 gives {}",
                t.ddc_mma_warps,
                64 * t.ddc_mma_warps,
                self.decimation,
                t.ddc_set_span,
                t.ddc_set_span / self.decimation
            ));
        }
        if t.ddc_outputs.is_multiple_of(2) || t.ddc_outputs > MAX_DDC_OUTPUTS {
            return Err(format!(
                "ddc outputs per thread must be odd and at most {MAX_DDC_OUTPUTS}, not {}",
                t.ddc_outputs
            ));
        }
        Ok(())
    }
}

/// The complete CUDA C source of the module for `cfg`: configuration `#define`s, then the kernels.
pub fn source(cfg: &Config) -> String {
    let defines = [
        ("CHANNELS", cfg.channels.to_string()),
        ("TAPS", cfg.taps.to_string()),
        ("SAMPLE_BITS", cfg.sample_bits.to_string()),
        ("UNZIP", UNZIP.to_string()),
        ("SPECTRA_PER_HEAP", cfg.spectra_per_heap.to_string()),
        ("FIR_BLOCK", cfg.fir_block().to_string()),
        ("FIR_BATCH", cfg.tuning.fir_batch.to_string()),
        ("PP_ROWS", cfg.tuning.postproc_rows.to_string()),
        ("OUT_BITS", cfg.output_bits.to_string()),
        ("DITHER", u32::from(cfg.dither).to_string()),
        ("DECIMATION", cfg.decimation.to_string()),
        ("DDC_TAPS", cfg.ddc_taps.to_string()),
        ("DDC_OUTPUTS", cfg.tuning.ddc_outputs.to_string()),
        ("DDC_BLOCK", DDC_BLOCK.to_string()),
        ("DDC_TILE", DDC_TILE.to_string()),
        ("NB_UNZIP", cfg.nb_unzip().to_string()),
        ("NB_RUN", NB_FIR_RUN.to_string()),
    ];
    let (r, a) = cfg.fused_split();
    let fused_defines = [
        ("F_R", r.to_string()),
        ("F_A", a.to_string()),
        ("F_C", cfg.fused_columns().to_string()),
        ("F_SB", cfg.fused_post_spectra().0.to_string()),
        ("F_M", cfg.fused_post_spectra().1.to_string()),
        ("F2_THREADS", cfg.fused_post_threads().to_string()),
        ("ROW_HALF", u32::from(cfg.tuning.half_rows).to_string()),
        (
            "FIR_WORD_STEPS",
            u32::from(cfg.fused_fir_word_steps()).to_string(),
        ),
        ("FIR_AHEAD", cfg.fused_fir_ahead().to_string()),
        ("FIR_TMA", u32::from(cfg.fused_fir_tma()).to_string()),
        ("FIR_TMA_WORDS", FIR_TMA_WORDS.to_string()),
        ("POST_PREFETCH", cfg.fused_post_prefetch().to_string()),
        (
            "POST_ROW_SYNC",
            u32::from(cfg.tuning.fused_post_row_sync).to_string(),
        ),
        ("POST_GATHER", cfg.fused_post_gather().to_string()),
        ("POST_AHEAD", u32::from(cfg.fused_post_ahead()).to_string()),
        ("POST_EARLY", cfg.fused_post_early().to_string()),
    ];
    let narrowband = if cfg.decimation > 1 { NARROWBAND } else { "" };
    let fused = if cfg.fused() { FUSED } else { "" };
    let mut src = String::with_capacity(
        COMMON.len()
            + PFB_FIR.len()
            + POSTPROC.len()
            + INPUT_POWER.len()
            + narrowband.len()
            + fused.len()
            + 1024,
    );
    for (name, value) in defines {
        src.push_str(&format!("#define {name} {value}\n"));
    }
    if cfg.fused() {
        for (name, value) in fused_defines {
            src.push_str(&format!("#define {name} {value}\n"));
        }
    }
    for part in [COMMON, PFB_FIR, POSTPROC, INPUT_POWER, narrowband, fused] {
        src.push_str(part);
        src.push('\n');
    }
    src
}

/// The CUDA C source of `ddc_set` for the narrowband outputs `outputs` (each with
/// [`Config::ddc_mma`]; all of one input, so of one sample width, and one tuning).
pub fn ddc_set_source(outputs: &[&Config]) -> Result<String, ConfigError> {
    let Some(first) = outputs.first() else {
        return Err(ConfigError("a DDC set needs an output".into()));
    };
    if outputs.len() > DDC_SET_MAX || outputs.iter().any(|c| !c.ddc_mma()) {
        return Err(ConfigError(format!(
            "a DDC set takes 1 to {DDC_SET_MAX} narrowband outputs of samples exact in float16"
        )));
    }
    // Outputs of one decimation and filter length go in pairs: a pair shares its A fragments.
    let shape = |c: &Config| (c.decimation, c.taps_per_phase());
    let mut partner: Vec<Option<usize>> = vec![None; outputs.len()];
    let mut paired = vec![false; outputs.len()];
    for k in 0..outputs.len() {
        if paired[k] {
            continue;
        }
        if let Some(j) =
            (k + 1..outputs.len()).find(|&j| !paired[j] && shape(outputs[j]) == shape(outputs[k]))
        {
            (partner[k], paired[j]) = (Some(j), true);
        }
    }
    let cases: String = outputs
        .iter()
        .enumerate()
        .map(|(k, c)| match (paired[k], partner[k]) {
            (true, _) => format!("case {k}: break; "),
            (false, j) => format!(
                "case {k}: ddc_block<{}, {}, {k}, {}>(raw, xs, stretch, pol, set); break; ",
                c.decimation,
                c.taps_per_phase(),
                j.map_or(-1, |j| j as i64)
            ),
        })
        .collect();
    let defines = [
        ("SAMPLE_BITS", first.sample_bits.to_string()),
        ("UNZIP", UNZIP.to_string()),
        ("DDC_SET_N", outputs.len().to_string()),
        ("DDC_MMA_WARPS", first.tuning.ddc_mma_warps.to_string()),
        ("DDC_SET_SPAN", first.tuning.ddc_set_span.to_string()),
        ("DDC_SET_CASES", cases),
        (
            "DDC_SET_RAW",
            outputs
                .iter()
                .map(|c| c.mma_raw_words())
                .max()
                .unwrap_or(0)
                .to_string(),
        ),
    ];
    let mut src = String::with_capacity(COMMON.len() + DDC_SET.len() + 1024);
    for (name, value) in defines {
        src.push_str(&format!("#define {name} {value}\n"));
    }
    for part in [COMMON, DDC_SET] {
        src.push_str(part);
        src.push('\n');
    }
    Ok(src)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            channels: 4096,
            taps: 16,
            sample_bits: 10,
            spectra_per_heap: 256,
            output_bits: 8,
            dither: true,
            decimation: 1,
            ddc_taps: 0,
            tuning: Tuning::default(),
        }
    }

    /// The whole text of a module: the configuration's `#define`s, then the sources in order,
    /// each ending in a newline. Pinned so that a change to how the text is put together shows.
    #[test]
    fn whole_source_of_a_wideband_and_a_narrowband_module() {
        let wideband = "#define CHANNELS 4096\n#define TAPS 16\n#define SAMPLE_BITS 10\n\
            #define UNZIP 4\n#define SPECTRA_PER_HEAP 256\n#define FIR_BLOCK 128\n#define FIR_BATCH 16\n\
            #define PP_ROWS 4\n#define OUT_BITS 8\n#define DITHER 1\n#define DECIMATION 1\n\
            #define DDC_TAPS 0\n#define DDC_OUTPUTS 7\n#define DDC_BLOCK 128\n#define DDC_TILE 16\n\
            #define NB_UNZIP 1\n#define NB_RUN 64\n\
            #define F_R 32\n#define F_A 128\n#define F_C 8\n#define F_SB 8\n#define F_M 32\n\
            #define F2_THREADS 256\n#define ROW_HALF 0\n#define FIR_WORD_STEPS 0\n#define FIR_AHEAD 0\n\
            #define FIR_TMA 1\n#define FIR_TMA_WORDS 12\n#define POST_PREFETCH 0\n\
            #define POST_ROW_SYNC 1\n#define POST_GATHER 1\n#define POST_AHEAD 1\n#define POST_EARLY 8\n";
        assert_eq!(
            source(&cfg()),
            format!("{wideband}{COMMON}\n{PFB_FIR}\n{POSTPROC}\n{INPUT_POWER}\n\n{FUSED}\n")
        );
        let nb = Config {
            channels: 1024,
            sample_bits: 12,
            output_bits: 4,
            dither: false,
            decimation: 16,
            ddc_taps: 192,
            ..cfg()
        };
        let narrowband = "#define CHANNELS 1024\n#define TAPS 16\n#define SAMPLE_BITS 12\n\
            #define UNZIP 4\n#define SPECTRA_PER_HEAP 256\n#define FIR_BLOCK 128\n#define FIR_BATCH 16\n\
            #define PP_ROWS 4\n#define OUT_BITS 4\n#define DITHER 0\n#define DECIMATION 16\n\
            #define DDC_TAPS 192\n#define DDC_OUTPUTS 7\n#define DDC_BLOCK 128\n#define DDC_TILE 16\n\
            #define NB_UNZIP 1\n#define NB_RUN 64\n";
        assert_eq!(
            source(&nb),
            format!("{narrowband}{COMMON}\n{PFB_FIR}\n{POSTPROC}\n{INPUT_POWER}\n{NARROWBAND}\n\n")
        );
        let b = Config {
            decimation: 8,
            ddc_taps: 97,
            ..nb.clone()
        };
        let set = "#define SAMPLE_BITS 12\n#define UNZIP 4\n#define DDC_SET_N 3\n\
            #define DDC_MMA_WARPS 4\n#define DDC_SET_SPAN 8192\n\
            #define DDC_SET_CASES case 0: ddc_block<16, 12, 0, 2>(raw, xs, stretch, pol, set); break; \
            case 1: ddc_block<8, 13, 1, -1>(raw, xs, stretch, pol, set); break; case 2: break; \n\
            #define DDC_SET_RAW 3138\n";
        assert_eq!(
            ddc_set_source(&[&nb, &b, &nb]).unwrap(),
            format!("{set}{COMMON}\n{DDC_SET}\n")
        );
    }

    #[test]
    fn narrowband_kernels_only_for_narrowband() {
        assert!(!source(&cfg()).contains("nb_postproc("));
        let nb = Config {
            decimation: 16,
            ddc_taps: 192,
            ..cfg()
        };
        nb.validate().unwrap();
        let src = source(&nb);
        assert!(src.contains("#define DECIMATION 16\n#define DDC_TAPS 192\n"));
        for k in [DDC_KERNEL, NB_FIR_KERNEL, NB_POSTPROC_KERNEL] {
            assert!(src.contains(&format!(" {k}(")), "{k}");
        }
        assert!(src.contains(&format!("__launch_bounds__({NARROWBAND_BLOCK}) nb_fir(")));
        let bad = Config {
            decimation: 4,
            ..nb.clone()
        };
        assert!(bad.validate().unwrap_err().0.contains("8, 16 or 32"));
    }

    #[test]
    fn source_starts_with_the_configuration() {
        let src = source(&cfg());
        assert!(src.starts_with("#define CHANNELS 4096\n#define TAPS 16\n#define SAMPLE_BITS 10\n"));
        assert!(src.contains("#define UNZIP 4\n"));
        assert!(src.contains("#define SPECTRA_PER_HEAP 256\n"));
        assert!(src.contains("#define FIR_BLOCK 128\n"));
        assert!(src.contains("#define FIR_BATCH 16\n"));
        assert!(src.contains("#define PP_ROWS 4\n"));
        assert!(src.contains("#define OUT_BITS 8\n"));
        assert!(src.contains("#define DITHER 1\n"));
        assert!(src.contains("void __launch_bounds__(FIR_BLOCK) pfb_fir("));
        assert!(src.contains("postproc("));
        assert!(src.contains("input_power("));
    }

    #[test]
    fn no_includes_for_nvrtc() {
        assert!(!source(&cfg()).contains("#include"));
    }

    #[test]
    fn tile_constant_matches_the_source() {
        assert!(POSTPROC.contains(&format!("#define PP_TILE {POSTPROC_TILE}\n")));
    }

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
            .0
            .contains("at least 512 outputs"));
        let (a, b) = (nb(10, 16, 192, true), nb(10, 8, 97, true));
        let set = ddc_set_source(&[&a, &b]).unwrap();
        assert!(set.contains("#define DDC_SET_N 2\n"));
        assert!(
            set.contains("case 0: ddc_block<16, 12, 0, -1>(")
                && set.contains("case 1: ddc_block<8, 13, 1, -1>(")
        );
        // Outputs of one shape in pairs, whatever lies between them.
        let c = nb(10, 8, 97, true);
        let set = ddc_set_source(&[&b, &a, &c, &b]).unwrap();
        assert!(set.contains("case 0: ddc_block<8, 13, 0, 2>(") && set.contains("case 2: break;"));
        assert!(set.contains("case 1: ddc_block<16, 12, 1, -1>("));
        assert!(set.contains("case 3: ddc_block<8, 13, 3, -1>("));
        assert!(
            !source(&a).contains(" ddc_set("),
            "the set has a module of its own"
        );
        assert!(ddc_set_source(&[&nb(16, 8, 96, true)]).is_err());
        assert!(ddc_set_source(&[]).is_err());
    }

    #[test]
    fn validation() {
        assert!(cfg().validate().is_ok());
        assert!(Config {
            channels: 1000,
            ..cfg()
        }
        .validate()
        .is_err());
        assert!(Config {
            channels: 8,
            ..cfg()
        }
        .validate()
        .is_err());
        assert!(Config {
            sample_bits: 9,
            ..cfg()
        }
        .validate()
        .is_err());
        assert!(Config {
            output_bits: 2,
            ..cfg()
        }
        .validate()
        .is_err());
        assert_eq!(
            Config {
                channels: 16,
                ..cfg()
            }
            .fir_block(),
            16
        );
        // The two passes' launch shapes: columns 4, 8 or 16 (at most 512 threads), tiles a power
        // of two; each channel's run at least 8 spectra by default. Two passes run from 1024
        // channels up unless told otherwise.
        let three_pass = Config {
            channels: 65536,
            tuning: Tuning {
                fused_max_channels: 32768,
                ..Tuning::default()
            },
            ..cfg()
        };
        assert!(three_pass.validate().is_ok() && !three_pass.fused());
        assert!(Config {
            channels: 65536,
            ..cfg()
        }
        .fused());
        let wide = |channels, fused_fir_columns, fused_tile| Config {
            channels,
            tuning: Tuning {
                fused_fir_columns,
                fused_tile,
                ..Tuning::default()
            },
            ..cfg()
        };
        assert!(wide(65536, 8, 0).fused());
        assert!(wide(65536, 8, 0).validate().is_ok());
        assert!(wide(65536, 16, 0).validate().is_ok(), "R = 32: 512 threads");
        let mut r64 = wide(65536, 16, 0);
        r64.tuning.fused_max_r = 64;
        assert!(r64.validate().is_err(), "R = 64: 1024 threads");
        r64.tuning.fused_max_r = 48;
        assert!(r64.validate().is_err());
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
        let mut c = wide(4096, 0, 0);
        c.tuning.fused_min_r = 24;
        assert!(c.validate().is_err());
        assert!(wide(4096, 12, 0).validate().is_err());
        assert!(wide(4096, 0, 3000).validate().is_err());
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
            e.0.contains("at most a batch's 16 sample pairs ahead, not 17"),
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
        assert!(e.0.contains("at most 4 steps ahead, not 5"), "{e:?}");
    }
}

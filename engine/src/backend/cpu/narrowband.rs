//! A narrowband output on the CPU (docs/signal-path.md §Narrowband). Per frame it first runs its
//! DDC over the span, per polarisation and in parallel pieces: only the subsampled samples some
//! window of the frame reads (from the lowest window offset to the highest plus 2nT), each the
//! L-tap dot product of the filter with the mixed input, the input being mixed once per piece (see
//! [`MixerTable`]) and the dropped samples never computed. Its (spectrum, pol) tasks then filter
//! PT subsampled samples into P complex ones, take a P-point complex FFT, keep channel
//! c = bin (c - n/2) mod P, and apply gain and the rotation exp(i (p' - pi (c - n/2) r' / n))
//! before the same dither, quantisation and transpose as wideband. P is 2n and the DDC subsamples
//! by S = D, or without discard P = n and S = 2D ([`crate::backend::Bins`]).

use std::sync::Arc;

use num_complex::Complex32;
use rayon::prelude::*;
use rustfft::{Fft, FftPlanner};

use super::avx2::{self, Avx2};
use super::{fir, Channeliser, Tasks, Worker};
use crate::backend::{BackendError, Channelisation, Ddc, OutputFrame, Result, SpectrumDelay, POLS};
use crate::signal::{ddc, gain};

/// Input samples per entry of the mixer's coarse table (see [`MixerTable`]).
const MIXER_BLOCK: usize = 2048;
/// Input samples a DDC piece mixes at once (then filters): its mixed samples stay in L1/L2.
const DDC_PIECE: usize = 4096;
/// Lanes of the DDC's dot products (the filter is zero-padded to a multiple): one AVX register.
const LANES: usize = 8;

/// The mixer exp(-2 pi i phase(t)) of a narrowband output, for the span's samples in float32: at
/// span offset i = s [`MIXER_BLOCK`] + r it is `E_s W_r`, E_s the mixer at the block's first
/// sample (from its exact integer phase, per frame) and W_r = exp(-2 pi i (r F mod 2^32) / 2^32)
/// (a table that depends on F alone). Exact in the phases (integers mod 2^32, as the mixer), each
/// factor rounded once to f32, and a function of the span offset alone: however the span is cut
/// into pieces, a sample is mixed identically.
struct MixerTable {
    /// The word the table holds.
    word: Option<u32>,
    re: Vec<f32>,
    im: Vec<f32>,
}

impl MixerTable {
    fn new() -> Self {
        Self {
            word: None,
            re: vec![0.0; MIXER_BLOCK],
            im: vec![0.0; MIXER_BLOCK],
        }
    }

    fn set(&mut self, word: u32) {
        if self.word == Some(word) {
            return;
        }
        for r in 0..MIXER_BLOCK {
            let c = ddc::mixer(r as u64, word);
            self.re[r] = c.re as f32;
            self.im[r] = c.im as f32;
        }
        self.word = Some(word);
    }
}

/// What a narrowband output keeps.
pub(super) struct Narrowband {
    /// The PFB weights, each twice in a row (they filter the subsampled stream's real and
    /// imaginary parts alike).
    weights: Vec<f32>,
    /// The P-point complex FFT.
    fft: Arc<dyn Fft<f32>>,
    /// S, the DDC's subsampling.
    subsampling: usize,
    /// The DDC filter h in f32, each tap twice (for the real and imaginary parts of the mixed
    /// input), zero-padded to a multiple of [`LANES`].
    ddc: Vec<f32>,
    gains: [Vec<Complex32>; POLS],
    /// Per pol: the DDC's output on the span's grid, subsampled sample j (from span offset jD)
    /// at index j; each frame writes those its windows read.
    subsampled: [Vec<Complex32>; POLS],
    mixer: MixerTable,
    /// Per pool thread: the mixed input of one DDC piece as interleaved (re, im).
    mixed: Vec<Vec<f32>>,
}

/// Everything a narrowband PFB task reads (shared by all workers).
struct Shared<'a> {
    g: &'a Channelisation,
    /// The PFB weights, each twice.
    weights: &'a [f32],
    fft: &'a dyn Fft<f32>,
    /// Per pol: the DDC's output on the span's grid.
    subsampled: &'a [Vec<Complex32>; POLS],
    gains: &'a [Vec<Complex32>; POLS],
    delays: &'a [Vec<SpectrumDelay>; POLS],
    timestamp: u64,
}

/// What one DDC piece reads.
struct DdcShared<'a> {
    /// One polarisation's span.
    x: &'a [f32],
    /// ADC sample index of the span's first sample (the mixer runs on absolute time).
    span_start: u64,
    word: u32,
    subsampling: usize,
    /// The filter, each tap twice, zero-padded to a multiple of [`LANES`].
    h: &'a [f32],
    mixer: &'a MixerTable,
}

impl Narrowband {
    pub(super) fn new(
        g: &Channelisation,
        d: Ddc,
        planner: &mut FftPlanner<f32>,
        threads: usize,
    ) -> Result<Self> {
        let (n, s) = (g.output.channels, d.subsampling());
        let unsupported = |e: crate::signal::SignalError| BackendError::Unsupported(e.to_string());
        let weights = g.output.weights().map_err(unsupported)?;
        let h = d.filter().map_err(unsupported)?;
        let mut h: Vec<f32> = h.iter().flat_map(|&v| [v as f32, v as f32]).collect();
        h.resize(h.len().next_multiple_of(LANES), 0.0);
        // Subsampled samples up to the last one the highest window reads.
        let len = g.max_offset() / s + d.points(n) * g.output.taps;
        let pieces = (DDC_PIECE / s).max(1);
        let mixed = 2 * (pieces - 1) * s + h.len();
        let g0 = Complex32::new(gain::default_gain(g.input.sample_bits, g.output.bits), 0.0);
        Ok(Self {
            weights: weights.iter().flat_map(|&w| [w as f32, w as f32]).collect(),
            fft: planner.plan_fft_forward(d.points(n)),
            subsampling: s,
            ddc: h,
            gains: [vec![g0; n], vec![g0; n]],
            subsampled: std::array::from_fn(|_| vec![Complex32::default(); len]),
            mixer: MixerTable::new(),
            mixed: vec![vec![0.0; mixed]; threads],
        })
    }

    /// The DDC of this frame (mixer word `out.mixer`) for the subsampled samples its windows read,
    /// both polarisations, in parallel pieces, one per thread.
    fn ddc(
        &mut self,
        g: &Channelisation,
        span: &[Vec<f32>; POLS],
        span_start: u64,
        out: &OutputFrame,
    ) {
        self.mixer.set(out.mixer);
        let d = self.subsampling;
        let window = self.fft.len() * g.output.taps;
        let pols = span.iter().zip(&out.delays).zip(&mut self.subsampled);
        for ((x, delays), subsampled) in pols {
            let offsets = delays.iter().map(|s| s.offset as usize / d);
            let (Some(lo), Some(hi)) = (offsets.clone().min(), offsets.max()) else {
                continue;
            };
            let shared = DdcShared {
                x,
                span_start,
                word: out.mixer,
                subsampling: d,
                h: &self.ddc,
                mixer: &self.mixer,
            };
            let y = &mut subsampled[lo..hi + window];
            let per = y.len().div_ceil(self.mixed.len());
            y.par_chunks_mut(per)
                .zip(self.mixed.par_iter_mut())
                .enumerate()
                .for_each(|(i, (y, mixed))| {
                    avx2::dispatch(|cpu| run_ddc(cpu, &shared, lo + i * per, y, mixed))
                });
        }
    }
}

impl Channeliser for Narrowband {
    fn fft(&self) -> &dyn Fft<f32> {
        self.fft.as_ref()
    }

    fn process(
        &mut self,
        g: &Channelisation,
        span: &[Vec<f32>; POLS],
        span_start: u64,
        out: &OutputFrame,
        tasks: Tasks,
    ) {
        self.ddc(g, span, span_start, out);
        let shared = Shared {
            g,
            weights: &self.weights,
            fft: self.fft.as_ref(),
            subsampled: &self.subsampled,
            gains: &self.gains,
            delays: &out.delays,
            timestamp: out.timestamp,
        };
        tasks.run(|worker, first, out, unq| {
            avx2::dispatch(|cpu| run_tasks(cpu, &shared, worker, first, out, unq))
        });
    }

    fn set_gains(&mut self, pol: usize, gains: &[Complex32]) {
        self.gains[pol].copy_from_slice(gains);
    }
}

/// Runs narrowband tasks `first..` (task = spectrum * POLS + pol), one per `n` entries of `out`.
#[inline(always)]
fn run_tasks(
    _cpu: Option<Avx2>,
    s: &Shared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    mut unq: Option<&mut [Complex32]>,
) {
    let n = s.g.output.channels;
    let (step, taps) = (s.fft.len(), s.g.output.taps);
    let d = s.g.output.subsampling();
    for (i, out) in out.chunks_exact_mut(n).enumerate() {
        let task = first + i;
        let (m, pol) = (task / POLS, task % POLS);
        let delay = s.delays[pol][m];
        let j0 = delay.offset as usize / d;
        let window = &s.subsampled[pol][j0..j0 + step * taps];
        // SAFETY: as in `fir`: PT complex values are 2PT contiguous f32.
        let window: &[f32] =
            unsafe { std::slice::from_raw_parts(window.as_ptr().cast::<f32>(), 2 * window.len()) };
        fir(window, s.weights, 2 * step, taps, &mut worker.z);
        s.fft
            .process_with_scratch(&mut worker.z, &mut worker.scratch);
        let rot = &mut worker.rotation;
        rot.set(n, delay.fine, delay.phase, -((n / 2) as i64));
        // Channel c = h * low + l is bin (c - n/2) mod P; gain and rotation as wideband's.
        let (z, y, gains) = (&worker.z[..step], &mut worker.y[..n], &s.gains[pol][..n]);
        let low = rot.low.len();
        for (h, &high) in rot.high.iter().enumerate() {
            for (l, &lo) in rot.low.iter().enumerate() {
                let c = h * low + l;
                let bin = (c + step - n / 2) & (step - 1);
                y[c] = z[bin] * (gains[c] * (high * lo));
            }
        }
        let unq = unq.as_deref_mut().map(|u| &mut u[i * n..(i + 1) * n]);
        worker.quantise(s.g, s.timestamp, m, pol, out, unq);
    }
}

/// The DDC's outputs `first..first + y.len()` of one polarisation, in pieces of [`DDC_PIECE`]
/// input samples: per piece, mix the input it reads into `mixed`, then one dot product per output
/// (with AVX2 four at a time; the sums are the same either way).
#[inline(always)]
fn run_ddc(cpu: Option<Avx2>, s: &DdcShared, first: usize, y: &mut [Complex32], mixed: &mut [f32]) {
    let d = s.subsampling;
    let per = (DDC_PIECE / d).max(1);
    let taps = s.h.len() / 2;
    for (p, y) in y.chunks_mut(per).enumerate() {
        // The input samples this piece's outputs read, mixed.
        let start = (first + p * per) * d;
        let len = (y.len() - 1) * d + taps;
        mix(s, start, &mut mixed[..2 * len]);
        // Each output the filter's dot product with its L mixed samples.
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if let Some(cpu) = cpu {
            for (q, y) in y.chunks_exact_mut(4).enumerate() {
                let y: &mut [Complex32; 4] = y.try_into().unwrap();
                *y = dot4_avx2(cpu, s.h, &mixed[2 * 4 * q * d..], 2 * d);
            }
            done = y.len() / 4 * 4;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = cpu;
        for (j, y) in y.iter_mut().enumerate().skip(done) {
            *y = dot(s.h, &mixed[2 * j * d..][..s.h.len()]);
        }
    }
}

/// [`dot`] for four outputs at once, whose samples start at `x`, `x[stride..]`, `x[2 stride..]` and
/// `x[3 stride..]`: the filter loaded once for the four, four independent sums in flight. Each
/// output's lanes are summed in exactly [`dot`]'s order, so the results are its bit for bit.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn dot4_avx2(_cpu: Avx2, h: &[f32], x: &[f32], stride: usize) -> [Complex32; 4] {
    // SAFETY: the token proves the CPU has AVX2; `dot4` checks the lengths.
    unsafe { dot4(h, x, stride) }
}

/// [`dot4_avx2`]'s body.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dot4(h: &[f32], x: &[f32], stride: usize) -> [Complex32; 4] {
    use std::arch::x86_64::*;
    let len = h.len();
    assert!(len.is_multiple_of(LANES) && x.len() >= 3 * stride + len);
    let (h, x) = (h.as_ptr(), x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..len).step_by(LANES) {
        // SAFETY: i + LANES <= len, and each output's samples hold len values (asserted).
        let w = _mm256_loadu_ps(h.add(i));
        for (o, acc) in acc.iter_mut().enumerate() {
            let v = _mm256_loadu_ps(x.add(o * stride + i));
            *acc = _mm256_add_ps(*acc, _mm256_mul_ps(w, v));
        }
    }
    acc.map(|acc| {
        let mut lanes = [0f32; LANES];
        // SAFETY: LANES f32 of room.
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        reduce(lanes)
    })
}

/// The dot product of the filter `h` (each tap twice) and the interleaved (re, im) samples `x`,
/// of one length, a multiple of [`LANES`]: LANES partial sums, the even lanes the real part's and
/// the odd ones the imaginary part's, added pairwise at the end (a fixed order).
#[inline(always)]
fn dot(h: &[f32], x: &[f32]) -> Complex32 {
    let mut acc = [0f32; LANES];
    for (h, x) in h.chunks_exact(LANES).zip(x.chunks_exact(LANES)) {
        let h: &[f32; LANES] = h.try_into().unwrap();
        let x: &[f32; LANES] = x.try_into().unwrap();
        for l in 0..LANES {
            acc[l] += h[l] * x[l];
        }
    }
    reduce(acc)
}

/// The real part (even lanes) and the imaginary part (odd lanes) of [`dot`]'s partial sums.
#[inline(always)]
fn reduce(acc: [f32; LANES]) -> Complex32 {
    Complex32::new(
        (acc[0] + acc[4]) + (acc[2] + acc[6]),
        (acc[1] + acc[5]) + (acc[3] + acc[7]),
    )
}

/// The span's samples from offset `start` on, mixed ([`MixerTable`]), into `out` as interleaved
/// (re, im); zero beyond the span's end (where only the filter's zero padding reads).
#[inline(always)]
fn mix(s: &DdcShared, start: usize, out: &mut [f32]) {
    let (table_re, table_im) = (&s.mixer.re, &s.mixer.im);
    let end = start + out.len() / 2;
    let mut i = start;
    while i < end {
        let block = i / MIXER_BLOCK;
        let r0 = i - block * MIXER_BLOCK;
        let stop = ((block + 1) * MIXER_BLOCK).min(end);
        // The block's first sample's mixer, from its exact phase.
        let e = ddc::mixer(
            s.span_start.wrapping_add((block * MIXER_BLOCK) as u64),
            s.word,
        );
        let (er, ei) = (e.re as f32, e.im as f32);
        let have = stop.min(s.x.len()).saturating_sub(i);
        let o = &mut out[2 * (i - start)..2 * (stop - start)];
        let (w_re, w_im) = (&table_re[r0..r0 + have], &table_im[r0..r0 + have]);
        let x = &s.x[i..i + have];
        for (k, o) in o.chunks_exact_mut(2).take(have).enumerate() {
            let (mr, mi) = (er * w_re[k] - ei * w_im[k], er * w_im[k] + ei * w_re[k]);
            o[0] = x[k] * mr;
            o[1] = x[k] * mi;
        }
        o[2 * have..].fill(0.0);
        i = stop;
    }
}

//! The float32 CPU backend: the reference's maths, fast and multi-threaded (rayon over spectra).
//!
//! Per frame: unpack both chunks into the float spans (in parallel pieces), once for every output,
//! measuring the input sensors on the way; then, output after output, each worker takes a
//! contiguous run of that output's (spectrum, pol) tasks and for each one of a wideband output
//! 1. filters the window into 2n real samples, stored as n complex values z_m = g_2m + i g_2m+1;
//! 2. runs an n-point complex FFT on them (half the work of a 2n-point one);
//! 3. untangles the real transform, X_k = (Z_k + Z*_(n-k))/2 - i e^(-i pi k/n) (Z_k - Z*_(n-k))/2,
//!    applies gain, fine delay and phase, dithers and quantises, and writes the spectrum to a
//!    staging buffer;
//!
//! and finally the output's staging buffer is transposed into its heap layout, in parallel by
//! channel block. The spans are shared; FFT plans, weights, gains, staging and per-worker scratch
//! are per output (`OutputState`). All are allocated once, in `new`.
//!
//! A narrowband output (docs/signal-path.md §Narrowband) first runs its DDC over the span, per
//! polarisation and in parallel pieces: only the subsampled samples some window of the frame reads
//! (from the lowest window offset to the highest plus 2nT), each the L-tap dot product of the
//! filter with the mixed input, the input being mixed once per piece (see `MixerTable`) and the
//! dropped samples never computed. Its (spectrum, pol) tasks then filter 2nT subsampled samples
//! into 2n complex ones, take a 2n-point complex FFT, keep channel c = bin (c - n/2) mod 2n, and
//! apply gain and the rotation exp(i (p' - pi (c - n/2) r' / n)) before the same dither,
//! quantisation and transpose.

use std::sync::Arc;

use num_complex::{Complex32, Complex64};
use rayon::prelude::*;
use rustfft::{Fft, FftPlanner};

use super::{
    channelisations, BackendError, Channelisation, Frame, InputFrame, InputGeometry, OutputFrame,
    OutputGeometry, Process, Result, SpectrumDelay, POLS,
};
use crate::signal::power::InputPower;
use crate::signal::{ddc, gain, quantise, unpack};

/// Filter outputs per block of the FIR.
const FIR_BLOCK: usize = 2048;
/// Channels per entry of the fine-delay table's low part (see [`Rotation`]).
const ROT_LOW: usize = 64;
/// Samples unpacked per parallel piece (a multiple of 8, so each piece starts on a byte).
const UNPACK_PIECE: usize = 1 << 16;
/// Output bytes per block of the final transpose: fits in L1 with its reads.
const TRANSPOSE_BYTES: usize = 16384;
/// Niceness of the worker threads (see [`CpuBackend::with_threads`]).
const WORKER_NICE: libc::c_int = 10;
/// Input samples per entry of the mixer's coarse table (see `MixerTable`).
const MIXER_BLOCK: usize = 2048;
/// Input samples a DDC piece mixes at once (then filters): its mixed samples stay in L1/L2.
const DDC_PIECE: usize = 4096;
/// Lanes of the DDC's dot products (the filter is zero-padded to a multiple): one AVX register.
const LANES: usize = 8;

/// exp(i (p - pi (k + first) r / n)) for every channel k (`first` = 0 for wideband, -n/2 for
/// narrowband, whose channels are offsets from the centre), as the product of a table over the low
/// bits of k and one over the high bits, both computed in f64: accurate to f32 rounding, with
/// n / 64 + 64 sin/cos evaluations per spectrum instead of n.
struct Rotation {
    low: Vec<Complex32>,
    high: Vec<Complex32>,
    key: Option<(f32, f32)>,
}

impl Rotation {
    fn new(channels: usize) -> Self {
        let low_len = ROT_LOW.min(channels);
        Self {
            low: vec![Complex32::default(); low_len],
            high: vec![Complex32::default(); channels / low_len],
            key: None,
        }
    }

    fn set(&mut self, channels: usize, fine: f32, phase: f32, first: i64) {
        if self.key == Some((fine, phase)) {
            return; // consecutive spectra usually share their delay (`first` is the output's)
        }
        let slope = -std::f64::consts::PI * fine as f64 / channels as f64;
        let step = self.low.len();
        for (k, v) in self.low.iter_mut().enumerate() {
            let c = Complex64::from_polar(1.0, slope * k as f64);
            *v = Complex32::new(c.re as f32, c.im as f32);
        }
        for (h, v) in self.high.iter_mut().enumerate() {
            let k = (h * step) as i64 + first;
            let c = Complex64::from_polar(1.0, phase as f64 + slope * k as f64);
            *v = Complex32::new(c.re as f32, c.im as f32);
        }
        self.key = Some((fine, phase));
    }
}

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

/// One worker's scratch, reused for every task it takes.
struct Worker {
    /// The filtered samples, then their FFT (n values wideband, 2n narrowband).
    z: Vec<Complex32>,
    /// The spectrum before quantisation.
    y: Vec<Complex32>,
    scratch: Vec<Complex32>,
    rotation: Rotation,
    saturated: [u64; POLS],
    /// A narrowband output's mixed input of one DDC piece as interleaved (re, im) (empty for
    /// wideband).
    mixed: Vec<f32>,
}

/// Everything a wideband task reads (shared by all workers).
struct Shared<'a> {
    g: &'a Channelisation,
    weights: &'a [f32],
    twiddle: &'a [Complex32],
    fft: &'a dyn Fft<f32>,
    span: &'a [Vec<f32>; POLS],
    /// Gains with the untangling's factor 1/2 folded in.
    half_gains: &'a [Vec<Complex32>; POLS],
    delays: &'a [Vec<SpectrumDelay>; POLS],
    /// Output timestamp of the frame's first spectrum (keys the dither).
    timestamp: u64,
}

/// Everything a narrowband PFB task reads (shared by all workers).
struct NarrowShared<'a> {
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
    decimation: usize,
    /// The filter, each tap twice, zero-padded to a multiple of [`LANES`].
    h: &'a [f32],
    mixer: &'a MixerTable,
}

/// The float32 CPU backend: a [`Process`], a backend as [`super::Synchronous`].
pub struct CpuBackend {
    input: InputGeometry,
    outputs: Vec<OutputGeometry>,
    /// Per polarisation: the span (overlap then chunk), shared by every output.
    span: [Vec<f32>; POLS],
    /// One per output, in the engine's order.
    per_output: Vec<OutputState>,
    /// Shared so that `process` can run on it while it borrows the rest of `self` mutably.
    pool: Arc<rayon::ThreadPool>,
}

/// What the CPU backend keeps for one output.
struct OutputState {
    geometry: Channelisation,
    /// The PFB weights; a narrowband output's each twice in a row (they filter the subsampled
    /// stream's real and imaginary parts alike).
    weights: Vec<f32>,
    /// Wideband: the n-point FFT of the unzipped real transform; narrowband: the 2n-point complex
    /// FFT.
    fft: Arc<dyn Fft<f32>>,
    /// Quantised spectra as `[spectrum][pol][channel]`, before the transpose to heap layout.
    staging: Vec<[i8; 2]>,
    /// One per pool thread.
    workers: Vec<Worker>,
    kind: Kind,
}

/// What only one kind of output keeps.
enum Kind {
    Wideband {
        /// e^(-i pi k / n), k = 0..n-1.
        twiddle: Vec<Complex32>,
        half_gains: [Vec<Complex32>; POLS],
    },
    Narrowband(Narrow),
}

/// What a narrowband output keeps.
struct Narrow {
    decimation: usize,
    /// The DDC filter h in f32, each tap twice (for the real and imaginary parts of the mixed
    /// input), zero-padded to a multiple of [`LANES`].
    ddc: Vec<f32>,
    gains: [Vec<Complex32>; POLS],
    /// Per pol: the DDC's output on the span's grid, subsampled sample j (from span offset jD)
    /// at index j; each frame writes those its windows read.
    subsampled: [Vec<Complex32>; POLS],
    mixer: MixerTable,
}

impl CpuBackend {
    /// A CPU backend for `outputs` (1 to [`super::MAX_OUTPUTS`], wideband or narrowband) of
    /// `input`, with a thread per core.
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry]) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_threads(input, outputs, cores)
    }

    /// A CPU backend on its own pool of `threads` threads. They run at a lower priority than the
    /// engine's other threads (nice `WORKER_NICE`): on a busy host the receivers must never wait
    /// behind bulk compute, which has frames of buffering to catch up in, while a receiver that
    /// waits loses datagrams.
    pub fn with_threads(
        input: InputGeometry,
        outputs: &[OutputGeometry],
        threads: usize,
    ) -> Result<Self> {
        let geometry = channelisations(input, outputs)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("fengine-cpu-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .map_err(|e| {
                BackendError::Unavailable(format!("cannot start {threads} CPU threads: {e}"))
            })?;
        let threads = pool.current_num_threads().max(1);
        let mut planner = FftPlanner::new();
        let per_output = geometry
            .into_iter()
            .map(|g| OutputState::new(g, &mut planner, threads))
            .collect::<Result<_>>()?;
        Ok(Self {
            input,
            outputs: outputs.to_vec(),
            span: std::array::from_fn(|_| vec![0.0; input.span_samples()]),
            per_output,
            pool: Arc::new(pool),
        })
    }

    /// Processes `frame` as `submit` would, and also returns the first output's values before
    /// quantisation in output order (element [`Channelisation::output_index`]`(spectrum, pol,
    /// channel)`), for tests; [`Self::process_unquantised_outputs`] returns every output's.
    pub fn process_unquantised(&mut self, frame: &mut Frame) -> Result<Vec<Complex32>> {
        Ok(self.process_unquantised_outputs(frame)?.swap_remove(0))
    }

    /// Processes `frame` as `submit` would, and also returns each output's values before
    /// quantisation in output order, for tests.
    pub fn process_unquantised_outputs(
        &mut self,
        frame: &mut Frame,
    ) -> Result<Vec<Vec<Complex32>>> {
        frame.check(&self.input, &self.outputs)?;
        let mut staged: Vec<Vec<Complex32>> = self
            .per_output
            .iter()
            .map(|o| vec![Complex32::new(f32::NAN, f32::NAN); o.staging.len()])
            .collect();
        self.process(frame, Some(&mut staged))?;
        let values = self
            .per_output
            .iter()
            .zip(staged)
            .map(|(o, staged)| {
                let g = &o.geometry;
                let mut values = vec![Complex32::new(f32::NAN, f32::NAN); staged.len()];
                for (i, spectrum) in staged.chunks_exact(g.output.channels).enumerate() {
                    for (k, &v) in spectrum.iter().enumerate() {
                        values[g.output_index(i / POLS, i % POLS, k)] = v;
                    }
                }
                values
            })
            .collect();
        Ok(values)
    }

    /// Computes a frame already checked against the geometry: the input once, then every output;
    /// with `unquantised`, also each output's values before quantisation in staging order.
    fn process(
        &mut self,
        frame: &mut Frame,
        mut unquantised: Option<&mut [Vec<Complex32>]>,
    ) -> Result<()> {
        let (input, span, per_output) = (&self.input, &mut self.span, &mut self.per_output);
        let span_start = frame
            .input
            .timestamp
            .wrapping_sub(input.overlap_samples as u64);
        let run = || -> Result<()> {
            frame.input.power = Some(unpack_spans(input, span, &frame.input)?);
            let span = &*span;
            for (k, (state, out)) in per_output.iter_mut().zip(&mut frame.outputs).enumerate() {
                let unq = unquantised.as_deref_mut().map(|u| u[k].as_mut_slice());
                state.process(span, span_start, out, unq);
            }
            Ok(())
        };
        self.pool.install(run)
    }
}

impl OutputState {
    fn new(
        geometry: Channelisation,
        planner: &mut FftPlanner<f32>,
        threads: usize,
    ) -> Result<Self> {
        let g = &geometry;
        let n = g.output.channels;
        let unsupported = |e: crate::signal::SignalError| BackendError::Unsupported(e.to_string());
        let weights64 = g.output.weights().map_err(unsupported)?;
        let g0 = gain::default_gain(g.input.sample_bits, g.output.bits);
        let (weights, fft, kind, mixed): (Vec<f32>, _, _, usize) = match g.output.ddc {
            None => {
                let twiddle = (0..n)
                    .map(|k| {
                        let c =
                            Complex64::from_polar(1.0, -std::f64::consts::PI * k as f64 / n as f64);
                        Complex32::new(c.re as f32, c.im as f32)
                    })
                    .collect();
                let half = Complex32::new(g0 / 2.0, 0.0);
                let kind = Kind::Wideband {
                    twiddle,
                    half_gains: [vec![half; n], vec![half; n]],
                };
                let weights = weights64.iter().map(|&w| w as f32).collect();
                (weights, planner.plan_fft_forward(n), kind, 0)
            }
            Some(d) => {
                let h = ddc::ddc_filter(d.decimation, d.taps).map_err(unsupported)?;
                let mut h: Vec<f32> = h.iter().flat_map(|&v| [v as f32, v as f32]).collect();
                h.resize(h.len().next_multiple_of(LANES), 0.0);
                // Subsampled samples up to the last one the highest window reads.
                let len = g.max_offset() / d.decimation + 2 * n * g.output.taps;
                let pieces = (DDC_PIECE / d.decimation).max(1);
                let mixed = 2 * (pieces - 1) * d.decimation + h.len();
                let kind = Kind::Narrowband(Narrow {
                    decimation: d.decimation,
                    ddc: h,
                    gains: [
                        vec![Complex32::new(g0, 0.0); n],
                        vec![Complex32::new(g0, 0.0); n],
                    ],
                    subsampled: std::array::from_fn(|_| vec![Complex32::default(); len]),
                    mixer: MixerTable::new(),
                });
                let weights = weights64
                    .iter()
                    .flat_map(|&w| [w as f32, w as f32])
                    .collect();
                (weights, planner.plan_fft_forward(2 * n), kind, mixed)
            }
        };
        let z = fft.len();
        let workers = (0..threads)
            .map(|_| Worker {
                z: vec![Complex32::default(); z],
                y: vec![Complex32::default(); n],
                scratch: vec![Complex32::default(); fft.get_inplace_scratch_len()],
                rotation: Rotation::new(n),
                saturated: [0; POLS],
                mixed: vec![0.0; mixed],
            })
            .collect();
        Ok(Self {
            weights,
            fft,
            staging: vec![[0; 2]; g.spectra_per_frame() * POLS * n],
            workers,
            kind,
            geometry,
        })
    }

    /// This output's part of a frame whose input is in `span` (its first sample ADC sample
    /// `span_start`), on the pool: its spectra into its heaps and saturation counts, and with
    /// `unquantised` its values before quantisation in staging order.
    fn process(
        &mut self,
        span: &[Vec<f32>; POLS],
        span_start: u64,
        out: &mut OutputFrame,
        unquantised: Option<&mut [Complex32]>,
    ) {
        let n = self.geometry.output.channels;
        let tasks = self.geometry.spectra_per_frame() * POLS;
        let per = tasks.div_ceil(self.workers.len());
        let staging = self.staging.par_chunks_mut(per * n);
        match &mut self.kind {
            Kind::Wideband {
                twiddle,
                half_gains,
            } => {
                let shared = Shared {
                    g: &self.geometry,
                    weights: &self.weights,
                    twiddle,
                    fft: self.fft.as_ref(),
                    span,
                    half_gains,
                    delays: &out.delays,
                    timestamp: out.timestamp,
                };
                let workers = self.workers.par_iter_mut().enumerate();
                match unquantised {
                    None => workers.zip(staging).for_each(|((w, worker), out)| {
                        run_tasks(&shared, worker, w * per, out, None);
                    }),
                    Some(unq) => workers
                        .zip(staging)
                        .zip(unq.par_chunks_mut(per * n))
                        .for_each(|(((w, worker), out), unq)| {
                            run_tasks(&shared, worker, w * per, out, Some(unq))
                        }),
                }
            }
            Kind::Narrowband(nb) => {
                nb.ddc(&self.geometry, span, span_start, out, &mut self.workers);
                let shared = NarrowShared {
                    g: &self.geometry,
                    weights: &self.weights,
                    fft: self.fft.as_ref(),
                    subsampled: &nb.subsampled,
                    gains: &nb.gains,
                    delays: &out.delays,
                    timestamp: out.timestamp,
                };
                let workers = self.workers.par_iter_mut().enumerate();
                match unquantised {
                    None => workers.zip(staging).for_each(|((w, worker), out)| {
                        run_narrow_tasks(&shared, worker, w * per, out, None);
                    }),
                    Some(unq) => workers
                        .zip(staging)
                        .zip(unq.par_chunks_mut(per * n))
                        .for_each(|(((w, worker), out), unq)| {
                            run_narrow_tasks(&shared, worker, w * per, out, Some(unq))
                        }),
                }
            }
        }
        transpose(&self.geometry, &self.staging, &mut out.heaps);
        out.saturated = [0; POLS];
        for w in &mut self.workers {
            for pol in 0..POLS {
                out.saturated[pol] += std::mem::take(&mut w.saturated[pol]);
            }
        }
    }

    /// Sets the gains of one polarisation (already checked).
    fn set_gains(&mut self, pol: usize, gains: &[Complex32]) {
        match &mut self.kind {
            Kind::Wideband { half_gains, .. } => {
                for (h, g) in half_gains[pol].iter_mut().zip(gains) {
                    *h = g * 0.5; // exact: a power of two
                }
            }
            Kind::Narrowband(nb) => nb.gains[pol].copy_from_slice(gains),
        }
    }
}

impl Narrow {
    /// The DDC of this frame (mixer word `out.mixer`) for the subsampled samples its windows read,
    /// both polarisations, in parallel pieces over the workers.
    fn ddc(
        &mut self,
        g: &Channelisation,
        span: &[Vec<f32>; POLS],
        span_start: u64,
        out: &OutputFrame,
        workers: &mut [Worker],
    ) {
        self.mixer.set(out.mixer);
        let d = self.decimation;
        let window = 2 * g.output.channels * g.output.taps;
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
                decimation: d,
                h: &self.ddc,
                mixer: &self.mixer,
            };
            let y = &mut subsampled[lo..hi + window];
            let per = y.len().div_ceil(workers.len());
            y.par_chunks_mut(per)
                .zip(workers.par_iter_mut())
                .enumerate()
                .for_each(|(i, (y, worker))| run_ddc(&shared, lo + i * per, y, worker));
        }
    }
}

/// Lowers the calling thread's priority to [`WORKER_NICE`]; where that is refused, the thread
/// simply keeps its priority.
fn lower_priority() {
    // SAFETY: plain syscalls on the calling thread. On Linux, nice is per thread, and
    // PRIO_PROCESS with a thread id changes that thread alone.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, WORKER_NICE);
    }
}

/// Moves each span's last `overlap` samples to its front and unpacks the new chunk after them;
/// returns each chunk's input sensors, measured on each piece while it is in cache.
fn unpack_spans(
    g: &InputGeometry,
    span: &mut [Vec<f32>; POLS],
    input: &InputFrame,
) -> Result<[InputPower; POLS]> {
    // Share the bytes, not the buffers.
    let chunks: [&[u8]; POLS] = [&input.chunk[0], &input.chunk[1]];
    let bits = g.sample_bits;
    let power: Vec<InputPower> = span
        .par_iter_mut()
        .zip(chunks)
        .map(|(span, chunk)| {
            span.copy_within(g.chunk_samples.., 0);
            span[g.overlap_samples..]
                .par_chunks_mut(UNPACK_PIECE)
                .enumerate()
                .map(|(i, piece)| {
                    unpack::unpack_f32(chunk, bits, i * UNPACK_PIECE, piece)
                        .map_err(|e| BackendError::Misuse(e.to_string()))?;
                    Ok(InputPower::of(piece, bits))
                })
                .try_reduce(InputPower::default, |a, b| Ok(a + b))
        })
        .collect::<Result<_>>()?;
    Ok([power[0], power[1]])
}

/// Runs tasks `first..` (task = spectrum * POLS + pol), one per `n` entries of `out`, with AVX2
/// where the CPU has it (the default x86-64 target stops at SSE2).
fn run_tasks(
    s: &Shared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    unq: Option<&mut [Complex32]>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { run_tasks_avx2(s, worker, first, out, unq) };
    }
    run_tasks_body(s, worker, first, out, unq)
}

/// [`run_tasks_body`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_tasks_avx2(
    s: &Shared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    unq: Option<&mut [Complex32]>,
) {
    run_tasks_body(s, worker, first, out, unq)
}

#[inline(always)]
fn run_tasks_body(
    s: &Shared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    mut unq: Option<&mut [Complex32]>,
) {
    let n = s.g.output.channels;
    for (i, out) in out.chunks_exact_mut(n).enumerate() {
        let task = first + i;
        let (m, pol) = (task / POLS, task % POLS);
        let d = s.delays[pol][m];
        let offset = d.offset as usize;
        fir(
            &s.span[pol][offset..offset + s.g.window()],
            s.weights,
            s.g.step(),
            s.g.output.taps,
            &mut worker.z,
        );
        s.fft
            .process_with_scratch(&mut worker.z, &mut worker.scratch);
        worker.rotation.set(n, d.fine, d.phase, 0);
        let unq = unq.as_deref_mut().map(|u| &mut u[i * n..(i + 1) * n]);
        untangle(s, pol, &worker.z, &worker.rotation, &mut worker.y);
        let key = s.g.dither_key(s.timestamp, m);
        worker.saturated[pol] +=
            quantise::quantise_spectrum_c32(&worker.y, out, s.g.limit(), pol, key);
        if let Some(u) = unq {
            u.copy_from_slice(&worker.y);
        }
    }
}

/// The FIR over taps into `z` viewed as f32 (2 len values): g_t = sum_j x[t + step j] w[t + step
/// j], t < 2 len, `step` = 2 len. Wideband: the real window, giving z_m = g_2m + i g_2m+1;
/// narrowband: the subsampled window as interleaved (re, im) with each weight twice, giving the
/// complex g_t themselves.
#[inline(always)]
fn fir(window: &[f32], weights: &[f32], step: usize, taps: usize, z: &mut [Complex32]) {
    // SAFETY: Complex<f32> is #[repr(C)] { re, im } (num-complex documents it), so n of them are
    // 2n contiguous f32; the borrow of `z` is held for the lifetime of `g`.
    let g: &mut [f32] =
        unsafe { std::slice::from_raw_parts_mut(z.as_mut_ptr().cast::<f32>(), 2 * z.len()) };
    debug_assert_eq!(g.len(), step);
    // Blocks of outputs small enough to stay in L1 while each tap's samples and weights stream
    // past (faster here than summing a few outputs over all taps in registers: fewer streams).
    for (b, acc) in g.chunks_mut(FIR_BLOCK).enumerate() {
        let t0 = b * FIR_BLOCK;
        let len = acc.len();
        for j in 0..taps {
            let x = &window[t0 + step * j..][..len];
            let w = &weights[t0 + step * j..][..len];
            // Index loops over slices of one length: vectorised in release, quick in debug.
            if j == 0 {
                for i in 0..len {
                    acc[i] = x[i] * w[i];
                }
            } else {
                for i in 0..len {
                    acc[i] += x[i] * w[i];
                }
            }
        }
    }
}

/// Untangles the n-point FFT `z` into channels 0..n-1 of the 2n-point real transform and applies
/// gain, fine delay and phase, into `y`.
#[inline(always)]
fn untangle(s: &Shared, pol: usize, z: &[Complex32], rot: &Rotation, y: &mut [Complex32]) {
    let n = z.len();
    let gains = &s.half_gains[pol][..n];
    let twiddle = &s.twiddle[..n];
    let y = &mut y[..n];
    let low = rot.low.len();
    // Channel k = h * low + l, so the rotation is high[h] * low[l] without a division.
    for (h, &high) in rot.high.iter().enumerate() {
        for (l, &lo) in rot.low.iter().enumerate() {
            let k = h * low + l;
            let a = z[k];
            let b = z[(n - k) & (n - 1)].conj();
            let (sum, diff) = (a + b, a - b);
            // 2 X_k = sum - i twiddle_k diff; the gains hold the 1/2.
            let x2 = sum + Complex32::new(diff.im, -diff.re) * twiddle[k];
            y[k] = x2 * (gains[k] * (high * lo));
        }
    }
}

/// Runs narrowband tasks `first..` (task = spectrum * POLS + pol), one per `n` entries of `out`,
/// with AVX2 where the CPU has it.
fn run_narrow_tasks(
    s: &NarrowShared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    unq: Option<&mut [Complex32]>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { run_narrow_tasks_avx2(s, worker, first, out, unq) };
    }
    run_narrow_tasks_body(s, worker, first, out, unq)
}

/// [`run_narrow_tasks_body`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_narrow_tasks_avx2(
    s: &NarrowShared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    unq: Option<&mut [Complex32]>,
) {
    run_narrow_tasks_body(s, worker, first, out, unq)
}

#[inline(always)]
fn run_narrow_tasks_body(
    s: &NarrowShared,
    worker: &mut Worker,
    first: usize,
    out: &mut [[i8; 2]],
    mut unq: Option<&mut [Complex32]>,
) {
    let n = s.g.output.channels;
    let (step, taps) = (2 * n, s.g.output.taps);
    let d = s.g.output.decimation();
    for (i, out) in out.chunks_exact_mut(n).enumerate() {
        let task = first + i;
        let (m, pol) = (task / POLS, task % POLS);
        let delay = s.delays[pol][m];
        let j0 = delay.offset as usize / d;
        let window = &s.subsampled[pol][j0..j0 + step * taps];
        // SAFETY: as in `fir`: 2nT complex values are 4nT contiguous f32.
        let window: &[f32] =
            unsafe { std::slice::from_raw_parts(window.as_ptr().cast::<f32>(), 2 * window.len()) };
        fir(window, s.weights, 2 * step, taps, &mut worker.z);
        s.fft
            .process_with_scratch(&mut worker.z, &mut worker.scratch);
        let rot = &mut worker.rotation;
        rot.set(n, delay.fine, delay.phase, -((n / 2) as i64));
        // Channel c = h * low + l is bin (c - n/2) mod 2n; gain and rotation as wideband's.
        let (z, y, gains) = (&worker.z[..step], &mut worker.y[..n], &s.gains[pol][..n]);
        let low = rot.low.len();
        for (h, &high) in rot.high.iter().enumerate() {
            for (l, &lo) in rot.low.iter().enumerate() {
                let c = h * low + l;
                let bin = (c + step - n / 2) & (step - 1);
                y[c] = z[bin] * (gains[c] * (high * lo));
            }
        }
        let key = s.g.dither_key(s.timestamp, m);
        worker.saturated[pol] +=
            quantise::quantise_spectrum_c32(&worker.y, out, s.g.limit(), pol, key);
        if let Some(u) = unq.as_deref_mut() {
            u[i * n..(i + 1) * n].copy_from_slice(&worker.y);
        }
    }
}

/// Computes subsampled samples `first..first + y.len()` of one polarisation into `y`, in pieces
/// of [`DDC_PIECE`] input samples, with AVX2 where the CPU has it.
fn run_ddc(s: &DdcShared, first: usize, y: &mut [Complex32], worker: &mut Worker) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { run_ddc_avx2(s, first, y, worker) };
    }
    run_ddc_body::<false>(s, first, y, worker)
}

/// [`run_ddc_body`] compiled for AVX2, its dot products four outputs at a time
/// ([`dot4_avx2`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_ddc_avx2(s: &DdcShared, first: usize, y: &mut [Complex32], worker: &mut Worker) {
    run_ddc_body::<true>(s, first, y, worker)
}

/// The DDC's outputs `first..first + y.len()`: per piece, mix the input it reads, then one dot
/// product per output (with `AVX2`, which the caller must have checked, four at a time; the sums
/// are the same either way).
#[inline(always)]
fn run_ddc_body<const AVX2: bool>(
    s: &DdcShared,
    first: usize,
    y: &mut [Complex32],
    worker: &mut Worker,
) {
    let d = s.decimation;
    let per = (DDC_PIECE / d).max(1);
    let taps = s.h.len() / 2;
    let mixed = &mut worker.mixed;
    for (p, y) in y.chunks_mut(per).enumerate() {
        // The input samples this piece's outputs read, mixed.
        let start = (first + p * per) * d;
        let len = (y.len() - 1) * d + taps;
        mix(s, start, &mut mixed[..2 * len]);
        // Each output the filter's dot product with its L mixed samples.
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            for (q, y) in y.chunks_exact_mut(4).enumerate() {
                let y: &mut [Complex32; 4] = y.try_into().unwrap();
                // SAFETY: the caller checked for AVX2; `dot4_avx2` checks the lengths.
                *y = unsafe { dot4_avx2(s.h, &mixed[2 * 4 * q * d..], 2 * d) };
            }
            done = y.len() / 4 * 4;
        }
        for (j, y) in y.iter_mut().enumerate().skip(done) {
            *y = dot(s.h, &mixed[2 * j * d..][..s.h.len()]);
        }
    }
}

/// [`dot`] for four outputs at once, whose samples start at `x`, `x[stride..]`, `x[2 stride..]` and
/// `x[3 stride..]`: the filter loaded once for the four, four independent sums in flight. Each
/// output's lanes are summed in exactly [`dot`]'s order, so the results are its bit for bit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dot4_avx2(h: &[f32], x: &[f32], stride: usize) -> [Complex32; 4] {
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

/// Staging `[spectrum][pol][channel]` to output `[heap][channel][spectrum in heap][pol][re, im]`
/// (packed into one byte per complex value with 4-bit output).
fn transpose(g: &Channelisation, staging: &[[i8; 2]], output: &mut [u8]) {
    let (n, s) = (g.output.channels, g.output.spectra_per_heap);
    let bits = g.output.bits;
    let value_bytes = 2 * bits as usize / 8;
    // Blocks of whole channels (a power of two dividing n) of about TRANSPOSE_BYTES of output.
    let target = (TRANSPOSE_BYTES / (s * POLS * value_bytes)).max(16);
    let block = (1usize << target.ilog2()).min(n);
    let blocks_per_heap = n / block;
    output
        .par_chunks_mut(block * s * POLS * value_bytes)
        .enumerate()
        .for_each(|(c, out)| {
            let (heap, k0) = (c / blocks_per_heap, (c % blocks_per_heap) * block);
            for si in 0..s {
                for pol in 0..POLS {
                    let row = ((heap * s + si) * POLS + pol) * n + k0;
                    for (k, &v) in staging[row..row + block].iter().enumerate() {
                        quantise::store(out, (k * s + si) * POLS + pol, v, bits);
                    }
                }
            }
        });
}

impl Process for CpuBackend {
    const NAME: &'static str = "cpu";
    fn input(&self) -> &InputGeometry {
        &self.input
    }
    fn outputs(&self) -> &[OutputGeometry] {
        &self.outputs
    }
    fn store_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) {
        self.per_output[output].set_gains(pol, gains);
    }
    fn compute(&mut self, frame: &mut Frame) -> Result<()> {
        self.process(frame, None)
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::*;
    use super::super::reference::ReferenceBackend;
    use super::*;
    use crate::backend::{Backend, Synchronous};
    use crate::signal::weights::FilterDesign;
    use rand::Rng;

    fn to64(v: &[Complex32]) -> impl Iterator<Item = Complex64> + '_ {
        v.iter().map(|c| Complex64::new(c.re as f64, c.im as f64))
    }

    /// Random frames (noise, delays, gains) through both backends; returns the worst fraction of
    /// int8 values off by one and the worst relative error before quantisation.
    #[allow(clippy::too_many_arguments)]
    fn compare(
        channels: usize,
        taps: usize,
        output: impl Fn(&mut OutputGeometry),
        bits: u32,
        s: usize,
        h: usize,
        frames: usize,
        seed: u64,
    ) -> (f64, f64) {
        let margin = 1000;
        let mut g = geometry(channels, taps, bits, s, h, margin);
        output(&mut g.output);
        let (ones, rel, _) = compare_with(g, margin, frames, seed);
        (ones, rel)
    }

    /// [`compare`] for any channelisation `g` with room for delays of `margin` samples: also
    /// returns the values off by one and the values over all frames. A narrowband output gets
    /// each frame's random mixer word and delays mapped as the engine maps them, and channel 5's
    /// gains ten times higher (so that few channels still saturate).
    fn compare_with(
        g: Channelisation,
        margin: usize,
        frames: usize,
        seed: u64,
    ) -> (f64, f64, (usize, usize)) {
        let bits = g.input.sample_bits;
        let mut cpu = Synchronous::new(CpuBackend::new(g.input, &[g.output]).unwrap());
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut rng = rng(seed);
        let mut gains = random_gains(&mut rng, &g);
        if g.output.ddc.is_some() {
            for pol_gains in &mut gains {
                pol_gains[5] *= 10.0;
            }
        }
        let mut totals = (0, 0);
        // A narrowband output's first span starts at an odd ADC sample, off the grid of every
        // decimation (the DDC's grid is the span's; its mixer runs on absolute time).
        let first = match g.output.ddc {
            Some(_) => (rng.random::<u64>() >> 20) | 1,
            None => 0,
        };
        set_gains(&mut cpu, &gains);
        set_gains(&mut rb, &gains);
        let (mut worst_ones, mut worst_rel) = (0.0f64, 0.0f64);
        let mut saturated = 0;
        let mut a = cpu.alloc_frame().unwrap();
        let mut b = rb.alloc_frame().unwrap();
        for f in 0..frames {
            let x = [
                noise(&mut rng, bits, g.chunk_samples()),
                noise(&mut rng, bits, g.chunk_samples()),
            ];
            load_chunk(&mut a, bits, [&x[0], &x[1]]);
            a.input.timestamp = first.wrapping_add((f * g.chunk_samples()) as u64);
            random_delays(&mut rng, &g, margin, &mut a);
            copy_input(&a, &mut b);
            poison(&mut a);
            poison(&mut b);
            let got = cpu.process_unquantised(&mut a).unwrap();
            let want = rb.process_unquantised(&mut b).unwrap();
            assert_written(&a);
            assert!(
                got.iter().all(|v| v.re.is_finite() && v.im.is_finite()),
                "unwritten value"
            );
            let rel = relative_error(to64(&got), &want);
            let (ones, total) = int8_differences(
                &a.outputs[0].components(g.output.bits),
                &b.outputs[0].components(g.output.bits),
            );
            for pol in 0..POLS {
                // A value on the edge of saturating may fall either side.
                let (x, y) = (
                    a.outputs[0].saturated[pol] as i64,
                    b.outputs[0].saturated[pol] as i64,
                );
                assert!(
                    (x - y).abs() <= 1 + y / 1000,
                    "frame {f} pol {pol} saturated {x} vs {y}"
                );
                saturated += y;
            }
            worst_ones = worst_ones.max(ones as f64 / total as f64);
            worst_rel = worst_rel.max(rel);
            totals.0 += ones;
            totals.1 += total;
        }
        assert!(saturated > 0, "the gains should saturate some values");
        (worst_ones, worst_rel, totals)
    }

    /// Every combination of taps {4, 16} and sample bits {8, 10} at one channel count, with
    /// `s` x `h` spectra per frame (few at large n, to keep debug builds quick).
    fn matches_reference(channels: usize, s: usize, h: usize) {
        let mut seed = channels as u64;
        for taps in [4usize, 16] {
            for bits in [8, 10] {
                seed += 1;
                // The span starts as zeros: run until the last frame's windows hold data in at
                // least their middle half (where the weights are large), so that some values
                // saturate.
                let frames = (taps / 2).div_ceil(s * h) + 1;
                let t = std::time::Instant::now();
                let (ones, rel) = compare(channels, taps, |_| {}, bits, s, h, frames, seed);
                let case = format!("{channels} ch {taps} taps {bits} bits, {frames} frames");
                eprintln!(
                    "{case}: off by one {ones:.2e}, relative error {rel:.2e}, {:.1} s",
                    t.elapsed().as_secs_f64()
                );
                assert!(ones < 1e-3, "{case}: {ones} of values off by one");
                assert!(rel < 1e-5, "{case}: relative error {rel}");
            }
        }
    }

    #[test]
    fn matches_reference_1024() {
        matches_reference(1024, 4, 2);
    }

    #[test]
    fn matches_reference_4096() {
        matches_reference(4096, 2, 2);
    }

    #[test]
    fn matches_reference_32768() {
        matches_reference(32768, 2, 2);
    }

    /// The other filter designs: rectangular taper, other cutoffs, one tap (a plain FFT).
    #[test]
    fn matches_reference_with_every_filter_design() {
        use crate::signal::weights::WindowFunction::{Hann, Rect};
        for (seed, (channels, taps, window, w_cutoff)) in [
            (1024usize, 1usize, Rect, 0.0),
            (1024, 16, Rect, 1.0),
            (4096, 4, Hann, 0.75),
            (4096, 1, Hann, 1.0),
        ]
        .into_iter()
        .enumerate()
        {
            let filter = FilterDesign { window, w_cutoff };
            let frames = (taps / 2).div_ceil(4) + 1;
            let design = |o: &mut OutputGeometry| o.filter = filter;
            let (ones, rel) = compare(channels, taps, design, 10, 4, 1, frames, 500 + seed as u64);
            let case = format!("{channels} ch {taps} taps {filter:?}");
            eprintln!("{case}: off by one {ones:.2e}, relative error {rel:.2e}");
            assert!(ones < 1e-3, "{case}: {ones} of values off by one");
            assert!(rel < 1e-5, "{case}: relative error {rel}");
        }
    }

    /// Dithered and 4-bit outputs, each and both: the same values as the reference, dither
    /// included (the same counter-based values on both sides).
    #[test]
    fn matches_reference_with_dither_and_four_bits() {
        for (seed, (bits, dither)) in [(8u32, Some(11u32)), (4, None), (4, Some(12))]
            .into_iter()
            .enumerate()
        {
            let output = |o: &mut OutputGeometry| {
                o.bits = bits;
                o.dither = dither;
            };
            let (ones, rel) = compare(1024, 16, output, 10, 4, 2, 3, 700 + seed as u64);
            let case = format!("{bits}-bit output, dither {dither:?}");
            eprintln!("{case}: off by one {ones:.2e}, relative error {rel:.2e}");
            assert!(ones < 1e-3, "{case}: {ones} of values off by one");
            assert!(rel < 1e-5, "{case}: relative error {rel}");
        }
    }

    /// Narrowband outputs against the reference: D 8, 16 and 32, 64 to 256 channels, 2 to 8
    /// taps, 8- and 10-bit input, 8- and 4-bit output, dithered or not, random gains (some
    /// saturating), a random mixer word per frame, random delays of either sign and any fraction
    /// (window moves of whole subsampled samples, r' and p' as the engine maps them), over
    /// consecutive frames.
    #[test]
    fn narrowband_matches_reference() {
        let cases = [
            (64usize, 4usize, 8usize, 10u32, 8u32, None),
            (256, 4, 16, 10, 8, Some(21u32)),
            (128, 8, 8, 8, 4, Some(22)),
            (64, 2, 16, 10, 4, None),
            (128, 4, 32, 8, 8, Some(23)),
        ];
        let (mut ones, mut total) = (0, 0);
        for (seed, (channels, taps, d, bits, out_bits, dither)) in cases.into_iter().enumerate() {
            let margin = 8 * d;
            let mut output = narrowband_output(channels, taps, d, 8);
            output.bits = out_bits;
            output.dither = dither;
            // Chunks of 2 heaps; the frames after the first have their windows in data.
            let input = input_for(&[output], bits, 2 * output.heap_samples(), margin);
            let g = Channelisation::new(input, output);
            let frames = 2 + input.overlap_samples.div_ceil(input.chunk_samples);
            let t = std::time::Instant::now();
            let (worst, rel, (o, v)) = compare_with(g, margin, frames, 900 + seed as u64);
            let case = format!(
                "narrowband {channels} ch {taps} taps D {d}, {bits}-bit input, {out_bits}-bit \
                 output, dither {dither:?}, {frames} frames"
            );
            eprintln!(
                "{case}: {o} of {v} values off by one (worst frame {worst:.2e}), relative error \
                 {rel:.2e}, {:.1} s",
                t.elapsed().as_secs_f64()
            );
            assert!(worst < 1e-3, "{case}: {worst} of values off by one");
            assert!(rel < 1e-5, "{case}: relative error {rel}");
            ones += o;
            total += v;
        }
        eprintln!("narrowband, all cases: {ones} of {total} values off by one");
    }

    fn cpu_outputs(input: InputGeometry, outputs: &[OutputGeometry]) -> OutputsProcessor {
        let mut cb = Synchronous::new(CpuBackend::new(input, outputs).unwrap());
        Box::new(move |frame| {
            cb.process_unquantised_outputs(frame)
                .unwrap()
                .iter()
                .map(|v| to64(v).collect())
                .collect()
        })
    }

    #[test]
    fn narrowband_tones_land_in_their_channels() {
        for (d, c, db, phase) in check_narrowband_tones(&cpu_outputs) {
            eprintln!(
                "D {d}: tone in channel {c}: within {db:.5} dB of the wideband level, phase \
                 within {phase:.1e} rad"
            );
        }
    }

    #[test]
    fn mixer_word_takes_effect_from_its_frame() {
        check_mixer_change(&cpu_backend);
    }

    #[test]
    fn narrowband_refusals_are_sentences() {
        check_narrowband_refusals(&|input, outputs| {
            Ok(Box::new(Synchronous::new(CpuBackend::new(input, outputs)?)))
        });
    }

    /// Beside a wideband output, three narrowband ones (each frame's own mixer word) come out
    /// exactly as from a CPU backend of their own (on another thread count, so the DDC's pieces
    /// fall elsewhere) and within 1 LSB of the reference.
    #[test]
    fn each_output_as_if_alone_with_narrowband() {
        let multi = |input: InputGeometry, outputs: &[OutputGeometry]| -> Box<dyn Backend> {
            Box::new(Synchronous::new(
                CpuBackend::with_threads(input, outputs, 3).unwrap(),
            ))
        };
        check_mixed_outputs_as_if_alone(
            &multi,
            &[
                (&cpu_backend, Agreement::Exact),
                (&reference_backend, Agreement::OneLsb),
            ],
            true,
        );
    }

    /// Throughput of one narrowband output (1024 channels, 4 taps, default DDC) on one thread and
    /// on every core, beside a wideband output of 1024 channels and 4 taps (D 1) timed alike, for
    /// the record: `cargo test --release -p fengine --lib narrowband_throughput -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn narrowband_throughput() {
        for (d, threads) in [(1, 1), (8, 1), (16, 1), (32, 1), (1, 0), (8, 0), (16, 0)] {
            let output = match d {
                1 => OutputGeometry {
                    ddc: None,
                    spectra_per_heap: 256 * 8,
                    ..narrowband_output(1024, 4, 8, 256)
                },
                _ => narrowband_output(1024, 4, d, 256),
            };
            let input = input_for(&[output], 10, output.heap_samples(), 8 * d);
            let g = Channelisation::new(input, output);
            let threads = if threads == 0 {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            } else {
                threads
            };
            let mut cpu =
                Synchronous::new(CpuBackend::with_threads(input, &[output], threads).unwrap());
            let mut rng = rng(1);
            let mut frame = cpu.alloc_frame().unwrap();
            let x = noise(&mut rng, 10, input.chunk_samples);
            load_chunk(&mut frame, 10, [&x, &x]);
            random_delays(&mut rng, &g, 8 * d, &mut frame);
            let frames = 6;
            let mut elapsed = 0.0;
            for f in 0..frames {
                let t = std::time::Instant::now();
                cpu.submit(frame).unwrap();
                frame = cpu.wait().unwrap().unwrap();
                if f > 0 {
                    elapsed += t.elapsed().as_secs_f64();
                }
            }
            let rate = ((frames - 1) * input.chunk_samples) as f64 / elapsed;
            eprintln!(
                "{} 1024 ch, 4 taps, D {d}, L {}: {:.1} Msample/s per polarisation pair \
                 on {threads} threads ({:.2} ms a frame of {} samples)",
                if d == 1 { "wideband" } else { "narrowband" },
                output.ddc.map_or(0, |d| d.taps),
                rate / 1e6,
                elapsed / (frames - 1) as f64 * 1e3,
                input.chunk_samples
            );
        }
    }

    #[test]
    fn input_power_is_measured_exactly() {
        check_input_power(&|g| {
            Box::new(Synchronous::new(
                CpuBackend::new(g.input, &[g.output]).unwrap(),
            ))
        });
    }

    #[test]
    fn dither_recovers_a_weak_tone() {
        check_dither_unbiased(&|g| {
            Box::new(Synchronous::new(
                CpuBackend::new(g.input, &[g.output]).unwrap(),
            ))
        });
    }

    #[test]
    fn two_frames_equal_one_long_one() {
        // Frames of H heaps, twice, against one frame of 2H heaps over the same samples.
        let margin = 200;
        let short = geometry(256, 8, 10, 3, 2, margin);
        let mut long = short;
        long.input.chunk_samples *= 2;
        let mut rng = rng(77);
        let gains = random_gains(&mut rng, &short);
        let chunk = short.chunk_samples();
        let x = [
            noise(&mut rng, 10, 2 * chunk),
            noise(&mut rng, 10, 2 * chunk),
        ];
        let mut long_frame = host_frame(&long);
        load_chunk(&mut long_frame, 10, [&x[0], &x[1]]);
        random_delays(&mut rng, &long, margin, &mut long_frame);
        poison(&mut long_frame);

        let mut cpu_long = Synchronous::new(CpuBackend::new(long.input, &[long.output]).unwrap());
        let mut cpu_short =
            Synchronous::new(CpuBackend::with_threads(short.input, &[short.output], 1).unwrap());
        let mut ref_long =
            Synchronous::new(ReferenceBackend::new(long.input, &[long.output]).unwrap());
        let mut ref_short =
            Synchronous::new(ReferenceBackend::new(short.input, &[short.output]).unwrap());
        set_gains(&mut cpu_long, &gains);
        set_gains(&mut cpu_short, &gains);
        set_gains(&mut ref_long, &gains);
        set_gains(&mut ref_short, &gains);
        let mut ref_long_frame = host_frame(&long);
        copy_input(&long_frame, &mut ref_long_frame);
        let cpu_all = cpu_long.process_unquantised(&mut long_frame).unwrap();
        let ref_all = ref_long.process_unquantised(&mut ref_long_frame).unwrap();

        let spectra = short.spectra_per_frame();
        for f in 0..2 {
            let mut frame = host_frame(&short);
            let range = f * chunk..(f + 1) * chunk;
            load_chunk(&mut frame, 10, [&x[0][range.clone()], &x[1][range]]);
            for pol in 0..POLS {
                for m in 0..spectra {
                    // The same window: the long span is `chunk` samples longer.
                    let d = long_frame.outputs[0].delays[pol][f * spectra + m];
                    frame.outputs[0].delays[pol][m] = SpectrumDelay {
                        offset: d.offset - (chunk * f) as u32,
                        ..d
                    };
                }
            }
            let mut ref_frame = host_frame(&short);
            copy_input(&frame, &mut ref_frame);
            poison(&mut frame);
            let cpu_part = cpu_short.process_unquantised(&mut frame).unwrap();
            let ref_part = ref_short.process_unquantised(&mut ref_frame).unwrap();
            assert_written(&frame);
            for pol in 0..POLS {
                for m in 0..spectra {
                    for k in 0..short.output.channels {
                        let (e, el) = (
                            short.output_index(m, pol, k),
                            long.output_index(f * spectra + m, pol, k),
                        );
                        assert_eq!(
                            cpu_part[e], cpu_all[el],
                            "cpu frame {f} spectrum {m} pol {pol} channel {k}"
                        );
                        assert_eq!(
                            ref_part[e], ref_all[el],
                            "ref frame {f} spectrum {m} pol {pol} channel {k}"
                        );
                        let (q, ql) = (
                            frame.outputs[0].heaps_i8(),
                            long_frame.outputs[0].heaps_i8(),
                        );
                        assert_eq!([q[2 * e], q[2 * e + 1]], [ql[2 * el], ql[2 * el + 1]]);
                    }
                }
            }
        }
    }

    fn cpu_processor(g: &Channelisation) -> Processor {
        let mut cb = Synchronous::new(CpuBackend::new(g.input, &[g.output]).unwrap());
        Box::new(move |frame| to64(&cb.process_unquantised(frame).unwrap()).collect())
    }

    #[test]
    fn tone_lands_in_its_channel() {
        check_tone(&cpu_processor);
    }

    #[test]
    fn delay_cancels_advance() {
        check_delay_cancels(&cpu_processor);
    }

    #[test]
    fn submit_matches_unquantised_path_and_thread_count() {
        let margin = 64;
        let g = geometry(128, 4, 12, 5, 3, margin);
        let mut rng = rng(5);
        let gains = random_gains(&mut rng, &g);
        let mut one = Synchronous::new(CpuBackend::with_threads(g.input, &[g.output], 1).unwrap());
        let mut three =
            Synchronous::new(CpuBackend::with_threads(g.input, &[g.output], 3).unwrap());
        set_gains(&mut one, &gains);
        set_gains(&mut three, &gains);
        for _ in 0..3 {
            let mut a = one.alloc_frame().unwrap();
            let x = [
                noise(&mut rng, 12, g.chunk_samples()),
                noise(&mut rng, 12, g.chunk_samples()),
            ];
            load_chunk(&mut a, 12, [&x[0], &x[1]]);
            random_delays(&mut rng, &g, margin, &mut a);
            let mut b = three.alloc_frame().unwrap();
            copy_input(&a, &mut b);
            poison(&mut a);
            poison(&mut b);
            let values = one.process_unquantised(&mut a).unwrap();
            three.submit(b).unwrap();
            let b = three.wait().unwrap().unwrap();
            assert_written(&b);
            assert_eq!(a.outputs[0].heaps_i8(), b.outputs[0].heaps_i8());
            assert_eq!(a.outputs[0].saturated, b.outputs[0].saturated);
            for (e, v) in values.iter().enumerate() {
                let q = quantise::quantise_c32(*v, [0.0; 2], quantise::LIMIT).0;
                assert_eq!(
                    [
                        a.outputs[0].heaps_i8()[2 * e],
                        a.outputs[0].heaps_i8()[2 * e + 1]
                    ],
                    q,
                    "value {e}"
                );
            }
        }
    }

    fn cpu_backend(input: InputGeometry, outputs: &[OutputGeometry]) -> Box<dyn Backend> {
        Box::new(Synchronous::new(CpuBackend::new(input, outputs).unwrap()))
    }

    fn reference_backend(input: InputGeometry, outputs: &[OutputGeometry]) -> Box<dyn Backend> {
        Box::new(Synchronous::new(
            ReferenceBackend::new(input, outputs).unwrap(),
        ))
    }

    /// Built with several outputs (on 3 threads), the CPU backend gives each exactly what it gives
    /// built with that output alone, and what the reference gives within 1 LSB.
    #[test]
    fn each_output_as_if_alone() {
        let multi = |input: InputGeometry, outputs: &[OutputGeometry]| -> Box<dyn Backend> {
            Box::new(Synchronous::new(
                CpuBackend::with_threads(input, outputs, 3).unwrap(),
            ))
        };
        check_outputs_as_if_alone(
            &multi,
            &[
                (&cpu_backend, Agreement::Exact),
                (&reference_backend, Agreement::OneLsb),
            ],
            true,
        );
    }

    #[test]
    fn serves_one_to_eight_outputs() {
        check_output_counts(&|input, outputs| {
            Ok(Box::new(Synchronous::new(CpuBackend::new(input, outputs)?)))
        });
    }

    /// The unquantised values of every output are those of the output alone.
    #[test]
    fn unquantised_values_per_output() {
        let margin = 32;
        let (input, outputs) = three_outputs(margin);
        let mut cb = Synchronous::new(CpuBackend::new(input, &outputs).unwrap());
        let mut rng = rng(13);
        let mut frame = cb.alloc_frame().unwrap();
        let x = noise(&mut rng, 10, input.chunk_samples);
        load_chunk(&mut frame, 10, [&x, &x]);
        for (out, o) in frame.outputs.iter_mut().zip(&outputs) {
            random_output_delays(&mut rng, &Channelisation::new(input, *o), margin, out);
        }
        let values = cb.process_unquantised_outputs(&mut frame).unwrap();
        assert_eq!(values.len(), 3);
        for (k, o) in outputs.iter().enumerate() {
            let mut alone = Synchronous::new(CpuBackend::new(input, &[*o]).unwrap());
            let mut single = Frame::new_host(&input, &[*o]);
            copy_input(&frame, &mut single);
            single.outputs[0].timestamp = frame.outputs[k].timestamp;
            single.outputs[0]
                .delays
                .clone_from(&frame.outputs[k].delays);
            let want = alone.process_unquantised(&mut single).unwrap();
            assert!(values[k]
                .iter()
                .all(|v| v.re.is_finite() && v.im.is_finite()));
            assert_eq!(
                values[k]
                    .iter()
                    .map(|v| (v.re.to_bits(), v.im.to_bits()))
                    .collect::<Vec<_>>(),
                want.iter()
                    .map(|v| (v.re.to_bits(), v.im.to_bits()))
                    .collect::<Vec<_>>(),
                "output {k}"
            );
        }
    }
}

//! The float32 CPU backend: the reference's maths, fast and multi-threaded (rayon over spectra).
//!
//! Per frame: unpack both chunks into the float spans (in parallel pieces), once for every output,
//! measuring the input sensors on the way; then, output after output, each worker takes a
//! contiguous run of that output's (spectrum, pol) tasks and for each one
//! 1. filters the window into 2n real samples, stored as n complex values z_m = g_2m + i g_2m+1;
//! 2. runs an n-point complex FFT on them (half the work of a 2n-point one);
//! 3. untangles the real transform, X_k = (Z_k + Z*_(n-k))/2 - i e^(-i pi k/n) (Z_k - Z*_(n-k))/2,
//!    applies gain, fine delay and phase, dithers and quantises, and writes the spectrum to a
//!    staging buffer;
//!
//! and finally the output's staging buffer is transposed into its heap layout, in parallel by
//! channel block. The spans are shared; FFT plans, weights, gains, staging and per-worker scratch
//! are per output ([`OutputState`]). All are allocated once, in `new`.

use std::sync::Arc;

use num_complex::{Complex32, Complex64};
use rayon::prelude::*;
use rustfft::{Fft, FftPlanner};

use super::{
    channelisations, BackendError, Channelisation, Frame, InputFrame, InputGeometry, OutputFrame,
    OutputGeometry, Process, Result, SpectrumDelay, POLS,
};
use crate::signal::power::InputPower;
use crate::signal::{gain, quantise, unpack};

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

/// exp(i (p - pi k r / n)) for every channel k, as the product of a table over the low bits of k and
/// one over the high bits, both computed in f64: accurate to f32 rounding, with n / 64 + 64
/// sin/cos evaluations per spectrum instead of n.
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

    fn set(&mut self, channels: usize, fine: f32, phase: f32) {
        if self.key == Some((fine, phase)) {
            return; // consecutive spectra usually share their delay
        }
        let slope = -std::f64::consts::PI * fine as f64 / channels as f64;
        let step = self.low.len();
        for (k, v) in self.low.iter_mut().enumerate() {
            let c = Complex64::from_polar(1.0, slope * k as f64);
            *v = Complex32::new(c.re as f32, c.im as f32);
        }
        for (h, v) in self.high.iter_mut().enumerate() {
            let c = Complex64::from_polar(1.0, phase as f64 + slope * (h * step) as f64);
            *v = Complex32::new(c.re as f32, c.im as f32);
        }
        self.key = Some((fine, phase));
    }
}

/// One worker's scratch, reused for every task it takes.
struct Worker {
    /// The filtered samples, then their FFT.
    z: Vec<Complex32>,
    /// The spectrum before quantisation.
    y: Vec<Complex32>,
    scratch: Vec<Complex32>,
    rotation: Rotation,
    saturated: [u64; POLS],
}

/// Everything a task reads (shared by all workers).
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
    weights: Vec<f32>,
    /// e^(-i pi k / n), k = 0..n-1.
    twiddle: Vec<Complex32>,
    fft: Arc<dyn Fft<f32>>,
    half_gains: [Vec<Complex32>; POLS],
    /// Quantised spectra as `[spectrum][pol][channel]`, before the transpose to heap layout.
    staging: Vec<[i8; 2]>,
    /// One per pool thread.
    workers: Vec<Worker>,
}

impl CpuBackend {
    /// A CPU backend for `outputs` (1 to [`super::MAX_OUTPUTS`]) of `input`, with a thread per
    /// core.
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry]) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_threads(input, outputs, cores)
    }

    /// A CPU backend on its own pool of `threads` threads. They run at a lower priority than the
    /// engine's other threads (nice [`WORKER_NICE`]): on a busy host the receivers must never wait
    /// behind bulk compute, which has frames of buffering to catch up in, while a receiver that
    /// waits loses datagrams.
    pub fn with_threads(
        input: InputGeometry,
        outputs: &[OutputGeometry],
        threads: usize,
    ) -> Result<Self> {
        let geometry = channelisations(input, outputs)?;
        super::wideband_only("cpu", &geometry)?;
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
        let run = || -> Result<()> {
            frame.input.power = Some(unpack_spans(input, span, &frame.input)?);
            let span = &*span;
            for (k, (state, out)) in per_output.iter_mut().zip(&mut frame.outputs).enumerate() {
                let unq = unquantised.as_deref_mut().map(|u| u[k].as_mut_slice());
                state.process(span, out, unq);
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
        let weights = g
            .output
            .weights()
            .map_err(|e| BackendError::Unsupported(e.to_string()))?
            .iter()
            .map(|&w| w as f32)
            .collect();
        let twiddle = (0..n)
            .map(|k| {
                let c = Complex64::from_polar(1.0, -std::f64::consts::PI * k as f64 / n as f64);
                Complex32::new(c.re as f32, c.im as f32)
            })
            .collect();
        let fft = planner.plan_fft_forward(n);
        let workers = (0..threads)
            .map(|_| Worker {
                z: vec![Complex32::default(); n],
                y: vec![Complex32::default(); n],
                scratch: vec![Complex32::default(); fft.get_inplace_scratch_len()],
                rotation: Rotation::new(n),
                saturated: [0; POLS],
            })
            .collect();
        let half = Complex32::new(
            gain::default_gain(g.input.sample_bits, g.output.bits) / 2.0,
            0.0,
        );
        Ok(Self {
            weights,
            twiddle,
            fft,
            half_gains: [vec![half; n], vec![half; n]],
            staging: vec![[0; 2]; g.spectra_per_frame() * POLS * n],
            workers,
            geometry,
        })
    }

    /// This output's part of a frame whose input is in `span` (on the pool): its spectra into its
    /// heaps and saturation counts, and with `unquantised` its values before quantisation in
    /// staging order.
    fn process(
        &mut self,
        span: &[Vec<f32>; POLS],
        out: &mut OutputFrame,
        unquantised: Option<&mut [Complex32]>,
    ) {
        let shared = Shared {
            g: &self.geometry,
            weights: &self.weights,
            twiddle: &self.twiddle,
            fft: self.fft.as_ref(),
            span,
            half_gains: &self.half_gains,
            delays: &out.delays,
            timestamp: out.timestamp,
        };
        let n = self.geometry.output.channels;
        let tasks = self.geometry.spectra_per_frame() * POLS;
        let per = tasks.div_ceil(self.workers.len());
        let staging = self.staging.par_chunks_mut(per * n);
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
        transpose(&self.geometry, &self.staging, &mut out.heaps);
        out.saturated = [0; POLS];
        for w in &mut self.workers {
            for pol in 0..POLS {
                out.saturated[pol] += std::mem::take(&mut w.saturated[pol]);
            }
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
        fir(s, d.offset as usize, pol, &mut worker.z);
        s.fft
            .process_with_scratch(&mut worker.z, &mut worker.scratch);
        worker.rotation.set(n, d.fine, d.phase);
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

/// z_m = g_2m + i g_2m+1 with g_t = sum_j s[offset + t + 2n j] w[t + 2n j].
#[inline(always)]
fn fir(s: &Shared, offset: usize, pol: usize, z: &mut [Complex32]) {
    let step = s.g.step();
    let window = &s.span[pol][offset..offset + s.g.window()];
    // SAFETY: Complex<f32> is #[repr(C)] { re, im } (num-complex documents it), so n of them are
    // 2n contiguous f32; the borrow of `z` is held for the lifetime of `g`.
    let g: &mut [f32] =
        unsafe { std::slice::from_raw_parts_mut(z.as_mut_ptr().cast::<f32>(), 2 * z.len()) };
    // Blocks of outputs small enough to stay in L1 while each tap's samples and weights stream
    // past (faster here than summing a few outputs over all taps in registers: fewer streams).
    for (b, acc) in g.chunks_mut(FIR_BLOCK).enumerate() {
        let t0 = b * FIR_BLOCK;
        let len = acc.len();
        for j in 0..s.g.output.taps {
            let x = &window[t0 + step * j..][..len];
            let w = &s.weights[t0 + step * j..][..len];
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
        for (h, g) in self.per_output[output].half_gains[pol]
            .iter_mut()
            .zip(gains)
        {
            *h = g * 0.5; // exact: a power of two
        }
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
        let mut cpu = Synchronous::new(CpuBackend::new(g.input, &[g.output]).unwrap());
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut rng = rng(seed);
        let gains = random_gains(&mut rng, &g);
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
        }
        assert!(saturated > 0, "the gains should saturate some values");
        (worst_ones, worst_rel)
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

//! The float32 CPU backend: the reference's maths, fast and multi-threaded (rayon over spectra).
//!
//! Per frame: unpack both chunks into the float spans (in parallel pieces), once for every output,
//! measuring the input sensors on the way; then, output after output, that output's
//! [`Channeliser`] (chosen by its kind when the backend is built: [`wideband`], [`narrowband`])
//! computes its spectra, each worker taking a contiguous run of the output's (spectrum, pol) tasks
//! ([`Tasks`]) and writing each quantised spectrum to a staging buffer; finally the output's
//! staging buffer is transposed into its heap layout, in parallel by channel block. The spans are
//! shared; the channeliser (weights, FFT plan, gains), staging and per-worker scratch are per
//! output (`OutputState`). All are allocated once, in `new`.

mod avx2;
mod narrowband;
#[cfg(test)]
mod tests;
mod wideband;

use std::sync::Arc;

use num_complex::{Complex32, Complex64};
use rayon::prelude::*;
use rustfft::{Fft, FftPlanner};

use super::{
    channelisations, BackendError, Channelisation, Frame, InputFrame, InputGeometry, OutputFrame,
    OutputGeometry, OutputKind, Process, Result, POLS,
};
use crate::signal::power::InputPower;
use crate::signal::{quantise, unpack};

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

/// One kind of output's work on the CPU: what it keeps (weights, FFT plan, gains, its own
/// buffers) and how it turns the span into its spectra. Chosen once per output by its
/// [`OutputKind`] ([`OutputState::new`]).
trait Channeliser: Send {
    /// The FFT the workers' scratch is sized for.
    fn fft(&self) -> &dyn Fft<f32>;
    /// This output's spectra of a frame whose input is in `span` (its first sample ADC sample
    /// `span_start`), with its delays, timestamp and mixer word in `out`: every task of `tasks`.
    fn process(
        &mut self,
        g: &Channelisation,
        span: &[Vec<f32>; POLS],
        span_start: u64,
        out: &OutputFrame,
        tasks: Tasks,
    );
    /// Sets the gains of one polarisation (already checked).
    fn set_gains(&mut self, pol: usize, gains: &[Complex32]);
}

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

/// One worker's scratch, reused for every task it takes.
struct Worker {
    /// The filtered samples, then their FFT (the FFT's length).
    z: Vec<Complex32>,
    /// The spectrum before quantisation.
    y: Vec<Complex32>,
    scratch: Vec<Complex32>,
    rotation: Rotation,
    saturated: [u64; POLS],
}

impl Worker {
    fn new(channels: usize, fft: &dyn Fft<f32>) -> Self {
        Self {
            z: vec![Complex32::default(); fft.len()],
            y: vec![Complex32::default(); channels],
            scratch: vec![Complex32::default(); fft.get_inplace_scratch_len()],
            rotation: Rotation::new(channels),
            saturated: [0; POLS],
        }
    }

    /// Dithers and quantises the spectrum in `y` (spectrum `m` of the frame whose first spectrum
    /// has output timestamp `timestamp`, polarisation `pol`) into `out`, counting saturation; with
    /// `unq`, also keeps it there.
    #[inline(always)]
    fn quantise(
        &mut self,
        g: &Channelisation,
        timestamp: u64,
        m: usize,
        pol: usize,
        out: &mut [[i8; 2]],
        unq: Option<&mut [Complex32]>,
    ) {
        let key = g.dither_key(timestamp, m);
        self.saturated[pol] += quantise::quantise_spectrum_c32(&self.y, out, g.limit(), pol, key);
        if let Some(u) = unq {
            u.copy_from_slice(&self.y);
        }
    }
}

/// An output's (spectrum, pol) tasks of a frame (task = spectrum * POLS + pol), dealt out to the
/// workers in contiguous runs, each with its part of the staging buffer (and of the unquantised
/// values, for tests).
struct Tasks<'a> {
    workers: &'a mut [Worker],
    channels: usize,
    staging: &'a mut [[i8; 2]],
    unquantised: Option<&'a mut [Complex32]>,
}

impl Tasks<'_> {
    /// Runs `task(worker, first, out, unq)` for every worker in parallel: tasks `first..`, one per
    /// `channels` entries of `out` (and of `unq`).
    fn run<F>(self, task: F)
    where
        F: Fn(&mut Worker, usize, &mut [[i8; 2]], Option<&mut [Complex32]>) + Sync,
    {
        let n = self.channels;
        let per = (self.staging.len() / n).div_ceil(self.workers.len());
        let staging = self.staging.par_chunks_mut(per * n);
        let workers = self.workers.par_iter_mut().enumerate();
        match self.unquantised {
            None => workers
                .zip(staging)
                .for_each(|((w, worker), out)| task(worker, w * per, out, None)),
            Some(unq) => workers
                .zip(staging)
                .zip(unq.par_chunks_mut(per * n))
                .for_each(|(((w, worker), out), unq)| task(worker, w * per, out, Some(unq))),
        }
    }
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
    channeliser: Box<dyn Channeliser>,
    /// Quantised spectra as `[spectrum][pol][channel]`, before the transpose to heap layout.
    staging: Vec<[i8; 2]>,
    /// One per pool thread.
    workers: Vec<Worker>,
}

impl CpuBackend {
    /// A CPU backend for `outputs` (1 to [`super::MAX_OUTPUTS`], of any kind) of `input`, with a
    /// thread per core.
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
        let channeliser: Box<dyn Channeliser> = match geometry.output.kind {
            OutputKind::Wideband => Box::new(wideband::Wideband::new(&geometry, planner)?),
            OutputKind::Narrowband(ddc) => Box::new(narrowband::Narrowband::new(
                &geometry, ddc, planner, threads,
            )?),
        };
        let n = geometry.output.channels;
        let workers = (0..threads)
            .map(|_| Worker::new(n, channeliser.fft()))
            .collect();
        Ok(Self {
            staging: vec![[0; 2]; geometry.spectra_per_frame() * POLS * n],
            workers,
            channeliser,
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
        let tasks = Tasks {
            workers: &mut self.workers,
            channels: self.geometry.output.channels,
            staging: &mut self.staging,
            unquantised,
        };
        self.channeliser
            .process(&self.geometry, span, span_start, out, tasks);
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
        self.per_output[output].channeliser.set_gains(pol, gains);
    }
    fn compute(&mut self, frame: &mut Frame) -> Result<()> {
        self.process(frame, None)
    }
}

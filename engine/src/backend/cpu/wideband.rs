//! A wideband output on the CPU. Each (spectrum, pol) task
//! 1. filters the window into 2n real samples, stored as n complex values z_m = g_2m + i g_2m+1;
//! 2. runs an n-point complex FFT on them (half the work of a 2n-point one);
//! 3. untangles the real transform, X_k = (Z_k + Z*_(n-k))/2 - i e^(-i pi k/n) (Z_k - Z*_(n-k))/2,
//!    applies gain, fine delay and phase, dithers and quantises, and writes the spectrum to the
//!    output's staging buffer.

use std::sync::Arc;

use num_complex::{Complex32, Complex64};
use rustfft::{Fft, FftPlanner};

use super::avx2::{self, Avx2};
use super::{fir, Channeliser, Rotation, Tasks, Worker};
use crate::backend::{BackendError, Channelisation, OutputFrame, Result, SpectrumDelay, POLS};
use crate::signal::gain;

/// What a wideband output keeps.
pub(super) struct Wideband {
    /// The PFB weights.
    weights: Vec<f32>,
    /// The n-point FFT of the unzipped real transform.
    fft: Arc<dyn Fft<f32>>,
    /// e^(-i pi k / n), k = 0..n-1.
    twiddle: Vec<Complex32>,
    /// Gains with the untangling's factor 1/2 folded in.
    half_gains: [Vec<Complex32>; POLS],
}

/// Everything a wideband task reads (shared by all workers).
struct Shared<'a> {
    g: &'a Channelisation,
    weights: &'a [f32],
    twiddle: &'a [Complex32],
    fft: &'a dyn Fft<f32>,
    span: &'a [Vec<f32>; POLS],
    half_gains: &'a [Vec<Complex32>; POLS],
    delays: &'a [Vec<SpectrumDelay>; POLS],
    /// Output timestamp of the frame's first spectrum (keys the dither).
    timestamp: u64,
}

impl Wideband {
    pub(super) fn new(g: &Channelisation, planner: &mut FftPlanner<f32>) -> Result<Self> {
        let n = g.output.channels;
        let weights = g
            .output
            .weights()
            .map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let twiddle = (0..n)
            .map(|k| {
                let c = Complex64::from_polar(1.0, -std::f64::consts::PI * k as f64 / n as f64);
                Complex32::new(c.re as f32, c.im as f32)
            })
            .collect();
        let half = Complex32::new(
            gain::default_gain(g.input.sample_bits, g.output.bits) / 2.0,
            0.0,
        );
        Ok(Self {
            weights: weights.iter().map(|&w| w as f32).collect(),
            fft: planner.plan_fft_forward(n),
            twiddle,
            half_gains: [vec![half; n], vec![half; n]],
        })
    }
}

impl Channeliser for Wideband {
    fn fft(&self) -> &dyn Fft<f32> {
        self.fft.as_ref()
    }

    fn process(
        &mut self,
        g: &Channelisation,
        span: &[Vec<f32>; POLS],
        _span_start: u64,
        out: &OutputFrame,
        tasks: Tasks,
    ) {
        let shared = Shared {
            g,
            weights: &self.weights,
            twiddle: &self.twiddle,
            fft: self.fft.as_ref(),
            span,
            half_gains: &self.half_gains,
            delays: &out.delays,
            timestamp: out.timestamp,
        };
        tasks.run(|worker, first, out, unq| {
            avx2::dispatch(|cpu| run_tasks(cpu, &shared, worker, first, out, unq))
        });
    }

    fn set_gains(&mut self, pol: usize, gains: &[Complex32]) {
        for (h, g) in self.half_gains[pol].iter_mut().zip(gains) {
            *h = g * 0.5; // exact: a power of two
        }
    }
}

/// Runs tasks `first..` (task = spectrum * POLS + pol), one per `n` entries of `out`.
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
        untangle(s, pol, &worker.z, &worker.rotation, &mut worker.y);
        let unq = unq.as_deref_mut().map(|u| &mut u[i * n..(i + 1) * n]);
        worker.quantise(s.g, s.timestamp, m, pol, out, unq);
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

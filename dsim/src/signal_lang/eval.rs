//! Sampling a program as katgpucbf's dsim samples it (`katgpucbf.dsim.signal`): each output over
//! one period in float32, in chunks of [`CHUNK_SIZE`] samples, then scaled to
//! 2^(bits-1) - 1, dithered, clipped and rounded half to even.
//!
//! - `cw`/`comb`: frequency rounded to whole cycles per period (at least one); `cw` per chunk from
//!   an exact start rotated by repeated doubling in complex float32, as katgpucbf computes it.
//! - `multicw`: the waves' spectrum (float32 amplitudes), summed in float64 where katgpucbf runs
//!   a float32 DCT, so a sample near a rounding edge may land one LSB apart.
//! - `wgn`: each chunk's generator is numpy's PCG64 seeded as katgpucbf seeds it (entropy, then
//!   the chunk's child), but its normal deviates come from `rand_distr`'s ziggurat, not numpy's
//!   (whose tables we do not carry): the same entropy gives the same noise here, in every
//!   polarisation, with the right statistics, but not numpy's values.
//! - dither: numpy's `random(float32) - 0.5` from child `pol` of the dither seed, a generator per
//!   chunk of the buffer, exactly as katgpucbf's; none under `nodither`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rand_distr::{Distribution, StandardNormal};
use rustfft::num_complex::{Complex, Complex32, Complex64};

use super::numpy_rng::{Pcg64, SeedSequence};
use super::{Expr, Op};

/// katgpucbf's dask chunk size: generators and `cw`'s exact restarts are per chunk.
pub const CHUNK_SIZE: u64 = 1 << 20;
/// Most `multicw` spectrum lines times the period evaluated directly, when the period is not a
/// whole number of chunks (otherwise the lines are summed with FFTs and there is no limit).
const DIRECT_WORK: u64 = 1 << 34;

/// Whole cycles per `n` samples nearest `frequency` at `rate`, at least one (Python's `round`).
fn waves(n: u64, frequency: f64, rate: f64) -> f64 {
    (n as f64 * frequency / rate).round_ties_even().max(1.0)
}

/// What one output is sampled with.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// The period in samples.
    pub n: u64,
    pub rate: f64,
}

impl Sampling {
    fn chunk(&self) -> u64 {
        self.n.min(CHUNK_SIZE)
    }

    /// Samples [start, start + out.len()) of `e` (no wrap: start + len <= n).
    pub fn eval(&self, e: &Expr, start: u64, out: &mut [f32]) {
        match e {
            Expr::Constant(v) => out.fill(*v as f32),
            Expr::Nodither(inner) => self.eval(inner, start, out),
            Expr::Binary(op, a, b) => {
                self.eval(a, start, out);
                let mut rhs = vec![0.0f32; out.len()];
                self.eval(b, start, &mut rhs);
                for (o, r) in out.iter_mut().zip(&rhs) {
                    *o = match op {
                        Op::Add => *o + r,
                        Op::Sub => *o - r,
                        Op::Mul => *o * r,
                    };
                }
            }
            Expr::Delay(inner, d) => {
                // np.roll(x, d): out[i] = x[i - d], circularly.
                let n = self.n;
                let mut from = (start as i128 - *d as i128).rem_euclid(n as i128) as u64;
                let mut done = 0;
                while done < out.len() {
                    let take = ((n - from) as usize).min(out.len() - done);
                    self.eval(inner, from, &mut out[done..done + take]);
                    done += take;
                    from = 0;
                }
            }
            leaf => self.leaf(leaf, start, out),
        }
    }

    /// A chunked leaf: every chunk that [start, start + len) touches, whole, then the part asked.
    fn leaf(&self, e: &Expr, start: u64, out: &mut [f32]) {
        let cs = self.chunk();
        let end = start + out.len() as u64;
        let mut buf = Vec::new();
        let mut c = start / cs;
        while c * cs < end {
            let c0 = c * cs;
            let len = cs.min(self.n - c0) as usize;
            self.leaf_chunk(e, c, len, &mut buf);
            let a = start.max(c0);
            let b = end.min(c0 + len as u64);
            out[(a - start) as usize..(b - start) as usize]
                .copy_from_slice(&buf[(a - c0) as usize..(b - c0) as usize]);
            c += 1;
        }
    }

    /// Chunk `c` (its first `len` samples) of a leaf into `buf`.
    fn leaf_chunk(&self, e: &Expr, c: u64, len: usize, buf: &mut Vec<f32>) {
        let offset = c * self.chunk();
        buf.clear();
        match *e {
            Expr::Cw {
                amplitude,
                frequency,
            } => {
                let f = waves(self.n, frequency, self.rate) / self.n as f64;
                cw_chunk(offset, amplitude as f32, len, f, buf);
            }
            Expr::Comb {
                amplitude,
                frequency,
            } => {
                let f = waves(self.n, frequency, self.rate) / self.n as f64;
                comb_chunk(offset, amplitude as f32, self.chunk(), f, buf);
                buf.truncate(len);
            }
            Expr::Wgn { std, entropy } => {
                let mut rng = Pcg64::new(&SeedSequence::new(entropy).child(c as u32));
                let std = std as f32;
                buf.extend((0..len).map(|_| {
                    let z: f32 = StandardNormal.sample(&mut rng);
                    z * std
                }));
            }
            Expr::MultiCw { .. } => {
                let lines = multicw_lines(e, self.n, self.rate);
                buf.resize(len, 0.0);
                lines_chunk(&lines, self.n, offset, buf);
            }
            _ => unreachable!("not a leaf"),
        }
    }
}

/// katgpucbf's `_cw`: cos(2 pi f (offset + i)) times the amplitude for i < len, from an exact
/// complex128 start, rotated by exp(2 pi i f 2^k) in complex64 over doubling segments.
fn cw_chunk(offset: u64, amplitude: f32, len: usize, f: f64, out: &mut Vec<f32>) {
    let scale = f * std::f64::consts::TAU;
    let (s, c) = (offset as f64 * scale).sin_cos();
    let a = f64::from(amplitude);
    let mut z: Vec<Complex32> = Vec::with_capacity(len);
    z.push(Complex::new((c * a) as f32, (s * a) as f32));
    let mut valid = 1;
    while valid < len {
        let add = valid.min(len - valid);
        let (rs, rc) = (valid as f64 * scale).sin_cos();
        let rot = Complex::new(rc as f32, rs as f32);
        for i in 0..add {
            let x = z[i];
            z.push(Complex::new(
                x.re * rot.re - x.im * rot.im,
                x.re * rot.im + x.im * rot.re,
            ));
        }
        valid += add;
    }
    out.extend(z.iter().map(|v| v.re));
}

/// katgpucbf's `Comb._sample_chunk`: impulses at rint(cycle / f) for the cycles in the chunk.
fn comb_chunk(start: u64, amplitude: f32, chunk: u64, f: f64, out: &mut Vec<f32>) {
    out.resize(chunk as usize, 0.0);
    let stop = start + chunk;
    let first = (start as f64 * f).ceil() as i64 - 1;
    let last = (stop as f64 * f).ceil() as i64 + 1;
    let step = f64::from(f as f32);
    for cycle in first..last {
        let i = (cycle as f64 / step).round_ties_even();
        if i >= start as f64 && i < stop as f64 {
            out[(i as u64 - start) as usize] = amplitude;
        }
    }
}

/// A `multicw`'s spectrum as katgpucbf builds it: bin (0..=n/2) to float32 amplitude, each wave
/// adding half its amplitude at +-its rounded frequency; then the weight a real inverse DFT
/// gives each bin (1 for 0 and n/2, else 2).
fn multicw_lines(e: &Expr, n: u64, rate: f64) -> Vec<(u64, f64)> {
    let Expr::MultiCw {
        m,
        amplitude0,
        amplitude_step,
        frequency0,
        frequency_step,
    } = *e
    else {
        return Vec::new();
    };
    let half = n / 2;
    let mut spectrum: BTreeMap<u64, f32> = BTreeMap::new();
    for i in 0..m {
        let f = f64::from(i) * frequency_step + frequency0;
        let w = waves(n, f, rate);
        let pos = w.rem_euclid(n as f64) as u64;
        let neg = (-w).rem_euclid(n as f64) as u64;
        let amp = (0.5 * (f64::from(i) * amplitude_step + amplitude0)) as f32;
        for bin in [pos, neg] {
            if bin <= half {
                *spectrum.entry(bin).or_insert(0.0) += amp;
            }
        }
    }
    spectrum
        .into_iter()
        .filter(|&(_, a)| a != 0.0)
        .map(|(bin, a)| {
            let edge = bin == 0 || (n.is_multiple_of(2) && bin == half);
            (bin, f64::from(a) * if edge { 1.0 } else { 2.0 })
        })
        .collect()
}

/// Sum of a[j] cos(2 pi bin_j t / n) for t in [offset, offset + out.len()), in float64.
///
/// When the chunk divides the period, lines are grouped by bin mod (n / chunk): a group is one
/// inverse FFT over the chunk times a slowly turning phasor. Otherwise each line is a phasor
/// rotated sample by sample (re-anchored exactly every 4096 samples).
fn lines_chunk(lines: &[(u64, f64)], n: u64, offset: u64, out: &mut [f32]) {
    let len = out.len();
    let tau = std::f64::consts::TAU;
    let exact = |j: u64, t: u64| {
        let turns = (u128::from(j) * u128::from(t) % u128::from(n)) as f64 / n as f64;
        let (s, c) = (tau * turns).sin_cos();
        Complex64::new(c, s)
    };
    let mut acc = vec![0.0f64; len];
    if n.is_multiple_of(len as u64) {
        let g = n / len as u64;
        let mut groups: BTreeMap<u64, Vec<(usize, f64)>> = BTreeMap::new();
        for &(j, a) in lines {
            groups.entry(j % g).or_default().push(((j / g) as usize, a));
        }
        let fft = rustfft::FftPlanner::new().plan_fft_inverse(len);
        let mut spec = vec![Complex64::new(0.0, 0.0); len];
        for (r, members) in groups {
            spec.fill(Complex64::new(0.0, 0.0));
            for (q, a) in members {
                spec[q] += a;
            }
            fft.process(&mut spec);
            let mut ph = Complex64::new(1.0, 0.0);
            let step = exact(r, 1);
            for (t, (o, v)) in acc.iter_mut().zip(&spec).enumerate() {
                if t % 4096 == 0 {
                    ph = exact(r, offset + t as u64);
                }
                *o += (ph * v).re;
                ph *= step;
            }
        }
    } else {
        assert!(
            lines.len() as u64 * len as u64 <= DIRECT_WORK,
            "multicw work is checked before sampling"
        );
        for &(j, a) in lines {
            let step = exact(j, 1);
            let mut ph = Complex64::new(1.0, 0.0);
            for (t, o) in acc.iter_mut().enumerate() {
                if t % 4096 == 0 {
                    ph = exact(j, offset + t as u64);
                }
                *o += a * ph.re;
                ph *= step;
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = a as f32;
    }
}

/// Most waves in one `multicw`.
pub const MAX_MULTICW: u32 = 1 << 24;

/// Why sampling `e` over `n` samples at `rate` would take too long, if it would.
pub fn too_costly(e: &Expr, n: u64, rate: f64) -> Option<String> {
    match e {
        Expr::MultiCw { m, .. } if *m > MAX_MULTICW => Some(format!(
            "multicw({m}, ...) has more than {MAX_MULTICW} waves."
        )),
        Expr::Comb { frequency, .. } if waves(n, *frequency, rate) > n as f64 => Some(format!(
            "comb frequency {frequency} Hz is above the sample rate of {rate} Hz (at most one impulse per sample)."
        )),
        Expr::MultiCw { m, .. } => {
            let chunk = n.min(CHUNK_SIZE);
            let lines = multicw_lines(e, n, rate).len() as u64;
            (!n.is_multiple_of(chunk) && lines * chunk > DIRECT_WORK).then(|| {
                format!(
                    "multicw({m}, ...) over a period of {n} samples is too much work; use a period that is a multiple of {CHUNK_SIZE} samples or a power of two."
                )
            })
        }
        Expr::Delay(a, _) | Expr::Nodither(a) => too_costly(a, n, rate),
        Expr::Binary(_, a, b) => too_costly(a, n, rate).or_else(|| too_costly(b, n, rate)),
        _ => None,
    }
}

/// What one polarisation is quantised with.
#[derive(Clone, Copy, Debug)]
pub struct Quantise {
    pub bits: u32,
    /// katgpucbf's dither seed.
    pub dither_seed: u64,
    pub pol: usize,
    /// The buffer the period divides (katgpucbf's max-period): dither generators are per chunk of
    /// it.
    pub buffer: u64,
}

/// Output `e` of one polarisation over one period, quantised as katgpucbf quantises it, on up
/// to `workers` threads.
pub fn sample_pol(e: &Expr, s: Sampling, q: Quantise, workers: usize) -> Vec<i16> {
    let cs = s.chunk();
    let chunks = s.n.div_ceil(cs) as usize;
    let dither_chunk = q.buffer.min(CHUNK_SIZE);
    let pol_seq = SeedSequence::new(u128::from(q.dither_seed)).child(q.pol as u32);
    let scale = ((1u32 << (q.bits - 1)) - 1) as f32;
    let dither = !e.is_nodither();
    let next = AtomicUsize::new(0);
    let parts: Mutex<Vec<(usize, Vec<i16>)>> = Mutex::new(Vec::with_capacity(chunks));
    std::thread::scope(|scope| {
        for _ in 0..workers.clamp(1, chunks) {
            scope.spawn(|| loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= chunks {
                    return;
                }
                let start = c as u64 * cs;
                let len = cs.min(s.n - start) as usize;
                let mut x = vec![0.0f32; len];
                s.eval(e, start, &mut x);
                let mut d = vec![0.0f32; len];
                if dither {
                    dither_range(&pol_seq, dither_chunk, start, &mut d);
                }
                let out: Vec<i16> = x
                    .iter()
                    .zip(&d)
                    .map(|(&v, &d)| (v * scale + d).clamp(-scale, scale).round_ties_even() as i16)
                    .collect();
                parts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((c, out));
            });
        }
    });
    let mut parts = parts.into_inner().unwrap_or_else(|e| e.into_inner());
    parts.sort_by_key(|(c, _)| *c);
    parts.into_iter().flat_map(|(_, v)| v).collect()
}

/// katgpucbf's dither for samples [start, start + out.len()): `random(float32) - 0.5` from the
/// generator of each dither chunk (child chunk of the polarisation's sequence).
fn dither_range(pol_seq: &SeedSequence, chunk: u64, start: u64, out: &mut [f32]) {
    let end = start + out.len() as u64;
    let mut c = start / chunk;
    while c * chunk < end {
        let c0 = c * chunk;
        let mut rng = Pcg64::new(&pol_seq.child(c as u32));
        for i in c0..end.min(c0 + chunk) {
            let v = rng.next_f32() - 0.5;
            if i >= start {
                out[(i - start) as usize] = v;
            }
        }
        c += 1;
    }
}

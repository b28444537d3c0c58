//! The float64 reference backend: the oracle the other backends are tested against.
//!
//! It evaluates docs/signal-path.md literally, a spectrum at a time: the FIR sum over taps, 2n-point
//! complex FFT of the real filtered samples (keeping k = 0..n-1), then
//! `Y_k = G_k X_k exp(i (p - pi k r / n))` and 8-bit quantisation. Simple rather than fast.

use std::collections::VecDeque;
use std::sync::Arc;

use num_complex::{Complex32, Complex64};
use rustfft::{Fft, FftPlanner};

use super::{Backend, BackendError, Frame, Geometry, Result, SpectrumDelay, POLS};
use crate::signal::{gain, quantise, unpack, weights};

/// The float64 reference backend. Synchronous: the work happens in `submit`.
pub struct ReferenceBackend {
    geometry: Geometry,
    weights: Vec<f64>,
    fft: Arc<dyn Fft<f64>>,
    gains: [Vec<Complex64>; POLS],
    /// Per polarisation: the span (overlap then chunk) as numbers.
    span: [Vec<f64>; POLS],
    done: VecDeque<Frame>,
}

impl ReferenceBackend {
    /// A reference backend for `geometry`, with the default PFB weights and default gains.
    pub fn new(geometry: Geometry) -> Result<Self> {
        geometry.validate().map_err(BackendError::Unsupported)?;
        let weights = weights::default_weights(geometry.channels, geometry.taps)
            .map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let fft = FftPlanner::new().plan_fft_forward(geometry.step());
        let g0 = Complex64::new(gain::default_gain(geometry.sample_bits) as f64, 0.0);
        let gains = [vec![g0; geometry.channels], vec![g0; geometry.channels]];
        let span = [
            vec![0.0; geometry.span_samples()],
            vec![0.0; geometry.span_samples()],
        ];
        Ok(Self {
            geometry,
            weights,
            fft,
            gains,
            span,
            done: VecDeque::new(),
        })
    }

    /// The PFB weights in use (`signal::weights::default_weights`).
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// One spectrum of polarisation `pol` (whose gains it uses) from a window of 2nT samples:
    /// `Y_k` for k = 0..n-1, unquantised.
    pub fn spectrum(
        &self,
        pol: usize,
        window: &[f64],
        fine: f64,
        phase: f64,
    ) -> Result<Vec<Complex64>> {
        let g = &self.geometry;
        if pol >= POLS || window.len() != g.window() {
            return Err(BackendError::Misuse(format!(
                "spectrum needs pol 0 or 1 and a window of {} samples, not pol {pol} and {}",
                g.window(),
                window.len()
            )));
        }
        let (n, step) = (g.channels, g.step());
        // g_t = sum over taps j of s[t + 2n j] w[t + 2n j]
        let mut buf = vec![Complex64::new(0.0, 0.0); step];
        for j in 0..g.taps {
            for t in 0..step {
                buf[t].re += window[t + step * j] * self.weights[t + step * j];
            }
        }
        self.fft.process(&mut buf); // X_k = sum_t g_t exp(-2 pi i k t / 2n)
        let pi = std::f64::consts::PI;
        Ok((0..n)
            .map(|k| {
                let rotation = Complex64::from_polar(1.0, phase - pi * k as f64 * fine / n as f64);
                self.gains[pol][k] * buf[k] * rotation
            })
            .collect())
    }

    /// Processes `frame` as `submit` would (filling `output` and `saturated`, advancing the span)
    /// and also returns the values before quantisation, in output order: element
    /// [`Geometry::output_index`]`(spectrum, pol, channel)` is what bytes `2 e` and `2 e + 1` of
    /// the output quantise.
    pub fn process_unquantised(&mut self, frame: &mut Frame) -> Result<Vec<Complex64>> {
        frame.check(&self.geometry)?;
        let g = self.geometry.clone();
        for pol in 0..POLS {
            let span = &mut self.span[pol];
            span.copy_within(g.chunk_samples().., 0);
            unpack::unpack_f64(
                &frame.chunk[pol],
                g.sample_bits,
                0,
                &mut span[g.overlap_samples..],
            )
            .map_err(|e| BackendError::Misuse(e.to_string()))?;
        }
        let mut values = vec![Complex64::new(f64::NAN, f64::NAN); g.output_bytes() / 2];
        let mut saturated = [0u64; POLS];
        for m in 0..g.spectra_per_frame() {
            for (pol, saturated) in saturated.iter_mut().enumerate() {
                let SpectrumDelay {
                    offset,
                    fine,
                    phase,
                } = frame.delays[pol][m];
                let start = offset as usize;
                let window = &self.span[pol][start..start + g.window()];
                let y = self.spectrum(pol, window, fine as f64, phase as f64)?;
                for (k, &v) in y.iter().enumerate() {
                    let e = g.output_index(m, pol, k);
                    let (q, sat) = quantise::quantise_c64(v);
                    frame.output[2 * e] = q[0] as u8;
                    frame.output[2 * e + 1] = q[1] as u8;
                    *saturated += u64::from(sat);
                    values[e] = v;
                }
            }
        }
        frame.saturated = saturated;
        Ok(values)
    }
}

impl Backend for ReferenceBackend {
    fn name(&self) -> &'static str {
        "reference"
    }
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    fn alloc_frame(&self) -> Result<Frame> {
        Ok(Frame::new_host(&self.geometry))
    }
    fn set_gains(&mut self, pol: usize, gains: &[Complex32]) -> Result<()> {
        check_gains(&self.geometry, pol, gains)?;
        self.gains[pol] = gains
            .iter()
            .map(|g| Complex64::new(g.re as f64, g.im as f64))
            .collect();
        Ok(())
    }
    fn submit(&mut self, mut frame: Frame) -> Result<()> {
        if self.done.len() >= self.max_in_flight() {
            return Err(BackendError::Misuse(
                "submit with a frame already in flight: wait first".into(),
            ));
        }
        self.process_unquantised(&mut frame)?;
        self.done.push_back(frame);
        Ok(())
    }
    fn wait(&mut self) -> Result<Option<Frame>> {
        Ok(self.done.pop_front())
    }
    fn max_in_flight(&self) -> usize {
        1
    }
}

/// The checks every backend makes on `set_gains`.
pub(crate) fn check_gains(g: &Geometry, pol: usize, gains: &[Complex32]) -> Result<()> {
    if pol >= POLS {
        return Err(BackendError::Misuse(format!(
            "polarisation must be 0 or 1, not {pol}"
        )));
    }
    if gains.len() != g.channels {
        return Err(BackendError::Misuse(format!(
            "{} gains for {} channels",
            gains.len(),
            g.channels
        )));
    }
    if let Some(k) = gains
        .iter()
        .position(|v| !(v.re.is_finite() && v.im.is_finite()))
    {
        return Err(BackendError::Misuse(format!(
            "gain of channel {k} is not finite: {}",
            gains[k]
        )));
    }
    Ok(())
}

/// Helpers shared by the backend tests: random streams, delays and gains, and comparisons.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::signal::delay::{fill_delays, DelayModel, FramePlan, Placement};
    use crate::signal::unpack::{pack, sample_range};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A geometry with room for coarse delays of up to `margin` samples either way (a multiple of
    /// 4): overlap (T-1) 2n + 2 margin, nominal offset of spectrum m = margin + m 2n.
    pub fn geometry(
        channels: usize,
        taps: usize,
        bits: u32,
        s: usize,
        h: usize,
        margin: usize,
    ) -> Geometry {
        Geometry {
            channels,
            taps,
            sample_bits: bits,
            spectra_per_heap: s,
            heaps_per_frame: h,
            overlap_samples: (taps - 1) * 2 * channels + 2 * margin,
        }
    }

    pub fn rng(seed: u64) -> StdRng {
        StdRng::seed_from_u64(seed)
    }

    /// Near-Gaussian noise (a sum of four uniforms: cheap in debug builds) of rms 10% of full
    /// scale, never all zero.
    pub fn noise(rng: &mut StdRng, bits: u32, len: usize) -> Vec<i16> {
        let (lo, _) = sample_range(bits);
        // Each byte is uniform on [0, 256): variance 256^2 / 12; four of them: 256^2 / 3.
        let scale = 0.1 * -(lo as f64) / (256.0 / 3f64.sqrt());
        let mut x: u64 = rng.random::<u64>() | 1;
        let v: Vec<i16> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let b = x.to_le_bytes();
                let sum = b[0] as i32 + b[1] as i32 + b[2] as i32 + b[3] as i32 - 510;
                (sum as f64 * scale).round() as i16
            })
            .collect();
        assert!(v.iter().any(|&x| x != 0));
        v
    }

    /// Packs `samples` (one chunk per polarisation) into the frame.
    pub fn load_chunk(frame: &mut Frame, bits: u32, samples: [&[i16]; POLS]) {
        for (chunk, samples) in frame.chunk.iter_mut().zip(samples) {
            pack(samples, bits, chunk).unwrap();
        }
    }

    /// Sets both polarisations' gains.
    pub fn set_gains(backend: &mut dyn Backend, gains: &[Vec<Complex32>; POLS]) {
        for (pol, g) in gains.iter().enumerate() {
            backend.set_gains(pol, g).unwrap();
        }
    }

    /// Random coarse delays within `margin`, fine delays in [-0.5, 0.5], phases in [-pi, pi).
    pub fn random_delays(rng: &mut StdRng, g: &Geometry, margin: usize, frame: &mut Frame) {
        for pol in 0..POLS {
            for (m, d) in frame.delays[pol].iter_mut().enumerate() {
                let c = rng.random_range(-(margin as i64)..=margin as i64);
                *d = SpectrumDelay {
                    offset: (margin as i64 + (m * g.step()) as i64 - c) as u32,
                    fine: rng.random_range(-0.5f32..=0.5),
                    phase: rng.random_range(-std::f32::consts::PI..std::f32::consts::PI),
                };
            }
        }
    }

    /// Random complex gains putting outputs at about 30 rms for the noise of [`noise`]; about 1%
    /// of channels ten times higher so that some values saturate.
    pub fn random_gains(rng: &mut StdRng, g: &Geometry) -> [Vec<Complex32>; POLS] {
        let sigma = 0.1 * (1 << (g.sample_bits - 1)) as f32;
        std::array::from_fn(|_| {
            (0..g.channels)
                .map(|_| {
                    let boost = if rng.random_range(0..100) == 0 {
                        10.0
                    } else {
                        1.0
                    };
                    let mag = boost * 30.0 / sigma * rng.random_range(0.5f32..1.5);
                    Complex32::from_polar(mag, rng.random_range(-3.2f32..3.2))
                })
                .collect()
        })
    }

    /// Copies the timestamp, chunks and delays of `src` into `dst` (frames of the same geometry).
    pub fn copy_input(src: &Frame, dst: &mut Frame) {
        dst.timestamp = src.timestamp;
        for pol in 0..POLS {
            dst.chunk[pol].copy_from_slice(&src.chunk[pol]);
            dst.delays[pol].clone_from(&src.delays[pol]);
        }
    }

    /// Fills the output with -128, a value no backend writes, so unwritten bytes show.
    pub fn poison(frame: &mut Frame) {
        frame.output.fill(0x80);
        frame.saturated = [u64::MAX; POLS];
    }

    /// Asserts that every byte was written.
    pub fn assert_written(frame: &Frame) {
        if let Some(i) = frame.output_i8().iter().position(|&v| v == i8::MIN) {
            panic!("output byte {i} was not written");
        }
    }

    /// ||a - b|| / ||b||.
    pub fn relative_error(a: impl Iterator<Item = Complex64>, b: &[Complex64]) -> f64 {
        let (mut num, mut den) = (0.0, 0.0);
        for (x, y) in a.zip(b) {
            num += (x - y).norm_sqr();
            den += y.norm_sqr();
        }
        assert!(den > 0.0, "reference output is all zero");
        (num / den).sqrt()
    }

    /// (values differing by exactly 1, total values); panics on a larger difference.
    pub fn int8_differences(a: &[i8], b: &[i8]) -> (usize, usize) {
        assert_eq!(a.len(), b.len());
        let mut ones = 0;
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            let d = (x as i32 - y as i32).abs();
            assert!(d <= 1, "output byte {i}: {x} vs {y}");
            ones += usize::from(d == 1);
        }
        (ones, a.len())
    }

    /// Something that processes the frames of one stream and returns their unquantised outputs
    /// in output order (a backend built for one geometry).
    pub type Processor = Box<dyn FnMut(&mut Frame) -> Vec<Complex64>>;

    /// Tones at (and beside) channel centres land in their channel with the amplitude and phase the
    /// weights predict, and leak into neighbours as [`weights::response_db`] says.
    pub fn check_tone(make: &dyn Fn(&Geometry) -> Processor) {
        // Spectra from T-1 on have windows wholly in the chunk (overlap (T-1) 2n, no delay).
        let mut g = geometry(1024, 16, 10, 20, 1, 0);
        g.overlap_samples = (g.taps - 1) * g.step();
        let w = weights::default_weights(g.channels, g.taps).unwrap();
        let (n, step) = (g.channels, g.step());
        let pi = std::f64::consts::PI;
        let amp = 500.0;
        for (k, frac, phi) in [
            (100usize, 0.0, 0.7),
            (700, 0.0, -2.0),
            (333, 0.3, 0.1),
            (5, -0.45, 1.0),
        ] {
            let f = k as f64 + frac;
            // Chunk sample t is ADC sample t; window of spectrum m starts at (m - T + 1) 2n.
            let samples: Vec<i16> = (0..g.chunk_samples())
                .map(|t| (amp * (2.0 * pi * f * t as f64 / step as f64 + phi).cos()).round() as i16)
                .collect();
            let mut frame = Frame::new_host(&g);
            load_chunk(&mut frame, g.sample_bits, [&samples, &samples]);
            for pol in 0..POLS {
                for (m, d) in frame.delays[pol].iter_mut().enumerate() {
                    d.offset = (m * step) as u32;
                }
            }
            poison(&mut frame);
            let out = make(&g)(&mut frame);
            assert_written(&frame);
            let predicted = amp / 2.0 * weights::response(&w, n, frac).sqrt();
            for m in g.taps - 1..g.spectra_per_frame() {
                let x = out[g.output_index(m, 0, k)];
                assert_eq!(
                    x,
                    out[g.output_index(m, 1, k)],
                    "both pols carry the same samples"
                );
                let rel = x.norm() / predicted - 1.0;
                assert!(
                    rel.abs() < 1e-3,
                    "k {k}{frac:+} m {m}: |X| {} vs {predicted}",
                    x.norm()
                );
                if frac != 0.0 {
                    continue;
                }
                // The window starts at a multiple of 2n, so the tone's phase comes out unchanged.
                let dphi = (x.arg() - phi + pi).rem_euclid(2.0 * pi) - pi;
                assert!(dphi.abs() < 1e-3, "k {k} phase {} vs {phi}", x.arg());
                for j in [1usize, 2, 3, 10] {
                    for kk in [k - j, k + j] {
                        let got = 20.0 * (out[g.output_index(m, 0, kk)].norm() / x.norm()).log10();
                        let want = weights::response_db(&w, n, kk as f64 - f);
                        if want > -50.0 {
                            assert!(
                                (got - want).abs() < 0.1,
                                "k {k} beside {kk}: {got} dB vs {want} dB"
                            );
                        } else {
                            assert!(
                                got < -45.0,
                                "k {k} beside {kk}: {got} dB, predicted {want} dB"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Sum of tones (frequencies in channels) at sample `t + advance`.
    fn tones(t: f64, advance: f64, step: usize) -> f64 {
        let pi = std::f64::consts::PI;
        [
            (40.0, 150.0, 0.3),
            (301.25, 150.0, -1.1),
            (812.0, 150.0, 2.5),
        ]
        .iter()
        .map(|&(f, a, phi)| a * (2.0 * pi * f * (t + advance) / step as f64 + phi).cos())
        .sum()
    }

    /// A stream advanced by tau samples (dsim's convention) through an engine delayed by tau gives
    /// the undelayed stream's spectra; a fringe phase adds to every channel.
    pub fn check_delay_cancels(make: &dyn Fn(&Geometry) -> Processor) {
        let margin = 2048;
        let g = geometry(1024, 4, 10, 8, 1, margin);
        let fs = 1712e6;
        let plan = FramePlan {
            lag: (g.taps - 1) * g.step() + margin,
            fs,
        };
        let spectra = g.spectra_per_frame();
        let t_first = 1u64 << 30;
        // Two frames of the advanced stream; the second frame's windows all hold real data.
        let run = |advance: f64, delay: f64, phase: f64| {
            let model = DelayModel {
                load_time: t_first,
                delay: delay / fs,
                phase,
                ..DelayModel::default()
            };
            let mut placed = [
                vec![Placement::default(); spectra],
                vec![Placement::default(); spectra],
            ];
            let mut process = make(&g);
            let mut out = Vec::new();
            let mut frame = Frame::new_host(&g);
            for f in 0..2 {
                frame.timestamp = t_first + (f * g.chunk_samples()) as u64;
                let s: Vec<i16> = (0..g.chunk_samples())
                    .map(|i| {
                        tones((frame.timestamp + i as u64) as f64, advance, g.step()).round() as i16
                    })
                    .collect();
                load_chunk(&mut frame, 10, [&s, &s]);
                let outside = fill_delays(
                    &g,
                    &plan,
                    frame.timestamp,
                    &[model, model],
                    &mut frame.delays,
                    &mut placed,
                )
                .unwrap();
                assert_eq!(outside, 0);
                poison(&mut frame);
                out = process(&mut frame);
                assert_written(&frame);
            }
            out
        };
        let reference = run(0.0, 0.0, 0.0);
        for (tau, phase) in [
            (37.3, 0.0),
            (-12.7, 0.0),
            (0.45, 0.0),
            (100.5, 0.0),
            (-0.5, 0.0),
            (5.2, 1.3),
        ] {
            let delayed = run(tau, tau, phase);
            for m in 0..spectra {
                for k in [40usize, 301, 812] {
                    for pol in 0..POLS {
                        let e = g.output_index(m, pol, k);
                        let ratio = delayed[e] / reference[e] * Complex64::from_polar(1.0, -phase);
                        assert!(
                            (ratio - 1.0).norm() < 2e-3,
                            "tau {tau} m {m} k {k}: ratio {ratio}"
                        );
                    }
                }
            }
            // Without the engine's delay the same stream does not line up (the test can fail).
            let uncorrected = run(tau, 0.0, 0.0);
            let e = g.output_index(0, 0, 301);
            assert!(
                (uncorrected[e] / reference[e] - 1.0).norm() > 0.1,
                "tau {tau}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use rand::Rng;

    /// The formula of docs/signal-path.md evaluated naively (O(n^2) DFT) from the whole sample
    /// stream, indexed by ADC sample.
    #[allow(clippy::too_many_arguments)]
    fn direct(
        g: &Geometry,
        w: &[f64],
        stream: &dyn Fn(i64) -> f64,
        t0: i64,
        c: i64,
        fine: f64,
        phase: f64,
        gain: Complex64,
        k: usize,
    ) -> Complex64 {
        let (n, step) = (g.channels as i64, g.step());
        let pi = std::f64::consts::PI;
        let mut x = Complex64::new(0.0, 0.0);
        for t in 0..step {
            let gt: f64 = (0..g.taps)
                .map(|j| stream(t0 + t as i64 - c + (step * j) as i64) * w[t + step * j])
                .sum();
            x += gt * Complex64::from_polar(1.0, -2.0 * pi * (k * t) as f64 / step as f64);
        }
        gain * x * Complex64::from_polar(1.0, phase - pi * k as f64 * fine / n as f64)
    }

    #[test]
    fn matches_the_formula_across_frames() {
        let margin = 40;
        let g = geometry(16, 4, 10, 3, 2, margin);
        let mut rb = ReferenceBackend::new(g.clone()).unwrap();
        let mut rng = rng(1);
        let gains = random_gains(&mut rng, &g);
        set_gains(&mut rb, &gains);
        let frames = 3;
        let first_ts: i64 = 1 << 20;
        let samples: [Vec<i16>; POLS] =
            std::array::from_fn(|_| noise(&mut rng, 10, frames * g.chunk_samples()));
        let lag = margin as i64 + (g.taps - 1) as i64 * g.step() as i64;
        let mut frame = rb.alloc_frame().unwrap();
        for f in 0..frames {
            let range = f * g.chunk_samples()..(f + 1) * g.chunk_samples();
            load_chunk(
                &mut frame,
                10,
                [&samples[0][range.clone()], &samples[1][range]],
            );
            frame.timestamp = (first_ts + (f * g.chunk_samples()) as i64) as u64;
            random_delays(&mut rng, &g, margin, &mut frame);
            poison(&mut frame);
            let values = rb.process_unquantised(&mut frame).unwrap();
            assert_written(&frame);
            for pol in 0..POLS {
                // Before the first chunk the span held zeros.
                let stream = |t: i64| -> f64 {
                    let i = t - first_ts;
                    if i < 0 {
                        0.0
                    } else {
                        samples[pol][i as usize] as f64
                    }
                };
                for m in 0..g.spectra_per_frame() {
                    let d = frame.delays[pol][m];
                    let t0 = frame.timestamp as i64 - lag + (m * g.step()) as i64;
                    let c = margin as i64 + (m * g.step()) as i64 - d.offset as i64;
                    for k in 0..g.channels {
                        let want = direct(
                            &g,
                            rb.weights(),
                            &stream,
                            t0,
                            c,
                            d.fine as f64,
                            d.phase as f64,
                            rb.gains[pol][k],
                            k,
                        );
                        let got = values[g.output_index(m, pol, k)];
                        assert!(
                            (got - want).norm() <= 1e-9 * want.norm().max(1.0),
                            "{f} {m} {pol} {k}: {got} vs {want}"
                        );
                        let q = quantise::quantise_c64(got).0;
                        let e = g.output_index(m, pol, k);
                        assert_eq!([frame.output_i8()[2 * e], frame.output_i8()[2 * e + 1]], q);
                    }
                }
            }
        }
    }

    fn reference_processor(g: &Geometry) -> Processor {
        let mut rb = ReferenceBackend::new(g.clone()).unwrap();
        Box::new(move |frame| rb.process_unquantised(frame).unwrap())
    }

    #[test]
    fn tone_lands_in_its_channel() {
        check_tone(&reference_processor);
    }

    #[test]
    fn delay_cancels_advance() {
        check_delay_cancels(&reference_processor);
    }

    #[test]
    fn output_layout_is_heap_channel_spectrum_pol() {
        // docs/signal-path.md §Output layout: [heap][channel][spectrum in heap][pol][re, im].
        let g = geometry(16, 2, 8, 3, 2, 8);
        assert_eq!(g.output_index(0, 0, 0), 0);
        assert_eq!(g.output_index(0, 1, 0), 1);
        assert_eq!(g.output_index(1, 0, 0), 2);
        assert_eq!(g.output_index(0, 0, 1), 6);
        assert_eq!(g.output_index(4, 1, 5), ((16 + 5) * 3 + 1) * 2 + 1);
        assert_eq!(2 * g.output_index(3, 0, 0), g.heap_bytes());
        // A tone in channel 5 of pol 1 only shows up where the layout says.
        let mut rb = ReferenceBackend::new(g.clone()).unwrap();
        let mut frame = rb.alloc_frame().unwrap();
        let pi = std::f64::consts::PI;
        let tone: Vec<i16> = (0..g.chunk_samples())
            .map(|t| (100.0 * (2.0 * pi * 5.0 * t as f64 / 32.0).cos()).round() as i16)
            .collect();
        load_chunk(&mut frame, 8, [&vec![0; g.chunk_samples()], &tone]);
        for pol in 0..POLS {
            for (m, d) in frame.delays[pol].iter_mut().enumerate() {
                d.offset = (16 + m * 32) as u32; // windows wholly in the chunk
            }
        }
        let values = rb.process_unquantised(&mut frame).unwrap();
        for m in 0..g.spectra_per_frame() {
            // Pol 0 had no input; pol 1 peaks in channel 5.
            let peak = (0..16)
                .max_by(|&a, &b| {
                    let (x, y) = (
                        values[g.output_index(m, 1, a)],
                        values[g.output_index(m, 1, b)],
                    );
                    x.norm().total_cmp(&y.norm())
                })
                .unwrap();
            assert_eq!(peak, 5, "spectrum {m}");
            for k in 0..16 {
                assert_eq!(values[g.output_index(m, 0, k)].norm(), 0.0);
            }
        }
        // Read back by hand: element e = ((heap * n + k) * S + s) * 2 + pol.
        for (e, v) in values.iter().enumerate() {
            let (pol, k) = (e % POLS, (e / (POLS * 3)) % 16);
            if pol == 0 {
                assert_eq!(v.norm(), 0.0, "value {e}");
            } else if k == 5 {
                assert!(v.norm() > 100.0, "value {e}: {v}");
            }
        }
    }

    #[test]
    fn protocol_errors_are_errors() {
        let g = geometry(16, 2, 8, 1, 1, 8);
        let mut rb = ReferenceBackend::new(g.clone()).unwrap();
        assert!(rb.wait().unwrap().is_none());
        rb.submit(rb.alloc_frame().unwrap()).unwrap();
        assert!(rb.submit(rb.alloc_frame().unwrap()).is_err());
        assert!(rb.wait().unwrap().is_some());
        assert!(rb.wait().unwrap().is_none());
        assert!(rb.set_gains(2, &[Complex32::new(1.0, 0.0); 16]).is_err());
        assert!(rb.set_gains(0, &[Complex32::new(1.0, 0.0); 15]).is_err());
        assert!(rb
            .set_gains(0, &[Complex32::new(f32::NAN, 0.0); 16])
            .is_err());
        let mut f = rb.alloc_frame().unwrap();
        f.delays[1][0].offset = g.max_offset() as u32 + 1;
        assert!(rb.submit(f).is_err());
        let mut f = rb.alloc_frame().unwrap();
        f.delays[0].pop();
        assert!(rb.submit(f).is_err());
        let bad = Geometry { channels: 24, ..g };
        assert!(ReferenceBackend::new(bad).is_err());
        let _ = rng(0).random::<u8>();
    }
}

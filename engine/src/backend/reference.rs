//! The float64 reference backend: the oracle the other backends are tested against.
//!
//! It evaluates docs/signal-path.md literally, a spectrum at a time. Wideband: the FIR sum over
//! taps, 2n-point complex FFT of the real filtered samples (keeping k = 0..n-1), then
//! `Y_k = G_k X_k exp(i (p - pi k r / n))`. Narrowband: the window's input samples mixed with the
//! frame's mixer word at their absolute ADC time, filtered and subsampled by the DDC, the complex
//! PFB and the kept bins turned by `exp(i (p' - pi k' r' / n))`, all by
//! [`NarrowbandReference::window_spectrum`], then `G_c` times that. Both are then dithered and
//! quantised to 8 or 4 bits. Simple rather than fast.

use std::sync::Arc;

use num_complex::{Complex32, Complex64};
use rustfft::{Fft, FftPlanner};

use super::{
    channelisations, BackendError, Channelisation, Frame, InputGeometry, OutputFrame,
    OutputGeometry, OutputKind, Process, Result, SpectrumDelay, POLS,
};
use crate::signal::half_rows::{self, HalfRowsFft};
use crate::signal::narrowband::{Narrowband, NarrowbandDelay, NarrowbandReference};
use crate::signal::power::InputPower;
use crate::signal::{dither, gain, quantise, unpack};

/// The float64 reference backend: a [`Process`], a backend as [`super::Synchronous`]. The span is
/// shared; each output has its own weights, FFT and gains ([`ReferenceOutput`]).
pub struct ReferenceBackend {
    input: InputGeometry,
    outputs: Vec<OutputGeometry>,
    /// One per output, in the engine's order.
    per_output: Vec<ReferenceOutput>,
    /// Per polarisation: the span (overlap then chunk) as numbers.
    span: [Vec<f64>; POLS],
}

/// What the reference keeps for one output.
pub struct ReferenceOutput {
    geometry: Channelisation,
    weights: Vec<f64>,
    /// What only its kind keeps.
    channeliser: Channeliser,
    gains: [Vec<Complex64>; POLS],
}

/// One kind of output's channeliser, chosen by its [`OutputKind`] when the output is made.
enum Channeliser {
    Wideband {
        /// The 2n-point FFT.
        fft: Arc<dyn Fft<f64>>,
        /// Set by [`ReferenceBackend::model_half_rows`]: the FFT as the two-pass CUDA kernels
        /// take it with float16 rows, instead of `fft`.
        half_rows: Option<HalfRowsFft>,
    },
    /// Its mixer word set from each frame's.
    Narrowband(NarrowbandReference),
}

impl ReferenceBackend {
    /// A reference backend for `outputs` (1 to [`super::MAX_OUTPUTS`]) of `input`, wideband or
    /// narrowband, with each output's PFB weights and default gains.
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry]) -> Result<Self> {
        let mut planner = FftPlanner::new();
        let geometry = channelisations(input, outputs)?;
        let per_output = geometry
            .into_iter()
            .map(|g| ReferenceOutput::new(g, &mut planner))
            .collect::<Result<_>>()?;
        Ok(Self {
            input,
            outputs: outputs.to_vec(),
            per_output,
            span: std::array::from_fn(|_| vec![0.0; input.span_samples()]),
        })
    }

    /// The first output's PFB weights (its filter design, `OutputGeometry::weights`).
    pub fn weights(&self) -> &[f64] {
        &self.per_output[0].weights
    }

    /// Models output `k` as the two-pass CUDA kernels compute it with float16 rows
    /// (`--fft-precision half`, split n = R x A with R = `r`): the rows rounded where those
    /// kernels round them (`signal::half_rows`), everything else in float64 as before.
    pub fn model_half_rows(&mut self, k: usize, r: usize) -> Result<()> {
        let o = self
            .per_output
            .get_mut(k)
            .ok_or_else(|| BackendError::Misuse(format!("no output {k}")))?;
        let g = o.geometry;
        let Channeliser::Wideband { half_rows, .. } = &mut o.channeliser else {
            return Err(BackendError::Unsupported(format!(
                "float16 rows are modelled for wideband outputs split n = R x A; not output {k} \
                 with R = {r}"
            )));
        };
        if r == 0 || g.output.channels % r != 0 {
            return Err(BackendError::Unsupported(format!(
                "float16 rows are modelled for wideband outputs split n = R x A; not output {k} \
                 with R = {r}"
            )));
        }
        let scale = half_rows::row_scale(&o.weights, g.output.channels, g.input.sample_bits, r);
        let mut planner = FftPlanner::new();
        *half_rows = Some(HalfRowsFft::new(
            g.output.channels,
            r,
            Some(scale),
            &mut planner,
        ));
        Ok(())
    }

    /// What the backend keeps for output `k` (panics if there is no such output).
    pub fn output(&self, k: usize) -> &ReferenceOutput {
        &self.per_output[k]
    }

    /// Processes `frame` as `submit` would (filling every output's `heaps` and `saturated`,
    /// measuring the input, advancing the span) and returns the first output's values before
    /// dither and quantisation ([`Self::process_unquantised_outputs`] returns every output's).
    pub fn process_unquantised(&mut self, frame: &mut Frame) -> Result<Vec<Complex64>> {
        Ok(self.process_unquantised_outputs(frame)?.swap_remove(0))
    }

    /// Processes `frame` as `submit` would and also returns, per output, the values before
    /// dither and quantisation in output order: element
    /// [`Channelisation::output_index`]`(spectrum, pol, channel)` of output k is what bytes `2 e`
    /// and `2 e + 1` of its heaps quantise (byte `e` with 4-bit output).
    pub fn process_unquantised_outputs(
        &mut self,
        frame: &mut Frame,
    ) -> Result<Vec<Vec<Complex64>>> {
        let input = self.input;
        frame.check(&input, &self.outputs)?;
        // The input once: unpacked into the span, measured.
        for pol in 0..POLS {
            let span = &mut self.span[pol];
            span.copy_within(input.chunk_samples.., 0);
            unpack::unpack_f64(
                &frame.input.chunk[pol],
                input.sample_bits,
                0,
                &mut span[input.overlap_samples..],
            )
            .map_err(|e| BackendError::Misuse(e.to_string()))?;
        }
        frame.input.power = Some(std::array::from_fn(|pol| {
            InputPower::of(&self.span[pol][input.overlap_samples..], input.sample_bits)
        }));
        // Then each output from it. The span's first sample is ADC sample `span_start`.
        let span_start = frame
            .input
            .timestamp
            .wrapping_sub(input.overlap_samples as u64);
        self.per_output
            .iter_mut()
            .zip(&mut frame.outputs)
            .map(|(o, out)| o.process(&self.span, span_start, out))
            .collect()
    }
}

impl ReferenceOutput {
    fn new(geometry: Channelisation, planner: &mut FftPlanner<f64>) -> Result<Self> {
        let unsupported = |e: crate::signal::SignalError| BackendError::Unsupported(e.to_string());
        let o = &geometry.output;
        let weights = o.weights().map_err(unsupported)?;
        let channeliser = match o.kind {
            OutputKind::Wideband => Channeliser::Wideband {
                fft: planner.plan_fft_forward(geometry.step()),
                half_rows: None,
            },
            OutputKind::Narrowband(ddc) => Channeliser::Narrowband(
                NarrowbandReference::new(Narrowband {
                    channels: o.channels,
                    taps: o.taps,
                    decimation: ddc.decimation,
                    ddc_taps: ddc.taps,
                    // A valid word for every decimation until a frame brings its own.
                    mixer: 1 << 30,
                    filter: o.filter,
                    bins: ddc.bins,
                })
                .map_err(unsupported)?,
            ),
        };
        let g0 = Complex64::new(
            gain::default_gain(geometry.input.sample_bits, geometry.output.bits) as f64,
            0.0,
        );
        Ok(Self {
            geometry,
            weights,
            channeliser,
            gains: std::array::from_fn(|_| vec![g0; geometry.output.channels]),
        })
    }

    /// The output's view of the input.
    pub fn geometry(&self) -> &Channelisation {
        &self.geometry
    }

    /// The PFB weights in use (the output's filter design, `OutputGeometry::weights`).
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The gains of polarisation `pol` (panics unless 0 or 1).
    pub fn gains(&self, pol: usize) -> &[Complex64] {
        &self.gains[pol]
    }

    /// One wideband spectrum of polarisation `pol` (whose gains it uses) from a window of 2nT
    /// samples: `Y_k` for k = 0..n-1, unquantised.
    pub fn spectrum(
        &self,
        pol: usize,
        window: &[f64],
        fine: f64,
        phase: f64,
    ) -> Result<Vec<Complex64>> {
        self.wideband_spectrum(pol, window, fine, phase, (0, 0))
    }

    /// [`Self::spectrum`] for spectrum `at.1` of the frame with key `at.0`
    /// ([`half_rows::frame_key`]): where the rows are float16, their rounding draws on both.
    fn wideband_spectrum(
        &self,
        pol: usize,
        window: &[f64],
        fine: f64,
        phase: f64,
        at: (u32, usize),
    ) -> Result<Vec<Complex64>> {
        let g = &self.geometry;
        let Channeliser::Wideband { fft, half_rows } = &self.channeliser else {
            return Err(BackendError::Misuse(
                "spectrum computes wideband spectra; this output is narrowband".into(),
            ));
        };
        if pol >= POLS || window.len() != g.window() {
            return Err(BackendError::Misuse(format!(
                "spectrum needs pol 0 or 1 and a window of {} samples, not pol {pol} and {}",
                g.window(),
                window.len()
            )));
        }
        let (n, step) = (g.output.channels, g.step());
        // g_t = sum over taps j of s[t + 2n j] w[t + 2n j]
        let mut buf = vec![Complex64::new(0.0, 0.0); step];
        for j in 0..g.output.taps {
            for t in 0..step {
                buf[t].re += window[t + step * j] * self.weights[t + step * j];
            }
        }
        match half_rows {
            // X_k = sum_t g_t exp(-2 pi i k t / 2n)
            None => fft.process(&mut buf),
            Some(h) => {
                let g: Vec<f64> = buf.iter().map(|x| x.re).collect();
                buf = h.process(&g, at.0, at.1, pol);
            }
        }
        let pi = std::f64::consts::PI;
        Ok((0..n)
            .map(|k| {
                let rotation = Complex64::from_polar(1.0, phase - pi * k as f64 * fine / n as f64);
                self.gains[pol][k] * buf[k] * rotation
            })
            .collect())
    }

    /// One narrowband spectrum of polarisation `pol` whose window starts at span offset `offset`,
    /// the span's first sample being ADC sample `span_start` (the mixer runs on absolute time):
    /// `G_c Y_c` for c = 0..n-1, unquantised. `fine` is r', `phase` p' (the mixer's phase over the
    /// delay included), as [`SpectrumDelay`] carries them.
    fn narrowband_spectrum(
        &self,
        nb: &NarrowbandReference,
        pol: usize,
        span: &[f64],
        span_start: u64,
        delay: SpectrumDelay,
    ) -> Vec<Complex64> {
        let x = |t: u64| Complex64::new(span[t.wrapping_sub(span_start) as usize], 0.0);
        let start = span_start.wrapping_add(delay.offset as u64);
        let turn = NarrowbandDelay {
            coarse: 0,
            fine: delay.fine as f64,
            phase: delay.phase as f64,
        };
        let y = nb.window_spectrum(x, start, &turn);
        y.iter().zip(&self.gains[pol]).map(|(y, g)| g * y).collect()
    }

    /// This output's spectra of a frame whose input is in `span` (its first sample ADC sample
    /// `span_start`), with its delays, timestamp and (narrowband) mixer word in `out`: fills its
    /// `heaps` and `saturated` and returns the values before dither and quantisation, in output
    /// order.
    fn process(
        &mut self,
        span: &[Vec<f64>; POLS],
        span_start: u64,
        out: &mut OutputFrame,
    ) -> Result<Vec<Complex64>> {
        if let Channeliser::Narrowband(nb) = &mut self.channeliser {
            nb.set_mixer(out.mixer)
                .map_err(|e| BackendError::Misuse(e.to_string()))?;
        }
        let g = &self.geometry;
        let mut values = vec![Complex64::new(f64::NAN, f64::NAN); g.output_values()];
        let mut saturated = [0u64; POLS];
        for m in 0..g.spectra_per_frame() {
            for (pol, saturated) in saturated.iter_mut().enumerate() {
                let delay = out.delays[pol][m];
                let y = match &self.channeliser {
                    Channeliser::Narrowband(nb) => {
                        self.narrowband_spectrum(nb, pol, &span[pol], span_start, delay)
                    }
                    Channeliser::Wideband { .. } => {
                        let start = delay.offset as usize;
                        let window = &span[pol][start..start + g.window()];
                        let at = (half_rows::frame_key(out.timestamp), m);
                        self.wideband_spectrum(
                            pol,
                            window,
                            delay.fine as f64,
                            delay.phase as f64,
                            at,
                        )?
                    }
                };
                let key = g.dither_key(out.timestamp, m);
                for (k, &v) in y.iter().enumerate() {
                    let e = g.output_index(m, pol, k);
                    let d = key.map_or([0.0; 2], |key| dither::value(key, k, pol));
                    let (q, sat) = quantise::quantise_c64(v, d, g.limit());
                    quantise::store(&mut out.heaps, e, q, g.output.bits);
                    *saturated += u64::from(sat);
                    values[e] = v;
                }
            }
        }
        out.saturated = saturated;
        Ok(values)
    }
}

impl Process for ReferenceBackend {
    const NAME: &'static str = "reference";
    fn input(&self) -> &InputGeometry {
        &self.input
    }
    fn outputs(&self) -> &[OutputGeometry] {
        &self.outputs
    }
    fn store_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) {
        self.per_output[output].gains[pol] = gains
            .iter()
            .map(|g| Complex64::new(g.re as f64, g.im as f64))
            .collect();
    }
    fn compute(&mut self, frame: &mut Frame) -> Result<()> {
        self.process_unquantised_outputs(frame).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::*;
    use super::*;
    use crate::backend::{Backend, Synchronous};
    use crate::signal::narrowband::narrowband_delay;
    use rand::Rng;

    /// The formula of docs/signal-path.md evaluated naively (O(n^2) DFT) from the whole sample
    /// stream, indexed by ADC sample.
    #[allow(clippy::too_many_arguments)]
    fn direct(
        g: &Channelisation,
        w: &[f64],
        stream: &dyn Fn(i64) -> f64,
        t0: i64,
        c: i64,
        fine: f64,
        phase: f64,
        gain: Complex64,
        k: usize,
    ) -> Complex64 {
        let (n, step) = (g.output.channels as i64, g.step());
        let pi = std::f64::consts::PI;
        let mut x = Complex64::new(0.0, 0.0);
        for t in 0..step {
            let gt: f64 = (0..g.output.taps)
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
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut rng = rng(1);
        let gains = random_gains(&mut rng, &g);
        set_gains(&mut rb, &gains);
        let frames = 3;
        let first_ts: i64 = 1 << 20;
        let samples: [Vec<i16>; POLS] =
            std::array::from_fn(|_| noise(&mut rng, 10, frames * g.chunk_samples()));
        let lag = margin as i64 + (g.output.taps - 1) as i64 * g.step() as i64;
        let mut frame = rb.alloc_frame().unwrap();
        for f in 0..frames {
            let range = f * g.chunk_samples()..(f + 1) * g.chunk_samples();
            load_chunk(
                &mut frame,
                10,
                [&samples[0][range.clone()], &samples[1][range]],
            );
            frame.input.timestamp = (first_ts + (f * g.chunk_samples()) as i64) as u64;
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
                    let d = frame.outputs[0].delays[pol][m];
                    let t0 = frame.input.timestamp as i64 - lag + (m * g.step()) as i64;
                    let c = margin as i64 + (m * g.step()) as i64 - d.offset as i64;
                    for k in 0..g.output.channels {
                        let want = direct(
                            &g,
                            rb.weights(),
                            &stream,
                            t0,
                            c,
                            d.fine as f64,
                            d.phase as f64,
                            rb.output(0).gains(pol)[k],
                            k,
                        );
                        let got = values[g.output_index(m, pol, k)];
                        assert!(
                            (got - want).norm() <= 1e-9 * want.norm().max(1.0),
                            "{f} {m} {pol} {k}: {got} vs {want}"
                        );
                        let q = quantise::quantise_c64(got, [0.0; 2], quantise::LIMIT).0;
                        let e = g.output_index(m, pol, k);
                        assert_eq!(
                            [
                                frame.outputs[0].heaps_i8()[2 * e],
                                frame.outputs[0].heaps_i8()[2 * e + 1]
                            ],
                            q
                        );
                    }
                }
            }
        }
    }

    fn reference_processor(g: &Channelisation) -> Processor {
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
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
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut frame = rb.alloc_frame().unwrap();
        let pi = std::f64::consts::PI;
        let tone: Vec<i16> = (0..g.chunk_samples())
            .map(|t| (100.0 * (2.0 * pi * 5.0 * t as f64 / 32.0).cos()).round() as i16)
            .collect();
        load_chunk(&mut frame, 8, [&vec![0; g.chunk_samples()], &tone]);
        for pol in 0..POLS {
            for (m, d) in frame.outputs[0].delays[pol].iter_mut().enumerate() {
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
    fn input_power_is_measured_exactly() {
        check_input_power(&|g| {
            Box::new(Synchronous::new(
                ReferenceBackend::new(g.input, &[g.output]).unwrap(),
            ))
        });
    }

    #[test]
    fn dither_recovers_a_weak_tone() {
        check_dither_unbiased(&|g| {
            Box::new(Synchronous::new(
                ReferenceBackend::new(g.input, &[g.output]).unwrap(),
            ))
        });
    }

    /// Every output byte is the dithered value of the spectrum, channel and polarisation it stands
    /// for (the key from the output timestamp, spectrum by spectrum), 4-bit packing included.
    #[test]
    fn dither_and_packing_follow_the_element() {
        let margin = 16;
        let mut g = geometry(64, 4, 10, 3, 2, margin);
        g.output.bits = 4;
        g.output.dither = Some(9);
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut rng = rng(3);
        set_gains(&mut rb, &random_gains(&mut rng, &g));
        let mut frame = rb.alloc_frame().unwrap();
        let x = noise(&mut rng, 10, g.chunk_samples());
        load_chunk(&mut frame, 10, [&x, &x]);
        random_delays(&mut rng, &g, margin, &mut frame);
        let values = rb.process_unquantised(&mut frame).unwrap();
        let t0 = frame.outputs[0].timestamp;
        let (mut moved, mut total) = (0, 0);
        for m in 0..g.spectra_per_frame() {
            let key = dither::spectrum_key(9, t0.wrapping_add((m * g.step()) as u64));
            for pol in 0..POLS {
                for k in 0..64 {
                    let e = g.output_index(m, pol, k);
                    let v = values[e];
                    let [dr, di] = dither::value(key, k, pol);
                    let want = [
                        quantise::quantise_f64(v.re + dr as f64, 7).0,
                        quantise::quantise_f64(v.im + di as f64, 7).0,
                    ];
                    assert_eq!(
                        quantise::unpack4(frame.outputs[0].heaps[e]),
                        want,
                        "{m} {pol} {k}"
                    );
                    moved += usize::from(want != quantise::quantise_c64(v, [0.0; 2], 7).0);
                    total += 1;
                }
            }
        }
        assert!(moved > total / 10, "the dither changed {moved} of {total}");
    }

    #[test]
    fn protocol_errors_are_errors() {
        let g = geometry(16, 2, 8, 1, 1, 8);
        let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        assert!(rb.wait().unwrap().is_none());
        rb.submit(rb.alloc_frame().unwrap()).unwrap();
        assert!(rb.submit(rb.alloc_frame().unwrap()).is_err());
        assert!(rb.wait().unwrap().is_some());
        assert!(rb.wait().unwrap().is_none());
        assert!(rb.set_gains(0, 2, &[Complex32::new(1.0, 0.0); 16]).is_err());
        assert!(rb.set_gains(0, 0, &[Complex32::new(1.0, 0.0); 15]).is_err());
        assert!(rb
            .set_gains(0, 0, &[Complex32::new(f32::NAN, 0.0); 16])
            .is_err());
        assert!(rb.set_gains(1, 0, &[Complex32::new(1.0, 0.0); 16]).is_err());
        let mut f = rb.alloc_frame().unwrap();
        f.outputs[0].delays[1][0].offset = g.max_offset() as u32 + 1;
        assert!(rb.submit(f).is_err());
        let mut f = rb.alloc_frame().unwrap();
        f.outputs[0].delays[0].pop();
        assert!(rb.submit(f).is_err());
        let bad = OutputGeometry {
            channels: 24,
            ..g.output
        };
        assert!(ReferenceBackend::new(g.input, &[bad]).is_err());
        assert!(ReferenceBackend::new(g.input, &[]).is_err());
        let _ = rng(0).random::<u8>();
    }

    fn reference_backend(input: InputGeometry, outputs: &[OutputGeometry]) -> Box<dyn Backend> {
        Box::new(Synchronous::new(
            ReferenceBackend::new(input, outputs).unwrap(),
        ))
    }

    /// Built with several outputs, the reference gives each exactly what it gives built with that
    /// output alone.
    #[test]
    fn each_output_as_if_alone() {
        check_outputs_as_if_alone(
            &reference_backend,
            &[(&reference_backend, Agreement::Exact)],
            true,
        );
    }

    /// Beside a wideband output, three narrowband ones (each frame's own mixer word) come out as
    /// from a backend of their own.
    #[test]
    fn each_output_as_if_alone_with_narrowband() {
        check_mixed_outputs_as_if_alone(
            &reference_backend,
            &[(&reference_backend, Agreement::Exact)],
            true,
        );
    }

    /// A narrowband output equals the float64 narrowband channeliser of signal::narrowband,
    /// spectrum by spectrum, over consecutive frames (the span carried, the first overlap silent)
    /// at timestamps near 2^40, with random gains, delays (fractional, either sign) and fringe
    /// phases mapped as the engine maps them, and a new random mixer word every frame: exactly
    /// (bit for bit) against `NarrowbandReference::spectrum_of` with the window move k and the
    /// f32 r' and p' the backend was handed, and to f32 precision against
    /// `NarrowbandReference::spectrum` from the delays themselves (its own mapping in f64).
    #[test]
    fn narrowband_matches_the_oracle_across_frames() {
        for (seed, (n, taps, d)) in [(64usize, 4usize, 8usize), (128, 2, 16), (64, 3, 32)]
            .into_iter()
            .enumerate()
        {
            let margin = 4 * d;
            let output = narrowband_output(n, taps, d, 2);
            let step = output.step();
            // Spectrum m of the frame at A has timestamp A - lag + m step, its undelayed window
            // at span offset margin + m step (as `narrowband_delays` places it).
            let lag = (output.window() - step + margin).next_multiple_of(step);
            let input = InputGeometry {
                sample_bits: 10,
                chunk_samples: 2 * output.heap_samples(),
                overlap_samples: lag + margin,
            };
            let g = Channelisation::new(input, output);
            let mut rb = Synchronous::new(ReferenceBackend::new(input, &[output]).unwrap());
            let mut rng = rng(40 + seed as u64);
            let gains = random_gains(&mut rng, &g);
            set_gains(&mut rb, &gains);
            let chunk = g.chunk_samples();
            let first = 1u64 << 40;
            let span0 = first - input.overlap_samples as u64;
            let mut history: [Vec<f64>; POLS] = std::array::from_fn(|_| vec![0.0; lag + margin]);
            let mut frame = rb.alloc_frame().unwrap();
            let (mut worst, mut spectra) = (0.0f64, 0);
            for f in 0..3 {
                let x = [noise(&mut rng, 10, chunk), noise(&mut rng, 10, chunk)];
                load_chunk(&mut frame, 10, [&x[0], &x[1]]);
                for pol in 0..POLS {
                    history[pol].extend(x[pol].iter().map(|&v| v as f64));
                }
                let a = first + (f * chunk) as u64;
                frame.input.timestamp = a;
                let word = random_mixer_word(&mut rng, d);
                let at = narrowband_delays(&mut rng, &g, margin, word, &mut frame.outputs[0]);
                let values = rb.process_unquantised(&mut frame).unwrap();
                let oracle =
                    NarrowbandReference::new(Narrowband::new(n, taps, d, word).unwrap()).unwrap();
                for pol in 0..POLS {
                    let h = &history[pol];
                    let x = |t: u64| Complex64::new(h[(t - span0) as usize], 0.0);
                    for (m, at) in at[pol].iter().enumerate() {
                        let t0 = a - lag as u64 + (m * step) as u64;
                        let handed = frame.outputs[0].delays[pol][m];
                        let nb = narrowband_delay(at, d, d, word);
                        let exact = oracle.spectrum_of(
                            x,
                            t0,
                            &NarrowbandDelay {
                                coarse: nb.coarse,
                                fine: handed.fine as f64,
                                phase: handed.phase as f64,
                            },
                        );
                        let mapped = oracle.spectrum(h, span0, t0, at).unwrap();
                        let (mut err, mut pow) = (0.0, 0.0);
                        for c in 0..n {
                            let got = values[g.output_index(m, pol, c)];
                            let gain = rb.output(0).gains(pol)[c];
                            assert_eq!(got, gain * exact[c], "frame {f} pol {pol} {m} {c}");
                            err += (got - gain * mapped[c]).norm_sqr();
                            pow += got.norm_sqr();
                        }
                        worst = worst.max((err / pow).sqrt());
                        spectra += 1;
                    }
                }
            }
            println!(
                "narrowband n {n}, T {taps}, D {d}: {spectra} spectra equal to the oracle's \
                 (window moved, f32 r' and p'); against its own f64 mapping relative error \
                 {worst:.1e}"
            );
            assert!(worst < 1e-6, "{worst}");
        }
    }

    fn reference_outputs(input: InputGeometry, outputs: &[OutputGeometry]) -> OutputsProcessor {
        let mut rb = Synchronous::new(ReferenceBackend::new(input, outputs).unwrap());
        Box::new(move |frame| rb.process_unquantised_outputs(frame).unwrap())
    }

    #[test]
    fn narrowband_tones_land_in_their_channels() {
        for (d, c, db, phase) in check_narrowband_tones(&reference_outputs) {
            println!(
                "D {d}: tone in channel {c}: within {db:.5} dB of the wideband level, phase \
                 within {phase:.1e} rad"
            );
        }
    }

    #[test]
    fn mixer_word_takes_effect_from_its_frame() {
        check_mixer_change(&reference_backend);
    }

    #[test]
    fn narrowband_refusals_are_sentences() {
        check_narrowband_refusals(&|input, outputs| {
            Ok(Box::new(Synchronous::new(ReferenceBackend::new(
                input, outputs,
            )?)))
        });
    }

    #[test]
    fn serves_one_to_eight_outputs() {
        check_output_counts(&|input, outputs| {
            Ok(Box::new(Synchronous::new(ReferenceBackend::new(
                input, outputs,
            )?)))
        });
    }

    /// The unquantised values of every output are those of the output alone, and the first
    /// output's are what `process_unquantised` returns.
    #[test]
    fn unquantised_values_per_output() {
        let margin = 32;
        let (input, outputs) = three_outputs(margin);
        let mut rb = Synchronous::new(ReferenceBackend::new(input, &outputs).unwrap());
        let mut alone: Vec<_> = outputs
            .iter()
            .map(|o| Synchronous::new(ReferenceBackend::new(input, &[*o]).unwrap()))
            .collect();
        let mut rng = rng(12);
        let mut frame = rb.alloc_frame().unwrap();
        let x = noise(&mut rng, 10, input.chunk_samples);
        load_chunk(&mut frame, 10, [&x, &x]);
        for (k, out) in frame.outputs.iter_mut().enumerate() {
            random_output_delays(&mut rng, rb.output(k).geometry(), margin, out);
        }
        let values = rb.process_unquantised_outputs(&mut frame).unwrap();
        assert_eq!(values.len(), 3);
        for (k, (b, o)) in alone.iter_mut().zip(&outputs).enumerate() {
            let mut single = Frame::new_host(&input, &[*o]);
            copy_input(&frame, &mut single);
            single.outputs[0].timestamp = frame.outputs[k].timestamp;
            single.outputs[0]
                .delays
                .clone_from(&frame.outputs[k].delays);
            assert_eq!(
                b.process_unquantised(&mut single).unwrap(),
                values[k],
                "output {k}"
            );
            assert_eq!(b.weights(), rb.output(k).weights());
        }
    }
}

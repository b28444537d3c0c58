//! Channel response (paper, 5.2): step dsim's tone across a channel in sub-channel steps,
//! cross-correlate the two polarisations' outputs for that channel (their dither is independent,
//! so noise and dither average away while the common tone stays), integrate, and compare with
//! the theoretical response, |Fourier transform of the PFB weights|^2.
//!
//! The 8-bit output cannot hold the whole range at one gain, so each step sets the engine gain
//! that puts the tone's expected level near `target` counts (the paper uses different gains for
//! different tones) and divides it out. The gain comes from the theory only to choose a level;
//! the measurement itself does not depend on it. 4-bit output (clamped at 7 rather than 127) has
//! every level scaled by 7/127.
//!
//! Theory, for n channels, T taps and weights w (docs/signal-path.md): a tone at k + d channels
//! (frequency (k + d) fs / 2n) gives channel k the amplitude |W(d / 2n)|, W(nu) = sum_i w_i
//! exp(-2 pi i nu i), so the response relative to the centre is |W(d / 2n)|^2 / |W(0)|^2.

use std::f64::consts::PI;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use num_complex::Complex64;

use crate::content::db;
use crate::control::Tone;
use crate::feng_raw::OutputBits;
use crate::receive::{HeapSink, Receiver};
pub use crate::record::{FilterDesign, ResponseConfig, ResponseGeometry};
use crate::record::{ResponsePoint, ResponseReport, ResponseStep};
use crate::services::Services;
use crate::signals;

/// PFB weights as docs/signal-path.md §PFB weights: Hann window times sinc, scaled to unit energy.
pub fn pfb_weights(channels: usize, taps: usize, cutoff: f64) -> Vec<f64> {
    design_weights(
        channels,
        taps,
        FilterDesign {
            rect: false,
            w_cutoff: cutoff,
        },
    )
}

/// PFB weights of any design: the taper (Hann, or 1 when `rect`) times sinc, unit energy.
pub fn design_weights(channels: usize, taps: usize, design: FilterDesign) -> Vec<f64> {
    let (len, cutoff) = (2 * channels * taps, design.w_cutoff);
    let step = 2.0 * channels as f64;
    let mut w: Vec<f64> = (0..len)
        .map(|i| {
            let hann = if design.rect {
                1.0
            } else if len > 1 {
                (PI * i as f64 / (len - 1) as f64).sin().powi(2)
            } else {
                1.0
            };
            let x = cutoff * ((i as f64 + 0.5) / step - taps as f64 / 2.0);
            let sinc = if x.abs() < 1e-12 {
                1.0
            } else {
                (PI * x).sin() / (PI * x)
            };
            hann * sinc
        })
        .collect();
    let norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        w.iter_mut().for_each(|x| *x /= norm);
    }
    w
}

/// |W(offset / 2n)|: the amplitude a unit complex tone `offset` channels from a channel's centre
/// gives that channel. The phasor is rotated by multiplication and renormalised now and then
/// (the error stays near 1e-13, far below the -120 dB the paper reaches).
pub fn amplitude(weights: &[f64], channels: usize, offset: f64) -> f64 {
    let theta = -2.0 * PI * offset / (2.0 * channels as f64);
    let rot = Complex64::from_polar(1.0, theta);
    let mut ph = Complex64::new(1.0, 0.0);
    let mut acc = Complex64::new(0.0, 0.0);
    for (i, &w) in weights.iter().enumerate() {
        acc += ph * w;
        ph *= rot;
        if i % 4096 == 4095 {
            ph = Complex64::from_polar(1.0, theta * (i + 1) as f64);
        }
    }
    acc.norm()
}

/// Theoretical response in dB relative to the channel centre.
pub fn response_db(weights: &[f64], channels: usize, offset: f64) -> f64 {
    let peak = amplitude(weights, channels, 0.0);
    2.0 * db(amplitude(weights, channels, offset) / peak)
}

/// Sum of the weights: the channel amplitude per unit complex tone amplitude at the centre.
pub fn coherent_gain(weights: &[f64]) -> f64 {
    weights.iter().sum()
}

/// Cross-power of one channel between the polarisations, summed over the heaps that arrive
/// while armed and whose timestamp is at least `min_timestamp`.
pub struct CrossAccumulator {
    channel: usize,
    per_substream: usize,
    bits: OutputBits,
    state: Mutex<Cross>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cross {
    armed: bool,
    min_timestamp: u64,
    /// Sum of x0 conj(x1).
    pub cross: Complex64,
    /// Sums of |x0|^2 and |x1|^2.
    pub auto: [f64; 2],
    pub spectra: u64,
    /// Values with a component at the clamp (+-127, or +-7 for 4-bit output): the gain was too
    /// high.
    pub saturated: u64,
}

impl CrossAccumulator {
    /// Sums `channel` of `channels` over `substreams`, of output in the format `bits`.
    pub fn new(channel: usize, channels: usize, substreams: usize, bits: OutputBits) -> Self {
        Self {
            channel,
            per_substream: channels / substreams.max(1),
            bits,
            state: Mutex::new(Cross::default()),
        }
    }

    /// The channel summed.
    pub fn channel(&self) -> usize {
        self.channel
    }

    /// Starts a fresh sum over heaps from `min_timestamp` on.
    pub fn arm(&self, min_timestamp: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = Cross {
            armed: true,
            min_timestamp,
            ..Cross::default()
        };
    }

    /// Stops summing and returns the sums.
    pub fn take(&self) -> Cross {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.armed = false;
        *s
    }

    pub fn spectra(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).spectra
    }
}

impl HeapSink for CrossAccumulator {
    fn heap(&self, _substream: usize, first_channel: usize, timestamp: u64, data: &[u8]) {
        if self.channel < first_channel || self.channel >= first_channel + self.per_substream {
            return;
        }
        // Spectra per heap from the heap's length: (channels, spectra, 2 pols) complex values.
        let bits = self.bits;
        let spectra = data.len() / (self.per_substream.max(1) * bits.spectrum_bytes());
        let per_channel = spectra * bits.spectrum_bytes();
        if per_channel == 0 {
            return;
        }
        let at = (self.channel - first_channel) * per_channel;
        let Some(block) = data.get(at..at + per_channel) else {
            return;
        };
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !s.armed || timestamp < s.min_timestamp {
            return;
        }
        let c = |v: [i32; 2]| Complex64::new(f64::from(v[0]), f64::from(v[1]));
        for x in block.chunks_exact(bits.spectrum_bytes()) {
            let [v0, v1] = bits.decode(x);
            let (x0, x1) = (c(v0), c(v1));
            s.cross += x0 * x1.conj();
            s.auto[0] += x0.norm_sqr();
            s.auto[1] += x1.norm_sqr();
            if bits.at_limit(v0) || bits.at_limit(v1) {
                s.saturated += 1;
            }
        }
        s.spectra += spectra as u64;
    }
}

/// dsim's noise when none is set (its `--noise` default).
pub const DSIM_DEFAULT_NOISE: f64 = 0.05;

/// The tone offsets visited: -span..=span in 1/steps_per_channel steps (0 included).
pub fn offsets(span: f64, steps_per_channel: usize) -> Vec<f64> {
    let steps = steps_per_channel.max(1) as f64;
    let k = (span.abs() * steps).round() as i64;
    (-k..=k).map(|i| i as f64 / steps).collect()
}

/// Normalises the measured powers, fills in deviations, and judges them.
pub fn analyse(
    mut points: Vec<ResponsePoint>,
    config: ResponseConfig,
    geometry: ResponseGeometry,
) -> ResponseReport {
    let reference = points
        .iter()
        .find(|p| p.offset == 0.0 && p.power > 0.0)
        .map(|p| p.power)
        .or_else(|| points.iter().map(|p| p.power).reduce(f64::max))
        .filter(|&r| r > 0.0);
    let mut worst: Option<(f64, f64)> = None;
    let mut compared = 0;
    for p in &mut points {
        p.measured_db = reference.filter(|_| p.power > 0.0).map(|r| db(p.power / r));
        p.deviation_db = None;
        if p.theory_db >= config.floor_db {
            compared += 1;
            // A point with no power where the theory expects some is an infinite deviation.
            let dev = p.measured_db.map_or(f64::INFINITY, |m| m - p.theory_db);
            p.deviation_db = Some(dev);
            if worst.is_none_or(|(w, _)| dev.abs() > w) {
                worst = Some((dev.abs(), p.offset));
            }
        }
    }
    let max_dev = worst.map(|w| w.0);
    ResponseReport {
        output: None,
        pass: compared > 0 && max_dev.is_some_and(|d| d <= config.tolerance_db),
        max_deviation_db: max_dev,
        worst_offset: worst.map(|w| w.1),
        compared,
        config,
        geometry,
        points,
    }
}

/// The gain that puts a tone at `theory_db` near `target` counts, within [1e-6, max_gain].
pub fn gain_for(
    theory_db: f64,
    amplitude: f64,
    sample_bits: u32,
    weights_sum: f64,
    target: f64,
    max_gain: f64,
) -> f64 {
    // dsim's amplitude 1.0 is 2^(bits-1) counts.
    let full_scale = (1u64 << (sample_bits.clamp(2, 16) - 1)) as f64;
    // A real tone of amplitude a puts a/2 in the positive-frequency channel.
    let centre = amplitude * full_scale / 2.0 * weights_sum;
    let level = centre * 10f64.powf(theory_db.max(-150.0) / 20.0);
    if level <= 0.0 {
        return max_gain;
    }
    (target / level).clamp(1e-6, max_gain)
}

/// The largest gain that keeps the input noise (Gaussian `noise` of full scale, plus dither and
/// rounding, 1/6 LSB^2 together) well inside the output: about 18 counts rms per part of the
/// 8-bit output (1 of the 4-bit), so that with the tone on top a clamp is a 4-sigma event. Far
/// from the centre this, not the tone's level, limits the gain.
pub fn noise_limited_gain(noise: f64, sample_bits: u32, bits: OutputBits) -> f64 {
    let full_scale = (1u64 << (sample_bits.clamp(2, 16) - 1)) as f64;
    let sigma = ((noise * full_scale).powi(2) + 1.0 / 6.0).sqrt();
    // Unit-energy weights: channel complex rms = input rms; per part that over sqrt(2).
    scaled_level(25.0, bits) / sigma
}

/// The level in output of `bits` that stands where `level` counts stand in 8-bit output: the
/// same fraction of the clamp (7/127 of it for 4-bit output).
pub fn scaled_level(level: f64, bits: OutputBits) -> f64 {
    level * f64::from(bits.limit()) / 127.0
}

/// Runs the measurement: for each offset, set tone and gain, settle, integrate; each step's
/// point goes to `on_step` as it is measured.
pub fn measure(
    services: &Services,
    rx: &Receiver,
    acc: &CrossAccumulator,
    config: ResponseConfig,
    geometry: ResponseGeometry,
    on_step: &mut dyn FnMut(&ResponseStep),
) -> Result<ResponseReport> {
    // The PFB's own design: n channels, or n/2 for a no-discard output's n-point PFB (the same
    // response in channels).
    let pfb = geometry.band.pfb_design_channels(geometry.channels);
    let weights = design_weights(pfb, geometry.taps, geometry.filter);
    let wsum = coherent_gain(&weights);
    let (band, fs, n) = (geometry.band, geometry.adc_rate, geometry.channels);
    let offs = offsets(config.span, config.steps_per_channel);
    let mut points = Vec::with_capacity(offs.len());
    let mut gains_work = config.set_gains;
    for (i, &d) in offs.iter().enumerate() {
        let frequency = band.frequency(config.channel as f64 + d, fs, n);
        let applied = services.dsim.set_tone(
            Tone {
                frequency,
                amplitude: config.amplitude,
            },
            config.noise,
        )?;
        // dsim rounds the frequency to whole cycles per buffer: use what it generates.
        let frequency = applied.frequency.unwrap_or(frequency);
        let d = band.channel(frequency, fs, n) - config.channel as f64;
        let theory_db = response_db(&weights, pfb, d);
        let mut gain = 1.0;
        if gains_work {
            gain = gain_for(
                theory_db,
                config.amplitude,
                geometry.sample_bits,
                wsum,
                config.target,
                config.max_gain,
            )
            .min(noise_limited_gain(
                config.noise.unwrap_or(DSIM_DEFAULT_NOISE),
                geometry.sample_bits,
                geometry.output_bits,
            ));
            if let Err(e) = services.engine.set_gain(gain) {
                tracing::warn!(
                    "setting the engine gain failed ({e:#}); measuring at its own gain, so the \
                     {} output limits the range",
                    geometry.output_bits
                );
                gains_work = false;
                gain = 1.0;
            }
        }
        signals::sleep(config.settle)?;
        // Only heaps made after the change: from the signal's first timestamp, and later than
        // anything received before the settle time ended (the gain has no timestamp).
        let snap = rx.snapshot();
        let min_ts = snap
            .substreams
            .iter()
            .filter_map(|s| Some(s.newest_timestamp? + s.step?))
            .chain(Some(applied.from_timestamp))
            .max()
            .unwrap_or(0);
        acc.arm(min_ts);
        // The integration runs from the first heap after the change; a system with a long
        // pipeline (low rate, big frames) takes a while to deliver it.
        let patience = (config.settle + config.integration) * 4 + Duration::from_secs(10);
        let waited = Instant::now();
        while acc.spectra() == 0 {
            if waited.elapsed() > patience {
                acc.take();
                bail!(
                    "no output for channel {} from timestamp {min_ts} on arrived within {patience:?} \
                     (is the engine sending, and keeping up?)",
                    config.channel
                );
            }
            signals::sleep(Duration::from_millis(20))?;
        }
        signals::sleep(config.integration)?;
        let c = acc.take();
        let n = c.spectra as f64;
        let power = c.cross.norm() / n / (gain * gain);
        let coherence = if c.auto[0] > 0.0 && c.auto[1] > 0.0 {
            c.cross.norm() / (c.auto[0] * c.auto[1]).sqrt()
        } else {
            0.0
        };
        let p = ResponsePoint {
            offset: d,
            frequency,
            gain,
            power,
            measured_db: None,
            theory_db,
            deviation_db: None,
            spectra: c.spectra,
            saturated_fraction: c.saturated as f64 / n,
            coherence,
        };
        let step = ResponseStep {
            step: i + 1,
            steps: offs.len(),
            point: p,
        };
        on_step(&step);
        let p = step.point;
        points.push(p);
    }
    Ok(analyse(points, config, geometry))
}

/// The theoretical curve for plotting: `n` points over [lo, hi].
pub fn theory_curve(geometry: &ResponseGeometry, lo: f64, hi: f64, n: usize) -> Vec<(f64, f64)> {
    let pfb = geometry.band.pfb_design_channels(geometry.channels);
    let w = design_weights(pfb, geometry.taps, geometry.filter);
    let n = n.max(2);
    (0..n)
        .map(|i| {
            let x = lo + (hi - lo) * i as f64 / (n - 1) as f64;
            (x, response_db(&w, pfb, x))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustfft::FftPlanner;

    #[test]
    fn weights_have_unit_energy_and_symmetry() {
        let w = pfb_weights(64, 4, 1.0);
        assert_eq!(w.len(), 512);
        let e: f64 = w.iter().map(|x| x * x).sum();
        assert!((e - 1.0).abs() < 1e-12);
        for i in 0..w.len() {
            assert!((w[i] - w[w.len() - 1 - i]).abs() < 1e-12);
        }
    }

    #[test]
    fn a_rectangular_single_tap_design_without_sinc_is_flat() {
        let flat = FilterDesign {
            rect: true,
            w_cutoff: 0.0,
        };
        let w = design_weights(8, 1, flat);
        assert!(w.iter().all(|&x| (x - 0.25).abs() < 1e-15), "{w:?}");
        // The FFT's own channel: sin(pi/2) / (16 sin(pi/32)) is -3.91 dB at its edge, a zero one
        // channel out.
        assert!((response_db(&w, 8, 0.5) + 3.91).abs() < 0.01);
        assert!(response_db(&w, 8, 1.0) < -200.0);
    }

    #[test]
    fn response_matches_a_zero_padded_fft() {
        let (n, taps) = (64, 8);
        let w = pfb_weights(n, taps, 1.0);
        let pad = 4;
        let len = w.len() * pad;
        let mut buf: Vec<rustfft::num_complex::Complex<f64>> = (0..len)
            .map(|i| rustfft::num_complex::Complex::new(*w.get(i).unwrap_or(&0.0), 0.0))
            .collect();
        FftPlanner::new().plan_fft_forward(len).process(&mut buf);
        // FFT bin b is frequency b / len cycles per sample = b 2n / len channels.
        for b in 0..(len / 16) {
            let offset = b as f64 * 2.0 * n as f64 / len as f64;
            let a = amplitude(&w, n, offset);
            assert!((a - buf[b].norm()).abs() < 1e-9 * buf[0].norm(), "bin {b}");
        }
    }

    #[test]
    fn response_shape_for_1024_channels_16_taps() {
        let w = pfb_weights(1024, 16, 1.0);
        assert!(response_db(&w, 1024, 0.0).abs() < 1e-12);
        // Flat across the channel, -6 dB at the edge, deep beyond (values from an independent
        // numpy evaluation of the same formula).
        assert!(response_db(&w, 1024, 0.25).abs() < 0.01);
        assert!((response_db(&w, 1024, 0.5) - -6.0221).abs() < 1e-3);
        assert!((response_db(&w, 1024, 0.75) - -62.1754).abs() < 1e-3);
        assert!((response_db(&w, 1024, 1.0) - -80.4485).abs() < 1e-3);
        assert!((response_db(&w, 1024, -0.75) - -62.1754).abs() < 1e-3);
        assert!((coherent_gain(&w) - 46.4629).abs() < 1e-3);
    }

    #[test]
    fn offsets_include_the_centre() {
        assert_eq!(
            offsets(1.0, 4),
            vec![-1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0]
        );
        assert_eq!(offsets(0.0, 16), vec![0.0]);
    }

    #[test]
    fn gains_aim_at_the_target() {
        let w = pfb_weights(1024, 16, 1.0);
        let s = coherent_gain(&w);
        let g0 = gain_for(0.0, 0.9, 10, s, 40.0, 100.0);
        assert!((g0 * 0.9 * 512.0 / 2.0 * s - 40.0).abs() < 1e-9);
        let g60 = gain_for(-60.0, 0.9, 10, s, 40.0, 100.0);
        assert!((g60 / g0 - 1000.0).abs() < 1e-6);
        assert_eq!(gain_for(-200.0, 0.9, 10, s, 40.0, 100.0), 100.0);
        // 0.001 of a 10-bit full scale is 0.512 counts: with dither, 0.66 rms, gain 38.
        let g = noise_limited_gain(0.001, 10, OutputBits::Eight);
        assert!((g - 25.0 / (0.512f64.powi(2) + 1.0 / 6.0).sqrt()).abs() < 1e-9);
        assert!(noise_limited_gain(0.05, 10, OutputBits::Eight) < 1.0);
        // 4-bit output: the same fraction of its clamp, 7 rather than 127.
        let g4 = noise_limited_gain(0.001, 10, OutputBits::Four);
        assert!((g4 / g - 7.0 / 127.0).abs() < 1e-12);
        assert_eq!(scaled_level(127.0, OutputBits::Four), 7.0);
        assert_eq!(scaled_level(40.0, OutputBits::Eight), 40.0);
    }

    fn cfg() -> ResponseConfig {
        ResponseConfig {
            channel: 256,
            span: 1.0,
            steps_per_channel: 4,
            integration: Duration::ZERO,
            settle: Duration::ZERO,
            amplitude: 0.9,
            noise: None,
            target: 40.0,
            max_gain: 100.0,
            floor_db: -60.0,
            tolerance_db: 0.5,
            set_gains: true,
        }
    }

    fn geometry() -> ResponseGeometry {
        ResponseGeometry {
            channels: 1024,
            taps: 16,
            sample_bits: 10,
            output_bits: OutputBits::Eight,
            adc_rate: 1712e6,
            filter: FilterDesign::default(),
            band: crate::band::Band::Wideband,
        }
    }

    fn point(offset: f64, power: f64, theory_db: f64) -> ResponsePoint {
        ResponsePoint {
            offset,
            frequency: 0.0,
            gain: 1.0,
            power,
            measured_db: None,
            theory_db,
            deviation_db: None,
            spectra: 1,
            saturated_fraction: 0.0,
            coherence: 1.0,
        }
    }

    #[test]
    fn analysis_normalises_and_judges_above_the_floor() {
        let pts = vec![
            point(-0.5, 0.25 * 1.1, -6.0206),
            point(0.0, 1.0, 0.0),
            point(0.5, 0.25, -6.0206),
            // Far below the floor: any value is fine.
            point(1.0, 0.5, -80.0),
        ];
        let r = analyse(pts, cfg(), geometry());
        assert_eq!(r.compared, 3);
        let dev = r.max_deviation_db.unwrap();
        assert!((dev - db(1.1)).abs() < 1e-3, "{dev}");
        assert_eq!(r.worst_offset, Some(-0.5));
        assert!(r.pass);
        assert!(r.points[3].deviation_db.is_none());
        assert!((r.points[2].measured_db.unwrap() + 6.0206).abs() < 1e-3);
        // A missing measurement above the floor fails.
        let r = analyse(
            vec![point(0.0, 1.0, 0.0), point(0.25, 0.0, -0.1)],
            cfg(),
            geometry(),
        );
        assert!(!r.pass);
    }

    #[test]
    fn cross_accumulator_sums_one_channel_when_armed() {
        // 2 substreams of 4 channels, 2 spectra per heap; measure channel 5 (substream 1, index 1).
        let acc = CrossAccumulator::new(5, 8, 2, OutputBits::Eight);
        let mut heap = vec![0u8; 4 * 2 * 4];
        // Channel index 1 in the heap: spectra (3+4i, 3+4i) and (127, 0; 0, 0).
        heap[8..12].copy_from_slice(&[3, 4, 3, 4]);
        heap[12..16].copy_from_slice(&[127, 0, 0, 0]);
        acc.heap(1, 4, 100, &heap);
        assert_eq!(acc.spectra(), 0, "not armed");
        acc.arm(100);
        acc.heap(1, 4, 99, &heap);
        acc.heap(0, 0, 200, &heap);
        assert_eq!(acc.spectra(), 0, "too early, wrong substream");
        acc.heap(1, 4, 100, &heap);
        let c = acc.take();
        assert_eq!(c.spectra, 2);
        assert_eq!(c.cross, Complex64::new(25.0, 0.0));
        assert_eq!(c.auto, [25.0 + 127.0 * 127.0, 25.0]);
        assert_eq!(c.saturated, 1);
        acc.heap(1, 4, 100, &heap);
        assert_eq!(acc.take().spectra, 2, "disarmed after take");
    }

    #[test]
    fn cross_accumulator_reads_4_bit_output() {
        // The same heap as above in 4-bit output, 2 bytes per channel and spectrum: channel index
        // 1 holds (3+4i, 3+4i) and (7, 0; 0, -7), then a negative value (-3-4i, -3-4i).
        let acc = CrossAccumulator::new(5, 8, 2, OutputBits::Four);
        let mut heap = vec![0u8; 4 * 3 * 2];
        heap[6..12].copy_from_slice(&[0x34, 0x34, 0x70, 0x09, 0xdc, 0xdc]);
        acc.arm(0);
        acc.heap(1, 4, 100, &heap);
        let c = acc.take();
        assert_eq!(c.spectra, 3);
        // (3+4i)(3-4i) twice, and 7 conj(-7i) = 49i.
        assert_eq!(c.cross, Complex64::new(50.0, 49.0));
        assert_eq!(c.auto, [50.0 + 49.0, 50.0 + 49.0]);
        assert_eq!(c.saturated, 1, "one value at the clamp of 7");
        // An 8-bit reading of the same bytes would see other spectra: not this channel's.
        let acc8 = CrossAccumulator::new(5, 8, 2, OutputBits::Eight);
        acc8.arm(0);
        acc8.heap(1, 4, 100, &heap);
        assert_ne!(acc8.take().cross, c.cross);
    }
}

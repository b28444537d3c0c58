//! The delay model (docs/signal-path.md): where each spectrum's window starts in the
//! span (coarse delay), its fine delay and fringe phase, and whether its window was fully received.
//!
//! Sign: a delay d *adds* delay, so the window of the spectrum with timestamp t0 is read from ADC
//! sample t0 - round(d fs). dsim's per-polarisation `delay` tau (its signal arrives tau early) is
//! cancelled by loading the engine with d = tau.

use super::ddc::check_mixer_word;
use super::narrowband::narrowband_delay;
use super::{bail, Result};
use crate::backend::{Channelisation, OutputKind, SpectrumDelay, POLS};

/// One polarisation's delay model, as loaded by the control interface.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DelayModel {
    /// ADC sample index at which `delay` and `phase` hold.
    pub load_time: u64,
    /// Delay in seconds at `load_time` (positive delays the signal).
    pub delay: f64,
    /// Delay rate, seconds per second.
    pub delay_rate: f64,
    /// Fringe phase in radians at `load_time`.
    pub phase: f64,
    /// Fringe phase rate, radians per second.
    pub phase_rate: f64,
}

/// A model evaluated at one spectrum's timestamp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayAt {
    /// Coarse delay in whole samples: d fs rounded, ties away from zero.
    pub coarse: i64,
    /// Residual d fs - coarse, in samples, within [-0.5, 0.5].
    pub fine: f64,
    /// Fringe phase wrapped to [-pi, pi).
    pub phase: f64,
}

/// `x` wrapped to [-pi, pi), so that it keeps its precision when narrowed to f32.
pub fn wrap_phase(x: f64) -> f64 {
    use std::f64::consts::{PI, TAU};
    (x + PI).rem_euclid(TAU) - PI
}

impl DelayModel {
    /// A constant delay (seconds) and phase (radians).
    pub fn fixed(delay: f64, phase: f64) -> Self {
        Self {
            delay,
            phase,
            ..Self::default()
        }
    }

    /// Checks that every field is a finite number.
    pub fn validate(&self) -> Result<()> {
        let fields = [self.delay, self.delay_rate, self.phase, self.phase_rate];
        if fields.iter().any(|v| !v.is_finite()) {
            bail!("delay model has a field that is not a finite number: {self:?}");
        }
        Ok(())
    }

    /// Evaluates the model at ADC sample `t` (the spectrum's timestamp) for sample rate `fs` Hz.
    /// Fails when the delay is not a finite number of samples that fits in an `i64`.
    pub fn at(&self, t: i128, fs: f64) -> Result<DelayAt> {
        let dt = (t - self.load_time as i128) as f64 / fs;
        let d_samples = (self.delay + self.delay_rate * dt) * fs;
        let phase = self.phase + self.phase_rate * dt;
        if !(d_samples.is_finite() && d_samples.abs() < 2f64.powi(53) && phase.is_finite()) {
            bail!("delay model {self:?} gives {d_samples} samples and {phase} rad at sample {t}, fs {fs} Hz");
        }
        let coarse = d_samples.round(); // ties away from zero
        Ok(DelayAt {
            coarse: coarse as i64,
            fine: d_samples - coarse,
            phase: wrap_phase(phase),
        })
    }
}

/// Where one spectrum of one polarisation was placed, for the engine's validity bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The coarse delay the model asked for, in samples.
    pub coarse: i64,
    /// False when that coarse delay puts the window outside the span: the offset was clamped to
    /// the span and the spectrum must be treated as invalid.
    pub in_span: bool,
}

/// Where the frames sit relative to the ADC stream and the delay models.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FramePlan {
    /// Output spectra lag the chunk by this many samples: spectrum m of the frame whose chunk starts
    /// at T has timestamp T - lag + m 2n. A multiple of 2n, from (T-1) 2n to the overlap.
    pub lag: usize,
    /// ADC sample rate, Hz.
    pub fs: f64,
}

impl FramePlan {
    pub fn validate(&self, g: &Channelisation) -> Result<()> {
        let step = g.step();
        if !self.lag.is_multiple_of(step) {
            bail!(
                "lag ({} samples) must be a multiple of 2n = {step}",
                self.lag
            );
        }
        let least = g.window().saturating_sub(step);
        if self.lag < least || self.lag > g.input.overlap_samples {
            bail!(
                "lag ({} samples) must be from the window less one step = {} to the overlap ({}) so that an undelayed window lies in the span",
                self.lag,
                least,
                g.input.overlap_samples
            );
        }
        if !(self.fs.is_finite() && self.fs > 0.0) {
            bail!("sample rate must be a positive number, not {}", self.fs);
        }
        Ok(())
    }

    /// Timestamp (ADC sample of the first window sample before delay) of spectrum `m` of the frame
    /// whose chunk starts at `timestamp`. Negative only before the stream has run for `lag` samples.
    pub fn spectrum_timestamp(&self, g: &Channelisation, timestamp: u64, m: usize) -> i128 {
        timestamp as i128 - self.lag as i128 + (m * g.step()) as i128
    }
}

/// Fills `delays[pol][m]` for every spectrum m of the frame whose chunk starts at ADC sample
/// `timestamp`, and `placements[pol][m]` with the coarse delay and whether it fitted in the span.
/// Returns how many (spectrum, pol) pairs did not fit (their offsets are clamped to the span).
/// For a wideband output; a narrowband one needs its mixer word ([`fill_output_delays`]).
pub fn fill_delays(
    g: &Channelisation,
    plan: &FramePlan,
    timestamp: u64,
    models: &[DelayModel; POLS],
    delays: &mut [Vec<SpectrumDelay>; POLS],
    placements: &mut [Vec<Placement>; POLS],
) -> Result<usize> {
    fill_output_delays(g, plan, timestamp, models, 0, delays, placements)
}

/// [`fill_delays`] for any output. A wideband output's spectrum gets the model's value at its
/// timestamp as it is: offset nominal - coarse, fine, phase. A narrowband output's
/// is mapped by [`narrowband_delay`] with decimation D and the frame's mixer word `mixer`
/// (ignored for wideband): offset nominal - k D (on the DDC's grid, as the nominal offset is),
/// fine r' in subsampled samples, and the phase with the mixer's turn over the delay folded in.
/// An offset outside the span is clamped to it (for narrowband, to the grid's last point within
/// it) and the spectrum counted and placed `in_span: false`.
pub fn fill_output_delays(
    g: &Channelisation,
    plan: &FramePlan,
    timestamp: u64,
    models: &[DelayModel; POLS],
    mixer: u32,
    delays: &mut [Vec<SpectrumDelay>; POLS],
    placements: &mut [Vec<Placement>; POLS],
) -> Result<usize> {
    plan.validate(g)?;
    let spectra = g.spectra_per_frame();
    for pol in 0..POLS {
        models[pol].validate()?;
        if delays[pol].len() != spectra || placements[pol].len() != spectra {
            bail!(
                "pol {pol}: {} delays and {} placements for a frame of {spectra} spectra",
                delays[pol].len(),
                placements[pol].len()
            );
        }
    }
    let kind = g.output.kind;
    if let OutputKind::Narrowband(d) = kind {
        check_mixer_word(mixer, d.decimation)?;
    }
    let max_offset = g.max_offset() as i128;
    let grid = g.output.subsampling() as i128;
    let highest = max_offset - max_offset.rem_euclid(grid);
    let mut outside = 0;
    for pol in 0..POLS {
        for m in 0..spectra {
            let at = models[pol].at(plan.spectrum_timestamp(g, timestamp, m), plan.fs)?;
            let nominal = (g.input.overlap_samples - plan.lag + m * g.step()) as i128;
            let (shift, fine, phase) = match kind {
                OutputKind::Wideband => (at.coarse as i128, at.fine, at.phase),
                OutputKind::Narrowband(d) => {
                    let nb = narrowband_delay(&at, d.decimation, d.subsampling(), mixer);
                    (nb.coarse as i128 * grid, nb.fine, nb.phase)
                }
            };
            let offset = nominal - shift;
            let in_span = (0..=max_offset).contains(&offset);
            outside += usize::from(!in_span);
            delays[pol][m] = SpectrumDelay {
                offset: offset.clamp(0, highest) as u32,
                fine: fine as f32,
                phase: phase as f32,
            };
            placements[pol][m] = Placement {
                coarse: at.coarse,
                in_span,
            };
        }
    }
    Ok(outside)
}

/// True when every sample of the window was received. `present[h]` says whether input heap h arrived;
/// heap h holds samples `[h heap_samples, (h+1) heap_samples)` counted from the first flagged heap.
/// The window starts at `span_start + offset` in those same units and is `window` samples long.
/// Samples outside the flagged heaps count as missing.
pub fn spectrum_valid(
    present: &[bool],
    heap_samples: usize,
    span_start: u64,
    offset: u32,
    window: usize,
) -> bool {
    if heap_samples == 0 || window == 0 {
        return false;
    }
    let start = span_start as u128 + offset as u128;
    let end = start + window as u128; // exclusive
    let first = start / heap_samples as u128;
    let last = (end - 1) / heap_samples as u128;
    if last >= present.len() as u128 {
        return false;
    }
    present[first as usize..=last as usize].iter().all(|&p| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{InputGeometry, OutputGeometry};

    fn geometry() -> Channelisation {
        Channelisation::new(
            InputGeometry {
                sample_bits: 10,
                chunk_samples: 2 * 2 * 32,
                overlap_samples: 3 * 32 + 64,
            },
            OutputGeometry {
                channels: 16,
                taps: 4,
                spectra_per_heap: 2,
                bits: 8,
                filter: Default::default(),
                dither: None,
                kind: crate::backend::OutputKind::Wideband,
            },
        )
    }

    #[test]
    fn model_evaluation() {
        let fs = 1000.0;
        let m = DelayModel {
            load_time: 5000,
            delay: 0.0123,
            delay_rate: 1e-3,
            phase: 1.0,
            phase_rate: 0.5,
        };
        // At load time: 12.3 samples.
        let a = m.at(5000, fs).unwrap();
        assert_eq!(a.coarse, 12);
        assert!((a.fine - 0.3).abs() < 1e-9);
        assert!((a.phase - 1.0).abs() < 1e-12);
        // 2 s later: 12.3 + 1e-3 * 2 * 1000 = 14.3 samples, phase 2.0.
        let b = m.at(7000, fs).unwrap();
        assert_eq!(b.coarse, 14);
        assert!((b.fine - 0.3).abs() < 1e-9);
        assert!((b.phase - 2.0).abs() < 1e-12);
        // Before load time works too: 1 s earlier, 11.3 samples, phase 0.5.
        let c = m.at(4000, fs).unwrap();
        assert_eq!(c.coarse, 11);
        assert!((c.phase - 0.5).abs() < 1e-12);
        // Ties go away from zero.
        assert_eq!(
            DelayModel::fixed(2.5 / 1024.0, 0.0)
                .at(0, 1024.0)
                .unwrap()
                .coarse,
            3
        );
        assert_eq!(
            DelayModel::fixed(-2.5 / 1024.0, 0.0)
                .at(0, 1024.0)
                .unwrap()
                .coarse,
            -3
        );
        let neg = DelayModel::fixed(-0.0024, 0.0).at(0, 1000.0).unwrap();
        assert_eq!(neg.coarse, -2);
        assert!((neg.fine + 0.4).abs() < 1e-9);
        // Phase wraps.
        let w = DelayModel::fixed(0.0, 7.0).at(0, fs).unwrap();
        assert!((w.phase - (7.0 - std::f64::consts::TAU)).abs() < 1e-12);
        assert!(DelayModel::fixed(f64::NAN, 0.0).validate().is_err());
        assert!(DelayModel::fixed(1e300, 0.0).at(0, fs).is_err());
    }

    #[test]
    fn fill_places_windows() {
        let g = geometry();
        let plan = FramePlan {
            lag: 3 * 32 + 32,
            fs: 1000.0,
        };
        let spectra = g.spectra_per_frame();
        let mut delays = [
            vec![SpectrumDelay::default(); spectra],
            vec![SpectrumDelay::default(); spectra],
        ];
        let mut placed = [
            vec![Placement::default(); spectra],
            vec![Placement::default(); spectra],
        ];
        // Pol 0: +20.25 samples; pol 1: -7.75 samples with phase 0.5.
        let models = [
            DelayModel::fixed(0.02025, 0.0),
            DelayModel::fixed(-0.00775, 0.5),
        ];
        let outside = fill_delays(&g, &plan, 6400, &models, &mut delays, &mut placed).unwrap();
        assert_eq!(outside, 0);
        for m in 0..spectra {
            let nominal = g.input.overlap_samples - plan.lag + m * 32;
            assert_eq!(delays[0][m].offset as usize, nominal - 20);
            assert!((delays[0][m].fine - 0.25).abs() < 1e-6);
            assert_eq!(delays[1][m].offset as usize, nominal + 8);
            assert!((delays[1][m].fine - 0.25).abs() < 1e-6);
            assert!((delays[1][m].phase - 0.5).abs() < 1e-6);
            assert_eq!(
                placed[0][m],
                Placement {
                    coarse: 20,
                    in_span: true
                }
            );
            // The window of an undelayed spectrum starts at its timestamp.
            let t0 = plan.spectrum_timestamp(&g, 6400, m);
            let span_start = 6400 - g.input.overlap_samples as i128;
            assert_eq!(span_start + nominal as i128, t0);
        }
    }

    #[test]
    fn fill_flags_delays_beyond_the_span() {
        let g = geometry();
        let plan = FramePlan {
            lag: 3 * 32 + 32,
            fs: 1000.0,
        };
        let s = g.spectra_per_frame();
        let mut delays = [
            vec![SpectrumDelay::default(); s],
            vec![SpectrumDelay::default(); s],
        ];
        let mut placed = [vec![Placement::default(); s], vec![Placement::default(); s]];
        // Positive room is overlap - lag = 32 samples; negative room ends at the last spectrum.
        let models = [
            DelayModel::fixed(0.033, 0.0),
            DelayModel::fixed(-0.033, 0.0),
        ];
        let outside = fill_delays(&g, &plan, 6400, &models, &mut delays, &mut placed).unwrap();
        assert!(outside > 0);
        assert!(delays
            .iter()
            .flatten()
            .all(|d| d.offset as usize <= g.max_offset()));
        assert!(!placed[0][0].in_span && placed[0][0].coarse == 33);
        assert!(!placed[1][s - 1].in_span);
        // Bad plans and buffers are errors, not panics.
        assert!(fill_delays(
            &g,
            &FramePlan { lag: 33, fs: 1.0 },
            0,
            &models,
            &mut delays,
            &mut placed
        )
        .is_err());
        assert!(fill_delays(
            &g,
            &FramePlan {
                lag: 3 * 32 + 64 + 32,
                fs: 1.0
            },
            0,
            &models,
            &mut delays,
            &mut placed
        )
        .is_err());
        assert!(fill_delays(
            &g,
            &FramePlan { lag: 128, fs: 0.0 },
            0,
            &models,
            &mut delays,
            &mut placed
        )
        .is_err());
        let mut short = [
            vec![SpectrumDelay::default(); 1],
            vec![SpectrumDelay::default(); s],
        ];
        assert!(fill_delays(&g, &plan, 0, &models, &mut short, &mut placed).is_err());
    }

    #[test]
    fn validity() {
        let present = [true, true, false, true, true];
        // Heaps of 10 samples; window of 15.
        assert!(spectrum_valid(&present, 10, 0, 0, 15));
        assert!(spectrum_valid(&present, 10, 0, 5, 15)); // 5..20
        assert!(!spectrum_valid(&present, 10, 0, 6, 15)); // 6..21 touches heap 2
        assert!(!spectrum_valid(&present, 10, 20, 9, 1)); // sample 29, heap 2
        assert!(spectrum_valid(&present, 10, 20, 10, 20)); // 30..50
        assert!(!spectrum_valid(&present, 10, 20, 11, 20)); // 31..51 runs past the flags
        assert!(!spectrum_valid(&present, 0, 0, 0, 1));
        assert!(!spectrum_valid(
            &present,
            10,
            u64::MAX,
            u32::MAX,
            usize::MAX
        ));
    }
}

//! The test bench every check runs on: dsim and the engine under control, the receiver on the
//! engine's output with the [`Spectra`] sink, the geometry, and the few moves every check makes
//! (set a signal and learn from which spectrum it holds, set gains or delays, integrate a window
//! of spectra, trace one).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fgpu_api::dsim::{Component, PolSignal, PolsRequest, SignalChange, SignalRequest};
use fgpu_api::engine::{DelayRequest, Gain, GainsRequest, PolDelay};
use num_complex::Complex64;

use super::spectra::{Integration, Spectra, TracePoint};
use crate::receive::Receiver;
use crate::response::CrossAccumulator;
use crate::services::Services;
use crate::signals;

/// What every check knows of the system, fixed at the start.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub channels: usize,
    pub taps: usize,
    pub spectra_per_heap: usize,
    /// ADC samples per second per polarisation.
    pub adc_rate: f64,
    pub sample_bits: u32,
    /// The engine's --max-delay, in samples.
    pub max_delay_samples: f64,
    /// New samples per polarisation per engine frame.
    pub chunk_samples: usize,
    /// The engine's PFB filter design.
    pub filter: crate::record::FilterDesign,
    /// The engine's output format.
    pub output_bits: crate::feng_raw::OutputBits,
    /// The frequencies the output's channels cover.
    pub band: crate::band::Band,
}

impl Geometry {
    /// ADC samples between spectra: 2n (narrowband: 2nD).
    pub fn step(&self) -> u64 {
        self.band.step_samples(self.channels)
    }
    /// ADC samples one spectrum's window reads: 2n taps (narrowband: (2nT - 1) D + L).
    pub fn window(&self) -> u64 {
        self.band.window_samples(self.channels, self.taps)
    }
    /// ADC samples an output heap's spectra read from its timestamp on (zero delay).
    pub fn heap_span(&self) -> u64 {
        (self.spectra_per_heap as u64 - 1) * self.step() + self.window()
    }
    /// The delay (ADC samples) that turns channel c + 1 by `slope` radians more than channel c:
    /// a delay tau turns a sky frequency f by 2 pi f tau / fs, channels are a width apart.
    pub fn delay_of_slope(&self, slope: f64) -> f64 {
        slope * self.adc_rate
            / (std::f64::consts::TAU * self.band.channel_width(self.adc_rate, self.channels))
    }
    /// The channels from 1 on whose centres lie below `fraction` of the Nyquist frequency.
    pub fn channels_below(&self, fraction: f64) -> Vec<usize> {
        let pass = self.pass_channels();
        (1..self.channels)
            .filter(|&c| pass.contains(&c))
            .filter(|&c| self.frequency(c as f64) < fraction * self.adc_rate / 2.0)
            .collect()
    }
    /// The channels in the output's pass band: every one but a no-discard output's roll-off.
    pub fn pass_channels(&self) -> std::ops::RangeInclusive<usize> {
        self.band.pass_channels(self.channels)
    }
    /// The frequency of channel `c`'s centre (fractional channels allowed), Hz.
    pub fn frequency(&self, c: f64) -> f64 {
        self.band.frequency(c, self.adc_rate, self.channels)
    }
    /// Seconds of ADC time a number of spectra covers.
    pub fn seconds(&self, spectra: u64) -> f64 {
        spectra as f64 * self.step() as f64 / self.adc_rate
    }
    /// The gain that puts input noise of `rms` (fraction of full scale) at `counts` rms in a
    /// channel: a narrowband channel holds 1/S of a wideband channel's noise power (S = D, or
    /// 2D without discard, whose PFB window is half as long), so sqrt(S) times wideband's
    /// (docs/signal-path.md, "Levels").
    pub fn noise_gain(&self, counts: f64, rms: f64) -> f64 {
        counts / (rms * self.full_scale()) * (self.band.subsampling() as f64).sqrt()
    }
    /// Full scale of the input, in counts.
    pub fn full_scale(&self) -> f64 {
        (1u64 << (self.sample_bits - 1)) as f64
    }
}

/// A window of spectra the output moved past with fewer than half of them received: heaps were
/// lost on the way (a stalled host), and the window cannot be judged.
#[derive(Debug, thiserror::Error)]
#[error("the engine's output moved past spectra {from}..{to} with only {got} of {want} of them received: heaps were lost")]
pub struct LostWindow {
    pub from: u64,
    pub to: u64,
    pub got: u64,
    pub want: u64,
}

pub struct Bench {
    pub services: Services,
    pub rx: Receiver,
    pub spectra: Arc<Spectra>,
    /// The `response` measurement's accumulator (one channel), for the shape check.
    pub response: Arc<CrossAccumulator>,
    pub geometry: Geometry,
}

/// A signal's start: the first timestamp that carries it, as dsim answered.
pub type Timestamp = u64;

impl Bench {
    /// Sets each polarisation's signal (dither on, seed kept) and returns the first timestamp of
    /// the first spectrum whose whole window (at any delay the engine allows) has it.
    pub fn set_signal(&self, pol0: Vec<Component>, pol1: Vec<Component>) -> Result<Timestamp> {
        self.set_signal_delayed(pol0, pol1, [0.0, 0.0])
    }

    /// As [`set_signal`](Self::set_signal), each polarisation delayed by dsim (samples).
    pub fn set_signal_delayed(
        &self,
        pol0: Vec<Component>,
        pol1: Vec<Component>,
        delays: [f64; 2],
    ) -> Result<Timestamp> {
        let change = self.signal_change(pol0, pol1, delays)?;
        Ok(self.clear_of(change.from_timestamp))
    }

    /// Sets each polarisation's signal and returns dsim's reply: `from_timestamp` is the first
    /// sample that carries it.
    pub fn signal_change(
        &self,
        pol0: Vec<Component>,
        pol1: Vec<Component>,
        delays: [f64; 2],
    ) -> Result<SignalChange> {
        let pol = |components, delay| PolSignal {
            components,
            delay,
            dither: true,
        };
        let req = SignalRequest::Pols(PolsRequest {
            pol0: Some(pol(pol0, delays[0])),
            pol1: Some(pol(pol1, delays[1])),
            seed: None,
        });
        self.services.dsim.set_signal(&req)
    }

    /// The first spectrum timestamp at or after which every window starts at or after `t` (at
    /// any coarse delay up to --max-delay).
    pub fn clear_of(&self, t: u64) -> u64 {
        let g = &self.geometry;
        let t = t + g.max_delay_samples.ceil() as u64 + g.step();
        t.div_ceil(g.step()) * g.step()
    }

    /// The first spectrum timestamp no engine frame computed before now can hold: a command
    /// sent now (gains) is in force from there on.
    pub fn after_now(&self) -> Result<Timestamp> {
        // The engine's newest input, or dsim's newest timestamp where that is later: the engine
        // cannot hold what dsim has not sent, and a front whose word lags (katcp's rx.timestamp
        // sensor, sampled apart from the data) would otherwise put "now" in the past.
        let engine = self.newest_input()?;
        let dsim = self.services.dsim.status().map_or(0, |d| d.timestamp);
        let newest = engine.max(dsim);
        // Spectra of a frame starting after `newest` have timestamps from newest - lag on; a
        // frame holding `newest` was not computed yet either, so two chunks on is safe. An engine
        // that says where its requests hold (katcp's steady state) is taken at its word too.
        let safe = newest + 2 * self.geometry.chunk_samples as u64;
        let steady = self.services.engine.steady_state()?.unwrap_or(0);
        Ok(self.clear_of(safe.max(steady)))
    }

    /// Sets the output's gains and returns the first timestamp they surely hold for.
    pub fn set_gains(&self, gains: &GainsRequest) -> Result<Timestamp> {
        self.services.engine.set_gains(gains)?;
        self.after_now()
    }

    /// The engine's newest input timestamp.
    pub fn newest_input(&self) -> Result<u64> {
        self.services.engine.newest_input()
    }

    /// Waits until the engine has received input up to timestamp `t`.
    pub fn wait_input(&self, t: u64) -> Result<()> {
        let g = &self.geometry;
        let ahead = t.saturating_sub(self.newest_input()?);
        let limit = Duration::from_secs_f64(3.0 * ahead as f64 / g.adc_rate + 30.0);
        let start = Instant::now();
        while self.newest_input()? < t {
            if start.elapsed() > limit {
                bail!("the engine's input did not reach timestamp {t} within {limit:?}: is dsim sending?");
            }
            signals::sleep(Duration::from_millis(50)).map_err(|_| anyhow!("interrupted"))?;
        }
        Ok(())
    }

    /// Waits until the engine has computed every frame holding timestamp `t` (its counters then
    /// cover everything before `t`). Where the engine says how far it has computed (HTTP's
    /// status), by its word; where it does not (katcp), once the harness has received output
    /// heaps two chunks past `t` in every substream: an engine computes its frames in order, and
    /// counts a frame's values where it computes or sends it, before the heaps arrive here.
    pub fn wait_computed(&self, t: u64) -> Result<()> {
        let chunk = self.geometry.chunk_samples as u64;
        self.wait_input(t + chunk)?;
        let start = Instant::now();
        loop {
            let done = match self.services.engine.counts()?.computed_through {
                Some(c) => c >= t + chunk,
                None => self.output_passed(t + 2 * chunk),
            };
            if done {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("the engine computed no frame past timestamp {t} within a minute");
            }
            signals::sleep(Duration::from_millis(50)).map_err(|_| anyhow!("interrupted"))?;
        }
    }

    /// Whether the harness has received output heaps at or past timestamp `t` in every
    /// substream.
    pub fn output_passed(&self, t: u64) -> bool {
        let snap = self.rx.snapshot();
        !snap.substreams.is_empty()
            && snap
                .substreams
                .iter()
                .all(|s| s.newest_timestamp.is_some_and(|n| n >= t))
    }

    /// Sums `spectra` spectra from timestamp `from` on.
    pub fn integrate(&self, from: Timestamp, spectra: u64) -> Result<Integration> {
        let to = from + spectra * self.geometry.step();
        self.integrate_window(from, to)
    }

    /// Sums the spectra with timestamps in `[from, to)`, waiting until all have arrived (in every
    /// substream: the sums are over the heaps all of them delivered).
    pub fn integrate_window(&self, from: Timestamp, to: Timestamp) -> Result<Integration> {
        self.spectra.arm(from, to);
        let want = (to - from) / self.geometry.step();
        self.wait(from, to, || self.spectra.spectra() >= want)?;
        let int = self.spectra.take();
        if int.left_out > 0 {
            tracing::warn!(
                "spectra {from}..{to}: {} spectra that some substreams delivered but not all were left out, so that every channel sums the same {}",
                int.left_out,
                int.spectra
            );
        }
        Ok(int)
    }

    /// Per spectrum in `[from, to)`: the cross sum weighted per channel, and channel `probe`.
    pub fn trace(
        &self,
        from: Timestamp,
        to: Timestamp,
        weights: Vec<Complex64>,
        probe: usize,
    ) -> Result<BTreeMap<u64, TracePoint>> {
        self.spectra.arm_trace(from, to, weights, probe);
        let want = (to - from) / self.geometry.step();
        self.wait(from, to, || self.spectra.spectra() >= want)?;
        Ok(self.spectra.take_trace())
    }

    /// Waits until `done`, or until the output has moved past the window in every substream
    /// (a heap lost on the way, by the harness's own socket say, leaves its substream short):
    /// then the spectra that did arrive stand if they are at least half the window's.
    fn wait(&self, from: u64, to: u64, done: impl Fn() -> bool) -> Result<()> {
        let g = &self.geometry;
        let want = (to - from) / g.step();
        let ahead = from.saturating_sub(self.newest_input().unwrap_or(0));
        let span = (to - from) + ahead + 4 * g.chunk_samples as u64;
        let limit = Duration::from_secs_f64(3.0 * span as f64 / g.adc_rate + 30.0);
        let past = to + g.spectra_per_heap as u64 * g.step();
        let start = Instant::now();
        while !done() {
            let snap = self.rx.snapshot();
            let passed = !snap.substreams.is_empty()
                && snap
                    .substreams
                    .iter()
                    .all(|s| s.newest_timestamp.is_some_and(|t| t >= past));
            if passed {
                let got = self.spectra.spectra();
                if 2 * got >= want {
                    tracing::warn!(
                        "spectra {from}..{to}: {got} of {want} arrived (heaps lost on the way); measuring with those"
                    );
                    return Ok(());
                }
                let _ = self.spectra.take();
                return Err(LostWindow {
                    from,
                    to,
                    got,
                    want,
                }
                .into());
            }
            if start.elapsed() > limit {
                let got = self.spectra.spectra();
                let _ = self.spectra.take();
                bail!(
                    "the engine's output did not bring spectra {from}..{to} within {:.0} s ({got} of {want} seen): is the stream flowing?",
                    limit.as_secs_f64()
                );
            }
            signals::sleep(Duration::from_millis(20)).map_err(|_| anyhow!("interrupted"))?;
        }
        Ok(())
    }

    /// The gain that puts a tone of `amplitude` (fraction of full scale) at the centre of a
    /// channel at `level` counts of the 8-bit output: the engine's channel value of a real tone
    /// a cos(...) is (a/2) sum(w) G in counts of the input, sum(w) for unit-energy weights.
    pub fn gain_for(&self, amplitude: f64, level: f64) -> f64 {
        let g = &self.geometry;
        let pfb = g.band.pfb_design_channels(g.channels);
        let w = crate::response::design_weights(pfb, g.taps, g.filter);
        let sum: f64 = crate::response::coherent_gain(&w);
        let counts = amplitude * g.full_scale() / 2.0 * sum;
        level / counts.max(1e-30)
    }

    /// Sets one real gain on every channel of both polarisations.
    pub fn set_gain(&self, gain: f64) -> Result<Timestamp> {
        self.set_gains(&GainsRequest::both(Gain::Real(gain)))
    }

    /// Clears the delay models of both polarisations (from the next frame).
    pub fn clear_delays(&self) -> Result<()> {
        let zero = PolDelay::default();
        self.services
            .engine
            .set_delays(&DelayRequest::both(zero, zero))
            .context("clearing the engine's delays")?;
        Ok(())
    }
}

/// A tone component.
pub fn tone(frequency: f64, amplitude: f64) -> Component {
    Component::Tone {
        frequency,
        amplitude,
        phase: 0.0,
    }
}

/// A noise component.
pub fn noise(rms: f64, seed: u64) -> Component {
    Component::Noise { rms, seed }
}

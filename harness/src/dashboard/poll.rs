//! The services as the page shows them: the engine's counters and state and dsim's state, read
//! once a second on a thread of their own, so that a slow or stopped service delays no frame.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::frame::{Counters, DsimState, ServiceState};
use super::{Config, Shared};
use crate::control::{parse_prometheus, sum_matching};
use crate::record::PolSensors;
use fgpu_api::engine::{PolInput, Status};

/// How often the services are read.
const PERIOD: Duration = Duration::from_secs(1);

/// The engine's counters, as read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct EngineCounts {
    missing_input: f64,
    skipped_output: f64,
    saturated: f64,
}

impl EngineCounts {
    /// Growth from `before`; a counter that went down (the engine restarted) counts from zero.
    fn since(&self, before: &Self) -> Self {
        let d = |a: f64, b: f64| if a < b { a } else { a - b };
        Self {
            missing_input: d(self.missing_input, before.missing_input),
            skipped_output: d(self.skipped_output, before.skipped_output),
            saturated: d(self.saturated, before.saturated),
        }
    }
}

/// The latest reading of the services.
#[derive(Clone, Debug, Default)]
pub(super) struct Polled {
    engine_first: Option<EngineCounts>,
    engine_now: Option<EngineCounts>,
    engine_backend: Option<String>,
    engine_error: Option<String>,
    /// The engine's input polarisations at the first and the latest reading of its status.
    input_first: Option<Vec<PolInput>>,
    input_now: Option<Vec<PolInput>>,
    dsim_skipped_first: Option<u64>,
    dsim_skipped_now: Option<u64>,
    pub dsim_rate: Option<f64>,
    dsim: DsimState,
}

impl Polled {
    /// Puts the services' counters, as grown since the first reading, into `c`.
    pub(super) fn fill(&self, c: &mut Counters) {
        if let (Some(first), Some(now)) = (self.engine_first, self.engine_now) {
            let d = now.since(&first);
            c.engine_missing_input = Some(d.missing_input);
            c.engine_skipped_output = Some(d.skipped_output);
            c.saturated = Some(d.saturated);
        }
        if let (Some(first), Some(now)) = (self.dsim_skipped_first, self.dsim_skipped_now) {
            c.dsim_heaps_skipped = Some(now.saturating_sub(first));
        }
        if let (Some(first), Some(now)) = (&self.input_first, &self.input_now) {
            let grown = PolSensors::between(first, now);
            let of =
                |pol: usize, f: fn(&PolSensors) -> u64| grown.iter().find(|s| s.pol == pol).map(f);
            c.full_scale_pol0 = of(0, |s| s.full_scale_samples);
            c.full_scale_pol1 = of(1, |s| s.full_scale_samples);
            c.digitiser_clip_pol0 = of(0, |s| s.digitiser_clip_samples);
            c.digitiser_clip_pol1 = of(1, |s| s.digitiser_clip_samples);
        }
    }

    /// The latest input level per polarisation (dBFS), where the engine measures it.
    pub(super) fn input_rms_dbfs(&self) -> [Option<f64>; 2] {
        [0, 1].map(|pol| {
            self.input_now
                .as_ref()?
                .iter()
                .find(|p| p.pol == pol)?
                .rms_dbfs
        })
    }

    pub(super) fn engine_state(&self, ctx: &Config) -> ServiceState {
        ServiceState {
            url: ctx.engine.as_ref().map(|e| e.url().to_string()),
            backend: self.engine_backend.clone().or(Some(ctx.backend.clone())),
            error: self.engine_error.clone(),
        }
    }

    pub(super) fn dsim_state(&self, ctx: &Config) -> DsimState {
        DsimState {
            url: ctx.dsim.as_ref().map(|d| d.url().to_string()),
            ..self.dsim.clone()
        }
    }
}

/// Reads the services once a period until the page closes.
pub(super) fn run(shared: &Shared) {
    let mut closed = shared.closed.subscribe();
    loop {
        let started = Instant::now();
        let mut p = shared
            .polled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        read_engine(shared, &mut p);
        read_dsim(shared, &mut p);
        *shared.polled.lock().unwrap_or_else(|e| e.into_inner()) = p;
        // Sleep the rest of the period, waking at once when the page closes.
        let until = started + PERIOD;
        while Instant::now() < until {
            if *closed.borrow_and_update() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
        }
        if *closed.borrow() {
            return;
        }
    }
}

fn read_engine(shared: &Shared, p: &mut Polled) {
    let Some(engine) = &shared.ctx.engine else {
        return;
    };
    let read = || -> Result<(EngineCounts, Status)> {
        let samples = parse_prometheus(&engine.metrics()?);
        let names = engine.counter_names();
        let get = |pattern: &str| sum_matching(&samples, pattern).unwrap_or(0.0);
        let counts = EngineCounts {
            missing_input: get(&names.missing_input),
            skipped_output: get(&names.skipped_output),
            saturated: get("saturated"),
        };
        Ok((counts, engine.status()?))
    };
    match read() {
        Ok((counts, status)) => {
            p.engine_first.get_or_insert(counts);
            p.engine_now = Some(counts);
            p.engine_backend = Some(status.backend);
            p.input_first.get_or_insert(status.input.pols.clone());
            p.input_now = Some(status.input.pols);
            p.engine_error = None;
        }
        Err(e) => p.engine_error = Some(format!("{e:#}")),
    }
}

fn read_dsim(shared: &Shared, p: &mut Polled) {
    let Some(dsim) = &shared.ctx.dsim else {
        return;
    };
    match dsim.status() {
        Ok(s) => {
            p.dsim_skipped_first.get_or_insert(s.heaps_skipped);
            p.dsim_skipped_now = Some(s.heaps_skipped);
            p.dsim_rate = Some(s.rate);
            let tone = s.signal.strongest_tone(0);
            // A tone moved from elsewhere (another watcher's page, as in the compose demo's two,
            // or a PUT /signal by hand): the content check follows it as it follows one set from
            // this page. Seen up to a period late, so an interval of the new tone may still be
            // judged against the old channel.
            if let (Some(old), Some(new)) = (p.dsim.tone_hz, tone.map(|t| t.frequency)) {
                if old != new {
                    let ctx = &shared.ctx;
                    let fs = ctx.adc_rate.unwrap_or(s.rate);
                    let channel = ctx.band.channel(new, fs, ctx.channels);
                    ctx.expected.retune(channel, super::server::RETUNE_REST);
                }
            }
            p.dsim = DsimState {
                url: None,
                state: Some(s.state),
                tone_hz: tone.map(|t| t.frequency),
                tone_amplitude: tone.map(|t| t.amplitude),
                error: None,
            };
        }
        Err(e) => p.dsim.error = Some(format!("{e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_grow_from_the_first_reading_and_restart_from_zero() {
        let mut p = Polled::default();
        let mut c = Counters::default();
        p.fill(&mut c);
        assert_eq!(c.engine_missing_input, None, "nothing read: nothing shown");
        p.engine_first = Some(EngineCounts {
            missing_input: 10.0,
            skipped_output: 2.0,
            saturated: 5.0,
        });
        p.engine_now = Some(EngineCounts {
            missing_input: 14.0,
            skipped_output: 2.0,
            saturated: 1.0,
        });
        p.dsim_skipped_first = Some(3);
        p.dsim_skipped_now = Some(7);
        p.fill(&mut c);
        assert_eq!(c.engine_missing_input, Some(4.0));
        assert_eq!(c.engine_skipped_output, Some(0.0));
        assert_eq!(
            c.saturated,
            Some(1.0),
            "a counter that fell restarted at zero"
        );
        assert_eq!(c.dsim_heaps_skipped, Some(4));
        assert_eq!(c.full_scale_pol0, None, "the input not read: nothing shown");
        assert_eq!(p.input_rms_dbfs(), [None, None]);
    }

    #[test]
    fn input_sensors_since_the_first_reading() {
        let pol = |p: usize, full: u64, clip: u64, rms: Option<f64>| PolInput {
            pol: p,
            full_scale_samples: full,
            digitiser_clip_samples: clip,
            rms_dbfs: rms,
            ..Default::default()
        };
        let p = Polled {
            input_first: Some(vec![pol(0, 5, 1, Some(-30.0)), pol(1, 0, 0, None)]),
            input_now: Some(vec![pol(0, 9, 4, Some(-21.3)), pol(1, 2, 0, Some(-21.4))]),
            ..Default::default()
        };
        let mut c = Counters::default();
        p.fill(&mut c);
        assert_eq!((c.full_scale_pol0, c.full_scale_pol1), (Some(4), Some(2)));
        assert_eq!(
            (c.digitiser_clip_pol0, c.digitiser_clip_pol1),
            (Some(3), Some(0))
        );
        assert_eq!(p.input_rms_dbfs(), [Some(-21.3), Some(-21.4)]);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["full_scale_pol0"], 4);
        assert_eq!(v["digitiser_clip_pol1"], 0);
    }
}

//! Each polarisation's delay model ([`DelayRequest`]: fields or katgpucbf's text
//! `"delay,delay_rate:phase,phase_rate"`), loaded at an ADC timestamp, a Unix time or at once.
//! Delays act on the input, so they belong to the engine, not to an output.

use std::sync::atomic::Ordering::Relaxed;

use fgpu_api::engine::{DelayModel as LoadedDelay, DelayRequest, Delays, PolDelay, PolDelaySpec};

use super::{ControlError, Controller};
use crate::backend::POLS;
use crate::pipeline::Command;
use crate::signal::delay::DelayModel;
use crate::stats::MAX_PENDING_DELAYS;

/// Timestamps are 48-bit (SPEAD-64-48): a load time at or past 2^48 can never come.
pub(super) const TIMESTAMP_LIMIT: u64 = 1 << 48;

/// What a delay request is checked against: the engine's settings and the newest input
/// timestamp (the load time of a request that names none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayContext {
    /// --max-delay, seconds.
    pub max_delay: f64,
    /// ADC sample rate, Hz.
    pub fs: f64,
    /// --sync-time: the Unix time of ADC timestamp 0, when given.
    pub sync_time: Option<f64>,
    /// The newest input timestamp of either polarisation.
    pub now: u64,
}

/// A checked delay request: the ADC timestamp at which the values hold, the first timestamp they
/// apply from (0: the next frame), and the model of each polarisation given (the others keep
/// theirs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayUpdate {
    pub load: u64,
    pub apply_from: u64,
    pub models: [Option<PolDelay>; POLS],
}

/// Reads katgpucbf's `"delay,delay_rate:phase,phase_rate"`.
fn parse_delay_text(pol: usize, text: &str) -> Result<PolDelay, ControlError> {
    let bad = || ControlError::DelayText {
        pol,
        text: text.to_string(),
    };
    let (d, p) = text.split_once(':').ok_or_else(bad)?;
    let (delay, delay_rate) = d.split_once(',').ok_or_else(bad)?;
    let (phase, phase_rate) = p.split_once(',').ok_or_else(bad)?;
    let num = |s: &str| s.trim().parse::<f64>().map_err(|_| bad());
    Ok(PolDelay {
        delay: num(delay)?,
        delay_rate: num(delay_rate)?,
        phase: num(phase)?,
        phase_rate: num(phase_rate)?,
    })
}

/// Checks one polarisation's model against --max-delay and the sample rate `fs`.
fn check_delay(pol: usize, d: &PolDelay, max_delay: f64, fs: f64) -> Result<(), ControlError> {
    for (what, value) in [
        ("delay", d.delay),
        ("delay_rate", d.delay_rate),
        ("phase", d.phase),
        ("phase_rate", d.phase_rate),
    ] {
        if !value.is_finite() {
            return Err(ControlError::NotFinite { pol, what, value });
        }
    }
    if d.delay.abs() > max_delay * (1.0 + 1e-12) {
        return Err(ControlError::DelayTooLarge {
            pol,
            delay: d.delay,
            max_delay,
        });
    }
    if d.delay_rate.abs() >= 1.0 {
        return Err(ControlError::DelayRateTooLarge {
            pol,
            delay_rate: d.delay_rate,
        });
    }
    // Past half a turn per sample a fringe rate means nothing; far past it the phase overflows
    // within the timestamps the model applies to, and every frame would be flagged.
    let max = std::f64::consts::PI * fs;
    if d.phase_rate.abs() > max {
        return Err(ControlError::PhaseRateTooLarge {
            pol,
            phase_rate: d.phase_rate,
            max,
        });
    }
    Ok(())
}

/// Checks a delay request (each polarisation's fields or katgpucbf's text) against `ctx`. Pure:
/// nothing is loaded.
pub fn check_delay_request(
    req: &DelayRequest,
    ctx: &DelayContext,
) -> Result<DelayUpdate, ControlError> {
    let (load, apply_from) = match (req.load_timestamp, req.load_time) {
        (Some(_), Some(_)) => return Err(ControlError::TwoLoadTimes),
        (Some(t), None) => (t, t),
        (None, Some(unix)) => {
            let Some(sync) = ctx.sync_time else {
                return Err(ControlError::LoadTimeNeedsSyncTime);
            };
            let t = (unix - sync) * ctx.fs;
            if !(t.is_finite() && t >= 0.0 && t < 2f64.powi(63)) {
                return Err(ControlError::LoadTimeNotAfterSync {
                    load_time: unix,
                    sync_time: sync,
                });
            }
            let t = t.round() as u64;
            (t, t)
        }
        // At once: the values hold now (the newest input timestamp), from the next frame on.
        (None, None) => (ctx.now, 0),
    };
    if load >= TIMESTAMP_LIMIT {
        return Err(ControlError::LoadPastTimestamps { load });
    }
    if req.pol0.is_none() && req.pol1.is_none() {
        return Err(ControlError::NoPolarisation);
    }
    let mut models: [Option<PolDelay>; POLS] = [None, None];
    for (pol, spec) in [&req.pol0, &req.pol1].into_iter().enumerate() {
        let Some(spec) = spec else { continue };
        let d = match spec {
            PolDelaySpec::Fields(d) => *d,
            PolDelaySpec::Text(t) => parse_delay_text(pol, t)?,
        };
        check_delay(pol, &d, ctx.max_delay, ctx.fs)?;
        models[pol] = Some(d);
    }
    Ok(DelayUpdate {
        load,
        apply_from,
        models,
    })
}

impl Controller {
    /// Both polarisations' delay models as loaded (zero before the first).
    pub fn delays(&self) -> Result<Delays, ControlError> {
        Ok(self.loaded()?.delays)
    }

    /// What a delay request is checked against now.
    fn delay_context(&self) -> DelayContext {
        DelayContext {
            max_delay: self.cfg.max_delay,
            fs: self.cfg.fs,
            sync_time: self.cfg.sync_time,
            now: (0..POLS)
                .map(|p| self.stats.pols[p].last_timestamp.load(Relaxed))
                .max()
                .unwrap_or(0),
        }
    }

    /// Checks a delay request, hands each polarisation's model to the pipeline and returns both
    /// models as now loaded.
    pub fn set_delays(&self, req: &DelayRequest) -> Result<Delays, ControlError> {
        let ctx = self.delay_context();
        let DelayUpdate {
            load,
            apply_from,
            models,
        } = check_delay_request(req, &ctx)?;
        // Models loaded ahead wait in the compute stage: bounded, so that a client looping on
        // future loads cannot grow the engine without limit.
        for (pol, d) in models.iter().enumerate() {
            let pending = self.stats.pending_delays[pol].load(Relaxed);
            if d.is_some() && apply_from > ctx.now && pending >= MAX_PENDING_DELAYS {
                return Err(ControlError::TooManyPending { pol, pending });
            }
        }
        let mut loaded = self.loaded()?;
        for (pol, d) in models.iter().enumerate() {
            let Some(d) = d else { continue };
            let model = DelayModel {
                load_time: load,
                delay: d.delay,
                delay_rate: d.delay_rate,
                phase: d.phase,
                phase_rate: d.phase_rate,
            };
            self.send(Command::Delay {
                pol,
                apply_from,
                model,
            })?;
            let shown = LoadedDelay {
                delay: d.delay,
                delay_rate: d.delay_rate,
                phase: d.phase,
                phase_rate: d.phase_rate,
                load_timestamp: load,
                apply_from,
            };
            match pol {
                0 => loaded.delays.pol0 = shown,
                _ => loaded.delays.pol1 = shown,
            }
            loaded.delays_loaded = true;
        }
        Ok(loaded.delays)
    }
}

#[cfg(test)]
mod tests {
    use super::super::controller::tests::controller;
    use super::*;

    /// A request as JSON, read as the shared type.
    fn req(v: serde_json::Value) -> DelayRequest {
        serde_json::from_value(v).unwrap()
    }

    fn fields(delay: f64) -> Option<PolDelaySpec> {
        Some(
            PolDelay {
                delay,
                ..Default::default()
            }
            .into(),
        )
    }

    #[test]
    fn delays_are_validated_and_forwarded() {
        let (c, rx) = controller();
        let ok = c
            .set_delays(&req(
                serde_json::json!({"pol0": {"delay": 1e-4, "phase": 0.5},
                "pol1": "2e-4,0:0.1,0", "load_timestamp": 1000}),
            ))
            .unwrap();
        assert_eq!(ok.pol1.delay, 2e-4);
        let cmds: Vec<Command> = rx.try_iter().collect();
        assert_eq!(cmds.len(), 2);
        assert!(matches!(
            cmds[1],
            Command::Delay { pol: 1, apply_from: 1000, model } if model.phase == 0.1 && model.load_time == 1000
        ));
        let text = |t: &str| Some(PolDelaySpec::Text(t.into()));
        for (r, want) in [
            (
                DelayRequest {
                    pol0: fields(1.0),
                    ..Default::default()
                },
                "pol0 delay 1 s is beyond --max-delay (0.001 s) in size.",
            ),
            (
                DelayRequest {
                    pol0: text("1,2"),
                    ..Default::default()
                },
                "pol0 delay \"1,2\" is not \"delay,delay_rate:phase,phase_rate\" (numbers).",
            ),
            (
                DelayRequest {
                    pol1: text("0,0:nan,0"),
                    ..Default::default()
                },
                "pol1 phase NaN is not a finite number.",
            ),
            (
                DelayRequest {
                    pol1: text("0,1:0,0"),
                    ..Default::default()
                },
                "pol1 delay rate 1 s/s is not below 1 in size.",
            ),
            (
                DelayRequest {
                    load_time: Some(5.0),
                    pol0: fields(0.0),
                    ..Default::default()
                },
                "load_time (Unix seconds) needs the engine's --sync-time; give load_timestamp (ADC samples) instead.",
            ),
            (
                DelayRequest {
                    load_time: Some(5.0),
                    load_timestamp: Some(5),
                    pol0: fields(0.0),
                    ..Default::default()
                },
                "give load_timestamp or load_time, not both.",
            ),
            (DelayRequest::default(), "give pol0, pol1 or both."),
            (
                DelayRequest {
                    load_timestamp: Some(1 << 48),
                    pol0: fields(0.0),
                    ..Default::default()
                },
                "the load time is ADC sample 281474976710656, past the stream's 48-bit timestamps (at most 281474976710655).",
            ),
        ] {
            let e = c.set_delays(&r).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
        assert!(rx.try_recv().is_err(), "rejected requests change nothing");
    }

    /// A load time as a Unix time needs --sync-time and must come after it.
    #[test]
    fn a_unix_load_time_counts_from_the_sync_time() {
        let ctx = DelayContext {
            max_delay: 1e-3,
            fs: 1e6,
            sync_time: Some(100.0),
            now: 0,
        };
        let at = |t: f64| DelayRequest {
            load_time: Some(t),
            pol0: fields(0.0),
            ..Default::default()
        };
        let u = check_delay_request(&at(100.5), &ctx).unwrap();
        assert_eq!((u.load, u.apply_from), (500_000, 500_000));
        let e = check_delay_request(&at(99.0), &ctx).unwrap_err();
        assert_eq!(
            e.to_string(),
            "load_time 99 is not a Unix time after the sync time 100."
        );
    }

    /// A phase rate so large that the phase overflows within the timestamps the model applies to
    /// is refused (it was accepted, and every frame after a few minutes would have been flagged
    /// "delay model unusable"); up to pi times the sample rate, the model evaluates over the whole
    /// span of 48-bit timestamps. Found while writing the engine_delays fuzz target's rules.
    #[test]
    fn a_phase_rate_beyond_nyquist_is_refused() {
        let ctx = DelayContext {
            max_delay: 1e-3,
            fs: 1712e6,
            sync_time: None,
            now: 0,
        };
        let fast = DelayRequest {
            pol0: Some(
                PolDelay {
                    phase_rate: 1e306,
                    ..Default::default()
                }
                .into(),
            ),
            ..Default::default()
        };
        let e = check_delay_request(&fast, &ctx).unwrap_err().to_string();
        assert!(e.contains("pol0 phase rate 1e306 rad/s"), "{e}");
        let edge = std::f64::consts::PI * ctx.fs;
        let at_edge = DelayRequest {
            load_timestamp: Some(5),
            pol1: Some(PolDelaySpec::Text(format!("0,0:0,{}", -edge))),
            ..Default::default()
        };
        let d = check_delay_request(&at_edge, &ctx).unwrap().models[1].unwrap();
        let model = DelayModel {
            load_time: 5,
            delay: d.delay,
            delay_rate: d.delay_rate,
            phase: d.phase,
            phase_rate: d.phase_rate,
        };
        assert!(model.at(5 + (1 << 48), ctx.fs).is_ok());
    }

    /// Models waiting for their load time are bounded per polarisation: past the bound a future
    /// load is refused and nothing is sent; loads that apply at once still go through.
    #[test]
    fn models_waiting_ahead_are_bounded() {
        let (c, rx) = controller();
        c.stats.pending_delays[1].store(MAX_PENDING_DELAYS, Relaxed);
        let ahead = |pol: usize| {
            let spec = Some(PolDelaySpec::Text("1e-4,0:0,0".into()));
            let (pol0, pol1) = if pol == 0 { (spec, None) } else { (None, spec) };
            DelayRequest {
                pol0,
                pol1,
                ..Default::default()
            }
        };
        let e = c.set_delays(&ahead(1).at(99999)).unwrap_err();
        assert!(matches!(e, ControlError::TooManyPending { pol: 1, .. }));
        assert!(e.to_string().contains("pol1 already has 256"), "{e}");
        assert!(rx.try_recv().is_err(), "a refused request changes nothing");
        // The other polarisation, and a load that applies at once, are not held back.
        c.set_delays(&ahead(0).at(99999)).unwrap();
        c.set_delays(&ahead(1)).unwrap();
        assert_eq!(rx.try_iter().count(), 2);
    }

    /// The delays read back keep today's JSON: the four values, the load timestamp and
    /// apply_from.
    #[test]
    fn loaded_delays_read_back_as_before() {
        let (c, _rx) = controller();
        c.set_delays(
            &DelayRequest {
                pol0: Some(PolDelaySpec::Text("1e-4,0:0.5,0".into())),
                ..Default::default()
            }
            .at(7),
        )
        .unwrap();
        let v = serde_json::to_value(c.delays().unwrap()).unwrap();
        assert_eq!(
            v["pol0"],
            serde_json::json!({"delay": 1e-4, "delay_rate": 0.0, "phase": 0.5,
                "phase_rate": 0.0, "load_timestamp": 7, "apply_from": 7})
        );
        assert_eq!(v["pol1"]["delay"], 0.0);
    }
}

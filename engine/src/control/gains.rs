//! Each output's complex gain per channel and polarisation ([`GainsRequest`]: one real number, one
//! `[re, im]`, or one `[re, im]` per channel). Gains belong to an output (each has its own
//! channels).

use fgpu_api::engine::{Gain, Gains, GainsRequest};
use num_complex::Complex32;

use super::{ControlError, Controller};
use crate::backend::POLS;
use crate::pipeline::Command;

/// Gains for each polarisation given (None: keeps its own), one per channel.
pub type GainUpdate = [Option<Vec<Complex32>>; POLS];

/// A gain value as the engine keeps it: finite and within float32.
fn value(pol: usize, x: f64) -> Result<f32, ControlError> {
    if !x.is_finite() || x.abs() > f32::MAX as f64 {
        return Err(ControlError::NotFinite {
            pol,
            what: "gain",
            value: x,
        });
    }
    Ok(x as f32)
}

/// One polarisation's gain, one per channel of an output of `channels` channels.
fn per_channel(pol: usize, g: &Gain, channels: usize) -> Result<Vec<Complex32>, ControlError> {
    let pair = |[re, im]: [f64; 2]| -> Result<Complex32, ControlError> {
        Ok(Complex32::new(value(pol, re)?, value(pol, im)?))
    };
    match g {
        Gain::Real(x) => Ok(vec![Complex32::new(value(pol, *x)?, 0.0); channels]),
        Gain::Complex(z) => Ok(vec![pair(*z)?; channels]),
        Gain::PerChannel(list) => {
            if list.len() != channels {
                return Err(ControlError::GainCount {
                    pol,
                    given: list.len(),
                    channels,
                });
            }
            list.iter().map(|z| pair(*z)).collect()
        }
    }
}

/// Checks a gains request for an output of `channels` channels. Pure: nothing is loaded.
pub fn check_gains(req: &GainsRequest, channels: usize) -> Result<GainUpdate, ControlError> {
    if req.pol0.is_none() && req.pol1.is_none() {
        return Err(ControlError::NoPolarisation);
    }
    let mut update: GainUpdate = [None, None];
    for (pol, g) in [&req.pol0, &req.pol1].into_iter().enumerate() {
        if let Some(g) = g {
            update[pol] = Some(per_channel(pol, g, channels)?);
        }
    }
    Ok(update)
}

/// Gains as loaded: one `[re, im]` when every channel has the same gain, else one per channel;
/// each the shortest decimal of the float32 (0.1, not 0.10000000149011612).
fn as_loaded(gains: &[Vec<Complex32>; POLS]) -> Gains {
    let num = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
    let pair = |z: &Complex32| [num(z.re), num(z.im)];
    let one = |g: &Vec<Complex32>| match g.first() {
        Some(first) if g.iter().all(|z| z == first) => Gain::Complex(pair(first)),
        _ => Gain::PerChannel(g.iter().map(pair).collect()),
    };
    Gains {
        pol0: one(&gains[0]),
        pol1: one(&gains[1]),
    }
}

impl Controller {
    /// Output `output`'s gains as loaded.
    pub fn gains(&self, output: &str) -> Result<Gains, ControlError> {
        let loaded = self.loaded()?;
        let gains = loaded.gains.get(output);
        gains
            .map(as_loaded)
            .ok_or_else(|| self.no_such_output(output))
    }

    /// Checks a gains request for `output`, hands each polarisation's gains to the pipeline and
    /// returns the output's gains as now loaded.
    pub fn set_gains(&self, output: &str, req: &GainsRequest) -> Result<Gains, ControlError> {
        // The pipeline knows outputs by their index in the configuration.
        let index = self.output_index(output)?;
        let update = check_gains(req, self.cfg.outputs[index].geometry.channels)?;
        let mut loaded = self.loaded()?;
        let Some(gains) = loaded.gains.get_mut(output) else {
            return Err(self.no_such_output(output));
        };
        for (pol, g) in update.into_iter().enumerate() {
            let Some(g) = g else { continue };
            self.send(Command::Gains {
                output: index,
                pol,
                gains: g.clone(),
            })?;
            gains[pol] = g;
        }
        Ok(as_loaded(gains))
    }
}

#[cfg(test)]
mod tests {
    use super::super::controller::tests::controller;
    use super::*;
    use fgpu_api::engine::WIDEBAND;

    #[test]
    fn gains_take_three_shapes() {
        let (c, rx) = controller();
        c.set_gains(
            WIDEBAND,
            &GainsRequest {
                pol0: Some(Gain::Real(0.5)),
                pol1: Some(Gain::Complex([1.0, -1.0])),
            },
        )
        .unwrap();
        let cmds: Vec<Command> = rx.try_iter().collect();
        assert!(
            matches!(&cmds[1], Command::Gains { pol: 1, gains, .. } if gains.len() == 16 && gains[3] == Complex32::new(1.0, -1.0))
        );
        let per = Gain::PerChannel((0..16).map(|k| [k as f64, 0.0]).collect());
        let loaded = c
            .set_gains(
                WIDEBAND,
                &GainsRequest {
                    pol0: Some(per.clone()),
                    pol1: None,
                },
            )
            .unwrap();
        assert_eq!(loaded.pol0, per);
        assert_eq!(loaded.pol1, Gain::Complex([1.0, -1.0]));
        assert_eq!(rx.try_iter().count(), 1, "pol0 alone changed");
        for (req, want) in [
            (
                GainsRequest {
                    pol0: Some(Gain::PerChannel(vec![[1.0, 0.0]])),
                    pol1: None,
                },
                "pol0 has 1 gains; give one per channel (16) or a single value.",
            ),
            (
                GainsRequest {
                    pol0: None,
                    pol1: Some(Gain::Real(1e39)),
                },
                "pol1 gain 1000000000000000000000000000000000000000 is not a finite number.",
            ),
            (GainsRequest::default(), "give pol0, pol1 or both."),
        ] {
            let e = c.set_gains(WIDEBAND, &req).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
        assert!(rx.try_recv().is_err(), "rejected requests change nothing");
    }

    /// An unknown output is refused with a sentence naming the outputs there are.
    #[test]
    fn gains_of_an_unknown_output_are_refused() {
        let (c, _rx) = controller();
        for e in [
            c.gains("nope").unwrap_err(),
            c.set_gains("nope", &GainsRequest::both(Gain::Real(1.0)))
                .unwrap_err(),
        ] {
            assert_eq!(
                e.to_string(),
                "this engine has no output named \"nope\"; its outputs are: wideband."
            );
        }
    }

    /// Loaded gains read back as the shortest decimal of each float32.
    #[test]
    fn gains_read_back_short() {
        let (c, _rx) = controller();
        let g = c
            .set_gains(WIDEBAND, &GainsRequest::both(Gain::Complex([0.1, -0.3])))
            .unwrap();
        assert_eq!(
            serde_json::to_string(&g).unwrap(),
            r#"{"pol0":[0.1,-0.3],"pol1":[0.1,-0.3]}"#
        );
    }
}

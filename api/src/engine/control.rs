//! What the engine's control takes and answers besides its status: delay models (`PUT /delays`;
//! `GET /delays` answers [`Delays`](super::Delays)), an output's gains (`PUT` and
//! `GET /outputs/NAME/gains`) and a narrowband output's centre (`PUT /outputs/NAME`; the reply is
//! the output's [`Output`](super::Output)).
//!
//! Plain data, as every front carries it: the engine checks a request against its configuration
//! (a delay within `--max-delay`, one gain per channel, a centre whose band fits) and answers
//! with one sentence when it does not.

use serde::{Deserialize, Serialize};

/// One polarisation's delay model as asked for (units as katgpucbf: s, s/s, rad, rad/s). Left
/// out, the rates and the phase are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolDelay {
    /// Delay added to the polarisation's signal, s.
    pub delay: f64,
    /// Change of the delay per second, s/s.
    #[serde(default)]
    pub delay_rate: f64,
    /// Fringe phase, rad.
    #[serde(default)]
    pub phase: f64,
    /// Change of the phase per second, rad/s.
    #[serde(default)]
    pub phase_rate: f64,
}

/// A polarisation's delay model as fields ([`PolDelay`]) or as katgpucbf's text
/// `"delay,delay_rate:phase,phase_rate"` (the engine reads the text, and says when it cannot).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PolDelaySpec {
    /// The four values as JSON fields.
    Fields(PolDelay),
    /// katgpucbf's text form, `"delay,delay_rate:phase,phase_rate"`.
    Text(String),
}

impl From<PolDelay> for PolDelaySpec {
    fn from(d: PolDelay) -> Self {
        Self::Fields(d)
    }
}

/// `PUT /delays`: the delay model of each polarisation given (one left out keeps its own), loaded
/// at an ADC timestamp, at a Unix time, or, with neither, at once (from the next frame).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayRequest {
    /// ADC sample count at which the values hold and from which they apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_timestamp: Option<u64>,
    /// The same as a Unix time in seconds (needs the engine's `--sync-time`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_time: Option<f64>,
    /// Polarisation 0's model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pol0: Option<PolDelaySpec>,
    /// Polarisation 1's model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pol1: Option<PolDelaySpec>,
}

impl DelayRequest {
    /// Both polarisations' models, loaded at once.
    pub fn both(pol0: PolDelay, pol1: PolDelay) -> Self {
        Self {
            pol0: Some(pol0.into()),
            pol1: Some(pol1.into()),
            ..Self::default()
        }
    }

    /// The same request, loaded at ADC timestamp `t` instead.
    pub fn at(self, t: u64) -> Self {
        Self {
            load_timestamp: Some(t),
            ..self
        }
    }
}

/// One polarisation's gain: one real number, one complex `[re, im]` (each for every channel), or
/// one `[re, im]` per channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Gain {
    /// One real gain for every channel.
    Real(f64),
    /// One complex gain `[re, im]` for every channel.
    Complex([f64; 2]),
    /// One complex gain `[re, im]` per channel, channel 0 first.
    PerChannel(Vec<[f64; 2]>),
}

/// `PUT /outputs/NAME/gains` (and `PUT /gains`, the wideband output's): the gain of each
/// polarisation given; one left out keeps its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GainsRequest {
    /// Polarisation 0's gain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pol0: Option<Gain>,
    /// Polarisation 1's gain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pol1: Option<Gain>,
}

impl GainsRequest {
    /// The same gain for both polarisations.
    pub fn both(gain: Gain) -> Self {
        Self {
            pol0: Some(gain.clone()),
            pol1: Some(gain),
        }
    }
}

/// An output's gains as loaded, the reply to `GET` and `PUT /outputs/NAME/gains`: per
/// polarisation [`Gain::Complex`] when every channel has the same gain, else
/// [`Gain::PerChannel`]; each value the shortest decimal of the engine's float32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gains {
    /// Polarisation 0's gains.
    pub pol0: Gain,
    /// Polarisation 1's gains.
    pub pol1: Gain,
}

impl From<Gains> for GainsRequest {
    /// The request that loads these gains again.
    fn from(g: Gains) -> Self {
        Self {
            pol0: Some(g.pol0),
            pol1: Some(g.pol1),
        }
    }
}

/// `PUT /outputs/NAME`: a narrowband output's new centre frequency, from a frame on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CentreRequest {
    /// The centre asked for, Hz (the engine quantises it to its mixer's step).
    pub centre: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each request reads and writes the JSON the engine's HTTP API documents; what is left out
    /// stays out.
    #[test]
    fn requests_have_the_documented_json() {
        let d = DelayRequest::both(
            PolDelay {
                delay: 1e-9,
                ..Default::default()
            },
            PolDelay::default(),
        )
        .at(7);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(
            v,
            json!({"load_timestamp": 7,
                "pol0": {"delay": 1e-9, "delay_rate": 0.0, "phase": 0.0, "phase_rate": 0.0},
                "pol1": {"delay": 0.0, "delay_rate": 0.0, "phase": 0.0, "phase_rate": 0.0}})
        );
        let text: DelayRequest =
            serde_json::from_value(json!({"pol1": "2e-4,0:0.1,0", "load_time": 5.5})).unwrap();
        assert_eq!(text.pol1, Some(PolDelaySpec::Text("2e-4,0:0.1,0".into())));
        assert_eq!((text.load_time, text.pol0), (Some(5.5), None));
        let fields: PolDelaySpec = serde_json::from_value(json!({"delay": 1e-4})).unwrap();
        assert_eq!(
            fields,
            PolDelaySpec::Fields(PolDelay {
                delay: 1e-4,
                ..Default::default()
            })
        );

        let g = GainsRequest {
            pol0: Some(Gain::Real(0.5)),
            pol1: None,
        };
        assert_eq!(serde_json::to_string(&g).unwrap(), r#"{"pol0":0.5}"#);
        let shapes: GainsRequest =
            serde_json::from_value(json!({"pol0": [1, -1], "pol1": [[1, 0], [0, 1]]})).unwrap();
        assert_eq!(shapes.pol0, Some(Gain::Complex([1.0, -1.0])));
        assert_eq!(
            shapes.pol1,
            Some(Gain::PerChannel(vec![[1.0, 0.0], [0.0, 1.0]]))
        );
        let loaded: Gains =
            serde_json::from_str(r#"{"pol0":[1.0,0.0],"pol1":[[0.5,0.0],[0.25,0.0]]}"#).unwrap();
        assert_eq!(GainsRequest::from(loaded.clone()).pol0, Some(loaded.pol0));

        let c: CentreRequest = serde_json::from_str(r#"{"centre": 1.2e9}"#).unwrap();
        assert_eq!(c.centre, 1.2e9);
        assert!(serde_json::from_str::<CentreRequest>(r#"{"center": 1.2e9}"#).is_err());
    }
}

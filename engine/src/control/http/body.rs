//! Request bodies: JSON read into the shared request types (`fgpu_api::engine`), with a sentence
//! naming what is wrong with the JSON itself. What the values mean is the controller's to check.

use fgpu_api::engine::{CentreRequest, DelayRequest, Gain, GainsRequest};
use serde_json::Value;

use super::super::delays::{check_delay_request, DelayContext, DelayUpdate};
use super::super::gains::{check_gains, GainUpdate};
use super::super::ControlError;

/// A body that does not read as the request it was sent as.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// `PUT /delays` with a body that is not a [`DelayRequest`].
    #[error(
        "the body is not a delay request ({0}); send e.g. {{\"pol0\": {{\"delay\": 1e-9, \"delay_rate\": 0, \"phase\": 0, \"phase_rate\": 0}}, \"load_timestamp\": 123}}."
    )]
    NotDelays(serde_json::Error),
    /// A gains body that is not JSON.
    #[error("the body is not JSON ({0}); send e.g. {{\"pol0\": [0.5, 0], \"pol1\": 0.5}}.")]
    GainsNotJson(serde_json::Error),
    /// A gains body that is not an object.
    #[error("send an object with pol0 and/or pol1.")]
    GainsNotObject,
    /// A gains body with a key other than pol0 and pol1.
    #[error("unknown field \"{0}\": give pol0 and/or pol1.")]
    GainsUnknownField(String),
    /// A polarisation's gain of none of the three shapes.
    #[error(
        "pol{pol} gain must be a number, [re, im], or a list of {channels} [re, im] pairs (one per channel)."
    )]
    GainShape {
        /// The polarisation.
        pol: usize,
        /// The output's channels.
        channels: usize,
    },
    /// A centre body that is not JSON.
    #[error("the body is not JSON ({0}); send e.g. {{\"centre\": 1.2e9}}.")]
    CentreNotJson(serde_json::Error),
    /// A centre body that is not an object.
    #[error("send an object such as {{\"centre\": 1.2e9}} (Hz).")]
    CentreNotObject,
    /// A centre body with a key other than centre.
    #[error("unknown field \"{0}\": an output's centre (Hz) is all that changes at run time.")]
    CentreUnknownField(String),
    /// A centre body without the centre.
    #[error("give centre, the narrowband output's centre frequency in Hz.")]
    NoCentre,
    /// A centre that is not a number.
    #[error("centre {0} is not a frequency in Hz.")]
    NotAFrequency(Value),
}

/// A body read and then checked: what was wrong, the JSON or what it asks for.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The JSON does not read as the request.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The controller refused what it asks for.
    #[error(transparent)]
    Control(#[from] ControlError),
}

/// Reads a `PUT /delays` body.
pub fn delays(body: &[u8]) -> Result<DelayRequest, BodyError> {
    serde_json::from_slice(body).map_err(BodyError::NotDelays)
}

/// Reads a `PUT .../gains` body for an output of `channels` channels (named in the sentence for a
/// gain of the wrong shape). Each polarisation's gain is a number, `[re, im]` (two numbers), or a
/// list of `[re, im]`; how many the list holds is the controller's to check.
pub fn gains(body: &[u8], channels: usize) -> Result<GainsRequest, BodyError> {
    let v: Value = serde_json::from_slice(body).map_err(BodyError::GainsNotJson)?;
    let Some(obj) = v.as_object() else {
        return Err(BodyError::GainsNotObject);
    };
    if let Some(k) = obj.keys().find(|k| *k != "pol0" && *k != "pol1") {
        return Err(BodyError::GainsUnknownField(k.clone()));
    }
    let gain = |pol: usize, key: &str| -> Result<Option<Gain>, BodyError> {
        obj.get(key).map(|v| gain(pol, v, channels)).transpose()
    };
    Ok(GainsRequest {
        pol0: gain(0, "pol0")?,
        pol1: gain(1, "pol1")?,
    })
}

/// One polarisation's gain: a number, `[re, im]`, or `[[re, im], ...]`.
fn gain(pol: usize, v: &Value, channels: usize) -> Result<Gain, BodyError> {
    let shape = || BodyError::GainShape { pol, channels };
    let pair = |x: &Value| -> Result<[f64; 2], BodyError> {
        match x.as_array().map(Vec::as_slice) {
            Some([re, im]) => Ok([
                re.as_f64().ok_or_else(shape)?,
                im.as_f64().ok_or_else(shape)?,
            ]),
            _ => Err(shape()),
        }
    };
    match v {
        Value::Number(_) => v.as_f64().map(Gain::Real).ok_or_else(shape),
        Value::Array(a) if a.len() == 2 && a.iter().all(Value::is_number) => {
            pair(v).map(Gain::Complex)
        }
        Value::Array(a) if a.iter().all(Value::is_array) => a
            .iter()
            .map(pair)
            .collect::<Result<_, _>>()
            .map(Gain::PerChannel),
        _ => Err(shape()),
    }
}

/// Reads a `PUT /outputs/{name}` body, `{"centre": HZ}`.
pub fn centre(body: &[u8]) -> Result<CentreRequest, BodyError> {
    let v: Value = serde_json::from_slice(body).map_err(BodyError::CentreNotJson)?;
    let Some(obj) = v.as_object() else {
        return Err(BodyError::CentreNotObject);
    };
    if let Some(k) = obj.keys().find(|k| *k != "centre") {
        return Err(BodyError::CentreUnknownField(k.clone()));
    }
    let c = obj.get("centre").ok_or(BodyError::NoCentre)?;
    match c.as_f64().filter(|f| f.is_finite()) {
        Some(centre) => Ok(CentreRequest { centre }),
        None => Err(BodyError::NotAFrequency(c.clone())),
    }
}

/// Reads and checks a `PUT /delays` body against `ctx`. Pure: nothing is loaded.
pub fn parse_delay_request(body: &[u8], ctx: &DelayContext) -> Result<DelayUpdate, RequestError> {
    Ok(check_delay_request(&delays(body)?, ctx)?)
}

/// Reads and checks a `PUT .../gains` body for an output of `channels` channels. Pure: nothing
/// is loaded.
pub fn parse_gain_request(body: &[u8], channels: usize) -> Result<GainUpdate, RequestError> {
    Ok(check_gains(&gains(body, channels)?, channels)?)
}

/// Reads a `PUT /outputs/{name}` body: the centre asked for, in Hz (finite; its range is the
/// output's to check).
pub fn parse_output_request(body: &[u8]) -> Result<f64, BodyError> {
    centre(body).map(|c| c.centre)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_bodies_name_what_is_wrong() {
        let ctx = DelayContext {
            max_delay: 1e-3,
            fs: 1e6,
            sync_time: None,
            now: 0,
        };
        let u = parse_delay_request(
            br#"{"pol0": {"delay": 1e-4, "phase": 0.5}, "pol1": "2e-4,0:0.1,0", "load_timestamp": 1000}"#,
            &ctx,
        )
        .unwrap();
        assert_eq!(u.models[1].unwrap().phase, 0.1);
        for (body, want) in [
            (&br#"{"pol0": {"delay": 1}}"#[..], "max-delay"),
            (
                br#"{"pol0": {"delay": 0, "phase": "x"}}"#,
                "not a delay request",
            ),
            (br#"{"pol0": "1,2"}"#, "delay,delay_rate"),
            (br#"{"pol2": {"delay": 0}}"#, "not a delay request"),
            (br#"{"load_time": 5, "pol0": {"delay": 0}}"#, "sync-time"),
            (br#"{}"#, "pol0, pol1"),
            (
                br#"{"pol0": {"delay": 0}, "load_timestamp": 281474976710656}"#,
                "48-bit timestamps",
            ),
            (b"nonsense", "not a delay request"),
        ] {
            let msg = parse_delay_request(body, &ctx).unwrap_err().to_string();
            assert!(msg.contains(want), "{msg:?} should mention {want:?}");
            assert!(msg.ends_with('.'), "{msg:?}");
        }
        // serde's own words, as before: the untagged form names its type.
        let msg = delays(br#"{"pol0": {"delay": 0, "phase": "x"}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("the body is not a delay request (data did not match any variant of untagged enum PolDelaySpec"),
            "{msg}"
        );
    }

    #[test]
    fn gain_bodies_name_what_is_wrong() {
        let g = parse_gain_request(br#"{"pol0": 0.5, "pol1": [1, -1]}"#, 16).unwrap();
        assert_eq!(g[1].as_ref().unwrap()[3].im, -1.0);
        let g = parse_gain_request(br#"{"pol0": []}"#, 0).unwrap();
        assert_eq!(g[0].as_ref().map(Vec::len), Some(0));
        for (body, want) in [
            (&br#"{"pol0": [[1, 0]]}"#[..], "pol0 has 1 gains; give one per channel (16) or a single value."),
            (br#"{"pol0": "x"}"#, "pol0 gain must be a number, [re, im], or a list of 16 [re, im] pairs (one per channel)."),
            (br#"{"pol1": [[1, 0], [1]]}"#, "pol1 gain must be a number"),
            (br#"{"pol1": [1, [1, 0]]}"#, "pol1 gain must be a number"),
            (br#"{"pol3": 1}"#, "unknown field \"pol3\": give pol0 and/or pol1."),
            (br#"[1]"#, "send an object with pol0 and/or pol1."),
            (br#"{}"#, "give pol0, pol1 or both."),
            (br#"{"pol0": 1e39}"#, "pol0 gain 1000000000000000000000000000000000000000 is not a finite number."),
            (b"{", "the body is not JSON (EOF while parsing an object at line 1 column 1); send e.g. {\"pol0\": [0.5, 0], \"pol1\": 0.5}."),
        ] {
            let msg = parse_gain_request(body, 16).unwrap_err().to_string();
            assert!(msg.starts_with(want), "{msg:?} should start {want:?}");
        }
    }

    #[test]
    fn centre_bodies_name_what_is_wrong() {
        assert_eq!(
            parse_output_request(br#"{"centre": 1.5e8}"#).unwrap(),
            1.5e8
        );
        assert_eq!(parse_output_request(br#"{"centre": 3}"#).unwrap(), 3.0);
        for (body, want) in [
            (&b"{centre"[..], "the body is not JSON ("),
            (b"[1]", "send an object such as {\"centre\": 1.2e9} (Hz)."),
            (b"{}", "give centre, the narrowband output's centre frequency in Hz."),
            (br#"{"center": 1e8}"#, "unknown field \"center\": an output's centre (Hz) is all that changes at run time."),
            (br#"{"centre": 1e8, "gain": 1}"#, "unknown field \"gain\""),
            (br#"{"centre": "1e8"}"#, "centre \"1e8\" is not a frequency in Hz."),
            (br#"{"centre": null}"#, "centre null is not a frequency in Hz."),
        ] {
            let e = parse_output_request(body).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e:?} should start {want:?}");
        }
    }
}

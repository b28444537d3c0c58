//! The signal in force and the forms that describe it, with dsim's rules for them.
//!
//! The signal in force is per polarisation: a [`PolSignal`] each (components, delay, dither) plus
//! the seed of the dither and the random faults ([`Signal`]). Two forms describe it:
//!
//! - the per-polarisation form ([`PolsRequest`], `--signal`, PUT /signal naming `pol0`/`pol1`):
//!   each polarisation given replaces that polarisation's signal;
//! - the common form ([`SignalSpec`], and [`SignalUpdate`] to change it: today's flags and PUT
//!   bodies): tones common to both polarisations, noise independent per polarisation, a delay per
//!   polarisation. It converts with [`Signal::from_common`]: the tones become tone components of
//!   both polarisations, the noise a noise component per polarisation with a seed derived from the
//!   signal's seed and the polarisation (so the two are independent), `delays[p]` pol p's delay.
//!
//! A third form is katgpucbf's signal language ([`SignalsRequest`], `--signals`, PUT /signal
//! naming `signals`, katcp `?signals`): its spec is evaluated on its own
//! ([`crate::signal_lang`]), and while it is in force the polarisations hold no components.
//!
//! A PUT body is told apart by its keys ([`parse_request`]), so that a mistake in any form is
//! reported as a mistake in that form.

use std::sync::Arc;

use fgpu_api::dsim::SignalRequest;
pub use fgpu_api::dsim::{
    Component, PolSignal, PolSignalStatus, PolsRequest, SignalSpec, SignalStatus, SignalUpdate,
    SignalsRequest, SignalsStatus, Tone,
};
use serde::de::DeserializeOwned;

use crate::signal_lang::{eval, LangError, LangSignal, Program};

use crate::config::{ensure, BadRequest};
use crate::signal::mix;

/// Largest |delay| accepted, in samples: far beyond any geometric delay, small enough that the
/// phase arithmetic keeps full precision.
pub const MAX_DELAY_SAMPLES: f64 = 1e9;
/// Most tones in a common-form signal (each costs a little generation time per sample).
pub const MAX_TONES: usize = 64;
/// Most components in one polarisation's signal.
pub const MAX_COMPONENTS: usize = 64;
/// Most tones in one comb.
pub const MAX_COMB: usize = 4096;

/// The signal in force: one [`PolSignal`] per polarisation, and the seed of the dither (and of
/// the random faults); or a spec in katgpucbf's language, which then replaces the polarisations'
/// components.
#[derive(Clone, Debug, PartialEq)]
pub struct Signal {
    pub pols: [PolSignal; 2],
    pub seed: u64,
    pub lang: Option<Arc<LangSignal>>,
}

/// The seed of polarisation `pol`'s noise when the signal is given in the common form: derived
/// from the signal's seed, different per polarisation, so that the two noises are independent.
/// Kept below 2^53, so that it survives a JSON reader that reads numbers as doubles (the status
/// shows it, and a client may send it back).
pub fn common_noise_seed(seed: u64, pol: usize) -> u64 {
    mix(mix(seed ^ 0x636f_6d6d_6f6e_0000).wrapping_add(pol as u64)) & ((1 << 53) - 1)
}

impl Signal {
    /// The per-polarisation signal a common-form signal describes: its tones (phase 0) in both
    /// polarisations, then its noise (left out when 0) with a seed of each polarisation's own
    /// ([`common_noise_seed`]); `delays[p]` and the dither per polarisation; the same seed.
    pub fn from_common(spec: &SignalSpec) -> Self {
        let pol = |p: usize| {
            let mut components: Vec<Component> = spec
                .tones
                .iter()
                .map(|t| Component::Tone {
                    frequency: t.frequency,
                    amplitude: t.amplitude,
                    phase: 0.0,
                })
                .collect();
            if spec.noise != 0.0 {
                components.push(Component::Noise {
                    rms: spec.noise,
                    seed: common_noise_seed(spec.seed, p),
                });
            }
            PolSignal {
                components,
                delay: spec.delays[p],
                dither: spec.dither,
            }
        };
        Self {
            pols: [pol(0), pol(1)],
            seed: spec.seed,
            lang: None,
        }
    }

    /// A spec in katgpucbf's language in force with this signal's seed (its dither seed).
    pub fn with_lang(&self, lang: LangSignal) -> Self {
        let silent = PolSignal {
            components: Vec::new(),
            delay: 0.0,
            dither: true,
        };
        Self {
            pols: [silent.clone(), silent],
            seed: self.seed,
            lang: Some(Arc::new(lang)),
        }
    }

    /// This signal with the polarisations (and seed) a per-polarisation request gives replaced
    /// (a spec in katgpucbf's language in force is dropped: the other polarisation is silent).
    pub fn with(&self, req: &PolsRequest) -> Self {
        let mut s = self.clone();
        s.lang = None;
        for (p, given) in [&req.pol0, &req.pol1].into_iter().enumerate() {
            if let Some(given) = given {
                s.pols[p] = given.clone();
            }
        }
        if let Some(seed) = req.seed {
            s.seed = seed;
        }
        s
    }

    /// The status of this signal, with each polarisation's tone frequencies as generated.
    pub fn status(&self, tone_frequencies: [Vec<f64>; 2], from_heap: u64) -> SignalStatus {
        let [f0, f1] = tone_frequencies;
        SignalStatus {
            pols: self
                .pols
                .iter()
                .zip([f0, f1])
                .map(|(signal, tone_frequencies)| PolSignalStatus {
                    signal: signal.clone(),
                    tone_frequencies,
                })
                .collect(),
            seed: self.seed,
            from_heap,
            signals: None,
        }
    }

    /// The status of this signal with `max_period`, the buffer, for a spec in katgpucbf's
    /// language.
    pub fn status_with(
        &self,
        tone_frequencies: [Vec<f64>; 2],
        from_heap: u64,
        max_period: u64,
    ) -> SignalStatus {
        let mut st = self.status(tone_frequencies, from_heap);
        st.signals = self.lang.as_ref().map(|l| SignalsStatus {
            signals_orig: l.program.source.clone(),
            signals: l.program.canonical(),
            period: l.period,
            max_period,
        });
        st
    }
}

/// Reads a spec in katgpucbf's language for both polarisations, with its period checked against
/// the buffer (`max_period` samples) and its cost against `rate`. The error is one sentence.
pub fn read_signals(
    req: &SignalsRequest,
    max_period: u64,
    rate: f64,
) -> Result<LangSignal, LangError> {
    let program = Program::parse_for(&req.signals, 2)?;
    let period = req.period.unwrap_or(max_period);
    if period == 0 || !max_period.is_multiple_of(period) {
        return Err(LangError(format!(
            "period {period} does not divide the buffer of {max_period} samples (max-period)."
        )));
    }
    if let Some(e) = program
        .outputs
        .iter()
        .find_map(|e| eval::too_costly(e, period, rate))
    {
        return Err(LangError(e));
    }
    Ok(LangSignal { program, period })
}

/// dsim's rules for the signal types it shares through [`fgpu_api::dsim`].
pub trait SignalRules {
    /// Checks the signal against the sample rate it will be generated for.
    fn validate(&self, rate: f64) -> Result<(), BadRequest>;
}

fn check_delay(delay: f64, what: &str) -> Result<(), BadRequest> {
    ensure(
        delay.is_finite() && delay.abs() <= MAX_DELAY_SAMPLES,
        || {
            format!(
            "{what} is {delay} samples; it must be finite and at most {MAX_DELAY_SAMPLES:e} in size."
        )
        },
    )
}

impl SignalRules for SignalSpec {
    fn validate(&self, rate: f64) -> Result<(), BadRequest> {
        ensure(self.tones.len() <= MAX_TONES, || {
            format!(
                "{} tones were given; at most {MAX_TONES} are allowed.",
                self.tones.len()
            )
        })?;
        for (i, t) in self.tones.iter().enumerate() {
            ensure(in_band(t.frequency, rate), || {
                format!(
                    "tone {i} has frequency {} Hz, outside 0 to {} Hz (half the sample rate).",
                    t.frequency,
                    rate / 2.0
                )
            })?;
            ensure(t.amplitude.is_finite() && t.amplitude >= 0.0, || {
                format!(
                    "tone {i} has amplitude {}; it must be a finite fraction of full scale, 0 or more.",
                    t.amplitude
                )
            })?;
        }
        ensure(self.noise.is_finite() && self.noise >= 0.0, || {
            format!(
                "noise {} is not a finite rms of 0 or more (a fraction of full scale).",
                self.noise
            )
        })?;
        for (p, d) in self.delays.iter().enumerate() {
            check_delay(*d, &format!("delay of polarisation {p}"))?;
        }
        Ok(())
    }
}

fn in_band(frequency: f64, rate: f64) -> bool {
    frequency.is_finite() && frequency >= 0.0 && frequency <= rate / 2.0
}

/// Checks one polarisation's signal; errors name the polarisation, the component and the field.
pub fn validate_pol(signal: &PolSignal, pol: usize, rate: f64) -> Result<(), BadRequest> {
    let n = signal.components.len();
    ensure(n <= MAX_COMPONENTS, || {
        format!("pol{pol} has {n} components; at most {MAX_COMPONENTS} are allowed.")
    })?;
    let nyquist = rate / 2.0;
    for (i, c) in signal.components.iter().enumerate() {
        let at = |kind: &str, field: &str| format!("pol{pol} component {i} ({kind}): {field}");
        match *c {
            Component::Tone {
                frequency,
                amplitude,
                phase,
            } => {
                ensure(in_band(frequency, rate), || {
                    format!(
                        "{} {frequency} Hz is outside 0 to {nyquist} Hz (half the sample rate).",
                        at("tone", "frequency")
                    )
                })?;
                ensure(amplitude.is_finite(), || {
                    format!(
                        "{} {amplitude} is not a finite fraction of full scale.",
                        at("tone", "amplitude")
                    )
                })?;
                ensure(phase.is_finite(), || {
                    format!(
                        "{} {phase} is not a finite angle in radians.",
                        at("tone", "phase")
                    )
                })?;
            }
            Component::Noise { rms, .. } => {
                ensure(rms.is_finite() && rms >= 0.0, || {
                    format!(
                        "{} {rms} is not a finite rms of 0 or more (a fraction of full scale).",
                        at("noise", "rms")
                    )
                })?;
            }
            Component::Comb {
                start,
                spacing,
                count,
                amplitude,
            } => {
                ensure(in_band(start, rate), || {
                    format!(
                        "{} {start} Hz is outside 0 to {nyquist} Hz (half the sample rate).",
                        at("comb", "start")
                    )
                })?;
                ensure(spacing.is_finite(), || {
                    format!("{} {spacing} Hz is not finite.", at("comb", "spacing"))
                })?;
                ensure((1..=MAX_COMB).contains(&count), || {
                    format!("{} {count} is not 1 to {MAX_COMB}.", at("comb", "count"))
                })?;
                let last = start + (count - 1) as f64 * spacing;
                ensure(in_band(last, rate), || {
                    format!(
                        "{} puts the last tooth at {last} Hz, outside 0 to {nyquist} Hz (half the sample rate).",
                        at("comb", "spacing")
                    )
                })?;
                ensure(amplitude.is_finite(), || {
                    format!(
                        "{} {amplitude} is not a finite fraction of full scale.",
                        at("comb", "amplitude")
                    )
                })?;
            }
        }
    }
    check_delay(signal.delay, &format!("pol{pol} delay"))
}

impl SignalRules for PolsRequest {
    fn validate(&self, rate: f64) -> Result<(), BadRequest> {
        for (p, s) in [&self.pol0, &self.pol1].into_iter().enumerate() {
            if let Some(s) = s {
                validate_pol(s, p, rate)?;
            }
        }
        Ok(())
    }
}

/// How a partial signal (PUT /signal) combines with the signal in force.
pub trait ApplyUpdate {
    /// The signal in force with the fields given here replaced.
    fn apply_to(&self, current: &SignalSpec) -> SignalSpec;
}

impl ApplyUpdate for SignalUpdate {
    fn apply_to(&self, current: &SignalSpec) -> SignalSpec {
        SignalSpec {
            tones: self.tones.clone().unwrap_or_else(|| current.tones.clone()),
            noise: self.noise.unwrap_or(current.noise),
            dither: self.dither.unwrap_or(current.dither),
            delays: self.delays.unwrap_or(current.delays),
            seed: self.seed.unwrap_or(current.seed),
        }
    }
}

/// The signal a PUT /signal request makes from the one in force (`current`, and `common`, the
/// latest signal given in the common form), checked against the sample rate: the new signal and
/// the common form to keep for the next request. Pure: nothing is built or switched.
///
/// The per-polarisation form replaces the polarisations it gives (and the seed, if given); the
/// common form rebuilds both polarisations from `common` with the fields given replaced.
pub fn resolve(
    request: &SignalRequest,
    current: &Signal,
    common: &SignalSpec,
    rate: f64,
    max_period: u64,
) -> Result<(Signal, SignalSpec), BadRequest> {
    match request {
        SignalRequest::Signals(req) => {
            let lang = read_signals(req, max_period, rate).map_err(|e| BadRequest(e.0))?;
            Ok((current.with_lang(lang), common.clone()))
        }
        SignalRequest::Common(update) => {
            let common = update.apply_to(common);
            common.validate(rate)?;
            Ok((Signal::from_common(&common), common))
        }
        SignalRequest::Pols(pols) => {
            pols.validate(rate)?;
            let signal = current.with(pols);
            let common = SignalSpec {
                seed: signal.seed,
                ..common.clone()
            };
            Ok((signal, common))
        }
    }
}

/// A field of a signal request that does not read as its type: `path: reason`, or the reason
/// alone when the fault is in the top object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FieldError(String);

/// Why a PUT /signal body cannot be read; each says which form it was read as.
#[derive(Debug, thiserror::Error)]
pub enum SignalBodyError {
    /// Not JSON at all (serde's reason in the sentence).
    #[error("the body is not JSON: {0}.")]
    NotJson(serde_json::Error),
    /// JSON, but not an object.
    #[error("the body is not a JSON object: give the per-polarisation form {{\"pol0\": ..., \"pol1\": ...}}, the common form {{\"tones\": ..., \"noise\": ...}} or katgpucbf's language {{\"signals\": \"...\"}}.")]
    NotObject,
    /// An object naming `pol0` or `pol1` with a field that does not read.
    #[error("the body names pol0 or pol1, so it was read as the per-polarisation form, and {0}.")]
    Pols(FieldError),
    /// An object naming neither with a field that does not read.
    #[error("the body names neither pol0 nor pol1, so it was read as the common form, and {0}.")]
    Common(FieldError),
    /// An object naming `signals` with a field that does not read.
    #[error("the body names signals, so it was read as katgpucbf's signal language, and {0}.")]
    Signals(FieldError),
    /// A spec in katgpucbf's language that does not read (the parser's sentence).
    #[error("{0}")]
    Spec(LangError),
}

/// Why a per-polarisation signal (`--signal`) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PolsError {
    /// Not JSON at all (serde's reason in the sentence).
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    /// A field that does not read.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// Deserializes `value` as `T`, with the path of the offending field in the error.
fn read<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // An unknown field's path ends with the field, which the message names already.
        if let Some(field) = inner
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
        {
            if path == field {
                path = ".".into();
            } else if let Some(parent) = path.strip_suffix(&format!(".{field}")) {
                path = parent.into();
            }
        }
        FieldError(if path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        })
    })
}

/// Reads a PUT /signal body: katgpucbf's language when the object names `signals` (its spec read
/// here, so that a bad spec is refused as a bad body), the per-polarisation form when it names
/// `pol0` or `pol1`, else the common form. The error, one sentence, says which form the body was read as and
/// which field is wrong (rather than serde's "did not match any variant").
pub fn parse_request(body: &[u8]) -> Result<SignalRequest, SignalBodyError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(SignalBodyError::NotJson)?;
    let serde_json::Value::Object(map) = &value else {
        return Err(SignalBodyError::NotObject);
    };
    if map.contains_key("signals") {
        let req: SignalsRequest = read(value).map_err(SignalBodyError::Signals)?;
        Program::parse_for(&req.signals, 2).map_err(SignalBodyError::Spec)?;
        Ok(SignalRequest::Signals(req))
    } else if map.contains_key("pol0") || map.contains_key("pol1") {
        read(value)
            .map(SignalRequest::Pols)
            .map_err(SignalBodyError::Pols)
    } else {
        read(value)
            .map(SignalRequest::Common)
            .map_err(SignalBodyError::Common)
    }
}

/// Reads the per-polarisation form alone (`--signal`), with the path of a wrong field.
pub fn parse_pols(text: &str) -> Result<PolsRequest, PolsError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(PolsError::NotJson)?;
    Ok(read(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(frequency: f64, amplitude: f64) -> Tone {
        Tone {
            frequency,
            amplitude,
        }
    }

    #[test]
    fn the_common_form_gives_both_pols_its_tones_and_each_its_own_noise() {
        let spec = SignalSpec {
            tones: vec![tone(1e6, 0.5), tone(2e6, 0.1)],
            noise: 0.05,
            dither: false,
            delays: [0.0, 2.5],
            seed: 9,
        };
        let s = Signal::from_common(&spec);
        assert_eq!(s.seed, 9);
        for (p, pol) in s.pols.iter().enumerate() {
            assert_eq!(pol.delay, spec.delays[p]);
            assert!(!pol.dither);
            assert_eq!(
                pol.components[..2],
                [
                    Component::Tone {
                        frequency: 1e6,
                        amplitude: 0.5,
                        phase: 0.0
                    },
                    Component::Tone {
                        frequency: 2e6,
                        amplitude: 0.1,
                        phase: 0.0
                    }
                ]
            );
            assert_eq!(
                pol.components[2],
                Component::Noise {
                    rms: 0.05,
                    seed: common_noise_seed(9, p)
                }
            );
        }
        assert_ne!(common_noise_seed(9, 0), common_noise_seed(9, 1));
        assert_ne!(common_noise_seed(9, 0), common_noise_seed(10, 0));
        assert!((0..1000).all(|seed| common_noise_seed(seed, 1) < 1 << 53));
        // No noise, no noise component.
        let quiet = Signal::from_common(&SignalSpec { noise: 0.0, ..spec });
        assert_eq!(quiet.pols[1].components.len(), 2);
    }

    #[test]
    fn a_per_pol_request_replaces_only_what_it_names() {
        let s = Signal::from_common(&SignalSpec::default());
        let pol1 = PolSignal {
            components: vec![],
            delay: 1.0,
            dither: false,
        };
        let t = s.with(&PolsRequest {
            pol0: None,
            pol1: Some(pol1.clone()),
            seed: Some(4),
        });
        assert_eq!((&t.pols[0], &t.pols[1], t.seed), (&s.pols[0], &pol1, 4));
        assert_eq!(s.with(&PolsRequest::default()), s);
    }

    #[test]
    fn validation_names_the_pol_the_component_and_the_field() {
        let comb = |start: f64, spacing: f64, count: usize| Component::Comb {
            start,
            spacing,
            count,
            amplitude: 0.01,
        };
        let tone = |frequency: f64, amplitude: f64, phase: f64| Component::Tone {
            frequency,
            amplitude,
            phase,
        };
        let rate = 1e8;
        let cases: Vec<(Vec<Component>, f64, &str)> = vec![
            (
                vec![tone(6e7, 0.1, 0.0)],
                0.0,
                "pol1 component 0 (tone): frequency 60000000 Hz",
            ),
            (
                vec![tone(-1.0, 0.1, 0.0)],
                0.0,
                "component 0 (tone): frequency -1 Hz",
            ),
            (
                vec![tone(1e6, 0.1, 0.0), tone(1e6, f64::NAN, 0.0)],
                0.0,
                "pol1 component 1 (tone): amplitude NaN",
            ),
            (
                vec![tone(1e6, 0.1, f64::INFINITY)],
                0.0,
                "component 0 (tone): phase inf",
            ),
            (
                vec![Component::Noise { rms: -0.1, seed: 1 }],
                0.0,
                "pol1 component 0 (noise): rms -0.1",
            ),
            (
                vec![comb(1e6, 1e6, 0)],
                0.0,
                "component 0 (comb): count 0 is not 1 to 4096",
            ),
            (vec![comb(1e6, 1e3, 4097)], 0.0, "count 4097"),
            (
                vec![tone(0.0, 0.0, 0.0), comb(1e6, 1e6, 51)],
                0.0,
                "pol1 component 1 (comb): spacing puts the last tooth at 51000000 Hz",
            ),
            (vec![comb(5e7, -1e6, 60)], 0.0, "last tooth at -9000000 Hz"),
            (
                vec![comb(f64::NAN, 1.0, 1)],
                0.0,
                "component 0 (comb): start NaN",
            ),
            (vec![], f64::NAN, "pol1 delay is NaN samples"),
            (vec![], 2e9, "pol1 delay is 2000000000 samples"),
            (vec![tone(1e6, 0.1, 0.0); 65], 0.0, "pol1 has 65 components"),
        ];
        for (components, delay, expect) in cases {
            let req = PolsRequest {
                pol0: None,
                pol1: Some(PolSignal {
                    components,
                    delay,
                    dither: true,
                }),
                seed: None,
            };
            let e = req.validate(rate).expect_err(expect).0;
            assert!(e.contains(expect), "{e:?} should mention {expect:?}");
            assert!(e.ends_with('.'), "{e:?} is not a sentence");
        }
        // The edges are allowed: 0 and rate/2, a comb whose last tooth is rate/2, 64 components.
        let fine = PolsRequest {
            pol0: Some(PolSignal {
                components: [
                    tone(0.0, 1.0, 0.0),
                    tone(5e7, 0.1, -3.0),
                    comb(0.0, 5e7 / 4095.0, 4096),
                ]
                .into_iter()
                .chain((0..61).map(|seed| Component::Noise { rms: 0.0, seed }))
                .collect(),
                delay: -1e9,
                dither: false,
            }),
            pol1: None,
            seed: Some(0),
        };
        fine.validate(rate).unwrap();
    }

    #[test]
    fn a_body_is_read_in_the_form_its_keys_name() {
        let r = parse_request(br#"{"pol1": {"components": [{"kind": "noise", "rms": 0.1, "seed": 3}], "delay": 2.5}}"#)
            .unwrap();
        assert!(matches!(r, SignalRequest::Pols(p) if p.pol1.as_ref().unwrap().delay == 2.5));
        // A polarisation named as null: the per-polarisation form, changing only the seed.
        let r = parse_request(br#"{"pol0": null, "seed": 5}"#).unwrap();
        assert_eq!(
            r,
            SignalRequest::Pols(PolsRequest {
                seed: Some(5),
                ..Default::default()
            })
        );
        let r = parse_request(br#"{"noise": 0.1, "seed": 2}"#).unwrap();
        assert!(matches!(r, SignalRequest::Common(u) if u.noise == Some(0.1) && u.seed == Some(2)));
        for (body, expect) in [
            (
                r#"{"pol0": {"components": [{"kind": "tone", "frequency": 1, "amplitude": 1, "phse": 0}]}}"#,
                "read as the per-polarisation form, and pol0.components[0]: unknown field `phse`",
            ),
            (
                r#"{"pol0": {"components": [{"kind": "sawtooth"}]}}"#,
                "pol0.components[0].kind: unknown variant `sawtooth`",
            ),
            (
                r#"{"pol0": {"components": []}, "noise": 0.1}"#,
                "per-polarisation form, and unknown field `noise`",
            ),
            (
                r#"{"pol1": {"components": [{"kind": "comb", "start": 1, "spacing": 1, "amplitude": 1}]}}"#,
                "pol1.components[0]: missing field `count`",
            ),
            (
                r#"{"nosie": 0.1}"#,
                "read as the common form, and unknown field `nosie`",
            ),
            (
                r#"{"delays": [0]}"#,
                "common form, and delays: invalid length 1",
            ),
            (r#"[1, 2]"#, "not a JSON object"),
            ("fast please", "not JSON"),
        ] {
            let e = parse_request(body.as_bytes()).unwrap_err().to_string();
            eprintln!("{body}\n  -> {e}");
            assert!(
                e.contains(expect),
                "{body}: {e:?} should mention {expect:?}"
            );
            assert!(e.ends_with('.'), "{e:?} is not a sentence");
            assert!(!e.contains("did not match any variant"), "{e}");
        }
    }
}

//! The output language of `--wideband` and `--narrowband`: `NAME:key=value,...` ([`OutputArg`]),
//! and the names an output may take ([`check_output_name`]).

use spead::transport::Endpoint;

use super::error::{sentence, ConfigError};
use crate::backend::OutputGeometry;
use crate::signal::ddc;
use crate::signal::weights::{FilterDesign, UnknownWindow, WindowFunction};
use fgpu_api::engine::OutputKind;

/// Words of the control API's routes (`/status`, `/outputs/NAME/gains`, ...), which an output may
/// not be named.
const RESERVED_NAMES: [&str; 6] = ["health", "status", "metrics", "delays", "gains", "outputs"];

/// One `--wideband` or `--narrowband NAME:dst=ADDR[+N]:PORT,key=value,...`: an output's kind,
/// name and destinations, and the keys it gives; `None` takes the value of the output flags
/// (`--channels`, `--taps`, `--output-bits`, `--window-function`, `--w-cutoff`,
/// `--dither-seed`/`--no-dither`, `--gain`). A narrowband output must give `channels`,
/// `decimation` and `centre` ([`OutputArg::narrowband`]); a wideband one gives none of the
/// narrowband keys.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputArg {
    pub kind: OutputKind,
    pub name: String,
    pub dst: Endpoint,
    pub channels: Option<usize>,
    pub taps: Option<usize>,
    pub bits: Option<u32>,
    pub window: Option<WindowFunction>,
    pub w_cutoff: Option<f64>,
    /// `Some(None)`: `dither=off`.
    pub dither: Option<Option<u32>>,
    pub gain: Option<f32>,
    /// Narrowband: D, 8, 16 or 32 (checked when parsed).
    pub decimation: Option<usize>,
    /// Narrowband: the centre frequency in Hz, as given (quantised and checked against the
    /// sample rate by [`EngineConfig::from_args`](super::EngineConfig::from_args)).
    pub centre: Option<f64>,
    /// Narrowband: L, the DDC filter's taps (default 12 D, 32 D without discard).
    pub ddc_taps: Option<usize>,
    /// Narrowband: the flat pass band in Hz, katgpucbf's `pass_bandwidth`; given, the output is
    /// a no-discard (VLBI) one (checked against the band by
    /// [`EngineConfig::from_args`](super::EngineConfig::from_args)).
    pub pass_bandwidth: Option<f64>,
}

/// Checks an output's name: 1 to 64 of a-z, 0-9, `_` and `-`, and no word of the control API's
/// routes. The error is a sentence.
pub fn check_output_name(name: &str) -> Result<(), ConfigError> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err(ConfigError(format!(
            "output name {name:?} must be 1 to 64 characters from a-z, 0-9, _ and -."
        )));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(ConfigError(format!(
            "output name {name:?} would clash with the control API's routes ({}); choose another.",
            RESERVED_NAMES.join(", ")
        )));
    }
    Ok(())
}

impl OutputArg {
    /// The output's geometry: each key it gives, the rest from `flags` (the output flags'
    /// geometry, kind included).
    pub(crate) fn geometry_over(&self, flags: OutputGeometry) -> OutputGeometry {
        OutputGeometry {
            channels: self.channels.unwrap_or(flags.channels),
            taps: self.taps.unwrap_or(flags.taps),
            bits: self.bits.unwrap_or(flags.bits),
            filter: FilterDesign {
                window: self.window.unwrap_or(flags.filter.window),
                w_cutoff: self.w_cutoff.unwrap_or(flags.filter.w_cutoff),
            },
            ..flags
        }
    }

    /// Parses a `--wideband` spec, `NAME:dst=ADDR[+N]:PORT,key=value,...`. Errors are one
    /// sentence naming the output and the key.
    pub fn wideband(s: &str) -> Result<Self, ConfigError> {
        Self::parse(s, OutputKind::Wideband)
    }

    /// Parses a `--narrowband` spec, `NAME:dst=ADDR[+N]:PORT,channels=N,decimation=8|16|32,
    /// centre=HZ,key=value,...`. Errors are one sentence naming the output and the key.
    pub fn narrowband(s: &str) -> Result<Self, ConfigError> {
        Self::parse(s, OutputKind::Narrowband)
    }

    fn parse(s: &str, kind: OutputKind) -> Result<Self, ConfigError> {
        let narrowband = kind == OutputKind::Narrowband;
        let Some((name, keys)) = s.split_once(':') else {
            let form = if narrowband {
                "NAME:dst=ADDR[+N]:PORT,channels=N,decimation=D,centre=HZ,..."
            } else {
                "NAME:dst=ADDR[+N]:PORT,key=value,..."
            };
            return Err(ConfigError(format!(
                "{s:?} is not {form} (the name and a colon first)."
            )));
        };
        check_output_name(name)?;
        let refuse = |msg: String| ConfigError(format!("output {name:?}: {msg}"));
        let mut dst = None;
        let mut spec = OutputArg {
            kind,
            name: name.to_string(),
            dst: Endpoint { addrs: Vec::new() },
            channels: None,
            taps: None,
            bits: None,
            window: None,
            w_cutoff: None,
            dither: None,
            gain: None,
            decimation: None,
            centre: None,
            ddc_taps: None,
            pass_bandwidth: None,
        };
        let mut seen: Vec<&str> = Vec::new();
        for part in keys.split(',').filter(|_| !keys.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(refuse(format!("{part:?} is not key=value.")));
            };
            if seen.contains(&key) {
                return Err(refuse(format!("the key {key} is given twice.")));
            }
            seen.push(key);
            let whole = |what: &str| {
                value
                    .parse::<usize>()
                    .map_err(|_| refuse(format!("{key}={value} is not {what}.")))
            };
            match key {
                "dst" => {
                    let e = value
                        .parse::<Endpoint>()
                        .map_err(|e| refuse(format!("dst={value}: {}", sentence(e))))?;
                    dst = Some(e);
                }
                "channels" => spec.channels = Some(whole("a whole number of channels")?),
                "taps" => spec.taps = Some(whole("a whole number of taps")?),
                "bits" => {
                    spec.bits = Some(match value {
                        "8" => 8,
                        "4" => 4,
                        _ => return Err(refuse(format!("bits={value} must be 8 or 4."))),
                    })
                }
                "window" => {
                    spec.window = Some(value.parse().map_err(|e: UnknownWindow| {
                        refuse(format!("window={value}: {}", sentence(e.to_string())))
                    })?)
                }
                "w_cutoff" => {
                    spec.w_cutoff = Some(
                        value
                            .parse()
                            .map_err(|_| refuse(format!("w_cutoff={value} is not a number.")))?,
                    )
                }
                "dither" => {
                    spec.dither = Some(match value {
                        "off" => None,
                        seed => Some(seed.parse().map_err(|_| {
                            refuse(format!(
                                "dither={value} must be a seed from 0 to {} or off.",
                                u32::MAX
                            ))
                        })?),
                    })
                }
                "gain" => {
                    let gain: f32 = value
                        .parse()
                        .map_err(|_| refuse(format!("gain={value} is not a number.")))?;
                    if !gain.is_finite() {
                        return Err(refuse(format!("gain={value} is not a finite number.")));
                    }
                    spec.gain = Some(gain);
                }
                "decimation" if narrowband => {
                    let d = whole("a whole number")
                        .ok()
                        .filter(|d| ddc::DECIMATIONS.contains(d));
                    spec.decimation = Some(d.ok_or_else(|| {
                        refuse(format!("decimation={value} must be 8, 16 or 32."))
                    })?);
                }
                "centre" if narrowband => {
                    let hz: f64 = value
                        .parse()
                        .ok()
                        .filter(|f: &f64| f.is_finite())
                        .ok_or_else(|| {
                            refuse(format!("centre={value} is not a frequency in Hz."))
                        })?;
                    spec.centre = Some(hz);
                }
                "ddc_taps" if narrowband => spec.ddc_taps = Some(whole("a whole number of taps")?),
                "pass_bandwidth" if narrowband => {
                    let hz: f64 = value
                        .parse()
                        .ok()
                        .filter(|f: &f64| f.is_finite() && *f > 0.0)
                        .ok_or_else(|| {
                            refuse(format!(
                                "pass_bandwidth={value} is not a positive bandwidth in Hz."
                            ))
                        })?;
                    spec.pass_bandwidth = Some(hz);
                }
                _ if narrowband => {
                    return Err(refuse(format!(
                        "unknown key {key:?}; the keys are dst, channels, decimation, centre, \
                         taps, ddc_taps, bits, window, w_cutoff, dither and gain."
                    )))
                }
                "decimation" | "centre" | "ddc_taps" => {
                    return Err(refuse(format!(
                        "{key}= belongs to a narrowband output (--narrowband), not a wideband one."
                    )))
                }
                _ => {
                    return Err(refuse(format!(
                        "unknown key {key:?}; the keys are dst, channels, taps, bits, window, \
                         w_cutoff, dither and gain."
                    )))
                }
            }
        }
        spec.dst = dst.ok_or_else(|| refuse("needs dst=ADDR[+N]:PORT.".into()))?;
        if narrowband {
            if spec.channels.is_none() {
                return Err(refuse("needs channels=N.".into()));
            }
            if spec.decimation.is_none() {
                return Err(refuse("needs decimation=8, 16 or 32.".into()));
            }
            if spec.centre.is_none() {
                return Err(refuse("needs centre=HZ.".into()));
            }
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::refusal;

    /// A key the parser does not know, or a value it cannot read, is named in the refusal.
    #[test]
    fn bad_wideband_keys_and_values_are_named() {
        for (spec, want) in [
            ("a", "\"a\" is not NAME:dst=ADDR[+N]:PORT"),
            ("a:", "output \"a\": needs dst=ADDR[+N]:PORT."),
            ("a:channels=1024", "output \"a\": needs dst=ADDR[+N]:PORT."),
            ("a:dst=127.0.0.1:7150,colour=red", "unknown key \"colour\""),
            ("a:dst=127.0.0.1:7150,taps", "\"taps\" is not key=value."),
            (
                "a:dst=127.0.0.1:7150,taps=4,taps=8",
                "the key taps is given twice.",
            ),
            (
                "a:dst=nowhere",
                "output \"a\": dst=nowhere: 'nowhere' is not ADDR[+N]:PORT.",
            ),
            (
                "a:dst=127.0.0.1:7150,channels=many",
                "channels=many is not a whole number",
            ),
            (
                "a:dst=127.0.0.1:7150,taps=-1",
                "taps=-1 is not a whole number",
            ),
            ("a:dst=127.0.0.1:7150,bits=6", "bits=6 must be 8 or 4."),
            (
                "a:dst=127.0.0.1:7150,window=hamming",
                "window=hamming: the window function must be hann or rect",
            ),
            (
                "a:dst=127.0.0.1:7150,w_cutoff=wide",
                "w_cutoff=wide is not a number.",
            ),
            (
                "a:dst=127.0.0.1:7150,dither=maybe",
                "dither=maybe must be a seed",
            ),
            ("a:dst=127.0.0.1:7150,gain=x", "gain=x is not a number."),
            (
                "a:dst=127.0.0.1:7150,gain=inf",
                "gain=inf is not a finite number.",
            ),
        ] {
            let e = OutputArg::wideband(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec:?}: {e:?} should say {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
            // clap passes the sentence on.
            let e = refusal(&["--wideband", spec]);
            assert!(e.contains(want), "{spec:?}: {e:?}");
        }
    }
}

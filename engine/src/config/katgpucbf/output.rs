//! katgpucbf's output language: `--wideband name=NAME,channels=N,dst=ADDR[+N][:PORT],...` and
//! `--narrowband ...,centre_frequency=HZ,decimation=D,...` (fgpu's `parse_wideband` and
//! `parse_narrowband`: comma-separated key=value, each key once, unknown keys refused).

use crate::config::error::ConfigError;

/// katgpucbf's default SPEAD port, for a `dst` without one.
pub(super) const DEFAULT_PORT: u16 = 7148;
/// katgpucbf's default `weight_pass` of the narrowband filter design (`DEFAULT_WEIGHT_PASS`).
pub(super) const DEFAULT_WEIGHT_PASS: f64 = 0.005;

/// One output as katgpucbf describes it; keys left out are `None` (katgpucbf's defaults are
/// applied when it is translated).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct KatOutput {
    pub narrowband: bool,
    pub name: String,
    pub channels: usize,
    /// `ADDR[+N]:PORT`, the port filled in.
    pub dst: String,
    pub jones_per_batch: Option<usize>,
    pub taps: Option<usize>,
    pub w_cutoff: Option<f64>,
    /// `hann` or `rect`.
    pub window_function: Option<String>,
    /// `none` or `uniform`.
    pub dither: Option<String>,
    pub centre_frequency: Option<f64>,
    pub decimation: Option<usize>,
    pub ddc_taps: Option<usize>,
    pub weight_pass: Option<f64>,
    pub pass_bandwidth: Option<f64>,
}

const WIDEBAND_KEYS: [&str; 8] = [
    "name",
    "channels",
    "jones_per_batch",
    "dst",
    "taps",
    "w_cutoff",
    "window_function",
    "dither",
];
const NARROWBAND_KEYS: [&str; 5] = [
    "centre_frequency",
    "decimation",
    "ddc_taps",
    "weight_pass",
    "pass_bandwidth",
];

impl KatOutput {
    /// Parses `--wideband`'s value; the error is a sentence.
    pub fn wideband(s: &str) -> Result<Self, ConfigError> {
        Self::parse(s, false)
    }

    /// Parses `--narrowband`'s value; the error is a sentence.
    pub fn narrowband(s: &str) -> Result<Self, ConfigError> {
        Self::parse(s, true)
    }

    fn parse(s: &str, narrowband: bool) -> Result<Self, ConfigError> {
        let flag = if narrowband {
            "--narrowband"
        } else {
            "--wideband"
        };
        let refuse = |msg: String| ConfigError(format!("{flag} {s:?}: {msg}"));
        let mut out = KatOutput {
            narrowband,
            ..Default::default()
        };
        let mut seen: Vec<&str> = Vec::new();
        for part in s.split(',') {
            let Some((key, value)) = part.split_once('=') else {
                return Err(refuse(format!("missing = in {part:?}.")));
            };
            let known =
                WIDEBAND_KEYS.contains(&key) || (narrowband && NARROWBAND_KEYS.contains(&key));
            if !known {
                let mut keys: Vec<&str> = WIDEBAND_KEYS.to_vec();
                if narrowband {
                    keys.extend(NARROWBAND_KEYS);
                }
                return Err(refuse(format!(
                    "unknown key {key:?}; the keys are {}.",
                    keys.join(", ")
                )));
            }
            if seen.contains(&key) {
                return Err(refuse(format!("{key} already specified.")));
            }
            seen.push(key);
            let whole = || {
                value
                    .parse::<usize>()
                    .map_err(|_| refuse(format!("{key}={value} is not a whole number.")))
            };
            let number = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| refuse(format!("{key}={value} is not a number.")))
            };
            match key {
                "name" => out.name = value.to_string(),
                "channels" => out.channels = whole()?,
                "jones_per_batch" => out.jones_per_batch = Some(whole()?),
                "dst" => out.dst = with_default_port(value),
                "taps" => out.taps = Some(whole()?),
                "w_cutoff" => out.w_cutoff = Some(number()?),
                "window_function" => {
                    if !["hann", "rect"].contains(&value) {
                        return Err(refuse(format!(
                            "invalid window_function value: {value:?} (valid values are 'hann', \
                             'rect')."
                        )));
                    }
                    out.window_function = Some(value.to_string());
                }
                "dither" => {
                    if !["none", "uniform"].contains(&value) {
                        return Err(refuse(format!(
                            "invalid dither value: {value:?} (valid values are 'none', 'uniform')."
                        )));
                    }
                    out.dither = Some(value.to_string());
                }
                "centre_frequency" => out.centre_frequency = Some(number()?),
                "decimation" => out.decimation = Some(whole()?),
                "ddc_taps" => out.ddc_taps = Some(whole()?),
                "weight_pass" => out.weight_pass = Some(number()?),
                _ => out.pass_bandwidth = Some(number()?),
            }
        }
        let mut required = vec!["name", "channels", "dst"];
        if narrowband {
            required.extend(["centre_frequency", "decimation"]);
        }
        if let Some(missing) = required.iter().find(|k| !seen.contains(k)) {
            return Err(refuse(format!("{missing} is missing.")));
        }
        Ok(out)
    }
}

/// katgpucbf's endpoint list parser takes `ADDR[+N]` with the port left out as its default port.
pub(super) fn with_default_port(endpoint: &str) -> String {
    match endpoint.rsplit_once(':') {
        Some(_) => endpoint.to_string(),
        None => format!("{endpoint}:{DEFAULT_PORT}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generators_outputs_parse() {
        let w = KatOutput::wideband(
            "name=antenna_channelised_voltage,channels=32768,taps=16,w_cutoff=1.0,\
             jones_per_batch=1048576,dst=239.10.11.0+15:7148,window_function=hann",
        )
        .unwrap();
        assert_eq!(w.name, "antenna_channelised_voltage");
        assert_eq!(
            (w.channels, w.taps, w.w_cutoff),
            (32768, Some(16), Some(1.0))
        );
        assert_eq!(w.jones_per_batch, Some(1 << 20));
        assert_eq!(w.dst, "239.10.11.0+15:7148");
        assert_eq!(w.window_function.as_deref(), Some("hann"));
        assert_eq!(w.dither, None);
        let n = KatOutput::narrowband(
            "name=nb,channels=32768,dst=239.10.12.0+3,dither=none,decimation=8,\
             centre_frequency=284000000.0,ddc_taps=128,weight_pass=0.005",
        )
        .unwrap();
        assert!(n.narrowband);
        assert_eq!(n.dst, "239.10.12.0+3:7148", "katgpucbf's default port");
        assert_eq!((n.decimation, n.ddc_taps), (Some(8), Some(128)));
        assert_eq!(n.centre_frequency, Some(284e6));
        assert_eq!(n.weight_pass, Some(0.005));
        assert_eq!(n.dither.as_deref(), Some("none"));
    }

    #[test]
    fn bad_outputs_are_refused_with_a_sentence() {
        let base = "name=a,channels=64,dst=127.0.0.1:9";
        for (spec, narrow, want) in [
            ("name=a,channels=64", false, "dst is missing."),
            ("channels=64,dst=127.0.0.1:9", false, "name is missing."),
            (base, true, "centre_frequency is missing."),
            (
                "name=a,name=b,channels=1,dst=x",
                false,
                "name already specified.",
            ),
            ("name=a,channels", false, "missing = in \"channels\"."),
            (
                "name=a,channels=many,dst=x",
                false,
                "channels=many is not a whole number.",
            ),
            (
                &format!("{base},decimation=8"),
                false,
                "unknown key \"decimation\"",
            ),
            (
                &format!("{base},colour=red"),
                true,
                "unknown key \"colour\"",
            ),
            (
                &format!("{base},window_function=hamming"),
                false,
                "valid values are 'hann'",
            ),
            (
                &format!("{base},dither=gauss"),
                false,
                "valid values are 'none'",
            ),
            (
                &format!("{base},w_cutoff=inf"),
                false,
                "w_cutoff=inf is not a number.",
            ),
        ] {
            let parsed = if narrow {
                KatOutput::narrowband(spec)
            } else {
                KatOutput::wideband(spec)
            };
            let e = parsed.unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e:?} should say {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
        }
    }
}

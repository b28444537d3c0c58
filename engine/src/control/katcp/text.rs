//! katgpucbf's text forms: complex gains as Python writes and reads them (`1`, `0.5-0.25j`,
//! `(1+2j)`), a delay sensor's `(loadmcnt, delay, delay-rate, phase, phase-rate)`, and the
//! sentences of the front's own refusals (what the controller refuses keeps its sentence).

use fgpu_api::engine::{DelayModel, Gain};
use katcp_server::sensor::float;

/// A request the front refused before asking the controller: its arguments do not read.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// Too few or too many arguments.
    #[error("?{request} takes {usage}, not {given} argument(s).")]
    Count {
        /// The request.
        request: &'static str,
        /// What it takes.
        usage: &'static str,
        /// Arguments given.
        given: usize,
    },
    /// An argument that is not UTF-8.
    #[error("argument {0} is not text.")]
    NotText(usize),
    /// An input other than 0 or 1.
    #[error("input \"{0}\" is not 0 or 1.")]
    Input(String),
    /// A gain that does not read as a complex number.
    #[error("gain \"{0}\" is not a complex number (such as 1, 0.5-0.25j or 2j).")]
    Gain(String),
    /// A start time that is not a number.
    #[error("start time \"{0}\" is not a Unix time in seconds.")]
    StartTime(String),
}

/// Reads a complex number as Python's `complex()` does: `re`, `imj`, `re+imj` or `re-imj`, in
/// parentheses or not, `j` alone meaning 1j.
pub fn parse_complex(text: &str) -> Option<[f64; 2]> {
    let s = text.trim();
    let s = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .map_or(s, str::trim);
    let num = |t: &str| -> Option<f64> {
        match t {
            "" | "+" => Some(1.0),
            "-" => Some(-1.0),
            t if t.starts_with(['+', '-']) && t[1..].starts_with(['+', '-']) => None,
            t => t.parse().ok(),
        }
    };
    let Some(body) = s.strip_suffix(['j', 'J']) else {
        return if s.is_empty() || s.contains(char::is_whitespace) {
            None
        } else {
            Some([s.parse().ok()?, 0.0])
        };
    };
    if body.contains(char::is_whitespace) {
        return None;
    }
    // The sign that starts the imaginary part: the last + or - not at the start and not in an
    // exponent.
    let b = body.as_bytes();
    let split = (1..b.len())
        .rev()
        .find(|&i| matches!(b[i], b'+' | b'-') && !matches!(b[i - 1], b'e' | b'E'));
    match split {
        None => Some([0.0, num(body)?]),
        Some(i) => {
            let re = &body[..i];
            if re.is_empty() {
                return None;
            }
            Some([re.parse().ok()?, num(&body[i..])?])
        }
    }
}

/// A complex gain as text Python's `complex()` reads back: `1+0j`, `0.1-0.5j` (each part the
/// engine's float32 as its shortest decimal).
pub fn complex_text([re, im]: [f64; 2]) -> String {
    format!("{re}{im:+}j")
}

/// One polarisation's gains as loaded: one value when every channel has the same, else one per
/// channel.
pub fn gain_values(g: &Gain) -> Vec<String> {
    match g {
        Gain::Real(x) => vec![complex_text([*x, 0.0])],
        Gain::Complex(z) => vec![complex_text(*z)],
        Gain::PerChannel(list) => list.iter().map(|z| complex_text(*z)).collect(),
    }
}

/// The `.eq` sensor's value: katgpucbf's `[g, ...]`.
pub fn eq_sensor(g: &Gain) -> String {
    format!("[{}]", gain_values(g).join(", "))
}

/// The `.delay` sensor's value: katgpucbf's `(loadmcnt, delay, delay-rate, phase,
/// phase-rate)`, in s, s/s, rad and rad/s.
pub fn delay_sensor(d: &DelayModel) -> String {
    format!(
        "({}, {}, {}, {}, {})",
        d.load_timestamp,
        float(d.delay),
        float(d.delay_rate),
        float(d.phase),
        float(d.phase_rate)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_numbers_read_as_python_reads_them() {
        for (t, want) in [
            ("1", [1.0, 0.0]),
            (" -2.5 ", [-2.5, 0.0]),
            ("2j", [0.0, 2.0]),
            ("j", [0.0, 1.0]),
            ("-j", [0.0, -1.0]),
            ("1+2j", [1.0, 2.0]),
            ("0.5-0.25j", [0.5, -0.25]),
            ("(1-1J)", [1.0, -1.0]),
            ("1e-3+2.5e+2j", [1e-3, 250.0]),
            ("-1e-3-j", [-1e-3, -1.0]),
            ("inf", [f64::INFINITY, 0.0]),
        ] {
            assert_eq!(parse_complex(t), Some(want), "{t}");
        }
        for t in [
            "", "x", "1+", "1 + 2j", "1+2", "+-1", "1++2j", "()", "1,2", "jj",
        ] {
            assert_eq!(parse_complex(t), None, "{t}");
        }
    }

    #[test]
    fn gains_and_delays_are_written_as_katgpucbf_writes_them() {
        assert_eq!(complex_text([1.0, 0.0]), "1+0j");
        assert_eq!(complex_text([0.1, -0.5]), "0.1-0.5j");
        for z in [[1.0, 0.0], [0.1, -0.5], [-3e-5, 2.0]] {
            assert_eq!(parse_complex(&complex_text(z)), Some(z));
        }
        assert_eq!(
            eq_sensor(&Gain::PerChannel(vec![[1.0, 0.0], [0.5, 0.5]])),
            "[1+0j, 0.5+0.5j]"
        );
        let d = DelayModel {
            delay: 1e-9,
            delay_rate: 0.0,
            phase: 0.5,
            phase_rate: -2.0,
            load_timestamp: 4096,
            apply_from: 4096,
        };
        assert_eq!(delay_sensor(&d), "(4096, 1e-09, 0.0, 0.5, -2.0)");
    }
}

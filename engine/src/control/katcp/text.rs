//! katgpucbf's text forms: complex gains as Python writes and reads them (`1`, `0.5-0.25j`,
//! `(1+2j)`), a delay sensor's `(loadmcnt, delay, delay-rate, phase, phase-rate)`, and the
//! sentences of the front's own refusals (what the controller refuses keeps its sentence).

pub use fgpu_api::engine::katgpucbf_text::{complex_text, parse_complex};
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
    fn gains_and_delays_are_written_as_katgpucbf_writes_them() {
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

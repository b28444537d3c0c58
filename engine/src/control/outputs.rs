//! One output's section of the status, and a narrowband output's centre frequency, changed from
//! a frame on without a restart.
//!
//! The centre is quantised and checked as at start (`ddc::mixer_word`: the band, fs/(2D) wide,
//! must lie within 0 .. fs/2); the mixer word goes to the compute stage, which gives it to every
//! frame it prepares from then on (the frame's DDC and its delays' mixer term together), and the
//! status reports the quantised centre from the reply on.

use std::sync::atomic::Ordering::Relaxed;

use fgpu_api::engine::Output;

use super::{status, ControlError, Controller};
use crate::backend::OutputKind;
use crate::pipeline::Command;
use crate::signal::ddc;

impl Controller {
    /// Output `name`'s section of the status.
    pub fn output(&self, name: &str) -> Result<Output, ControlError> {
        let k = self.output_index(name)?;
        Ok(status::output(&self.cfg, &self.stats, k))
    }

    /// Checks a new centre (Hz) for narrowband output `name` and hands its mixer word to the
    /// pipeline; the output's section of the status as it now stands.
    pub fn set_centre(&self, name: &str, centre: f64) -> Result<Output, ControlError> {
        let k = self.output_index(name)?;
        let OutputKind::Narrowband(ddc) = self.cfg.outputs[k].geometry.kind else {
            return Err(ControlError::NoCentre {
                output: name.to_string(),
            });
        };
        let word = ddc::mixer_word(centre, self.cfg.fs, ddc.decimation).map_err(|reason| {
            ControlError::Centre {
                output: name.to_string(),
                reason,
            }
        })?;
        // One change at a time, so that the status ends with the word the pipeline got last.
        let _one_at_a_time = self.loaded()?;
        self.send(Command::Centre {
            output: k,
            mixer: word,
        })?;
        if let Some(m) = &self.stats.outputs[k].mixer {
            m.store(word, Relaxed);
        }
        Ok(status::output(&self.cfg, &self.stats, k))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::controller::tests::controller_with;
    use super::*;

    /// A wideband output and a narrowband one of 64 channels, D = 8 around 200 kHz, at 1 MHz: the
    /// centre may lie from fs/(4D) = 31.25 kHz to fs/2 - fs/(4D) = 468.75 kHz.
    pub(in crate::control) const FLAGS: [&str; 6] = [
        "--wideband",
        "wide:dst=127.0.0.1:7150",
        "--narrowband",
        "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=200e3,taps=4",
        "--control-token",
        "s3cret",
    ];

    /// A good centre is quantised and reaches the pipeline; a bad one, one for a wideband output
    /// or for an unknown output is refused with its sentence and changes nothing.
    #[test]
    fn a_centre_is_checked_then_sent() {
        let (c, rx) = controller_with(&FLAGS);
        let word = |hz: f64| ddc::mixer_word(hz, c.cfg.fs, 8).unwrap();
        let nb = c.set_centre("nb", 300000.4).unwrap().narrowband.unwrap();
        assert_eq!(nb.mixer_word, word(300000.4));
        assert_eq!(c.output("nb").unwrap().narrowband, Some(nb));
        for (output, hz, want) in [
            (
                "nb",
                470e3,
                "output \"nb\": a narrowband centre of 470000 Hz (quantised to",
            ),
            (
                "nb",
                f64::NAN,
                "output \"nb\": the narrowband centre must be a number of Hz, not NaN.",
            ),
            (
                "wide",
                3e5,
                "output \"wide\" is a wideband output: only a narrowband output has a centre to change.",
            ),
            (
                "nope",
                3e5,
                "this engine has no output named \"nope\"; its outputs are: wide, nb.",
            ),
        ] {
            let e = c.set_centre(output, hz).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e:?} should start {want:?}");
        }
        assert_eq!(c.output("nb").unwrap().narrowband, Some(nb));
        let sent: Vec<Command> = rx.try_iter().collect();
        assert!(
            matches!(&sent[..], [Command::Centre { output: 1, mixer }] if *mixer == word(300000.4)),
            "{sent:?}"
        );
    }
}

//! The command line (`fengine run`, `fengine bench`) and the engine configuration derived from it:
//! the input and its outputs ([`InputSpec`], [`OutputSpec`]: `--dst` and the output flags describe
//! one output, [`WIDEBAND`]; each `--wideband NAME:key=value,...` ([`OutputArg::wideband`]) one output
//! of its own, the flags giving the keys it leaves out), the lags and overlap that `--max-delay`
//! implies, and the checks that turn a bad combination into one sentence ([`ConfigError`]).
//!
//! One job a file: `help` the texts of `--help`, `flags` the command line as clap parses it,
//! `output_arg` the `NAME:key=value,...` language of `--wideband` and `--narrowband`, `spec`
//! the checked types, `derive` what they imply (lags, overlap, thread counts), `check` the
//! way from the one to the other, `placement` where the stream threads run, `error` the
//! refusal they all share; `katgpucbf` reads katgpucbf's `fgpu` command line into ours.

mod check;
mod derive;
mod error;
mod flags;
mod help;
pub mod katgpucbf;
mod output_arg;
mod placement;
mod spec;
#[cfg(test)]
pub(crate) mod test_support;

pub use self::placement::{AutoAffinity, StreamPlacement};
pub use derive::{delay_room, output_lag, overlap_samples};
pub use error::{sentence, ConfigError};
pub use flags::{
    BackendKind, BenchArgs, Cli, Command, FftPrecision, RunArgs, WidebandKernels, CONTROL_TOKEN_ENV,
};
pub use output_arg::{check_output_name, OutputArg};
pub use spec::{EngineConfig, InputSpec, OutputSpec, OutputStart};
#[cfg(test)]
pub(crate) use test_support::test_args;

pub use fgpu_api::engine::WIDEBAND;

/// Most outputs one engine makes: what a backend serves from one input.
pub use crate::backend::MAX_OUTPUTS;

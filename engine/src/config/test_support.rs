//! Configurations for tests, of this module and of every other that needs one.

use clap::Parser;

use super::{Cli, EngineConfig, RunArgs};

/// The run arguments of `fengine` with test addresses and `extra` flags: for the tests of every
/// module that needs a configuration. The output goes to `--dst 127.0.0.1:7150` unless `extra`
/// gives `--dst`, `--wideband` or `--narrowband`.
pub(crate) fn test_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
    let mut v = vec![
        "fengine",
        "--src-pol0",
        "127.0.0.1:7148",
        "--src-pol1",
        "127.0.0.1:7149",
    ];
    let outputs_given = extra.iter().any(|f| {
        let flag = f.split_once('=').map_or(*f, |(flag, _)| flag);
        ["--dst", "--wideband", "--narrowband"].contains(&flag)
    });
    if !outputs_given {
        v.extend(["--dst", "127.0.0.1:7150"]);
    }
    v.extend_from_slice(extra);
    let cli = Cli::try_parse_from(v)?;
    Ok(cli.run.expect("run arguments"))
}

/// The configuration of `extra`, or the sentence that refuses it (clap's or the engine's).
pub(crate) fn refusal(extra: &[&str]) -> String {
    match test_args(extra) {
        Err(e) => e.to_string(),
        Ok(a) => match EngineConfig::from_args(&a) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("{extra:?} was accepted: {:?}", c.outputs),
        },
    }
}

/// The configuration of `extra`, which must be accepted.
pub(crate) fn config(extra: &[&str]) -> EngineConfig {
    EngineConfig::from_args(&test_args(extra).unwrap()).unwrap()
}

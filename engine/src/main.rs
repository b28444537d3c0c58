//! `fengine`: see `fengine --help`. The work is in the library (`fengine::app`).

use std::io::IsTerminal;

use clap::Parser;
use fengine::config::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = match Cli::parse().with_env_token() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result: anyhow::Result<()> = match (&cli.command, &cli.run) {
        (Some(Command::Bench(b)), _) => fengine::app::bench(b).map_err(Into::into),
        (Some(Command::Run(r)), _) | (None, Some(r)) => fengine::app::run(r).map_err(Into::into),
        (None, None) => Err(anyhow::anyhow!(
            "give the run options (see fengine --help) or a subcommand."
        )),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

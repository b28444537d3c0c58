//! `dsim`: see `dsim --help`. Parses the command line, sets up logging, runs until the heap count
//! or duration is reached or SIGINT/SIGTERM arrives.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use dsim::cli::{Cli, Command};
use dsim::Dsim;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Tests and scripts read the log: colour only for a person at a terminal.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match &cli.command {
        Some(Command::Bench(args)) => dsim::bench::run(args).map(|_| ()),
        None => run(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let handle = Dsim::start(cli.run.to_config())?;
    let controller = handle.controller().clone();
    // Signals arrive on a small runtime of their own; they ask the send threads to stop.
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("dsim-signals".into())
        .spawn(move || {
            signals.block_on(async {
                let mut term =
                    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    {
                        Ok(t) => t,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot watch SIGTERM");
                            let _ = tokio::signal::ctrl_c().await;
                            controller.request_stop();
                            return;
                        }
                    };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
                    _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                }
                controller.request_stop();
            });
        })?;
    handle.wait();
    Ok(())
}

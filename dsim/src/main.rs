//! `dsim`: see `dsim --help`. Parses the command line, sets up logging, runs until the heap count
//! or duration is reached or SIGINT/SIGTERM arrives.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use dsim::cli::{Cli, Command};
use dsim::{katgpucbf, Dsim};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let (cli, katgpucbf_notes) = if katgpucbf::is_katgpucbf_form(&argv) {
        match katgpucbf_cli(&argv) {
            Ok(parsed) => parsed,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        (Cli::parse(), Vec::new())
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Tests and scripts read the log: colour only for a person at a terminal.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    for note in katgpucbf_notes {
        tracing::info!("katgpucbf form: {note}");
    }
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

/// katgpucbf's dsim line (docs/katgpucbf.md) as our own, with the notes for the log (the last
/// one the equivalent line); clap's usage errors exit as for our own form.
fn katgpucbf_cli(argv: &[std::ffi::OsString]) -> Result<(Cli, Vec<String>), String> {
    let args = katgpucbf::KatDsimArgs::parse_from(argv);
    let t = katgpucbf::Translation::new(&args)?;
    let cli = t.cli()?;
    let mut notes = t.notes;
    notes.push(format!("running as {}", t.argv.join(" ")));
    Ok((cli, notes))
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    // Signals arrive on a small runtime of their own; they ask the send threads to stop. The
    // handlers are installed before sending starts: a SIGTERM just after `sending` used to find
    // none and kill the process outright.
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let watched = {
        use tokio::signal::unix::{signal, SignalKind};
        let _runtime = signals.enter();
        signal(SignalKind::terminate())
            .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
    };
    let handle = Dsim::start(cli.run.to_config())?;
    let controller = handle.controller().clone();
    // The katcp front ends by itself once the run has.
    if let Some(addr) = cli.run.katcp {
        if let Err(e) = dsim::katcp::start(addr, controller.clone()) {
            controller.request_stop();
            handle.wait();
            return Err(e.into());
        }
    }
    std::thread::Builder::new()
        .name("dsim-signals".into())
        .spawn(move || {
            signals.block_on(async {
                match watched {
                    Ok((mut term, mut int)) => tokio::select! {
                        _ = int.recv() => tracing::info!("SIGINT: stopping"),
                        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch SIGTERM");
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
                controller.request_stop();
            });
        })?;
    handle.wait();
    Ok(())
}

//! `fengine`: see `fengine --help`. The work is in the library (`fengine::app`); here are the
//! command line, logging, and SIGINT and SIGTERM turned into the engine's stop flag.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use clap::Parser;
use fengine::config::{katgpucbf, Cli, Command, RunArgs};

fn main() -> std::process::ExitCode {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if katgpucbf::invoked_as_fgpu(&argv0) {
        return fgpu_main();
    }
    let cli = match Cli::parse().with_env_token() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    init_logging();
    let result: anyhow::Result<()> = match (&cli.command, &cli.run) {
        (Some(Command::Bench(b)), _) => fengine::app::bench(b).map_err(Into::into),
        (Some(Command::Run(r)), _) | (None, Some(r)) => run(r),
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

/// Logs to stderr, RUST_LOG's filter (default info), colour only for a person at a terminal.
fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// Started as `fgpu`: katgpucbf's command line, translated to ours (docs/katgpucbf.md); the
/// notes and the equivalent `fengine` line go to the log before the run.
fn fgpu_main() -> std::process::ExitCode {
    let args = katgpucbf::FgpuArgs::parse();
    let translated = placement::CoreSet::allowed()
        .map_err(|e| fengine::config::ConfigError(format!("{e}.")))
        .and_then(|cores| katgpucbf::Translation::new(&args, &cores))
        .and_then(|t| Ok((t.run_args()?, t)));
    let (run_args, translation) = match translated {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    init_logging();
    for note in &translation.notes {
        tracing::info!("katgpucbf form: {note}");
    }
    tracing::info!("katgpucbf form: running as {}", translation.argv.join(" "));
    if let Some(cores) = &translation.widen_to {
        if let Err(e) = cores.pin_current_thread() {
            tracing::error!("cannot run on cores {cores}: {e}.");
            return std::process::ExitCode::FAILURE;
        }
    }
    match run(&run_args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `fengine run`, stopped cleanly by SIGINT or SIGTERM. The handlers are installed before the
/// engine logs its first line: a signal sent as soon as it logs anything then stops it instead of
/// finding no handler and killing the process.
fn run(args: &RunArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signals(stop.clone())?;
    fengine::app::run(args, stop)?;
    Ok(())
}

/// Watches SIGINT and SIGTERM on a small runtime of their own thread; either sets `stop`.
fn stop_on_signals(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the signal watcher: {e}."))?;
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        let _runtime = rt.enter();
        signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
    };
    std::thread::Builder::new()
        .name("fengine-signals".into())
        .spawn(move || {
            rt.block_on(async {
                let (mut int, mut term) = match signals {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(
                            "cannot watch for signals ({e}); stop the engine with SIGKILL"
                        );
                        return;
                    }
                };
                tokio::select! {
                    _ = int.recv() => tracing::info!("SIGINT: stopping"),
                    _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                }
                stop.store(true, Relaxed);
            })
        })
        .map_err(|e| anyhow::anyhow!("cannot start the signal watcher: {e}."))?;
    Ok(())
}

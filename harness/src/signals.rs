//! Ctrl-C and SIGTERM: the first sets a flag that every wait checks, so the harness stops
//! cleanly (children killed, summary printed); a second one exits at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Exit status after a second signal (128 + SIGINT, as a shell reports it).
const EXIT_ON_SECOND: i32 = 130;

/// Installs the handlers for SIGINT and SIGTERM: a signal exits at once when the flag is already
/// set (registered first, so that the first signal only sets it), then sets the flag.
pub fn install() {
    for sig in [SIGINT, SIGTERM] {
        let registered =
            signal_hook::flag::register_conditional_shutdown(sig, EXIT_ON_SECOND, &INTERRUPTED)
                .and_then(|_| signal_hook::flag::register(sig, &INTERRUPTED));
        if let Err(e) = registered {
            tracing::warn!("cannot watch signal {sig} ({e}); the harness stops only when killed");
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The run was interrupted by a signal.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// Sleeps `d` in short slices; Err if a signal came.
pub fn sleep(d: Duration) -> Result<(), Interrupted> {
    let end = Instant::now() + d;
    loop {
        if interrupted() {
            return Err(Interrupted);
        }
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

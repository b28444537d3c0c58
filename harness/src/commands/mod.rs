//! The harness's commands, one module each: its arguments (clap) and how it runs. Each brings
//! the system up through [`bringup`](crate::bringup), runs a measuring loop that produces
//! records, and hands the records to [`render`](crate::render).

use crate::bringup::Setup;

pub mod max_rate;
pub mod qualify;
pub mod response;
pub mod soak;
pub mod watch;

/// Says on stderr what [`bringup::setup`](crate::bringup::setup) launched, when the system is local.
fn announce(s: &Setup) {
    if s.local {
        eprintln!(
            "local system: fengine --backend {} ({}), dsim ({}), output {}",
            s.backend,
            s.services.engine.url(),
            s.services.dsim.url(),
            s.rx.endpoint()
        );
    }
}

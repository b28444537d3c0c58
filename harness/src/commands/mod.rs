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
    if s.local && s.array.is_none() {
        eprintln!(
            "local system: fengine --backend {} ({}), dsim ({}), output {} ({})",
            s.backend,
            s.services.engine.url(),
            s.services.dsim.url(),
            s.rx.endpoint(),
            s.geometry.bits
        );
    } else if s.local {
        eprintln!(
            "local array of {} antennas: fengine --backend {}, output {} ({})",
            s.services.antennas.len(),
            s.backend,
            s.rx.endpoint(),
            s.geometry.bits
        );
        for (i, a) in s.services.antennas.iter().enumerate() {
            eprintln!(
                "  antenna {i}: fengine ({}), dsim ({}), tone {}",
                a.engine.url(),
                a.dsim.url(),
                s.tones
                    .get(i)
                    .copied()
                    .flatten()
                    .map_or("none".into(), |t| format!("{} Hz", t.frequency))
            );
        }
    }
}

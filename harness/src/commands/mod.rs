//! The harness's commands, one module each: its arguments (clap) and how it runs. Each brings
//! the system up through [`bringup`](crate::bringup), runs a measuring loop that produces
//! records, and hands the records to [`render`](crate::render).

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;

use crate::bringup::{self, Geometry, Setup, SystemArgs};
use crate::receive::HeapSink;

pub mod max_rate;
pub mod response;
pub mod watch;

/// [`bringup::setup`], saying on stderr what was launched when the system is local.
fn bring_up(
    sys: &SystemArgs,
    backend: &str,
    urls: Option<(&str, &str)>,
    out_dir: Option<&Path>,
    sink: impl FnOnce(&Geometry, usize) -> Option<Arc<dyn HeapSink>>,
) -> Result<Setup> {
    let s = bringup::setup(sys, backend, urls, out_dir, sink)?;
    if s.local {
        eprintln!(
            "local system: fengine --backend {backend} ({}), dsim ({}), output {}",
            s.services.engine.url(),
            s.services.dsim.url(),
            s.rx.endpoint()
        );
    }
    Ok(s)
}

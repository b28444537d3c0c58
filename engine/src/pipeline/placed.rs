//! Stage threads that take their placement (cores, scheduling) themselves as they start, and
//! report whether the kernel let them before the pipeline goes on.

use crossbeam_channel::bounded;
use placement::Placement;

use super::{spawn, PipelineError, Stage};

/// [`spawn`]s a stage that first takes `placement` (cores, scheduling), and returns once it has:
/// a placement the kernel refuses fails the start with the crate's sentence.
pub(crate) fn spawn_placed(
    name: &str,
    placement: Placement,
    f: impl FnOnce() -> Result<(), PipelineError> + Send + 'static,
) -> Result<Stage, PipelineError> {
    let (placed_tx, placed_rx) = bounded(1);
    let thread = name.to_string();
    let t = spawn(name, move || {
        let placed = placement
            .apply()
            .map_err(|error| PipelineError::Placement { thread, error });
        let ok = placed.is_ok();
        let _ = placed_tx.send(placed);
        if ok {
            f()
        } else {
            Ok(())
        }
    })?;
    match placed_rx.recv() {
        Ok(Ok(())) => Ok(t),
        Ok(Err(e)) => {
            let _ = t.join();
            Err(e)
        }
        Err(_) => {
            let _ = t.join();
            Err(PipelineError::Thread {
                name: name.into(),
                error: std::io::Error::other("it stopped before it started"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use placement::{CoreSet, Policy, ThreadView};
    use spead::transport::loopback;

    use super::*;
    use crate::backend::HostBuffer;
    use crate::config::test_support::config;
    use crate::pipeline::{recv, StageSpecs};
    use crate::stats::Stats;

    /// A receive lane started as the pipeline starts it, with `--src-affinity` at one core the
    /// process may use: the kernel has it on that core alone. With `--realtime fifo:1` the lane
    /// runs under SCHED_FIFO where the process may ask for it, and the start fails with the
    /// placement crate's sentence where it may not.
    #[test]
    fn a_receive_lane_runs_where_its_flags_say() {
        let core = *CoreSet::allowed().unwrap().cores().last().unwrap();
        for realtime in ["other", "fifo:1"] {
            let cfg = config(&[
                "--src-affinity",
                &core.to_string(),
                "--recv-threads",
                "1",
                "--realtime",
                realtime,
            ]);
            let specs = StageSpecs::new(&cfg);
            let stats = Arc::new(Stats::for_config(&cfg));
            let stop = Arc::new(AtomicBool::new(false));
            let (to_pair, _chunks) = bounded(16);
            let (_returns_tx, returns) = bounded(16);
            let buffers = (0..4)
                .map(|_| HostBuffer::zeroed(cfg.input.geometry.chunk_bytes()))
                .collect();
            let (_sink, source) = loopback::pair(1);
            let lane = recv::lanes(
                &specs.recv,
                0,
                vec![vec![source]],
                buffers,
                to_pair,
                returns,
                &stats,
                &stop,
            )
            .remove(0);
            let name = lane.name();
            let placed = specs.placement.recv[0][0].clone();
            assert_eq!(placed.cores, Some(CoreSet::one(core)));
            match spawn_placed(&name, placed, move || lane.run()) {
                Ok(t) => {
                    let seen = ThreadView::named(&name);
                    stop.store(true, Ordering::Relaxed);
                    t.join().unwrap().unwrap();
                    let seen = seen.expect("the lane's thread in /proc");
                    assert_eq!(seen.cores, CoreSet::one(core));
                    assert_eq!(seen.policy, realtime.parse().unwrap());
                }
                Err(e) => {
                    assert_eq!(realtime.parse::<Policy>().unwrap(), Policy::Fifo(1));
                    let e = e.to_string();
                    assert!(
                        e.contains("fengine-recv0.0") && e.contains("CAP_SYS_NICE"),
                        "{e}"
                    );
                }
            }
        }
    }
}

//! Placement: a send thread started with `--affinity` at one core runs on that core alone, and
//! under SCHED_FIFO with `--realtime fifo:1` where the process may ask for it; where it may not,
//! the start fails with the placement crate's sentence.

mod common;

use std::time::Duration;

use common::{config, Capture};
use dsim::placement::{Affinity, PlacementRequest};
use placement::{CoreSet, Policy, ThreadView};

#[test]
fn send_threads_run_where_the_flags_say() {
    let core = *CoreSet::allowed().unwrap().cores().last().unwrap();
    for policy in [Policy::Other, Policy::Fifo(1)] {
        let cap = Capture::start([1, 1]);
        let mut cfg = config(&cap);
        cfg.rate = 1e7;
        cfg.placement = PlacementRequest {
            send: Some(Affinity::Cores(CoreSet::one(core))),
            policy,
            ..Default::default()
        };
        match dsim::Dsim::start(cfg) {
            Ok(d) => {
                let seen = [
                    ThreadView::named("dsim-p0-t0"),
                    ThreadView::named("dsim-p1-t0"),
                ];
                d.stop();
                cap.finish(Duration::from_millis(50));
                for s in seen {
                    let s = s.expect("the send thread in /proc");
                    assert_eq!((s.cores, s.policy), (CoreSet::one(core), policy));
                }
            }
            Err(e) => {
                cap.finish(Duration::from_millis(50));
                assert_eq!(policy, Policy::Fifo(1), "{e}");
                let e = e.to_string();
                assert!(e.contains("dsim-p") && e.contains("CAP_SYS_NICE"), "{e}");
            }
        }
    }
}

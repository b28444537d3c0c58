//! Where dsim's threads run (`--affinity`, `--main-affinity`, `--realtime`, `--lock-memory`):
//! each send thread on a core of its own, the rest of the process elsewhere, so that a busy host
//! does not hold a send thread back (a digitiser keeps to its clock; dsim should too).

pub use placement::Affinity;
use placement::{CoreSet, Placement, PlacementError, Policy};

use crate::config::BadRequest;

/// What the placement flags ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementRequest {
    /// The send threads' cores; `None`: wherever the kernel puts them.
    pub send: Option<Affinity>,
    /// Every other thread's cores (buffer building, control, monitor); with `auto` and without
    /// this, the cores the layout leaves.
    pub main: Option<CoreSet>,
    /// The send threads' scheduling policy.
    pub policy: Policy,
    /// `mlockall` at start.
    pub lock_memory: bool,
}

/// The placement of every send thread, and the cores of the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Send thread j of polarisation p: `send[p][j]`.
    pub send: [Vec<Placement>; 2],
    /// Cores for the rest of the process; `None`: left as they are.
    pub main: Option<CoreSet>,
}

impl PlacementRequest {
    /// The plan for `threads` send threads per polarisation; cores outside the process's own
    /// set are refused with a sentence.
    pub fn plan(&self, threads: usize) -> Result<Plan, BadRequest> {
        let refuse = |flag: &str, e: PlacementError| BadRequest(format!("{flag}: {e}."));
        let allowed = CoreSet::allowed().map_err(|e| refuse("--affinity", e))?;
        if let Some(main) = self.main.as_ref().filter(|c| !c.is_subset(&allowed)) {
            let e = PlacementError::NotAllowed {
                asked: main.to_string(),
                allowed: allowed.to_string(),
            };
            return Err(refuse("--main-affinity", e));
        }
        let dealt = match &self.send {
            Some(a) => Some(
                a.deal(2 * threads, &allowed)
                    .map_err(|e| refuse("--affinity", e))?,
            ),
            None => None,
        };
        let place = |i: usize| Placement {
            cores: dealt.as_ref().map(|d| d.threads[i].clone()),
            policy: self.policy,
        };
        Ok(Plan {
            send: [0, 1].map(|p| (0..threads).map(|j| place(p * threads + j)).collect()),
            main: self
                .main
                .clone()
                .or_else(|| dealt.as_ref().and_then(|d| d.rest.clone())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_cycle_and_auto_plans_within_the_process() {
        let allowed = CoreSet::allowed().unwrap();
        let first = allowed.cores()[0];
        let req = PlacementRequest {
            send: Some(format!("{first}").parse().unwrap()),
            policy: Policy::Rr(5),
            ..Default::default()
        };
        let plan = req.plan(2).unwrap();
        for p in &plan.send {
            assert_eq!(p.len(), 2);
            for pl in p {
                assert_eq!(pl.cores, Some(CoreSet::one(first)));
                assert_eq!(pl.policy, Policy::Rr(5));
            }
        }
        assert_eq!(plan.main, None);
        let auto = PlacementRequest {
            send: Some(Affinity::Auto),
            ..Default::default()
        };
        let plan = auto.plan(1).unwrap();
        assert!(plan.main.unwrap().is_subset(&allowed));
        assert!(plan.send[1][0].cores.as_ref().unwrap().is_subset(&allowed));
    }

    #[test]
    fn cores_the_process_lacks_are_refused() {
        let req = PlacementRequest {
            main: Some(CoreSet::one(1023)),
            ..Default::default()
        };
        let e = req.plan(1).unwrap_err().to_string();
        assert!(e.starts_with("--main-affinity: cores 1023"), "{e}");
    }
}

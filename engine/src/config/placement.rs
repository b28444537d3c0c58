//! Where the stream threads run (`--src-affinity`, `--dst-affinity`, `--pair-affinity`,
//! `--compute-affinity`, `--affinity auto`, `--realtime`, `--lock-memory`): one [`Placement`] per
//! thread that touches the stream, named as the thread is, checked against the cores the process
//! may use before anything starts.

use placement::{CoreSet, Layout, Placement, PlacementError, Topology};

use super::error::ConfigError;
use super::flags::RunArgs;
use crate::backend::POLS;

/// Every stream thread's placement, and what the rest of the process does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamPlacement {
    /// Receive lane j of polarisation p: `recv[p][j]`.
    pub recv: [Vec<Placement>; POLS],
    /// Per output, per send thread of it.
    pub send: Vec<Vec<Placement>>,
    /// The pairing thread; the thread that hands frames to the send threads shares it.
    pub pair: Placement,
    /// The thread that submits frames to the backend.
    pub compute: Placement,
    /// Cores of every other thread (control, logging, a CPU backend's pool): `--affinity auto`
    /// keeps them off the stream threads' cores; `None` leaves them where they are.
    pub rest: Option<CoreSet>,
    /// `mlockall` at start.
    pub lock_memory: bool,
}

/// `--affinity`'s one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AutoAffinity {
    /// Plan every stream thread's core from the host's topology.
    Auto,
}

impl StreamPlacement {
    /// The placement the flags of `a` ask for, for `lanes` receive threads per polarisation and
    /// `send_threads[k]` send threads of output k. Cores outside the process's own set are
    /// refused with a sentence.
    pub fn from_args(
        a: &RunArgs,
        lanes: usize,
        send_threads: &[usize],
    ) -> Result<Self, ConfigError> {
        let policy = a.realtime;
        let allowed = CoreSet::allowed().map_err(refuse)?;
        let sends: usize = send_threads.iter().sum();
        let (recv, send, pair, compute, rest) = if a.affinity.is_some() {
            let layout = Layout::plan(&Topology::read(&allowed), &[POLS * lanes, sends, 1, 1]);
            // One role each, in the order asked.
            let mut roles = layout.roles.into_iter();
            let mut role = || roles.next().unwrap_or_default();
            let (recv, send, pair, compute) = (role(), role(), role(), role());
            (
                Some(recv),
                Some(send),
                pair.into_iter().next(),
                compute.into_iter().next(),
                Some(layout.rest),
            )
        } else {
            for (flag, cores) in [
                ("--src-affinity", &a.src_affinity),
                ("--dst-affinity", &a.dst_affinity),
                ("--pair-affinity", &a.pair_affinity),
                ("--compute-affinity", &a.compute_affinity),
            ] {
                if let Some(c) = cores {
                    if !c.is_subset(&allowed) {
                        let e = PlacementError::NotAllowed {
                            asked: c.to_string(),
                            allowed: allowed.to_string(),
                        };
                        return Err(ConfigError(format!("{flag}: {e}.")));
                    }
                }
            }
            // One core per thread, cycling through the list (katgpucbf deals its lists so).
            let each = |c: &Option<CoreSet>, n: usize| {
                c.as_ref().map(|c| {
                    (0..n)
                        .map(|i| CoreSet::one(c.cores()[i % c.len()]))
                        .collect::<Vec<_>>()
                })
            };
            (
                each(&a.src_affinity, POLS * lanes),
                each(&a.dst_affinity, sends),
                a.pair_affinity.clone(),
                a.compute_affinity.clone(),
                None,
            )
        };
        let place = |cores: Option<CoreSet>| Placement { cores, policy };
        let nth = |v: &Option<Vec<CoreSet>>, i: usize| place(v.as_ref().map(|v| v[i].clone()));
        let mut first_send = 0;
        Ok(Self {
            recv: std::array::from_fn(|p| (0..lanes).map(|j| nth(&recv, p * lanes + j)).collect()),
            send: send_threads
                .iter()
                .map(|&n| {
                    let threads = (first_send..first_send + n)
                        .map(|i| nth(&send, i))
                        .collect();
                    first_send += n;
                    threads
                })
                .collect(),
            pair: place(pair),
            compute: place(compute),
            rest,
            lock_memory: a.lock_memory,
        })
    }

    /// Every stream thread by the name it runs under, with its placement: what the log and
    /// `GET /status` show.
    pub fn threads(&self) -> Vec<(String, Placement)> {
        let mut v = Vec::new();
        for (p, lanes) in self.recv.iter().enumerate() {
            for (j, pl) in lanes.iter().enumerate() {
                v.push((format!("fengine-recv{p}.{j}"), pl.clone()));
            }
        }
        v.push(("fengine-pair".into(), self.pair.clone()));
        v.push(("fengine-send".into(), self.pair.clone()));
        v.push(("fengine-compute".into(), self.compute.clone()));
        for (k, pl) in self.send.iter().flatten().enumerate() {
            v.push((format!("fengine-send{k}"), pl.clone()));
        }
        v
    }
}

fn refuse(e: PlacementError) -> ConfigError {
    ConfigError(format!("{e}."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{config, refusal};
    use placement::Policy;

    #[test]
    fn lists_deal_one_core_per_thread_cycling() {
        let allowed = CoreSet::allowed().unwrap();
        let first = allowed.cores()[0];
        let last = *allowed.cores().last().unwrap();
        let list = format!("{first},{last}");
        let c = config(&[
            "--src-affinity",
            &list,
            "--recv-threads",
            "1",
            "--realtime",
            "fifo:10",
        ]);
        let p = &c.placement;
        assert_eq!(p.recv[0][0].cores, Some(CoreSet::one(first)));
        assert_eq!(p.recv[1][0].cores, Some(CoreSet::one(last)));
        assert_eq!(p.recv[0][0].policy, Policy::Fifo(10));
        assert_eq!(p.send[0][0].cores, None);
        assert_eq!(p.send[0][0].policy, Policy::Fifo(10));
        let names: Vec<String> = p.threads().into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&"fengine-recv1.0".to_string()), "{names:?}");
        // Nothing asked, nothing placed.
        let none = config(&[]).placement;
        assert!(none.threads().iter().all(|(_, pl)| pl.is_default()));
        assert!(none.rest.is_none() && !none.lock_memory);
    }

    #[test]
    fn auto_plans_every_stream_thread() {
        let c = config(&["--affinity", "auto"]);
        let allowed = CoreSet::allowed().unwrap();
        for (name, pl) in c.placement.threads() {
            let cores = pl.cores.expect(&name);
            assert!(cores.is_subset(&allowed), "{name}: {cores}");
        }
        assert!(c.placement.rest.unwrap().is_subset(&allowed));
    }

    #[test]
    fn bad_lists_and_policies_are_sentences() {
        let e = refusal(&["--src-affinity", "3-1"]);
        assert!(e.contains("is not a list of cores"), "{e}");
        let e = refusal(&["--dst-affinity", "1023"]);
        assert!(e.contains("--dst-affinity") && e.contains("may use"), "{e}");
        let e = refusal(&["--realtime", "fifo:0"]);
        assert!(e.contains("is not a scheduling policy"), "{e}");
        let e = refusal(&["--affinity", "auto", "--src-affinity", "0"]);
        assert!(e.contains("cannot be used with"), "{e}");
        let e = refusal(&["--affinity", "some"]);
        assert!(e.contains("auto"), "{e}");
    }
}

//! An automatic layout: each stream thread on a physical core of its own where the host has
//! enough, the rest of the process on what is left.

use std::collections::BTreeMap;

use crate::CoreSet;

/// The cores a process may use, grouped into physical cores (hyperthread siblings together).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Physical cores, each its logical cores ascending, ordered by their first logical core.
    physical: Vec<Vec<usize>>,
}

impl Topology {
    /// The topology of `allowed`, from /sys; a core whose topology cannot be read counts as a
    /// physical core of its own.
    pub fn read(allowed: &CoreSet) -> Self {
        let read = |cpu: usize, what: &str| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        Self::from_ids(allowed.cores().iter().map(|&cpu| {
            let id = match (read(cpu, "physical_package_id"), read(cpu, "core_id")) {
                (Some(p), Some(c)) => (p, c),
                _ => (-1, cpu as i64),
            };
            (cpu, id)
        }))
    }

    /// From (logical core, (package, core)) pairs.
    pub fn from_ids(cpus: impl IntoIterator<Item = (usize, (i64, i64))>) -> Self {
        let mut by_id: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::new();
        for (cpu, id) in cpus {
            by_id.entry(id).or_default().push(cpu);
        }
        let mut physical: Vec<Vec<usize>> = by_id.into_values().collect();
        for p in &mut physical {
            p.sort_unstable();
        }
        physical.sort_by_key(|p| p[0]);
        Self { physical }
    }

    /// Number of physical cores.
    pub fn physical_cores(&self) -> usize {
        self.physical.len()
    }
}

/// Cores for the stream threads of each role, and for everything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Per role, one core per thread, in the order asked.
    pub roles: Vec<Vec<CoreSet>>,
    /// What the other threads (control, logging, the runtime) run on.
    pub rest: CoreSet,
    /// Whether some stream threads had to share a core (the host has too few).
    pub shared: bool,
}

impl Layout {
    /// Deals cores to `threads[r]` threads of each role r: first one logical core of each
    /// physical core, then their hyperthread siblings, then (too few cores) round again. The
    /// physical core of the lowest-numbered core, where a host's housekeeping tends to run, is
    /// kept for the rest of the process when the host has a physical core to spare.
    pub fn plan(topology: &Topology, threads: &[usize]) -> Self {
        let wanted: usize = threads.iter().sum();
        let physical = &topology.physical;
        let spare = physical.len() > wanted;
        let skip = usize::from(spare);
        // Logical cores in the order they are dealt: siblings 0 of every physical core, then 1...
        let depth = physical.iter().map(Vec::len).max().unwrap_or(1);
        let order: Vec<usize> = (0..depth)
            .flat_map(|s| {
                physical[skip..]
                    .iter()
                    .filter_map(move |p| p.get(s).copied())
            })
            .collect();
        let order = if order.is_empty() {
            physical.iter().flatten().copied().collect()
        } else {
            order
        };
        let mut next = 0;
        let mut roles = Vec::with_capacity(threads.len());
        for &n in threads {
            let mut cores = Vec::with_capacity(n);
            for _ in 0..n {
                cores.push(CoreSet::one(order[next % order.len()]));
                next += 1;
            }
            roles.push(cores);
        }
        let used: Vec<usize> = order.iter().take(wanted).copied().collect();
        let all = physical.iter().flatten().copied();
        let rest = CoreSet::new(all.clone().filter(|c| !used.contains(c)))
            .or_else(|| CoreSet::new(all))
            .unwrap_or_else(|| CoreSet::one(0));
        Self {
            roles,
            rest,
            shared: wanted > order.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8 physical cores with two siblings each, numbered as Linux numbers them (i and i + 8).
    fn smt16() -> Topology {
        Topology::from_ids((0..16).map(|c| (c, (0, (c % 8) as i64))))
    }

    #[test]
    fn stream_threads_get_physical_cores_of_their_own() {
        let l = Layout::plan(&smt16(), &[2, 2, 1]);
        let flat: Vec<usize> = l.roles.iter().flatten().map(|c| c.cores()[0]).collect();
        assert_eq!(flat, vec![1, 2, 3, 4, 5]);
        assert!(!l.shared);
        // The rest: core 0, its sibling and every core not dealt.
        assert!(l.rest.cores().contains(&0) && l.rest.cores().contains(&8));
        assert!(!l.rest.cores().contains(&3));
    }

    #[test]
    fn siblings_then_sharing_when_the_host_is_small() {
        let l = Layout::plan(&smt16(), &[10]);
        let flat: Vec<usize> = l.roles[0].iter().map(|c| c.cores()[0]).collect();
        assert_eq!(flat, (0..10).collect::<Vec<_>>());
        let two = Topology::from_ids([(0, (0, 0)), (1, (0, 1))]);
        let l = Layout::plan(&two, &[2, 2]);
        assert!(l.shared);
        assert_eq!(l.roles[1][1], CoreSet::one(1));
        assert_eq!(l.rest.to_string(), "0-1");
    }

    #[test]
    fn reads_this_host() {
        let allowed = CoreSet::allowed().unwrap();
        let t = Topology::read(&allowed);
        assert!(t.physical_cores() >= 1 && t.physical_cores() <= allowed.len());
    }
}

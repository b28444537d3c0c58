//! What a program's affinity flag asks for: a core list dealt one core per thread, or `auto`, a
//! layout planned from the host's topology.

use std::fmt;
use std::str::FromStr;

use crate::{CoreSet, Layout, PlacementError, Topology};

/// Cores for a group of threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Affinity {
    /// Thread i takes the i-th core of the list, cycling through it when it is short.
    Cores(CoreSet),
    /// A physical core of its own for each thread while the host has enough ([`Layout::plan`]).
    Auto,
}

/// One core per thread, and, for [`Affinity::Auto`], the cores left for the rest of the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dealt {
    /// Thread i's core.
    pub threads: Vec<CoreSet>,
    /// What the layout leaves for every other thread; `None` for a list.
    pub rest: Option<CoreSet>,
}

impl Affinity {
    /// Cores for `n` threads among `allowed` (the process's own, [`CoreSet::allowed`]); a list
    /// with cores outside them is refused.
    pub fn deal(&self, n: usize, allowed: &CoreSet) -> Result<Dealt, PlacementError> {
        match self {
            Self::Cores(c) => {
                if !c.is_subset(allowed) {
                    return Err(PlacementError::NotAllowed {
                        asked: c.to_string(),
                        allowed: allowed.to_string(),
                    });
                }
                let threads = (0..n).map(|i| CoreSet::one(c.cores()[i % c.len()]));
                Ok(Dealt {
                    threads: threads.collect(),
                    rest: None,
                })
            }
            Self::Auto => {
                let mut layout = Layout::plan(&Topology::read(allowed), &[n]);
                Ok(Dealt {
                    threads: layout.roles.pop().unwrap_or_default(),
                    rest: Some(layout.rest),
                })
            }
        }
    }
}

impl FromStr for Affinity {
    type Err = PlacementError;

    /// `auto`, or a list such as `0-3,8`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            Ok(Self::Auto)
        } else {
            s.parse().map(Self::Cores)
        }
    }
}

impl fmt::Display for Affinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cores(c) => c.fmt(f),
            Self::Auto => f.write_str("auto"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_cycle_auto_plans_and_strangers_are_refused() {
        let allowed: CoreSet = "0-3".parse().unwrap();
        let d = "2-3"
            .parse::<Affinity>()
            .unwrap()
            .deal(3, &allowed)
            .unwrap();
        let cores: Vec<usize> = d.threads.iter().map(|c| c.cores()[0]).collect();
        assert_eq!((cores, d.rest), (vec![2, 3, 2], None));
        let e = "4"
            .parse::<Affinity>()
            .unwrap()
            .deal(1, &allowed)
            .unwrap_err();
        assert!(e.to_string().contains("not all among the cores"), "{e}");
        assert_eq!("auto".parse::<Affinity>().unwrap(), Affinity::Auto);
        assert!("auto,1".parse::<Affinity>().is_err());
        let here = CoreSet::allowed().unwrap();
        let d = Affinity::Auto.deal(2, &here).unwrap();
        assert_eq!(d.threads.len(), 2);
        assert!(d.threads.iter().all(|c| c.is_subset(&here)));
        assert!(d.rest.unwrap().is_subset(&here));
    }
}

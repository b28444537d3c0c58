//! Where the threads that touch the stream run, and what the scheduler did to them.
//!
//! A receive thread that is not scheduled for 0.2 s loses the packets the socket could not hold;
//! a host under steady CPU pressure does that to ordinary threads every few minutes. The remedy is
//! the usual one for a real-time data path: each stream thread on cores of its own
//! ([`CoreSet`], [`Layout`]), real-time scheduling ([`Policy`]), and memory locked so that no page
//! fault stalls it ([`lock_memory`]). [`SchedStats`] reads how long a thread waited to run, so
//! that a stall can be put down to the scheduler or not.
//!
//! Every setting is asked for by the program's flags and applied by the thread itself when it
//! starts ([`Placement::apply`]); a refusal by the kernel comes back as a [`PlacementError`]
//! whose message is one sentence a user can act on.

#![warn(missing_docs)]

mod affinity;
mod cores;
mod error;
mod layout;
mod memory;
mod observe;
mod policy;
mod stats;

pub use affinity::{Affinity, Dealt};
pub use cores::CoreSet;
pub use error::PlacementError;
pub use layout::{Layout, Topology};
pub use memory::lock_memory;
pub use observe::ThreadView;
pub use policy::Policy;
pub use stats::{current_tid, SchedStats};

/// How one thread runs: on which cores, under which scheduling policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Cores the thread may run on; `None` leaves the process's own set.
    pub cores: Option<CoreSet>,
    /// Scheduling policy; [`Policy::Other`] leaves the thread as it was.
    pub policy: Policy,
}

impl Placement {
    /// Pins the calling thread and sets its policy. Nothing is changed when both are left as
    /// they are; on an error the thread keeps whatever of the two had been applied before it.
    pub fn apply(&self) -> Result<(), PlacementError> {
        if let Some(cores) = &self.cores {
            cores.pin_current_thread()?;
        }
        self.policy.apply_to_current_thread()
    }

    /// Whether this placement changes anything.
    pub fn is_default(&self) -> bool {
        self.cores.is_none() && self.policy == Policy::Other
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cores {
            Some(c) => write!(f, "cores {c}, {}", self.policy),
            None => write!(f, "any core, {}", self.policy),
        }
    }
}

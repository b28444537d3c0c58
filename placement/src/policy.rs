//! Scheduling policies: the kernel's normal one, or real-time FIFO or round-robin at a priority.

use std::fmt;
use std::str::FromStr;

use crate::PlacementError;

/// How the kernel schedules a thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// The normal time-sharing policy (SCHED_OTHER): left as it is.
    #[default]
    Other,
    /// SCHED_FIFO at a priority from 1 to 99: runs until it blocks or a higher priority runs.
    Fifo(u8),
    /// SCHED_RR at a priority from 1 to 99: as FIFO, with time slices among equal priorities.
    Rr(u8),
}

impl Policy {
    /// Whether it is a real-time policy.
    pub fn is_realtime(self) -> bool {
        self != Policy::Other
    }

    /// Sets the calling thread's policy; [`Policy::Other`] changes nothing.
    pub fn apply_to_current_thread(self) -> Result<(), PlacementError> {
        let (policy, priority) = match self {
            Policy::Other => return Ok(()),
            Policy::Fifo(p) => (libc::SCHED_FIFO, p),
            Policy::Rr(p) => (libc::SCHED_RR, p),
        };
        let param = libc::sched_param {
            sched_priority: i32::from(priority),
        };
        // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
        let r = unsafe { libc::sched_setscheduler(0, policy, &param) };
        if r == 0 {
            Ok(())
        } else {
            Err(PlacementError::Realtime {
                policy: self.to_string(),
                error: std::io::Error::last_os_error(),
            })
        }
    }
}

impl FromStr for Policy {
    type Err = PlacementError;

    /// `fifo:PRIORITY`, `rr:PRIORITY` (1 to 99) or `other`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            PlacementError::Parse(format!(
                "{s:?} is not a scheduling policy; write fifo:PRIORITY or rr:PRIORITY with a \
                 priority from 1 to 99, or other"
            ))
        };
        if s == "other" {
            return Ok(Policy::Other);
        }
        let (name, prio) = s.split_once(':').ok_or_else(bad)?;
        let prio: u8 = prio.parse().map_err(|_| bad())?;
        if !(1..=99).contains(&prio) {
            return Err(bad());
        }
        match name {
            "fifo" => Ok(Policy::Fifo(prio)),
            "rr" => Ok(Policy::Rr(prio)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Other => f.write_str("other"),
            Policy::Fifo(p) => write!(f, "fifo:{p}"),
            Policy::Rr(p) => write!(f, "rr:{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for s in ["fifo:50", "rr:1", "other"] {
            assert_eq!(s.parse::<Policy>().unwrap().to_string(), s);
        }
        for s in ["fifo", "fifo:0", "rr:100", "idle:3", "FIFO:5"] {
            assert!(s.parse::<Policy>().is_err(), "{s}");
        }
    }

    #[test]
    fn realtime_is_set_or_refused_with_a_sentence() {
        std::thread::spawn(|| match Policy::Fifo(1).apply_to_current_thread() {
            Ok(()) => {
                // SAFETY: reads the calling thread's policy.
                assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_FIFO);
            }
            Err(e) => assert!(e.to_string().contains("needs CAP_SYS_NICE"), "{e}"),
        })
        .join()
        .unwrap();
    }
}

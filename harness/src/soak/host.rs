//! Whether the host, not the system under test, stood still when data was lost: the hypervisor's
//! steal in the sample intervals with loss against those without.
//!
//! On a virtual machine the hypervisor may run something else on the host's virtual CPUs. A
//! receive thread on such a CPU stands still as if held off, yet the kernel's scheduler
//! statistics (the engine's stall figures) do not see it: the guest thinks the thread ran. Only
//! the host's `/proc/stat` steal column does.

use super::risk::loss_intervals;
use crate::record::soak::SoakSample;

/// Steal below this many cores, on average over an interval, is not worth naming.
const NOTABLE_STEAL_CORES: f64 = 0.25;

/// The host's CPU over a soak, split by whether an interval lost data.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostOverSoak {
    pub cores: usize,
    /// The largest busy and steal figures of any interval (average cores).
    pub busiest: f64,
    pub most_steal: f64,
    /// Mean steal (cores) over the intervals with loss and those without, and how many each.
    pub steal_with_loss: Option<f64>,
    pub with_loss: usize,
    /// Of the intervals with loss, those with notable steal (a quarter of a core or more).
    pub with_loss_and_steal: usize,
    pub steal_without_loss: Option<f64>,
    pub without_loss: usize,
}

/// The split of `samples` (in order; each sample's host figures cover the interval that ends at
/// it), or None when no sample has them.
pub fn over_soak(samples: &[SoakSample]) -> Option<HostOverSoak> {
    let mut h = HostOverSoak::default();
    let (mut with, mut without) = (0.0, 0.0);
    for (s, lost) in samples.iter().zip(loss_intervals(samples)) {
        let Some(cpu) = s.host else { continue };
        h.cores = cpu.cores;
        h.busiest = h.busiest.max(cpu.busy);
        h.most_steal = h.most_steal.max(cpu.steal);
        if lost {
            with += cpu.steal;
            h.with_loss += 1;
            h.with_loss_and_steal += usize::from(cpu.steal >= NOTABLE_STEAL_CORES);
        } else {
            without += cpu.steal;
            h.without_loss += 1;
        }
    }
    if h.with_loss + h.without_loss == 0 {
        return None;
    }
    h.steal_with_loss = (h.with_loss > 0).then(|| with / h.with_loss as f64);
    h.steal_without_loss = (h.without_loss > 0).then(|| without / h.without_loss as f64);
    Some(h)
}

impl HostOverSoak {
    /// One line for the soak's summary: the host's load and steal, and, where data was lost, how
    /// much steal the intervals with loss had against those without.
    pub fn line(&self) -> String {
        let mut out = format!(
            "host: busy up to {:.1} of {} cores in an interval, steal up to {:.2}",
            self.busiest, self.cores, self.most_steal
        );
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        if let Some(w) = self.steal_with_loss {
            out.push_str(&format!(
                "; steal {w:.2} cores on average in the {} interval{} with loss",
                self.with_loss,
                plural(self.with_loss)
            ));
            if let Some(wo) = self.steal_without_loss {
                out.push_str(&format!(", {wo:.2} in the {} without", self.without_loss));
            }
            if w >= NOTABLE_STEAL_CORES && self.steal_without_loss.is_none_or(|wo| w > 2.0 * wo) {
                out.push_str(
                    ": the hypervisor held the host's CPUs when data was lost, which no thread's \
                     figures show",
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::soak::HostCpu;

    fn sample(missing: f64, steal: Option<f64>) -> SoakSample {
        SoakSample {
            losses: [("engine_missing_input".to_string(), missing)].into(),
            host: steal.map(|steal| HostCpu {
                busy: 10.0 + steal,
                steal,
                cores: 16,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn steal_is_split_by_the_intervals_that_lost_data() {
        // Clean while steal is nil, then an interval with 2 cores stolen loses data.
        let s = [
            sample(0.0, None),
            sample(0.0, Some(0.04)),
            sample(0.0, Some(0.02)),
            sample(2e6, Some(2.0)),
        ];
        let h = over_soak(&s).unwrap();
        assert_eq!(
            (h.with_loss, h.without_loss, h.with_loss_and_steal),
            (1, 2, 1)
        );
        assert_eq!(h.steal_with_loss, Some(2.0));
        assert!((h.steal_without_loss.unwrap() - 0.03).abs() < 1e-12);
        assert_eq!(h.most_steal, 2.0);
        let line = h.line();
        assert!(
            line.contains(
                "steal 2.00 cores on average in the 1 interval with loss, 0.03 in the 2 without"
            ),
            "{line}"
        );
        assert!(line.contains("the hypervisor held"), "{line}");
    }

    #[test]
    fn loss_without_steal_is_not_blamed_on_the_host() {
        let s = [
            sample(0.0, None),
            sample(5.0, Some(0.01)),
            sample(9.0, Some(0.0)),
        ];
        let h = over_soak(&s).unwrap();
        assert_eq!(h.with_loss_and_steal, 0);
        let line = h.line();
        assert!(line.contains("in the 2 intervals with loss"), "{line}");
        assert!(!line.contains("hypervisor"), "{line}");
    }

    #[test]
    fn no_host_figures_no_line() {
        assert_eq!(over_soak(&[sample(0.0, None), sample(1.0, None)]), None);
    }
}

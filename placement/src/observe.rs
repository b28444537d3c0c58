//! What the kernel says a thread of this process runs with: its cores and its policy, read back
//! from /proc, so that a placement can be checked from outside the thread (tests, diagnostics).

use crate::{CoreSet, Policy};

/// A thread of this process as the kernel sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadView {
    /// Its id (`ps -L`'s LWP).
    pub tid: i32,
    /// The cores it may run on.
    pub cores: CoreSet,
    /// Its policy; policies other than FIFO and RR (batch, idle) read as [`Policy::Other`].
    pub policy: Policy,
}

impl ThreadView {
    /// The first thread of this process named `name` (the kernel keeps 15 bytes of a name),
    /// `None` where there is none or /proc cannot be read.
    pub fn named(name: &str) -> Option<Self> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let dir = task.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            if comm.trim_end_matches('\n') != name {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let cores = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .parse()
                .ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            return Some(Self {
                tid: task.file_name().to_str()?.parse().ok()?,
                cores,
                policy: policy_of_stat(&stat)?,
            });
        }
        None
    }
}

/// The policy in a /proc stat line: fields 40 (real-time priority) and 41 (policy), counted
/// after the name, which is in parentheses and may hold spaces.
fn policy_of_stat(stat: &str) -> Option<Policy> {
    let after = stat.get(stat.rfind(')')? + 2..)?;
    // `after` starts at field 3 (state).
    let mut fields = after.split_whitespace().skip(40 - 3);
    let priority: u8 = fields.next()?.parse().ok()?;
    let policy: i32 = fields.next()?.parse().ok()?;
    Some(match policy {
        libc::SCHED_FIFO => Policy::Fifo(priority),
        libc::SCHED_RR => Policy::Rr(priority),
        _ => Policy::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_named_thread_back() {
        let all = CoreSet::allowed().unwrap();
        let core = CoreSet::one(*all.cores().last().unwrap());
        let pinned = core.clone();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("observe-test".into())
            .spawn(move || {
                pinned.pin_current_thread().unwrap();
                let _ = rx.recv();
            })
            .unwrap();
        // Pinned once the thread has run its first line; wait for it.
        let mut seen = None;
        for _ in 0..200 {
            seen = ThreadView::named("observe-test").filter(|v| v.cores == core);
            if seen.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        tx.send(()).unwrap();
        t.join().unwrap();
        let v = seen.expect("the thread, pinned");
        assert_eq!(v.policy, Policy::Other);
        assert!(ThreadView::named("no-such-thread").is_none());
    }

    #[test]
    fn the_policy_is_read_past_a_name_with_spaces() {
        let mut line = String::from("7 (a (b) c) S");
        // Fields 4 to 39, then priority 50 and policy 1 (FIFO).
        for _ in 4..=39 {
            line.push_str(" 0");
        }
        line.push_str(" 50 1 0 0");
        assert_eq!(policy_of_stat(&line), Some(Policy::Fifo(50)));
    }
}

//! Sets of cores: the `0-3,8` list form of taskset and cpuset, and pinning a thread to one.

use std::fmt;
use std::str::FromStr;

use crate::PlacementError;

/// Highest core number accepted: the kernel's `cpu_set_t` holds 1024.
const MAX_CORE: usize = libc::CPU_SETSIZE as usize - 1;

/// A non-empty set of core numbers, in ascending order without repeats.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoreSet(Vec<usize>);

impl CoreSet {
    /// The set of `cores` (sorted, repeats dropped); `None` when empty or past the largest
    /// core the kernel can name.
    pub fn new(cores: impl IntoIterator<Item = usize>) -> Option<Self> {
        let mut v: Vec<usize> = cores.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        (!v.is_empty() && v.iter().all(|&c| c <= MAX_CORE)).then_some(Self(v))
    }

    /// One core.
    pub fn one(core: usize) -> Self {
        Self(vec![core.min(MAX_CORE)])
    }

    /// The cores, ascending.
    pub fn cores(&self) -> &[usize] {
        &self.0
    }

    /// Number of cores.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a set holds at least one core.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every core of `self` is in `other`.
    pub fn is_subset(&self, other: &CoreSet) -> bool {
        self.0.iter().all(|c| other.0.binary_search(c).is_ok())
    }

    /// The cores the calling thread may run on. Call it before pinning anything, from the main
    /// thread, to learn what the process was given (by taskset, a cpuset, a container's
    /// `cpuset`).
    pub fn allowed() -> Result<Self, PlacementError> {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        if r != 0 {
            return Err(PlacementError::Parse(format!(
                "could not read the process's cores: {}",
                std::io::Error::last_os_error()
            )));
        }
        let cores = (0..=MAX_CORE).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
        Self::new(cores).ok_or_else(|| PlacementError::Parse("the process has no core".into()))
    }

    /// Restricts the calling thread to these cores.
    pub fn pin_current_thread(&self) -> Result<(), PlacementError> {
        // SAFETY: as in `allowed`; CPU_SET stays within the set (cores are at most MAX_CORE).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &self.0 {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        if r == 0 {
            Ok(())
        } else {
            Err(PlacementError::Pin {
                cores: self.to_string(),
                error: std::io::Error::last_os_error(),
            })
        }
    }
}

impl FromStr for CoreSet {
    type Err = PlacementError;

    /// `0-3,8,10-11`: numbers and inclusive ranges, comma-separated.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            PlacementError::Parse(format!(
                "{s:?} is not a list of cores ({why}); write numbers and ranges such as 0-3,8"
            ))
        };
        let num = |t: &str| -> Result<usize, PlacementError> {
            let n: usize = t
                .trim()
                .parse()
                .map_err(|_| bad("a part is not a number"))?;
            if n > MAX_CORE {
                return Err(bad("a core is past 1023"));
            }
            Ok(n)
        };
        let mut cores = Vec::new();
        for part in s.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(bad("a range runs backwards"));
                    }
                    cores.extend(a..=b);
                }
                None => cores.push(num(part)?),
            }
        }
        Self::new(cores).ok_or_else(|| bad("it is empty"))
    }
}

impl fmt::Display for CoreSet {
    /// The shortest list form: `0-3,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j > i {
                write!(f, "{}-{}", self.0[i], self.0[j])?;
            } else {
                write!(f, "{}", self.0[i])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_lists_and_ranges() {
        let s: CoreSet = "8,0-3, 2".parse().unwrap();
        assert_eq!(s.cores(), &[0, 1, 2, 3, 8]);
        assert_eq!(s.to_string(), "0-3,8");
        for bad in ["", "a", "3-1", "1,,2", "2000", "-1"] {
            let e = bad.parse::<CoreSet>().unwrap_err().to_string();
            assert!(e.contains("is not a list of cores"), "{bad}: {e}");
        }
    }

    #[test]
    fn pins_the_calling_thread_within_what_it_has() {
        let all = CoreSet::allowed().unwrap();
        let first = CoreSet::one(all.cores()[0]);
        std::thread::spawn(move || {
            first.pin_current_thread().unwrap();
            assert_eq!(CoreSet::allowed().unwrap(), first);
        })
        .join()
        .unwrap();
    }

    proptest! {
        #[test]
        fn display_parses_back(cores in proptest::collection::vec(0usize..1024, 1..40)) {
            let s = CoreSet::new(cores).unwrap();
            prop_assert_eq!(s.to_string().parse::<CoreSet>().unwrap(), s);
        }
    }
}

//! Locked memory: no page of the process is swapped out or faulted in lazily under a stream
//! thread.

use crate::PlacementError;

/// Locks every page the process has and will have (`mlockall(MCL_CURRENT | MCL_FUTURE)`).
pub fn lock_memory() -> Result<(), PlacementError> {
    // SAFETY: mlockall takes flags only.
    let r = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if r == 0 {
        Ok(())
    } else {
        Err(PlacementError::Lock {
            error: std::io::Error::last_os_error(),
        })
    }
}

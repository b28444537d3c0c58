//! Waiting on one non-blocking socket with a timeout, so a dedicated thread can block without
//! spinning and still look at its stop flag between waits.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// What to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    Read,
    Write,
}

/// Waits until `fd` is ready or `timeout` passes. Returns false on timeout, true when the caller
/// should try its syscall again (ready, or woken by a signal: the caller loops to its deadline).
pub(crate) fn wait(fd: &impl AsRawFd, ready: Ready, timeout: Duration) -> io::Result<bool> {
    let events = match ready {
        Ready::Read => libc::POLLIN,
        Ready::Write => libc::POLLOUT,
    };
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // ppoll takes nanoseconds, so short timeouts neither round down to a busy loop nor up to 1 ms.
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec for the duration of the call; no signal mask.
    let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if r >= 0 {
        return Ok(r > 0);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted {
        Ok(true)
    } else {
        Err(e)
    }
}

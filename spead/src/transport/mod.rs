//! UDP transport: sockets that probe what the kernel offers ([`socket`]), batched receive with GRO
//! ([`recv`]), batched send with GSO or `sendmmsg` ([`send`]), and an exact-rate pacer ([`pace`]).
//!
//! The data path runs on dedicated threads with non-blocking sockets (quinn-udp's requirement),
//! waiting in `poll` with a timeout so that a thread can notice a stop flag.

pub mod pace;
pub mod recv;
pub mod send;
pub mod socket;

pub use pace::Pacer;
pub use recv::Receiver;
pub use send::Sender;
pub use socket::{Caps, Endpoint, SocketConfig, UdpSocket};

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Waits until `fd` is readable (`events = POLLIN`) or writable (`POLLOUT`), or `timeout` passes.
/// Returns false on timeout.
pub(crate) fn wait_fd(fd: &impl AsRawFd, events: i16, timeout: Duration) -> io::Result<bool> {
    let raw: RawFd = fd.as_raw_fd();
    let mut pfd = libc::pollfd {
        fd: raw,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

//! The raw syscalls quinn-udp does not offer: a gathering `sendmsg` with a `UDP_SEGMENT` (GSO)
//! control message, `sendmmsg`, and integer socket options. Nothing here waits or retries
//! except on EINTR; policy lives in `send.rs`.

use std::io;
use std::mem::{self, MaybeUninit};
use std::net::SocketAddr;
use std::os::fd::RawFd;

use socket2::SockAddr;

/// Most iovecs one GSO send gathers (UDP_MAX_SEGMENTS is 64 on older kernels, so never more).
pub(crate) const MAX_IOV: usize = 64;
/// Most datagrams per `sendmmsg` call.
pub(crate) const MMSG_BATCH: usize = 64;

/// Room for one `cmsghdr` carrying a u16, 8-byte aligned as `cmsghdr` requires.
#[repr(C, align(8))]
struct SegmentCmsg([u8; 32]);

/// Sends the concatenation of `parts` to `dest` in one `sendmsg`: as one datagram, or with
/// `segment`, as GSO datagrams of `segment` bytes each (the last may be shorter). Adjacent parts
/// are merged into one iovec. Returns the bytes sent.
pub(crate) fn sendmsg<'a>(
    fd: RawFd,
    dest: &SockAddr,
    parts: impl IntoIterator<Item = &'a [u8]>,
    segment: Option<u16>,
) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV];
    let mut n = 0;
    for p in parts {
        let base = p.as_ptr() as usize;
        // Only pointers and lengths go to the kernel, so merging neighbours is sound.
        if n > 0 && iov[n - 1].iov_base as usize + iov[n - 1].iov_len == base {
            iov[n - 1].iov_len += p.len();
            continue;
        }
        if n == MAX_IOV {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many parts for one sendmsg",
            ));
        }
        iov[n] = libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        };
        n += 1;
    }
    let mut cmsg = SegmentCmsg([0; 32]);
    // SAFETY: a zeroed msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_name = dest.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = dest.len();
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    if let Some(size) = segment {
        // SAFETY: CMSG_SPACE(2) = 24 fits the 32-byte aligned buffer; the header is written
        // through CMSG_FIRSTHDR of a msghdr whose control buffer is that buffer.
        unsafe {
            let space = libc::CMSG_SPACE(mem::size_of::<u16>() as u32) as usize;
            debug_assert!(space <= mem::size_of::<SegmentCmsg>());
            msg.msg_control = cmsg.0.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, size);
        }
    }
    loop {
        // SAFETY: msg points at iovecs, an address and a control buffer that outlive the call.
        let r = unsafe { libc::sendmsg(fd, &msg, 0) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends up to [`MMSG_BATCH`] datagrams, each to its own address and gathered from its two
/// pieces (either may be empty), in one `sendmmsg`. Returns how many the kernel took (at least
/// one), or the error of the first.
pub(crate) fn sendmmsg<'a>(
    fd: RawFd,
    datagrams: impl IntoIterator<Item = (SocketAddr, [&'a [u8]; 2])>,
) -> io::Result<usize> {
    let mut addrs: [MaybeUninit<SockAddr>; MMSG_BATCH] =
        [const { MaybeUninit::uninit() }; MMSG_BATCH];
    let mut iov = [[libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2]; MMSG_BATCH];
    // SAFETY: zeroed mmsghdrs are valid empty headers.
    let mut hdrs: [libc::mmsghdr; MMSG_BATCH] = unsafe { mem::zeroed() };
    let mut n = 0;
    let mut named = 0;
    // Consecutive datagrams to one destination share one address.
    let mut current: Option<(SocketAddr, usize)> = None;
    for (dest, pieces) in datagrams.into_iter().take(MMSG_BATCH) {
        let slot = match current {
            Some((d, slot)) if d == dest => slot,
            _ => {
                addrs[named].write(SockAddr::from(dest));
                current = Some((dest, named));
                named += 1;
                named - 1
            }
        };
        // SAFETY: every slot below `named` has been written.
        let addr = unsafe { addrs[slot].assume_init_ref() };
        let mut parts = 0;
        for p in pieces.into_iter().filter(|p| !p.is_empty()) {
            iov[n][parts] = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
            parts += 1;
        }
        let h = &mut hdrs[n].msg_hdr;
        h.msg_name = addr.as_ptr() as *mut libc::c_void;
        h.msg_namelen = addr.len();
        h.msg_iov = iov[n].as_mut_ptr();
        h.msg_iovlen = parts as _;
        n += 1;
    }
    if n == 0 {
        return Ok(0);
    }
    loop {
        // SAFETY: the first n headers point at initialised addresses and iovecs that outlive
        // the call.
        let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, 0) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sets an integer socket option.
pub(crate) fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads one c_int from a valid pointer.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

//! Batched send. The caller lays datagrams of one size out back to back in a buffer (the last may
//! be shorter); they go out as GSO super-packets of up to 64 KiB where the kernel offers GSO, or
//! in `sendmmsg` batches where it does not.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::SockAddr;

use super::socket::UdpSocket;
use super::wait_fd;

/// Largest UDP payload one GSO send may carry over IPv4.
const MAX_GSO_BYTES: usize = 65_507;
/// Datagrams per `sendmmsg` call on the fallback path.
const MMSG_BATCH: usize = 64;
/// How long to wait for buffer space before reporting an error.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Sender {
    socket: UdpSocket,
    datagrams: u64,
    bytes: u64,
    syscalls: u64,
}

impl Sender {
    pub fn new(socket: UdpSocket) -> Self {
        Self {
            socket,
            datagrams: 0,
            bytes: 0,
            syscalls: 0,
        }
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// (datagrams, bytes, syscalls) sent so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        (self.datagrams, self.bytes, self.syscalls)
    }

    /// Sends `buf` as datagrams of `segment` bytes (the last may be shorter) to `dest`, waiting
    /// for socket space as needed. Errors only when the socket stays full or the kernel refuses.
    pub fn send_segments(
        &mut self,
        dest: SocketAddr,
        buf: &[u8],
        segment: usize,
    ) -> io::Result<()> {
        if buf.is_empty() || segment == 0 {
            return Ok(());
        }
        let per_send = self
            .socket
            .caps()
            .gso_segments
            .min(MAX_GSO_BYTES / segment)
            .max(1);
        if per_send > 1 {
            for part in buf.chunks(per_send * segment) {
                if let Err(e) = self.send_gso(dest, part, segment) {
                    if e.raw_os_error() == Some(libc::EIO) || e.raw_os_error() == Some(libc::EINVAL)
                    {
                        // The device refused GSO: carry on without it, as quinn-udp does.
                        tracing::warn!("UDP GSO refused ({e}); falling back to sendmmsg");
                        self.socket.disable_gso();
                        return self.send_segments(dest, part, segment);
                    }
                    return Err(e);
                }
            }
            Ok(())
        } else {
            self.send_mmsg(dest, buf, segment)
        }
    }

    fn send_gso(&mut self, dest: SocketAddr, part: &[u8], segment: usize) -> io::Result<()> {
        let transmit = quinn_udp::Transmit {
            destination: dest,
            ecn: None,
            contents: part,
            segment_size: Some(segment),
            src_ip: None,
        };
        loop {
            match self
                .socket
                .state()
                .try_send(self.socket.socket().into(), &transmit)
            {
                Ok(()) => {
                    self.syscalls += 1;
                    self.datagrams += part.len().div_ceil(segment) as u64;
                    self.bytes += part.len() as u64;
                    return Ok(());
                }
                Err(e) => self.wait_or_fail(e)?,
            }
        }
    }

    fn send_mmsg(&mut self, dest: SocketAddr, buf: &[u8], segment: usize) -> io::Result<()> {
        let addr = SockAddr::from(dest);
        let datagrams: Vec<&[u8]> = buf.chunks(segment).collect();
        for batch in datagrams.chunks(MMSG_BATCH) {
            let mut iovs: Vec<libc::iovec> = batch
                .iter()
                .map(|d| libc::iovec {
                    iov_base: d.as_ptr() as *mut _,
                    iov_len: d.len(),
                })
                .collect();
            let mut sent = 0;
            while sent < batch.len() {
                let mut msgs: Vec<libc::mmsghdr> = iovs[sent..]
                    .iter_mut()
                    .map(|iov| {
                        // SAFETY: zeroed mmsghdr is a valid empty header; fields set below.
                        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                        m.msg_hdr.msg_name = addr.as_ptr() as *mut _;
                        m.msg_hdr.msg_namelen = addr.len();
                        m.msg_hdr.msg_iov = iov;
                        m.msg_hdr.msg_iovlen = 1;
                        m
                    })
                    .collect();
                // SAFETY: msgs points at valid headers whose iovecs and address outlive the call.
                let n = unsafe {
                    libc::sendmmsg(
                        self.socket.as_raw_fd(),
                        msgs.as_mut_ptr(),
                        msgs.len() as libc::c_uint,
                        0,
                    )
                };
                if n < 0 {
                    self.wait_or_fail(io::Error::last_os_error())?;
                    continue;
                }
                self.syscalls += 1;
                let n = n as usize;
                self.datagrams += n as u64;
                self.bytes += batch[sent..sent + n]
                    .iter()
                    .map(|d| d.len() as u64)
                    .sum::<u64>();
                sent += n;
            }
        }
        Ok(())
    }

    /// Waits for space after EAGAIN/ENOBUFS; any other error is returned.
    fn wait_or_fail(&self, e: io::Error) -> io::Result<()> {
        let full = e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS);
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(());
        }
        if !full {
            return Err(e);
        }
        if e.raw_os_error() == Some(libc::ENOBUFS) {
            std::thread::sleep(Duration::from_micros(50));
            return Ok(());
        }
        if wait_fd(&self.socket, libc::POLLOUT, SEND_TIMEOUT)? {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "socket stayed full for 5 s",
            ))
        }
    }
}

//! Batched receive: `recvmmsg` through quinn-udp, with GRO where the kernel offers it. A received
//! buffer may hold several datagrams of `stride` bytes each (the last may be shorter); iterating a
//! [`Receiver`] yields them one by one.

use std::io::{self, IoSliceMut};
use std::time::Duration;

use super::socket::UdpSocket;
use super::wait_fd;

/// Largest UDP payload over IPv4; a buffer this size cannot truncate a datagram.
const MAX_UDP: usize = 65_507;

/// A receiving socket with its batch of buffers.
pub struct Receiver {
    socket: UdpSocket,
    bufs: Vec<Vec<u8>>,
    meta: Vec<quinn_udp::RecvMeta>,
    filled: usize,
    truncated: u64,
}

impl Receiver {
    /// `batch` buffers per `recvmmsg` call. Each buffer holds a whole GRO super-packet, so no
    /// datagram can be cut short.
    pub fn new(socket: UdpSocket, batch: usize) -> Self {
        let batch = batch.clamp(1, quinn_udp::BATCH_SIZE);
        Self {
            socket,
            bufs: (0..batch).map(|_| vec![0u8; MAX_UDP + 1]).collect(),
            meta: vec![quinn_udp::RecvMeta::default(); batch],
            filled: 0,
            truncated: 0,
        }
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Datagrams dropped because they filled a whole buffer (so may have been cut short).
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// Waits up to `timeout` for data and receives one batch. Returns the number of buffers filled
    /// (0 on timeout); their datagrams are then available from [`Receiver::datagrams`].
    pub fn recv(&mut self, timeout: Duration) -> io::Result<usize> {
        self.filled = 0;
        loop {
            let mut slices: Vec<IoSliceMut> =
                self.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            match self
                .socket
                .state()
                .recv(self.socket.socket().into(), &mut slices, &mut self.meta)
            {
                Ok(n) => {
                    self.filled = n;
                    for m in &mut self.meta[..n] {
                        if m.len > MAX_UDP {
                            self.truncated += 1;
                            m.len = 0;
                        }
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !wait_fd(&self.socket, libc::POLLIN, timeout)? {
                        return Ok(0);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The datagrams of the last batch, GRO super-packets split at their stride.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.bufs
            .iter()
            .zip(&self.meta)
            .take(self.filled)
            .flat_map(|(buf, m)| split(&buf[..m.len], m.stride))
    }
}

/// Splits a coalesced buffer into datagrams of `stride` bytes (the last may be shorter).
pub fn split(buf: &[u8], stride: usize) -> impl Iterator<Item = &[u8]> + '_ {
    let stride = if stride == 0 {
        buf.len().max(1)
    } else {
        stride
    };
    buf.chunks(stride)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_by_stride() {
        let buf: Vec<u8> = (0..10).collect();
        let parts: Vec<&[u8]> = split(&buf, 4).collect();
        assert_eq!(parts, vec![&[0, 1, 2, 3][..], &[4, 5, 6, 7], &[8, 9]]);
        assert_eq!(split(&buf, 0).count(), 1);
        assert_eq!(split(&[], 4).count(), 0);
    }
}

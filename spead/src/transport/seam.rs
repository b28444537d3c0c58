//! The seam a transport plugs into: what the receive and send threads of the engine, dsim and the
//! harness call, as traits. UDP ([`Receiver`], [`Sender`]) is one implementation and the
//! in-memory [`loopback`](super::loopback) another; a new one (ibverbs, a capture-file replay) is
//! one more module implementing these, chosen where a program builds its transport.
//!
//! The threads are generic over the traits (static dispatch), so nothing on the data path goes
//! through a virtual call.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::batch::Datagrams;
use super::recv::{Receiver, RecvStats};
use super::send::{Datagram, SendStats, Sender};

/// Where a receive thread's datagrams come from: it receives a batch with a timeout, then walks
/// the batch's datagrams (coalesced buffers already split), and reads the running totals.
pub trait DatagramSource: Send {
    /// The datagrams of the last batch, in order.
    type Datagrams<'a>: Iterator<Item = &'a [u8]>
    where
        Self: 'a;
    /// Waits on several sources of this kind at once (one thread, many sockets).
    type Waiter: SourceWaiter;

    /// Waits up to `timeout` for data and receives one batch; returns how many buffers it filled
    /// (0 on timeout). Its datagrams are then in [`DatagramSource::datagrams`].
    fn recv(&mut self, timeout: Duration) -> io::Result<usize>;

    /// The datagrams of the last batch received.
    fn datagrams(&self) -> Self::Datagrams<'_>;

    /// Its running totals.
    fn stats(&self) -> RecvStats;

    /// Datagrams dropped on arrival before this source could take them (a full socket buffer),
    /// as a wrapping 32-bit count since it opened; `None` where the transport cannot say. Read it
    /// through [`DropCounter`].
    fn drops(&self) -> Option<u32>;

    /// A waiter for `sources`, which it reports on by index.
    fn waiter(sources: &[Self]) -> Self::Waiter
    where
        Self: Sized;
}

/// Waits for any of several sources to have data, as one `poll` over their sockets does.
pub trait SourceWaiter {
    /// Waits up to `timeout` (whole milliseconds) and returns how many sources are ready (0 on
    /// timeout); a signal is an `Interrupted` error, for the caller to retry.
    fn wait(&mut self, timeout: Duration) -> io::Result<usize>;

    /// Whether source `i` was ready after the last wait.
    fn is_ready(&self, i: usize) -> bool;
}

/// Where a send thread's datagrams go: whole datagrams, a buffer of equal segments, or payload
/// pieces behind their own headers, with running totals.
pub trait DatagramSink: Send {
    /// Sends datagrams in order. On error the ones not sent are counted as dropped.
    fn send_batch(&mut self, datagrams: &[Datagram<'_>]) -> io::Result<()>;

    /// Sends `buf` to `dest` as datagrams of `segment` bytes (the last may be shorter).
    fn send_segments(&mut self, dest: SocketAddr, buf: &[u8], segment: usize) -> io::Result<()>;

    /// Sends `payload` to `dest` cut into `piece`-byte payloads (the last may be shorter),
    /// payload i behind header i of `headers` (each `header` bytes, back to back).
    fn send_framed(
        &mut self,
        dest: SocketAddr,
        headers: &[u8],
        header: usize,
        payload: &[u8],
        piece: usize,
    ) -> io::Result<()>;

    /// Its running totals.
    fn stats(&self) -> SendStats;
}

/// A source's drops as increments: [`DatagramSource::drops`] since the last look.
#[derive(Clone, Copy, Debug)]
pub struct DropCounter {
    seen: Option<u32>,
}

impl DropCounter {
    /// Starts counting from the source's drops now.
    pub fn new(source: &impl DatagramSource) -> Self {
        Self::from_reading(source.drops())
    }

    /// Starts counting from a reading of [`DatagramSource::drops`].
    pub fn from_reading(seen: Option<u32>) -> Self {
        Self { seen }
    }

    /// Drops since the last call (or since [`DropCounter::new`]); 0 where the source cannot say.
    pub fn take(&mut self, source: &impl DatagramSource) -> u64 {
        self.take_reading(source.drops())
    }

    /// Like [`DropCounter::take`], from a reading of [`DatagramSource::drops`].
    pub fn take_reading(&mut self, now: Option<u32>) -> u64 {
        let n = match (self.seen, now) {
            (Some(old), Some(new)) => u64::from(new.wrapping_sub(old)),
            _ => 0,
        };
        self.seen = now.or(self.seen);
        n
    }
}

impl DatagramSource for Receiver {
    type Datagrams<'a> = Datagrams<'a>;
    type Waiter = PollSet;

    fn recv(&mut self, timeout: Duration) -> io::Result<usize> {
        Receiver::recv(self, timeout)
    }

    fn datagrams(&self) -> Datagrams<'_> {
        Receiver::datagrams(self)
    }

    fn stats(&self) -> RecvStats {
        Receiver::stats(self)
    }

    fn drops(&self) -> Option<u32> {
        self.socket().drops()
    }

    fn waiter(sources: &[Self]) -> PollSet {
        PollSet {
            fds: sources
                .iter()
                .map(|r| libc::pollfd {
                    fd: r.socket().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }
}

/// One `poll` over several UDP receivers' sockets.
#[derive(Debug)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl SourceWaiter for PollSet {
    fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_millis().min(libc::c_int::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        let r = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    fn is_ready(&self, i: usize) -> bool {
        self.fds.get(i).is_some_and(|p| p.revents != 0)
    }
}

impl DatagramSink for Sender {
    fn send_batch(&mut self, datagrams: &[Datagram<'_>]) -> io::Result<()> {
        Sender::send_batch(self, datagrams)
    }

    fn send_segments(&mut self, dest: SocketAddr, buf: &[u8], segment: usize) -> io::Result<()> {
        Sender::send_segments(self, dest, buf, segment)
    }

    fn send_framed(
        &mut self,
        dest: SocketAddr,
        headers: &[u8],
        header: usize,
        payload: &[u8],
        piece: usize,
    ) -> io::Result<()> {
        Sender::send_framed(self, dest, headers, header, payload, piece)
    }

    fn stats(&self) -> SendStats {
        Sender::stats(self)
    }
}

//! Batched send. Runs of consecutive datagrams of one size to one destination (the last may be
//! shorter) go out as one GSO `sendmsg` of at most 64 KiB where the socket has GSO, gathered
//! straight from the caller's memory; everything else goes out in `sendmmsg` batches. A datagram
//! may be two pieces (a header and a payload in different buffers), gathered the same way, so
//! that packets need not be laid out in one buffer first.
//!
//! A full socket (EAGAIN) is waited out with `poll`, ENOBUFS with a short backoff, both up to a
//! timeout; what cannot be sent is counted in [`SendStats::dropped`] and reported as an error.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::SockAddr;

use super::poll::{self, Ready};
use super::recv::MAX_UDP_PAYLOAD;
use super::socket::UdpSocket;
use super::sys;

/// One datagram to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Where it goes.
    pub dest: SocketAddr,
    /// Its contents (a whole SPEAD packet).
    pub bytes: &'a [u8],
}

/// Running totals of a [`Sender`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Datagrams the kernel accepted.
    pub datagrams: u64,
    /// Bytes of those datagrams.
    pub bytes: u64,
    /// `sendmsg` / `sendmmsg` calls that sent something.
    pub syscalls: u64,
    /// Times the socket was full and we waited for room.
    pub waits: u64,
    /// Datagrams given up on (socket full past the timeout, or refused by the kernel).
    pub dropped: u64,
}

/// A sending socket.
pub struct Sender {
    socket: UdpSocket,
    timeout: Duration,
    stats: SendStats,
}

/// A datagram as the kernel gathers it: `head` then `body` (often empty).
#[derive(Clone, Copy, Debug)]
struct Pieces<'a> {
    dest: SocketAddr,
    head: &'a [u8],
    body: &'a [u8],
}

impl<'a> Pieces<'a> {
    fn whole(d: Datagram<'a>) -> Self {
        Self {
            dest: d.dest,
            head: d.bytes,
            body: &[],
        }
    }
    fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }
}

/// Datagrams to send, by index: a caller's list, one buffer cut into equal segments, or
/// payload pieces behind their own headers.
trait Source {
    fn len(&self) -> usize;
    fn get(&self, i: usize) -> Pieces<'_>;
}

impl Source for [Datagram<'_>] {
    fn len(&self) -> usize {
        <[Datagram]>::len(self)
    }
    fn get(&self, i: usize) -> Pieces<'_> {
        Pieces::whole(self[i])
    }
}

struct Segments<'a> {
    dest: SocketAddr,
    buf: &'a [u8],
    segment: usize,
}

impl Source for Segments<'_> {
    fn len(&self) -> usize {
        self.buf.len().div_ceil(self.segment)
    }
    fn get(&self, i: usize) -> Pieces<'_> {
        let start = i * self.segment;
        let end = start.saturating_add(self.segment).min(self.buf.len());
        Pieces::whole(Datagram {
            dest: self.dest,
            bytes: &self.buf[start..end],
        })
    }
}

/// `payload` cut into pieces of `piece` bytes (the last may be shorter), piece i behind header i
/// (`header` bytes each, back to back in `headers`).
struct Framed<'a> {
    dest: SocketAddr,
    headers: &'a [u8],
    header: usize,
    payload: &'a [u8],
    piece: usize,
}

impl Source for Framed<'_> {
    fn len(&self) -> usize {
        self.payload.len().div_ceil(self.piece)
    }
    fn get(&self, i: usize) -> Pieces<'_> {
        let start = i * self.piece;
        let end = start.saturating_add(self.piece).min(self.payload.len());
        Pieces {
            dest: self.dest,
            head: &self.headers[i * self.header..(i + 1) * self.header],
            body: &self.payload[start..end],
        }
    }
}

impl Sender {
    /// Sends on `socket`, waiting at most 1 s for room in it.
    pub fn new(socket: UdpSocket) -> Self {
        Self {
            socket,
            timeout: Duration::from_secs(1),
            stats: SendStats::default(),
        }
    }

    /// How long a send waits for room in a full socket before dropping (default 1 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket it sends on (for its address and capabilities).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Its running totals.
    pub fn stats(&self) -> SendStats {
        self.stats
    }

    /// Sends one datagram.
    pub fn send_to(&mut self, dest: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        self.send_batch(&[Datagram { dest, bytes }])
    }

    /// Sends `buf` as datagrams of `segment` bytes (the last may be shorter) to `dest`: the
    /// zero-copy path for packets laid out back to back.
    pub fn send_segments(
        &mut self,
        dest: SocketAddr,
        buf: &[u8],
        segment: usize,
    ) -> io::Result<()> {
        if buf.is_empty() || segment == 0 {
            return Ok(());
        }
        self.send_from(&Segments { dest, buf, segment })
    }

    /// Sends `payload` cut into `piece`-byte datagram payloads (the last may be shorter), payload
    /// i behind header i of `headers` (each `header` bytes, back to back): the kernel gathers
    /// both, so nothing is copied to lay the packets out. `headers` must hold a header for every
    /// piece.
    pub fn send_framed(
        &mut self,
        dest: SocketAddr,
        headers: &[u8],
        header: usize,
        payload: &[u8],
        piece: usize,
    ) -> io::Result<()> {
        if payload.is_empty() || piece == 0 {
            return Ok(());
        }
        let src = Framed {
            dest,
            headers,
            header,
            payload,
            piece,
        };
        if headers.len() < src.len() * header {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} headers of {header} bytes for {} payload pieces",
                    headers.len() / header.max(1),
                    src.len()
                ),
            ));
        }
        self.send_from(&src)
    }

    /// Sends datagrams in order, packing runs of one size to one destination into GSO sends.
    /// On error the datagrams not yet sent are counted as dropped and the error is returned.
    pub fn send_batch(&mut self, datagrams: &[Datagram<'_>]) -> io::Result<()> {
        self.send_from(datagrams)
    }

    fn send_from<S: Source + ?Sized>(&mut self, src: &S) -> io::Result<()> {
        let n = src.len();
        let mut i = 0;
        let mut stalled: Option<Instant> = None;
        while i < n {
            let run = gso_run(src, i, self.socket.caps().gso_segments);
            let result = if run > 1 {
                self.send_gso(src, i, run)
            } else {
                self.send_singles(src, i)
            };
            match result {
                Ok(sent) => {
                    i += sent;
                    stalled = None;
                }
                Err(e) if run > 1 && gso_refused(&e) => {
                    // Some devices refuse GSO; carry on without it, as quinn-udp does.
                    tracing::warn!("UDP GSO refused ({e}); sending one datagram per segment");
                    self.socket.disable_gso();
                }
                Err(e) => {
                    let since = *stalled.get_or_insert_with(Instant::now);
                    if let Err(e) = self.wait_for_room(e, since) {
                        self.stats.dropped += (n - i) as u64;
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// One GSO `sendmsg` of datagrams `i..i + run`. Returns how many were sent.
    fn send_gso<S: Source + ?Sized>(&mut self, src: &S, i: usize, run: usize) -> io::Result<usize> {
        let first = src.get(i);
        let dest = SockAddr::from(first.dest);
        let segment = first.len() as u16; // gso_run keeps it within u16
        let parts = (i..i + run).flat_map(|j| {
            let d = src.get(j);
            [d.head, d.body]
        });
        let bytes = sys::sendmsg(self.socket.as_raw_fd(), &dest, parts, Some(segment))?;
        self.stats.syscalls += 1;
        self.stats.datagrams += run as u64;
        self.stats.bytes += bytes as u64;
        Ok(run)
    }

    /// One `sendmmsg` of the datagrams from `i` up to the next GSO run. Returns how many were
    /// sent.
    fn send_singles<S: Source + ?Sized>(&mut self, src: &S, i: usize) -> io::Result<usize> {
        let gso = self.socket.caps().gso_segments;
        let mut end = i + 1;
        while end < src.len() && end - i < sys::MMSG_BATCH && gso_run(src, end, gso) == 1 {
            end += 1;
        }
        let items = (i..end).map(|j| {
            let d = src.get(j);
            (d.dest, [d.head, d.body])
        });
        let sent = sys::sendmmsg(self.socket.as_raw_fd(), items)?;
        self.stats.syscalls += 1;
        self.stats.datagrams += sent as u64;
        self.stats.bytes += (i..i + sent).map(|j| src.get(j).len() as u64).sum::<u64>();
        Ok(sent)
    }

    /// After a failed send: waits for room if the socket was full and the stall is younger than
    /// the timeout, else returns the error to give up with.
    fn wait_for_room(&mut self, e: io::Error, since: Instant) -> io::Result<()> {
        let left = self.timeout.saturating_sub(since.elapsed());
        let full = e.kind() == io::ErrorKind::WouldBlock;
        let no_bufs = e.raw_os_error() == Some(libc::ENOBUFS);
        if !(full || no_bufs) {
            return Err(e);
        }
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("UDP socket stayed full for {:?} ({e})", self.timeout),
            ));
        }
        self.stats.waits += 1;
        if full {
            poll::wait(&self.socket, Ready::Write, left)?;
        } else {
            // ENOBUFS: a device queue is full and poll would say writable at once; back off.
            std::thread::sleep(left.min(Duration::from_micros(100)));
        }
        Ok(())
    }
}

/// How many datagrams from `i` one GSO send can carry: same destination, same size as the first
/// (the last may be shorter), at most `max_segments`, at most 64 KiB. 1 means send it alone.
fn gso_run<S: Source + ?Sized>(src: &S, i: usize, max_segments: usize) -> usize {
    let first = src.get(i);
    let size = first.len();
    if max_segments < 2 || size == 0 || size > usize::from(u16::MAX) {
        return 1;
    }
    // Two iovecs per datagram at most (adjacent ones merge, which only helps).
    let limit = max_segments
        .min(MAX_UDP_PAYLOAD / size)
        .min(sys::MAX_IOV / 2)
        .min(src.len() - i);
    let mut run = 1;
    while run < limit {
        let d = src.get(i + run);
        if d.dest != first.dest || d.len() == 0 || d.len() > size {
            break;
        }
        run += 1;
        if d.len() < size {
            break;
        }
    }
    run
}

/// EIO or EINVAL on a GSO send: the device (or a segment larger than the MTU) rules GSO out.
fn gso_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list<'a>(dests: &[u16], sizes: &[usize], buf: &'a [u8]) -> Vec<Datagram<'a>> {
        dests
            .iter()
            .zip(sizes)
            .map(|(&port, &size)| Datagram {
                dest: SocketAddr::from(([127, 0, 0, 1], port)),
                bytes: &buf[..size],
            })
            .collect()
    }

    #[test]
    fn runs_group_equal_sizes_to_one_destination() {
        let buf = vec![0u8; 200_000];
        let d = list(&[1, 1, 1, 1, 2, 2], &[100, 100, 50, 100, 100, 100], &buf);
        assert_eq!(gso_run(&d[..], 0, 64), 3, "short one ends the run");
        assert_eq!(gso_run(&d[..], 3, 64), 1, "destination changes");
        assert_eq!(gso_run(&d[..], 4, 64), 2);
        assert_eq!(gso_run(&d[..], 0, 1), 1, "no GSO");
        assert_eq!(gso_run(&d[..], 0, 2), 2, "segment limit");

        let d = list(&[1; 20], &[5192; 20], &buf);
        assert_eq!(gso_run(&d[..], 0, 64), 12, "64 KiB limit");
        let d = list(&[1; 20], &[8264; 20], &buf);
        assert_eq!(gso_run(&d[..], 0, 64), 7);
        let d = list(&[1, 1], &[0, 0], &buf);
        assert_eq!(gso_run(&d[..], 0, 64), 1, "empty datagrams go alone");
        let d = list(&[1, 1], &[65_507, 65_507], &buf);
        assert_eq!(gso_run(&d[..], 0, 64), 1);

        let seg = Segments {
            dest: SocketAddr::from(([127, 0, 0, 1], 1)),
            buf: &buf[..5192 * 30 + 7],
            segment: 5192,
        };
        assert_eq!(seg.len(), 31);
        assert_eq!(seg.get(30).len(), 7);
        assert_eq!(gso_run(&seg, 24, 64), 7, "short last segment joins the run");
    }
}

//! Batched receive: `recvmmsg` through quinn-udp into a [`Batch`], with GRO where the socket has
//! it, and a wait with a timeout so that a dedicated thread can also watch a stop flag.
//!
//! While data flows, a receiver that has drained its socket sleeps for [`RecvConfig::coalesce`]
//! before it waits in `poll`: a thread asleep in `poll` is woken by the sender for every GRO
//! buffer, and on a virtual machine that wakeup (an inter-processor interrupt on the sender's
//! side, a context switch on ours) cost more CPU than the copy itself. A timed sleep lets a few
//! buffers gather and takes them in one wakeup; the socket buffer holds them meanwhile.
//!
//! quinn-udp does not report truncation, so slots are one byte larger than the largest datagram
//! accepted (or, with GRO, larger than any coalesced buffer): a slot filled to the brim was cut.
//! Datagrams longer than `max_datagram` are counted and not delivered.

use std::io::{self, IoSliceMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::batch::{Batch, Datagrams, RecvMeta};
use super::poll::{self, Ready};
use super::socket::UdpSocket;

/// Largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// Slot size with GRO: above the largest coalesced buffer the kernel builds with the default
/// `gro_max_size` (64 KiB), so that a full slot can only mean truncation.
const GRO_SLOT: usize = 65_536;
/// Default [`RecvConfig::coalesce`]: at 2 GB/s a socket gathers 400 KB meanwhile, far inside the
/// socket buffers receivers ask for (tens of MiB), and one `recvmmsg` batch of GRO buffers or two
/// take it.
pub const DEFAULT_COALESCE: Duration = Duration::from_micros(200);

/// How to receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvConfig {
    /// Slots per `recvmmsg` (at most quinn-udp's 32).
    pub batch: usize,
    /// Longest datagram delivered; longer ones are counted in [`RecvStats::truncated`].
    pub max_datagram: usize,
    /// After the socket runs dry while data is flowing, sleep this long before waiting to be
    /// woken (see the module's comment). Zero: wait at once.
    pub coalesce: Duration,
}

impl Default for RecvConfig {
    fn default() -> Self {
        Self {
            batch: quinn_udp::BATCH_SIZE,
            max_datagram: MAX_UDP_PAYLOAD,
            coalesce: DEFAULT_COALESCE,
        }
    }
}

/// Running totals of a [`Receiver`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// `recvmmsg` calls that returned data.
    pub calls: u64,
    /// Slots filled (a GRO slot holds several datagrams).
    pub buffers: u64,
    /// Datagrams delivered.
    pub datagrams: u64,
    /// Bytes delivered.
    pub bytes: u64,
    /// Datagrams not delivered because they were longer than `max_datagram` (cut short by the
    /// kernel, so their true length is unknown; for a cut GRO buffer, at least one).
    pub truncated: u64,
    /// Sleeps to let datagrams gather ([`RecvConfig::coalesce`]).
    pub coalesced: u64,
}

/// A receiving socket with its batch of buffers.
pub struct Receiver {
    socket: UdpSocket,
    cfg: RecvConfig,
    batch: Batch,
    raw: Vec<quinn_udp::RecvMeta>,
    stats: RecvStats,
    /// The last call returned data: the next one that finds the socket dry coalesces.
    flowing: bool,
}

impl Receiver {
    /// Receives up to `batch` slots per call and delivers datagrams of any legal UDP size.
    pub fn new(socket: UdpSocket, batch: usize) -> Self {
        Self::with_config(
            socket,
            RecvConfig {
                batch,
                ..Default::default()
            },
        )
    }

    /// Receives as `cfg` says; the batch is clamped to 1..=32 and the datagram size to UDP's
    /// largest.
    pub fn with_config(socket: UdpSocket, cfg: RecvConfig) -> Self {
        let cfg = RecvConfig {
            batch: cfg.batch.clamp(1, quinn_udp::BATCH_SIZE),
            max_datagram: cfg.max_datagram.min(MAX_UDP_PAYLOAD),
            coalesce: cfg.coalesce,
        };
        let slot = if socket.caps().gro {
            GRO_SLOT
        } else {
            cfg.max_datagram + 1
        };
        Self {
            socket,
            cfg,
            batch: Batch::new(cfg.batch, slot),
            raw: vec![quinn_udp::RecvMeta::default(); cfg.batch],
            stats: RecvStats::default(),
            flowing: false,
        }
    }

    /// The socket it reads (for its address and capabilities).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The configuration in force, after clamping.
    pub fn config(&self) -> RecvConfig {
        self.cfg
    }

    /// Its running totals.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    /// Waits up to `timeout` for data and receives one batch. Returns the number of slots filled
    /// (0 on timeout); their datagrams are then in [`Receiver::batch`] / [`Receiver::datagrams`].
    pub fn recv(&mut self, timeout: Duration) -> io::Result<usize> {
        self.batch.meta.clear();
        let start = Instant::now();
        loop {
            match self.recv_now() {
                Ok(n) => {
                    self.flowing = true;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = timeout.saturating_sub(start.elapsed());
                    if std::mem::take(&mut self.flowing) && !left.is_zero() {
                        self.coalesce(left);
                        continue;
                    }
                    if left.is_zero() || !poll::wait(&self.socket, Ready::Read, left)? {
                        return Ok(0);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives and hands each datagram to `f` until `stop` is set, looking at it at least every
    /// `poll` while idle. The loop a dedicated receive thread runs.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        poll: Duration,
        mut f: impl FnMut(&[u8]),
    ) -> io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            if self.recv(poll)? > 0 {
                self.batch.datagrams().for_each(&mut f);
            }
        }
        Ok(())
    }

    /// Sleeps [`RecvConfig::coalesce`] (at most `limit`) so that datagrams gather in the socket.
    fn coalesce(&mut self, limit: Duration) {
        let d = self.cfg.coalesce.min(limit);
        if !d.is_zero() {
            self.stats.coalesced += 1;
            std::thread::sleep(d);
        }
    }

    /// The last batch received.
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// The datagrams of the last batch, GRO slots split at their stride.
    pub fn datagrams(&self) -> Datagrams<'_> {
        self.batch.datagrams()
    }

    /// One non-blocking `recvmmsg`.
    fn recv_now(&mut self) -> io::Result<usize> {
        let slot = self.batch.slot;
        let slots = self.batch.slots().min(self.raw.len());
        let mut chunks = self.batch.buf.chunks_mut(slot);
        let mut iovs: [IoSliceMut<'_>; quinn_udp::BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
        let n = self.socket.state().recv(
            self.socket.socket().into(),
            &mut iovs[..slots],
            &mut self.raw[..slots],
        )?;
        self.stats.calls += 1;
        self.stats.buffers += n as u64;
        for i in 0..n {
            let raw = self.raw[i];
            let meta = self.admit(&raw);
            self.batch.meta.push(meta);
        }
        Ok(n)
    }

    /// What to deliver of one filled slot; counts what is not delivered.
    fn admit(&mut self, raw: &quinn_udp::RecvMeta) -> RecvMeta {
        let len = raw.len.min(self.batch.slot);
        let stride = if raw.stride == 0 || raw.stride > len {
            len
        } else {
            raw.stride
        };
        let keep = if len == self.batch.slot {
            // Cut by the kernel. GRO segments wholly inside the slot are intact.
            self.stats.truncated += 1;
            if stride < len && stride <= self.cfg.max_datagram {
                len / stride * stride
            } else {
                0
            }
        } else if stride > self.cfg.max_datagram {
            // GRO coalesces datagrams of one size only, so the whole slot is over the limit.
            self.stats.truncated += len.div_ceil(stride) as u64;
            0
        } else {
            len
        };
        if keep > 0 {
            self.stats.datagrams += keep.div_ceil(stride) as u64;
            self.stats.bytes += keep as u64;
        }
        RecvMeta {
            src: raw.addr,
            len: keep,
            stride,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddrV4};

    use super::*;
    use crate::transport::socket::SocketConfig;

    fn receiver(gro: bool, max_datagram: usize) -> Receiver {
        let cfg = SocketConfig {
            gro,
            ..Default::default()
        };
        let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg).unwrap();
        Receiver::with_config(
            s,
            RecvConfig {
                batch: 8,
                max_datagram,
                ..Default::default()
            },
        )
    }

    fn raw(len: usize, stride: usize) -> quinn_udp::RecvMeta {
        let mut m = quinn_udp::RecvMeta::default();
        m.len = len;
        m.stride = stride;
        m
    }

    #[test]
    fn admits_by_length_and_stride() {
        let mut rx = receiver(false, 100);
        assert_eq!(rx.batch.slot, 101);
        assert_eq!(rx.admit(&raw(100, 100)).len, 100);
        assert_eq!(rx.admit(&raw(101, 101)).len, 0);
        assert_eq!(rx.stats.truncated, 1);
        assert_eq!(rx.stats.datagrams, 1);

        // A GRO-style slot cut by the kernel: whole segments survive, the cut one is counted.
        assert_eq!(rx.admit(&raw(101, 40)).len, 80);
        assert_eq!(rx.stats.truncated, 2);
        assert_eq!(rx.stats.datagrams, 3);
        // Coalesced datagrams over the limit are all counted.
        let mut rx = receiver(true, 100);
        if rx.socket().caps().gro {
            assert_eq!(rx.admit(&raw(600, 200)).len, 0);
            assert_eq!(rx.stats.truncated, 3);
            assert_eq!(rx.admit(&raw(250, 100)).len, 250);
            assert_eq!(rx.stats.datagrams, 3);
        }
    }

    #[test]
    fn a_socket_that_runs_dry_after_data_coalesces_once() {
        let mut rx = receiver(true, 100);
        let dest = rx.socket().local_addr().unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(&[1; 50], dest).unwrap();
        assert_eq!(rx.recv(Duration::from_millis(500)).unwrap(), 1);
        assert_eq!(rx.stats().coalesced, 0);
        // Dry right after data: one sleep to let more gather, then the plain wait.
        assert_eq!(rx.recv(Duration::from_millis(20)).unwrap(), 0);
        assert_eq!(rx.stats().coalesced, 1);
        // Nothing came since: waits without coalescing.
        assert_eq!(rx.recv(Duration::from_millis(5)).unwrap(), 0);
        assert_eq!(rx.stats().coalesced, 1);
        // Data that arrives during the sleep is taken when it ends.
        tx.send_to(&[2; 50], dest).unwrap();
        assert_eq!(rx.recv(Duration::from_millis(500)).unwrap(), 1);
        tx.send_to(&[3; 50], dest).unwrap();
        assert_eq!(rx.recv(Duration::from_millis(500)).unwrap(), 1);
        assert_eq!(rx.datagrams().next(), Some(&[3u8; 50][..]));
    }

    #[test]
    fn times_out_empty() {
        let mut rx = receiver(true, 100);
        let t = Instant::now();
        assert_eq!(rx.recv(Duration::from_millis(30)).unwrap(), 0);
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        assert_eq!(rx.datagrams().count(), 0);
        let stop = AtomicBool::new(true);
        rx.run(&stop, Duration::from_millis(10), |_| panic!("no data"))
            .unwrap();
    }
}

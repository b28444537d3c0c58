//! An in-memory transport: a sink whose datagrams a source in the same process receives, in
//! order, whatever their destination. It lets tests drive a receive or send thread without
//! sockets, and shows what a transport behind the seam ([`super::seam`]) has to provide.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::recv::RecvStats;
use super::seam::{DatagramSink, DatagramSource, SourceWaiter};
use super::send::{Datagram, SendStats};

/// How often a [`LoopbackWaiter`] over several sources looks at their queues.
const WAITER_STEP: Duration = Duration::from_millis(1);

/// Datagrams on their way from the sink to the source.
#[derive(Debug, Default)]
struct Queue {
    datagrams: Mutex<VecDeque<Vec<u8>>>,
    arrived: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Vec<u8>>> {
        self.datagrams.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A connected sink and source; the source takes up to `batch` datagrams per receive.
pub fn pair(batch: usize) -> (LoopbackSink, LoopbackSource) {
    let queue = Arc::new(Queue::default());
    (
        LoopbackSink {
            queue: Arc::clone(&queue),
            stats: SendStats::default(),
        },
        LoopbackSource {
            queue,
            batch: batch.max(1),
            last: Vec::new(),
            stats: RecvStats::default(),
        },
    )
}

/// The sending end of a [`pair`].
#[derive(Debug)]
pub struct LoopbackSink {
    queue: Arc<Queue>,
    stats: SendStats,
}

impl LoopbackSink {
    /// Queues `datagrams` for the source; once the source is gone they are counted as dropped.
    fn push(&mut self, datagrams: impl Iterator<Item = Vec<u8>>) -> io::Result<()> {
        let mut queued = Vec::new();
        queued.extend(datagrams);
        if Arc::strong_count(&self.queue) < 2 {
            self.stats.dropped += queued.len() as u64;
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the loopback source is gone",
            ));
        }
        if queued.is_empty() {
            return Ok(());
        }
        self.stats.syscalls += 1;
        self.stats.datagrams += queued.len() as u64;
        self.stats.bytes += queued.iter().map(|d| d.len() as u64).sum::<u64>();
        self.queue.lock().extend(queued);
        self.queue.arrived.notify_all();
        Ok(())
    }
}

impl DatagramSink for LoopbackSink {
    fn send_batch(&mut self, datagrams: &[Datagram<'_>]) -> io::Result<()> {
        self.push(datagrams.iter().map(|d| d.bytes.to_vec()))
    }

    fn send_segments(&mut self, _dest: SocketAddr, buf: &[u8], segment: usize) -> io::Result<()> {
        if segment == 0 {
            return Ok(());
        }
        self.push(buf.chunks(segment).map(<[u8]>::to_vec))
    }

    fn send_framed(
        &mut self,
        _dest: SocketAddr,
        headers: &[u8],
        header: usize,
        payload: &[u8],
        piece: usize,
    ) -> io::Result<()> {
        if payload.is_empty() || piece == 0 {
            return Ok(());
        }
        let pieces = payload.len().div_ceil(piece);
        if header == 0 || headers.len() < pieces * header {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} headers of {header} bytes for {pieces} payload pieces",
                    headers.len() / header.max(1)
                ),
            ));
        }
        self.push(
            headers
                .chunks(header)
                .zip(payload.chunks(piece))
                .map(|(h, p)| [h, p].concat()),
        )
    }

    fn stats(&self) -> SendStats {
        self.stats
    }
}

/// The receiving end of a [`pair`].
#[derive(Debug)]
pub struct LoopbackSource {
    queue: Arc<Queue>,
    batch: usize,
    /// The datagrams of the last batch.
    last: Vec<Vec<u8>>,
    stats: RecvStats,
}

/// The datagrams of a [`LoopbackSource`]'s last batch.
pub type LoopbackDatagrams<'a> =
    std::iter::Map<std::slice::Iter<'a, Vec<u8>>, fn(&'a Vec<u8>) -> &'a [u8]>;

impl DatagramSource for LoopbackSource {
    type Datagrams<'a> = LoopbackDatagrams<'a>;
    type Waiter = LoopbackWaiter;

    fn recv(&mut self, timeout: Duration) -> io::Result<usize> {
        self.last.clear();
        let mut queue = self.queue.lock();
        let deadline = Instant::now() + timeout;
        while queue.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            queue = self
                .queue
                .arrived
                .wait_timeout(queue, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let n = self.batch.min(queue.len());
        self.last.extend(queue.drain(..n));
        drop(queue);
        self.stats.calls += 1;
        self.stats.buffers += n as u64;
        self.stats.datagrams += n as u64;
        self.stats.bytes += self.last.iter().map(|d| d.len() as u64).sum::<u64>();
        Ok(n)
    }

    fn datagrams(&self) -> LoopbackDatagrams<'_> {
        self.last.iter().map(Vec::as_slice)
    }

    fn stats(&self) -> RecvStats {
        self.stats
    }

    fn drops(&self) -> Option<u32> {
        Some(0)
    }

    fn waiter(sources: &[Self]) -> LoopbackWaiter {
        LoopbackWaiter {
            queues: sources.iter().map(|s| Arc::downgrade(&s.queue)).collect(),
            ready: vec![false; sources.len()],
        }
    }
}

/// Waits on several [`LoopbackSource`]s by looking at their queues every millisecond (a test
/// transport: simple rather than fast).
#[derive(Debug)]
pub struct LoopbackWaiter {
    /// Weak, so that a sink still sees when its source is gone.
    queues: Vec<Weak<Queue>>,
    ready: Vec<bool>,
}

impl SourceWaiter for LoopbackWaiter {
    fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            for (r, q) in self.ready.iter_mut().zip(&self.queues) {
                *r = q.upgrade().is_some_and(|q| !q.lock().is_empty());
            }
            let n = self.ready.iter().filter(|&&r| r).count();
            let left = deadline.saturating_duration_since(Instant::now());
            if n > 0 || left.is_zero() {
                return Ok(n);
            }
            std::thread::sleep(left.min(WAITER_STEP));
        }
    }

    fn is_ready(&self, i: usize) -> bool {
        self.ready.get(i).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::assemble::{Event, HeapAssembler};
    use crate::{items, HeapItem, HeapWriter, Limits, RejectCounters};

    const DEST: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        7148,
    ));

    /// Heaps written by the heap encoder go through the seam's sink, come out of its source in
    /// batches, and assemble whole on the other side.
    #[test]
    fn heaps_sent_into_the_sink_assemble_from_the_source() {
        let (mut sink, mut source) = pair(4);
        let payloads: Vec<Vec<u8>> = (0..3u8)
            .map(|h| (0..1000).map(|i| (i as u8).wrapping_mul(h + 1)).collect())
            .collect();
        for (h, data) in payloads.iter().enumerate() {
            let its = [
                HeapItem::immediate(items::TIMESTAMP, 1000 * h as u64),
                HeapItem::addressed(items::ADC_SAMPLES, data),
            ];
            HeapWriter::new(300).write(h as u64 + 1, &its, |p| {
                send(&mut sink, p);
            });
        }
        assert_eq!(sink.stats().datagrams, 12, "four packets a heap");

        let mut asm = HeapAssembler::new(Limits::default(), 4, Arc::new(RejectCounters::new()));
        let mut heaps = Vec::new();
        while source.recv(Duration::from_millis(10)).unwrap() > 0 {
            for d in source.datagrams() {
                asm.add_datagram(d, &mut |e| {
                    if let Event::Complete(h) = e {
                        heaps.push(h);
                    }
                })
                .unwrap();
            }
        }
        assert_eq!(source.stats().calls, 3, "batches of four");
        assert_eq!(source.stats().datagrams, 12);
        assert_eq!(heaps.len(), 3);
        for (h, heap) in heaps.iter().enumerate() {
            let view = heap.view().unwrap();
            assert_eq!(heap.heap_cnt, h as u64 + 1);
            assert_eq!(view.immediate(items::TIMESTAMP), Some(1000 * h as u64));
            assert_eq!(view.value(items::ADC_SAMPLES), Some(&payloads[h][..]));
        }
    }

    /// Sends through the trait, as a generic send thread would.
    fn send(sink: &mut impl DatagramSink, packet: &[u8]) {
        sink.send_segments(DEST, packet, packet.len()).unwrap();
    }

    /// Framed sends put each header before its piece; the waiter sees which source has data.
    #[test]
    fn framed_sends_arrive_whole_and_the_waiter_finds_them() {
        let (mut a_tx, a_rx) = pair(8);
        let (_b_tx, b_rx) = pair(8);
        let mut sources = [a_rx, b_rx];
        let mut waiter = LoopbackSource::waiter(&sources);
        assert_eq!(waiter.wait(Duration::from_millis(2)).unwrap(), 0);
        a_tx.send_framed(DEST, b"h1h2h3", 2, b"abcdefg", 3).unwrap();
        assert!(a_tx.send_framed(DEST, b"h1", 2, b"abcdefg", 3).is_err());
        assert_eq!(waiter.wait(Duration::from_secs(1)).unwrap(), 1);
        assert!(waiter.is_ready(0) && !waiter.is_ready(1));
        assert_eq!(sources[0].recv(Duration::ZERO).unwrap(), 3);
        let got: Vec<&[u8]> = sources[0].datagrams().collect();
        assert_eq!(got, [&b"h1abc"[..], b"h2def", b"h3g"]);
        assert_eq!(sources[1].recv(Duration::ZERO).unwrap(), 0);
        drop(sources);
        assert!(a_tx.send_segments(DEST, b"xy", 1).is_err());
        assert_eq!(a_tx.stats().dropped, 2);
    }
}

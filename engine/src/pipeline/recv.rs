//! Receive stage: one thread per polarisation. Datagrams from the polarisation's sockets (GRO
//! batches) go through spead's `ChunkAssembler` straight into chunk buffers; finished chunks go to
//! the pairing stage, which sends them back with spent buffers swapped in.
//!
//! Placement: chunk id = timestamp / chunk_samples, slot = (timestamp % chunk_samples) /
//! heap_samples. Heaps without a timestamp, with a timestamp that is not a multiple of
//! heap_samples, or of the wrong size are rejected and counted by reason.
//!
//! Jumps: a heap far ahead of where the stream should be by now (the last timestamp plus the
//! wall-clock time since it, plus a tolerance) is *future-dated*; one far behind the window is
//! *too old*. Either is dropped and counted, unless [`CONFIRM`] heaps in a row agree on the new
//! place: then the digitiser restarted, and the receiver resynchronises to it. A backward jump is
//! turned into a forward one by adding an offset to chunk ids inside the assembler (which only
//! resynchronises forward); ids are translated back before chunks leave this stage.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use spead::chunk::{Chunk, ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
use spead::transport::{self, SocketConfig, UdpSocket};
use spead::{items, Limits, Packet, Reject};

use super::RECV_WINDOW;
use crate::backend::HostBuffer;
use crate::config::{EngineConfig, PACKET_HEADER_BYTES};
use crate::metrics::{PolStats, Stats};

/// Consistent out-of-place heaps needed before the receiver believes a jump.
pub const CONFIRM: u32 = 32;
/// Batches drained from one socket before looking at the others.
const BATCHES_PER_SOCKET: usize = 8;

/// What a receiver hands to the pairing stage.
#[derive(Debug)]
pub enum RecvMsg {
    /// A chunk left the receive window. `id` is the real chunk id (timestamp / chunk_samples).
    Chunk {
        pol: usize,
        id: u64,
        chunk: Chunk<HostBuffer>,
    },
    /// The stream jumped; chunks before this message belong to the old stream.
    Resync { pol: usize, to: u64 },
}

/// Opens the sockets of polarisation `pol` and records where they are bound.
pub fn bind(
    cfg: &EngineConfig,
    pol: usize,
    stats: &PolStats,
) -> Result<Vec<transport::Receiver>, String> {
    let sc = SocketConfig {
        buffer_bytes: cfg.socket_buffer,
        interface: cfg.interface,
        ttl: cfg.ttl,
        gso: false,
        gro: true,
    };
    let addrs = &cfg.sources[pol];
    let mut out = Vec::new();
    let mut bound = Vec::new();
    let open = |what: &str, r: std::io::Result<UdpSocket>| {
        r.map_err(|e| format!("cannot receive polarisation {pol} on {what}: {e}."))
    };
    let groups: Vec<_> = addrs.iter().map(|a| *a.ip()).collect();
    let port = addrs.first().map_or(0, |a| a.port());
    if addrs.len() > 1
        && groups.iter().all(|g| g.is_multicast())
        && addrs.iter().all(|a| a.port() == port)
    {
        // Several groups on one port: one socket joined to all of them.
        let what = format!("{}+{}:{port}", groups[0], groups.len() - 1);
        let s = open(&what, UdpSocket::bind_groups(&groups, port, &sc))?;
        tracing::info!(pol, addr = %what, gro = s.caps().gro, "receiving");
        bound.extend(addrs.iter().map(|a| SocketAddr::V4(*a)));
        out.push(transport::Receiver::new(s, 32));
    } else {
        for addr in addrs {
            let s = open(&addr.to_string(), UdpSocket::bind(*addr, &sc))?;
            // A multicast socket is bound to the group; a unicast one may have had port 0.
            let shown = if addr.ip().is_multicast() {
                SocketAddr::V4(*addr)
            } else {
                s.local_addr().unwrap_or(SocketAddr::V4(*addr))
            };
            tracing::info!(pol, addr = %shown, gro = s.caps().gro, "receiving");
            bound.push(shown);
            out.push(transport::Receiver::new(s, 32));
        }
    }
    if let Ok(mut b) = stats.bound.lock() {
        *b = bound;
    }
    Ok(out)
}

/// Where the newest accepted heap was, in assembler ids and timestamps.
#[derive(Clone, Copy, Debug)]
struct Newest {
    internal: u64,
    ts: u64,
    at: Instant,
}

/// Maps heaps to (chunk, slot), guarding against stray and restarted streams. Chunk ids given to
/// the assembler are `real + offset`; `epochs` remembers from which id each offset applies.
#[derive(Debug)]
pub(crate) struct Placer {
    chunk_samples: u64,
    heap_samples: u64,
    fs: f64,
    window: u64,
    max_jump: u64,
    /// How far (samples) a heap may run ahead of the wall-clock expectation.
    tolerance: f64,
    offset: u64,
    newest: Option<Newest>,
    candidate: Option<(u64, u32)>,
    epochs: VecDeque<(u64, u64)>,
    /// Time of the current receive batch.
    pub now: Instant,
}

impl Placer {
    pub(crate) fn new(chunk_samples: u64, heap_samples: u64, fs: f64, max_jump: u64) -> Self {
        Self {
            chunk_samples,
            heap_samples,
            fs,
            window: RECV_WINDOW as u64,
            max_jump,
            tolerance: 2.0 * chunk_samples as f64 + 0.01 * fs,
            offset: 0,
            newest: None,
            candidate: None,
            epochs: VecDeque::new(),
            now: Instant::now(),
        }
    }

    /// Newest timestamp accepted.
    pub(crate) fn newest_timestamp(&self) -> Option<u64> {
        self.newest.map(|n| n.ts)
    }

    pub(crate) fn place(&mut self, p: &Packet) -> Result<Placement, Reject> {
        let ts = p
            .immediate(items::TIMESTAMP)
            .ok_or(Reject::MissingMandatoryItem)?;
        if ts % self.heap_samples != 0 {
            return Err(Reject::Misaligned);
        }
        let real = ts / self.chunk_samples;
        let slot = ((ts % self.chunk_samples) / self.heap_samples) as usize;
        let mut internal = real.saturating_add(self.offset);
        if let Some(n) = self.newest {
            let elapsed = self.now.saturating_duration_since(n.at).as_secs_f64();
            let expected = n.ts as f64 + elapsed * self.fs;
            let ahead = ts as f64 > expected + self.tolerance;
            let behind = internal.saturating_add(self.window) < n.internal;
            if ahead || behind {
                let count = match self.candidate {
                    Some((c, k)) if c.abs_diff(real) <= self.window => k + 1,
                    _ => 1,
                };
                if count < CONFIRM {
                    self.candidate = Some((real, count));
                    return Err(if ahead {
                        Reject::TooNew
                    } else {
                        Reject::TooOld
                    });
                }
                self.candidate = None;
                if behind {
                    // Put the restarted stream beyond the assembler's window so that it
                    // resynchronises forward.
                    let target = n.internal.saturating_add(self.window + self.max_jump + 2);
                    self.offset = target.saturating_sub(real);
                    self.epochs.push_back((target, self.offset));
                    if self.epochs.len() > 8 {
                        self.epochs.pop_front();
                    }
                    internal = target;
                }
                tracing::warn!(
                    from = n.ts,
                    to = ts,
                    "input timestamps jumped; resynchronising"
                );
            } else {
                self.candidate = None;
            }
        }
        match self.newest {
            Some(n) if (internal, ts) <= (n.internal, n.ts) => {}
            _ => {
                self.newest = Some(Newest {
                    internal,
                    ts,
                    at: self.now,
                })
            }
        }
        Ok(Placement {
            chunk: internal,
            slot,
        })
    }

    /// The real chunk id of an assembler id.
    pub(crate) fn real_id(&self, internal: u64) -> u64 {
        let offset = self
            .epochs
            .iter()
            .rev()
            .find(|(start, _)| *start <= internal)
            .map_or(0, |(_, o)| *o);
        internal.saturating_sub(offset)
    }
}

/// One polarisation's receiver.
pub struct Recv {
    pol: usize,
    sockets: Vec<transport::Receiver>,
    asm: ChunkAssembler<HostBuffer>,
    placer: Placer,
    limits: Limits,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Recv {
    pub fn new(
        cfg: &EngineConfig,
        pol: usize,
        sockets: Vec<transport::Receiver>,
        buffers: Vec<HostBuffer>,
        stats: Arc<Stats>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let max_jump = RECV_WINDOW as u64;
        let chunk_cfg = ChunkConfig {
            slots: cfg.heaps_per_chunk(),
            slot_bytes: cfg.heap_bytes,
            packet_payload: cfg.heap_bytes,
            window: RECV_WINDOW,
            max_jump,
        };
        let mut asm = ChunkAssembler::new(chunk_cfg, stats.pols[pol].rejects.clone());
        for b in buffers {
            if asm.give(b).is_err() {
                tracing::error!(pol, "a chunk buffer is smaller than a chunk; dropped");
            }
        }
        let _ = stats.pols[pol].chunk.set(asm.stats().clone());
        let chunk_samples = cfg.geometry.chunk_samples() as u64;
        Self {
            pol,
            sockets,
            asm,
            placer: Placer::new(chunk_samples, cfg.heap_samples as u64, cfg.fs, max_jump),
            // Heaps of another size are let through decoding so that the assembler counts them as
            // the wrong size rather than too large.
            limits: Limits {
                max_packet: (cfg.heap_bytes + PACKET_HEADER_BYTES + 1024).max(9200),
                max_heap: Limits::default().max_heap,
            },
            stats,
            stop,
        }
    }

    pub fn run(
        mut self,
        to_pair: Sender<RecvMsg>,
        returns: Receiver<Chunk<HostBuffer>>,
    ) -> Result<(), String> {
        let mut pfds: Vec<libc::pollfd> = self
            .sockets
            .iter()
            .map(|r| libc::pollfd {
                fd: r.socket().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut events: Vec<ChunkEvent<HostBuffer>> = Vec::with_capacity(RECV_WINDOW + 2);
        let timeout_ms = super::TICK.as_millis() as libc::c_int;
        while !self.stop.load(Ordering::Relaxed) {
            while let Ok(c) = returns.try_recv() {
                self.asm.recycle(c);
            }
            // SAFETY: `pfds` is a valid array of pollfd for the duration of the call.
            let r =
                unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("polarisation {} receive failed: {e}.", self.pol));
            }
            if r == 0 {
                continue;
            }
            self.placer.now = Instant::now();
            for (i, pfd) in pfds.iter().enumerate() {
                if pfd.revents == 0 {
                    continue;
                }
                for _ in 0..BATCHES_PER_SOCKET {
                    let rx = &mut self.sockets[i];
                    match rx.recv(Duration::ZERO) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(pol = self.pol, "receive error: {e}");
                            break;
                        }
                    }
                    let placer = &mut self.placer;
                    for d in rx.datagrams() {
                        let _ =
                            self.asm
                                .add_datagram(d, &self.limits, |p| placer.place(p), &mut |e| {
                                    events.push(e)
                                });
                        if !events.is_empty() {
                            Self::forward(self.pol, &mut self.asm, placer, &mut events, &to_pair);
                        }
                    }
                }
            }
            if let Some(ts) = self.placer.newest_timestamp() {
                self.stats.pols[self.pol]
                    .last_timestamp
                    .store(ts, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Hands finished chunks and resync notices to the pairing stage, never blocking: the queue has
    /// room for every buffer, and a chunk that cannot be handed over is recycled here.
    fn forward(
        pol: usize,
        asm: &mut ChunkAssembler<HostBuffer>,
        placer: &Placer,
        events: &mut Vec<ChunkEvent<HostBuffer>>,
        to_pair: &Sender<RecvMsg>,
    ) {
        for e in events.drain(..) {
            let msg = match e {
                ChunkEvent::Ready(chunk) => RecvMsg::Chunk {
                    pol,
                    id: placer.real_id(chunk.id),
                    chunk,
                },
                ChunkEvent::Resync { to, .. } => {
                    let to = placer.real_id(to);
                    tracing::info!(pol, chunk = to, "receiver resynchronised");
                    RecvMsg::Resync { pol, to }
                }
            };
            match to_pair.try_send(msg) {
                Ok(()) => {}
                Err(TrySendError::Full(RecvMsg::Chunk { chunk, .. }))
                | Err(TrySendError::Disconnected(RecvMsg::Chunk { chunk, .. })) => {
                    asm.recycle(chunk);
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spead::{HeapItem, HeapWriter};

    fn packet_with(ts: Option<u64>) -> Vec<u8> {
        let mut items = vec![HeapItem::addressed(items::ADC_SAMPLES, &[0u8; 16])];
        if let Some(t) = ts {
            items.push(HeapItem::immediate(items::TIMESTAMP, t));
        }
        let mut out = Vec::new();
        HeapWriter::new(64).write(1, &items, |p| out = p.to_vec());
        out
    }

    fn place(p: &mut Placer, ts: u64) -> Result<Placement, Reject> {
        let raw = packet_with(Some(ts));
        let pkt = Packet::decode(&raw, &Limits::default()).unwrap();
        p.place(&pkt)
    }

    #[test]
    fn placement_and_rejections() {
        // Chunks of 4 heaps of 8 samples.
        let mut p = Placer::new(32, 8, 1e6, 3);
        assert_eq!(place(&mut p, 40), Ok(Placement { chunk: 1, slot: 1 }));
        assert_eq!(place(&mut p, 41), Err(Reject::Misaligned));
        let raw = packet_with(None);
        let pkt = Packet::decode(&raw, &Limits::default()).unwrap();
        assert_eq!(p.place(&pkt), Err(Reject::MissingMandatoryItem));
    }

    #[test]
    fn a_stray_future_heap_is_dropped_but_a_sustained_jump_is_followed() {
        let mut p = Placer::new(32, 8, 1e3, 3);
        assert!(place(&mut p, 0).is_ok());
        // Far beyond 2 chunks + 10 ms of samples.
        assert_eq!(place(&mut p, 1_000_000), Err(Reject::TooNew));
        assert_eq!(place(&mut p, 8), Ok(Placement { chunk: 0, slot: 1 }));
        for k in 0..CONFIRM - 1 {
            assert_eq!(place(&mut p, 1_000_000 + 8 * k as u64), Err(Reject::TooNew));
        }
        let jumped = place(&mut p, 1_000_000 + 8 * CONFIRM as u64).unwrap();
        assert_eq!(
            p.real_id(jumped.chunk),
            (1_000_000 + 8 * CONFIRM as u64) / 32
        );
    }

    #[test]
    fn a_backward_restart_becomes_a_forward_resync() {
        let mut p = Placer::new(32, 8, 1e6, 3);
        for t in (3200..3400).step_by(8) {
            place(&mut p, t).unwrap();
        }
        let newest = 3392 / 32;
        for k in 0..CONFIRM - 1 {
            assert_eq!(place(&mut p, 8 * k as u64), Err(Reject::TooOld));
        }
        let t = 8 * (CONFIRM - 1) as u64;
        let at = place(&mut p, t).unwrap();
        // Beyond the window plus the assembler's max jump, so the assembler resynchronises.
        assert!(at.chunk > newest + (RECV_WINDOW as u64) + 3);
        assert_eq!(p.real_id(at.chunk), t / 32);
        // Later heaps of the new stream follow in the new epoch; old ids still map back.
        let next = place(&mut p, t + 32).unwrap();
        assert_eq!(next.chunk, at.chunk + 1);
        assert_eq!(p.real_id(newest), newest);
    }
}

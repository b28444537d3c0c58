//! Pairing stage: matches the two polarisations' chunks by chunk id (paper, 3.2) and puts both
//! into one frame. The chunk buffers are swapped with the free frame's spent ones, which go back to
//! the receivers inside the same chunk structs, so nothing is copied or allocated.
//!
//! Rules, applied to the oldest chunk of each polarisation's queue:
//! - same id: one frame with both;
//! - different ids: the smaller goes alone (the other polarisation never produced it: a chunk with
//!   no packet at all is not emitted), its partner counted all-missing;
//! - only one polarisation has a chunk: it waits up to a timeout (a few chunk durations, and at
//!   least [`SLACK`]) or until [`max_pending`](super::max_pending) more arrive, then goes alone;
//! - a resync notice is a barrier: the other polarisation's chunks before its own notice drain
//!   alone first, so old and new streams are never paired. A polarisation that does not restart
//!   is not held up by the barrier: its chunks go alone as for a silent partner;
//! - a chunk whose frame has already gone (its partner waited its time out) is dropped and
//!   counted late, as a frame is never sent twice; ids far below the last frame's are a restarted
//!   stream, not late.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use spead::chunk::Chunk;

use super::recv::RecvMsg;
use super::{recv_until_stop, send_until_stop, PipelineError, Work, SLACK, TICK};
use crate::backend::{HostBuffer, POLS};
use crate::stats::Stats;

enum Entry {
    Chunk {
        id: u64,
        chunk: Chunk<HostBuffer>,
        at: Instant,
    },
    Resync {
        at: Instant,
    },
}

impl Entry {
    fn at(&self) -> Instant {
        match self {
            Entry::Chunk { at, .. } | Entry::Resync { at } => *at,
        }
    }
}

/// What to do next.
enum Step {
    Pair,
    Alone(usize),
    DropResyncs,
    DropResync(usize),
    Wait,
}

/// What the pairing stage needs: the chunks' length, and how long and how many of one
/// polarisation's it holds while waiting for the other's.
#[derive(Clone, Debug)]
pub struct PairSpec {
    /// New samples per polarisation per chunk.
    pub chunk_samples: u64,
    /// How long one chunk lasts (at most a minute, for the timeout).
    pub chunk: Duration,
    /// Chunks of one polarisation held at most ([`max_pending`](super::max_pending)).
    pub max_pending: usize,
}

/// How far below the last frame's id a chunk is late rather than a restarted stream's: a
/// restart jumps back further (a new sync time, or timestamps from 0).
const LATE_SPAN: Duration = Duration::from_secs(10);

pub struct Pair {
    chunk_samples: u64,
    timeout: Duration,
    max_pending: usize,
    /// [`LATE_SPAN`] in chunks.
    late_span: u64,
    /// The id of the frame last handed on.
    last_emitted: Option<u64>,
    pending: [VecDeque<Entry>; POLS],
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Pair {
    pub fn new(spec: &PairSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Self {
        Self {
            chunk_samples: spec.chunk_samples,
            timeout: (spec.chunk * 3).max(SLACK),
            max_pending: spec.max_pending,
            late_span: (LATE_SPAN.as_secs_f64() / spec.chunk.as_secs_f64().max(1e-9)).ceil() as u64,
            last_emitted: None,
            pending: [VecDeque::new(), VecDeque::new()],
            stats,
            stop,
        }
    }

    pub fn run(
        mut self,
        rx: Receiver<RecvMsg>,
        free: Receiver<Work>,
        to_compute: Sender<Work>,
        returns: [Sender<Chunk<HostBuffer>>; POLS],
    ) -> Result<(), PipelineError> {
        let mut ctx = Ctx {
            free,
            to_compute,
            returns,
        };
        while !self.stop.load(Ordering::Relaxed) {
            match rx.recv_timeout(TICK) {
                Ok(msg) => self.push(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            while let Ok(msg) = rx.try_recv() {
                self.push(msg);
            }
            if !self.match_up(Instant::now(), &mut ctx) {
                break;
            }
        }
        Ok(())
    }

    fn push(&mut self, msg: RecvMsg) {
        let at = Instant::now();
        match msg {
            RecvMsg::Chunk { pol, id, chunk } => {
                self.pending[pol % POLS].push_back(Entry::Chunk { id, chunk, at })
            }
            RecvMsg::Resync { pol, .. } => self.pending[pol % POLS].push_back(Entry::Resync { at }),
        }
    }

    fn has_resync(&self, pol: usize) -> bool {
        self.pending[pol]
            .iter()
            .any(|e| matches!(e, Entry::Resync { .. }))
    }

    /// Whether the front of `pol`'s queue has waited long enough to go without its partner.
    fn overdue(&self, pol: usize, now: Instant) -> bool {
        self.pending[pol]
            .front()
            .is_some_and(|e| now.duration_since(e.at()) >= self.timeout)
            || self.pending[pol].len() > self.max_pending
    }

    fn decide(&self, now: Instant) -> Step {
        use Entry::{Chunk as C, Resync as R};
        match (self.pending[0].front(), self.pending[1].front()) {
            (Some(R { .. }), Some(R { .. })) => Step::DropResyncs,
            (Some(C { id: a, .. }), Some(C { id: b, .. })) => {
                if a == b {
                    Step::Pair
                } else if a < b {
                    Step::Alone(0)
                } else {
                    Step::Alone(1)
                }
            }
            (Some(C { .. }), None) => {
                if self.overdue(0, now) {
                    Step::Alone(0)
                } else {
                    Step::Wait
                }
            }
            (None, Some(C { .. })) => {
                if self.overdue(1, now) {
                    Step::Alone(1)
                } else {
                    Step::Wait
                }
            }
            (Some(R { .. }), other) | (other, Some(R { .. })) => {
                let p = if matches!(self.pending[0].front(), Some(R { .. })) {
                    0
                } else {
                    1
                };
                let q = 1 - p;
                if matches!(other, Some(C { .. })) && (self.has_resync(q) || self.overdue(q, now)) {
                    // The other polarisation's old stream drains first; and while this one waits
                    // for the other to restart too, the other's chunks wait no longer than for a
                    // silent partner (else they hold its receivers' buffers, and it loses data).
                    Step::Alone(q)
                } else if self.overdue(p, now) {
                    // The other polarisation did not restart: stop waiting for it.
                    Step::DropResync(p)
                } else {
                    Step::Wait
                }
            }
            (None, None) => Step::Wait,
        }
    }

    /// Emits every frame that can be emitted now. False when the pipeline is shutting down.
    fn match_up(&mut self, now: Instant, ctx: &mut Ctx) -> bool {
        loop {
            let ok = match self.decide(now) {
                Step::Wait => return true,
                Step::DropResyncs => {
                    self.pending[0].pop_front();
                    self.pending[1].pop_front();
                    true
                }
                Step::DropResync(p) => {
                    self.pending[p].pop_front();
                    true
                }
                Step::Pair => {
                    let a = self.take_chunk(0);
                    let b = self.take_chunk(1);
                    match (a, b) {
                        (Some((id, a)), Some((_, b))) if self.is_late(id) => {
                            self.drop_late(0, a, ctx) && self.drop_late(1, b, ctx)
                        }
                        (Some((id, a)), Some((_, b))) => self.emit(id, [Some(a), Some(b)], ctx),
                        _ => true,
                    }
                }
                Step::Alone(p) => match self.take_chunk(p) {
                    Some((id, c)) if self.is_late(id) => self.drop_late(p, c, ctx),
                    Some((id, c)) => {
                        self.stats.pols[p]
                            .unpaired_chunks
                            .fetch_add(1, Ordering::Relaxed);
                        let chunks = if p == 0 {
                            [Some(c), None]
                        } else {
                            [None, Some(c)]
                        };
                        self.emit(id, chunks, ctx)
                    }
                    None => true,
                },
            };
            if !ok {
                return false;
            }
        }
    }

    /// Whether the frame `id` has already gone: at or just below the last one handed on.
    fn is_late(&self, id: u64) -> bool {
        self.last_emitted
            .is_some_and(|last| id <= last && last - id < self.late_span)
    }

    /// Gives a late chunk's buffer back to its receivers, uncomputed. False when shutting down.
    fn drop_late(&self, pol: usize, chunk: Chunk<HostBuffer>, ctx: &Ctx) -> bool {
        self.stats.pols[pol]
            .late_chunks
            .fetch_add(1, Ordering::Relaxed);
        ctx.returns[pol].send(chunk).is_ok()
    }

    /// Pops the front of `pol`'s queue if it is a chunk.
    fn take_chunk(&mut self, pol: usize) -> Option<(u64, Chunk<HostBuffer>)> {
        match self.pending[pol].pop_front() {
            Some(Entry::Chunk { id, chunk, .. }) => Some((id, chunk)),
            Some(other) => {
                self.pending[pol].push_front(other);
                None
            }
            None => None,
        }
    }

    /// Puts the chunks into a free frame and hands it on; a missing polarisation is all-missing.
    fn emit(&mut self, id: u64, chunks: [Option<Chunk<HostBuffer>>; POLS], ctx: &mut Ctx) -> bool {
        let Some(mut work) = recv_until_stop(&ctx.free, &self.stop) else {
            return false;
        };
        for (pol, c) in chunks.into_iter().enumerate() {
            let present = &mut work.meta.present[pol];
            match c {
                Some(mut chunk) => {
                    std::mem::swap(&mut work.frame.input.chunk[pol], &mut chunk.data);
                    if present.len() == chunk.present.len() {
                        present.copy_from_slice(&chunk.present);
                    } else {
                        // Cannot happen with buffers sized from one configuration.
                        present.fill(false);
                    }
                    // The return queue has room for every buffer: this does not block.
                    if ctx.returns[pol].send(chunk).is_err() {
                        return false;
                    }
                }
                None => present.fill(false),
            }
        }
        work.meta.id = id;
        work.meta.computed = false;
        work.frame.input.timestamp = id.saturating_mul(self.chunk_samples);
        self.last_emitted = Some(id);
        send_until_stop(&ctx.to_compute, work, &self.stop)
    }
}

struct Ctx {
    free: Receiver<Work>,
    to_compute: Sender<Work>,
    returns: [Sender<Chunk<HostBuffer>>; POLS],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Frame;
    use crate::config::EngineConfig;
    use crate::pipeline::{Meta, StageSpecs};
    use crossbeam_channel::bounded;
    use spead::chunk::{ChunkAssembler, ChunkConfig, ChunkEvent, Placement};
    use spead::{HeapItem, HeapWriter, Limits, RejectCounters};

    fn config() -> EngineConfig {
        let args = crate::config::test_args(&[
            "--channels",
            "16",
            "--taps",
            "2",
            "--spectra-per-heap",
            "8",
            "--heaps-per-frame",
            "2",
            "--heap-samples",
            "256",
            "--adc-sample-rate",
            "1e6",
            "--max-delay",
            "0",
        ])
        .unwrap();
        EngineConfig::from_args(&args).unwrap()
    }

    /// Chunks with the given ids (each with its first heap present), made by a real assembler.
    fn chunks(cfg: &EngineConfig, ids: &[u64]) -> Vec<Chunk<HostBuffer>> {
        let slots = cfg.heaps_per_chunk();
        let mut asm = ChunkAssembler::new(
            ChunkConfig {
                slots,
                slot_bytes: cfg.input.heap_bytes,
                packet_payload: cfg.input.heap_bytes,
                window: 1,
                max_jump: u64::MAX / 2,
            },
            Arc::new(RejectCounters::new()),
        );
        for _ in ids {
            let _ = asm.give(HostBuffer::zeroed(cfg.input.geometry.chunk_bytes()));
        }
        let payload = vec![0u8; cfg.input.heap_bytes];
        let mut out = Vec::new();
        for &id in ids {
            let items = [HeapItem::addressed(0x3300, &payload)];
            HeapWriter::new(cfg.input.heap_bytes).write(id, &items, |d| {
                let _ = asm.add_datagram(
                    d,
                    &Limits::default(),
                    |_| Ok(Placement { chunk: id, slot: 0 }),
                    &mut |e| {
                        if let ChunkEvent::Ready(c) = e {
                            out.push(c)
                        }
                    },
                );
            });
        }
        asm.flush(&mut |e| {
            if let ChunkEvent::Ready(c) = e {
                out.push(c)
            }
        });
        out
    }

    struct Rig {
        pair: Pair,
        ctx: Ctx,
        out: Receiver<Work>,
        _returned: [Receiver<Chunk<HostBuffer>>; POLS],
        cfg: EngineConfig,
    }

    fn rig() -> Rig {
        let cfg = config();
        let specs = StageSpecs::new(&cfg);
        let stats = Arc::new(Stats::new(&[(crate::config::WIDEBAND, 1)]));
        let (free_tx, free) = bounded(16);
        for _ in 0..16 {
            let work = Work {
                frame: Frame::new_host(&cfg.input.geometry, &cfg.output_geometries()),
                meta: Meta::new(&specs.frame),
            };
            free_tx.send(work).unwrap();
        }
        let (to_compute, out) = bounded(16);
        let (r0, r0rx) = bounded(64);
        let (r1, r1rx) = bounded(64);
        Rig {
            pair: Pair::new(&specs.pair, stats, Arc::new(AtomicBool::new(false))),
            ctx: Ctx {
                free,
                to_compute,
                returns: [r0, r1],
            },
            out,
            _returned: [r0rx, r1rx],
            cfg,
        }
    }

    impl Rig {
        fn chunk(&mut self, pol: usize, id: u64) {
            let c = chunks(&self.cfg, &[id]).pop().unwrap();
            self.pair.push(RecvMsg::Chunk { pol, id, chunk: c });
        }
        fn resync(&mut self, pol: usize) {
            self.pair.push(RecvMsg::Resync { pol, to: 0 });
        }
        /// (id, pol0 present, pol1 present) of the frames emitted by `at`.
        fn frames(&mut self, at: Instant) -> Vec<(u64, bool, bool)> {
            assert!(self.pair.match_up(at, &mut self.ctx));
            self.out
                .try_iter()
                .map(|w| (w.meta.id, w.meta.present[0][0], w.meta.present[1][0]))
                .collect()
        }
    }

    #[test]
    fn matching_ids_pair_and_gaps_go_alone() {
        let mut r = rig();
        r.chunk(0, 5);
        r.chunk(1, 5);
        r.chunk(0, 6);
        r.chunk(0, 8);
        r.chunk(1, 7);
        r.chunk(1, 8);
        let now = Instant::now();
        assert_eq!(
            r.frames(now),
            vec![
                (5, true, true),
                (6, true, false),
                (7, false, true),
                (8, true, true)
            ]
        );
        let f = r.cfg.input.geometry.chunk_samples as u64;
        assert_eq!(r.pair.chunk_samples, f);
    }

    #[test]
    fn a_lone_chunk_waits_for_its_partner_then_goes_alone() {
        let mut r = rig();
        r.chunk(0, 10);
        let now = Instant::now();
        assert!(r.frames(now).is_empty());
        assert_eq!(r.frames(now + r.pair.timeout), vec![(10, true, false)]);
        // Or when too many pile up behind it.
        for id in 11..11 + r.pair.max_pending as u64 + 1 {
            r.chunk(1, id);
        }
        assert_eq!(r.frames(Instant::now())[0], (11, false, true));
    }

    #[test]
    fn one_polarisation_restarting_does_not_hold_up_the_other() {
        // Pol 1 restarts alone: pol 0's chunks keep leaving, alone, as for a silent partner,
        // rather than piling up behind pol 1's notice until it times out.
        let mut r = rig();
        // Few enough that the rig's frames suffice.
        r.pair.max_pending = 4;
        r.resync(1);
        let last = 10 + r.pair.max_pending as u64;
        for id in 10..=last {
            r.chunk(0, id);
        }
        assert_eq!(r.frames(Instant::now()), vec![(10, true, false)]);
        assert_eq!(r.pair.pending[0].len(), r.pair.max_pending);
        // And by the time they have waited for a partner as long as they would for a silent one.
        let later = Instant::now() + r.pair.timeout;
        let alone: Vec<_> = (11..=last).map(|id| (id, true, false)).collect();
        assert_eq!(r.frames(later), alone);
    }

    #[test]
    fn a_chunk_whose_frame_has_gone_is_dropped_as_late() {
        let mut r = rig();
        // The rig's chunks last 0.5 ms: a span of 5 of them, for the restart below.
        r.pair.late_span = 5;
        r.chunk(0, 10);
        let later = Instant::now() + r.pair.timeout;
        assert_eq!(r.frames(later), vec![(10, true, false)]);
        // Pol 1's chunk 10 comes after its frame went without it: no second frame 10.
        r.chunk(1, 10);
        r.chunk(0, 11);
        r.chunk(1, 11);
        assert_eq!(r.frames(Instant::now()), vec![(11, true, true)]);
        let late = |p: usize| r.pair.stats.pols[p].late_chunks.load(Ordering::Relaxed);
        assert_eq!((late(0), late(1)), (0, 1));
        // A stream restarted from far back is not late.
        r.chunk(0, 1);
        r.chunk(1, 1);
        assert_eq!(r.frames(Instant::now()), vec![(1, true, true)]);
    }

    #[test]
    fn old_and_new_streams_are_never_paired() {
        let mut r = rig();
        r.pair.late_span = 5;
        r.chunk(0, 100);
        r.resync(0);
        r.chunk(0, 3);
        r.chunk(1, 100);
        r.chunk(1, 101);
        let now = Instant::now();
        // Pol 1's old chunk 101 waits for pol 1's own resync (or the timeout).
        assert_eq!(r.frames(now), vec![(100, true, true)]);
        r.resync(1);
        r.chunk(1, 3);
        assert_eq!(r.frames(now), vec![(101, false, true), (3, true, true)]);
    }
}

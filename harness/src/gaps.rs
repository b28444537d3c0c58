//! Per-substream sequence tracking of heap timestamps: gaps, late, reordered and duplicate heaps.
//! Pure logic (no I/O), so every rule is unit tested here.
//!
//! Consecutive heaps of one substream differ in timestamp by `step` = spectra_per_heap x 2 x
//! channels (docs/wire-formats.md). The first heap fixes the phase (timestamp mod step); a heap off
//! that lattice is misaligned. A timestamp skipped over opens a hole; a hole filled within
//! `reorder_window` heaps of the newest heap is a reordered heap, later than that a late heap.
//! Holes never filled are the gaps. A restarted sender starts tracking again (a resync): a jump
//! of more than [`DEFAULT_RESYNC_HEAPS`] either way, or [`RESTART_CONFIRM`] heaps in order far
//! behind the newest with nothing newer between them (a digitiser restarted seconds into its
//! stream starts again near zero).

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// Jumps larger than this many heaps (either way) mean the sender restarted: tracking starts
/// again instead of reporting millions of gaps or duplicates.
pub const DEFAULT_RESYNC_HEAPS: u64 = 1 << 20;

/// Heaps in a row, in order, far behind the newest (beyond the reorder window) with nothing newer
/// between them, that tell a sender restarted at an earlier time by fewer than the resync
/// threshold: a digitiser restarted seconds into its stream starts again near zero.
pub const RESTART_CONFIRM: u64 = 8;

/// How many recently classified stray timestamps are remembered (so that the many packets of one
/// stray heap count once).
const STRAY_MEMORY: usize = 64;

/// What one arrival was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The next timestamp, or a jump forward (the skipped ones become holes).
    InOrder,
    /// Filled a hole within the reorder window.
    Reordered,
    /// Filled a hole after the reorder window had passed it.
    Late,
    /// Already received.
    Duplicate,
    /// Not on the timestamp lattice.
    Misaligned,
    /// A jump too large to be loss: tracking restarted at this heap.
    Resync,
    /// Ignored (before tracking started).
    Ignored,
}

/// Counters of one substream (or a sum over substreams).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SeqCounts {
    /// Heaps received complete (duplicates excluded).
    pub received: u64,
    /// Heaps missing now: holes opened and not filled.
    pub gaps: u64,
    /// Holes filled within the reorder window (not an error).
    pub reordered: u64,
    /// Holes filled after the reorder window.
    pub late: u64,
    pub duplicates: u64,
    pub misaligned: u64,
    /// Heaps seen only partly before the window passed them (also counted in `gaps`).
    pub incomplete: u64,
    pub resyncs: u64,
}

impl std::ops::AddAssign for SeqCounts {
    fn add_assign(&mut self, o: Self) {
        self.received += o.received;
        self.gaps += o.gaps;
        self.reordered += o.reordered;
        self.late += o.late;
        self.duplicates += o.duplicates;
        self.misaligned += o.misaligned;
        self.incomplete += o.incomplete;
        self.resyncs += o.resyncs;
    }
}

#[derive(Clone, Debug)]
pub struct SeqTracker {
    step: u64,
    reorder_window: u64,
    resync_heaps: u64,
    /// Timestamp mod step, fixed by the first heap.
    phase: Option<u64>,
    /// Lowest timestamp tracked (holes below it are not ours to report).
    first: u64,
    /// One step past the newest timestamp received.
    next: u64,
    /// Holes as [start, end) timestamp ranges.
    holes: BTreeMap<u64, u64>,
    recent_strays: VecDeque<u64>,
    counts: SeqCounts,
    /// A run of heaps far behind the newest that may be a restarted sender.
    behind: Option<BehindRun>,
}

/// Consecutive heaps far behind the stream, up to `next` (exclusive).
#[derive(Clone, Copy, Debug)]
struct BehindRun {
    next: u64,
    heaps: u64,
    /// The counts before the run's first heap: its heaps were counted late, duplicate or
    /// ignored, which a confirmed restart undoes.
    before: SeqCounts,
}

impl SeqTracker {
    /// `step`: timestamp difference of consecutive heaps (at least 1).
    pub fn new(step: u64, reorder_window: u64) -> Self {
        Self {
            step: step.max(1),
            reorder_window,
            resync_heaps: DEFAULT_RESYNC_HEAPS,
            phase: None,
            first: 0,
            next: 0,
            holes: BTreeMap::new(),
            recent_strays: VecDeque::with_capacity(STRAY_MEMORY),
            counts: SeqCounts::default(),
            behind: None,
        }
    }

    pub fn with_resync(mut self, heaps: u64) -> Self {
        self.resync_heaps = heaps.max(1);
        self
    }

    pub fn step(&self) -> u64 {
        self.step
    }

    pub fn counts(&self) -> SeqCounts {
        self.counts
    }

    /// First timestamp tracked, once a heap arrived.
    pub fn first(&self) -> Option<u64> {
        self.phase.map(|_| self.first)
    }

    /// Newest timestamp received.
    pub fn newest(&self) -> Option<u64> {
        self.phase.map(|_| self.next - self.step)
    }

    /// Missing timestamps as [start, end) ranges, oldest first.
    pub fn holes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.holes.iter().map(|(&s, &e)| (s, e))
    }

    /// A complete heap with timestamp `ts` arrived.
    pub fn heap(&mut self, ts: u64) -> Arrival {
        let Some(phase) = self.phase else {
            self.start(ts);
            return Arrival::InOrder;
        };
        if ts % self.step != phase {
            self.counts.misaligned += 1;
            return Arrival::Misaligned;
        }
        let before = self.counts;
        let arrival = self.place(ts);
        if self.restarted_behind(ts, before) {
            self.start(ts);
            return Arrival::Resync;
        }
        arrival
    }

    /// Counts heap `ts` (on the lattice) against the stream in place.
    fn place(&mut self, ts: u64) -> Arrival {
        if ts >= self.next {
            let skipped = (ts - self.next) / self.step;
            if skipped > self.resync_heaps {
                return self.resync(ts);
            }
            if skipped > 0 {
                self.holes.insert(self.next, ts);
                self.counts.gaps += skipped;
            }
            self.next = ts + self.step;
            self.counts.received += 1;
            return Arrival::InOrder;
        }
        if ts < self.first {
            let before = (self.first - ts) / self.step;
            if before > self.resync_heaps {
                return self.resync(ts);
            }
            // Arrived before the heap that started tracking: the start was out of order.
            if before <= self.reorder_window {
                if before > 1 {
                    self.holes.insert(ts + self.step, self.first);
                    self.counts.gaps += before - 1;
                }
                self.first = ts;
                self.counts.received += 1;
                self.counts.reordered += 1;
                return Arrival::Reordered;
            }
            return Arrival::Ignored;
        }
        if self.fill(ts) {
            self.counts.received += 1;
            let behind = (self.next - self.step - ts) / self.step;
            if behind > self.reorder_window {
                self.counts.late += 1;
                Arrival::Late
            } else {
                self.counts.reordered += 1;
                Arrival::Reordered
            }
        } else {
            self.counts.duplicates += 1;
            Arrival::Duplicate
        }
    }

    /// Follows a run of heaps far behind the newest (`before`: the counts before `ts` was
    /// counted). Once [`RESTART_CONFIRM`] of them came in order with nothing newer between, the
    /// sender restarted: the run's counts are undone, the holes forgotten, and true returned (the
    /// caller starts tracking again).
    fn restarted_behind(&mut self, ts: u64, before: SeqCounts) -> bool {
        let far_behind = ts + (self.reorder_window + 1) * self.step < self.next;
        if !far_behind {
            self.behind = None;
            return false;
        }
        let run = match self.behind {
            Some(r) if r.next == ts => BehindRun {
                next: ts + self.step,
                heaps: r.heaps + 1,
                ..r
            },
            _ => BehindRun {
                next: ts + self.step,
                heaps: 1,
                before,
            },
        };
        if run.heaps < RESTART_CONFIRM {
            self.behind = Some(run);
            return false;
        }
        self.behind = None;
        self.counts = run.before;
        self.holes.clear();
        self.recent_strays.clear();
        self.counts.resyncs += 1;
        true
    }

    /// A heap emitted incomplete (its window passed before all its packets came): a hole.
    /// Ignored before tracking starts (a receiver joining mid-heap).
    pub fn incomplete(&mut self, ts: u64) {
        let Some(phase) = self.phase else { return };
        if ts % self.step != phase || ts < self.next {
            return;
        }
        if (ts - self.next) / self.step > self.resync_heaps {
            // A restart; tracking begins again at the next complete heap.
            self.holes.clear();
            self.recent_strays.clear();
            self.counts.resyncs += 1;
            self.phase = None;
            return;
        }
        self.holes.insert(self.next, ts + self.step);
        self.counts.gaps += (ts - self.next) / self.step + 1;
        self.counts.incomplete += 1;
        self.next = ts + self.step;
    }

    /// A packet of heap `ts` that could no longer be assembled (its window had passed, or it
    /// repeats bytes already received). Fills a hole as a late heap, or counts a duplicate heap;
    /// the other packets of the same heap are not counted again. [`Arrival::Resync`] when such
    /// heaps, in order, show that the sender restarted: the caller starts assembling afresh.
    pub fn stray(&mut self, ts: u64) -> Arrival {
        let Some(phase) = self.phase else {
            return Arrival::Ignored;
        };
        if ts % self.step != phase || ts >= self.next || self.recent_strays.contains(&ts) {
            return Arrival::Ignored;
        }
        if self.recent_strays.len() == STRAY_MEMORY {
            self.recent_strays.pop_front();
        }
        self.recent_strays.push_back(ts);
        let before = self.counts;
        let arrival = if ts < self.first {
            Arrival::Ignored
        } else if self.fill(ts) {
            self.counts.received += 1;
            self.counts.late += 1;
            Arrival::Late
        } else {
            self.counts.duplicates += 1;
            Arrival::Duplicate
        };
        if self.restarted_behind(ts, before) {
            // Tracking begins again at the next complete heap.
            self.phase = None;
            return Arrival::Resync;
        }
        arrival
    }

    fn start(&mut self, ts: u64) {
        self.phase = Some(ts % self.step);
        self.first = ts;
        self.next = ts + self.step;
        self.counts.received += 1;
    }

    fn resync(&mut self, ts: u64) -> Arrival {
        // Holes from before the restart stay counted: they were lost.
        self.holes.clear();
        self.recent_strays.clear();
        self.counts.resyncs += 1;
        self.start(ts);
        Arrival::Resync
    }

    /// Removes `ts` from the holes; false if it was not missing.
    fn fill(&mut self, ts: u64) -> bool {
        let Some((&start, &end)) = self.holes.range(..=ts).next_back() else {
            return false;
        };
        if ts >= end {
            return false;
        }
        self.holes.remove(&start);
        if start < ts {
            self.holes.insert(start, ts);
        }
        if ts + self.step < end {
            self.holes.insert(ts + self.step, end);
        }
        self.counts.gaps -= 1;
        true
    }
}

/// Timestamps of the output heaps (on the lattice `phase + k step`) that lose data when input
/// samples `[lost_start, lost_end)` are missing, for heaps that need input `[H, H + span)`.
///
/// For the F-engine, `span` = 2n (spectra_per_heap + taps - 1): the heap's spectra start every 2n
/// samples from H and each reads a window of 2n taps samples (zero delay).
///
/// This is the test bed's oracle for "which output heaps a lost input heap takes with it", used
/// by the harness, the container tests and the engine's end-to-end tests. It is deliberately
/// written from the signal path's definition alone, independent of the engine's code: the test
/// bed must not check the engine with the engine's own logic, or a shared mistake would pass.
pub fn outputs_hit(lost_start: u64, lost_end: u64, phase: u64, step: u64, span: u64) -> Vec<u64> {
    if lost_end <= lost_start || step == 0 || span == 0 {
        return Vec::new();
    }
    let phase = phase % step;
    // Smallest H >= lost_start - span + 1 on the lattice.
    let lo = (lost_start + 1).saturating_sub(span);
    let first = if lo <= phase {
        phase
    } else {
        phase + (lo - phase).div_ceil(step) * step
    };
    (0..)
        .map(|k| first + k * step)
        .take_while(|&h| h < lost_end)
        .collect()
}

/// Input span each F-engine output heap needs (zero delay): 2n (spectra_per_heap + taps - 1).
pub fn engine_heap_span(channels: u64, spectra_per_heap: u64, taps: u64) -> u64 {
    2 * channels * (spectra_per_heap + taps.max(1) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 100;

    fn feed(t: &mut SeqTracker, heaps: &[u64]) -> Vec<Arrival> {
        heaps.iter().map(|&h| t.heap(h * S + 7)).collect()
    }

    #[test]
    fn in_order_has_no_gaps() {
        let mut t = SeqTracker::new(S, 4);
        feed(&mut t, &[10, 11, 12, 13]);
        let c = t.counts();
        assert_eq!((c.received, c.gaps, c.late, c.duplicates), (4, 0, 0, 0));
        assert_eq!(t.first(), Some(1007));
        assert_eq!(t.newest(), Some(1307));
    }

    #[test]
    fn holes_are_gaps_until_filled() {
        let mut t = SeqTracker::new(S, 2);
        feed(&mut t, &[0, 1, 4, 5]);
        assert_eq!(t.counts().gaps, 2);
        assert_eq!(t.holes().collect::<Vec<_>>(), vec![(207, 407)]);
        // 3 is 2 behind the newest (5): within the window.
        assert_eq!(t.heap(3 * S + 7), Arrival::Reordered);
        feed(&mut t, &[6, 7]);
        // 2 is 5 behind the newest (7): late.
        assert_eq!(t.heap(2 * S + 7), Arrival::Late);
        let c = t.counts();
        assert_eq!((c.gaps, c.reordered, c.late, c.received), (0, 1, 1, 8));
        assert_eq!(t.holes().count(), 0);
    }

    #[test]
    fn filling_the_middle_of_a_hole_splits_it() {
        let mut t = SeqTracker::new(S, 10);
        feed(&mut t, &[0, 6]);
        assert_eq!(t.counts().gaps, 5);
        t.heap(3 * S + 7);
        assert_eq!(t.holes().collect::<Vec<_>>(), vec![(107, 307), (407, 607)]);
        assert_eq!(t.counts().gaps, 4);
    }

    #[test]
    fn duplicates_and_misaligned() {
        let mut t = SeqTracker::new(S, 4);
        feed(&mut t, &[0, 1, 2]);
        assert_eq!(t.heap(S + 7), Arrival::Duplicate);
        assert_eq!(t.heap(2 * S + 7), Arrival::Duplicate);
        assert_eq!(t.heap(3 * S + 8), Arrival::Misaligned);
        let c = t.counts();
        assert_eq!(
            (c.duplicates, c.misaligned, c.received, c.gaps),
            (2, 1, 3, 0)
        );
    }

    #[test]
    fn out_of_order_start_is_not_a_gap() {
        let mut t = SeqTracker::new(S, 2);
        assert_eq!(
            feed(&mut t, &[5, 4, 6]),
            vec![Arrival::InOrder, Arrival::Reordered, Arrival::InOrder]
        );
        assert_eq!(t.counts().gaps, 0);
        assert_eq!(t.first(), Some(407));
        // Far before the start: ignored, not a duplicate.
        assert_eq!(t.heap(7), Arrival::Ignored);
    }

    #[test]
    fn incomplete_heaps_are_gaps_and_late_packets_fill_them() {
        let mut t = SeqTracker::new(S, 2);
        // Joining mid-heap: ignored.
        t.incomplete(7);
        feed(&mut t, &[1, 2]);
        t.incomplete(3 * S + 7);
        feed(&mut t, &[4]);
        assert_eq!((t.counts().gaps, t.counts().incomplete), (1, 1));
        assert_eq!(t.stray(3 * S + 7), Arrival::Late);
        // Further packets of the same heap count once.
        assert_eq!(t.stray(3 * S + 7), Arrival::Ignored);
        assert_eq!(t.stray(2 * S + 7), Arrival::Duplicate);
        // Not yet emitted by the assembler: not ours to judge.
        assert_eq!(t.stray(9 * S + 7), Arrival::Ignored);
        let c = t.counts();
        assert_eq!((c.gaps, c.late, c.duplicates), (0, 1, 1));
    }

    #[test]
    fn huge_jumps_resync() {
        let mut t = SeqTracker::new(S, 2).with_resync(1000);
        feed(&mut t, &[0, 1, 3]);
        assert_eq!(t.heap(5000 * S + 7), Arrival::Resync);
        assert_eq!(t.heap(5001 * S + 7), Arrival::InOrder);
        // The hole from before the restart stays counted.
        let c = t.counts();
        assert_eq!((c.gaps, c.resyncs, c.received), (1, 1, 5));
        // Going back far (a sender restarted at an earlier time) resyncs too.
        assert_eq!(t.heap(7), Arrival::Resync);
        assert_eq!(t.counts().resyncs, 2);
    }

    #[test]
    fn a_short_jump_back_in_order_is_a_restart_once_confirmed() {
        let mut t = SeqTracker::new(S, 2);
        // 300 heaps with a hole at 250; then the sender starts again at 100 (duplicates of
        // heaps received, and 250 would fill the hole late).
        let old: Vec<u64> = (0..300).filter(|&k| k != 250).collect();
        feed(&mut t, &old);
        assert_eq!(t.counts().gaps, 1);
        let first = feed(
            &mut t,
            &(100..100 + RESTART_CONFIRM - 1).collect::<Vec<_>>(),
        );
        assert!(first.iter().all(|&a| a != Arrival::Resync));
        assert_eq!(t.heap((100 + RESTART_CONFIRM - 1) * S + 7), Arrival::Resync);
        feed(&mut t, &(100 + RESTART_CONFIRM..300).collect::<Vec<_>>());
        let c = t.counts();
        assert_eq!(
            (c.received, c.gaps, c.late, c.duplicates, c.resyncs),
            (299 + 1 + 192, 1, 0, 0, 1),
            "the old stream's hole stays counted; nothing late or duplicate: {c:?}"
        );
        // Tracking starts again at the heap that confirmed the restart.
        assert_eq!(t.first(), Some((100 + RESTART_CONFIRM - 1) * S + 7));
        assert_eq!(t.newest(), Some(299 * S + 7));
        assert_eq!(t.holes().count(), 0);
    }

    #[test]
    fn stray_packets_of_a_restarted_sender_restart_tracking() {
        let mut t = SeqTracker::new(S, 2);
        feed(&mut t, &(0..300).filter(|&k| k != 250).collect::<Vec<_>>());
        // The receiver's window refuses the new stream's heaps: each comes as stray packets.
        for k in 100..100 + RESTART_CONFIRM - 1 {
            assert_ne!(t.stray(k * S + 7), Arrival::Resync);
            assert_eq!(
                t.stray(k * S + 7),
                Arrival::Ignored,
                "a heap's second packet"
            );
        }
        assert_eq!(
            t.stray((100 + RESTART_CONFIRM - 1) * S + 7),
            Arrival::Resync
        );
        assert_eq!(
            t.first(),
            None,
            "tracking begins again at the next complete heap"
        );
        assert_eq!(t.heap(110 * S + 7), Arrival::InOrder);
        let c = t.counts();
        assert_eq!((c.gaps, c.late, c.duplicates, c.resyncs), (1, 0, 0, 1));
    }

    #[test]
    fn late_heaps_with_the_stream_going_on_are_no_restart() {
        let mut t = SeqTracker::new(S, 2);
        let old: Vec<u64> = (0..100).filter(|k| !(50..60).contains(k)).collect();
        feed(&mut t, &old);
        // The hole's heaps come late, in order, but the stream in place goes on between them.
        for k in 50..60 {
            assert_eq!(t.heap(k * S + 7), Arrival::Late);
            t.heap((k + 50) * S + 7);
        }
        let c = t.counts();
        assert_eq!((c.late, c.gaps, c.resyncs), (10, 0, 0));
    }

    #[test]
    fn outputs_hit_by_lost_input() {
        // Heaps every 100 samples from phase 30, each needing 250 samples.
        let step = 100;
        let span = 250;
        // Input [1000, 1010) lost: heaps starting in (760, 1010) on the lattice: 830, 930.
        assert_eq!(outputs_hit(1000, 1010, 30, step, span), vec![830, 930]);
        // Exactly at a boundary: heap H needs [H, H+250); H=780 needs up to 1029: lost [1029,1030)
        // hits 780 (phase 80).
        assert_eq!(outputs_hit(1029, 1030, 80, step, span), vec![780, 880, 980]);
        assert_eq!(outputs_hit(1030, 1031, 80, step, span), vec![880, 980]);
        // Near zero.
        assert_eq!(outputs_hit(0, 1, 0, step, span), vec![0]);
        assert!(outputs_hit(5, 5, 0, step, span).is_empty());
        // Brute force agreement.
        for start in 0..400u64 {
            for len in 1..150u64 {
                let want: Vec<u64> = (0..10)
                    .map(|k| 30 + k * step)
                    .filter(|&h| h < start + len && h + span > start)
                    .collect();
                let got: Vec<u64> = outputs_hit(start, start + len, 30, step, span)
                    .into_iter()
                    .filter(|&h| h < 30 + 10 * step)
                    .collect();
                assert_eq!(got, want, "lost [{start}, {})", start + len);
            }
        }
    }

    #[test]
    fn engine_span() {
        assert_eq!(engine_heap_span(1024, 256, 16), 2048 * 271);
    }
}

//! Heap assembly for the general (not hot) path: packets arrive out of order, duplicated or
//! incomplete; heaps come out whole, or are reported incomplete when evicted.
//!
//! Memory is bounded: at most `max_heaps` heaps are live; a packet of a new heap when all are taken
//! evicts the oldest (as spead2 does), which is reported as [`Event::Incomplete`] and counted. Each
//! live heap keeps at most [`MAX_PIECES`] disjoint byte ranges and distinct item pointers.
//!
//! Unlike spead2, the assembler remembers the counters of the last [`RECENT_HEAPS`] heaps it
//! finished: a late copy of a packet of a completed heap is a duplicate (not a second heap), and a
//! late packet of an evicted heap is too old (not a new, never-completing heap that evicts another).
//! A sender reusing a heap counter within that horizon would see its heap dropped.
//!
//! ```
//! use std::sync::Arc;
//! use spead::assemble::{Event, HeapAssembler};
//! use spead::{HeapItem, HeapWriter, Limits, RejectCounters};
//!
//! let mut asm = HeapAssembler::new(Limits::default(), 4, Arc::new(RejectCounters::new()));
//! let data = [7u8; 3000];
//! let mut heaps = Vec::new();
//! HeapWriter::new(1024).write(1, &[HeapItem::addressed(0x4300, &data)], |datagram| {
//!     let _ = asm.add_datagram(datagram, &mut |e| heaps.push(e));
//! });
//! let [Event::Complete(heap)] = &heaps[..] else { panic!("{heaps:?}") };
//! assert_eq!(heap.view().unwrap().value(0x4300), Some(&data[..]));
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::heap::HeapView;
use crate::packet::{ItemPointer, Limits, Packet};
use crate::reject::{Reject, RejectCounters};

/// Most disjoint byte ranges, and most distinct item pointers, one live heap keeps.
pub const MAX_PIECES: usize = 1 << 16;
/// Finished heap counters remembered to reject late packets.
pub const RECENT_HEAPS: usize = 64;

/// A complete heap, owning its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heap {
    /// The heap's counter, unique within the stream.
    pub heap_cnt: u64,
    /// Item pointers (standard per-packet ones excluded), gathered from all its packets in order of
    /// first appearance.
    pub pointers: Vec<ItemPointer>,
    /// The heap's bytes, which its addressed items point into.
    pub payload: Vec<u8>,
}

impl Heap {
    /// Items by id; fails when an addressed item points past the payload.
    pub fn view(&self) -> Result<HeapView<'_>, Reject> {
        HeapView::new(self.heap_cnt, self.pointers.clone(), &self.payload)
    }

    /// True for a heap carrying a stream-control stop.
    pub fn is_stop(&self) -> bool {
        self.pointers.iter().any(|p| {
            p.is_immediate()
                && p.id() == crate::items::STREAM_CTRL
                && p.value() == crate::items::STREAM_CTRL_STOP
        })
    }
}

/// What the assembler reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A heap all of whose bytes arrived.
    Complete(Heap),
    /// A heap evicted or flushed before all its bytes arrived.
    Incomplete {
        /// The heap's counter.
        heap_cnt: u64,
        /// Declared size, if any packet carried one.
        size: Option<u64>,
        /// Byte ranges `[start, end)` received, sorted and merged.
        received: Vec<(u64, u64)>,
        /// Byte ranges missing: the gaps up to the size (up to the last byte received when no
        /// packet declared a size).
        missing: Vec<(u64, u64)>,
        /// Item pointers of the packets that did arrive (the timestamp, say).
        pointers: Vec<ItemPointer>,
    },
    /// A stream-control stop packet. Live heaps stay live: call [`HeapAssembler::flush`] to have
    /// them reported.
    Stop,
}

/// Totals of one assembler, written only by it and readable from other threads.
#[derive(Debug, Default)]
pub struct HeapStats {
    /// Packets offered (after decoding), rejected ones included.
    pub packets: AtomicU64,
    /// Heaps reported complete.
    pub heaps_completed: AtomicU64,
    /// Heaps reported incomplete: evicted to make room, or flushed.
    pub heaps_incomplete: AtomicU64,
    /// Of those, the ones evicted to make room for a newer heap.
    pub heaps_evicted: AtomicU64,
}

/// Single-writer add: a plain load and store, no locked instruction.
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

struct LiveHeap {
    heap_cnt: u64,
    size: Option<u64>,
    pointers: Vec<ItemPointer>,
    /// The same pointers sorted, to find repeats in O(log n) (every packet repeats them).
    sorted: Vec<u64>,
    payload: Vec<u8>,
    /// Received byte ranges, sorted, merged where they touch.
    ranges: Vec<(u64, u64)>,
    received: u64,
}

impl LiveHeap {
    fn new(heap_cnt: u64) -> Self {
        Self {
            heap_cnt,
            size: None,
            pointers: Vec::new(),
            sorted: Vec::new(),
            payload: Vec::new(),
            ranges: Vec::new(),
            received: 0,
        }
    }

    fn is_complete(&self) -> bool {
        self.size == Some(self.received)
    }

    /// Adds a packet's bytes; a packet overlapping bytes already received is a duplicate. Checks
    /// everything before changing anything, so a rejected packet leaves no trace.
    fn add(&mut self, p: &Packet) -> Result<(), Reject> {
        let (start, end) = (p.heap_offset, p.heap_offset + p.payload.len() as u64);
        match (self.size, p.heap_size) {
            (Some(a), Some(b)) if a != b => return Err(Reject::HeapSizeChanged),
            // A size learnt late must still hold what arrived before it.
            (None, Some(b)) if self.ranges.last().is_some_and(|r| r.1 > b) => {
                return Err(Reject::PayloadPastHeap)
            }
            (Some(a), None) if end > a => return Err(Reject::PayloadPastHeap),
            _ => {}
        }
        // Empty packets (items only) take no room and are not tracked: repeats are harmless.
        let nonempty = start < end;
        // First range ending after `start`: the only one that can overlap the packet.
        let at = self.ranges.partition_point(|&(_, e)| e <= start);
        let next_start = self.ranges.get(at).map(|r| r.0);
        if nonempty && next_start.is_some_and(|s| s < end) {
            return Err(Reject::Duplicate);
        }
        let new: Vec<ItemPointer> = p
            .items()
            .filter(|ptr| self.sorted.binary_search(&ptr.0).is_err())
            .collect();
        let touches_prev = at > 0 && self.ranges[at - 1].1 == start;
        let touches_next = next_start == Some(end);
        let adds_range = nonempty && !(touches_prev || touches_next);
        if self.pointers.len() + new.len() > MAX_PIECES
            || (adds_range && self.ranges.len() >= MAX_PIECES)
        {
            return Err(Reject::TooFragmented);
        }

        if self.size.is_none() {
            self.size = p.heap_size;
        }
        match (nonempty, touches_prev, touches_next) {
            (false, _, _) => {}
            (true, true, true) => {
                self.ranges[at - 1].1 = self.ranges[at].1;
                self.ranges.remove(at);
            }
            (true, true, false) => self.ranges[at - 1].1 = end,
            (true, false, true) => self.ranges[at].0 = start,
            (true, false, false) => self.ranges.insert(at, (start, end)),
        }
        if self.payload.len() < end as usize {
            let want = self.size.map_or(end, |s| s.max(end)) as usize;
            self.payload.resize(want, 0);
        }
        self.payload[start as usize..end as usize].copy_from_slice(p.payload);
        self.received += end - start;
        for ptr in new {
            // A packet may carry the same pointer twice.
            if let Err(i) = self.sorted.binary_search(&ptr.0) {
                self.sorted.insert(i, ptr.0);
                self.pointers.push(ptr);
            }
        }
        Ok(())
    }

    fn missing(&self) -> Vec<(u64, u64)> {
        let end = self
            .size
            .unwrap_or_else(|| self.ranges.last().map_or(0, |r| r.1));
        let mut out = Vec::new();
        let mut at = 0;
        for &(s, e) in &self.ranges {
            if s > at {
                out.push((at, s));
            }
            at = e;
        }
        if end > at {
            out.push((at, end));
        }
        out
    }

    fn into_event(self) -> Event {
        if self.is_complete() {
            let mut payload = self.payload;
            payload.truncate(self.received as usize);
            Event::Complete(Heap {
                heap_cnt: self.heap_cnt,
                pointers: self.pointers,
                payload,
            })
        } else {
            Event::Incomplete {
                heap_cnt: self.heap_cnt,
                size: self.size,
                missing: self.missing(),
                received: self.ranges,
                pointers: self.pointers,
            }
        }
    }
}

/// Assembles heaps from datagrams of one stream.
pub struct HeapAssembler {
    limits: Limits,
    max_heaps: usize,
    /// Oldest first.
    live: VecDeque<LiveHeap>,
    /// Counters of finished heaps, newest last: (counter, completed).
    recent: VecDeque<(u64, bool)>,
    counters: Arc<RejectCounters>,
    stats: Arc<HeapStats>,
}

impl HeapAssembler {
    /// `max_heaps` live heaps at most (at least 1). `counters` may be shared with other receivers.
    pub fn new(limits: Limits, max_heaps: usize, counters: Arc<RejectCounters>) -> Self {
        let max_heaps = max_heaps.max(1);
        Self {
            limits,
            max_heaps,
            live: VecDeque::with_capacity(max_heaps),
            recent: VecDeque::with_capacity(RECENT_HEAPS),
            counters,
            stats: Arc::new(HeapStats::default()),
        }
    }

    /// The reasons and counts of what it dropped (shared with the receivers given the same counters).
    pub fn counters(&self) -> &Arc<RejectCounters> {
        &self.counters
    }

    /// Its totals, for readers on other threads.
    pub fn stats(&self) -> &Arc<HeapStats> {
        &self.stats
    }

    /// Heaps being assembled.
    pub fn live_heaps(&self) -> usize {
        self.live.len()
    }

    /// Decodes a datagram and adds it. Rejections are counted and returned.
    pub fn add_datagram(
        &mut self,
        datagram: &[u8],
        emit: &mut impl FnMut(Event),
    ) -> Result<(), Reject> {
        let result = Packet::decode(datagram, &self.limits).and_then(|p| self.add_packet(&p, emit));
        if let Err(reason) = result {
            self.counters.count(reason);
        }
        result
    }

    /// Adds a decoded packet. Rejections are returned, not counted (the caller decides).
    pub fn add_packet(&mut self, p: &Packet, emit: &mut impl FnMut(Event)) -> Result<(), Reject> {
        bump(&self.stats.packets);
        if p.is_stop() {
            emit(Event::Stop);
            return Ok(());
        }
        let index = match self.live.iter().position(|h| h.heap_cnt == p.heap_cnt) {
            Some(i) => i,
            None => {
                if let Some(&(_, completed)) = self.recent.iter().find(|r| r.0 == p.heap_cnt) {
                    return Err(if completed {
                        Reject::Duplicate
                    } else {
                        Reject::TooOld
                    });
                }
                // Check the packet on its own heap before evicting anything for it.
                let mut heap = LiveHeap::new(p.heap_cnt);
                heap.add(p)?;
                if self.live.len() == self.max_heaps {
                    let evicted = self.live.pop_front().expect("max_heaps >= 1");
                    bump(&self.stats.heaps_evicted);
                    self.finish(evicted, emit);
                }
                self.live.push_back(heap);
                let last = self.live.len() - 1;
                self.finish_if_complete(last, emit);
                return Ok(());
            }
        };
        self.live[index].add(p)?;
        self.finish_if_complete(index, emit);
        Ok(())
    }

    /// Reports every live heap as incomplete (end of stream).
    pub fn flush(&mut self, emit: &mut impl FnMut(Event)) {
        while let Some(h) = self.live.pop_front() {
            self.finish(h, emit);
        }
    }

    fn finish_if_complete(&mut self, index: usize, emit: &mut impl FnMut(Event)) {
        if self.live[index].is_complete() {
            let done = self.live.remove(index).expect("index is in range");
            self.finish(done, emit);
        }
    }

    fn finish(&mut self, heap: LiveHeap, emit: &mut impl FnMut(Event)) {
        if self.recent.len() == RECENT_HEAPS {
            self.recent.pop_front();
        }
        let complete = heap.is_complete();
        self.recent.push_back((heap.heap_cnt, complete));
        bump(if complete {
            &self.stats.heaps_completed
        } else {
            &self.stats.heaps_incomplete
        });
        emit(heap.into_event());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::{HeapItem, HeapWriter};
    use crate::items;
    use crate::packet::encode;

    fn packets(cnt: u64, data: &[u8], max_payload: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let items = [
            HeapItem::immediate(items::TIMESTAMP, cnt * 10),
            HeapItem::addressed(0x1000, data),
        ];
        HeapWriter::new(max_payload).write(cnt, &items, |p| out.push(p.to_vec()));
        out
    }

    /// A packet with explicit standard items (None leaves the heap size out).
    fn raw(cnt: u64, size: Option<u64>, offset: u64, payload: &[u8]) -> Vec<u8> {
        let mut ptrs = vec![
            ItemPointer::immediate(items::HEAP_CNT, cnt),
            ItemPointer::immediate(items::HEAP_OFFSET, offset),
            ItemPointer::immediate(items::PAYLOAD_LENGTH, payload.len() as u64),
            ItemPointer::addressed(0x1000, 0),
        ];
        if let Some(s) = size {
            ptrs.push(ItemPointer::immediate(items::HEAP_SIZE, s));
        }
        let mut buf = vec![0u8; 100 + payload.len()];
        let n = encode(&mut buf, &ptrs, payload).unwrap();
        buf.truncate(n);
        buf
    }

    fn run(asm: &mut HeapAssembler, datagrams: &[Vec<u8>]) -> Vec<Event> {
        let mut events = Vec::new();
        for d in datagrams {
            let _ = asm.add_datagram(d, &mut |e| events.push(e));
        }
        events
    }

    fn asm(max_heaps: usize) -> HeapAssembler {
        HeapAssembler::new(
            Limits::default(),
            max_heaps,
            Arc::new(RejectCounters::new()),
        )
    }

    fn count(a: &HeapAssembler, counter: fn(&HeapStats) -> &AtomicU64) -> u64 {
        counter(a.stats()).load(Ordering::Relaxed)
    }

    #[test]
    fn reverse_order_completes() {
        let data: Vec<u8> = (0..=255).collect();
        let mut p = packets(3, &data, 50);
        p.reverse();
        let mut a = asm(4);
        let events = run(&mut a, &p);
        let [Event::Complete(h)] = &events[..] else {
            panic!("{events:?}")
        };
        assert_eq!(h.view().unwrap().value(0x1000), Some(&data[..]));
        assert_eq!(h.view().unwrap().immediate(items::TIMESTAMP), Some(30));
        assert_eq!(h.pointers.len(), 2, "repeated pointers kept once");
        assert_eq!(count(&a, |s| &s.heaps_completed), 1);
        assert_eq!(count(&a, |s| &s.packets), 6);
    }

    #[test]
    fn duplicate_counted_once() {
        let p = packets(1, &[7u8; 100], 40);
        let mut a = asm(4);
        let events = run(&mut a, &[p[0].clone(), p[0].clone()]);
        assert!(events.is_empty());
        assert_eq!(a.counters().get(Reject::Duplicate), 1);
        let events = run(&mut a, &p[1..]);
        assert!(matches!(&events[..], [Event::Complete(h)] if h.payload == [7u8; 100]));
    }

    #[test]
    fn overlapping_packet_is_duplicate() {
        let mut a = asm(4);
        run(
            &mut a,
            &[
                raw(1, Some(100), 0, &[1; 40]),
                raw(1, Some(100), 30, &[2; 40]),
            ],
        );
        assert_eq!(a.counters().get(Reject::Duplicate), 1);
        // Touching one range and overlapping the next.
        run(
            &mut a,
            &[
                raw(2, Some(100), 0, &[1; 10]),
                raw(2, Some(100), 20, &[1; 10]),
            ],
        );
        run(&mut a, &[raw(2, Some(100), 10, &[1; 15])]);
        assert_eq!(a.counters().get(Reject::Duplicate), 2);
        // Filling the gap exactly merges the ranges.
        let mut events = run(&mut a, &[raw(2, Some(100), 10, &[1; 10])]);
        a.flush(&mut |e| events.push(e));
        assert!(matches!(
            &events[..],
            [_, Event::Incomplete { heap_cnt: 2, received, .. }] if received == &[(0, 30)]
        ));
    }

    #[test]
    fn empty_packets_add_items_only() {
        let mut a = asm(4);
        let events = run(
            &mut a,
            &[
                raw(1, Some(10), 0, &[]),
                raw(1, Some(10), 0, &[]),
                raw(1, Some(10), 0, &[3; 10]),
            ],
        );
        assert!(matches!(&events[..], [Event::Complete(h)] if h.payload == [3; 10]));
        assert_eq!(a.counters().total(), 0);
        // A heap of size 0 completes with its first packet.
        let events = run(&mut a, &[raw(2, Some(0), 0, &[])]);
        assert!(matches!(&events[..], [Event::Complete(h)] if h.payload.is_empty()));
    }

    #[test]
    fn late_copy_of_completed_heap_is_duplicate() {
        let p = packets(1, &[7u8; 30], 40);
        let mut a = asm(4);
        let events = run(&mut a, &[p[0].clone(), p[0].clone()]);
        assert_eq!(events.len(), 1, "one heap, not two: {events:?}");
        assert_eq!(a.counters().get(Reject::Duplicate), 1);
    }

    #[test]
    fn heap_size_change_rejected() {
        let p1 = packets(1, &[1u8; 100], 40);
        let p2 = packets(1, &[1u8; 120], 40);
        let mut a = asm(4);
        run(&mut a, &[p1[0].clone(), p2[1].clone()]);
        assert_eq!(a.counters().get(Reject::HeapSizeChanged), 1);
    }

    #[test]
    fn late_size_smaller_than_data_rejected() {
        let mut a = asm(4);
        let events = run(
            &mut a,
            &[raw(1, None, 60, &[1; 40]), raw(1, Some(60), 0, &[2; 60])],
        );
        assert_eq!(a.counters().get(Reject::PayloadPastHeap), 1);
        assert!(events.is_empty(), "{events:?}");
        // And the other way round: data past a size already known.
        run(
            &mut a,
            &[raw(2, Some(60), 0, &[1; 40]), raw(2, None, 40, &[2; 40])],
        );
        assert_eq!(a.counters().get(Reject::PayloadPastHeap), 2);
    }

    #[test]
    fn heap_too_large_rejected() {
        let mut a = HeapAssembler::new(
            Limits {
                max_packet: 9000,
                max_heap: 100,
            },
            4,
            Arc::new(RejectCounters::new()),
        );
        run(
            &mut a,
            &[raw(1, Some(101), 0, &[0; 10]), raw(2, None, 95, &[0; 10])],
        );
        assert_eq!(a.counters().get(Reject::HeapTooLarge), 2);
        assert_eq!(a.live_heaps(), 0);
    }

    #[test]
    fn heap_without_size_never_completes() {
        let mut a = asm(4);
        let mut events = run(&mut a, &[raw(1, None, 0, &[1; 10])]);
        assert!(events.is_empty());
        a.flush(&mut |e| events.push(e));
        assert!(matches!(
            &events[..],
            [Event::Incomplete { size: None, received, missing, .. }]
                if received == &[(0, 10)] && missing.is_empty()
        ));
    }

    #[test]
    fn oldest_incomplete_evicted_and_reported() {
        let mut a = asm(2);
        let h1 = packets(1, &[1u8; 100], 40);
        let h2 = packets(2, &[2u8; 100], 40);
        let h3 = packets(3, &[3u8; 100], 40);
        let events = run(
            &mut a,
            &[h1[0].clone(), h1[2].clone(), h2[0].clone(), h3[0].clone()],
        );
        assert_eq!(
            events,
            vec![Event::Incomplete {
                heap_cnt: 1,
                size: Some(100),
                received: vec![(0, 40), (80, 100)],
                missing: vec![(40, 80)],
                pointers: vec![
                    ItemPointer::immediate(items::TIMESTAMP, 10),
                    ItemPointer::addressed(0x1000, 0)
                ],
            }]
        );
        assert_eq!(count(&a, |s| &s.heaps_incomplete), 1);
        assert_eq!(count(&a, |s| &s.heaps_evicted), 1);
        // A straggler of the evicted heap is too old, and evicts nothing.
        run(&mut a, &[h1[1].clone()]);
        assert_eq!(a.counters().get(Reject::TooOld), 1);
        assert_eq!(a.live_heaps(), 2);
    }

    #[test]
    fn flush_reports_what_is_missing() {
        let mut a = asm(4);
        let mut events = run(&mut a, &[raw(5, Some(100), 20, &[1; 30])]);
        a.flush(&mut |e| events.push(e));
        let [Event::Incomplete {
            heap_cnt: 5,
            received,
            missing,
            ..
        }] = &events[..]
        else {
            panic!("{events:?}")
        };
        assert_eq!(received, &[(20, 50)]);
        assert_eq!(missing, &[(0, 20), (50, 100)]);
    }

    #[test]
    fn stop_reported() {
        let mut stop = Vec::new();
        HeapWriter::new(100).write(
            9,
            &[HeapItem::immediate(
                items::STREAM_CTRL,
                items::STREAM_CTRL_STOP,
            )],
            |p| stop = p.to_vec(),
        );
        let mut a = asm(2);
        assert_eq!(run(&mut a, &[stop]), vec![Event::Stop]);
    }
}

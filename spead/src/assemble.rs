//! Heap assembly for the general (not hot) path: packets arrive out of order, duplicated or
//! incomplete; heaps come out whole, or are reported incomplete when evicted.
//!
//! Memory is bounded: at most `max_heaps` heaps are live; a packet of a new heap when all are taken
//! evicts the oldest (as spead2 does), which is reported as [`Event::Incomplete`] and counted.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::heap::HeapView;
use crate::packet::{ItemPointer, Limits, Packet};
use crate::reject::{Reject, RejectCounters};

/// A complete heap, owning its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heap {
    pub heap_cnt: u64,
    /// Item pointers (standard per-packet ones excluded), gathered from all its packets.
    pub pointers: Vec<ItemPointer>,
    pub payload: Vec<u8>,
}

impl Heap {
    pub fn view(&self) -> Result<HeapView<'_>, Reject> {
        HeapView::new(self.heap_cnt, self.pointers.clone(), &self.payload)
    }
}

/// What the assembler reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Complete(Heap),
    /// A heap evicted or flushed before all its bytes arrived.
    Incomplete {
        heap_cnt: u64,
        /// Declared size, if any packet carried one.
        size: Option<u64>,
        /// Byte ranges received, sorted and merged.
        received: Vec<(u64, u64)>,
    },
    /// A stream-control stop packet.
    Stop,
}

/// Totals kept by the assembler; readable from other threads.
#[derive(Debug, Default)]
pub struct HeapStats {
    pub packets: AtomicU64,
    pub heaps_completed: AtomicU64,
    pub heaps_incomplete: AtomicU64,
}

struct LiveHeap {
    heap_cnt: u64,
    size: Option<u64>,
    pointers: Vec<ItemPointer>,
    payload: Vec<u8>,
    /// Received byte ranges, sorted by start, never overlapping.
    ranges: Vec<(u64, u64)>,
    received: u64,
}

impl LiveHeap {
    fn new(heap_cnt: u64) -> Self {
        Self {
            heap_cnt,
            size: None,
            pointers: Vec::new(),
            payload: Vec::new(),
            ranges: Vec::new(),
            received: 0,
        }
    }

    fn is_complete(&self) -> bool {
        self.size == Some(self.received)
    }

    /// Adds a packet's bytes; a packet overlapping bytes already received is a duplicate.
    fn add(&mut self, p: &Packet) -> Result<(), Reject> {
        match (self.size, p.heap_size) {
            (Some(a), Some(b)) if a != b => return Err(Reject::HeapSizeChanged),
            (None, Some(b)) => self.size = Some(b),
            _ => {}
        }
        let (start, end) = (p.heap_offset, p.heap_offset + p.payload.len() as u64);
        let at = self.ranges.partition_point(|&(s, _)| s < start);
        let overlaps_prev = at > 0 && self.ranges[at - 1].1 > start;
        let overlaps_next = at < self.ranges.len() && self.ranges[at].0 < end;
        let repeats_empty = start == end && self.ranges.get(at).is_some_and(|&(s, _)| s == start);
        if overlaps_prev || overlaps_next || repeats_empty {
            return Err(Reject::Duplicate);
        }
        self.ranges.insert(at, (start, end));
        if self.payload.len() < end as usize {
            let want = self.size.map_or(end, |s| s.max(end)) as usize;
            self.payload.resize(want, 0);
        }
        self.payload[start as usize..end as usize].copy_from_slice(p.payload);
        self.received += end - start;
        for ptr in p.items() {
            if !self.pointers.contains(&ptr) {
                self.pointers.push(ptr);
            }
        }
        Ok(())
    }

    fn merged_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &(s, e) in &self.ranges {
            match out.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => out.push((s, e)),
            }
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
                received: self.merged_ranges(),
            }
        }
    }
}

/// Assembles heaps from datagrams of one stream.
pub struct HeapAssembler {
    limits: Limits,
    max_heaps: usize,
    live: VecDeque<LiveHeap>,
    counters: Arc<RejectCounters>,
    stats: Arc<HeapStats>,
}

impl HeapAssembler {
    /// `max_heaps` live heaps at most (at least 1).
    pub fn new(limits: Limits, max_heaps: usize, counters: Arc<RejectCounters>) -> Self {
        Self {
            limits,
            max_heaps: max_heaps.max(1),
            live: VecDeque::new(),
            counters,
            stats: Arc::new(HeapStats::default()),
        }
    }

    pub fn counters(&self) -> &Arc<RejectCounters> {
        &self.counters
    }

    pub fn stats(&self) -> &Arc<HeapStats> {
        &self.stats
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
        self.stats.packets.fetch_add(1, Ordering::Relaxed);
        if p.is_stop() {
            emit(Event::Stop);
            return Ok(());
        }
        let index = match self.live.iter().position(|h| h.heap_cnt == p.heap_cnt) {
            Some(i) => i,
            None => {
                if self.live.len() == self.max_heaps {
                    let evicted = self.live.pop_front().expect("max_heaps >= 1");
                    self.report(evicted.into_event(), emit);
                }
                self.live.push_back(LiveHeap::new(p.heap_cnt));
                self.live.len() - 1
            }
        };
        self.live[index].add(p)?;
        if self.live[index].is_complete() {
            let done = self.live.remove(index).expect("index is in range");
            self.report(done.into_event(), emit);
        }
        Ok(())
    }

    /// Reports every live heap as incomplete (end of stream).
    pub fn flush(&mut self, emit: &mut impl FnMut(Event)) {
        while let Some(h) = self.live.pop_front() {
            self.report(h.into_event(), emit);
        }
    }

    fn report(&self, event: Event, emit: &mut impl FnMut(Event)) {
        let counter = match event {
            Event::Complete(_) => &self.stats.heaps_completed,
            _ => &self.stats.heaps_incomplete,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        emit(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::{HeapItem, HeapWriter};
    use crate::items;

    fn packets(cnt: u64, data: &[u8], max_payload: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let items = [
            HeapItem::immediate(items::TIMESTAMP, cnt * 10),
            HeapItem::addressed(0x1000, data),
        ];
        HeapWriter::new(max_payload).write(cnt, &items, |p| out.push(p.to_vec()));
        out
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
    }

    #[test]
    fn duplicate_counted_once() {
        let p = packets(1, &[7u8; 100], 40);
        let mut a = asm(4);
        let events = run(&mut a, &[p[0].clone(), p[0].clone()]);
        assert!(events.is_empty());
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
    fn oldest_incomplete_evicted_and_reported() {
        let mut a = asm(2);
        let h1 = packets(1, &[1u8; 100], 40);
        let h2 = packets(2, &[2u8; 100], 40);
        let h3 = packets(3, &[3u8; 100], 40);
        let events = run(&mut a, &[h1[0].clone(), h2[0].clone(), h3[0].clone()]);
        assert_eq!(
            events,
            vec![Event::Incomplete {
                heap_cnt: 1,
                size: Some(100),
                received: vec![(0, 40)]
            }]
        );
        assert_eq!(a.stats().heaps_incomplete.load(Ordering::Relaxed), 1);
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

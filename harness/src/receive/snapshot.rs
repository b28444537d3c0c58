//! What a receive thread shares with the rest of the harness: its substream's counters and
//! sequence tracker, updated on the receive thread, and the snapshots anyone may take of them.
//!
//! With several engines (an array), each substream has one *lane* per engine: its own counters
//! and tracker, since the engines' heaps share the substream's address and timestamps. What names
//! no engine (a datagram that does not decode, a feng_id outside the array, the socket's own
//! drops) is counted in engine 0's lane of the substream.

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use spead::RejectCounters;

use crate::gaps::{SeqCounts, SeqTracker};

/// Counters one receive thread updates and anyone may read.
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) packets: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) heaps: AtomicU64,
    pub(super) heap_bytes: AtomicU64,
    pub(super) malformed_packets: AtomicU64,
    pub(super) wrong_frequency: AtomicU64,
    pub(super) descriptors: AtomicU64,
    pub(super) stops: AtomicU64,
    /// Datagrams the kernel dropped because this substream's socket buffer was full.
    pub(super) socket_drops: AtomicU64,
    /// Timestamp step once known (0 before).
    pub(super) step: AtomicU64,
    /// Arrays only: heaps whose counter was checked against katgpucbf's rule, those that broke
    /// it, those whose counter another heap of this substream (another engine or timestamp) had
    /// carried, and datagrams naming a feng_id outside the array.
    pub(super) counters_checked: AtomicU64,
    pub(super) counters_wrong: AtomicU64,
    pub(super) counters_collided: AtomicU64,
    pub(super) unknown_engine: AtomicU64,
}

/// One substream's lane: the substream itself with one engine, or one engine's heaps in it.
pub(super) struct Substream {
    pub(super) index: usize,
    /// The engine whose heaps this lane holds (arrays only).
    pub(super) feng_id: Option<usize>,
    pub(super) addr: SocketAddrV4,
    pub(super) first_channel: usize,
    pub(super) stats: Stats,
    pub(super) rejects: Arc<RejectCounters>,
    pub(super) tracker: Mutex<Option<SeqTracker>>,
}

/// One substream's state at a moment.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SubstreamSnapshot {
    pub index: usize,
    /// With several engines (`--engines`), the engine whose heaps these are: each substream has
    /// one entry per engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feng_id: Option<usize>,
    pub address: String,
    pub first_channel: usize,
    pub packets: u64,
    pub bytes: u64,
    /// Complete heaps assembled (duplicates excluded).
    pub heaps: u64,
    pub heap_bytes: u64,
    /// Packets that decoded but were not a valid heap of this substream.
    pub malformed_packets: u64,
    pub wrong_frequency: u64,
    pub descriptors: u64,
    /// Packets the kernel dropped because this substream's socket buffer was full: the harness
    /// itself lost them (its receive thread fell behind). A GSO super-packet counts once.
    pub socket_drops: u64,
    /// Packet rejections by reason (non-zero ones).
    pub rejects: BTreeMap<String, u64>,
    pub sequence: SeqCounts,
    pub step: Option<u64>,
    pub first_timestamp: Option<u64>,
    pub newest_timestamp: Option<u64>,
    /// Missing timestamps as [start, end) ranges (the oldest `MAX_RANGES`).
    pub missing: Vec<(u64, u64)>,
    /// With several engines: the heap counters checked (see [`CounterCheck`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_counters: Option<CounterCheck>,
}

/// The heap counters of an array's engines: each heap's counter must be katgpucbf's,
/// `(substream << 40) | ((timestamp / heap step) x engines + feng_id)` (low part 40 bits), which
/// no two engines or substreams share; and no counter may arrive twice for different heaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CounterCheck {
    /// Heaps whose counter was checked (their first packet arrived).
    pub checked: u64,
    /// Of those, counters other than the rule's.
    pub wrong: u64,
    /// Counters another heap of the substream (another engine, or another timestamp) carried
    /// among the last few thousand heaps.
    pub collisions: u64,
}

/// Ranges of missing timestamps kept in a snapshot.
pub const MAX_RANGES: usize = 1000;

#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    #[serde(skip)]
    pub at: Option<Instant>,
    pub substreams: Vec<SubstreamSnapshot>,
}

impl Snapshot {
    pub fn sequence(&self) -> SeqCounts {
        let mut t = SeqCounts::default();
        for s in &self.substreams {
            t += s.sequence;
        }
        t
    }
    pub fn heaps(&self) -> u64 {
        self.substreams.iter().map(|s| s.heaps).sum()
    }
    pub fn heap_bytes(&self) -> u64 {
        self.substreams.iter().map(|s| s.heap_bytes).sum()
    }
    /// Packets the harness's own sockets dropped (see [`SubstreamSnapshot::socket_drops`]).
    pub fn socket_drops(&self) -> u64 {
        self.substreams.iter().map(|s| s.socket_drops).sum()
    }
    pub fn malformed(&self) -> u64 {
        self.substreams
            .iter()
            .map(|s| s.malformed_packets + s.sequence.misaligned)
            .sum()
    }
    /// The heap counter checks summed (None without an array).
    pub fn heap_counters(&self) -> Option<CounterCheck> {
        self.substreams
            .iter()
            .filter_map(|s| s.heap_counters)
            .reduce(|a, b| CounterCheck {
                checked: a.checked + b.checked,
                wrong: a.wrong + b.wrong,
                collisions: a.collisions + b.collisions,
            })
    }
    /// Engine `feng_id`'s lanes alone (with one engine and no array, every substream).
    pub fn engine(&self, feng_id: usize) -> Snapshot {
        Snapshot {
            at: self.at,
            substreams: self
                .substreams
                .iter()
                .filter(|s| s.feng_id.unwrap_or(0) == feng_id)
                .cloned()
                .collect(),
        }
    }
    /// Timestamp step (samples per heap per polarisation), once any substream knows it.
    pub fn step(&self) -> Option<u64> {
        self.substreams.iter().find_map(|s| s.step)
    }
    /// Sample rate per polarisation that `heaps` heaps over `secs` seconds stand for: each heap
    /// of one substream covers `step` samples, and every substream covers the same samples.
    /// Over an array's lanes, the mean per engine.
    pub fn sample_rate(&self, heaps: u64, secs: f64) -> f64 {
        let n = self.substreams.len().max(1) as f64;
        match self.step() {
            Some(step) if secs > 0.0 => heaps as f64 * step as f64 / n / secs,
            _ => 0.0,
        }
    }
}

impl Substream {
    pub(super) fn snapshot(&self) -> SubstreamSnapshot {
        let st = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let step = get(&st.step);
        let array = self.feng_id.is_some();
        let mut rejects: BTreeMap<String, u64> = self
            .rejects
            .snapshot()
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| (r.name().to_string(), n))
            .collect();
        let unknown = get(&st.unknown_engine);
        if unknown > 0 {
            rejects.insert("feng_id outside the array".into(), unknown);
        }
        SubstreamSnapshot {
            index: self.index,
            feng_id: self.feng_id,
            address: self.addr.to_string(),
            first_channel: self.first_channel,
            packets: get(&st.packets),
            bytes: get(&st.bytes),
            heaps: get(&st.heaps),
            heap_bytes: get(&st.heap_bytes),
            malformed_packets: get(&st.malformed_packets),
            wrong_frequency: get(&st.wrong_frequency),
            descriptors: get(&st.descriptors),
            socket_drops: get(&st.socket_drops),
            rejects,
            sequence: tracker.as_ref().map(|t| t.counts()).unwrap_or_default(),
            step: (step > 0).then_some(step),
            first_timestamp: tracker.as_ref().and_then(|t| t.first()),
            newest_timestamp: tracker.as_ref().and_then(|t| t.newest()),
            missing: tracker
                .as_ref()
                .map(|t| t.holes().take(MAX_RANGES).collect())
                .unwrap_or_default(),
            heap_counters: array.then(|| CounterCheck {
                checked: get(&st.counters_checked),
                wrong: get(&st.counters_wrong),
                collisions: get(&st.counters_collided),
            }),
        }
    }
}

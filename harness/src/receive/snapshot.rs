//! What a receive thread shares with the rest of the harness: its substream's counters and
//! sequence tracker, updated on the receive thread, and the snapshots anyone may take of them.

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
}

pub(super) struct Substream {
    pub(super) index: usize,
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
    /// Timestamp step (samples per heap per polarisation), once any substream knows it.
    pub fn step(&self) -> Option<u64> {
        self.substreams.iter().find_map(|s| s.step)
    }
    /// Sample rate per polarisation that `heaps` heaps over `secs` seconds stand for: each heap
    /// of one substream covers `step` samples, and every substream covers the same samples.
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
        SubstreamSnapshot {
            index: self.index,
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
            rejects: self
                .rejects
                .snapshot()
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(r, n)| (r.name().to_string(), n))
                .collect(),
            sequence: tracker.as_ref().map(|t| t.counts()).unwrap_or_default(),
            step: (step > 0).then_some(step),
            first_timestamp: tracker.as_ref().and_then(|t| t.first()),
            newest_timestamp: tracker.as_ref().and_then(|t| t.newest()),
            missing: tracker
                .as_ref()
                .map(|t| t.holes().take(MAX_RANGES).collect())
                .unwrap_or_default(),
        }
    }
}

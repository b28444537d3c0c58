//! Why packets and heaps are rejected, and counters of each reason that other threads can read.

use std::sync::atomic::{AtomicU64, Ordering};

/// A reason to drop a packet (or, for the assembly reasons, a heap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Datagram shorter than the 8-byte header.
    TooShort,
    /// Datagram longer than the configured maximum.
    TooLong,
    /// First byte is not 0x53.
    BadMagic,
    /// Version byte is not 4.
    BadVersion,
    /// Widths are not SPEAD-64-48 (item pointer width 2, heap address width 6).
    BadFlavour,
    /// The header's item pointer table runs past the datagram.
    ItemsPastEnd,
    /// Heap counter, heap offset or payload length missing or not immediate.
    MissingStandardItem,
    /// Payload length item disagrees with the datagram's length.
    PayloadLengthMismatch,
    /// Heap offset + payload length is beyond the declared heap size.
    PayloadPastHeap,
    /// Heap size above the configured limit.
    HeapTooLarge,
    /// Heap size changed between packets of one heap.
    HeapSizeChanged,
    /// An item the stream requires (a timestamp, say) is absent.
    MissingMandatoryItem,
    /// A packet of a heap already received (or overlapping one).
    Duplicate,
    /// The heap's size or shape is not what the stream expects.
    WrongHeapSize,
    /// The heap belongs before the receive window (counted as too old).
    TooOld,
    /// The heap is so far ahead of the window that taking it would discard too much.
    TooNew,
    /// An addressed item points outside its heap.
    BadItemAddress,
    /// A packet's offset is not where the sender's packet size puts packets.
    Misaligned,
    /// No free chunk buffer to open a new chunk with (the consumer is not returning them).
    NoBuffer,
    /// A heap in more disjoint pieces, or with more distinct item pointers, than the assembler
    /// tracks (its memory is bounded).
    TooFragmented,
    /// The heap arrived on a destination that the stream's layout (heap k on ADDR+(k mod N)) does
    /// not give it; receivers that split a stream across threads by destination drop it.
    WrongDestination,
}

impl Reject {
    /// Every reason, in the order counters and metrics list them.
    pub const ALL: [Reject; 21] = [
        Reject::TooShort,
        Reject::TooLong,
        Reject::BadMagic,
        Reject::BadVersion,
        Reject::BadFlavour,
        Reject::ItemsPastEnd,
        Reject::MissingStandardItem,
        Reject::PayloadLengthMismatch,
        Reject::PayloadPastHeap,
        Reject::HeapTooLarge,
        Reject::HeapSizeChanged,
        Reject::MissingMandatoryItem,
        Reject::Duplicate,
        Reject::WrongHeapSize,
        Reject::TooOld,
        Reject::TooNew,
        Reject::BadItemAddress,
        Reject::Misaligned,
        Reject::NoBuffer,
        Reject::TooFragmented,
        Reject::WrongDestination,
    ];

    /// Name for metrics labels and logs (snake case).
    pub fn name(self) -> &'static str {
        match self {
            Reject::TooShort => "too_short",
            Reject::TooLong => "too_long",
            Reject::BadMagic => "bad_magic",
            Reject::BadVersion => "bad_version",
            Reject::BadFlavour => "bad_flavour",
            Reject::ItemsPastEnd => "items_past_end",
            Reject::MissingStandardItem => "missing_standard_item",
            Reject::PayloadLengthMismatch => "payload_length_mismatch",
            Reject::PayloadPastHeap => "payload_past_heap",
            Reject::HeapTooLarge => "heap_too_large",
            Reject::HeapSizeChanged => "heap_size_changed",
            Reject::MissingMandatoryItem => "missing_mandatory_item",
            Reject::Duplicate => "duplicate",
            Reject::WrongHeapSize => "wrong_heap_size",
            Reject::TooOld => "too_old",
            Reject::TooNew => "too_new",
            Reject::BadItemAddress => "bad_item_address",
            Reject::Misaligned => "misaligned",
            Reject::NoBuffer => "no_buffer",
            Reject::TooFragmented => "too_fragmented",
            Reject::WrongDestination => "wrong_destination",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Reject {}

/// Counters per reason. Written by one receive thread, read by any (metrics): relaxed atomics.
#[derive(Debug, Default)]
pub struct RejectCounters {
    counts: [AtomicU64; Reject::ALL.len()],
}

impl RejectCounters {
    /// Counters all at zero.
    pub fn new() -> Self {
        Self::default()
    }
    /// Counts one drop for `reason`.
    pub fn count(&self, reason: Reject) {
        self.add(reason, 1);
    }
    /// Counts `n` drops for `reason`.
    pub fn add(&self, reason: Reject, n: u64) {
        self.counts[reason.index()].fetch_add(n, Ordering::Relaxed);
    }
    /// Drops counted so far for `reason`.
    pub fn get(&self, reason: Reject) -> u64 {
        self.counts[reason.index()].load(Ordering::Relaxed)
    }
    /// Drops counted so far, every reason together.
    pub fn total(&self) -> u64 {
        Reject::ALL.iter().map(|&r| self.get(r)).sum()
    }
    /// Every reason with its count, zeros included (so metrics always show every series).
    pub fn snapshot(&self) -> Vec<(Reject, u64)> {
        Reject::ALL.iter().map(|&r| (r, self.get(r))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_reason_at_its_index() {
        for (i, r) in Reject::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r}");
        }
        let c = RejectCounters::new();
        c.count(Reject::TooFragmented);
        c.add(Reject::TooShort, 2);
        assert_eq!(c.total(), 3);
        assert_eq!(c.snapshot().len(), Reject::ALL.len());
    }
}

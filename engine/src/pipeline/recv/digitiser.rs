//! The digitiser's own account of its input: the status item (`spead::items::DIGITISER_STATUS`,
//! immediate in every heap) says whether any sample of the heap saturated (bit 1) and how many
//! did (bits 32-47), as the digitiser ICD (M1000-0001-053) lays it out and docs/wire-formats.md
//! describes.
//!
//! A lane counts the status of every heap it accepts into a chunk, in plain integers of its own,
//! and adds them to its polarisation's counters once per receive round ([`ClipCount::publish`]):
//! the packet path pays one look-up among the item pointers the packet's decoding already
//! found, and two additions, with no atomic. A heap without the item counts nothing.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bit 1 of the status: a sample of the heap saturated.
const CLIP_SHIFT: u32 = 1;
/// Bits 32-47 of the status: how many samples of the heap saturated.
const SAMPLES_SHIFT: u32 = 32;
const SAMPLES_MASK: u64 = 0xffff;

/// What a lane counted since it last published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ClipCount {
    /// Heaps whose status had bit 1 set.
    pub heaps: u64,
    /// Saturated samples the statuses reported.
    pub samples: u64,
}

impl ClipCount {
    /// Counts the status item of one accepted heap (`None`: the heap had none).
    #[inline]
    pub(super) fn add(&mut self, status: Option<u64>) {
        if let Some(s) = status {
            self.heaps += (s >> CLIP_SHIFT) & 1;
            self.samples += (s >> SAMPLES_SHIFT) & SAMPLES_MASK;
        }
    }

    /// Adds what was counted to the polarisation's totals, and starts again from zero.
    pub(super) fn publish(&mut self, heaps: &AtomicU64, samples: &AtomicU64) {
        if self.heaps > 0 {
            heaps.fetch_add(self.heaps, Relaxed);
        }
        if self.samples > 0 {
            samples.fetch_add(self.samples, Relaxed);
        }
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clip_bit_and_the_sample_count_are_read_from_the_status() {
        let mut c = ClipCount::default();
        c.add(Some(2 | (3 << 32)));
        c.add(Some(0));
        c.add(None);
        // Only bits 32-47 are the count; the bits around them are not.
        c.add(Some(2 | (0xffff << 32) | (0xab << 48) | 0x10));
        // Bit 0 is not the saturation flag (the ICD's flag is bit 1).
        c.add(Some(1));
        assert_eq!(
            c,
            ClipCount {
                heaps: 2,
                samples: 3 + 0xffff
            }
        );
        let (heaps, samples) = (AtomicU64::new(10), AtomicU64::new(20));
        c.publish(&heaps, &samples);
        assert_eq!(
            (heaps.load(Relaxed), samples.load(Relaxed)),
            (12, 20 + 3 + 0xffff)
        );
        assert_eq!(c, ClipCount::default());
        c.publish(&heaps, &samples);
        assert_eq!(
            (heaps.load(Relaxed), samples.load(Relaxed)),
            (12, 20 + 3 + 0xffff)
        );
    }
}

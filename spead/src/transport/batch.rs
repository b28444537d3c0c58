//! A received batch as plain data: fixed-size buffer slots back to back, and per filled slot its
//! length and GRO stride. A slot may hold several datagrams coalesced by GRO, each `stride` bytes
//! (the last may be shorter); [`Datagrams`] yields them one by one.

use std::net::{Ipv4Addr, SocketAddr};

/// One filled slot, as quinn-udp's `RecvMeta` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvMeta {
    /// Sender of the datagrams in the slot.
    pub src: SocketAddr,
    /// Bytes to deliver from the slot (0: nothing, e.g. a truncated datagram).
    pub len: usize,
    /// Size of each datagram in the slot; equal to `len` without GRO coalescing.
    pub stride: usize,
}

impl Default for RecvMeta {
    fn default() -> Self {
        Self {
            src: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            len: 0,
            stride: 0,
        }
    }
}

/// Buffers for one `recvmmsg` and what the last call put in them.
#[derive(Clone, Debug)]
pub struct Batch {
    /// `slots` buffers of `slot` bytes each, back to back.
    pub buf: Vec<u8>,
    /// Bytes per slot.
    pub slot: usize,
    /// One entry per filled slot, slot i described by `meta[i]`.
    pub meta: Vec<RecvMeta>,
}

impl Batch {
    /// `slots` empty buffers of `slot` bytes (each at least 1), their pages touched now: a
    /// zeroed allocation gets its pages only when first written, so a receiver would otherwise
    /// grow its resident memory the first time a backlog fills more slots (after a stall, say),
    /// which a soak cannot tell from a leak.
    pub fn new(slots: usize, slot: usize) -> Self {
        let slot = slot.max(1);
        let mut buf = vec![0u8; slots * slot];
        for byte in buf.iter_mut().step_by(4096) {
            // SAFETY: a valid, aligned &mut u8. Volatile, so that the store of the zero the
            // allocation already holds is not optimised away.
            unsafe { std::ptr::write_volatile(byte, 0) };
        }
        Self {
            buf,
            slot,
            meta: Vec::with_capacity(slots),
        }
    }

    /// How many slots there are.
    pub fn slots(&self) -> usize {
        self.buf.len() / self.slot.max(1)
    }

    /// The delivered bytes of slot `i` (empty if out of range or unfilled).
    pub fn slot_bytes(&self, i: usize) -> &[u8] {
        let Some(m) = self.meta.get(i) else {
            return &[];
        };
        let start = i.saturating_mul(self.slot);
        let len = m.len.min(self.slot);
        self.buf
            .get(start..start.saturating_add(len))
            .unwrap_or(&[])
    }

    /// Every datagram of the batch, GRO slots split at their stride.
    pub fn datagrams(&self) -> Datagrams<'_> {
        Datagrams {
            batch: self,
            next_slot: 0,
            rest: &[],
            stride: 1,
        }
    }
}

/// Iterator over the datagrams of a [`Batch`].
#[derive(Clone, Debug)]
pub struct Datagrams<'a> {
    batch: &'a Batch,
    next_slot: usize,
    /// Undelivered bytes of the current slot.
    rest: &'a [u8],
    stride: usize,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while self.rest.is_empty() {
            let m = self.batch.meta.get(self.next_slot)?;
            self.rest = self.batch.slot_bytes(self.next_slot);
            // Stride 0 (no GRO information) means one datagram in the slot.
            self.stride = if m.stride == 0 {
                self.rest.len().max(1)
            } else {
                m.stride
            };
            self.next_slot += 1;
        }
        let (d, rest) = self.rest.split_at(self.stride.min(self.rest.len()));
        self.rest = rest;
        Some(d)
    }
}

/// Splits a coalesced buffer into datagrams of `stride` bytes (the last may be shorter; stride 0:
/// the whole buffer is one datagram).
pub fn split(buf: &[u8], stride: usize) -> std::slice::Chunks<'_, u8> {
    let stride = if stride == 0 {
        buf.len().max(1)
    } else {
        stride
    };
    buf.chunks(stride)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anonymous resident memory of this process (Linux), in bytes.
    fn rss_anon() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    }

    #[test]
    fn the_buffers_are_resident_from_the_start() {
        let before = rss_anon();
        let b = Batch::new(1024, 65_536);
        let after = rss_anon();
        // 64 MiB allocated; allow other tests of this binary to free a little meanwhile.
        assert!(after >= before + (48 << 20), "{before} -> {after}");
        assert_eq!(b.slots(), 1024);
    }

    #[test]
    fn split_by_stride() {
        let buf: Vec<u8> = (0..10).collect();
        let parts: Vec<&[u8]> = split(&buf, 4).collect();
        assert_eq!(parts, vec![&[0, 1, 2, 3][..], &[4, 5, 6, 7], &[8, 9]]);
        assert_eq!(split(&buf, 0).count(), 1);
        assert_eq!(split(&[], 4).count(), 0);
    }

    /// A synthetic batch: a GRO slot of three datagrams (last short), a plain one, an empty one
    /// (a dropped truncation), and a GRO slot of exactly two.
    #[test]
    fn gro_batch_splits_by_stride() {
        let mut b = Batch::new(4, 32);
        let fill = |b: &mut Batch, slot: usize, tags: &[(u8, usize)]| {
            let mut at = slot * b.slot;
            for &(tag, len) in tags {
                b.buf[at..at + len].fill(tag);
                at += len;
            }
        };
        fill(&mut b, 0, &[(1, 10), (2, 10), (3, 4)]);
        fill(&mut b, 1, &[(4, 7)]);
        fill(&mut b, 3, &[(5, 16), (6, 16)]);
        let meta = |len, stride| RecvMeta {
            len,
            stride,
            ..Default::default()
        };
        b.meta = vec![meta(24, 10), meta(7, 7), meta(0, 0), meta(32, 16)];
        let got: Vec<(u8, usize)> = b
            .datagrams()
            .map(|d| {
                assert!(d.iter().all(|&x| x == d[0]), "datagram mixes two");
                (d[0], d.len())
            })
            .collect();
        assert_eq!(got, [(1, 10), (2, 10), (3, 4), (4, 7), (5, 16), (6, 16)]);
    }

    /// Meta that does not fit the buffers (a bug elsewhere) yields what fits, never panics.
    #[test]
    fn bad_meta_is_clamped() {
        let mut b = Batch::new(2, 8);
        b.meta = vec![
            RecvMeta {
                len: 100,
                stride: 3,
                ..Default::default()
            },
            RecvMeta {
                len: 5,
                stride: 0,
                ..Default::default()
            },
            RecvMeta {
                len: 5,
                stride: 1,
                ..Default::default()
            },
        ];
        let lens: Vec<usize> = b.datagrams().map(<[u8]>::len).collect();
        assert_eq!(lens, [3, 3, 2, 5]);
        assert_eq!(b.slot_bytes(7), &[] as &[u8]);
    }
}

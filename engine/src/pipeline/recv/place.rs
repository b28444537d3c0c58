//! Where a digitiser heap goes: chunk id = timestamp / chunk_samples, slot = (timestamp %
//! chunk_samples) / heap_samples, with a guard against stray and restarted streams.
//!
//! A heap far ahead of where the stream should be by now (the newest timestamp plus the wall-clock
//! time since it, plus a tolerance) is *future-dated*; one behind the receive window is *too old*.
//! Either is dropped and counted, unless [`CONFIRM`] heaps in a row agree on the new place and
//! the stream in place has been silent for [`SILENCE`]: then the digitiser restarted, and the
//! placement says so, so that the receiver starts its window again there. The silence is what
//! tells a restart from a sender thread that lags the others: a restarted digitiser's old stream
//! stops, while a lagging thread's heaps keep arriving between those of the threads on time, and
//! following them would throw the whole stream back and forth.

use std::time::{Duration, Instant};

use spead::chunk::Placement;
use spead::Reject;

/// Consistent out-of-place heaps needed before a receiver believes a jump.
pub const CONFIRM: u32 = 32;
/// How long the stream in place must have sent nothing that fits before a receiver believes a
/// jump.
pub(super) const SILENCE: Duration = Duration::from_millis(50);
/// How long past a chunk's end (by the wall clock, and at least one chunk's duration) a silent
/// stream's receiver waits before it hands the chunk on as it is.
pub(super) const GIVE_UP: Duration = Duration::from_millis(100);

/// A heap's place, and whether the stream restarted there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Placed {
    pub at: Placement,
    /// Enough heaps agreed that the stream restarted at `at`: the caller either follows
    /// ([`Placer::follow`]) and starts its window again there, or drops the heap for this reason.
    pub jump: Option<Reject>,
}

#[derive(Clone, Copy, Debug)]
struct Newest {
    ts: u64,
    at: Instant,
}

#[derive(Debug)]
pub(super) struct Placer {
    chunk_samples: u64,
    heap_samples: u64,
    fs: f64,
    window: u64,
    /// How far (samples) a heap may run ahead of the wall-clock expectation.
    tolerance: f64,
    newest: Option<Newest>,
    /// When a heap last fitted where the stream is.
    last_fit: Instant,
    /// Chunk id the out-of-place heaps point at, and how many agreed in a row.
    candidate: Option<(u64, u32)>,
    /// Time of the current receive batch.
    pub now: Instant,
    /// The furthest behind the newest timestamp any heap arrived, in samples: accepted heaps, and
    /// heaps too old for the window by less than [`LATE_TRACKED`] (further behind is another
    /// stream, not a late heap of this one).
    pub latest: u64,
}

/// Lateness beyond which a too-old heap does not count towards [`Placer::latest`], in seconds.
const LATE_TRACKED: f64 = 2.0;

impl Placer {
    /// `window`: chunks the receive window holds; a heap further behind the newest is too old.
    pub(super) fn new(chunk_samples: u64, heap_samples: u64, fs: f64, window: u64) -> Self {
        Self {
            chunk_samples,
            heap_samples,
            fs,
            window,
            tolerance: 2.0 * chunk_samples as f64 + 0.01 * fs,
            newest: None,
            last_fit: Instant::now(),
            candidate: None,
            now: Instant::now(),
            latest: 0,
        }
    }

    /// [`Placer::latest`] as stream time.
    pub(super) fn latest_late(&self) -> Duration {
        Duration::from_secs_f64(self.latest as f64 / self.fs.max(1.0))
    }

    /// Newest timestamp accepted.
    pub(super) fn newest_timestamp(&self) -> Option<u64> {
        self.newest.map(|n| n.ts)
    }

    pub(super) fn place(&mut self, ts: u64) -> Result<Placed, Reject> {
        if !ts.is_multiple_of(self.heap_samples) {
            return Err(Reject::Misaligned);
        }
        let at = Placement {
            chunk: ts / self.chunk_samples,
            slot: ((ts % self.chunk_samples) / self.heap_samples) as usize,
        };
        let Some(n) = self.newest else {
            self.newest = Some(Newest { ts, at: self.now });
            self.last_fit = self.now;
            return Ok(Placed { at, jump: None });
        };
        let elapsed = self.now.saturating_duration_since(n.at).as_secs_f64();
        let expected = n.ts as f64 + elapsed * self.fs;
        let ahead = ts as f64 > expected + self.tolerance;
        let behind = at.chunk.saturating_add(self.window) < n.ts / self.chunk_samples;
        let late = n.ts.saturating_sub(ts);
        if late > self.latest && (!behind || (late as f64) < LATE_TRACKED * self.fs) {
            self.latest = late;
        }
        if !(ahead || behind) {
            self.candidate = None;
            self.last_fit = self.now;
            if ts > n.ts {
                self.newest = Some(Newest { ts, at: self.now });
            }
            return Ok(Placed { at, jump: None });
        }
        let reason = if ahead {
            Reject::TooNew
        } else {
            Reject::TooOld
        };
        let count = match self.candidate {
            Some((c, k)) if c.abs_diff(at.chunk) <= self.window => k + 1,
            _ => 1,
        };
        let silent = self.now.saturating_duration_since(self.last_fit) >= SILENCE;
        if count < CONFIRM || !silent {
            self.candidate = Some((at.chunk, count));
            return Err(reason);
        }
        self.candidate = None;
        Ok(Placed {
            at,
            jump: Some(reason),
        })
    }

    /// Chunks before the returned id ended, by the wall clock at `now`, at least [`GIVE_UP`] and
    /// one chunk's duration ago: a heap of theirs still to come would be late beyond any
    /// sender's jitter. None before the first heap.
    pub(super) fn ended_before(&self, now: Instant) -> Option<u64> {
        let n = self.newest?;
        let elapsed = now.saturating_duration_since(n.at).as_secs_f64();
        let margin = (GIVE_UP.as_secs_f64() * self.fs).max(self.chunk_samples as f64);
        let due = n.ts as f64 + elapsed * self.fs - margin;
        Some((due.max(0.0) / self.chunk_samples as f64) as u64)
    }

    /// Takes `ts` as where the stream now is (after a restart).
    pub(super) fn follow(&mut self, ts: u64) {
        self.candidate = None;
        self.newest = Some(Newest { ts, at: self.now });
        self.last_fit = self.now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(chunk: u64, slot: usize) -> Placed {
        Placed {
            at: Placement { chunk, slot },
            jump: None,
        }
    }

    #[test]
    fn placement_and_misalignment() {
        // Chunks of 4 heaps of 8 samples.
        let mut p = Placer::new(32, 8, 1e6, 3);
        assert_eq!(p.place(40), Ok(at(1, 1)));
        assert_eq!(p.place(41), Err(Reject::Misaligned));
    }

    #[test]
    fn a_stray_future_heap_is_dropped_but_a_sustained_jump_is_followed() {
        let mut p = Placer::new(32, 8, 1e3, 3);
        assert!(p.place(0).is_ok());
        // Far beyond 2 chunks + 10 ms of samples.
        assert_eq!(p.place(1_000_000), Err(Reject::TooNew));
        assert_eq!(p.place(8), Ok(at(0, 1)));
        p.now += SILENCE;
        for k in 0..CONFIRM - 1 {
            assert_eq!(p.place(1_000_000 + 8 * k as u64), Err(Reject::TooNew));
        }
        let t = 1_000_000 + 8 * CONFIRM as u64;
        let jumped = p.place(t).unwrap();
        assert_eq!(jumped.jump, Some(Reject::TooNew));
        assert_eq!(jumped.at.chunk, t / 32);
        // Not followed: the old stream is still the one in place.
        assert_eq!(p.place(16), Ok(at(0, 2)));
        p.follow(t);
        // Followed: the new stream then goes on without jumps.
        assert_eq!(p.place(t + 32), Ok(at(t / 32 + 1, jumped.at.slot)));
    }

    #[test]
    fn a_backward_restart_is_followed_after_confirmation() {
        let mut p = Placer::new(32, 8, 1e6, 3);
        for t in (3_200_000..3_200_200).step_by(8) {
            p.place(t).unwrap();
        }
        p.now += SILENCE;
        for k in 0..CONFIRM - 1 {
            assert_eq!(p.place(8 * k as u64), Err(Reject::TooOld));
        }
        let t = 8 * (CONFIRM - 1) as u64;
        let jumped = p.place(t).unwrap();
        assert_eq!(jumped.jump, Some(Reject::TooOld));
        assert_eq!(jumped.at.chunk, t / 32);
        p.follow(t);
        assert_eq!(p.place(t + 32), Ok(at(t / 32 + 1, jumped.at.slot)));
        // A heap of the old stream is now the stray one.
        assert_eq!(p.place(3_200_200), Err(Reject::TooNew));
    }

    #[test]
    fn chunks_end_by_the_clock_once_the_stream_is_silent() {
        // 1e6 samples/s, chunks of 4096 samples (4.1 ms): the margin is GIVE_UP (100 ms).
        let mut p = Placer::new(4096, 8, 1e6, 3);
        assert_eq!(p.ended_before(p.now), None);
        p.place(40_960).unwrap(); // chunk 10
        let t0 = p.now;
        assert_eq!(p.ended_before(t0), Some(0));
        // Chunk 10 ends at 45_056: 100 ms past that is 104.1 ms after its first heap came.
        assert_eq!(p.ended_before(t0 + Duration::from_millis(104)), Some(10));
        assert_eq!(p.ended_before(t0 + Duration::from_millis(105)), Some(11));
        // Long chunks (1 s): the margin is a chunk's duration.
        let mut p = Placer::new(1_000_000, 8, 1e6, 3);
        p.place(0).unwrap();
        assert_eq!(p.ended_before(p.now + Duration::from_millis(1999)), Some(0));
        assert_eq!(p.ended_before(p.now + Duration::from_millis(2001)), Some(1));
    }

    #[test]
    fn a_lagging_sender_never_moves_the_stream() {
        // 1e6 samples/s, chunks of 4 heaps of 8 samples: the window is 3 chunks = 96 us.
        let mut p = Placer::new(32, 8, 1e6, 3);
        let t0 = p.now;
        // For a second, every ms: 10 heaps on time, then a run of 100 from a thread 10 ms late.
        for ms in 0..1000u64 {
            p.now = t0 + Duration::from_millis(ms);
            let on_time = ms * 1000 / 8 * 8;
            for k in 0..10 {
                assert_eq!(p.place(on_time + 8 * k).map(|x| x.jump), Ok(None));
            }
            let late = on_time.saturating_sub(10_000);
            for k in 0..100 {
                if let Ok(x) = p.place(late + 8 * k) {
                    assert_eq!(x.jump, None, "followed the lagging thread at {ms} ms");
                }
            }
        }
        // Then the stream in place stops, and the other one is followed.
        p.now += SILENCE;
        let jumped = (0..CONFIRM as u64).find_map(|k| p.place(8 * k).ok());
        assert_eq!(jumped.and_then(|x| x.jump), Some(Reject::TooOld));
    }
}

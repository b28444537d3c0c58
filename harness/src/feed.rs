//! A record stream any number of readers can follow: the producer publishes each record once,
//! numbered in order; every reader keeps its own cursor and waits for the next one. `watch`
//! publishes its per-interval records here, so that its progress printer and a live page can
//! both follow the same run.
//!
//! The feed keeps the last `keep` records. A reader that falls further behind is told how many
//! it missed and goes on from the oldest kept, so a slow reader never holds the producer up.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What [`Reader::next`] found.
#[derive(Debug)]
pub enum Next<T> {
    /// The next record and its sequence number.
    Record(u64, Arc<T>),
    /// This many records were dropped from the feed before the reader got to them; the reader
    /// now stands at the oldest record kept.
    Missed(u64),
    /// No record arrived in time.
    TimedOut,
    /// The producer closed the feed and the reader has read everything.
    Closed,
}

/// The records and the sequence number of the next one.
struct State<T> {
    records: VecDeque<(u64, Arc<T>)>,
    next_seq: u64,
    closed: bool,
}

pub struct Feed<T> {
    keep: usize,
    state: Mutex<State<T>>,
    changed: Condvar,
}

impl<T> Feed<T> {
    /// A feed that keeps the last `keep` records (at least 1).
    pub fn new(keep: usize) -> Arc<Self> {
        Arc::new(Self {
            keep: keep.max(1),
            state: Mutex::new(State {
                records: VecDeque::new(),
                next_seq: 0,
                closed: false,
            }),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a record; returns its sequence number (0 for the first).
    pub fn publish(&self, record: T) -> u64 {
        let mut s = self.lock();
        let seq = s.next_seq;
        s.next_seq += 1;
        if s.records.len() == self.keep {
            s.records.pop_front();
        }
        s.records.push_back((seq, Arc::new(record)));
        drop(s);
        self.changed.notify_all();
        seq
    }

    /// No more records: readers get [`Next::Closed`] once they have read the rest.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// The newest record, if any.
    pub fn latest(&self) -> Option<(u64, Arc<T>)> {
        self.lock().records.back().cloned()
    }

    /// A reader that starts at the next record published.
    pub fn reader(self: &Arc<Self>) -> Reader<T> {
        let cursor = self.lock().next_seq;
        Reader {
            feed: self.clone(),
            cursor,
        }
    }
}

/// One reader's place in a [`Feed`].
pub struct Reader<T> {
    feed: Arc<Feed<T>>,
    /// Sequence number of the next record this reader wants.
    cursor: u64,
}

impl<T> Reader<T> {
    /// Waits up to `timeout` for the record after the last one read.
    pub fn next(&mut self, timeout: Duration) -> Next<T> {
        let deadline = Instant::now() + timeout;
        let mut s = self.feed.lock();
        loop {
            if let Some(&(oldest, _)) = s.records.front() {
                if oldest > self.cursor {
                    let missed = oldest - self.cursor;
                    self.cursor = oldest;
                    return Next::Missed(missed);
                }
                if let Some((seq, r)) = s.records.get((self.cursor - oldest) as usize) {
                    self.cursor += 1;
                    return Next::Record(*seq, r.clone());
                }
            }
            if s.closed {
                return Next::Closed;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Next::TimedOut;
            }
            s = self
                .feed
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads until the feed closes; returns the sequence numbers seen and the records' values.
    fn follow(mut r: Reader<u32>) -> Vec<(u64, u32)> {
        let mut seen = Vec::new();
        loop {
            match r.next(Duration::from_secs(10)) {
                Next::Record(seq, v) => seen.push((seq, *v)),
                Next::Closed => return seen,
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn two_readers_each_see_every_record() {
        let feed = Feed::new(64);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let r = feed.reader();
                std::thread::spawn(move || follow(r))
            })
            .collect();
        for v in 0..50u32 {
            assert_eq!(feed.publish(v * 10), v as u64);
            if v % 7 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        feed.close();
        let want: Vec<(u64, u32)> = (0..50u32).map(|v| (v as u64, v * 10)).collect();
        for r in readers {
            assert_eq!(r.join().unwrap(), want);
        }
        assert_eq!(feed.latest().map(|(s, v)| (s, *v)), Some((49, 490)));
    }

    #[test]
    fn a_reader_that_falls_behind_is_told_what_it_missed() {
        let feed = Feed::new(2);
        let mut r = feed.reader();
        assert!(matches!(r.next(Duration::from_millis(1)), Next::TimedOut));
        for v in 0..5u32 {
            feed.publish(v);
        }
        // Records 0..3 were dropped; 3 and 4 are kept.
        assert!(matches!(r.next(Duration::ZERO), Next::Missed(3)));
        assert!(matches!(r.next(Duration::ZERO), Next::Record(3, v) if *v == 3));
        assert!(matches!(r.next(Duration::ZERO), Next::Record(4, v) if *v == 4));
        // A reader joining now starts at the next record.
        let mut late = feed.reader();
        feed.publish(5);
        feed.close();
        assert!(matches!(late.next(Duration::ZERO), Next::Record(5, _)));
        assert!(matches!(late.next(Duration::ZERO), Next::Closed));
        assert!(matches!(r.next(Duration::ZERO), Next::Record(5, _)));
        assert!(matches!(r.next(Duration::ZERO), Next::Closed));
    }
}

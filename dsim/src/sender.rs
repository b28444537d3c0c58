//! One send thread of one polarisation: it owns every `threads`-th batch of heaps and their slots,
//! patches each packet's counter and timestamp, applies faults, waits for the due time and hands
//! each destination's packets to the kernel in one GSO send.
//!
//! A thread that finds itself behind after a stall sends its backlog paced at the catch-up rate
//! until back on schedule (`catchup`). One more than `max_late` behind (the host cannot send the
//! rate) does not carry the backlog on: every thread of both polarisations skips ahead to the
//! heap due now (`Shared::resume_from`), as a digitiser's clock never waits for its network.
//! Otherwise an overloaded run leaves seconds of backlog that a later, lower rate inherits, and
//! threads that fall behind by different amounts send timestamps far apart, which a receiver
//! must take for a restarted stream.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use spead::packet::MAGIC;
use spead::transport::pace::{fine_timer_slack, DEFAULT_SPIN as SPIN};
use spead::transport::DatagramSink;

use crate::buffer::{patch, Layout, Slot};
use crate::catchup::{CatchUp, Lateness, CATCH_UP_AFTER};
use crate::faults::{Action, FaultCounts};
use crate::schedule::{Cached, Schedule};
use crate::state::{BatchCounts, Progress, Shared, Switch};

/// Longest sleep between checks of the stop flag.
const MAX_SLEEP: Duration = Duration::from_millis(20);
/// No packet leaves more than this before it is due. A GSO send leaves once its last packet is
/// this close, so that the sends of a batch go out in one wakeup of the thread (and the
/// receiver's) rather than one each: on a virtual machine the wakeups, not the copies, were
/// most of the cost at high rates.
pub const MAX_EARLY: Duration = Duration::from_micros(200);
/// Byte written over the SPEAD magic (0x53) to corrupt a header.
const CORRUPT_MAGIC: u8 = 0x00;
/// Minimum time between two logged send errors of one thread.
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What to send next for one destination group.
enum Entry {
    /// A packet in the current slot, by position.
    Slot(usize),
    /// A copy of a packet sent on its own: held back (reorder) or cut short (truncate).
    Held(Vec<u8>),
}

/// A held-back packet waiting for `after` more packets of its group.
struct Held {
    after: usize,
    packet: Vec<u8>,
}

/// One send thread, sending into a sink of any transport (UDP in the simulator).
pub struct Worker<K> {
    shared: Arc<Shared>,
    pol: usize,
    thread: usize,
    layout: Layout,
    dests: Vec<SocketAddr>,
    slots: Vec<Slot>,
    switches: mpsc::Receiver<Switch>,
    pending: VecDeque<Switch>,
    sender: K,
    schedule: Cached<Schedule>,
    faults: Cached<crate::faults::FaultPlan>,
    /// Per group: packets held back past the end of a batch.
    held: Vec<Vec<Held>>,
    /// Scratch space reused by every batch (no allocation on the send path).
    sent: Vec<usize>,
    order: Vec<Entry>,
    corrupted: Vec<usize>,
    last_error_log: Option<Instant>,
    max_late: Duration,
    last_skip_log: Option<Instant>,
    catch_up_rate: f64,
    /// The catch-up in progress, if any.
    catch_up: Option<CatchUp>,
    last_catch_up_log: Option<Instant>,
}

/// Sleeps (then spins briefly) until `due`; false if the stop flag was raised first. Sleeps,
/// rather than spins, through the gaps between sends: see [`spead::transport::pace`].
fn wait_until(due: Instant, shared: &Shared) -> bool {
    fine_timer_slack();
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        let left = due - now;
        if left > SPIN {
            std::thread::sleep((left - SPIN).min(MAX_SLEEP));
        } else {
            std::hint::spin_loop();
        }
    }
}

impl<K: DatagramSink> Worker<K> {
    pub fn new(
        shared: Arc<Shared>,
        pol: usize,
        thread: usize,
        slots: Vec<Slot>,
        switches: mpsc::Receiver<Switch>,
        sender: K,
    ) -> Self {
        let p = &shared.pols[pol];
        Self {
            layout: p.layout,
            dests: p.dests.clone(),
            schedule: shared.schedule.cached(),
            faults: p.faults.cached(),
            held: (0..p.layout.groups).map(|_| Vec::new()).collect(),
            sent: Vec::with_capacity(p.layout.run * 2),
            order: Vec::with_capacity(p.layout.run * 2),
            corrupted: Vec::new(),
            shared: shared.clone(),
            pol,
            thread,
            slots,
            switches,
            pending: VecDeque::new(),
            sender,
            last_error_log: None,
            max_late: Duration::from_secs_f64(shared.config.max_late),
            last_skip_log: None,
            catch_up_rate: shared.config.catch_up_rate,
            catch_up: None,
            last_catch_up_log: None,
        }
    }

    /// Sends this thread's batches until the end heap or the stop flag.
    pub fn run(mut self) {
        let l = self.layout;
        let threads = l.threads as u64;
        let b0 = l.batch_of(self.shared.first_heap);
        let mut b = b0 + (self.thread as u64 + threads - b0 % threads) % threads;
        while !self.shared.stop.load(Ordering::Relaxed) {
            let k0 = b * l.batch as u64;
            if self.shared.end_heap.is_some_and(|end| k0 >= end) {
                break;
            }
            // Publish before looking for new signals: the control plane picks its switch heap
            // beyond what has started (`Controller::boundary`).
            self.shared.pols[self.pol]
                .started
                .fetch_max(k0, Ordering::SeqCst);
            self.take_switches(k0);
            if let Some(until) = self.shared.stalled_until() {
                if !wait_until(until, &self.shared) {
                    break;
                }
            }
            if self.skip(b) {
                b += threads;
                continue;
            }
            if !self.send_batch(b) {
                break;
            }
            b += threads;
        }
        self.flush_held();
        self.shared.running.fetch_sub(1, Ordering::SeqCst);
        tracing::debug!(pol = self.pol, thread = self.thread, "send thread done");
    }

    fn take_switches(&mut self, k0: u64) {
        while let Ok(s) = self.switches.try_recv() {
            self.pending.push_back(s);
        }
        while self.pending.front().is_some_and(|s| s.from_heap <= k0) {
            if let Some(s) = self.pending.pop_front() {
                self.slots = s.slots;
            }
        }
    }

    /// Whether batch `b` is skipped, and if so counts its heaps: it lies wholly before the heap
    /// the senders resume from, or this thread is more than `max_late` behind, and then every
    /// thread resumes from the heap due now. A batch that is late within the bound starts or
    /// continues a catch-up instead (`pace`).
    fn skip(&mut self, b: u64) -> bool {
        let l = self.layout;
        let k0 = b * l.batch as u64;
        let end = k0 + l.batch as u64;
        let mut resume = self.shared.resume_from.load(Ordering::Relaxed);
        if end > resume {
            let schedule = self.schedule.refresh(&self.shared.schedule);
            let now = Instant::now();
            let due = schedule.due(k0);
            let behind = now.saturating_duration_since(due);
            if Lateness::judge(behind, self.max_late) != Lateness::TooLate {
                self.pace(k0, due, now, behind);
                return false;
            }
            // The catch-up, if any, failed: skipping ends it.
            self.catch_up = None;
            resume = schedule.index_at(now);
            let before = self.shared.resume_from.fetch_max(resume, Ordering::Relaxed);
            if before < resume {
                self.log_skip(behind, resume);
            }
            if end > resume {
                return false;
            }
        }
        let live = self.live(k0);
        let heaps = live.end.saturating_sub(live.start);
        self.shared.pols[self.pol].counters[self.thread].add(&BatchCounts {
            heaps_done: heaps,
            skipped: heaps,
            ..Default::default()
        });
        true
    }

    /// Starts, goes on with or ends a catch-up for the batch starting at heap `k0`, due at `due`,
    /// `behind` its due time at `now` (within the bound), and counts its heaps as sent late
    /// while one is on.
    fn pace(&mut self, k0: u64, due: Instant, now: Instant, behind: Duration) {
        let counters = &self.shared.pols[self.pol].counters[self.thread];
        let mut began = false;
        match self.catch_up {
            // Stalled again during the catch-up: pace on from here.
            Some(c) if now.saturating_duration_since(c.release(due)) > CATCH_UP_AFTER => {
                self.catch_up = Some(CatchUp::new(now, due, self.catch_up_rate));
                counters
                    .longest_catch_up_ns
                    .fetch_max(behind.as_nanos() as u64, Ordering::Relaxed);
            }
            Some(c) if c.caught_up(due) => self.catch_up = None,
            Some(_) => {}
            None if Lateness::judge(behind, self.max_late) == Lateness::Late => {
                self.catch_up = Some(CatchUp::new(now, due, self.catch_up_rate));
                counters
                    .longest_catch_up_ns
                    .fetch_max(behind.as_nanos() as u64, Ordering::Relaxed);
                counters.add(&BatchCounts {
                    catch_ups: 1,
                    ..Default::default()
                });
                began = true;
            }
            None => {}
        }
        if self.catch_up.is_some() {
            let live = self.live(k0);
            counters.add(&BatchCounts {
                sent_late: live.end.saturating_sub(live.start),
                ..Default::default()
            });
        }
        if began {
            self.log_catch_up(behind);
        }
    }

    fn log_catch_up(&mut self, behind: Duration) {
        let now = Instant::now();
        if self
            .last_catch_up_log
            .is_some_and(|t| now - t < ERROR_LOG_INTERVAL)
        {
            return;
        }
        self.last_catch_up_log = Some(now);
        tracing::info!(
            pol = self.pol,
            thread = self.thread,
            behind_ms = behind.as_secs_f64() * 1e3,
            catch_up_s = CatchUp::duration(behind, self.catch_up_rate).as_secs_f64(),
            "stalled: catching up at --catch-up-rate {} times the rate, timestamps unchanged \
             (catch-ups are counted in /status; logged at most every 10 s per thread)",
            self.catch_up_rate
        );
    }

    /// The heaps of the batch starting at `k0` that the run covers (from the first heap to the
    /// end heap).
    fn live(&self, k0: u64) -> Range<u64> {
        k0.max(self.shared.first_heap)
            ..(k0 + self.layout.batch as u64).min(self.shared.end_heap.unwrap_or(u64::MAX))
    }

    fn log_skip(&mut self, behind: Duration, resume: u64) {
        let now = Instant::now();
        if self
            .last_skip_log
            .is_some_and(|t| now - t < ERROR_LOG_INTERVAL)
        {
            return;
        }
        self.last_skip_log = Some(now);
        tracing::warn!(
            pol = self.pol,
            thread = self.thread,
            behind_ms = behind.as_secs_f64() * 1e3,
            resume_heap = resume,
            "fell more than --max-late behind, too far to catch up: this host cannot send the \
             rate; skipping ahead to the heap due now (skipped heaps are counted in /status; logged at most every 10 s \
             per thread)"
        );
    }

    /// Sends batch `b`; false if stopped while waiting.
    fn send_batch(&mut self, b: u64) -> bool {
        let l = self.layout;
        let pkt = l.packet_bytes;
        let k0 = b * l.batch as u64;
        let live = self.live(k0);
        let schedule = self.schedule.refresh(&self.shared.schedule);
        let faults = self.faults.refresh(&self.shared.pols[self.pol].faults);
        let si = l.local_slot(b);
        for i in 0..l.batch {
            let k = k0 + i as u64;
            if live.contains(&k) {
                let at = l.position(i) * pkt;
                patch(
                    &mut self.slots[si].bytes[at..at + pkt],
                    k,
                    self.shared.heap_samples,
                );
            }
        }

        let mut counts = BatchCounts::default();
        let mut injected = FaultCounts::default();
        let mut corrupted = std::mem::take(&mut self.corrupted);
        let mut sent = std::mem::take(&mut self.sent);
        let mut order = std::mem::take(&mut self.order);
        corrupted.clear();
        let mut recorded = false;
        let mut stopped = false;
        for g in 0..l.groups {
            // This group's heaps of the batch, in order, with the faults applied.
            sent.clear();
            let mut held = std::mem::take(&mut self.held[g]);
            for m in 0..l.run {
                let i = m * l.groups + g;
                let k = k0 + i as u64;
                if !live.contains(&k) {
                    continue;
                }
                counts.heaps_done += 1;
                let pos = l.position(i);
                let a = if faults.is_empty() {
                    Action::default()
                } else {
                    faults.action(k)
                };
                if a.drop {
                    injected.dropped += 1;
                    continue;
                }
                counts.saturated += u64::from(self.slots[si].saturated[i]);
                if a.corrupt {
                    self.slots[si].bytes[pos * pkt] = CORRUPT_MAGIC;
                    corrupted.push(pos);
                    injected.corrupted += 1;
                }
                if a.delay > 0 || a.truncate {
                    // Out from a copy, on its own: `delay` heaps later, cut to half when truncated.
                    let at = pos * pkt;
                    let len = if a.truncate { pkt / 2 } else { pkt };
                    let copies = if a.duplicate { 2 } else { 1 };
                    for _ in 0..copies {
                        held.push(Held {
                            after: sent.len() + a.delay,
                            packet: self.slots[si].bytes[at..at + len].to_vec(),
                        });
                    }
                    injected.reordered += u64::from(a.delay > 0);
                    injected.truncated += u64::from(a.truncate);
                    injected.duplicated += u64::from(a.duplicate);
                    continue;
                }
                sent.push(pos);
                if a.duplicate {
                    sent.push(pos);
                    injected.duplicated += 1;
                }
            }
            self.merge_held(g, &sent, held, &mut order);
            if !self.send_group(g, k0, si, &order, &schedule, &mut counts, &mut recorded) {
                stopped = true;
                break;
            }
        }
        self.restore(si, &corrupted);
        self.account(&counts, &injected);
        order.clear();
        (self.sent, self.order, self.corrupted) = (sent, order, corrupted);
        !stopped
    }

    /// Places held-back packets after the right number of this batch's packets; those whose
    /// turn comes after the batch wait in `self.held` for the next one.
    fn merge_held(&mut self, g: usize, sent: &[usize], held: Vec<Held>, order: &mut Vec<Entry>) {
        order.clear();
        if held.is_empty() {
            order.extend(sent.iter().map(|&p| Entry::Slot(p)));
            return;
        }
        let n = sent.len();
        let (mut now, later): (Vec<Held>, Vec<Held>) = held.into_iter().partition(|h| h.after <= n);
        self.held[g] = later
            .into_iter()
            .map(|h| Held {
                after: h.after - n,
                packet: h.packet,
            })
            .collect();
        now.sort_by_key(|h| h.after);
        let mut now = now.into_iter().peekable();
        for j in 0..=n {
            while let Some(h) = now.next_if(|h| h.after == j) {
                order.push(Entry::Held(h.packet));
            }
            if let Some(&pos) = sent.get(j) {
                order.push(Entry::Slot(pos));
            }
        }
    }

    /// Sends one group's entries: runs of consecutive slot packets in one send each, leaving
    /// [`MAX_EARLY`] before the last is due; held packets alone, at once (late by design).
    #[allow(clippy::too_many_arguments)]
    fn send_group(
        &mut self,
        g: usize,
        k0: u64,
        si: usize,
        order: &[Entry],
        schedule: &Schedule,
        counts: &mut BatchCounts,
        recorded: &mut bool,
    ) -> bool {
        let l = self.layout;
        let pkt = l.packet_bytes;
        let heap_of = |pos: usize| k0 + ((pos % l.run) * l.groups + g) as u64;
        // During a catch-up heaps leave at its pace, never before they are due.
        let catch_up = self.catch_up;
        let release = |due: Instant| catch_up.map_or(due, |c| c.release(due));
        let mut start = 0;
        while start < order.len() {
            let first = match &order[start] {
                Entry::Held(packet) => {
                    self.send(g, packet, counts);
                    start += 1;
                    continue;
                }
                Entry::Slot(pos) => *pos,
            };
            let first_due = schedule.due(heap_of(first));
            let mut last = first;
            let mut end = start + 1;
            while let Some(Entry::Slot(p)) = order.get(end) {
                if *p != last + 1 || schedule.due(heap_of(*p)) > first_due + MAX_EARLY {
                    break;
                }
                last = *p;
                end += 1;
            }
            let last_due = release(schedule.due(heap_of(last)));
            let first_due = release(first_due);
            if !wait_until(
                last_due.checked_sub(MAX_EARLY).unwrap_or(first_due),
                &self.shared,
            ) {
                return false;
            }
            if !*recorded {
                *recorded = true;
                self.record_progress(heap_of(first));
            }
            self.send_slot(g, si, first * pkt..(last + 1) * pkt, counts);
            start = end;
        }
        true
    }

    fn record_progress(&self, heap: u64) {
        let slot = &self.shared.pols[self.pol].progress[self.thread];
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Progress {
            heap,
            sent_at: Instant::now(),
        });
    }

    /// Puts back the magic bytes that the corrupt fault overwrote.
    fn restore(&mut self, si: usize, corrupted: &[usize]) {
        for &pos in corrupted {
            self.slots[si].bytes[pos * self.layout.packet_bytes] = MAGIC;
        }
    }

    fn account(&self, counts: &BatchCounts, injected: &FaultCounts) {
        let p = &self.shared.pols[self.pol];
        p.counters[self.thread].add(counts);
        p.fault_counters.add(injected);
    }

    fn send_slot(
        &mut self,
        group: usize,
        si: usize,
        range: Range<usize>,
        counts: &mut BatchCounts,
    ) {
        let bytes = &self.slots[si].bytes[range];
        let result = self
            .sender
            .send_segments(self.dests[group], bytes, self.layout.packet_bytes);
        self.account_send(group, bytes.len(), result, counts);
    }

    fn send(&mut self, group: usize, bytes: &[u8], counts: &mut BatchCounts) {
        let result = self
            .sender
            .send_segments(self.dests[group], bytes, self.layout.packet_bytes);
        self.account_send(group, bytes.len(), result, counts);
    }

    fn account_send(
        &mut self,
        group: usize,
        len: usize,
        result: std::io::Result<()>,
        counts: &mut BatchCounts,
    ) {
        match result {
            Ok(()) => {
                counts.datagrams += len.div_ceil(self.layout.packet_bytes) as u64;
                counts.bytes += len as u64;
            }
            Err(e) => {
                counts.send_errors += 1;
                let now = Instant::now();
                if self
                    .last_error_log
                    .is_none_or(|t| now - t >= ERROR_LOG_INTERVAL)
                {
                    self.last_error_log = Some(now);
                    tracing::warn!(
                        pol = self.pol,
                        thread = self.thread,
                        dest = %self.dests[group],
                        error = %e,
                        "send failed (further errors counted, logged at most every 10 s)"
                    );
                }
            }
        }
    }

    /// Sends what is still held back when the run ends.
    fn flush_held(&mut self) {
        let mut counts = BatchCounts::default();
        for g in 0..self.held.len() {
            for h in std::mem::take(&mut self.held[g]) {
                self.send(g, &h.packet, &mut counts);
            }
        }
        self.shared.pols[self.pol].counters[self.thread].add(&counts);
    }
}

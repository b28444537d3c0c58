//! Descriptor heaps, as katgpucbf's dsim sends them: the item descriptors of the digitiser
//! stream (`timestamp`, `digitiser_id`, `digitiser_status`, `adc_samples`; see
//! `spead::stream_descriptors`) in a heap of their own, without a timestamp, to the first
//! address of polarisation 0, at start and then every [`INTERVAL`], on a thread of its own that
//! the data's pace never waits for.
//!
//! Heap counters: [`COUNTER_BIT`] and a sequence number (our choice), apart from every data heap's
//! (timestamp / heap samples, below 2^36).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spead::items;
use spead::packet::{patch_pointer, ItemPointer};
use spead::transport::{DatagramSink, SocketConfig};

use crate::state::Shared;

/// katgpucbf's interval between descriptor heaps.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Set in every descriptor heap's counter.
pub const COUNTER_BIT: u64 = 1 << 47;
/// Largest payload of a descriptor packet (the heap is far smaller: one packet).
const MAX_PAYLOAD: usize = 8192;
/// How often the thread looks whether the run has ended.
const POLL: Duration = Duration::from_millis(20);

/// When descriptors are due: at start, then every [`INTERVAL`] from there (no drift); a thread
/// that fell behind sends once and goes on from the next time due.
#[derive(Clone, Copy, Debug)]
pub struct Cadence {
    next: Instant,
}

impl Cadence {
    pub fn new(start: Instant) -> Self {
        Self { next: start }
    }

    /// True when descriptors are due at `now` (and then not again until the next time).
    pub fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        while self.next <= now {
            self.next += INTERVAL;
        }
        true
    }

    /// How long from `now` until the next time due.
    pub fn wait(&self, now: Instant) -> Duration {
        self.next.saturating_duration_since(now)
    }
}

/// The descriptor thread; [`DescriptorThread::stop`] ends it.
pub struct DescriptorThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl DescriptorThread {
    /// Starts sending `shared`'s descriptor heaps until stopped or the run ends.
    pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<Self> {
        let cfg = &shared.config;
        let Some(&dest) = cfg.dests[0].addrs.first() else {
            return Ok(Self {
                stop: Arc::default(),
                handle: None,
            });
        };
        let socket = SocketConfig {
            interface: cfg.interface,
            ttl: cfg.ttl,
            buffer_bytes: 1 << 20,
            ..Default::default()
        };
        let tx = crate::udp_sender(&socket)?;
        let descriptors =
            spead::stream_descriptors::digitiser(cfg.heap_samples as u64, cfg.sample_bits as u16);
        let mut packets = Vec::new();
        spead::stream_descriptors::write_heap(&descriptors, COUNTER_BIT, MAX_PAYLOAD, |p| {
            packets.push(p.to_vec())
        });
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("dsim-descriptors".into())
                .spawn(move || run(&shared, &stop, tx, SocketAddr::V4(dest), packets))?
        };
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Ends the thread and waits for it: no descriptor heap leaves after this returns.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for DescriptorThread {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(
    shared: &Shared,
    stop: &AtomicBool,
    mut tx: impl DatagramSink,
    dest: SocketAddr,
    mut packets: Vec<Vec<u8>>,
) {
    let mut cadence = Cadence::new(Instant::now());
    let mut seq = 0u64;
    let mut warned = false;
    loop {
        if stop.load(Ordering::Relaxed) || shared.stop.load(Ordering::Relaxed) || shared.finished()
        {
            return;
        }
        let now = Instant::now();
        if cadence.due(now) {
            let cnt = COUNTER_BIT | (seq & (COUNTER_BIT - 1));
            for p in &mut packets {
                patch_pointer(p, 0, ItemPointer::immediate(items::HEAP_CNT, cnt));
                if let Err(e) = tx.send_segments(dest, p, p.len()) {
                    if !warned {
                        tracing::warn!(%dest, "descriptor heap not sent: {e}");
                        warned = true;
                    }
                }
            }
            seq += 1;
        }
        std::thread::sleep(cadence.wait(Instant::now()).min(POLL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_go_at_start_then_every_five_seconds() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut c = Cadence::new(t0);
        let sent: Vec<u64> = (0..16_000)
            .step_by(100)
            .filter(|&ms| c.due(s(ms)))
            .collect();
        assert_eq!(sent, [0, 5000, 10_000, 15_000]);
        assert_eq!(c.wait(s(15_500)), Duration::from_millis(4500));
        // Behind by two intervals: one heap now, the next at the following time due.
        assert!(c.due(s(31_000)));
        assert!(!c.due(s(34_999)));
        assert!(c.due(s(35_000)));
    }
}

//! The receiver of the engine's output: heaps assembled on 127.0.0.1 (spead's `HeapAssembler`),
//! their timestamps remembered, and heaps from a given timestamp on captured whole.

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use num_complex::Complex64;
use spead::assemble::{Event, HeapAssembler};
use spead::transport::{Receiver, SocketConfig, UdpSocket};
use spead::{items, Limits, RejectCounters};

use crate::setup::Setup;

/// One output heap: (channels, spectra, pol, re/im) int8.
#[derive(Clone, Debug)]
pub(crate) struct OutHeap {
    pub timestamp: u64,
    pub data: Vec<i8>,
}

#[derive(Default)]
struct Seen {
    timestamps: BTreeSet<u64>,
    recent: VecDeque<OutHeap>,
    /// Heaps with a timestamp at or after `capture_from` are kept here (up to `capture_max`).
    captured: Vec<OutHeap>,
    capture_from: Option<u64>,
    capture_max: usize,
    /// Heaps whose timestamp had come before (a frame sent twice).
    repeats: u64,
}

/// Receives the engine's output on 127.0.0.1 and remembers what came.
pub(crate) struct Output {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Output {
    pub(crate) fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &SocketConfig::default())
            .expect("bind the output receiver");
        let addr = socket.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut rx = Receiver::new(socket, 32);
            let limits = Limits {
                max_packet: spead::transport::MAX_UDP_PAYLOAD,
                max_heap: 64 << 20,
            };
            let mut asm = HeapAssembler::new(limits, 64, Arc::new(RejectCounters::new()));
            let mut complete = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                if rx.recv(Duration::from_millis(50)).unwrap_or(0) == 0 {
                    continue;
                }
                for d in rx.datagrams() {
                    let _ = asm.add_datagram(d, &mut |e| {
                        if let Event::Complete(h) = e {
                            complete.push(h)
                        }
                    });
                }
                if complete.is_empty() {
                    continue;
                }
                let mut seen = s2.lock().unwrap();
                for h in complete.drain(..) {
                    let Ok(view) = h.view() else { continue };
                    let (Some(t), Some(raw)) = (
                        view.immediate(items::TIMESTAMP),
                        view.value(items::FENG_RAW),
                    ) else {
                        continue; // descriptors
                    };
                    let heap = OutHeap {
                        timestamp: t,
                        data: raw.iter().map(|&b| b as i8).collect(),
                    };
                    if !seen.timestamps.insert(t) {
                        seen.repeats += 1;
                    }
                    if seen.capture_from.is_some_and(|f| t >= f)
                        && seen.captured.len() < seen.capture_max
                    {
                        seen.captured.push(heap.clone());
                    }
                    seen.recent.push_back(heap);
                    if seen.recent.len() > 16 {
                        seen.recent.pop_front();
                    }
                }
            }
        });
        Self {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn newest(&self) -> Option<u64> {
        self.seen.lock().unwrap().timestamps.last().copied()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().timestamps.len()
    }

    /// Waits until a heap with timestamp >= `t` has arrived.
    pub(crate) fn wait_past(&self, t: u64, timeout: Duration) {
        let end = Instant::now() + timeout;
        while self.newest().is_none_or(|n| n < t) {
            assert!(
                Instant::now() < end,
                "no output heap at or after {t} in time (newest {:?})",
                self.newest()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `n` heaps have arrived in all.
    pub(crate) fn wait_count(&self, n: usize, timeout: Duration) {
        let end = Instant::now() + timeout;
        while self.count() < n {
            assert!(
                Instant::now() < end,
                "only {} output heaps in {timeout:?}",
                self.count()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Collects `n` heaps with timestamps from `from` on.
    pub(crate) fn capture(&self, from: u64, n: usize, timeout: Duration) -> Vec<OutHeap> {
        {
            let mut s = self.seen.lock().unwrap();
            s.captured.clear();
            s.capture_from = Some(from);
            s.capture_max = n;
        }
        let end = Instant::now() + timeout;
        loop {
            {
                let s = self.seen.lock().unwrap();
                if s.captured.len() >= n {
                    return s.captured.clone();
                }
            }
            assert!(
                Instant::now() < end,
                "fewer than {n} heaps from {from} in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Heaps that arrived with a timestamp seen before.
    pub(crate) fn repeats(&self) -> u64 {
        self.seen.lock().unwrap().repeats
    }

    pub(crate) fn timestamps(&self) -> BTreeSet<u64> {
        self.seen.lock().unwrap().timestamps.clone()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sample (channel, spectrum, pol) of a heap as a complex number.
pub(crate) fn value(
    s: &Setup,
    h: &OutHeap,
    channel: usize,
    spectrum: usize,
    pol: usize,
) -> Complex64 {
    let i = ((channel * s.spectra_per_heap + spectrum) * 2 + pol) * 2;
    Complex64::new(h.data[i] as f64, h.data[i + 1] as f64)
}

/// The tone peaks in channel `k` of both polarisations at `level` counts (within 3%), the rest of
/// the band (beyond its neighbours, which see its skirt) 30 dB below it.
pub(crate) fn check_tone(name: &str, s: &Setup, heaps: &[OutHeap], k: usize, level: f64) {
    for pol in 0..2 {
        let mut power = vec![0.0; s.channels];
        let (mut amp, mut n) = (0.0, 0.0);
        for h in heaps {
            for (ch, p) in power.iter_mut().enumerate() {
                for sp in 0..s.spectra_per_heap {
                    *p += value(s, h, ch, sp, pol).norm_sqr();
                }
            }
            for sp in 0..s.spectra_per_heap {
                amp += value(s, h, k, sp, pol).norm();
                n += 1.0;
            }
        }
        let peak = (0..s.channels)
            .max_by(|&a, &b| power[a].total_cmp(&power[b]))
            .unwrap();
        assert_eq!(peak, k, "{name} pol {pol}: peak in channel {peak}, not {k}");
        let mean = amp / n;
        assert!(
            (mean - level).abs() < level * 0.03,
            "{name} pol {pol}: channel {k} amplitude {mean:.2}, predicted {level}"
        );
        let far = (0..s.channels)
            .filter(|c| c.abs_diff(k) > 2)
            .map(|c| power[c])
            .fold(0.0, f64::max);
        assert!(
            far < power[k] * 1e-3,
            "{name} pol {pol}: leakage {far} vs {}",
            power[k]
        );
    }
}

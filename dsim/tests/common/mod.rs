//! Shared by dsim's integration tests: a loopback capture of both polarisations, decoding
//! through the spead crate, and FFT helpers.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsim::Config;
use rustfft::num_complex::Complex;
use rustfft::FftPlanner;
use spead::heap::HeapView;
use spead::items;
use spead::packet::{Limits, Packet};
use spead::transport::{Endpoint, Receiver, SocketConfig, UdpSocket};

/// One datagram as it arrived.
pub(crate) struct Arrival {
    pub at: Instant,
    /// Index of the destination address it arrived on.
    pub group: usize,
    pub bytes: Vec<u8>,
}

/// Receivers for both polarisations on loopback: polarisation p, group g listens on
/// 127.(p + 10).<id>.(g + 1) at one port per polarisation.
pub(crate) struct Capture {
    pub endpoints: [Endpoint; 2],
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    threads: Vec<(usize, JoinHandle<Vec<Arrival>>)>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Capture {
    pub(crate) fn start(groups: [u32; 2]) -> Self {
        // Distinct addresses per capture, so tests running side by side never share a socket.
        let id = (NEXT_ID.fetch_add(1, Ordering::Relaxed) % 250) as u8 + 1;
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let cfg = SocketConfig {
            buffer_bytes: 4 << 20,
            ..Default::default()
        };
        let mut endpoints: Vec<Endpoint> = Vec::new();
        let mut threads = Vec::new();
        for (p, &n) in groups.iter().enumerate() {
            let base = Ipv4Addr::new(127, 10 + p as u8, id, 1);
            let first = UdpSocket::bind(SocketAddrV4::new(base, 0), &cfg).unwrap();
            let port = first.local_addr().unwrap().port();
            let mut sockets = vec![first];
            for g in 1..n {
                let a = Ipv4Addr::new(127, 10 + p as u8, id, 1 + g as u8);
                sockets.push(UdpSocket::bind(SocketAddrV4::new(a, port), &cfg).unwrap());
            }
            endpoints.push(format!("{base}+{}:{port}", n - 1).parse().unwrap());
            for (g, s) in sockets.into_iter().enumerate() {
                let (stop, received) = (stop.clone(), received.clone());
                threads.push((
                    p,
                    std::thread::spawn(move || {
                        let mut rx = Receiver::new(s, 32);
                        let mut out = Vec::new();
                        while !stop.load(Ordering::Relaxed) {
                            if rx.recv(Duration::from_millis(20)).unwrap() == 0 {
                                continue;
                            }
                            let at = Instant::now();
                            for d in rx.datagrams() {
                                out.push(Arrival {
                                    at,
                                    group: g,
                                    bytes: d.to_vec(),
                                });
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        out
                    }),
                ));
            }
        }
        Self {
            endpoints: [endpoints[0].clone(), endpoints[1].clone()],
            stop,
            received,
            threads,
        }
    }

    /// Waits until nothing has arrived for `quiet`, then returns what each polarisation got,
    /// in arrival order.
    pub(crate) fn finish(self, quiet: Duration) -> [Vec<Arrival>; 2] {
        let mut last = self.received.load(Ordering::Relaxed);
        let mut since = Instant::now();
        while since.elapsed() < quiet {
            std::thread::sleep(Duration::from_millis(10));
            let now = self.received.load(Ordering::Relaxed);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut out: [Vec<Arrival>; 2] = [Vec::new(), Vec::new()];
        for (p, t) in self.threads {
            out[p].extend(t.join().unwrap());
        }
        for v in &mut out {
            v.sort_by_key(|a| a.at);
        }
        out
    }
}

/// A config for tests: 1e8 samples/s, small buffer, one thread, no noise unless set.
pub(crate) fn config(cap: &Capture) -> Config {
    let mut c = Config::new(cap.endpoints[0].clone(), cap.endpoints[1].clone());
    c.rate = 1e8;
    c.buffer_heaps = 96;
    c.threads = 1;
    c.socket_buffer = 4 << 20;
    c.signal.noise = 0.0;
    c
}

/// One digitiser heap, decoded.
#[derive(Clone, Debug)]
pub(crate) struct Heap {
    pub heap_cnt: u64,
    pub timestamp: u64,
    pub digitiser_id: u64,
    pub status: u64,
    pub heap_size: Option<u64>,
    pub n_pointers: usize,
    pub group: usize,
    /// The packed samples.
    pub raw: Vec<u8>,
    pub bits: u32,
}

impl Heap {
    pub(crate) fn samples(&self) -> Vec<i16> {
        let mut out = vec![0i16; self.raw.len() * 8 / self.bits as usize];
        spead::samples::unpack(&self.raw, self.bits, 0, &mut out);
        out
    }
}

/// Decodes single-packet digitiser heaps (stop and descriptor heaps left out); returns them and
/// the number of datagrams rejected.
pub(crate) fn decode(arrivals: &[Arrival], bits: u32) -> (Vec<Heap>, usize) {
    let mut heaps = Vec::new();
    let mut rejected = 0;
    for a in arrivals {
        let Ok(p) = Packet::decode(&a.bytes, &Limits::default()) else {
            rejected += 1;
            continue;
        };
        if p.is_stop() || p.carries_descriptors() {
            continue;
        }
        let view = HeapView::from_single_packet(&p).expect("one heap per packet");
        let raw = view.value(items::ADC_SAMPLES).expect("raw samples item");
        heaps.push(Heap {
            heap_cnt: p.heap_cnt,
            timestamp: view.immediate(items::TIMESTAMP).expect("timestamp"),
            digitiser_id: view.immediate(items::DIGITISER_ID).expect("digitiser id"),
            status: view.immediate(items::DIGITISER_STATUS).expect("status"),
            heap_size: p.heap_size,
            n_pointers: p.n_pointers(),
            group: a.group,
            raw: raw.to_vec(),
            bits,
        });
    }
    (heaps, rejected)
}

/// The descriptor heaps among `arrivals` (one packet each): where each arrived, its heap counter
/// and its descriptors.
pub(crate) fn descriptor_heaps(arrivals: &[Arrival]) -> Vec<(usize, u64, Vec<spead::Descriptor>)> {
    arrivals
        .iter()
        .filter_map(|a| {
            let p = Packet::decode(&a.bytes, &Limits::default()).ok()?;
            if !p.carries_descriptors() {
                return None;
            }
            assert_eq!(p.immediate(items::TIMESTAMP), None, "no timestamp");
            let view = HeapView::from_single_packet(&p).expect("one packet per descriptor heap");
            Some((a.group, p.heap_cnt, view.descriptors()))
        })
        .collect()
}

/// Checks the heaps' timestamps are contiguous; returns the first.
pub(crate) fn contiguous(heaps: &[Heap], heap_samples: u64) -> u64 {
    let mut ts: Vec<u64> = heaps.iter().map(|h| h.timestamp).collect();
    ts.sort();
    for w in ts.windows(2) {
        assert_eq!(w[1] - w[0], heap_samples, "gap in timestamps");
    }
    ts[0]
}

/// The samples of heaps sorted by timestamp, checked contiguous.
pub(crate) fn contiguous_samples(heaps: &[Heap], heap_samples: u64) -> (u64, Vec<f64>) {
    let t0 = contiguous(heaps, heap_samples);
    let mut hs: Vec<&Heap> = heaps.iter().collect();
    hs.sort_by_key(|h| h.timestamp);
    (
        t0,
        hs.iter()
            .flat_map(|h| h.samples().into_iter().map(f64::from))
            .collect(),
    )
}

/// FFT of `x` (length a power of two works fastest).
pub(crate) fn fft(x: &[f64]) -> Vec<Complex<f64>> {
    let mut buf: Vec<Complex<f64>> = x.iter().map(|&v| Complex::new(v, 0.0)).collect();
    FftPlanner::new()
        .plan_fft_forward(buf.len())
        .process(&mut buf);
    buf
}

/// Runs dsim in-process until it has sent `heaps` heaps per polarisation, and captures them.
pub(crate) fn run(cap: Capture, mut cfg: Config, heaps: u64) -> (dsim::Status, [Vec<Arrival>; 2]) {
    cfg.heaps = Some(heaps);
    let d = dsim::Dsim::start(cfg).unwrap();
    assert!(
        d.wait_timeout(Duration::from_secs(30)),
        "dsim did not finish"
    );
    let status = d.wait();
    let got = cap.finish(Duration::from_millis(200));
    (status, got)
}

/// Theil-Sen slope of y against x: the median of the slopes between pairs of (up to 400 evenly
/// spaced) points. Robust to the odd late arrival on a busy machine, unlike least squares.
pub(crate) fn slope(points: &[(f64, f64)]) -> f64 {
    let step = points.len().div_ceil(400).max(1);
    let p: Vec<(f64, f64)> = points.iter().step_by(step).copied().collect();
    let mut slopes = Vec::with_capacity(p.len() * p.len() / 2);
    for i in 0..p.len() {
        for j in i + 1..p.len() {
            if p[j].0 != p[i].0 {
                slopes.push((p[j].1 - p[i].1) / (p[j].0 - p[i].0));
            }
        }
    }
    slopes.sort_by(f64::total_cmp);
    slopes[slopes.len() / 2]
}

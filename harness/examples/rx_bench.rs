//! How fast can the harness receive? Sender threads (one per substream, GSO) send engine-format
//! heaps over loopback at a set total rate; the harness receiver counts heaps and gaps, as in a
//! max-rate trial. Tells whether the harness, not the engine, would limit a max-rate search.
//!
//!   cargo run --release -p harness --example rx_bench -- [GB/s total] [substreams] [seconds]
//!       [channels] [spectra per heap]
//!
//! Defaults: 12.5 GB/s (the output of 6.3 Gsample/s per polarisation), 4 substreams, 10 s,
//! 32768 channels, 256 spectra.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::receive::{NoSink, ReceiveConfig, Receiver};
use spead::heap::{HeapItem, HeapWriter};
use spead::items;
use spead::packet::{patch_pointer, ItemPointer};
use spead::transport::{Sender, SocketConfig, UdpSocket};

const PAYLOAD: usize = 8192;

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let gbps: f64 = arg(1, 12.5);
    let subs: usize = arg(2, 4);
    let seconds: f64 = arg(3, 10.0);
    let channels: usize = arg(4, 32768);
    let spectra: usize = arg(5, 256);
    let per_sub = channels / subs;
    let heap_bytes = per_sub * spectra * 4;
    let step = (spectra * 2 * channels) as u64;
    let addrs: Vec<SocketAddrV4> = (0..subs)
        .map(|i| SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1 + i as u8), 0))
        .collect();
    let mut cfg = ReceiveConfig::new(addrs, channels);
    cfg.spectra_per_heap = Some(spectra);
    let rx = Receiver::start(&cfg, Arc::new(NoSink))?;
    let ep = rx.endpoint();
    // Heaps per second per substream for the total byte rate asked.
    let heaps_per_s = gbps * 1e9 / subs as f64 / heap_bytes as f64;
    eprintln!(
        "{subs} substreams of {per_sub} channels, heaps of {heap_bytes} B, {heaps_per_s:.1} heaps/s each = {gbps} GB/s; {:.3} Gsample/s per polarisation",
        heaps_per_s * step as f64 / 1e9
    );
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now() + Duration::from_millis(200);
    let mut senders = Vec::new();
    for (i, dest) in ep.addrs.iter().enumerate() {
        let stop = stop.clone();
        let dest = SocketAddr::V4(*dest);
        senders.push(std::thread::spawn(move || -> anyhow::Result<(u64, u64)> {
            let data = vec![7u8; heap_bytes];
            let mut buf = Vec::new();
            let mut seg = 0;
            HeapWriter::new(PAYLOAD).write(
                0,
                &[
                    HeapItem::immediate(items::TIMESTAMP, 0),
                    HeapItem::immediate(items::FENG_ID, 0),
                    HeapItem::immediate(items::FREQUENCY, (i * per_sub) as u64),
                    HeapItem::addressed(items::FENG_RAW, &data),
                ],
                |p| {
                    seg = seg.max(p.len());
                    buf.extend_from_slice(p);
                },
            );
            let socket = UdpSocket::sender(&SocketConfig::default())?;
            let mut tx = Sender::new(socket);
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(k as f64 / heaps_per_s);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let ts = 1_000_000 * step + k * step;
                for p in buf.chunks_mut(seg) {
                    patch_pointer(p, 0, ItemPointer::immediate(items::HEAP_CNT, k));
                    patch_pointer(p, 4, ItemPointer::immediate(items::TIMESTAMP, ts));
                }
                tx.send_segments(dest, &buf, seg)?;
                k += 1;
            }
            Ok((k, tx.stats().dropped))
        }));
    }
    std::thread::sleep(Duration::from_secs(1) + Duration::from_millis(200));
    let mut prev = rx.snapshot();
    let t0 = Instant::now();
    let mut last = t0;
    while t0.elapsed().as_secs_f64() < seconds {
        std::thread::sleep(Duration::from_secs(1));
        let now = rx.snapshot();
        let dt = last.elapsed().as_secs_f64();
        last = Instant::now();
        eprintln!(
            "{:>5.1} s  {:.2} GB/s  {:.3} Gsample/s  gaps {}  incomplete {}",
            t0.elapsed().as_secs_f64(),
            (now.heap_bytes() - prev.heap_bytes()) as f64 / dt / 1e9,
            now.sample_rate(now.heaps() - prev.heaps(), dt) / 1e9,
            now.sequence().gaps,
            now.sequence().incomplete,
        );
        prev = now;
    }
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for s in senders {
        let (k, dropped) = s.join().expect("sender thread")?;
        sent += k;
        if dropped > 0 {
            eprintln!("a sender dropped {dropped} datagrams");
        }
    }
    let snap = rx.stop();
    println!(
        "{}",
        serde_json::json!({
            "gbps_asked": gbps,
            "substreams": subs,
            "heaps_sent": sent,
            "heaps_received": snap.heaps(),
            "sequence": snap.sequence(),
            "malformed": snap.malformed(),
        })
    );
    Ok(())
}

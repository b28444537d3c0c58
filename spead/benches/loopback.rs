//! Loopback UDP throughput: sender and receiver thread pairs, with and without GSO/GRO, for the
//! digitiser's 5 KiB and the engine's 8 KiB packets. Prints sent and received GB/s and packets/s.
//!
//! Environment: SPEAD_BENCH_PAIRS (default 1), SPEAD_BENCH_SECS (default 2).
//! On the GPU machine raise the socket buffer limits first:
//! `sysctl -w net.core.rmem_max=268435456 net.core.wmem_max=268435456`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spead::transport::{Receiver, Sender, SocketConfig, UdpSocket};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Outcome {
    sent: (u64, u64),
    received: (u64, u64),
    gso: usize,
    gro: bool,
}

fn pair(size: usize, offload: bool, secs: f64) -> Outcome {
    let cfg = SocketConfig { gso: offload, gro: offload, buffer_bytes: 256 << 20, ..Default::default() };
    let rx = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg).expect("bind");
    let dest: SocketAddr = rx.local_addr().expect("addr");
    let gro = rx.caps().gro;
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let done = done.clone();
        thread::spawn(move || {
            let mut rx = Receiver::new(rx, 32);
            let (mut n, mut bytes) = (0u64, 0u64);
            let mut idle_after_done = 0;
            loop {
                let got = rx.recv(Duration::from_millis(50)).expect("recv");
                for d in rx.datagrams() {
                    n += 1;
                    bytes += d.len() as u64;
                }
                if done.load(Ordering::Relaxed) {
                    idle_after_done += (got == 0) as u32;
                    if idle_after_done > 2 {
                        return (n, bytes);
                    }
                }
            }
        })
    };
    let mut tx = Sender::new(UdpSocket::sender(&cfg).expect("sender"));
    let gso = tx.socket().caps().gso_segments;
    let buf = vec![0x5au8; size * 64];
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        tx.send_segments(dest, &buf, size).expect("send");
    }
    let elapsed = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let (n, bytes) = receiver.join().expect("receiver thread");
    let (sn, sb, _) = tx.totals();
    // Rates per second of sending time.
    let per_s = |x: u64| (x as f64 / elapsed) as u64;
    Outcome { sent: (per_s(sn), per_s(sb)), received: (per_s(n), per_s(bytes)), gso, gro }
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let pairs = env("SPEAD_BENCH_PAIRS", 1).max(1) as usize;
    let secs = env("SPEAD_BENCH_SECS", 2) as f64;
    println!("loopback UDP, {pairs} sender/receiver thread pair(s), {secs} s per case");
    println!(
        "{:>6} {:>8} {:>5} {:>4} {:>10} {:>10} {:>10} {:>10} {:>7}",
        "size", "offload", "gso", "gro", "sent GB/s", "sent Mp/s", "recv GB/s", "recv Mp/s", "loss %"
    );
    for size in [5192usize, 8264] {
        for offload in [false, true] {
            let outcomes: Vec<Outcome> = thread::scope(|s| {
                let handles: Vec<_> = (0..pairs).map(|_| s.spawn(move || pair(size, offload, secs))).collect();
                handles.into_iter().map(|h| h.join().expect("pair")).collect()
            });
            let sum = |f: &dyn Fn(&Outcome) -> u64| outcomes.iter().map(f).sum::<u64>() as f64;
            let (sp, sb) = (sum(&|o| o.sent.0), sum(&|o| o.sent.1));
            let (rp, rb) = (sum(&|o| o.received.0), sum(&|o| o.received.1));
            let loss = if sp > 0.0 { 100.0 * (1.0 - rp / sp) } else { 0.0 };
            println!(
                "{:>6} {:>8} {:>5} {:>4} {:>10.2} {:>10.3} {:>10.2} {:>10.3} {:>7.2}",
                size,
                if offload { "gso/gro" } else { "mmsg" },
                outcomes[0].gso,
                outcomes[0].gro,
                sb / 1e9,
                sp / 1e6,
                rb / 1e9,
                rp / 1e6,
                loss
            );
        }
    }
}

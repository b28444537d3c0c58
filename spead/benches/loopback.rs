//! Loopback UDP throughput of the transport: per pair, one sender thread sending as fast as it
//! can and one receiver thread, for 5192- and 8264-byte datagrams, with and without GSO/GRO.
//!
//! `cargo bench -p spead --bench loopback`. Environment:
//! - `SPEAD_BENCH_PAIRS` (default 1): sender/receiver pairs at once, each on its own port.
//! - `SPEAD_BENCH_SECS` (default 2): seconds each case sends for.
//! - `SPEAD_BENCH_SIZES` (default `5192,8264`): datagram sizes in bytes.
//! - `SPEAD_BENCH_BUFFER` (default 64 MiB): SO_RCVBUF / SO_SNDBUF requested per socket.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spead::transport::{
    Caps, Receiver, RecvConfig, RecvStats, SendStats, Sender, SocketConfig, UdpSocket,
    MAX_UDP_PAYLOAD,
};

mod common;
use common::env;

/// Totals of one case over all pairs.
struct Row {
    sent: SendStats,
    recv: RecvStats,
    /// Longest sender run time.
    secs: f64,
    /// Of the last pair's sockets (all pairs are alike).
    tx_caps: Caps,
    rx_caps: Caps,
}

fn run_case(size: usize, offload: bool, pairs: usize, secs: f64, buffer: usize) -> io::Result<Row> {
    let cfg = SocketConfig {
        gso: offload,
        gro: offload,
        buffer_bytes: buffer,
        ..Default::default()
    };
    // All sockets first, so that a failure leaves no threads behind.
    let mut sockets = Vec::new();
    for _ in 0..pairs.max(1) {
        let rx = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg)?;
        let tx = UdpSocket::sender(&cfg)?;
        sockets.push((rx.local_addr()?, rx, tx));
    }
    let mut row = Row {
        sent: SendStats::default(),
        recv: RecvStats::default(),
        secs: 0.0,
        tx_caps: sockets[0].2.caps(),
        rx_caps: sockets[0].1.caps(),
    };
    let stop_send = Arc::new(AtomicBool::new(false));
    let stop_recv = Arc::new(AtomicBool::new(false));
    let mut receivers = Vec::new();
    let mut senders = Vec::new();
    for (dest, rx, tx) in sockets {
        let stop = stop_recv.clone();
        receivers.push(thread::spawn(move || -> io::Result<RecvStats> {
            let cfg = RecvConfig {
                max_datagram: size,
                ..Default::default()
            };
            let mut rx = Receiver::with_config(rx, cfg);
            // Read each sequence number, as a real receiver would look at its header.
            let mut check = 0u64;
            rx.run(&stop, Duration::from_millis(10), |d| {
                check ^= u64::from_be_bytes(d[..8].try_into().unwrap_or_default());
            })?;
            std::hint::black_box(check);
            Ok(rx.stats())
        }));

        let stop = stop_send.clone();
        senders.push(thread::spawn(move || -> (SendStats, f64) {
            let mut tx = Sender::new(tx);
            let per_send = tx.socket().caps().gso_segments.min(MAX_UDP_PAYLOAD / size);
            // Four GSO sends per call with GSO, one full sendmmsg batch without.
            let burst = if per_send > 1 { 4 * per_send } else { 64 };
            let mut buf = vec![0u8; burst * size];
            let mut k = 0u64;
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                for d in buf.chunks_mut(size) {
                    d[..8].copy_from_slice(&k.to_be_bytes());
                    k += 1;
                }
                if let Err(e) = tx.send_segments(dest, &buf, size) {
                    eprintln!("send failed: {e}");
                    break;
                }
            }
            (tx.stats(), start.elapsed().as_secs_f64())
        }));
    }
    thread::sleep(Duration::from_secs_f64(secs));
    stop_send.store(true, Ordering::Relaxed);
    for h in senders {
        let (s, t) = h.join().map_err(|_| io::Error::other("sender panicked"))?;
        row.sent.datagrams += s.datagrams;
        row.sent.bytes += s.bytes;
        row.sent.syscalls += s.syscalls;
        row.sent.waits += s.waits;
        row.sent.dropped += s.dropped;
        row.secs = row.secs.max(t);
    }
    // Let the receivers drain what is queued.
    thread::sleep(Duration::from_millis(200));
    stop_recv.store(true, Ordering::Relaxed);
    for h in receivers {
        let r = h
            .join()
            .map_err(|_| io::Error::other("receiver panicked"))??;
        row.recv.calls += r.calls;
        row.recv.buffers += r.buffers;
        row.recv.datagrams += r.datagrams;
        row.recv.bytes += r.bytes;
        row.recv.truncated += r.truncated;
    }
    Ok(row)
}

fn read_sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let pairs: usize = env("SPEAD_BENCH_PAIRS", 1).max(1);
    let secs: f64 = env("SPEAD_BENCH_SECS", 2.0f64).clamp(0.1, 600.0);
    let buffer: usize = env("SPEAD_BENCH_BUFFER", 64usize << 20);
    let sizes: Vec<usize> = env("SPEAD_BENCH_SIZES", "5192,8264".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&s| (8..=MAX_UDP_PAYLOAD).contains(&s))
        .collect();

    println!(
        "spead loopback UDP: {pairs} pair(s) (1 sender + 1 receiver thread each), {secs} s per case, \
         {} CPUs",
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "socket buffers asked {} MiB; net.core.rmem_max = {}, wmem_max = {}",
        buffer >> 20,
        read_sysctl("rmem_max"),
        read_sysctl("wmem_max")
    );
    println!("GB = 1e9 bytes; loss = datagrams sent but not received (receiver overrun)");
    println!();
    println!(
        "{:>6} {:>8} {:>8} {:>4} {:>10} {:>11} {:>10} {:>11} {:>7} {:>10} {:>9} {:>6}",
        "size",
        "offload",
        "gso/send",
        "gro",
        "sent GB/s",
        "sent Mpkt/s",
        "recv GB/s",
        "recv Mpkt/s",
        "loss %",
        "sends k/s",
        "pkts/recv",
        "trunc"
    );
    let mut capped = false;
    for &size in &sizes {
        for offload in [true, false] {
            let row = match run_case(size, offload, pairs, secs, buffer) {
                Ok(r) => r,
                Err(e) => {
                    println!("{size:>6} {offload:>8}  failed: {e}");
                    continue;
                }
            };
            let t = row.secs.max(1e-9);
            let (tx, rx) = (row.tx_caps, row.rx_caps);
            capped |= tx.buffer_capped || rx.buffer_capped;
            let loss = if row.sent.datagrams > 0 {
                100.0 * row.sent.datagrams.saturating_sub(row.recv.datagrams) as f64
                    / row.sent.datagrams as f64
            } else {
                0.0
            };
            println!(
                "{:>6} {:>8} {:>8} {:>4} {:>10.3} {:>11.3} {:>10.3} {:>11.3} {:>7.2} {:>10.1} {:>9.1} {:>6}",
                size,
                if offload { "GSO+GRO" } else { "none" },
                tx.gso_segments.min(MAX_UDP_PAYLOAD / size),
                if rx.gro { "yes" } else { "no" },
                row.sent.bytes as f64 / t / 1e9,
                row.sent.datagrams as f64 / t / 1e6,
                row.recv.bytes as f64 / t / 1e9,
                row.recv.datagrams as f64 / t / 1e6,
                loss,
                row.sent.syscalls as f64 / t / 1e3,
                row.recv.datagrams as f64 / row.recv.calls.max(1) as f64,
                row.recv.truncated,
            );
        }
    }
    if capped {
        println!();
        println!(
            "note: socket buffers were capped by the kernel; for fewer losses raise them with \
             sysctl -w net.core.rmem_max={buffer} net.core.wmem_max={buffer}"
        );
    }
}

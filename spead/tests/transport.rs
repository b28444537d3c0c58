//! Real sockets on 127.0.0.1: every datagram arrives intact and in full, with and without
//! GSO/GRO; multicast on the loopback interface; truncation counting; drop counting.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spead::transport::{
    Datagram, Pacer, Rate, Receiver, RecvConfig, RecvStats, Sender, SocketConfig, UdpSocket,
};

fn config(offload: bool) -> SocketConfig {
    SocketConfig {
        gso: offload,
        gro: offload,
        buffer_bytes: 4 << 20,
        ..Default::default()
    }
}

fn local(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

/// Datagram `k` of `size` bytes: k in the first 8 bytes, k's low byte everywhere else.
fn stamp(d: &mut [u8], k: u64) {
    d.fill(k as u8);
    d[..8].copy_from_slice(&k.to_be_bytes());
}

/// The sequence number of an intact datagram of `size` bytes; panics on a corrupt one.
fn check(d: &[u8], size: usize) -> usize {
    assert_eq!(d.len(), size, "datagram length");
    let k = u64::from_be_bytes(d[..8].try_into().unwrap());
    // All bytes after the number equal k's low byte (compared shifted by one: a fast memcmp).
    let tail = &d[8..];
    let ok = tail.first().is_none_or(|&b| b == k as u8) && tail[1..] == tail[..tail.len() - 1];
    assert!(ok, "datagram {k} corrupt");
    k as usize
}

/// A receiver thread that records which sequence numbers arrived, until stopped.
fn spawn_receiver(
    rx: UdpSocket,
    size: usize,
    count: usize,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(Vec<u32>, RecvStats)> {
    thread::spawn(move || {
        let cfg = RecvConfig {
            max_datagram: size,
            ..Default::default()
        };
        let mut rx = Receiver::with_config(rx, cfg);
        let mut seen = vec![0u32; count];
        rx.run(&stop, Duration::from_millis(5), |d| {
            let k = check(d, size);
            seen[k] += 1;
        })
        .unwrap();
        (seen, rx.stats())
    })
}

/// `count` datagrams of `size` bytes sent by one thread at a modest paced rate in bursts of 24,
/// received by another: none lost, duplicated or damaged, and GSO/GRO used when asked for.
fn exchange(size: usize, offload: bool) {
    let count = 3000;
    let cfg = config(offload);
    let rx = UdpSocket::bind(local(0), &cfg).unwrap();
    let dest = rx.local_addr().unwrap();
    let gro = rx.caps().gro;
    let stop = Arc::new(AtomicBool::new(false));
    let handle = spawn_receiver(rx, size, count, stop.clone());

    let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
    let mut buf = vec![0u8; size * count];
    for (k, d) in buf.chunks_mut(size).enumerate() {
        stamp(d, k as u64);
    }
    // 20k datagrams/s (0.1 to 0.2 GB/s): 150 ms for the lot.
    let pacer = Pacer::new(Instant::now(), 0, Rate::per_second(20e3).unwrap());
    for (j, burst) in buf.chunks(size * 24).enumerate() {
        pacer.wait(j as u64 * 24);
        tx.send_segments(dest, burst, size).unwrap();
    }
    let sent = tx.stats();
    assert_eq!(sent.datagrams as usize, count);
    assert_eq!(sent.dropped, 0);
    // Give the receiver time to drain, then stop it.
    thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let (seen, stats) = handle.join().unwrap();
    let lost = seen.iter().filter(|&&n| n == 0).count();
    let twice = seen.iter().filter(|&&n| n > 1).count();
    assert_eq!(
        (lost, twice),
        (0, 0),
        "size {size}, offload {offload}: lost, duplicated"
    );
    assert_eq!(stats.datagrams as usize, count);
    assert_eq!(stats.truncated, 0);
    if offload && tx.socket().caps().gso_segments > 1 {
        assert!(sent.syscalls * 4 < sent.datagrams, "GSO packs datagrams");
        if gro {
            assert!(stats.buffers < stats.datagrams, "GRO coalesces: {stats:?}");
        }
    }
    if !offload {
        assert!(!tx.socket().caps().gro && tx.socket().caps().gso_segments == 1);
        assert_eq!(stats.buffers, stats.datagrams, "no GRO");
        assert!(sent.syscalls * 16 < sent.datagrams, "sendmmsg batches");
    }
}

#[test]
fn loopback_5192_with_offload() {
    exchange(5192, true);
}

#[test]
fn loopback_8264_with_offload() {
    exchange(8264, true);
}

#[test]
fn loopback_5192_without_offload() {
    exchange(5192, false);
}

#[test]
fn loopback_8264_without_offload() {
    exchange(8264, false);
}

/// `send_batch` with datagrams in separate allocations, two destinations interleaved in runs,
/// and a short datagram ending a run: all arrive in order per destination.
#[test]
fn batch_of_scattered_datagrams() {
    for offload in [true, false] {
        let cfg = config(offload);
        let mut rxs: Vec<Receiver> = (0..2)
            .map(|_| Receiver::new(UdpSocket::bind(local(0), &cfg).unwrap(), 32))
            .collect();
        let dests: Vec<SocketAddr> = rxs
            .iter()
            .map(|r| r.socket().local_addr().unwrap())
            .collect();
        // Runs of 5 to A, 3 to B, then 4 to A whose last is short.
        let plan: Vec<(usize, usize)> = [(0, 5), (1, 3), (0, 4)]
            .iter()
            .flat_map(|&(to, n)| std::iter::repeat_n(to, n))
            .enumerate()
            .map(|(k, to)| (to, if k == 11 { 1000 } else { 5192 }))
            .collect();
        let bufs: Vec<Vec<u8>> = plan
            .iter()
            .enumerate()
            .map(|(k, &(_, size))| {
                let mut d = vec![0u8; size];
                stamp(&mut d, k as u64);
                d
            })
            .collect();
        let batch: Vec<Datagram> = plan
            .iter()
            .zip(&bufs)
            .map(|(&(to, _), b)| Datagram {
                dest: dests[to],
                bytes: b,
            })
            .collect();
        let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
        tx.send_batch(&batch).unwrap();
        if tx.socket().caps().gso_segments > 1 {
            assert_eq!(tx.stats().syscalls, 3, "one GSO send per run");
        }
        for (r, rx) in rxs.iter_mut().enumerate() {
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(2);
            let want = plan.iter().filter(|p| p.0 == r).count();
            while got.len() < want && Instant::now() < deadline {
                rx.recv(Duration::from_millis(50)).unwrap();
                got.extend(rx.datagrams().map(|d| check(d, d.len())));
            }
            let expect: Vec<usize> = (0..plan.len()).filter(|&k| plan[k].0 == r).collect();
            assert_eq!(got, expect, "receiver {r}, offload {offload}");
        }
    }
}

/// Header i and payload piece i arrive as datagram i, whole and in order, gathered from two
/// buffers, with and without GSO; too few headers is an error that sends nothing.
#[test]
fn framed_pieces_arrive_behind_their_headers() {
    for offload in [true, false] {
        let cfg = config(offload);
        let mut rx = Receiver::new(UdpSocket::bind(local(0), &cfg).unwrap(), 32);
        let dest = rx.socket().local_addr().unwrap();
        let (header, piece, pieces) = (72, 5000, 30);
        let headers: Vec<u8> = (0..pieces * header).map(|i| (i / header) as u8).collect();
        // Random-looking payload with a short last piece.
        let payload: Vec<u8> = (0..piece * (pieces - 1) + 123)
            .map(|i| (i * 7919 % 251) as u8)
            .collect();
        let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
        let err = tx.send_framed(dest, &headers[..header * 3], header, &payload, piece);
        assert!(err.is_err(), "3 headers for 30 pieces");
        assert_eq!(tx.stats().datagrams, 0);
        tx.send_framed(dest, &headers, header, &payload, piece)
            .unwrap();
        if tx.socket().caps().gso_segments > 1 {
            // 64 KiB / 5072 bytes: 12 per GSO send.
            assert_eq!(tx.stats().syscalls, 3, "offload {offload}");
        }
        let mut got: Vec<Vec<u8>> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.len() < pieces && Instant::now() < deadline {
            rx.recv(Duration::from_millis(50)).unwrap();
            got.extend(rx.datagrams().map(|d| d.to_vec()));
        }
        assert_eq!(got.len(), pieces, "offload {offload}");
        for (i, d) in got.iter().enumerate() {
            let body = &payload[i * piece..((i + 1) * piece).min(payload.len())];
            assert_eq!(&d[..header], &headers[i * header..(i + 1) * header]);
            assert!(&d[header..] == body, "datagram {i}, offload {offload}");
        }
    }
}

/// Datagrams longer than the receiver's limit are counted, not delivered, with and without GRO.
#[test]
fn truncation_is_counted() {
    for offload in [false, true] {
        let cfg = config(offload);
        let rx = UdpSocket::bind(local(0), &cfg).unwrap();
        let dest = rx.local_addr().unwrap();
        let mut rx = Receiver::with_config(
            rx,
            RecvConfig {
                batch: 8,
                max_datagram: 1000,
                ..Default::default()
            },
        );
        let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
        tx.send_to(dest, &[1; 500]).unwrap();
        tx.send_to(dest, &[2; 2000]).unwrap();
        tx.send_to(dest, &[3; 1000]).unwrap();
        tx.send_to(dest, &[4; 1001]).unwrap();
        // Three 2000-byte datagrams in one GSO send: one coalesced GRO buffer, or three.
        tx.send_segments(dest, &[5; 6000], 2000).unwrap();
        tx.send_to(dest, &[6; 7]).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.len() < 3 && Instant::now() < deadline {
            rx.recv(Duration::from_millis(50)).unwrap();
            got.extend(rx.datagrams().map(|d| (d[0], d.len())));
        }
        assert_eq!(got, [(1, 500), (3, 1000), (6, 7)], "offload {offload}");
        assert_eq!(rx.stats().truncated, 5, "offload {offload}");
    }
}

/// A datagram the kernel refuses ends the call: it and the rest are counted as dropped.
#[test]
fn refused_datagrams_are_counted() {
    let cfg = config(false);
    let rx = UdpSocket::bind(local(0), &cfg).unwrap();
    let dest = rx.local_addr().unwrap();
    let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
    let big = vec![0u8; 70_000];
    let small = [0u8; 100];
    let batch = [
        Datagram {
            dest,
            bytes: &small,
        },
        Datagram { dest, bytes: &big },
        Datagram {
            dest,
            bytes: &small,
        },
    ];
    let err = tx.send_batch(&batch).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EMSGSIZE), "{err}");
    assert_eq!(tx.stats().datagrams, 1);
    assert_eq!(tx.stats().dropped, 2);
}

/// Multicast on the loopback interface: one socket per group, and one socket for two groups
/// that must not see a third group on the same port. Where the host cannot route multicast on
/// loopback, this says so on stderr and checks nothing.
#[test]
fn multicast_on_loopback() {
    let cfg = SocketConfig {
        interface: Some(Ipv4Addr::LOCALHOST),
        ..config(true)
    };
    let g = |n| Ipv4Addr::new(239, 255, 77, n);
    let one = match UdpSocket::bind(SocketAddrV4::new(g(1), 0), &cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "MULTICAST NOT TESTED: cannot join {} on 127.0.0.1: {e}",
                g(1)
            );
            return;
        }
    };
    let port = one.local_addr().unwrap().port();
    let two = UdpSocket::bind_groups(&[g(2), g(3)], port, &cfg).unwrap();
    let mut one = Receiver::new(one, 32);
    let mut two = Receiver::new(two, 32);
    let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
    let size = 5192;
    let mut buf = vec![0u8; size * 40];
    for (k, d) in buf.chunks_mut(size).enumerate() {
        stamp(d, k as u64);
    }
    // Datagrams 0-9 to group 1, 10-19 to 2, 20-29 to 3, 30-39 to 4 (joined by nobody).
    for (n, part) in buf.chunks(size * 10).enumerate() {
        let dest = SocketAddrV4::new(g(n as u8 + 1), port).into();
        tx.send_segments(dest, part, size).unwrap();
    }
    let collect = |rx: &mut Receiver, want: usize| {
        let mut got = Vec::new();
        // Wait a little past `want` too, to catch datagrams that should not arrive.
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline && got.len() <= want {
            rx.recv(Duration::from_millis(20)).unwrap();
            got.extend(rx.datagrams().map(|d| check(d, size)));
        }
        got
    };
    let got_one = collect(&mut one, 10);
    if got_one.is_empty() {
        eprintln!(
            "MULTICAST NOT TESTED: joined {} on 127.0.0.1 but nothing arrived",
            g(1)
        );
        return;
    }
    assert_eq!(got_one, (0..10).collect::<Vec<_>>());
    let mut got_two = collect(&mut two, 20);
    got_two.sort_unstable();
    assert_eq!(got_two, (10..30).collect::<Vec<_>>());
}

/// The receive loop wakes from an idle socket to notice its stop flag promptly.
#[test]
fn receive_loop_stops_on_flag() {
    let rx = UdpSocket::bind(local(0), &config(true)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = spawn_receiver(rx, 100, 1, stop.clone());
    thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (_, stats) = handle.join().unwrap();
    assert!(t.elapsed() < Duration::from_millis(200));
    assert_eq!(stats.datagrams, 0);
}

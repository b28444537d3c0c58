//! Real sockets on loopback: every datagram arrives intact, with and without GSO/GRO.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use spead::transport::{Receiver, Sender, SocketConfig, UdpSocket};

fn exchange(size: usize, count: usize, offload: bool) {
    let cfg = SocketConfig {
        gso: offload,
        gro: offload,
        buffer_bytes: 8 << 20,
        ..Default::default()
    };
    let rx = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg).unwrap();
    let dest = rx.local_addr().unwrap();
    let mut rx = Receiver::new(rx, 32);
    let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
    // Datagram k carries k in its first 8 bytes and k's low byte everywhere else.
    let mut buf = vec![0u8; size * count];
    for (k, d) in buf.chunks_mut(size).enumerate() {
        d.fill(k as u8);
        d[..8].copy_from_slice(&(k as u64).to_be_bytes());
    }
    let mut seen = vec![false; count];
    let deadline = Instant::now() + Duration::from_secs(10);
    // Send in bursts the socket buffer can hold, receiving in between.
    for burst in buf.chunks(size * 64) {
        tx.send_segments(dest, burst, size).unwrap();
        while rx.recv(Duration::from_millis(20)).unwrap() > 0 {
            for d in rx.datagrams() {
                assert_eq!(d.len(), size);
                let k = u64::from_be_bytes(d[..8].try_into().unwrap()) as usize;
                assert!(
                    d[8..].iter().all(|&b| b == k as u8),
                    "datagram {k} corrupted"
                );
                assert!(!seen[k], "datagram {k} twice");
                seen[k] = true;
            }
        }
        assert!(Instant::now() < deadline);
    }
    let missing = seen.iter().filter(|&&s| !s).count();
    assert_eq!(
        missing, 0,
        "{missing} of {count} datagrams lost (size {size}, offload {offload})"
    );
    let (datagrams, _, syscalls) = tx.totals();
    assert_eq!(datagrams as usize, count);
    if offload && tx.socket().caps().gso_segments > 1 {
        assert!(
            syscalls < datagrams,
            "GSO should send several datagrams per call"
        );
    }
}

#[test]
fn loopback_5192_with_offload() {
    exchange(5192, 2000, true);
}

#[test]
fn loopback_8264_with_offload() {
    exchange(8264, 2000, true);
}

#[test]
fn loopback_5192_without_offload() {
    exchange(5192, 2000, false);
}

#[test]
fn loopback_8264_without_offload() {
    exchange(8264, 2000, false);
}

#[test]
fn multicast_on_loopback() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 9, 8, 7), 0);
    let cfg = SocketConfig {
        interface: Some(Ipv4Addr::LOCALHOST),
        ..Default::default()
    };
    let Ok(rx) = UdpSocket::bind(group, &cfg) else {
        eprintln!("skipped: this host cannot join multicast groups on loopback");
        return;
    };
    let port = rx.local_addr().unwrap().port();
    let mut rx = Receiver::new(rx, 4);
    let mut tx = Sender::new(UdpSocket::sender(&cfg).unwrap());
    tx.send_segments(
        SocketAddrV4::new(*group.ip(), port).into(),
        &[42u8; 100],
        100,
    )
    .unwrap();
    let n = rx.recv(Duration::from_secs(2)).unwrap();
    if n == 0 {
        eprintln!("skipped: multicast on loopback is not routed on this host");
        return;
    }
    assert_eq!(rx.datagrams().next().unwrap(), &[42u8; 100][..]);
}

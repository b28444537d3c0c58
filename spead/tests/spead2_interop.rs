//! Interoperability with spead2, the reference implementation (Python, from PyPI), on loopback:
//! spead2 sends and we decode; we send and spead2 decodes.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use spead::assemble::{Event, HeapAssembler};
use spead::packet::Limits;
use spead::transport::{Receiver, Sender, SocketConfig, UdpSocket};
use spead::{items, Descriptor, HeapItem, HeapWriter, RejectCounters};

/// Waits for a Python child at most 30 s: a hung interpreter must fail the test, not hang the suite.
fn finish(mut child: std::process::Child) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("spead2 script did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// True when spead2 can be used; without it the test fails in CI and is skipped elsewhere.
fn spead2_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import spead2, numpy"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "spead2 is not installed: pip install spead2 numpy"
        );
        eprintln!("skipped: spead2 not installed");
    }
    ok
}

#[test]
fn we_decode_what_spead2_sends() {
    if !spead2_available() {
        return;
    }
    let sock = UdpSocket::bind(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        &SocketConfig::default(),
    )
    .unwrap();
    let port = sock.local_addr().unwrap().port();
    let mut rx = Receiver::new(sock, 16);
    let sender = Command::new("python3")
        .arg(script("send_heaps.py"))
        .arg(port.to_string())
        .spawn()
        .unwrap();
    let status = finish(sender).status;
    assert!(status.success(), "spead2 sender failed");

    let mut asm = HeapAssembler::new(Limits::default(), 4, Arc::new(RejectCounters::new()));
    let mut heaps = Vec::new();
    let mut stopped = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stopped && Instant::now() < deadline {
        rx.recv(Duration::from_millis(100)).unwrap();
        for d in rx.datagrams() {
            asm.add_datagram(d, &mut |e| match e {
                Event::Complete(h) => heaps.push(h),
                Event::Stop => stopped = true,
                Event::Incomplete { heap_cnt, .. } => panic!("heap {heap_cnt} incomplete"),
            })
            .unwrap();
        }
    }
    assert!(stopped, "no stop heap from spead2");
    assert_eq!(heaps.len(), 3, "three data heaps");
    for (k, heap) in heaps.iter().enumerate() {
        let view = heap.view().unwrap();
        let descriptors = view.descriptors();
        let raw = descriptors
            .iter()
            .find(|d| d.name == "raw")
            .expect("descriptor for raw");
        assert_eq!((raw.id, raw.shape.clone()), (0x4300, vec![3, 4]));
        assert!(
            raw.dtype.as_deref().unwrap().contains("'|i1'"),
            "{:?}",
            raw.dtype
        );
        let wide = descriptors
            .iter()
            .find(|d| d.name == "wide")
            .expect("descriptor for wide");
        assert_eq!(wide.shape, vec![40, 50]);
        assert!(wide.dtype.as_deref().unwrap().contains("'>i2'"));
        let ts = descriptors
            .iter()
            .find(|d| d.name == "timestamp")
            .expect("descriptor for timestamp");
        assert_eq!(ts.format, vec![(b'u', 48)]);

        assert_eq!(view.immediate(items::TIMESTAMP), Some(1000 + k as u64));
        let raw_bytes = view.value(0x4300).unwrap();
        let expect: Vec<u8> = (0..12).map(|i| (i * (k as i32 + 1)) as i8 as u8).collect();
        assert_eq!(raw_bytes, &expect[..]);
        let wide_bytes = view.value(0x4301).unwrap();
        assert_eq!(wide_bytes.len(), 4000);
        for i in [0usize, 1, 999, 1999] {
            let v = i16::from_be_bytes([wide_bytes[2 * i], wide_bytes[2 * i + 1]]);
            assert_eq!(v as i64, i as i64 - 1000 * k as i64);
        }
    }
}

#[test]
fn spead2_decodes_what_we_send() {
    if !spead2_available() {
        return;
    }
    let port_file = std::env::temp_dir().join(format!("spead2-port-{}", std::process::id()));
    let _ = std::fs::remove_file(&port_file);
    let child = Command::new("python3")
        .arg(script("recv_heaps.py"))
        .arg(&port_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let port: u16 = loop {
        if let Ok(s) = std::fs::read_to_string(&port_file) {
            break s.trim().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "spead2 receiver did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&port_file);

    // Two heaps in the F-engine output layout, multi-packet, with descriptors in each.
    let descriptors = [
        Descriptor::unsigned(
            items::TIMESTAMP,
            "timestamp",
            "ADC sample count of the first spectrum",
            48,
        ),
        Descriptor::unsigned(items::FENG_ID, "feng_id", "F-engine id", 48),
        Descriptor::unsigned(
            items::FREQUENCY,
            "frequency",
            "First channel in the heap",
            48,
        ),
        Descriptor::numpy(
            items::FENG_RAW,
            "feng_raw",
            "Channelised data",
            "|i1",
            &[16, 8, 2, 2],
        ),
        Descriptor::numpy(0x4301, "wide", "Big-endian int16 matrix", ">i2", &[3, 5]),
    ];
    let encoded: Vec<Vec<u8>> = descriptors.iter().map(Descriptor::encode).collect();
    let mut tx = Sender::new(UdpSocket::sender(&SocketConfig::default()).unwrap());
    let dest = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into();
    let writer = HeapWriter::new(200);
    for k in 0..2u64 {
        let raw: Vec<u8> = (0..512)
            .map(|i| ((i as i64 * (k as i64 + 1)) % 256) as u8)
            .collect();
        let mut heap_items: Vec<HeapItem> = encoded
            .iter()
            .map(|d| HeapItem::addressed(items::DESCRIPTOR, d))
            .collect();
        let wide: Vec<u8> = (0..15i16)
            .flat_map(|i| (i * 1000 - 7000 * k as i16).to_be_bytes())
            .collect();
        heap_items.extend([
            HeapItem::addressed(0x4301, &wide),
            HeapItem::immediate(items::TIMESTAMP, 0x1_0000 * (k + 1)),
            HeapItem::immediate(items::FENG_ID, 3),
            HeapItem::immediate(items::FREQUENCY, 64),
            HeapItem::addressed(items::FENG_RAW, &raw),
        ]);
        writer.write(k + 1, &heap_items, |p| {
            tx.send_segments(dest, p, p.len()).unwrap()
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    writer.write(
        99,
        &[HeapItem::immediate(
            items::STREAM_CTRL,
            items::STREAM_CTRL_STOP,
        )],
        |p| tx.send_segments(dest, p, p.len()).unwrap(),
    );

    let out = finish(child);
    assert!(out.status.success(), "spead2 receiver failed");
    let heaps: Vec<Value> = serde_json::from_slice(&out.stdout).expect("receiver prints JSON");
    assert_eq!(heaps.len(), 2, "spead2 saw two heaps");
    for (k, heap) in heaps.iter().enumerate() {
        let raw = &heap["feng_raw"];
        assert_eq!(raw["shape"], json!([16, 8, 2, 2]));
        assert_eq!(raw["dtype"], "int8");
        let expect: Vec<Vec<Vec<Vec<i8>>>> = (0..16)
            .map(|c| {
                (0..8)
                    .map(|s| {
                        (0..2)
                            .map(|p| {
                                (0..2)
                                    .map(|z| {
                                        (((c * 32 + s * 4 + p * 2 + z) * (k + 1)) % 256) as u8 as i8
                                    })
                                    .collect()
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        assert_eq!(raw["value"], json!(expect));
        assert_eq!(heap["timestamp"]["value"], json!(0x1_0000 * (k + 1)));
        assert_eq!(heap["feng_id"]["value"], 3);
        let wide = &heap["wide"];
        assert_eq!(wide["shape"], json!([3, 5]));
        assert_eq!(wide["dtype"], ">i2");
        let expect: Vec<Vec<i64>> = (0..3)
            .map(|r| {
                (0..5)
                    .map(|c| (r * 5 + c) * 1000 - 7000 * k as i64)
                    .collect()
            })
            .collect();
        assert_eq!(wide["value"], json!(expect));
        assert_eq!(heap["frequency"]["value"], 64);
    }
}

/// spead2 makes of our descriptor heaps (the digitiser stream's, and the F-engine output's at 8
/// and at 4 bits) the same items, ids, shapes and types as of the heaps katgpucbf builds for the
/// same streams with spead2's own ItemGroup.
#[test]
fn spead2_reads_our_descriptor_heaps_as_katgpucbfs() {
    use spead::stream_descriptors::{digitiser, f_engine, write_heap};
    if !spead2_available() {
        return;
    }
    let port_file = std::env::temp_dir().join(format!("spead2-desc-port-{}", std::process::id()));
    let _ = std::fs::remove_file(&port_file);
    let (heap_samples, sample_bits, channels, spectra) = (4096u64, 10u16, 64u64, 256u64);
    let child = Command::new("python3")
        .arg(script("katgpucbf_descriptors.py"))
        .arg(&port_file)
        .args(
            [heap_samples, sample_bits.into(), channels, spectra, 8, 4]
                .iter()
                .map(u64::to_string),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let port: u16 = loop {
        if let Ok(s) = std::fs::read_to_string(&port_file) {
            break s.trim().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "spead2 receiver did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&port_file);

    let mut tx = Sender::new(UdpSocket::sender(&SocketConfig::default()).unwrap());
    let dest = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into();
    let sets = [
        digitiser(heap_samples, sample_bits),
        f_engine(channels, spectra, 8),
        f_engine(channels, spectra, 4),
    ];
    for (k, set) in sets.iter().enumerate() {
        write_heap(set, k as u64 + 1, 8192, |p| {
            tx.send_segments(dest, p, p.len()).unwrap()
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    HeapWriter::new(1024).write(
        99,
        &[HeapItem::immediate(
            items::STREAM_CTRL,
            items::STREAM_CTRL_STOP,
        )],
        |p| tx.send_segments(dest, p, p.len()).unwrap(),
    );

    let out = finish(child);
    assert!(out.status.success(), "spead2 receiver failed");
    let got: Value = serde_json::from_slice(&out.stdout).expect("receiver prints JSON");
    let (ours, theirs) = (&got["ours"], &got["katgpucbf"]);
    assert_eq!(ours.as_array().map(Vec::len), Some(3), "{ours}");
    for (k, want) in theirs.as_array().unwrap().iter().enumerate() {
        assert_eq!(&ours[k], want, "item set {k}");
    }
    // What they are, so that two empty sets cannot pass.
    assert_eq!(
        ours[0]["adc_samples"],
        json!({"id": 0x3300, "shape": [4096], "dtype": null, "format": [["i", 10]]})
    );
    assert_eq!(ours[0]["digitiser_status"]["format"], json!([["u", 48]]));
    assert_eq!(ours[1]["feng_raw"]["dtype"], "int8");
    assert_eq!(ours[1]["feng_raw"]["shape"], json!([64, 256, 2, 2]));
    assert_eq!(ours[2]["feng_raw"]["format"], json!([["i", 4]]));
    assert_eq!(ours[2]["feng_raw"]["shape"], json!([64, 256, 2, 2]));
}

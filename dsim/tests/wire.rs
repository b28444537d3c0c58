//! What dsim puts on the wire, decoded with the spead crate: the digitiser heap format, contiguous
//! timestamps, destination groups, and samples that are the configured signal.

mod common;

use std::f64::consts::TAU;
use std::sync::Arc;

use common::{config, contiguous_samples, decode, descriptor_heaps, fft, run, Capture};
use dsim::{Component, PolSignal, PolsRequest, Tone};
use spead::assemble::{Event, HeapAssembler};
use spead::packet::{Limits, Packet};
use spead::{items, RejectCounters};

const HS: u64 = 4096;
/// FFT length: 16 heaps. The test buffer (96 heaps) is 6 FFT lengths, so a tone on an FFT bin is
/// also a whole number of cycles per buffer and is generated exactly there.
const N: usize = 65536;
const BIN: usize = 5000;

fn bin_frequency(bin: usize, rate: f64) -> f64 {
    bin as f64 * rate / N as f64
}

#[test]
fn heaps_are_digitiser_format_contiguous_and_spread_over_groups() {
    let cap = Capture::start([1, 3]);
    let mut cfg = config(&cap);
    cfg.digitiser_id = 5;
    let (status, got) = run(cap, cfg, 200);
    for (p, arrivals) in got.iter().enumerate() {
        // Through the spead crate's general heap assembler as a receiver would.
        let mut asm = HeapAssembler::new(Limits::default(), 8, Arc::new(RejectCounters::new()));
        let mut complete = 0;
        for a in arrivals {
            asm.add_datagram(&a.bytes, &mut |e| {
                if let Event::Complete(h) = e {
                    let v = h.view().unwrap();
                    // The descriptor heap (see below) is no data heap.
                    if v.immediate(items::TIMESTAMP).is_some() {
                        assert_eq!(v.value(items::ADC_SAMPLES).unwrap().len(), 5120);
                        complete += 1;
                    }
                }
            })
            .unwrap();
        }
        assert_eq!(complete, 200, "pol {p}");

        let (heaps, rejected) = decode(arrivals, 10);
        assert_eq!((heaps.len(), rejected), (200, 0), "pol {p}");
        let mut ts: Vec<u64> = heaps.iter().map(|h| h.timestamp).collect();
        ts.sort();
        assert_eq!(ts[0], status.first_heap * HS);
        assert!(
            ts.windows(2).all(|w| w[1] - w[0] == HS),
            "pol {p} not contiguous"
        );
        for h in &heaps {
            assert_eq!(h.n_pointers, 8);
            assert_eq!(h.heap_size, Some(5120));
            assert_eq!(h.heap_cnt, h.timestamp / HS);
            assert_eq!(h.digitiser_id, 5 * 2 + p as u64);
            assert_eq!(h.status, 0, "no saturation");
            let groups = if p == 0 { 1 } else { 3 };
            assert_eq!(
                h.group as u64,
                h.heap_cnt % groups,
                "heap k goes to group k mod N+1"
            );
        }
        assert_eq!(status.pols[p].heaps_sent, 200);
        assert_eq!(status.pols[p].bytes_sent, 200 * 5192);
    }
}

#[test]
fn tone_lands_in_its_bin_at_its_amplitude() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.signal.tones = vec![Tone {
        frequency: bin_frequency(BIN, cfg.rate),
        amplitude: 0.5,
    }];
    cfg.signal.noise = 0.01;
    let (status, got) = run(cap, cfg, 16);
    for p in 0..2 {
        assert_eq!(
            status.signal.pols[p].tone_frequencies,
            [bin_frequency(BIN, 1e8)]
        );
    }
    for arrivals in &got {
        let (heaps, _) = decode(arrivals, 10);
        let (_, x) = contiguous_samples(&heaps, HS);
        assert_eq!(x.len(), N);
        let spec = fft(&x);
        let half = &spec[..N / 2];
        let peak = (1..N / 2)
            .max_by(|&a, &b| half[a].norm().total_cmp(&half[b].norm()))
            .unwrap();
        assert_eq!(peak, BIN);
        let amplitude = 2.0 * half[BIN].norm() / N as f64 / 512.0;
        assert!((amplitude - 0.5).abs() < 0.005, "amplitude {amplitude}");
        // Nothing else stands out of the noise floor (no spurs from the buffer wrapping).
        // The largest of 32767 noise bins is about ln(32767) = 10 times their mean power.
        let others: Vec<f64> = (1..N / 2)
            .filter(|&k| k != BIN)
            .map(|k| half[k].norm_sqr())
            .collect();
        let floor = others.iter().sum::<f64>() / others.len() as f64;
        let spur = others.iter().copied().fold(0.0, f64::max);
        assert!(spur < 20.0 * floor, "spur {spur}, noise floor {floor}");
    }
}

#[test]
fn noise_has_the_configured_rms() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.signal.noise = 0.05;
    let (_, got) = run(cap, cfg, 32);
    for arrivals in &got {
        let (heaps, _) = decode(arrivals, 10);
        let (_, x) = contiguous_samples(&heaps, HS);
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let rms = (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64).sqrt();
        // 0.05 of 512 counts, plus rounding and dither (1/12 LSB^2 each).
        let want = (25.6f64.powi(2) + 2.0 / 12.0).sqrt();
        assert!((rms / want - 1.0).abs() < 0.02, "rms {rms}, want {want}");
        assert!(mean.abs() < 0.5, "mean {mean}");
    }
}

#[test]
fn dither_makes_the_mean_quantisation_error_zero() {
    // A constant (a 0 Hz tone) of 0.3 full scale = 153.6 counts.
    let mean_error = |dither: bool| {
        let cap = Capture::start([1, 1]);
        let mut cfg = config(&cap);
        cfg.signal.tones = vec![Tone {
            frequency: 0.0,
            amplitude: 0.3,
        }];
        cfg.signal.dither = dither;
        let (_, got) = run(cap, cfg, 16);
        got.iter()
            .map(|a| {
                let (heaps, _) = decode(a, 10);
                let (_, x) = contiguous_samples(&heaps, HS);
                x.iter().sum::<f64>() / x.len() as f64 - 153.6
            })
            .collect::<Vec<f64>>()
    };
    for e in mean_error(false) {
        assert!(
            (e - 0.4).abs() < 1e-9,
            "plain rounding errs by +0.4, got {e}"
        );
    }
    for e in mean_error(true) {
        assert!(e.abs() < 0.01, "dithered mean error {e}");
    }
}

#[test]
fn polarisations_correlate_through_the_tone_only_with_the_delay_as_phase() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.signal.tones = vec![Tone {
        frequency: bin_frequency(BIN, cfg.rate),
        amplitude: 0.3,
    }];
    cfg.signal.noise = 0.1;
    cfg.signal.delays = [0.0, 2.5];
    let (_, got) = run(cap, cfg, 16);
    let spectra: Vec<_> = got
        .iter()
        .map(|a| {
            let (heaps, _) = decode(a, 10);
            let (t0, x) = contiguous_samples(&heaps, HS);
            (t0, fft(&x))
        })
        .collect();
    assert_eq!(spectra[0].0, spectra[1].0, "same timestamps");
    let (x0, x1) = (&spectra[0].1, &spectra[1].1);
    // Away from the tone: uncorrelated (independent noise and dither).
    let (mut cross, mut p0, mut p1) = (rustfft::num_complex::Complex::new(0.0, 0.0), 0.0, 0.0);
    for k in 1..N / 2 {
        if k != BIN {
            cross += x0[k] * x1[k].conj();
            p0 += x0[k].norm_sqr();
            p1 += x1[k].norm_sqr();
        }
    }
    let rho = cross.norm() / (p0 * p1).sqrt();
    assert!(
        rho < 5.0 / ((N / 2) as f64).sqrt(),
        "noise correlation {rho}"
    );
    // At the tone: pol 1 emits x(t + 2.5), so its phase leads by 2 pi f 2.5.
    let phase = (x1[BIN] * x0[BIN].conj()).arg();
    let want = TAU * BIN as f64 / N as f64 * 2.5;
    assert!((phase - want).abs() < 0.01, "phase {phase}, want {want}");
    let coherence = (x1[BIN] * x0[BIN].conj()).norm() / (x0[BIN].norm() * x1[BIN].norm());
    assert!(coherence > 0.999);
}

/// The per-polarisation form: the same noise seed in both polarisations and pol1 delayed by 2.5
/// samples. The polarisations are fully correlated, and their cross-spectrum's phase runs as
/// 2 pi f 2.5 over the band (the delay applies to the noise).
#[test]
fn correlated_noise_with_pol1_delayed_shows_the_delay_across_the_band() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    let noise = |delay| PolSignal {
        components: vec![Component::Noise { rms: 0.1, seed: 21 }],
        delay,
        dither: true,
    };
    cfg.signal_pols = Some(PolsRequest {
        pol0: Some(noise(0.0)),
        pol1: Some(noise(2.5)),
        seed: None,
    });
    let (status, got) = run(cap, cfg, 16);
    assert_eq!(status.signal.pols[1].signal.delay, 2.5);
    let spectra: Vec<_> = got
        .iter()
        .map(|a| {
            let (heaps, _) = decode(a, 10);
            let (t0, x) = contiguous_samples(&heaps, HS);
            (t0, fft(&x))
        })
        .collect();
    assert_eq!(spectra[0].0, spectra[1].0, "same timestamps");
    let (x0, x1) = (&spectra[0].1, &spectra[1].1);
    // Bands of 512 bins up to 0.9 of Nyquist.
    let top = N / 2 * 9 / 10;
    for band in (1..top).collect::<Vec<_>>().chunks(512) {
        let (mut cross, mut p0, mut p1) = (rustfft::num_complex::Complex::new(0.0, 0.0), 0.0, 0.0);
        for &k in band {
            cross += x1[k] * x0[k].conj();
            p0 += x0[k].norm_sqr();
            p1 += x1[k].norm_sqr();
        }
        let f = (band[0] + band[band.len() - 1]) as f64 / 2.0 / N as f64;
        let want = (TAU * f * 2.5 + std::f64::consts::PI).rem_euclid(TAU) - std::f64::consts::PI;
        let phase = cross.arg();
        let error = (phase - want + std::f64::consts::PI).rem_euclid(TAU) - std::f64::consts::PI;
        assert!(
            error.abs().to_degrees() < 0.5,
            "f {f}: phase {phase}, want {want}"
        );
        let coherence = cross.norm() / (p0 * p1).sqrt();
        assert!(coherence > 0.99, "f {f}: coherence {coherence}");
    }
}

#[test]
fn saturation_is_flagged_per_heap_and_counted() {
    let cap = Capture::start([1, 1]);
    let mut cfg = config(&cap);
    cfg.signal.tones = vec![Tone {
        frequency: bin_frequency(BIN, cfg.rate),
        amplitude: 1.5,
    }];
    cfg.signal.dither = false;
    let (status, got) = run(cap, cfg, 24);
    for (p, arrivals) in got.iter().enumerate() {
        let (heaps, _) = decode(arrivals, 10);
        let mut total = 0;
        for h in &heaps {
            // The tone at sample t is 768 cos(2 pi BIN t / N), exactly periodic in N.
            let expected = (0..HS)
                .filter(|i| {
                    let t = (h.timestamp + i) % N as u64;
                    let v = (768.0 * (TAU * (BIN as u64 * t % N as u64) as f64 / N as f64).cos())
                        .round_ties_even();
                    // katgpucbf's rule: at full scale once clipped, |v| >= 511.
                    v.clamp(-512.0, 511.0).abs() >= 511.0
                })
                .count() as u64;
            assert!(expected > 0);
            assert_eq!(
                h.status & 0xffff_ffff,
                0b10,
                "saturation bit 1, no other low bit"
            );
            assert_eq!(h.status >> 32, expected, "count in bits 32-47");
            assert!(h.samples().iter().all(|&s| (-512..=511).contains(&s)));
            total += expected;
        }
        assert_eq!(status.pols[p].saturated_samples, total);
    }
}

/// katgpucbf's dsim sends a descriptor heap at start, before the data, to the first address of
/// polarisation 0 only: the four items of the digitiser stream, no timestamp.
#[test]
fn a_descriptor_heap_goes_first_to_pol0s_first_address() {
    let cap = Capture::start([2, 2]);
    let cfg = config(&cap);
    let (_, got) = run(cap, cfg, 100);
    let found = descriptor_heaps(&got[0]);
    assert_eq!(found.len(), 1, "one descriptor heap in a run under 5 s");
    let (group, heap_cnt, descriptors) = &found[0];
    assert_eq!(*group, 0);
    assert_eq!(*heap_cnt, dsim::descriptors::COUNTER_BIT);
    assert_eq!(descriptors, &spead::stream_descriptors::digitiser(HS, 10));
    let first = Packet::decode(&got[0][0].bytes, &Limits::default()).unwrap();
    assert!(first.carries_descriptors(), "the descriptors arrive first");
    assert!(
        descriptor_heaps(&got[1]).is_empty(),
        "none to polarisation 1"
    );
    // The data heaps are all there beside it.
    assert_eq!(decode(&got[0], 10).0.len(), 100);
}

#[test]
fn multicast_groups_on_a_chosen_interface() {
    use spead::transport::{Receiver, SocketConfig, UdpSocket};
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::time::Duration;

    let cfg = SocketConfig {
        interface: Some(Ipv4Addr::LOCALHOST),
        ..Default::default()
    };
    let groups = [Ipv4Addr::new(239, 102, 7, 1), Ipv4Addr::new(239, 102, 7, 2)];
    let Ok(first) = UdpSocket::bind(SocketAddrV4::new(groups[0], 0), &cfg) else {
        eprintln!("skipped: this host cannot join multicast groups on loopback");
        return;
    };
    let port = first.local_addr().unwrap().port();
    let second = UdpSocket::bind(SocketAddrV4::new(groups[1], port), &cfg).unwrap();
    let mut rx = [Receiver::new(first, 8), Receiver::new(second, 8)];
    let mut dsim_cfg = dsim::Config::new(
        format!("239.102.7.1+1:{port}").parse().unwrap(),
        "127.0.0.1:9".parse().unwrap(),
    );
    dsim_cfg.rate = 1e7;
    dsim_cfg.buffer_heaps = 24;
    dsim_cfg.threads = 1;
    dsim_cfg.heaps = Some(20);
    dsim_cfg.interface = Some(Ipv4Addr::LOCALHOST);
    dsim_cfg.ttl = 1;
    let d = dsim::Dsim::start(dsim_cfg).unwrap();
    assert!(d.wait_timeout(Duration::from_secs(10)));
    d.wait();
    let mut seen = [Vec::new(), Vec::new()];
    let mut descriptor_heaps = [0, 0];
    for (g, r) in rx.iter_mut().enumerate() {
        while r.recv(Duration::from_millis(100)).unwrap() > 0 {
            for dgram in r.datagrams() {
                let p = spead::Packet::decode(dgram, &Limits::default()).unwrap();
                if p.carries_descriptors() {
                    descriptor_heaps[g] += 1;
                } else {
                    seen[g].push(p.heap_cnt);
                }
            }
        }
    }
    if seen.iter().all(Vec::is_empty) {
        eprintln!("skipped: multicast on loopback is not routed on this host");
        return;
    }
    for (g, heaps) in seen.iter().enumerate() {
        assert_eq!(heaps.len(), 10, "group {g}");
        assert!(
            heaps.iter().all(|k| k % 2 == g as u64),
            "heap k goes to group k mod 2"
        );
    }
    assert_eq!(
        descriptor_heaps,
        [1, 0],
        "descriptors to the first group only"
    );
}

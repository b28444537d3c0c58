//! PUT /delays with dsim's per-polarisation delays makes the cross-power phase flat across the
//! band; a delay beyond --max-delay is refused.

use std::time::{Duration, Instant};

use num_complex::Complex64;
use serde_json::json;

use crate::capture::{value, OutHeap};
use crate::setup::{serial, Setup};
use crate::system::System;

/// Phase (degrees) of the cross power X0 conj(X1) in each of `channels`.
fn cross_phases(s: &Setup, heaps: &[OutHeap], channels: &[usize]) -> Vec<f64> {
    channels
        .iter()
        .map(|&k| {
            let c: Complex64 = heaps
                .iter()
                .flat_map(|h| (0..s.spectra_per_heap).map(move |sp| (h, sp)))
                .map(|(h, sp)| value(s, h, k, sp, 0) * value(s, h, k, sp, 1).conj())
                .sum();
            c.arg().to_degrees()
        })
        .collect()
}

#[test]
fn delay_step_aligns_polarisations() {
    let _turn = serial();
    let t0 = Instant::now();
    let s = Setup::new();
    // dsim's geometric delays in samples: whole and fractional parts, opposite signs.
    let tau = [3.3, -1.6];
    let channels: Vec<usize> = (1..16).map(|i| i * s.channels / 16).collect();
    let amplitude = 0.04;
    let gain = 48.0 / s.tone_response(amplitude);
    let max_delay = 8.0 / s.rate;
    let mut sys = System::start(s.clone(), gain, max_delay);
    let mut args = s.tone_args(&channels, amplitude);
    args.extend([
        "--noise".into(),
        "0.005".into(),
        format!("--delay0={}", tau[0]),
        format!("--delay1={}", tau[1]),
    ]);
    sys.start_dsim(&args);
    sys.out.wait_count(4, Duration::from_secs(60));
    let from = sys.out.newest().unwrap() + s.heap_step();
    let before = cross_phases(
        &s,
        &sys.out.capture(from, 2, Duration::from_secs(30)),
        &channels,
    );
    // Uncorrected, the phase runs across the band by 2 pi f (tau0 - tau1) / fs.
    let spread = |p: &[f64]| {
        let mean = p.iter().sum::<f64>() / p.len() as f64;
        p.iter().map(|x| (x - mean).abs()).fold(0.0, f64::max)
    };
    assert!(
        spread(&before) > 20.0,
        "phases before correction: {before:?}"
    );

    let reply = sys.engine_ctl.put_json(
        "/delays",
        json!({"pol0": {"delay": tau[0] / s.rate}, "pol1": {"delay": tau[1] / s.rate}}),
    );
    let loaded_at = reply["pol0"]["load_timestamp"]
        .as_u64()
        .unwrap_or_else(|| panic!("PUT /delays replied without pol0.load_timestamp: {reply}"));
    // Frames prepared after the request: a few chunks past the newest input at load time.
    let settle = loaded_at + 4 * (s.heaps_per_frame as u64 + 2) * s.heap_step();
    sys.out.wait_past(settle, Duration::from_secs(60));
    let heaps = sys
        .out
        .capture(settle + s.heap_step(), 2, Duration::from_secs(30));
    let after = cross_phases(&s, &heaps, &channels);
    let worst = after.iter().map(|p| p.abs()).fold(0.0, f64::max);
    assert!(
        spread(&after) < 3.0 && worst < 3.0,
        "phases after correction (degrees): {after:?}; before: {before:?}"
    );
    // serde_json parses floats to within an ulp.
    let echoed = sys.engine_ctl.get_json("/delays")["pol1"]["delay"]
        .as_f64()
        .unwrap();
    assert!((echoed - tau[1] / s.rate).abs() < 1e-20, "{echoed}");
    // A delay beyond --max-delay is refused and changes nothing.
    let (code, body) =
        sys.engine_ctl
            .send("PUT", "/delays", Some(&json!({"pol0": {"delay": 1.0}})));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("max-delay"), "{body}");
    sys.assert_engine_healthy();
    eprintln!(
        "delay_step_aligns_polarisations: max phase {worst:.2} deg after (spread {:.1} deg before), {:.1} s",
        spread(&before),
        t0.elapsed().as_secs_f64()
    );
}

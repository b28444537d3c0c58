//! The digitiser's status items: dsim sends a tone loud enough to saturate every heap, louder on
//! one polarisation than the other, then silence from a heap its reply names. Once the engine has
//! received past that heap, its counts of clipped heaps and saturated samples per polarisation
//! equal what dsim says it sent, in `/status` and in `/metrics`; and dsim's descriptor heaps are
//! counted on polarisation 0, not rejected.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::setup::{serial, Setup};
use crate::system::System;

#[test]
fn digitiser_clipping_is_counted_as_dsim_sent_it() {
    clipping_case(Setup::new());
}

/// The same with each polarisation's heaps dealt out to two receive threads, which count apart
/// and add to one total.
#[test]
fn digitiser_clipping_is_counted_as_dsim_sent_it_with_receive_threads() {
    clipping_case(Setup::with_lanes());
}

fn clipping_case(s: Setup) {
    let _turn = serial();
    let t0 = Instant::now();
    // The engine's own output is not looked at here.
    let mut sys = System::start(s.clone(), 1.0, 1e-6);
    // Tones of 1.5 and 1.1 full scale near rate/6 (about 6 samples a cycle): every heap has
    // samples past full scale on both polarisations, more of them on pol 0.
    let tone = |amplitude: f64| {
        json!({"components": [{"kind": "tone", "frequency": s.channel_hz(s.channels / 3),
                               "amplitude": amplitude}]})
    };
    let loud = json!({"pol0": tone(1.5), "pol1": tone(1.1)});
    sys.start_dsim(&["--signal".to_string(), loud.to_string()]);
    sys.out.wait_count(4, Duration::from_secs(60));
    let first = dsim_status(&sys).first_heap;

    // Silence from a heap shortly ahead: dsim's count of saturated samples stops growing there.
    let quiet = json!({"pol0": {"components": []}, "pol1": {"components": []}});
    let change = sys.dsim_ctl().put_json("/signal", quiet);
    let k = change["from_heap"]
        .as_u64()
        .unwrap_or_else(|| panic!("dsim's reply names the heap it applies from: {change}"));
    let hs = s.heap_samples as u64;
    // Wait for the engine to place heaps well past k on both polarisations.
    let past = (k + 64) * hs;
    let end = Instant::now() + Duration::from_secs(60);
    while sys
        .engine_status()
        .input
        .pols
        .iter()
        .any(|p| p.last_timestamp < past)
    {
        assert!(
            Instant::now() < end,
            "the engine did not receive past timestamp {past}: {:?}",
            sys.engine_status().input
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the counters catch up with the heaps on the wire.
    std::thread::sleep(Duration::from_millis(300));
    let dsim = dsim_status(&sys);
    let st = sys.engine_status();
    let metrics = sys.engine_ctl.get_text("/metrics");

    assert_eq!(dsim.heaps_skipped, 0, "dsim skipped heaps: {dsim:?}");
    let heaps = k - first;
    let (mut samples, mut full_scale) = ([0; 2], [0; 2]);
    for (p, pol) in st.input.pols.iter().enumerate() {
        let sent = dsim.pols[p].saturated_samples;
        assert!(sent > heaps, "pol {p}: dsim saturated only {sent} samples");
        // Every heap dsim sent before k had saturated samples, and none after.
        assert_eq!(
            (pol.digitiser_clip_heaps, pol.digitiser_clip_samples),
            (heaps, sent),
            "pol {p}: the engine's clipped heaps and saturated samples, against the {heaps} \
             heaps dsim sent loud and the saturated samples it counted (engine input {pol:?})"
        );
        assert_eq!(
            metric(&metrics, "fengine_input_digitiser_clip_heaps_total", p),
            heaps,
            "pol {p}: /metrics"
        );
        assert_eq!(
            metric(&metrics, "fengine_input_digitiser_clip_samples_total", p),
            sent,
            "pol {p}: /metrics"
        );
        // The engine's own count of samples at full scale, from the frames whose heaps all
        // arrived (a subset of those dsim counted over: the first frame is partial).
        assert!(
            pol.frames_measured > 0 && pol.full_scale_samples > 0,
            "pol {p}: {} samples at full scale in {} frames measured, dsim clipped {sent}",
            pol.full_scale_samples,
            pol.frames_measured
        );
        samples[p] = sent;
        full_scale[p] = pol.full_scale_samples;
        // dsim's descriptor heaps go to polarisation 0's first address: counted, not rejected.
        let descriptors = pol.descriptor_heaps;
        assert_eq!(
            descriptors > 0,
            p == 0,
            "pol {p}: {descriptors} descriptor heaps (rejects {:?})",
            pol.rejected
        );
        assert_eq!(
            metric(&metrics, "fengine_input_descriptor_heaps_total", p),
            descriptors,
            "pol {p}: /metrics"
        );
        assert_eq!(pol.rejected.get("missing_mandatory_item"), None, "pol {p}");
    }
    assert!(
        full_scale[0] > full_scale[1],
        "the louder tone is at full scale more often: {full_scale:?}"
    );
    assert!(
        samples[0] > samples[1],
        "the louder tone saturates more: {samples:?}"
    );
    sys.assert_engine_healthy();
    eprintln!(
        "digitiser clipping, {} receive thread(s) per pol: {heaps} heaps, {samples:?} saturated \
         samples counted alike, {:.1} s",
        s.recv_threads,
        t0.elapsed().as_secs_f64()
    );
}

/// dsim's `GET /status`, as the type dsim fills.
fn dsim_status(sys: &System) -> fgpu_api::dsim::Status {
    let v = sys.dsim_ctl().get_json("/status");
    serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("GET /status is not dsim's status ({e}): {v}"))
}

/// The value of the series `name` of polarisation `pol` in a Prometheus text scrape.
fn metric(text: &str, name: &str, pol: usize) -> u64 {
    let label = format!("pol=\"{pol}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| l.contains(&label))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} of pol {pol} in /metrics:\n{text}"))
}

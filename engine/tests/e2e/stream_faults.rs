//! Faults mid-stream, injected by dsim (PUT /faults): one polarisation falls silent for seconds
//! and comes back; packets duplicated, reordered within the receive window, corrupted and
//! truncated. Each is counted under its reason; the output misses exactly the heaps whose input
//! was lost (the harness's oracle), no heap is sent twice, and the engine never stops.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fgpu_api::engine::Status;
use serde_json::json;

use crate::client::wideband;
use crate::setup::{serial, Setup};
use crate::system::System;

/// The count of `reason` among pol `p`'s rejects, from `before` to `after`.
fn rejected(before: &Status, after: &Status, p: usize, reason: &str) -> u64 {
    let get = |s: &Status| s.input.pols[p].rejected.get(reason).copied().unwrap_or(0);
    get(after) - get(before)
}

/// Waits until the output passes `hi`, then compares what came in [lo, hi] with the prediction.
fn check_output(sys: &System, s: &Setup, lo: u64, hi: u64, lost: &[u64], wait: Duration) -> usize {
    sys.out.wait_past(hi + 2 * s.heap_step(), wait);
    let base = sys.out.timestamps().first().copied().unwrap();
    let (all, missing) = s.predicted_output(base, lo, hi, lost);
    let got: BTreeSet<u64> = sys.out.timestamps().range(lo..=hi).copied().collect();
    let want: BTreeSet<u64> = all.difference(&missing).copied().collect();
    assert_eq!(
        got,
        want,
        "received heaps differ from the prediction: missing {:?}, extra {:?}",
        want.difference(&got).collect::<Vec<_>>(),
        got.difference(&want).collect::<Vec<_>>()
    );
    assert_eq!(sys.out.repeats(), 0, "an output heap came twice");
    missing.len()
}

#[test]
fn a_silent_polarisation_comes_back_cleanly() {
    silent_case(Setup::new());
}

#[test]
fn a_silent_polarisation_comes_back_cleanly_with_receive_threads() {
    silent_case(Setup::with_lanes());
}

/// Pol 1 sends nothing for 3 s (a hundred chunks or more), then resumes on the same clock.
fn silent_case(s: Setup) {
    let _turn = serial();
    let t0 = Instant::now();
    let mut sys = System::with_tone(&s);
    let before = sys.engine_status();
    let hs = s.heap_samples as u64;
    let per_s = (s.rate / hs as f64) as u64;
    let now = sys.dsim_timestamp();
    let k0 = now / hs + per_s.max(64);
    let silent = 3 * per_s.max(64);
    sys.dsim_ctl().put_json(
        "/faults",
        json!({"pol1": {"drop": {"ranges": [[k0, k0 + silent]]}}}),
    );
    let lo = k0 * hs - 4 * s.heap_step();
    let hi = (k0 + silent) * hs + 8 * s.heap_step();
    let lost: Vec<u64> = (k0..k0 + silent).collect();
    let wait = Duration::from_secs(60) + s.seconds((hi - now) / s.heap_step());
    let missing = check_output(&sys, &s, lo, hi, &lost, wait);
    std::thread::sleep(Duration::from_millis(300));
    let after = sys.engine_status();
    assert_eq!(
        after.input.pols[1].heaps_missing - before.input.pols[1].heaps_missing,
        silent,
        "pol 1's missing heaps"
    );
    assert_eq!(
        after.input.pols[0].heaps_missing, before.input.pols[0].heaps_missing,
        "pol 0 lost nothing"
    );
    assert!(
        after.input.pols[0].unpaired_chunks > before.input.pols[0].unpaired_chunks,
        "pol 0's chunks went alone while pol 1 was silent"
    );
    for p in 0..2 {
        assert_eq!(after.input.pols[p].resyncs, 0, "pol {p}: no restart here");
    }
    assert_eq!(
        wideband(&after).heaps_skipped - wideband(&before).heaps_skipped,
        missing as u64,
        "skipped-heap counter"
    );
    sys.assert_engine_healthy();
    eprintln!(
        "silent polarisation, {} receive thread(s) per pol: {silent} heaps ({:.1} s) of pol 1 \
         lost, {missing} output heaps missing as predicted, none twice, {:.1} s",
        s.recv_threads,
        silent as f64 / per_s as f64,
        t0.elapsed().as_secs_f64()
    );
}

/// Each polarisation from a dsim of its own; pol 1's is descheduled for 2 s (SIGSTOP), past
/// its --max-late, and skips ahead when it runs again: for the engine, pol 1's stream stops and
/// restarts. Pol 0 loses nothing meanwhile (its chunks go alone, as for a silent partner, rather
/// than waiting behind pol 1's restart until its receivers run out of buffers), and the two pair
/// again.
#[test]
fn one_polarisations_digitiser_stalls_and_skips_ahead() {
    let s = Setup::new();
    let _turn = serial();
    let t0 = Instant::now();
    let gain = 64.0 / s.tone_response(0.25);
    let sys = System::start(s.clone(), gain, 1e-6);
    let sync = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0;
    let mut args = s.tone_args(&[s.channels / 3], 0.25);
    args.extend(["--sync-time".into(), format!("{sync}")]);
    let _pol0 = sys.start_dsim_for(0, &args);
    let pol1 = sys.start_dsim_for(1, &args);
    sys.out.wait_count(4, Duration::from_secs(60));
    // Past the start's own losses (the first chunks, one dsim starting before the other).
    std::thread::sleep(Duration::from_secs(1));
    let before = sys.engine_status();

    pol1.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(2));
    pol1.signal(libc::SIGCONT);
    // Until both pair again: a second with no chunk alone.
    let limit = Duration::from_secs(20);
    let resumed = Instant::now();
    let mut last = sys.engine_status();
    let after = loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = sys.engine_status();
        let unpaired = |st: &Status| [0, 1].map(|p| st.input.pols[p].unpaired_chunks);
        if now.input.pols[1].resyncs > before.input.pols[1].resyncs
            && unpaired(&now) == unpaired(&last)
        {
            break now;
        }
        assert!(
            resumed.elapsed() < limit,
            "the polarisations did not pair again within {limit:?}: {now:?}"
        );
        last = now;
    };
    fn p0(st: &Status) -> &fgpu_api::engine::PolInput {
        &st.input.pols[0]
    }
    assert_eq!(
        p0(&after).heaps_missing,
        p0(&before).heaps_missing,
        "pol 0 lost heaps while pol 1 restarted: before {:?}, after {:?}",
        p0(&before),
        p0(&after)
    );
    assert_eq!(
        rejected(&before, &after, 0, "no_buffer"),
        0,
        "pol 0's receivers ran out of buffers"
    );
    assert!(
        p0(&after).unpaired_chunks > p0(&before).unpaired_chunks,
        "pol 0's chunks went alone while pol 1 was away"
    );
    assert_eq!(
        p0(&after).resyncs,
        p0(&before).resyncs,
        "pol 0 did not restart"
    );
    // A chunk of pol 1 that came after its frame had gone without it is dropped, not sent as a
    // second frame of the same id.
    assert_eq!(sys.out.repeats(), 0, "an output heap came twice");
    let skipped = wideband(&after).heaps_skipped - wideband(&before).heaps_skipped;
    eprintln!(
        "one polarisation's digitiser stalled 2 s and skipped ahead: pol 1 missed {} heaps, \
         restarted, {} chunks late; pol 0 missed none, {} of its chunks alone; {skipped} output \
         heaps skipped; paired again {:.1} s after it resumed, {:.1} s",
        after.input.pols[1].heaps_missing - before.input.pols[1].heaps_missing,
        after.input.pols[1].late_chunks - before.input.pols[1].late_chunks,
        p0(&after).unpaired_chunks - p0(&before).unpaired_chunks,
        resumed.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// Duplicated and reordered heaps lose nothing; corrupted and truncated ones are lost, each
/// counted under its reason.
#[test]
fn duplicated_reordered_corrupt_and_truncated_packets() {
    let s = Setup::new();
    let _turn = serial();
    let t0 = Instant::now();
    let mut sys = System::with_tone(&s);
    let before = sys.engine_status();
    let hs = s.heap_samples as u64;
    let per_s = (s.rate / hs as f64) as u64;
    let now = sys.dsim_timestamp();
    // Separate stretches, far enough apart that their output gaps do not touch.
    let k0 = now / hs + per_s.max(64);
    let gap = 4 * s.heap_step() / hs + 8;
    let dup = [k0, k0 + 50];
    // Every fifth heap of a stretch, each sent two heaps late.
    let reorder: Vec<u64> = (k0 + 50 + gap..k0 + 100 + gap).step_by(5).collect();
    let corrupt = vec![k0 + 100 + 2 * gap, k0 + 100 + 3 * gap];
    let truncate = vec![k0 + 100 + 4 * gap, k0 + 100 + 5 * gap, k0 + 100 + 6 * gap];
    sys.dsim_ctl().put_json(
        "/faults",
        json!({
            "pol0": {"duplicate": {"ranges": [dup]}, "corrupt": {"heaps": corrupt},
                     "reorder": {"heaps": reorder, "window": 2}},
            "pol1": {"truncate": {"heaps": truncate}, "duplicate": {"heaps": [reorder[0]]}},
        }),
    );
    let lo = k0 * hs - 4 * s.heap_step();
    let hi = (truncate[2] + 1) * hs + 4 * s.heap_step();
    let mut lost = corrupt.clone();
    lost.extend(&truncate);
    let wait = Duration::from_secs(60) + s.seconds((hi - now) / s.heap_step());
    let missing = check_output(&sys, &s, lo, hi, &lost, wait);
    std::thread::sleep(Duration::from_millis(300));
    let after = sys.engine_status();
    let injected = &sys.dsim_ctl().get_json("/status")["pols"];
    let n = |p: usize, kind: &str| injected[p]["faults_injected"][kind].as_u64().unwrap();
    assert_eq!(
        (n(0, "duplicated"), n(0, "reordered"), n(0, "corrupted")),
        (50, 10, 2)
    );
    assert_eq!((n(1, "truncated"), n(1, "duplicated")), (3, 1));
    assert_eq!(rejected(&before, &after, 0, "duplicate"), 50);
    assert_eq!(rejected(&before, &after, 0, "bad_magic"), 2);
    assert_eq!(rejected(&before, &after, 1, "duplicate"), 1);
    assert_eq!(rejected(&before, &after, 1, "payload_length_mismatch"), 3);
    for (p, lost) in [(0, 2), (1, 3)] {
        assert_eq!(
            after.input.pols[p].heaps_missing - before.input.pols[p].heaps_missing,
            lost,
            "pol {p}: the corrupted or truncated heaps, nothing reordered"
        );
        assert_eq!(rejected(&before, &after, p, "too_old"), 0, "pol {p}");
    }
    assert_eq!(
        wideband(&after).heaps_skipped - wideband(&before).heaps_skipped,
        missing as u64,
        "skipped-heap counter"
    );
    sys.assert_engine_healthy();
    eprintln!(
        "packet faults: 51 duplicates and 2 corrupt, 3 truncated counted by reason, 10 heaps \
         reordered without loss; {missing} output heaps missing as predicted, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

//! Two wideband outputs of one input (`--wideband NAME:dst=...,channels=N,gain=G`), of n/4 and
//! n channels, each to a destination of its own. Each carries dsim's tone in the channel its own
//! channel count predicts (the harness's [`Band`], the prediction `harness watch` makes), at the
//! level its weights and gain predict; each output's heaps are of its own size, step by its own
//! heap step and sit on the one input's frames less its own lag; `/status` lists both, each with
//! its own shape and counters.

use std::time::Duration;

use harness::band::Band;

use crate::capture::{check_tone, OutHeap};
use crate::client::output;
use crate::setup::{serial, Setup};
use crate::system::{System, WidebandOutput};

/// Tone amplitude (fraction of full scale) and the level each output's gain puts it at.
const AMPLITUDE: f64 = 0.25;
const LEVEL: f64 = 64.0;

#[test]
fn two_wideband_outputs_each_carry_the_tone_in_their_own_channels() {
    let _turn = serial();
    let t0 = std::time::Instant::now();
    let fine = Setup::new();
    let coarse = Setup {
        channels: fine.channels / 4,
        ..fine.clone()
    };
    // Each output's setup, as the engine is told it: name, shape, and the gain that puts the
    // tone at LEVEL through its own weights.
    let outputs = [("coarse", &coarse), ("fine", &fine)];
    let specs: Vec<WidebandOutput> = outputs
        .iter()
        .map(|(name, s)| WidebandOutput {
            name,
            channels: s.channels,
            gain: LEVEL / s.tone_response(AMPLITUDE),
        })
        .collect();
    // A tone at the centre of a coarse channel is at the centre of a fine one, four times on.
    let k = coarse.channels / 4 + 3;
    let tone_hz = coarse.channel_hz(k);
    let mut sys = System::start_outputs(fine.clone(), &specs, 1e-6);
    let mut args = coarse.tone_args(&[k], AMPLITUDE);
    args.extend(["--noise".into(), "0.01".into()]);
    sys.start_dsim(&args);

    let receivers: Vec<_> = sys.outputs().collect();
    let mut captured = Vec::new();
    for ((name, s), rx) in outputs.iter().zip(&receivers) {
        rx.wait_count(4, Duration::from_secs(60));
        let from = rx.newest().unwrap() + s.heap_step();
        let heaps = rx.capture(from, 4, Duration::from_secs(60));
        // The channel the harness predicts for this output's channel count.
        let predicted = Band::Wideband.channel(tone_hz, s.rate, s.channels);
        assert_eq!(predicted.fract(), 0.0, "{name}: a tone at a channel centre");
        check_tone(name, s, &heaps, predicted as usize, LEVEL);
        check_heaps(name, s, &heaps);
        assert_eq!(rx.repeats(), 0, "{name}: a heap sent twice");
        captured.push(heaps);
    }
    assert_eq!(
        Band::Wideband.channel(tone_hz, fine.rate, fine.channels),
        4.0 * k as f64,
        "the fine output's channel is four coarse ones"
    );

    // What each receiver has got, then the engine's counters: those have sent at least as much.
    let received: Vec<u64> = receivers
        .iter()
        .map(|rx| rx.timestamps().len() as u64)
        .collect();
    let st = sys.engine_status();
    assert_eq!(
        st.outputs.keys().collect::<Vec<_>>(),
        ["coarse", "fine"],
        "the outputs, by name"
    );
    assert!(st.wideband().is_none(), "no output named wideband: {st:?}");
    let chunk = st.input.chunk_samples as u64;
    for ((((name, s), rx), heaps), received) in
        outputs.iter().zip(&receivers).zip(&captured).zip(received)
    {
        let o = output(&st, name);
        assert_eq!(o.channels, s.channels, "{name}");
        assert_eq!(o.spectra_per_heap, s.spectra_per_heap, "{name}");
        assert_eq!(o.destinations, [rx.addr.to_string()], "{name}");
        // The chunk is the largest output's frame, a whole number of every output's heaps.
        assert_eq!(
            o.heaps_per_frame as u64 * s.heap_step(),
            chunk,
            "{name}: {} heaps a frame of chunk {chunk}",
            o.heaps_per_frame
        );
        // Its own lag: the filter's history ((taps - 1) 2n) and the delay room, in spectra.
        let lag = o.lag_samples as u64;
        assert!(
            lag.is_multiple_of(s.step()) && lag >= (s.taps as u64 - 1) * s.step(),
            "{name}: lag {lag}"
        );
        // Its own counters: what this receiver got, in heaps of this output's size.
        let heap_bytes = (s.channels * s.spectra_per_heap * 2 * 2) as u64;
        assert!(
            o.heaps_sent >= received,
            "{name}: sent {} < received {received}",
            o.heaps_sent
        );
        assert_eq!(
            o.heaps_sent_per_substream.iter().sum::<u64>(),
            o.heaps_sent,
            "{name}"
        );
        // (Heaps are skipped only while the stream starts mid-frame.)
        assert_eq!(
            o.heaps_skipped_per_substream.iter().sum::<u64>(),
            o.heaps_skipped,
            "{name}"
        );
        // Bytes in this output's heap size (counted once a frame's heaps are out, heaps one by
        // one: a frame behind at most).
        let whole_frames = o.heaps_sent.saturating_sub(o.heaps_per_frame as u64);
        assert!(
            o.packets > 0 && o.bytes >= whole_frames * heap_bytes,
            "{name}: {o:?}"
        );
        assert_eq!(o.send_errors, 0, "{name}: {o:?}");
        // Spectrum m of the frame whose chunk starts at T (a multiple of the chunk) is at
        // T - lag + m 2n: with its own lag put back, each output's heaps start whole heaps into
        // the one input's frames.
        for h in heaps {
            assert_eq!(
                (h.timestamp + lag) % s.heap_step(),
                0,
                "{name}: heap at {} with lag {lag} is off its frames",
                h.timestamp
            );
        }
    }
    // Four coarse heaps for each fine one (sent or skipped), give or take a frame sent while
    // the status was read.
    let (c, f) = (output(&st, "coarse"), output(&st, "fine"));
    let (cn, fnn) = (
        c.heaps_sent + c.heaps_skipped,
        f.heaps_sent + f.heaps_skipped,
    );
    assert!(
        cn.abs_diff(4 * fnn) <= c.heaps_per_frame as u64,
        "coarse sent and skipped {cn}, fine {fnn}"
    );
    sys.assert_engine_healthy();
    eprintln!(
        "two_wideband_outputs_each_carry_the_tone_in_their_own_channels: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Each heap is n channels x S spectra x 2 polarisations of 8-bit complex values, and
/// consecutive heaps step by S 2n.
fn check_heaps(name: &str, s: &Setup, heaps: &[OutHeap]) {
    let bytes = s.channels * s.spectra_per_heap * 2 * 2;
    for h in heaps {
        assert_eq!(h.data.len(), bytes, "{name}: heap at {}", h.timestamp);
        assert!(
            h.timestamp.is_multiple_of(s.step()),
            "{name}: timestamp {} is not on the 2n grid",
            h.timestamp
        );
    }
    for w in heaps.windows(2) {
        assert_eq!(
            w[1].timestamp - w[0].timestamp,
            s.heap_step(),
            "{name}: heaps at {} and {}",
            w[0].timestamp,
            w[1].timestamp
        );
    }
}

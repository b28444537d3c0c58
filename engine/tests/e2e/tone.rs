//! A tone in channel k peaks in channel k of both polarisations at the amplitude the weights and
//! gain predict, with the rest of the band quiet.

use std::time::{Duration, Instant};

use crate::capture::check_tone;
use crate::client::wideband;
use crate::setup::{serial, Setup};
use crate::system::System;

#[test]
fn tone_lands_in_its_channel() {
    let _turn = serial();
    let t0 = Instant::now();
    let s = Setup::new();
    let k = s.channels / 4 + 3;
    let amplitude = 0.25;
    // Aim for a peak of 64 counts.
    let gain = 64.0 / s.tone_response(amplitude);
    let mut sys = System::start(s.clone(), gain, 1e-6);
    let mut args = s.tone_args(&[k], amplitude);
    args.extend(["--noise".into(), "0.01".into()]);
    sys.start_dsim(&args);
    sys.out.wait_count(4, Duration::from_secs(60));
    let from = sys.out.newest().unwrap() + s.heap_step();
    let heaps = sys.out.capture(from, 4, Duration::from_secs(60));
    check_tone("tone", &s, &heaps, k, 64.0);
    let st = sys.engine_status();
    assert_eq!(st.backend, s.backend);
    assert!(wideband(&st).heaps_sent >= 4);
    sys.assert_engine_healthy();
    eprintln!(
        "tone_lands_in_its_channel: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

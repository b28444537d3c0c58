//! A tone in channel k peaks in channel k of both polarisations at the amplitude the weights and
//! gain predict, with the rest of the band quiet.

use std::time::{Duration, Instant};

use crate::capture::value;
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
    for pol in 0..2 {
        let mut power = vec![0.0; s.channels];
        let mut amp = 0.0;
        let mut n = 0.0;
        for h in &heaps {
            for (ch, p) in power.iter_mut().enumerate() {
                for sp in 0..s.spectra_per_heap {
                    *p += value(&s, h, ch, sp, pol).norm_sqr();
                }
            }
            for sp in 0..s.spectra_per_heap {
                amp += value(&s, h, k, sp, pol).norm();
                n += 1.0;
            }
        }
        let peak = (0..s.channels)
            .max_by(|&a, &b| power[a].total_cmp(&power[b]))
            .unwrap();
        assert_eq!(peak, k, "pol {pol}: peak in channel {peak}, not {k}");
        let mean = amp / n;
        assert!(
            (mean - 64.0).abs() < 64.0 * 0.03,
            "pol {pol}: channel {k} amplitude {mean:.2}, predicted 64"
        );
        // Away from the tone (and its neighbours, which see its skirt) the band is quiet.
        let far = (0..s.channels)
            .filter(|c| c.abs_diff(k) > 2)
            .map(|c| power[c])
            .fold(0.0, f64::max);
        assert!(
            far < power[k] * 1e-3,
            "pol {pol}: leakage {far} vs {}",
            power[k]
        );
    }
    let st = sys.engine_status();
    assert_eq!(st.backend, s.backend);
    assert!(wideband(&st).heaps_sent >= 4);
    sys.assert_engine_healthy();
    eprintln!(
        "tone_lands_in_its_channel: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

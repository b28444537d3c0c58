//! PUT /signal bodies (the per-polarisation form or the common form) through dsim's parser and
//! rules, then the signal generator: no panic; a refusal is one sentence; what is accepted
//! passes the rules at the sample rate and generates heaps of samples without panicking.
//!
//! Input: one byte choosing the sample rate, the sample width and the signal in force, then the
//! body.
#![no_main]

use dsim::signal::Generator;
use dsim::spec::{parse_request, resolve, validate_pol, Signal};
use dsim::{Component, SignalSpec, Tone};
use libfuzzer_sys::fuzz_target;

/// Samples per heap and per repeating buffer of the generator (small: many runs a second).
const HEAP_SAMPLES: usize = 64;
const PERIOD: u64 = 4 * HEAP_SAMPLES as u64;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let rate = [1712e6, 1e6, 1.0, 1e12][(pick & 3) as usize];
    let bits = [10, 8, 4, 16][(pick >> 2 & 3) as usize];
    let common = match pick >> 4 & 3 {
        0 => SignalSpec::default(),
        1 => SignalSpec {
            tones: vec![Tone {
                frequency: rate / 4.0,
                amplitude: 0.5,
            }],
            noise: 0.0,
            dither: false,
            delays: [0.0, 3.25],
            seed: 7,
        },
        _ => SignalSpec {
            noise: 0.0,
            ..SignalSpec::default()
        },
    };
    let current = Signal::from_common(&common);
    let request = match parse_request(body) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.to_string().ends_with('.'), "{e:?}");
            return;
        }
    };
    let (signal, _) = match resolve(&request, &current, &common, rate) {
        Ok(s) => s,
        Err(e) => {
            assert!(e.0.ends_with('.'), "{e:?}");
            return;
        }
    };
    let mut out = [0i16; HEAP_SAMPLES];
    let (lo, hi) = spead::samples::range(bits);
    for pol in 0..2 {
        validate_pol(&signal.pols[pol], pol, rate).expect("an accepted signal passes the rules");
        let g = Generator::new(&signal, rate, pol, HEAP_SAMPLES, bits, PERIOD);
        let tones: usize = signal.pols[pol]
            .components
            .iter()
            .map(|c| match c {
                Component::Tone { .. } => 1,
                Component::Comb { count, .. } => *count,
                Component::Noise { .. } => 0,
            })
            .sum();
        let freqs = g.tone_frequencies(rate);
        assert_eq!(freqs.len(), tones);
        assert!(
            freqs
                .iter()
                .all(|f| (0.0..=rate / 2.0 * (1.0 + 1e-9)).contains(f)),
            "{freqs:?}"
        );
        for h in [0, 3, u64::MAX] {
            let saturated = g.heap(h, &mut out);
            assert!(saturated as usize <= HEAP_SAMPLES);
            assert!(out.iter().all(|s| (lo..=hi).contains(s)), "{out:?}");
        }
    }
});

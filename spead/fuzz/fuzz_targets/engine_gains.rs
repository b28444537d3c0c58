//! PUT /gains and PUT /outputs/{name}/gains bodies (a number, [re, im], or one [re, im] per
//! channel, per polarisation) through the engine's parser and checks: no panic; a refusal has a
//! message; what is accepted has one finite complex gain per channel for each polarisation given.
//!
//! Input: one byte choosing the output's channels, then the body.
#![no_main]

use fengine::control::parse_gain_request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let channels = [1, 2, 3, 4, 16, 1024, 32768, 65536][(pick & 7) as usize];
    match parse_gain_request(body, channels) {
        Ok(gains) => {
            assert!(gains.iter().any(Option::is_some), "accepted with no gains");
            for g in gains.iter().flatten() {
                assert_eq!(g.len(), channels);
                assert!(g.iter().all(|c| c.re.is_finite() && c.im.is_finite()));
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});

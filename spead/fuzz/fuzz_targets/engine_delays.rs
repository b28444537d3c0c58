//! PUT /delays bodies (JSON fields or katgpucbf's "delay,delay_rate:phase,phase_rate" text) through
//! the engine's parser and checks: no panic; a refusal has a message; what is accepted is finite,
//! within --max-delay, has a delay rate below 1, loads when asked, and evaluates from its load
//! time over the whole span of 48-bit ADC timestamps.
//!
//! Input: one byte choosing the engine's settings (--max-delay, sample rate, --sync-time, the
//! newest timestamp), then the body.
#![no_main]

use fengine::control::{parse_delay_request, DelayContext};
use fengine::signal::delay::DelayModel;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let ctx = DelayContext {
        max_delay: [1e-3, 0.0, 1.0, 1e-6][(pick & 3) as usize],
        fs: [1712e6, 1e6, 1.0, 4.4e9][(pick >> 2 & 3) as usize],
        sync_time: [None, Some(0.0), Some(1.7e9), Some(-1.0)][(pick >> 4 & 3) as usize],
        now: [0, 1 << 47, (1 << 48) - 1, u64::MAX][(pick >> 6) as usize],
    };
    let update = match parse_delay_request(body, &ctx) {
        Ok(u) => u,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!(
        update.models.iter().any(Option::is_some),
        "accepted with no model"
    );
    assert!(
        update.apply_from == update.load || (update.apply_from == 0 && update.load == ctx.now),
        "{update:?}"
    );
    assert!(update.load < 1 << 48, "a load time past the 48-bit timestamps: {update:?}");
    for d in update.models.iter().flatten() {
        for v in [d.delay, d.delay_rate, d.phase, d.phase_rate] {
            assert!(v.is_finite(), "{d:?}");
        }
        assert!(d.delay.abs() <= ctx.max_delay * (1.0 + 1e-12), "{d:?}");
        assert!(d.delay_rate.abs() < 1.0, "{d:?}");
        let model = DelayModel {
            load_time: update.load,
            delay: d.delay,
            delay_rate: d.delay_rate,
            phase: d.phase,
            phase_rate: d.phase_rate,
        };
        model.validate().expect("an accepted model is valid");
        // It applies from its load time on: it must evaluate there and over the whole span of
        // 48-bit ADC timestamps after it (else every frame it applies to would be flagged).
        for later in [0, 1 << 20, 1 << 40, 1 << 48] {
            let t = update.load as i128 + later;
            let at = model.at(t, ctx.fs).unwrap_or_else(|e| {
                panic!("an accepted model fails {later} samples after loading: {e}")
            });
            assert!(at.fine.abs() <= 0.5 && at.phase.is_finite(), "{at:?}");
        }
    }
});

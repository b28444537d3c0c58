//! PUT /faults bodies through dsim's parser, its rules and the compiled fault plan: no panic; a
//! refusal is one sentence; an accepted plan drops exactly the heaps listed or in range for drop
//! (and gives a dropped heap no other fault), holds back by the window asked, and makes the same
//! choices for the same seed.
//!
//! Input: one byte choosing the seed, then the body.
#![no_main]

use dsim::faults::{parse_request, FaultPlan, FaultRules, MAX_WINDOW};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let req = match parse_request(body) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.to_string().ends_with('.'), "{e:?}");
            return;
        }
    };
    if let Err(e) = req.validate() {
        assert!(e.0.ends_with('.'), "{e:?}");
        return;
    }
    for (pol, f) in [&req.pol0, &req.pol1].into_iter().enumerate() {
        let Some(f) = f else { continue };
        let plan = FaultPlan::new(f, seed as u64, pol);
        let again = FaultPlan::new(f, seed as u64, pol);
        // The heaps the request names, and their neighbours.
        let named = f
            .drop
            .iter()
            .chain(&f.duplicate)
            .chain(&f.corrupt)
            .chain(&f.truncate)
            .flat_map(|s| {
                s.heaps.iter().copied().chain(
                    s.ranges
                        .iter()
                        .flat_map(|r| [r[0], r[1].wrapping_sub(1), r[1]]),
                )
            });
        for k in named
            .flat_map(|k| [k.wrapping_sub(1), k, k.wrapping_add(1)])
            .chain(0..64)
        {
            let a = plan.action(k);
            assert_eq!(
                a,
                again.action(k),
                "heap {k}: the same seed chose differently"
            );
            if a.drop {
                assert!(
                    !a.duplicate && !a.corrupt && !a.truncate && a.delay == 0,
                    "heap {k}: {a:?}"
                );
            }
            assert!(a.delay <= MAX_WINDOW, "heap {k}: {a:?}");
            if let Some(d) = &f.drop {
                let listed =
                    d.heaps.contains(&k) || d.ranges.iter().any(|r| (r[0]..r[1]).contains(&k));
                if listed || d.probability >= 1.0 {
                    assert!(a.drop, "heap {k} is listed for drop: {a:?}");
                }
                if d.probability == 0.0 && !listed {
                    assert!(!a.drop, "heap {k} is not listed for drop: {a:?}");
                }
            }
            if let Some(r) = &f.reorder {
                if a.delay > 0 {
                    assert_eq!(a.delay, r.window, "heap {k}");
                }
            } else {
                assert_eq!(a.delay, 0, "heap {k}");
            }
        }
    }
});

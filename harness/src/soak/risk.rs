//! Loss events per hour: how often a soak lost anything, the figure a user provisions by ("at
//! 80% of the max rate, one loss event in so many hours"). A loss event is a sample interval in
//! which any loss counter moved, however much it moved: a burst that drops a thousand heaps
//! is one event, as it is one incident to whoever runs the system.

use std::collections::BTreeMap;

use crate::record::soak::{FractionRisk, SoakReport, SoakSample};

/// The expected count whose Poisson chance of giving no event is 5%: with no event in T hours,
/// the rate is below 3.0 / T per hour at 95% confidence (the "rule of three").
pub const NO_EVENT_BOUND_95: f64 = 2.995_732_273_553_991; // ln 20

/// Sample intervals (from the soak's start to the first sample, then between samples) in which
/// any loss counter rose.
pub fn loss_events(samples: &[SoakSample]) -> usize {
    loss_intervals(samples).into_iter().filter(|&l| l).count()
}

/// For each sample, whether any loss counter rose in the interval that ends at it. A counter
/// missing from a sample (not read that time) is compared at its next reading against its last
/// one, so its loss lands in that interval.
pub fn loss_intervals(samples: &[SoakSample]) -> Vec<bool> {
    // Counters count from the soak's start: every one starts at zero.
    let mut last: BTreeMap<&str, f64> = BTreeMap::new();
    samples
        .iter()
        .map(|s| {
            let mut moved = false;
            for (name, &v) in &s.losses {
                let before = last.entry(name.as_str()).or_insert(0.0);
                if v > *before {
                    moved = true;
                    *before = v;
                }
            }
            moved
        })
        .collect()
}

/// Loss events per hour over `soaked_s` seconds (None when nothing was soaked).
pub fn per_hour(events: usize, soaked_s: f64) -> Option<f64> {
    (soaked_s > 0.0).then(|| events as f64 * 3600.0 / soaked_s)
}

/// One fraction's figures from its soak's report.
pub fn of_report(fraction: f64, report: &SoakReport, out_dir: String) -> FractionRisk {
    let events = loss_events(&report.samples);
    let hours = report.soaked_s / 3600.0;
    FractionRisk {
        fraction,
        rate: report.rate,
        received_rate: report.received_rate,
        soaked_s: report.soaked_s,
        samples: report.samples.len(),
        loss_events: events,
        events_with_steal: super::host::over_soak(&report.samples).map(|h| h.with_loss_and_steal),
        events_per_hour: per_hour(events, report.soaked_s),
        upper_95_per_hour: (events == 0 && hours > 0.0).then(|| NO_EVENT_BOUND_95 / hours),
        pass: report.pass,
        out_dir,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake soak: one sample a minute, `losses[i]` the named counters at sample i.
    fn samples(losses: &[&[(&str, f64)]]) -> Vec<SoakSample> {
        losses
            .iter()
            .enumerate()
            .map(|(i, l)| SoakSample {
                elapsed_s: 60.0 * (i + 1) as f64,
                losses: l.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn an_event_is_an_interval_in_which_any_counter_moved() {
        let s = samples(&[
            &[("harness_gaps", 0.0), ("engine_missing_input", 0.0)],
            // Two counters in one interval: one event.
            &[("harness_gaps", 5.0), ("engine_missing_input", 12.0)],
            &[("harness_gaps", 5.0), ("engine_missing_input", 12.0)],
            // One heap: one event, as a thousand would be.
            &[("harness_gaps", 6.0), ("engine_missing_input", 12.0)],
            &[("harness_gaps", 6.0), ("engine_missing_input", 1012.0)],
        ]);
        assert_eq!(loss_events(&s), 3);
        // Five minutes: 3 events are 36 an hour.
        assert_eq!(per_hour(3, 300.0), Some(36.0));
        assert_eq!(per_hour(3, 0.0), None);
    }

    #[test]
    fn a_loss_before_the_first_sample_counts_and_unread_counters_are_carried() {
        let s = samples(&[
            &[("harness_gaps", 2.0)],
            // The engine's counter unread this time...
            &[("harness_gaps", 2.0)],
            // ...then read, having moved from zero: an event here.
            &[("harness_gaps", 2.0), ("engine_missing_input", 4.0)],
            &[("harness_gaps", 2.0)],
            &[("harness_gaps", 2.0), ("engine_missing_input", 4.0)],
        ]);
        assert_eq!(loss_events(&s), 2);
        assert_eq!(loss_events(&[]), 0);
    }

    #[test]
    fn a_clean_soak_gets_an_upper_bound() {
        let report = |samples: Vec<SoakSample>, soaked_s: f64| SoakReport {
            pass: true,
            reasons: vec![],
            rate: Some(8e8),
            rate_source: "test".into(),
            duration_s: soaked_s,
            soaked_s,
            warmup_s: 0.0,
            limits: crate::record::soak::SoakLimits {
                baseline_s: 0.0,
                rss_growth: 0.05,
                fd_slack: 8,
                thread_slack: 8,
                rate_tolerance: 0.02,
                interval_s: 60.0,
            },
            system: serde_json::Value::Null,
            received_rate: Some(8e8),
            processes: Default::default(),
            losses: Default::default(),
            samples,
            watch: None,
        };
        let rows: Vec<&[(&str, f64)]> = vec![&[("harness_gaps", 0.0)]; 120];
        let clean = samples(&rows);
        let r = of_report(0.8, &report(clean, 7200.0), "fraction-0.8".into());
        assert_eq!((r.loss_events, r.events_per_hour), (0, Some(0.0)));
        // No event in 2 h: below 1.5 an hour at 95%.
        assert!((r.upper_95_per_hour.unwrap() - 1.497866).abs() < 1e-5);
        let lossy = samples(&[&[("harness_gaps", 0.0)], &[("harness_gaps", 1.0)]]);
        let r = of_report(1.0, &report(lossy, 1800.0), "fraction-1".into());
        assert_eq!(
            (r.loss_events, r.events_per_hour, r.upper_95_per_hour),
            (1, Some(2.0), None)
        );
    }
}

//! The soak's verdict from its samples, and nothing else (pure, so that every rule is tested on
//! made-up series): any loss counter above zero, resident memory grown past the limit over its
//! baseline, descriptors or threads past their slack, a process restarted, a sample that could
//! not be read whole, a hole in the record, a received rate off the requested one, or a run
//! too short to judge.

use std::collections::BTreeMap;

use crate::record::soak::{ProcessSummary, SoakLimits, SoakSample, SoakVerdict};

/// A start time that moved by more than this (s) is another process.
const RESTART_SLACK_S: f64 = 1.0;

/// "45 s" below two minutes, else "12.5 min".
pub fn when(t: f64) -> String {
    if t < 120.0 {
        format!("{t:.0} s")
    } else {
        format!("{:.1} min", t / 60.0)
    }
}

/// MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// A count as a whole number where it is one.
fn count(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Judges the samples against `limits`. `planned_s` is the soak's length as asked for;
/// `rate` the requested and the mean received rate, when known.
pub fn judge(
    samples: &[SoakSample],
    limits: &SoakLimits,
    planned_s: f64,
    rate: (Option<f64>, Option<f64>),
) -> SoakVerdict {
    let mut reasons = Vec::new();
    let Some(last) = samples.last() else {
        return SoakVerdict {
            pass: false,
            reasons: vec!["no sample was taken: the soak never began".into()],
            ..Default::default()
        };
    };
    if last.elapsed_s + 1.0 < planned_s {
        reasons.push(format!(
            "the soak stopped after {} of the {} asked for",
            when(last.elapsed_s),
            when(planned_s)
        ));
    }
    reasons.extend(holes(samples, limits.interval_s));
    reasons.extend(unreadable(samples));
    let losses = losses(samples, &mut reasons);
    let names: Vec<String> = {
        let mut n: Vec<String> = samples
            .iter()
            .flat_map(|s| s.processes.keys().cloned())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    let mut processes = BTreeMap::new();
    if !samples.iter().any(|s| s.elapsed_s >= limits.baseline_s) {
        reasons.push(format!(
            "the soak ended before the memory baseline at {}: too short to judge growth",
            when(limits.baseline_s)
        ));
    }
    for name in names {
        processes.insert(name.clone(), process(&name, samples, limits, &mut reasons));
    }
    let (requested, received) = rate;
    if let (Some(want), Some(got)) = (requested, received) {
        if want > 0.0 && ((got - want) / want).abs() > limits.rate_tolerance {
            reasons.push(format!(
                "received {:.4} Gsample/s on average, not the {:.4} asked for (tolerance {}%)",
                got / 1e9,
                want / 1e9,
                limits.rate_tolerance * 100.0
            ));
        }
    }
    SoakVerdict {
        pass: reasons.is_empty(),
        reasons,
        processes,
        losses,
        received_rate: received,
    }
}

/// Two samples further apart than one and a half intervals (and a second): at least one
/// sample is missing, and the record has a hole.
fn holes(samples: &[SoakSample], interval_s: f64) -> Vec<String> {
    samples
        .windows(2)
        .filter(|w| w[1].elapsed_s - w[0].elapsed_s > 1.5 * interval_s + 1.0)
        .map(|w| {
            format!(
                "no sample between {} and {} (one is due every {})",
                when(w[0].elapsed_s),
                when(w[1].elapsed_s),
                when(interval_s)
            )
        })
        .collect()
}

/// Samples at which something could not be read: what is not seen must not pass.
fn unreadable(samples: &[SoakSample]) -> Option<String> {
    let bad: Vec<&SoakSample> = samples.iter().filter(|s| !s.errors.is_empty()).collect();
    let first = bad.first()?;
    Some(format!(
        "{} of {} samples could not be read whole (first at {}: {})",
        bad.len(),
        samples.len(),
        when(first.elapsed_s),
        first.errors.join("; ")
    ))
}

/// Each loss counter's largest value; a reason for each above zero, with when it first moved.
fn losses(samples: &[SoakSample], reasons: &mut Vec<String>) -> BTreeMap<String, f64> {
    let mut most: BTreeMap<String, f64> = BTreeMap::new();
    let mut first: BTreeMap<String, f64> = BTreeMap::new();
    for s in samples {
        for (k, &v) in &s.losses {
            let m = most.entry(k.clone()).or_insert(v);
            *m = m.max(v);
            if v > 0.0 {
                first.entry(k.clone()).or_insert(s.elapsed_s);
            }
        }
    }
    for (k, at) in &first {
        reasons.push(format!(
            "{k}: {} (first seen at {})",
            count(most[k]),
            when(*at)
        ));
    }
    most
}

/// One process's summary, adding its reasons.
fn process(
    name: &str,
    samples: &[SoakSample],
    limits: &SoakLimits,
    reasons: &mut Vec<String>,
) -> ProcessSummary {
    let mut sum = ProcessSummary::default();
    let readings: Vec<(f64, &crate::record::soak::ProcessSample)> = samples
        .iter()
        .filter_map(|s| Some((s.elapsed_s, s.processes.get(name)?)))
        .collect();
    sum.unreadable = samples.len()
        - readings
            .iter()
            .filter(|(_, p)| p.resident_bytes.is_some())
            .count();
    // Restarts: the start time moved between two readings.
    let starts: Vec<(f64, f64)> = readings
        .iter()
        .filter_map(|(t, p)| Some((*t, p.start_time_seconds?)))
        .collect();
    for w in starts.windows(2) {
        if (w[1].1 - w[0].1).abs() > RESTART_SLACK_S {
            sum.restarts += 1;
            reasons.push(format!(
                "{name} restarted between {} and {} (its start time changed)",
                when(w[0].0),
                when(w[1].0)
            ));
        }
    }
    for &(t, p) in &readings {
        if let Some(r) = p.resident_bytes {
            if sum.peak_rss_bytes.is_none_or(|m| r > m) {
                sum.peak_rss_bytes = Some(r);
                sum.peak_rss_s = Some(t);
            }
            sum.last_rss_bytes = Some(r);
        }
    }
    // The baseline: the first whole reading at or after the baseline time.
    let Some(at) = readings
        .iter()
        .position(|(t, p)| *t >= limits.baseline_s && p.resident_bytes.is_some())
    else {
        return sum;
    };
    let (t0, base) = readings[at];
    let base_rss = base.resident_bytes.unwrap_or(0);
    sum.baseline_s = Some(t0);
    sum.baseline_rss_bytes = Some(base_rss);
    sum.baseline_fds = base.open_fds;
    sum.baseline_threads = base.threads;
    let after = &readings[at + 1..];
    if after.is_empty() && samples.iter().any(|s| s.elapsed_s >= limits.baseline_s) {
        reasons.push(format!(
            "{name}: no reading after its baseline at {}: too short to judge growth",
            when(t0)
        ));
        return sum;
    }
    // Largest growth, and the first reading past the limit.
    let mut over: Option<(f64, u64)> = None;
    for &(t, p) in after {
        let Some(r) = p.resident_bytes else { continue };
        let g = r as f64 / base_rss.max(1) as f64 - 1.0;
        sum.max_growth = Some(sum.max_growth.map_or(g, |m: f64| m.max(g)));
        // (Exactly at the limit passes, whatever the rounding of the division.)
        if g > limits.rss_growth + 1e-9 && over.is_none() {
            over = Some((t, r));
        }
    }
    if let (Some((t, r)), Some(g)) = (over, sum.max_growth) {
        reasons.push(format!(
            "{name}: resident memory grew {:.1}% over its baseline ({} at {}); past the limit of {:.1}% first at {} ({}); peak {}",
            g * 100.0,
            mib(base_rss),
            when(t0),
            limits.rss_growth * 100.0,
            when(t),
            mib(r),
            mib(sum.peak_rss_bytes.unwrap_or(r)),
        ));
    }
    let mut rise = |what: &str,
                    base: Option<u64>,
                    slack: u64,
                    get: fn(&crate::record::soak::ProcessSample) -> Option<u64>|
     -> Option<u64> {
        let base = base?;
        let (t, most) = after
            .iter()
            .filter_map(|(t, p)| Some((*t, get(p)?)))
            .fold((t0, base), |a, b| if b.1 > a.1 { b } else { a });
        if most > base + slack {
            reasons.push(format!(
                "{name}: {what} rose from {base} at {} to {most} at {} (slack {slack})",
                when(t0),
                when(t)
            ));
        }
        Some(most)
    };
    sum.max_fds_seen = rise("open descriptors", sum.baseline_fds, limits.fd_slack, |p| {
        p.open_fds
    });
    sum.max_threads_seen = rise("threads", sum.baseline_threads, limits.thread_slack, |p| {
        p.threads
    });
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::soak::ProcessSample;

    const MIB: u64 = 1 << 20;

    fn limits() -> SoakLimits {
        SoakLimits {
            baseline_s: 60.0,
            rss_growth: 0.05,
            fd_slack: 4,
            thread_slack: 4,
            rate_tolerance: 0.02,
            interval_s: 60.0,
        }
    }

    fn proc(rss_mib: u64, fds: u64, threads: u64, start: f64) -> ProcessSample {
        ProcessSample {
            resident_bytes: Some(rss_mib * MIB),
            open_fds: Some(fds),
            threads: Some(threads),
            start_time_seconds: Some(start),
            ..Default::default()
        }
    }

    /// A clean soak of `n` samples a minute apart: every loss counter at zero, the engine's
    /// memory as `rss(i)` MiB, dsim flat at 50 MiB.
    fn soak(n: usize, rss: impl Fn(usize) -> u64) -> Vec<SoakSample> {
        (0..n)
            .map(|i| SoakSample {
                elapsed_s: 60.0 * i as f64,
                received_rate: 16e6,
                losses: [("harness_gaps", 0.0), ("engine_missing_input", 0.0)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                processes: [
                    ("fengine".to_string(), proc(rss(i), 30, 12, 1000.0)),
                    ("dsim".to_string(), proc(50, 10, 6, 1001.0)),
                ]
                .into_iter()
                .collect(),
                errors: vec![],
                host: None,
            })
            .collect()
    }

    fn judge31(samples: &[SoakSample]) -> SoakVerdict {
        judge(samples, &limits(), 1800.0, (Some(16e6), Some(16e6)))
    }

    #[test]
    fn a_clean_soak_passes_and_is_summarised() {
        // Memory rises in the first minute (buffers filling), then stays within 5%.
        let s = soak(31, |i| if i == 0 { 100 } else { 200 + (i as u64 % 3) });
        let v = judge31(&s);
        assert!(v.pass, "{:?}", v.reasons);
        let e = &v.processes["fengine"];
        assert_eq!(e.baseline_s, Some(60.0));
        assert_eq!(e.baseline_rss_bytes, Some(201 * MIB));
        assert_eq!(e.peak_rss_bytes, Some(202 * MIB));
        assert_eq!(e.peak_rss_s, Some(120.0));
        assert!((e.max_growth.unwrap() - (202.0 / 201.0 - 1.0)).abs() < 1e-12);
        assert_eq!((e.max_fds_seen, e.max_threads_seen), (Some(30), Some(12)));
        assert_eq!((e.unreadable, e.restarts), (0, 0));
        assert_eq!(v.losses["harness_gaps"], 0.0);
    }

    #[test]
    fn memory_growth_past_the_limit_fails_and_says_when() {
        // 200 MiB at the baseline, +1 MiB a minute: past 5% (210 MiB) at minute 12.
        let s = soak(31, |i| 199 + i as u64);
        let v = judge31(&s);
        assert!(!v.pass);
        assert_eq!(v.reasons.len(), 1, "{:?}", v.reasons);
        let r = &v.reasons[0];
        assert!(r.starts_with("fengine: resident memory grew 14.5%"), "{r}");
        assert!(r.contains("first at 12.0 min (211.0 MiB)"), "{r}");
        assert!(r.contains("peak 229.0 MiB"), "{r}");
        // Exactly at the limit passes; growth before the baseline does not count.
        let s = soak(31, |i| if i <= 1 { 100 + 100 * i as u64 } else { 210 });
        assert!(judge31(&s).pass, "{:?}", judge31(&s).reasons);
        let mut l = limits();
        l.rss_growth = 0.2;
        let s = soak(31, |i| 199 + i as u64);
        assert!(judge(&s, &l, 1800.0, (None, None)).pass);
    }

    #[test]
    fn any_loss_fails_with_its_count_and_first_time() {
        let mut s = soak(31, |_| 200);
        for x in &mut s[20..] {
            x.losses.insert("engine_missing_input".into(), 4.0);
        }
        s[25].losses.insert("harness_gaps".into(), 2.0);
        // A counter read back lower later still failed at its peak.
        s[26].losses.insert("harness_gaps".into(), 0.0);
        let v = judge31(&s);
        assert!(!v.pass);
        assert_eq!(
            v.reasons,
            vec![
                "engine_missing_input: 4 (first seen at 20.0 min)".to_string(),
                "harness_gaps: 2 (first seen at 25.0 min)".to_string()
            ]
        );
        assert_eq!(v.losses["harness_gaps"], 2.0);
    }

    #[test]
    fn descriptors_and_threads_past_their_slack_fail() {
        let mut s = soak(31, |_| 200);
        for (i, x) in s.iter_mut().enumerate() {
            let p = x.processes.get_mut("dsim").unwrap();
            p.open_fds = Some(10 + i as u64 / 5); // +6 by the end
            p.threads = Some(6 + u64::from(i == 30) * 4); // +4: within the slack
        }
        let v = judge31(&s);
        assert_eq!(
            v.reasons,
            vec!["dsim: open descriptors rose from 10 at 60 s to 16 at 30.0 min (slack 4)"]
        );
        assert_eq!(v.processes["dsim"].max_threads_seen, Some(10));
    }

    #[test]
    fn a_restart_an_unreadable_sample_and_a_hole_fail() {
        let mut s = soak(31, |_| 200);
        for x in &mut s[10..] {
            x.processes.get_mut("fengine").unwrap().start_time_seconds = Some(1600.0);
        }
        s[5].processes.insert(
            "fengine".into(),
            ProcessSample {
                error: Some("GET /metrics: connection refused".into()),
                ..Default::default()
            },
        );
        s[5].errors
            .push("fengine: GET /metrics: connection refused".into());
        s.remove(15);
        let v = judge31(&s);
        assert!(!v.pass);
        let all = v.reasons.join("\n");
        assert!(
            all.contains("no sample between 14.0 min and 16.0 min"),
            "{all}"
        );
        assert!(
            all.contains("1 of 30 samples could not be read whole (first at 5.0 min: fengine: GET /metrics: connection refused)"),
            "{all}"
        );
        assert!(
            all.contains("fengine restarted between 9.0 min and 10.0 min"),
            "{all}"
        );
        assert_eq!(v.processes["fengine"].unreadable, 1);
        assert_eq!(v.processes["fengine"].restarts, 1);
    }

    #[test]
    fn too_short_stopped_early_or_off_rate_fails() {
        // Ended before the baseline.
        let s = soak(1, |_| 200);
        let v = judge(&s, &limits(), 30.0, (None, None));
        assert!(!v.pass);
        assert!(
            v.reasons
                .iter()
                .any(|r| r.contains("before the memory baseline at 60 s")),
            "{:?}",
            v.reasons
        );
        // The baseline is the last sample: nothing after it to judge.
        let s = soak(2, |_| 200);
        let v = judge(&s, &limits(), 60.0, (None, None));
        assert!(
            v.reasons
                .iter()
                .any(|r| r.contains("no reading after its baseline")),
            "{:?}",
            v.reasons
        );
        // Interrupted at 20 of 30 minutes.
        let s = soak(21, |_| 200);
        let v = judge31(&s);
        assert_eq!(
            v.reasons,
            vec!["the soak stopped after 20.0 min of the 30.0 min asked for"]
        );
        // Received 3% short.
        let s = soak(31, |_| 200);
        let v = judge(&s, &limits(), 1800.0, (Some(16e6), Some(15.5e6)));
        assert_eq!(v.reasons.len(), 1, "{:?}", v.reasons);
        assert!(
            v.reasons[0].starts_with("received 0.0155 Gsample/s"),
            "{:?}",
            v.reasons
        );
        assert!(judge(&[], &limits(), 10.0, (None, None)).reasons[0].contains("no sample"));
    }
}

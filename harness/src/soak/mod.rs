//! The soak: the system runs at one rate for a long time while `watch` checks every heap, and a
//! sampler, another reader of watch's interval feed, reads every process's resources and every
//! loss counter once an interval ([`sample`]). At the end the samples are judged ([`verdict`]).
//! Nothing here prints: the caller gets each sample as it is taken.

pub mod host;
pub mod risk;
pub mod sample;
pub mod verdict;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::content::Verdict;
use crate::control::{Dsim, Engine};
use crate::cpu::CpuTimes;
use crate::feed::{Next, Reader};
use crate::record::soak::SoakSample;
use crate::record::WatchInterval;
use sample::{ContentMisses, Reading};

/// When samples are taken.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Seconds of watch's run before the soak begins: what happens in them is not judged (the
    /// engine counts the first chunks' missing input as the stream starts).
    pub warmup_s: f64,
    /// Seconds between samples.
    pub interval_s: f64,
}

/// What the sampler saw.
#[derive(Clone, Debug, Default)]
pub struct Followed {
    pub samples: Vec<SoakSample>,
    /// Mean received rate over the soak (sample/s per polarisation), once it began.
    pub received_rate: Option<f64>,
}

/// A record within this much (s) of a sample's due time takes it: records come once a second,
/// not on the dot.
const DUE_SLACK_S: f64 = 0.5;

/// Follows watch's feed until it closes: skips the warm-up, then takes a sample at the soak's
/// start, every interval, and at the end, calling `on_sample` with each.
pub fn follow(
    mut reader: Reader<WatchInterval>,
    engine: Option<Engine>,
    dsim: Option<Dsim>,
    schedule: Schedule,
    mut on_sample: impl FnMut(&SoakSample),
) -> Followed {
    let mut out = Followed::default();
    let mut content = ContentMisses::default();
    // The time and counters of the soak's start.
    let mut zero: Option<(f64, BTreeMap<String, f64>)> = None;
    let mut next_due = 0.0;
    let mut last: Option<Arc<WatchInterval>> = None;
    let mut prev_elapsed: Option<f64> = None;
    // Received samples, and the seconds they span, since the soak began and since the last
    // sample.
    let mut total = (0.0, 0.0);
    let mut since_sample = (0.0, 0.0);
    let mut missed: u64 = 0;
    // The host's CPU times at the previous sample, and when they were read.
    let mut host_before: Option<(std::time::Instant, CpuTimes)> = None;
    let mut take = |r: &WatchInterval,
                    zero: &mut Option<(f64, BTreeMap<String, f64>)>,
                    content: ContentMisses,
                    since_sample: &mut (f64, f64),
                    missed: &mut u64| {
        let Reading {
            counters,
            processes,
            mut errors,
        } = sample::read(engine.as_ref(), dsim.as_ref(), r, content);
        let (t0, zero_counters) = zero.get_or_insert_with(|| (r.elapsed_s, counters.clone()));
        if *missed > 0 {
            errors.push(format!(
                "the sampler fell behind watch and missed {missed} of its interval records"
            ));
        }
        let now = (std::time::Instant::now(), CpuTimes::read(&[]));
        let host = host_before.as_ref().and_then(|(at, before)| {
            now.1
                .cores_since(before, now.0.duration_since(*at).as_secs_f64())
                .host()
        });
        host_before = Some(now);
        let s = SoakSample {
            elapsed_s: r.elapsed_s - *t0,
            received_rate: if since_sample.1 > 0.0 {
                since_sample.0 / since_sample.1
            } else {
                r.sample_rate
            },
            losses: sample::since(&counters, zero_counters),
            processes,
            errors,
            host,
        };
        *since_sample = (0.0, 0.0);
        *missed = 0;
        on_sample(&s);
        s
    };
    loop {
        let r = match reader.next(Duration::from_secs(3600)) {
            Next::Record(_, r) => r,
            Next::Missed(n) => {
                missed += n;
                continue;
            }
            Next::TimedOut => continue,
            Next::Closed => break,
        };
        let dt = prev_elapsed.map_or(0.0, |p| r.elapsed_s - p);
        prev_elapsed = Some(r.elapsed_s);
        if r.elapsed_s + DUE_SLACK_S < schedule.warmup_s {
            continue;
        }
        content.checked |= r.expected_channel.is_some();
        if zero.is_some() {
            let received = r.sample_rate * dt;
            total = (total.0 + received, total.1 + dt);
            since_sample = (since_sample.0 + received, since_sample.1 + dt);
            match r.verdict {
                Some(Verdict::WrongChannel) => content.wrong_channel += 1,
                Some(Verdict::NoTone) => content.no_tone += 1,
                _ => {}
            }
        }
        let soaked = zero.as_ref().map_or(0.0, |(t0, _)| r.elapsed_s - t0);
        if zero.is_none() || soaked + DUE_SLACK_S >= next_due {
            let s = take(&r, &mut zero, content, &mut since_sample, &mut missed);
            while next_due <= s.elapsed_s + DUE_SLACK_S {
                next_due += schedule.interval_s;
            }
            out.samples.push(s);
        }
        last = Some(r);
    }
    // The run's end, if the last record came after the last sample.
    let end = last
        .as_ref()
        .zip(zero.as_ref())
        .map(|(r, (t0, _))| r.elapsed_s - t0);
    if let (Some(r), Some(soaked)) = (last.as_ref(), end) {
        if out
            .samples
            .last()
            .is_some_and(|p| soaked > p.elapsed_s + DUE_SLACK_S)
        {
            let s = take(r, &mut zero, content, &mut since_sample, &mut missed);
            out.samples.push(s);
        }
    }
    if total.1 > 0.0 {
        out.received_rate = Some(total.0 / total.1);
    }
    out
}

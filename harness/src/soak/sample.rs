//! Reading one sample: every process's resources and every loss counter, as they stand now.
//!
//! dsim's and the engine's resources come from the standard `process_*` series of their
//! `GET /metrics` (`fgpu_serve::process`), the same way whether they run here (`--local`) or
//! in other containers, whose `/proc` the harness cannot see; the harness reads its own from
//! `/proc/self`. The counters come from the engine's `/metrics`, dsim's `/status` and the
//! harness's own watch record.

use std::collections::BTreeMap;

use fgpu_serve::process::{names, ProcessStats};

use crate::control::{parse_prometheus, sum_matching, Dsim, Engine, Sample};
use crate::record::soak::ProcessSample;
use crate::record::WatchInterval;

/// The engine's series whose growth is a loss or an event a clean run never has, beyond the
/// missing-input and skipped-output counters named on the command line (`--missing-metric`,
/// `--skipped-metric`). Each is judged where the engine has it, and left out where it does not
/// (another engine's names).
pub const ENGINE_EXTRA: [(&str, &str); 5] = [
    ("engine_input_socket_drops", "input socket drops"),
    ("engine_rejected_packets", "input rejected packets"),
    ("engine_unpaired_chunks", "unpaired chunks"),
    ("engine_late_chunks", "late chunks"),
    ("engine_input_resyncs", "input resyncs"),
];

/// The content check's misses since the soak began.
#[derive(Clone, Copy, Debug, Default)]
pub struct ContentMisses {
    pub wrong_channel: u64,
    pub no_tone: u64,
    /// Whether the content is checked at all (else these are not reported).
    pub checked: bool,
}

/// What one reading gave: raw counters (not yet relative to the soak's start), resources,
/// and what could not be read.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    pub counters: BTreeMap<String, f64>,
    pub processes: BTreeMap<String, ProcessSample>,
    pub errors: Vec<String>,
}

/// Reads everything now. `record` is the latest watch interval (the harness's own counts).
pub fn read(
    engine: Option<&Engine>,
    dsim: Option<&Dsim>,
    record: &WatchInterval,
    content: ContentMisses,
) -> Reading {
    let mut r = Reading::default();
    harness_counters(record, content, &mut r.counters);
    r.processes.insert(
        "harness".into(),
        match ProcessStats::myself() {
            Ok(s) => from_stats(&s),
            Err(e) => unreadable(&mut r.errors, "harness", format!("/proc/self: {e}")),
        },
    );
    if let Some(engine) = engine {
        read_engine(engine, &mut r);
    }
    if let Some(dsim) = dsim {
        read_dsim(dsim, &mut r);
    }
    r
}

fn harness_counters(
    record: &WatchInterval,
    content: ContentMisses,
    out: &mut BTreeMap<String, f64>,
) {
    let seq = &record.sequence;
    for (k, v) in [
        ("harness_gaps", seq.gaps),
        ("harness_late", seq.late),
        ("harness_resyncs", seq.resyncs),
        ("harness_malformed", record.malformed),
        ("harness_socket_drops", record.socket_drops),
    ] {
        out.insert(k.into(), v as f64);
    }
    if content.checked {
        out.insert("content_wrong_channel".into(), content.wrong_channel as f64);
        out.insert("content_no_tone".into(), content.no_tone as f64);
    }
}

fn read_engine(engine: &Engine, r: &mut Reading) {
    let text = match engine.metrics() {
        Ok(t) => t,
        Err(e) => {
            let p = unreadable(&mut r.errors, "fengine", format!("{e:#}"));
            r.processes.insert("fengine".into(), p);
            return;
        }
    };
    let samples = parse_prometheus(&text);
    let names = engine.counter_names();
    for (key, pattern) in [
        ("engine_missing_input", &names.missing_input),
        ("engine_skipped_output", &names.skipped_output),
    ] {
        match sum_matching(&samples, pattern) {
            Some(v) => {
                r.counters.insert(key.into(), v);
            }
            None => r.errors.push(format!(
                "the engine's /metrics has no series matching '{pattern}'"
            )),
        }
    }
    for (key, pattern) in ENGINE_EXTRA {
        if let Some(v) = sum_matching(&samples, pattern) {
            r.counters.insert(key.into(), v);
        }
    }
    let p = from_metrics(&samples, &mut r.errors, "fengine");
    r.processes.insert("fengine".into(), p);
}

fn read_dsim(dsim: &Dsim, r: &mut Reading) {
    match dsim.status() {
        Ok(s) => {
            r.counters
                .insert("dsim_heaps_skipped".into(), s.heaps_skipped as f64);
            r.counters.insert(
                "dsim_send_errors".into(),
                s.pols.iter().map(|p| p.send_errors).sum::<u64>() as f64,
            );
        }
        Err(e) => r.errors.push(format!("dsim /status: {e:#}")),
    }
    let p = match dsim.metrics() {
        Ok(text) => from_metrics(&parse_prometheus(&text), &mut r.errors, "dsim"),
        Err(e) => unreadable(&mut r.errors, "dsim", format!("{e:#}")),
    };
    r.processes.insert("dsim".into(), p);
}

/// A process sample of what could not be read, the reason also among the reading's errors.
fn unreadable(errors: &mut Vec<String>, who: &str, why: String) -> ProcessSample {
    errors.push(format!("{who}: {why}"));
    ProcessSample {
        error: Some(why),
        ..Default::default()
    }
}

pub fn from_stats(s: &ProcessStats) -> ProcessSample {
    ProcessSample {
        resident_bytes: Some(s.resident_bytes),
        virtual_bytes: Some(s.virtual_bytes),
        open_fds: Some(s.open_fds),
        max_fds: s.max_fds,
        threads: Some(s.threads),
        cpu_seconds: Some(s.cpu_seconds),
        start_time_seconds: Some(s.start_time_seconds),
        error: None,
    }
}

/// A process's resources from its `process_*` series. Resident memory is required (it is what
/// a soak is about); the rest are taken where present (Python's client, say, has no
/// `process_threads`).
pub fn from_metrics(samples: &[Sample], errors: &mut Vec<String>, who: &str) -> ProcessSample {
    let get = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name && s.value.is_finite())
            .map(|s| s.value)
    };
    let whole = |name: &str| get(name).filter(|v| *v >= 0.0).map(|v| v as u64);
    let Some(resident) = whole(names::RESIDENT_MEMORY) else {
        return unreadable(
            errors,
            who,
            format!(
                "its /metrics has no {} (a build without the process series?)",
                names::RESIDENT_MEMORY
            ),
        );
    };
    ProcessSample {
        resident_bytes: Some(resident),
        virtual_bytes: whole(names::VIRTUAL_MEMORY),
        open_fds: whole(names::OPEN_FDS),
        max_fds: whole(names::MAX_FDS),
        threads: whole(names::THREADS),
        cpu_seconds: get(names::CPU_SECONDS),
        start_time_seconds: get(names::START_TIME),
        error: None,
    }
}

/// The counters of `now` as grown since `zero`. A service counter that went down was reset by a
/// restart: all of its count is new. The harness's own gaps may go down (a hole filled late,
/// which `harness_late` counts), so its counters are plain differences. A counter with no zero
/// (unreadable at the start) counts from zero.
pub fn since(now: &BTreeMap<String, f64>, zero: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    now.iter()
        .map(|(k, &v)| {
            let d = match zero.get(k) {
                None => v,
                Some(&z) if k.starts_with("harness_") || k.starts_with("content_") => v - z,
                Some(&z) if v < z => v,
                Some(&z) => v - z,
            };
            (k.clone(), d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_series_are_read_by_their_standard_names() {
        let mut text = String::from("fengine_frames_total{backend=\"cpu\"} 5\n");
        fgpu_serve::process::encode_into(&mut text);
        let mut errors = vec![];
        let p = from_metrics(&parse_prometheus(&text), &mut errors, "fengine");
        assert!(errors.is_empty(), "{errors:?}");
        let me = ProcessStats::myself().unwrap();
        assert!(p.resident_bytes.unwrap() > 0);
        assert!(p.open_fds.unwrap() >= 3);
        assert!(p.threads.unwrap() >= 1);
        assert_eq!(p.start_time_seconds, Some(me.start_time_seconds));
        // A Python client's series: no threads, values as floats.
        let text = "process_resident_memory_bytes 1.2e8\nprocess_open_fds 17.0\n";
        let p = from_metrics(&parse_prometheus(text), &mut errors, "engine");
        assert_eq!(p.resident_bytes, Some(120_000_000));
        assert_eq!((p.open_fds, p.threads), (Some(17), None));
        // No resident memory: unreadable, and said why.
        let p = from_metrics(&parse_prometheus("up 1\n"), &mut errors, "dsim");
        assert_eq!(p.resident_bytes, None);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("dsim: its /metrics has no process_resident_memory_bytes"));
    }

    #[test]
    fn counters_since_the_start() {
        let m = |v: &[(&str, f64)]| -> BTreeMap<String, f64> {
            v.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let zero = m(&[
            ("engine_missing_input", 392.0),
            ("harness_gaps", 1.0),
            ("dsim_heaps_skipped", 0.0),
        ]);
        let now = m(&[
            ("engine_missing_input", 392.0),
            ("harness_gaps", 0.0),
            ("dsim_heaps_skipped", 3.0),
            ("engine_input_resyncs", 1.0),
        ]);
        assert_eq!(
            since(&now, &zero),
            m(&[
                ("engine_missing_input", 0.0),
                ("harness_gaps", -1.0),
                ("dsim_heaps_skipped", 3.0),
                ("engine_input_resyncs", 1.0),
            ])
        );
        // The engine restarted: its counters began again, and all of the new count is loss.
        let restarted = m(&[("engine_missing_input", 10.0)]);
        assert_eq!(since(&restarted, &zero)["engine_missing_input"], 10.0);
    }
}

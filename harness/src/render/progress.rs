//! Progress lines for stderr: one per watch interval, per finished trial and per response step,
//! and the bar a running trial redraws in place on a terminal.

use std::io::{IsTerminal, Write};

use crate::content::Peak;
use crate::gsps;
use crate::record::{PolSensors, ResponseStep, TrialProgress, TrialRecord, WatchInterval};
use crate::trial::STILL;

fn peak_text(p: &Option<Peak>) -> String {
    match p {
        Some(p) => format!("ch {} {:.1} dB", p.channel, p.power_db()),
        None => "-".into(),
    }
}

/// Per polarisation, `/`-separated.
fn per_pol(s: &[PolSensors], f: impl Fn(&PolSensors) -> String) -> String {
    s.iter().map(f).collect::<Vec<_>>().join("/")
}

/// The engine's input sensors for a progress line: `  in -21.3/-21.4 dBFS` (the latest level
/// per polarisation, `-` where it is not measured), then the samples at full scale and the
/// digitiser's clipped samples over the interval, each only when one is not zero. Empty when the
/// engine was not read, or measures nothing and counted nothing (the null backend, an older
/// engine).
pub fn input_text(input: &Option<Vec<PolSensors>>) -> String {
    let Some(s) = input.as_deref().filter(|s| !s.is_empty()) else {
        return String::new();
    };
    let mut out = String::new();
    if s.iter().any(|p| p.rms_dbfs.is_some()) {
        let level = per_pol(s, |p| p.rms_dbfs.map_or("-".into(), |d| format!("{d:.1}")));
        out.push_str(&format!("  in {level} dBFS"));
    }
    if s.iter().any(|p| p.full_scale_samples > 0) {
        let full = per_pol(s, |p| p.full_scale_samples.to_string());
        out.push_str(&format!("  full-scale {full}"));
    }
    if s.iter().any(|p| p.digitiser_clip_samples > 0) {
        let clip = per_pol(s, |p| p.digitiser_clip_samples.to_string());
        out.push_str(&format!("  dig clip {clip}"));
    }
    out
}

/// `output NAME  ` after the time of an interval's line, where the record names the output.
fn output_text(r: &WatchInterval) -> String {
    r.output
        .as_ref()
        .map_or(String::new(), |o| format!("output {o}  "))
}

/// The line `watch` prints once an interval.
pub fn watch_line(r: &WatchInterval) -> String {
    let seq = &r.sequence;
    format!(
        "[{:>6.1} s] {}{} Gsample/s  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  own socket drops {}  pol0 {}  pol1 {}{}{}",
        r.elapsed_s,
        output_text(r),
        gsps(r.sample_rate),
        r.heaps_per_s,
        seq.gaps,
        seq.late,
        seq.duplicates,
        r.malformed,
        r.socket_drops,
        peak_text(&r.peaks[0]),
        peak_text(&r.peaks[1]),
        match r.expected_channel {
            Some(e) => format!("  (tone ch {e:.2})"),
            None => String::new(),
        },
        input_text(&r.input),
    )
}

/// The lines `watch` prints once an interval: [`watch_line`] with one engine; with an array, a
/// line for the array (the mean rate per engine and the aggregate, counts summed) and one per
/// engine, `feng I` after the time.
pub fn watch_lines(r: &WatchInterval) -> Vec<String> {
    if r.engines.is_empty() {
        return vec![watch_line(r)];
    }
    let seq = &r.sequence;
    let mut lines = vec![format!(
        "[{:>6.1} s] {}array of {}: {} Gsample/s per engine, {} aggregate  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  own socket drops {}",
        r.elapsed_s,
        output_text(r),
        r.engines.len(),
        gsps(r.sample_rate),
        gsps(r.engines.iter().map(|e| e.sample_rate).sum()),
        r.heaps_per_s,
        seq.gaps,
        seq.late,
        seq.duplicates,
        r.malformed,
        r.socket_drops,
    )];
    lines.extend(r.engines.iter().map(|e| {
        let seq = &e.sequence;
        format!(
            "[{:>6.1} s] feng {}  {} Gsample/s  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  pol0 {}  pol1 {}{}{}",
            r.elapsed_s,
            e.feng_id,
            gsps(e.sample_rate),
            e.heaps_per_s,
            seq.gaps,
            seq.late,
            seq.duplicates,
            e.malformed,
            peak_text(&e.peaks[0]),
            peak_text(&e.peaks[1]),
            match e.expected_channel {
                Some(x) => format!("  (tone ch {x:.2})"),
                None => String::new(),
            },
            input_text(&e.input),
        )
    }));
    lines
}

/// One line per trial, for logs and non-terminal runs.
pub fn trial_line(t: &TrialRecord) -> String {
    format!(
        "trial {:>2} {:<5} {:<7} {:>8} Gsample/s  {}  recv {} Gsample/s{}  missing-in {:+}  skipped-out {:+}  gaps {:+}{}{}{}",
        t.index,
        t.backend,
        format!("{:?}", t.phase).to_lowercase(),
        gsps(t.rate),
        if t.pass { "PASS" } else { "FAIL" },
        gsps(t.received_rate),
        match t.aggregate_rate {
            Some(a) => format!(" per engine ({} aggregate over {})", gsps(a), t.engines.len()),
            None => String::new(),
        },
        t.missing_input,
        t.skipped_output,
        t.gaps,
        if t.reasons.is_empty() {
            String::new()
        } else {
            format!("  ({})", t.reasons.join("; "))
        },
        if t.settle_s > STILL.as_secs_f64() + 0.5 {
            format!("  settled {:.1} s", t.settle_s)
        } else {
            String::new()
        },
        match t.cores.describe() {
            d if d.is_empty() => d,
            d => format!("  cores: {d}"),
        }
    )
}

fn bar(done: f64, total: f64) -> String {
    let width = 20;
    let filled = ((done / total.max(1e-9)) * width as f64)
        .round()
        .clamp(0.0, width as f64) as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

/// The in-place line of a running trial (None when it is done).
pub fn trial_progress_line(p: &TrialProgress) -> Option<String> {
    Some(match p {
        TrialProgress::Warmup {
            label,
            elapsed_s,
            total_s,
        } => format!(
            "{label}: warm-up {} {:.0}/{:.0} s",
            bar(*elapsed_s, *total_s),
            elapsed_s,
            total_s
        ),
        TrialProgress::Settling {
            label,
            still_for_s,
            still_s,
            max_s,
        } => format!(
            "{label}: settling (losses still for {still_for_s:.1} of {still_s:.0} s, at most {max_s:.0} s)"
        ),
        TrialProgress::Observe {
            label,
            elapsed_s,
            total_s,
            received_rate,
            gaps,
        } => format!(
            "{label}: observe {} {:.0}/{:.0} s  received {} Gsample/s  gaps {gaps:+}",
            bar(*elapsed_s, *total_s),
            elapsed_s,
            total_s,
            gsps(*received_rate),
        ),
        TrialProgress::Done => return None,
    })
}

/// A running trial's progress on stderr: a bar redrawn in place on a terminal, nothing between
/// trials otherwise (the caller prints one line per trial).
pub struct TrialBar {
    tty: bool,
}

impl TrialBar {
    pub fn stderr() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
        }
    }

    pub fn show(&self, p: &TrialProgress) {
        if !self.tty {
            return;
        }
        match trial_progress_line(p) {
            Some(line) => {
                eprint!("\r\x1b[2K{line}");
                let _ = std::io::stderr().flush();
            }
            None => eprint!("\r\x1b[2K"),
        }
    }
}

/// The line printed as each response step is measured.
pub fn response_step_line(s: &ResponseStep) -> String {
    let p = &s.point;
    format!(
        "step {:>3}/{}: offset {:+.4} ch  gain {:.3e}  cross-power {:.4e}  theory {:.2} dB  coherence {:.3}  spectra {}{}",
        s.step,
        s.steps,
        p.offset,
        p.gain,
        p.power,
        p.theory_db,
        p.coherence,
        p.spectra,
        if p.saturated_fraction > 1e-3 {
            format!("  SATURATED {:.2}%", 100.0 * p.saturated_fraction)
        } else {
            String::new()
        }
    )
}

/// The summary table of a qualification run: one line per test, its outcome and headline figure.
pub fn qualify_table(r: &crate::record::qualify::QualifyReport) -> String {
    let mut out = format!(
        "{:<18} {:<8} {}\n",
        "test", "outcome", "headline figure (limit)"
    );
    for t in &r.tests {
        let headline = t.figures.first().map_or_else(
            || match &t.outcome {
                crate::record::qualify::Outcome::Pass => String::new(),
                crate::record::qualify::Outcome::Fail { reason }
                | crate::record::qualify::Outcome::NotRun { reason } => reason.clone(),
            },
            |f| {
                format!(
                    "{}: {} {}{}",
                    f.name,
                    crate::qualify::fmt_value(f.value),
                    f.unit,
                    f.limit
                        .as_ref()
                        .map_or(String::new(), |l| format!(" ({l})"))
                )
            },
        );
        out.push_str(&format!(
            "{:<18} {:<8} {headline}\n",
            t.name,
            t.outcome.word()
        ));
    }
    out.push_str(&format!(
        "{} in {:.0} s\n",
        if r.pass { "PASS" } else { "FAIL" },
        r.duration_s
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars() {
        assert_eq!(bar(0.0, 10.0), format!("[{}]", ".".repeat(20)));
        assert_eq!(
            bar(5.0, 10.0),
            format!("[{}{}]", "#".repeat(10), ".".repeat(10))
        );
        assert_eq!(bar(50.0, 10.0), format!("[{}]", "#".repeat(20)));
    }

    #[test]
    fn trial_progress_lines() {
        let warm = TrialProgress::Warmup {
            label: "trial 1 cpu 1.000 Gsample/s".into(),
            elapsed_s: 2.0,
            total_s: 4.0,
        };
        assert_eq!(
            trial_progress_line(&warm).unwrap(),
            format!(
                "trial 1 cpu 1.000 Gsample/s: warm-up [{}{}] 2/4 s",
                "#".repeat(10),
                ".".repeat(10)
            )
        );
        let settling = TrialProgress::Settling {
            label: "t".into(),
            still_for_s: 0.3,
            still_s: 1.0,
            max_s: 20.0,
        };
        assert_eq!(
            trial_progress_line(&settling).unwrap(),
            "t: settling (losses still for 0.3 of 1 s, at most 20 s)"
        );
        assert_eq!(trial_progress_line(&TrialProgress::Done), None);
    }

    fn sensors(rms: [Option<f64>; 2], full: [u64; 2], clip: [u64; 2]) -> Option<Vec<PolSensors>> {
        Some(
            (0..2)
                .map(|p| PolSensors {
                    pol: p,
                    rms_dbfs: rms[p],
                    full_scale_samples: full[p],
                    frames_measured: 4,
                    digitiser_clip_samples: clip[p],
                    digitiser_clip_heaps: clip[p].min(1),
                })
                .collect(),
        )
    }

    #[test]
    fn input_sensors_in_the_progress_line() {
        let quiet = sensors([Some(-21.26), Some(-21.44)], [0, 0], [0, 0]);
        assert_eq!(input_text(&quiet), "  in -21.3/-21.4 dBFS");
        let clipping = sensors([Some(-3.0), None], [12, 0], [0, 5]);
        assert_eq!(
            input_text(&clipping),
            "  in -3.0/- dBFS  full-scale 12/0  dig clip 0/5"
        );
        let silent = sensors([Some(-200.0), Some(-200.0)], [0, 0], [0, 0]);
        assert_eq!(input_text(&silent), "  in -200.0/-200.0 dBFS");
        // The null backend or an older engine: nothing measured, nothing counted.
        assert_eq!(input_text(&sensors([None, None], [0, 0], [0, 0])), "");
        assert_eq!(
            input_text(&sensors([None, None], [0, 0], [3, 0])),
            "  dig clip 3/0"
        );
        // The engine not read.
        assert_eq!(input_text(&None), "");
        assert_eq!(input_text(&Some(Vec::new())), "");
    }

    fn interval(input: Option<Vec<PolSensors>>) -> WatchInterval {
        WatchInterval {
            elapsed_s: 3.0,
            sample_rate: 1e8,
            heaps_per_s: 100.0,
            sequence: Default::default(),
            malformed: 0,
            socket_drops: 0,
            peaks: [None, None],
            expected_channel: None,
            verdict: None,
            power: std::sync::Arc::new(crate::content::ChannelPower::new(8)),
            input,
            engines: Vec::new(),
            output: None,
        }
    }

    #[test]
    fn watch_lines_end_with_the_input_sensors() {
        let r = interval(sensors([Some(-21.3), Some(-21.4)], [0, 2], [0, 0]));
        let line = watch_line(&r);
        assert!(
            line.ends_with("pol0 -  pol1 -  in -21.3/-21.4 dBFS  full-scale 0/2"),
            "{line}"
        );
        // An array: each engine's own, on its own line; none on the array's.
        let mut r = interval(sensors([Some(-1.0), Some(-1.0)], [0, 0], [0, 0]));
        r.engines = (0..2)
            .map(|i| crate::record::EngineInterval {
                feng_id: i,
                sample_rate: 1e8,
                heaps_per_s: 50.0,
                sequence: Default::default(),
                malformed: 0,
                peaks: [None, None],
                expected_channel: None,
                verdict: None,
                input: sensors([Some(-20.0 - i as f64), Some(-20.0)], [0, 0], [0, 0]),
            })
            .collect();
        let lines = watch_lines(&r);
        assert_eq!(lines.len(), 3);
        assert!(!lines[0].contains("dBFS"), "{}", lines[0]);
        assert!(lines[1].ends_with("in -20.0/-20.0 dBFS"), "{}", lines[1]);
        assert!(lines[2].ends_with("in -21.0/-20.0 dBFS"), "{}", lines[2]);
    }

    /// An engine of several outputs: the line names the one watched, after the time.
    #[test]
    fn watch_lines_name_the_output_when_told() {
        let mut r = interval(None);
        assert!(watch_line(&r).starts_with("[   3.0 s] 0.100 Gsample/s"));
        r.output = Some("fine".into());
        let line = watch_line(&r);
        assert!(
            line.starts_with("[   3.0 s] output fine  0.100 Gsample/s  100 heaps/s"),
            "{line}"
        );
    }
}

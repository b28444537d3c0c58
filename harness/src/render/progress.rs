//! Progress lines for stderr: one per watch interval, per finished trial and per response step,
//! and the bar a running trial redraws in place on a terminal.

use std::io::{IsTerminal, Write};

use crate::content::Peak;
use crate::gsps;
use crate::record::{ResponseStep, TrialProgress, TrialRecord, WatchInterval};
use crate::trial::STILL;

fn peak_text(p: &Option<Peak>) -> String {
    match p {
        Some(p) => format!("ch {} {:.1} dB", p.channel, p.power_db()),
        None => "-".into(),
    }
}

/// The line `watch` prints once an interval.
pub fn watch_line(r: &WatchInterval) -> String {
    let seq = &r.sequence;
    format!(
        "[{:>6.1} s] {} Gsample/s  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  own socket drops {}  pol0 {}  pol1 {}{}",
        r.elapsed_s,
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
        }
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
        "[{:>6.1} s] array of {}: {} Gsample/s per engine, {} aggregate  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  own socket drops {}",
        r.elapsed_s,
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
            "[{:>6.1} s] feng {}  {} Gsample/s  {:.0} heaps/s  gaps {}  late {}  dup {}  malformed {}  pol0 {}  pol1 {}{}",
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
            }
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
}

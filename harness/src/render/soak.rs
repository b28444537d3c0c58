//! The soak's words and files: a progress line per sample, the closing summary, and
//! `soak.json`, `soak-rss.svg` (resident memory over time) and `soak-growth.svg` (over each
//! process's baseline, against the limit), the plots drawn as the qualification report's are;
//! for a soak at several fractions of the max rate, `soak-risk.{txt,json,svg}` (loss events per
//! hour at each fraction).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::record::qualify::{Level, Plot, Series, Style};
use crate::record::soak::{RiskReport, SoakReport, SoakSample};
use crate::soak::verdict::{mib, when};

/// Turns samples into progress lines; remembers each process's baseline to show the growth over
/// it.
pub struct SampleLines {
    baseline_s: f64,
    baselines: BTreeMap<String, u64>,
}

impl SampleLines {
    pub fn new(baseline_s: f64) -> Self {
        Self {
            baseline_s,
            baselines: BTreeMap::new(),
        }
    }

    /// "[  5.0 min] 0.0160 Gsample/s  no loss  fengine 212.3 MiB +0.4% 31 fd 14 thr | ...".
    pub fn line(&mut self, s: &SoakSample) -> String {
        let lost: Vec<String> = s
            .losses
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let mut procs = Vec::new();
        for (name, p) in &s.processes {
            let Some(rss) = p.resident_bytes else {
                procs.push(format!("{name} unreadable"));
                continue;
            };
            if s.elapsed_s >= self.baseline_s {
                self.baselines.entry(name.clone()).or_insert(rss);
            }
            let growth = match self.baselines.get(name) {
                Some(&b) => format!(" {:+.1}%", (rss as f64 / b.max(1) as f64 - 1.0) * 100.0),
                None => String::new(),
            };
            let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            procs.push(format!(
                "{name} {}{growth} {} fd {} thr",
                mib(rss),
                opt(p.open_fds),
                opt(p.threads)
            ));
        }
        let host = s.host.map_or(String::new(), |h| {
            format!(
                " | host {:.1} of {} (steal {:.2})",
                h.busy, h.cores, h.steal
            )
        });
        format!(
            "[{:>9}] {:.4} Gsample/s  {}  {}{host}{}",
            when(s.elapsed_s),
            s.received_rate / 1e9,
            if lost.is_empty() {
                "no loss".to_string()
            } else {
                format!("LOSS {}", lost.join(", "))
            },
            procs.join(" | "),
            if s.errors.is_empty() {
                String::new()
            } else {
                format!("  (not read: {})", s.errors.join("; "))
            }
        )
    }
}

/// The closing summary: the outcome, a row per process, the losses and the reasons.
pub fn summary(r: &SoakReport) -> String {
    let mut out = format!(
        "soak: {} after {} at {} ({})\n",
        if r.pass { "PASS" } else { "FAIL" },
        when(r.soaked_s),
        r.rate.map_or("the rate as it was".into(), |x| format!(
            "{:.4} Gsample/s",
            x / 1e9
        )),
        r.rate_source,
    );
    if let Some(x) = r.received_rate {
        out.push_str(&format!("received {:.4} Gsample/s on average\n", x / 1e9));
    }
    out.push_str(&format!(
        "{:<8} {:>12} {:>12} {:>12} {:>8} {:>13} {:>13}\n",
        "process", "baseline", "peak", "last", "growth", "fds base/max", "threads b/max"
    ));
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for (name, p) in &r.processes {
        out.push_str(&format!(
            "{:<8} {:>12} {:>12} {:>12} {:>8} {:>13} {:>13}\n",
            name,
            p.baseline_rss_bytes.map_or("-".into(), mib),
            p.peak_rss_bytes.map_or("-".into(), mib),
            p.last_rss_bytes.map_or("-".into(), mib),
            p.max_growth
                .map_or("-".into(), |g| format!("{:+.1}%", g * 100.0)),
            format!("{}/{}", opt(p.baseline_fds), opt(p.max_fds_seen)),
            format!("{}/{}", opt(p.baseline_threads), opt(p.max_threads_seen)),
        ));
    }
    let losses: Vec<String> = r.losses.iter().map(|(k, v)| format!("{k} {v}")).collect();
    out.push_str(&format!("losses since the start: {}\n", losses.join(", ")));
    for reason in &r.reasons {
        out.push_str(&format!("FAIL: {reason}\n"));
    }
    let stalls = r.watch.as_ref().and_then(|w| w.stalls.as_ref());
    if let Some(s) = stalls.filter(|_| !r.pass) {
        out.push_str(&format!("engine stalls: {}\n", s.line()));
    }
    if let Some(h) = crate::soak::host::over_soak(&r.samples) {
        out.push_str(&format!("{}\n", h.line()));
    }
    out
}

/// Resident memory (MiB) per process against minutes.
pub fn rss_plot(r: &SoakReport) -> Plot {
    Plot {
        title: "Resident memory over the soak".into(),
        x_label: "minutes since the soak began".into(),
        y_label: "resident memory (MiB)".into(),
        series: series(r, |_, rss| Some(rss as f64 / (1 << 20) as f64)),
        vlines: vec![Level {
            label: "baseline".into(),
            value: r.limits.baseline_s / 60.0,
        }],
        ..Default::default()
    }
}

/// Resident memory over each process's baseline (%) against minutes, with the limit.
pub fn growth_plot(r: &SoakReport) -> Plot {
    Plot {
        title: "Resident memory over its baseline".into(),
        x_label: "minutes since the soak began".into(),
        y_label: "growth over the baseline (%)".into(),
        series: series(r, |name, rss| {
            let base = r.processes.get(name)?.baseline_rss_bytes?;
            Some((rss as f64 / base.max(1) as f64 - 1.0) * 100.0)
        }),
        hlines: vec![Level {
            label: format!("limit +{}%", r.limits.rss_growth * 100.0),
            value: r.limits.rss_growth * 100.0,
        }],
        vlines: vec![Level {
            label: "baseline".into(),
            value: r.limits.baseline_s / 60.0,
        }],
        ..Default::default()
    }
}

/// One line per process of `y(name, rss)` against minutes.
fn series(r: &SoakReport, y: impl Fn(&str, u64) -> Option<f64>) -> Vec<Series> {
    r.processes
        .keys()
        .map(|name| Series {
            name: name.clone(),
            style: Style::Line,
            points: r
                .samples
                .iter()
                .filter_map(|s| {
                    let rss = s.processes.get(name)?.resident_bytes?;
                    Some((s.elapsed_s / 60.0, y(name, rss)?))
                })
                .collect(),
        })
        .collect()
}

/// Writes soak.json, soak-rss.svg and soak-growth.svg into `dir`.
pub fn write(dir: &Path, r: &SoakReport) -> Result<()> {
    super::report::write_json(&dir.join("soak.json"), r)?;
    for (name, plot) in [
        ("soak-rss.svg", rss_plot(r)),
        ("soak-growth.svg", growth_plot(r)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, super::plot::svg(&plot)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The fractions as a table: rate, time soaked, loss events and events per hour (with the 95%
/// bound where there were none), and each fraction's own verdict.
pub fn risk_table(r: &RiskReport) -> String {
    let mut out = format!(
        "loss events per hour at fractions of the max rate, {} Gsample/s ({}); a loss event is a {} interval in which any loss counter moved\n",
        crate::gsps(r.max_rate),
        r.max_rate_source,
        when(r.interval_s)
    );
    out.push_str(&format!(
        "{:>8} {:>11} {:>11} {:>10} {:>7} {:>11} {:>14}  {:<4}  {}\n",
        "fraction",
        "rate Gsps",
        "recv Gsps",
        "soaked",
        "events",
        "with steal",
        "events/hour",
        "soak",
        "report"
    ));
    for f in &r.fractions {
        let per_hour = match (f.events_per_hour, f.upper_95_per_hour) {
            (Some(_), Some(u)) => format!("0 (<{u:.2})"),
            (Some(x), None) => format!("{x:.2}"),
            (None, _) => "-".into(),
        };
        out.push_str(&format!(
            "{:>8} {:>11} {:>11} {:>10} {:>7} {:>11} {:>14}  {:<4}  {}\n",
            f.fraction,
            f.rate.map_or("-".into(), crate::gsps),
            f.received_rate.map_or("-".into(), crate::gsps),
            when(f.soaked_s),
            f.loss_events,
            f.events_with_steal.map_or("-".into(), |n| n.to_string()),
            per_hour,
            if f.pass { "pass" } else { "FAIL" },
            f.out_dir
        ));
    }
    out.push_str("(<x): no loss event; the rate of events is below x an hour at 95% confidence\n");
    out.push_str(
        "with steal: loss events in intervals where the hypervisor took a quarter of a core or more of the host\n",
    );
    out
}

/// Loss events per hour against the fraction of the max rate, with the 95% bounds of the
/// fractions that had none.
pub fn risk_plot(r: &RiskReport) -> Plot {
    let points = |y: fn(&crate::record::soak::FractionRisk) -> Option<f64>| {
        r.fractions
            .iter()
            .filter_map(|f| Some((f.fraction, y(f)?)))
            .collect::<Vec<_>>()
    };
    Plot {
        title: format!(
            "Loss events per hour at fractions of {} Gsample/s",
            crate::gsps(r.max_rate)
        ),
        x_label: "fraction of the max rate".into(),
        y_label: "loss events per hour".into(),
        series: vec![
            Series {
                name: "measured".into(),
                style: Style::Line,
                points: points(|f| f.events_per_hour),
            },
            Series {
                name: "upper bound (95%) where none was seen".into(),
                style: Style::Points,
                points: points(|f| f.upper_95_per_hour),
            },
        ],
        ..Default::default()
    }
}

/// Writes soak-risk.txt, soak-risk.json and soak-risk.svg into `dir`.
pub fn write_risk(dir: &Path, r: &RiskReport) -> Result<()> {
    super::report::write_json(&dir.join("soak-risk.json"), r)?;
    let txt = dir.join("soak-risk.txt");
    std::fs::write(&txt, risk_table(r)).with_context(|| format!("writing {}", txt.display()))?;
    let svg = dir.join("soak-risk.svg");
    std::fs::write(&svg, super::plot::svg(&risk_plot(r))?)
        .with_context(|| format!("writing {}", svg.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::soak::FractionRisk;

    fn fraction(fraction: f64, events: usize, hours: f64) -> FractionRisk {
        FractionRisk {
            fraction,
            rate: Some(fraction * 1e9),
            received_rate: Some(fraction * 1e9),
            soaked_s: hours * 3600.0,
            samples: (hours * 60.0) as usize,
            loss_events: events,
            events_with_steal: (events > 0).then_some(events - 1),
            events_per_hour: Some(events as f64 / hours),
            upper_95_per_hour: (events == 0).then(|| crate::soak::risk::NO_EVENT_BOUND_95 / hours),
            pass: events == 0,
            out_dir: format!("fraction-{fraction}"),
        }
    }

    #[test]
    fn the_risk_table_and_plot() {
        let r = RiskReport {
            max_rate: 1e9,
            max_rate_source: "--max-rate".into(),
            duration_s: 7200.0,
            interval_s: 60.0,
            fractions: vec![
                fraction(0.8, 0, 2.0),
                fraction(0.9, 1, 2.0),
                fraction(1.0, 9, 2.0),
            ],
        };
        let t = risk_table(&r);
        assert!(t.contains("a 60 s interval"), "{t}");
        let rows: Vec<&str> = t.lines().collect();
        assert!(
            rows[2].contains("0 (<1.50)") && rows[2].contains("pass"),
            "{t}"
        );
        assert!(rows[3].contains("0.50") && rows[3].contains("FAIL"), "{t}");
        assert!(rows[4].contains("4.50"), "{t}");
        // The events with steal beside the events (after "120.0 min"): 9, of them 8.
        let cols: Vec<&str> = rows[4].split_whitespace().collect();
        assert_eq!(&cols[5..7], ["9", "8"], "{t}");
        assert!(t.contains("with steal: loss events in intervals"), "{t}");
        let svg = super::super::plot::svg(&risk_plot(&r)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Loss events per hour") && svg.contains("upper bound"));
        // Well formed: every element opened is closed.
        let opened = svg.matches("<svg").count() + svg.matches("<text").count();
        let closed = svg.matches("</svg>").count() + svg.matches("</text>").count();
        assert_eq!(opened, closed);
        let dir = std::env::temp_dir().join(format!("harness-risk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_risk(&dir, &r).unwrap();
        let back: RiskReport =
            serde_json::from_str(&std::fs::read_to_string(dir.join("soak-risk.json")).unwrap())
                .unwrap();
        assert_eq!(back, r);
        let _ = std::fs::remove_dir_all(dir);
    }
}

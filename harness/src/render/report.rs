//! Report files: the max-rate trial table, JSON files, and SVG plots (rate against outcome;
//! measured against theoretical channel response).

use std::path::Path;

use anyhow::{Context, Result};
use plotters::chart::SeriesAnno;
use plotters::prelude::*;
use serde::Serialize;

use crate::gsps;
use crate::record::{MaxRateReport, ResponsePoint};
use crate::search::LOW_STEPS;

/// The trials as a text table, then one line per search. With an array, the rates are per
/// engine (the received one the mean over engines), a column gives the aggregate received, and
/// each search's line the aggregate sustained.
pub fn table(report: &MaxRateReport) -> String {
    let array = report.searches.iter().any(|s| s.engines.is_some());
    let mut out = String::new();
    out.push_str(&format!(
        "{:>3}  {:<7} {:<7} {:>11}  {:<6} {:>11}  {}{:>10}  {:>11}  {:>6}  {:>8}  {:>10}  {}\n",
        "#",
        "backend",
        "phase",
        "rate Gsps",
        "result",
        "recv Gsps",
        if array {
            format!("{:>11}  ", "aggr Gsps")
        } else {
            String::new()
        },
        "missing-in",
        "skipped-out",
        "gaps",
        "settle s",
        "host cores",
        "reasons"
    ));
    for s in &report.searches {
        for t in &s.trials {
            out.push_str(&format!(
                "{:>3}  {:<7} {:<7} {:>11}  {:<6} {:>11}  {}{:>10}  {:>11}  {:>6}  {:>8.1}  {:>10}  {}\n",
                t.index,
                t.backend,
                format!("{:?}", t.phase).to_lowercase(),
                gsps(t.rate),
                if t.pass { "pass" } else { "FAIL" },
                gsps(t.received_rate),
                if array {
                    format!("{:>11}  ", t.aggregate_rate.map_or("-".into(), gsps))
                } else {
                    String::new()
                },
                t.missing_input,
                t.skipped_output,
                t.gaps,
                t.settle_s,
                match (t.cores.host_busy, t.cores.host_cores) {
                    (Some(b), Some(n)) => format!("{b:.1}/{n}"),
                    _ => "-".into(),
                },
                t.reasons.join("; ")
            ));
            // At every rate, pass or fail, the engine's own account of the window.
            if let Some(st) = &t.stalls {
                out.push_str(&format!("     engine: {}\n", st.line()));
            }
        }
    }
    for s in &report.searches {
        out.push_str(&format!(
            "{}: highest {} {} Gsample/s per polarisation{}{}\n",
            s.backend,
            if s.hold.is_some() {
                "rate passing the search's trials"
            } else {
                "sustained rate"
            },
            s.best.map_or(
                format!("none (--low and {LOW_STEPS} steps below it failed)"),
                gsps
            ),
            match (s.engines, s.aggregate_best) {
                (Some(n), Some(t)) =>
                    format!(" per engine, {} aggregate over {n} engines", gsps(t)),
                (Some(n), None) => format!(" per engine ({n} engines)"),
                _ => String::new(),
            },
            match s.lowest_fail {
                Some(f) => format!(" (lowest failing {})", gsps(f)),
                None => " (--high passed)".into(),
            }
        ));
    }
    for s in &report.searches {
        if let (Some(h), Some(_)) = (&s.hold, s.best) {
            out.push_str(&format!(
                "{}: sustained (held for {} s, stepping down by {}% at most {} times): {}\n",
                s.backend,
                h.seconds,
                h.step * 100.0,
                h.max_steps,
                s.held
                    .map_or("none: every step lost something".into(), |r| format!(
                        "{} Gsample/s per polarisation{}",
                        gsps(r),
                        s.engines.map_or(String::new(), |n| format!(
                            " per engine, {} aggregate",
                            gsps(n as f64 * r)
                        ))
                    ))
            ));
        }
    }
    if let Some(r) = report.ratio_to_null {
        out.push_str(&format!("ratio to the null backend: {r:.3}\n"));
    }
    for r in &report.references {
        let against: Vec<String> = report
            .searches
            .iter()
            .filter_map(|s| Some(format!("{} {:.3}", s.backend, s.best? / r.rate)))
            .collect();
        out.push_str(&format!(
            "reference {}: {} Gsample/s per polarisation{}\n",
            r.name,
            gsps(r.rate),
            if against.is_empty() {
                String::new()
            } else {
                format!(" (best found as a fraction of it: {})", against.join(", "))
            }
        ));
    }
    out
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plot: {e:?}")
}

const COLOURS: [RGBColor; 4] = [BLUE, RGBColor(230, 120, 0), RGBColor(0, 150, 60), MAGENTA];

/// Offered against received rate, one colour per backend, a filled circle for a trial that
/// passed and a cross for one that failed, the line where they are equal, each search's best
/// and each reference (--reference) as a dashed vertical line; below it, on the same rate axis,
/// the host's cores busy in each trial against the cores it has.
pub fn plot_trials(path: &Path, report: &MaxRateReport) -> Result<()> {
    let trials = || report.searches.iter().flat_map(|s| s.trials.iter());
    let rates: Vec<f64> = trials()
        .flat_map(|t| [t.rate, t.received_rate])
        .chain(report.references.iter().map(|r| r.rate))
        .filter(|r| r.is_finite())
        .map(|r| r / 1e9)
        .collect();
    let hi = rates.iter().copied().fold(0.0, f64::max);
    let lo = rates.iter().copied().fold(hi, f64::min);
    let pad = ((hi - lo) * 0.06).max(hi * 0.02).max(1e-6);
    let (lo, hi) = if rates.is_empty() {
        (0.0, 1.0)
    } else {
        ((lo - pad).max(0.0), hi + pad)
    };
    let root = SVGBackend::new(path, (900, 680)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(470);

    let mut chart = ChartBuilder::on(&top)
        .caption(
            "max-rate: offered and received rate per trial",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, lo..hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(244, 245, 248))
        .x_desc("offered: ADC rate per polarisation (Gsample/s)")
        .y_desc("received (Gsample/s)")
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(DashedLineSeries::new(
            vec![(lo, lo), (hi, hi)],
            4,
            4,
            RGBColor(150, 150, 150).stroke_width(1),
        ))
        .map_err(plot_err)?
        .label("received = offered")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(150, 150, 150)));
    for (i, s) in report.searches.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(s.trials.iter().map(|t| {
                let p = (t.rate / 1e9, t.received_rate / 1e9);
                if t.pass {
                    Circle::new(p, 5, colour.filled()).into_dyn()
                } else {
                    Cross::new(p, 6, colour.stroke_width(2)).into_dyn()
                }
            }))
            .map_err(plot_err)?
            .label(match s.best {
                Some(b) => format!("{}: best {} Gsample/s (x failed)", s.backend, gsps(b)),
                None => format!("{}: no rate sustained (x failed)", s.backend),
            })
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, colour.filled()));
        if let Some(b) = s.best {
            vline(&mut chart, b / 1e9, (lo, hi), colour, 1)?;
        }
        if let Some(h) = s.held {
            vline(&mut chart, h / 1e9, (lo, hi), colour, 3)?
                .label(format!(
                    "{}: held {} s at {} Gsample/s (sustained)",
                    s.backend,
                    s.hold.map_or(0.0, |c| c.seconds),
                    gsps(h)
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
                });
        }
    }
    for (i, r) in report.references.iter().enumerate() {
        let colour = REFERENCE_COLOURS[i % REFERENCE_COLOURS.len()];
        vline(&mut chart, r.rate / 1e9, (lo, hi), colour, 2)?
            .label(format!("{}: {} Gsample/s", r.name, gsps(r.rate)))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(plot_err)?;

    // Cores busy, on the same rate axis.
    let host_cores = trials().filter_map(|t| t.cores.host_cores).max();
    let busy_max = trials()
        .filter_map(|t| t.cores.host_busy)
        .fold(0.0, f64::max);
    let ytop = host_cores
        .map_or(busy_max, |c| c as f64)
        .max(busy_max)
        .max(1.0)
        * 1.08;
    let mut cores = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..ytop)
        .map_err(plot_err)?;
    cores
        .configure_mesh()
        .light_line_style(RGBColor(244, 245, 248))
        .x_desc("offered: ADC rate per polarisation (Gsample/s)")
        .y_desc("host cores busy")
        .y_labels(5)
        .draw()
        .map_err(plot_err)?;
    if let Some(c) = host_cores {
        let c = c as f64;
        cores
            .draw_series(DashedLineSeries::new(
                vec![(lo, c), (hi, c)],
                4,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(plot_err)?
            .label(format!("the host's {c} cores"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    for (i, s) in report.searches.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points: Vec<(f64, f64, bool)> = s
            .trials
            .iter()
            .filter_map(|t| Some((t.rate / 1e9, t.cores.host_busy?, t.pass)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        cores
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.0, p.1)),
                colour.mix(0.5).stroke_width(1),
            ))
            .map_err(plot_err)?;
        cores
            .draw_series(points.iter().map(|&(x, y, pass)| {
                if pass {
                    Circle::new((x, y), 4, colour.filled()).into_dyn()
                } else {
                    Cross::new((x, y), 5, colour.stroke_width(2)).into_dyn()
                }
            }))
            .map_err(plot_err)?
            .label(format!("{}: cores busy", s.backend))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled()));
    }
    cores
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

const REFERENCE_COLOURS: [RGBColor; 3] = [
    RGBColor(200, 30, 30),
    RGBColor(120, 60, 160),
    RGBColor(90, 90, 90),
];

type RateChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A dashed vertical line at `x` across `y`, its series returned for a legend entry.
fn vline<'c, 'a, 'b>(
    chart: &'c mut RateChart<'a, 'b>,
    x: f64,
    y: (f64, f64),
    colour: RGBColor,
    width: u32,
) -> Result<&'c mut SeriesAnno<'a, SVGBackend<'b>>> {
    chart
        .draw_series(DashedLineSeries::new(
            vec![(x, y.0), (x, y.1)],
            6,
            4,
            colour.stroke_width(width),
        ))
        .map_err(plot_err)
}

/// Measured and theoretical response in dB against the offset from the channel centre.
pub fn plot_response(
    path: &Path,
    theory: &[(f64, f64)],
    points: &[ResponsePoint],
    floor_db: f64,
    title: &str,
) -> Result<()> {
    let xs = theory
        .iter()
        .map(|p| p.0)
        .chain(points.iter().map(|p| p.offset));
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (-1.0, 1.0) };
    let ymin = theory
        .iter()
        .map(|p| p.1)
        .chain(points.iter().filter_map(|p| p.measured_db))
        .filter(|y| y.is_finite())
        .fold(floor_db - 10.0, f64::min)
        .max(-160.0);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, ymin..5.0)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("offset from channel centre (channels)")
        .y_desc("response (dB)")
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(LineSeries::new(
            theory.iter().map(|&(x, y)| (x, y.max(ymin))),
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?
        .label("theory: |FT of PFB weights|^2")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .draw_series(
            points
                .iter()
                .filter_map(|p| Some((p.offset, p.measured_db?.max(ymin))))
                .map(|(x, y)| Circle::new((x, y), 3, BLUE.filled())),
        )
        .map_err(plot_err)?
        .label("measured (cross-power)")
        .legend(|(x, y)| Circle::new((x + 10, y), 3, BLUE.filled()));
    chart
        .draw_series(DashedLineSeries::new(
            vec![(lo, floor_db), (hi, floor_db)],
            5,
            5,
            RED.stroke_width(1),
        ))
        .map_err(plot_err)?
        .label(format!("compared above {floor_db} dB"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{SearchReport, TrialRecord};
    use crate::search::{Phase, SearchConfig};

    fn trial(index: usize, backend: &str, rate: f64, pass: bool) -> TrialRecord {
        TrialRecord {
            index,
            backend: backend.into(),
            phase: Phase::Bisect,
            rate,
            pass,
            reasons: if pass {
                vec![]
            } else {
                vec!["engine skipped output +3".into()]
            },
            missing_input: 0.0,
            skipped_output: if pass { 0.0 } else { 3.0 },
            gaps: 0,
            late: 0,
            malformed: 0,
            received_rate: rate,
            udp_rcvbuf_errors: None,
            harness_socket_drops: 0,
            dsim_heaps_skipped: None,
            window_s: 20.0,
            settle_s: 0.0,
            stalls: None,
            cores: Default::default(),
            aggregate_rate: None,
            engines: Vec::new(),
        }
    }

    fn report() -> MaxRateReport {
        let cfg = SearchConfig {
            low: 1e9,
            high: 8e9,
            resolution: 10e6,
            repeats: 1,
        };
        let mut r = MaxRateReport {
            searches: vec![
                SearchReport {
                    backend: "cuda".into(),
                    output: Some("wideband".into()),
                    config: cfg,
                    best: Some(6.3e9),
                    hold: None,
                    held: None,
                    engines: None,
                    aggregate_best: None,
                    lowest_fail: Some(6.31e9),
                    trials: vec![trial(1, "cuda", 1e9, true), trial(2, "cuda", 8e9, false)],
                },
                SearchReport {
                    backend: "null".into(),
                    output: None,
                    config: cfg,
                    best: Some(7e9),
                    hold: None,
                    held: None,
                    engines: None,
                    aggregate_best: None,
                    lowest_fail: None,
                    trials: vec![trial(3, "null", 7e9, true)],
                },
            ],
            ratio_to_null: None,
            references: vec!["transport alone=6.6e9".parse().unwrap()],
            system: serde_json::json!({"mode": "test"}),
        };
        r.compute_ratio();
        r
    }

    #[test]
    fn table_json_and_plot() {
        let r = report();
        assert!((r.ratio_to_null.unwrap() - 0.9).abs() < 1e-12);
        let t = table(&r);
        assert!(t.contains("FAIL"), "{t}");
        assert!(t.contains("cuda: highest sustained rate 6.300"), "{t}");
        assert!(t.contains("ratio to the null backend: 0.900"), "{t}");
        assert!(
            t.contains("reference transport alone: 6.600 Gsample/s per polarisation (best found as a fraction of it: cuda 0.955, null 1.061)"),
            "{t}"
        );
        let dir = std::env::temp_dir().join(format!("harness-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_json(&dir.join("r.json"), &r).unwrap();
        let back: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
        assert_eq!(back["searches"][0]["trials"][1]["pass"], false);
        plot_trials(&dir.join("r.svg"), &r).unwrap();
        let svg = std::fs::read_to_string(dir.join("r.svg")).unwrap();
        assert!(
            svg.starts_with("<svg")
                && svg.contains("best 6.300")
                && svg.contains("transport alone: 6.600")
                && svg.contains("host cores busy"),
            "{}",
            &svg[..200.min(svg.len())]
        );
        // An empty report still plots.
        let empty = MaxRateReport {
            searches: vec![],
            ratio_to_null: None,
            references: vec![],
            system: serde_json::Value::Null,
        };
        plot_trials(&dir.join("e.svg"), &empty).unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_held_rate_is_reported_beside_the_search_answer() {
        let mut r = report();
        let s = &mut r.searches[0];
        s.hold = Some(crate::search::HoldConfig {
            seconds: 600.0,
            step: 0.05,
            max_steps: 4,
        });
        s.held = Some(5.985e9);
        let mut t = trial(4, "cuda", 6.3e9, false);
        t.phase = Phase::Hold;
        s.trials.push(t);
        s.trials.push(trial(5, "cuda", 5.985e9, true));
        s.trials[3].phase = Phase::Hold;
        let t = table(&r);
        assert!(
            t.contains("cuda: highest rate passing the search's trials 6.300"),
            "{t}"
        );
        assert!(
            t.contains("cuda: sustained (held for 600 s, stepping down by 5% at most 4 times): 5.985 Gsample/s per polarisation"),
            "{t}"
        );
        assert!(t.contains(" hold "), "the hold trials' phase: {t}");
        assert!(
            t.contains("null: highest sustained rate 7.000"),
            "no hold: {t}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["searches"][0]["held"], 5.985e9);
        assert_eq!(json["searches"][0]["hold"]["seconds"], 600.0);
        assert!(json["searches"][1].get("held").is_none());
        let dir = std::env::temp_dir().join(format!("harness-hold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        plot_trials(&dir.join("h.svg"), &r).unwrap();
        let svg = std::fs::read_to_string(dir.join("h.svg")).unwrap();
        assert!(
            svg.contains("held 600 s at 5.985"),
            "{}",
            &svg[..200.min(svg.len())]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_array_table_gives_per_engine_and_aggregate_rates() {
        let mut r = report();
        for s in &mut r.searches {
            s.engines = Some(4);
            s.aggregate_best = s.best.map(|b| 4.0 * b);
            for t in &mut s.trials {
                t.aggregate_rate = Some(4.0 * t.received_rate);
            }
        }
        let t = table(&r);
        assert!(t.contains("aggr Gsps"), "{t}");
        assert!(
            t.contains("cuda: highest sustained rate 6.300 Gsample/s per polarisation per engine, 25.200 aggregate over 4 engines"),
            "{t}"
        );
        assert!(t.contains("32.000"), "a trial's aggregate: {t}");
        // One engine: the table as before.
        assert!(!table(&report()).contains("aggr"));
    }
}

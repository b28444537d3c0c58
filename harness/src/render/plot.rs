//! One [`Plot`] of a qualification record drawn as SVG, for the HTML report to inline.
//!
//! Series in distinct colours with a legend under the chart (never over the data), `Points` as
//! small circles and `Line` as lines; horizontal levels dashed red and vertical ones dashed grey,
//! each labelled where it is drawn. Non-finite values (and, on a log x axis, x <= 0) are left
//! out; a flat series still gets a visible range; a plot with nothing to draw says "no data".

use std::ops::Range;

use anyhow::Result;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::record::qualify::{Plot, Series, Style};

/// The size of every plot, in SVG pixels (the page scales it down on narrow screens).
pub const WIDTH: u32 = 860;
pub const HEIGHT: u32 = 420;

const FONT: &str = "sans-serif";
/// Distinct, print-safe series colours (the "tab10" palette).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
/// Horizontal levels are limits and floors; vertical ones mark a place.
const HLINE: RGBColor = RGBColor(200, 30, 30);
const VLINE: RGBColor = RGBColor(90, 90, 90);
const LEGEND_ROW: u32 = 22;
/// Font sizes as plotters takes them (the SVG gets them divided by 1.24).
const TITLE_FONT: u32 = 23;
const TICK_FONT: u32 = 16;
const DESC_FONT: u32 = 17;
const LEGEND_FONT: u32 = 17;
const LEVEL_FONT: u32 = 16;
const LEGEND_PAD: u32 = 8;

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plot: {e:?}")
}

/// The SVG document (an `<svg>` element) of `plot`.
pub fn svg(plot: &Plot) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        match Ranges::of(plot) {
            None => no_data(&root, plot)?,
            Some(r) if plot.x_log => {
                let x = (r.x.start..r.x.end).log_scale();
                draw(&root, plot, x, &r)?
            }
            Some(r) => draw(&root, plot, r.x.clone(), &r)?,
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// A point that can be drawn on this plot's axes.
fn usable(x_log: bool, (x, y): (f64, f64)) -> bool {
    x.is_finite() && y.is_finite() && (!x_log || x > 0.0)
}

fn drawable(plot: &Plot, s: &Series) -> Vec<(f64, f64)> {
    s.points
        .iter()
        .copied()
        .filter(|&p| usable(plot.x_log, p))
        .collect()
}

/// The axes' ranges: every drawable point and every level, padded.
struct Ranges {
    x: Range<f64>,
    y: Range<f64>,
}

impl Ranges {
    /// None when no series has a drawable point.
    fn of(plot: &Plot) -> Option<Self> {
        let points: Vec<(f64, f64)> = plot.series.iter().flat_map(|s| drawable(plot, s)).collect();
        if points.is_empty() {
            return None;
        }
        let xs = points.iter().map(|p| p.0).chain(
            plot.vlines
                .iter()
                .map(|l| l.value)
                .filter(|&v| v.is_finite() && (!plot.x_log || v > 0.0)),
        );
        let ys = points.iter().map(|p| p.1).chain(
            plot.hlines
                .iter()
                .map(|l| l.value)
                .filter(|v| v.is_finite()),
        );
        let x = span(xs);
        let x = if plot.x_log { log_padded(x) } else { padded(x) };
        Some(Self {
            x,
            y: padded(span(ys)),
        })
    }
}

fn span(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    lo..hi
}

/// 5% either side; a flat range gets 10% of its value (or 1 about zero).
fn padded(r: Range<f64>) -> Range<f64> {
    let width = r.end - r.start;
    let scale = r.start.abs().max(r.end.abs());
    if width <= scale * 1e-9 {
        let pad = if scale > 0.0 { scale * 0.1 } else { 1.0 };
        return r.start - pad..r.end + pad;
    }
    let pad = width * 0.05;
    r.start - pad..r.end + pad
}

/// 4% of the decades either side, and out to whole decades when fewer than two decade marks
/// would fall inside (the log axis labels only decades).
fn log_padded(r: Range<f64>) -> Range<f64> {
    let (lo, hi) = (r.start.log10(), r.end.log10());
    let pad = ((hi - lo) * 0.04).max(0.02);
    let (lo, hi) = (lo - pad, hi + pad);
    let decades = hi.floor() - lo.ceil() + 1.0;
    if decades >= 2.0 {
        return 10f64.powf(lo)..10f64.powf(hi);
    }
    let (lo, hi) = (lo.floor(), hi.ceil().max(lo.floor() + 1.0));
    10f64.powf(lo)..10f64.powf(hi)
}

/// At most this many labelled ticks per axis (plotters picks steps of 1, 2 or 5 × 10^k).
const LABELS: usize = 10;

/// The tick spacing plotters will use on a linear axis over `r`.
fn tick_step(r: &Range<f64>) -> f64 {
    let coord: RangedCoordf64 = r.clone().into();
    match coord.key_points(LABELS).as_slice() {
        [a, b, ..] => b - a,
        _ => (r.end - r.start) / LABELS as f64,
    }
}

/// A tick label for `v` on a linear axis over `r` with ticks `step` apart: as many decimals as
/// the step needs (the same on every tick), exponent notation for very large or small values.
fn tick(v: f64, r: &Range<f64>, step: f64) -> String {
    let scale = r.start.abs().max(r.end.abs());
    if !(1e-3..1e6).contains(&scale) {
        if v.abs() < step * 1e-6 {
            return "0".into();
        }
        return trim_exp(&format!("{v:.3e}"));
    }
    let decimals = (-step.log10() - 1e-9).ceil().clamp(0.0, 6.0) as usize;
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

/// A tick label on a log axis (decades, and the marks between them): plain decimals while the
/// axis stays within 0.001 ..= 10000, otherwise every mark as a power of ten ("10⁻⁴", "2×10⁻⁵").
fn log_tick(v: f64, powers: bool) -> String {
    if !powers {
        let s = format!("{:.4}", v);
        return s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let mut k = v.abs().log10().floor();
    let mut m = v / 10f64.powf(k);
    if (m.abs() - 10.0).abs() < 1e-6 {
        k += 1.0;
        m /= 10.0;
    }
    let exp: String = format!("{}", k as i32)
        .chars()
        .map(|c| match c {
            '-' => '⁻',
            d => ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'][d as usize - '0' as usize],
        })
        .collect();
    if (m - 1.0).abs() < 1e-6 {
        format!("10{exp}")
    } else {
        let m = format!("{m:.2}");
        format!("{}×10{exp}", m.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// "1.50e9" → "1.5e9", "1.00e-6" → "1e-6".
fn trim_exp(s: &str) -> String {
    match s.split_once('e') {
        Some((m, e)) if m.contains('.') => {
            format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.'))
        }
        _ => s.to_string(),
    }
}

/// One legend entry, in rows under the chart.
struct LegendEntry {
    row: u32,
    /// From the left of the plotting area, in pixels.
    x: u32,
    series: usize,
}

/// The legend's entries (named series only), wrapped into rows.
fn legend_layout(
    root: &DrawingArea<SVGBackend, Shift>,
    plot: &Plot,
    left: u32,
) -> Result<Vec<LegendEntry>> {
    let font: TextStyle = (FONT, LEGEND_FONT).into();
    let usable_width = WIDTH - left - 20;
    let (mut row, mut x) = (0, 0);
    let mut out = vec![];
    for (i, s) in plot.series.iter().enumerate() {
        if s.name.is_empty() {
            continue;
        }
        let (w, _) = root.estimate_text_size(&s.name, &font).map_err(err)?;
        let w = 30 + w + 24;
        if x > 0 && x + w > usable_width {
            row += 1;
            x = 0;
        }
        out.push(LegendEntry { row, x, series: i });
        x += w;
    }
    Ok(out)
}

fn draw<X>(root: &DrawingArea<SVGBackend, Shift>, plot: &Plot, x: X, r: &Ranges) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    const Y_AREA: u32 = 64;
    const MARGIN: u32 = 12;
    let entries = legend_layout(root, plot, Y_AREA + MARGIN)?;
    let rows = entries.last().map_or(0, |e| e.row + 1);
    let legend_h = if rows == 0 {
        0
    } else {
        rows * LEGEND_ROW + LEGEND_PAD
    };
    let (upper, lower) = root.split_vertically(HEIGHT - legend_h);

    let mut chart = ChartBuilder::on(&upper)
        .caption(&plot.title, (FONT, TITLE_FONT))
        .margin(MARGIN)
        .margin_right(24)
        .x_label_area_size(48)
        .y_label_area_size(Y_AREA)
        .build_cartesian_2d(x, r.y.clone())
        .map_err(err)?;
    let x_step = tick_step(&r.x);
    let powers = plot.x_log && (r.x.start < 0.99e-3 || r.x.end > 1.01e4);
    let x_fmt = |v: &f64| {
        if plot.x_log {
            log_tick(*v, powers)
        } else {
            tick(*v, &r.x, x_step)
        }
    };
    let y_step = tick_step(&r.y);
    let y_fmt = |v: &f64| tick(*v, &r.y, y_step);
    chart
        .configure_mesh()
        .x_desc(&plot.x_label)
        .y_desc(&plot.y_label)
        .x_labels(LABELS)
        .y_labels(LABELS)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, TICK_FONT))
        .axis_desc_style((FONT, DESC_FONT))
        .x_max_light_lines(if plot.x_log { 10 } else { 2 })
        .y_max_light_lines(2)
        .bold_line_style(RGBColor(200, 200, 200).stroke_width(1))
        .light_line_style(RGBColor(238, 238, 238).stroke_width(1))
        .draw()
        .map_err(err)?;

    // Levels first, so the data is drawn over them.
    let hlines: Vec<_> = plot.hlines.iter().filter(|l| l.value.is_finite()).collect();
    let vlines: Vec<_> = plot
        .vlines
        .iter()
        .filter(|l| usable(plot.x_log, (l.value, 0.0)))
        .collect();
    for l in &hlines {
        chart
            .draw_series(DashedLineSeries::new(
                [(r.x.start, l.value), (r.x.end, l.value)],
                7,
                5,
                HLINE.stroke_width(2),
            ))
            .map_err(err)?;
    }
    for l in &vlines {
        chart
            .draw_series(DashedLineSeries::new(
                [(l.value, r.y.start), (l.value, r.y.end)],
                5,
                5,
                VLINE.stroke_width(1),
            ))
            .map_err(err)?;
    }

    // Lines under points, so that a theory curve does not hide the measurements; each series
    // keeps the colour of its position.
    let lines = plot
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.style == Style::Line);
    let dots = plot
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.style == Style::Points);
    for (i, s) in lines.chain(dots) {
        let colour = PALETTE[i % PALETTE.len()];
        let points = drawable(plot, s);
        match s.style {
            Style::Line => {
                let width = if points.len() > 1000 { 1 } else { 2 };
                chart
                    .draw_series(LineSeries::new(points, colour.stroke_width(width)))
                    .map_err(err)?;
            }
            Style::Points => {
                let radius = if points.len() > 300 { 2 } else { 3 };
                chart
                    .draw_series(
                        points
                            .into_iter()
                            .map(|p| Circle::new(p, radius, colour.filled())),
                    )
                    .map_err(err)?;
            }
        }
    }

    // Level labels last, on a light box, so the data does not hide them. A horizontal level's
    // label sits at the right end, above the line (below it near the top); near the top, with
    // vertical labels on the right, it moves to the left end.
    let label_font: TextStyle = (FONT, LEVEL_FONT).into();
    let y_frac = |y: f64| (y - r.y.start) / (r.y.end - r.y.start);
    let x_frac = |x: f64| {
        if plot.x_log {
            (x.ln() - r.x.start.ln()) / (r.x.end.ln() - r.x.start.ln())
        } else {
            (x - r.x.start) / (r.x.end - r.x.start)
        }
    };
    let v_labels_right = vlines.iter().any(|l| x_frac(l.value) > 0.6);
    for l in &hlines {
        let high = y_frac(l.value) > 0.8;
        let below = y_frac(l.value) > 0.9;
        let left = high && v_labels_right;
        let (dy, v) = if below {
            (4, VPos::Top)
        } else {
            (-4, VPos::Bottom)
        };
        let (w, h) = root
            .estimate_text_size(&l.label, &label_font)
            .map_err(err)?;
        let (w, h) = (w as i32, h as i32);
        let (top, bottom) = if below { (dy, dy + h) } else { (dy - h, dy) };
        let (x, dx, hpos, x0) = if left {
            (r.x.start, 6, HPos::Left, 3)
        } else {
            (r.x.end, -6, HPos::Right, -9 - w)
        };
        let style = label_font.color(&HLINE).pos(Pos::new(hpos, v));
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((x, l.value))
                    + Rectangle::new(
                        [(x0, top - 1), (x0 + w + 6, bottom + 1)],
                        WHITE.mix(0.85).filled(),
                    )
                    + Text::new(l.label.clone(), (dx, dy), style),
            ))
            .map_err(err)?;
    }
    for (k, l) in vlines.iter().enumerate() {
        let (w, h) = root
            .estimate_text_size(&l.label, &label_font)
            .map_err(err)?;
        let (w, h) = (w as i32, h as i32);
        let right = x_frac(l.value) < 0.75;
        let dy = 4 + (h + 4) * k as i32;
        let (dx, hpos, x0) = if right {
            (5, HPos::Left, 2)
        } else {
            (-5, HPos::Right, -8 - w)
        };
        let style = label_font.color(&VLINE).pos(Pos::new(hpos, VPos::Top));
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((l.value, r.y.end))
                    + Rectangle::new(
                        [(x0, dy - 1), (x0 + w + 6, dy + h + 1)],
                        WHITE.mix(0.85).filled(),
                    )
                    + Text::new(l.label.clone(), (dx, dy), style),
            ))
            .map_err(err)?;
    }

    // The legend, under the chart, aligned with the plotting area.
    let font = (FONT, LEGEND_FONT).into_font();
    for LegendEntry {
        row,
        x: x0,
        series: i,
    } in entries
    {
        let colour = PALETTE[i % PALETTE.len()];
        let x = (Y_AREA + MARGIN + x0) as i32;
        let y = (row * LEGEND_ROW + LEGEND_ROW / 2) as i32;
        match plot.series[i].style {
            Style::Line => lower
                .draw(&PathElement::new(
                    [(x, y), (x + 24, y)],
                    colour.stroke_width(3),
                ))
                .map_err(err)?,
            Style::Points => lower
                .draw(&Circle::new((x + 12, y), 4, colour.filled()))
                .map_err(err)?,
        }
        lower
            .draw(&Text::new(
                plot.series[i].name.clone(),
                (x + 30, y),
                font.color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// The title, an empty frame and "no data".
fn no_data(root: &DrawingArea<SVGBackend, Shift>, plot: &Plot) -> Result<()> {
    let area = root.titled(&plot.title, (FONT, TITLE_FONT)).map_err(err)?;
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    area.draw(&Rectangle::new(
        [(80, 10), (w - 24, h - 40)],
        RGBColor(180, 180, 180).stroke_width(1),
    ))
    .map_err(err)?;
    area.draw(&Text::new(
        "no data",
        ((80 + w - 24) / 2, (h - 30) / 2),
        (FONT, 22)
            .into_font()
            .color(&RGBColor(120, 120, 120))
            .pos(Pos::new(HPos::Center, VPos::Center)),
    ))
    .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::qualify::Level;

    fn series(name: &str, style: Style, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            style,
            points,
        }
    }

    #[test]
    fn ranges_pad_flat_and_skip_non_finite() {
        let plot = Plot {
            series: vec![series(
                "flat",
                Style::Line,
                vec![
                    (0.0, 5.0),
                    (1.0, 5.0),
                    (f64::NAN, 1e9),
                    (2.0, f64::INFINITY),
                ],
            )],
            ..Default::default()
        };
        let r = Ranges::of(&plot).unwrap();
        assert!(
            r.y.start < 5.0 && r.y.end > 5.0 && r.y.end - r.y.start < 2.0,
            "{:?}",
            r.y
        );
        assert!(
            r.x.start < 0.0 && r.x.end > 1.0 && r.x.end < 2.0,
            "{:?}",
            r.x
        );
        // All zero: still a range.
        let zero = Plot {
            series: vec![series("z", Style::Points, vec![(3.0, 0.0)])],
            ..Default::default()
        };
        let r = Ranges::of(&zero).unwrap();
        assert!(r.x.start < 3.0 && r.x.end > 3.0 && r.y.start < 0.0 && r.y.end > 0.0);
        // Nothing drawable: no ranges ("no data").
        let empty = Plot {
            series: vec![series("nan", Style::Line, vec![(f64::NAN, 1.0)])],
            hlines: vec![Level {
                label: "limit".into(),
                value: 3.0,
            }],
            ..Default::default()
        };
        assert!(Ranges::of(&empty).is_none());
    }

    #[test]
    fn log_ranges_span_decades_and_drop_non_positive() {
        let plot = Plot {
            x_log: true,
            series: vec![series(
                "s",
                Style::Points,
                vec![(-1.0, 0.0), (0.0, 0.0), (2.0, 1.0), (8.0, 2.0)],
            )],
            ..Default::default()
        };
        let r = Ranges::of(&plot).unwrap();
        assert_eq!((r.x.start, r.x.end), (1.0, 10.0));
        let wide = Plot {
            x_log: true,
            series: vec![series("s", Style::Line, vec![(1e-3, 0.0), (1.0, 1.0)])],
            ..Default::default()
        };
        let r = Ranges::of(&wide).unwrap();
        assert!(r.x.start < 1e-3 && r.x.start > 5e-4 && r.x.end > 1.0 && r.x.end < 2.0);
    }

    #[test]
    fn ticks() {
        assert_eq!(tick_step(&(-130.0..5.0)), 20.0);
        assert_eq!(tick_step(&(-4.3..1.1)), 1.0);
        assert_eq!(tick(-120.0, &(-130.0..5.0), 20.0), "-120");
        assert_eq!(tick(0.30000000000000004, &(0.0..1.0), 0.1), "0.3");
        assert_eq!(tick(1.0, &(0.0..2.0), 0.5), "1.0");
        assert_eq!(tick(-0.00001, &(-1.0..1.0), 0.2), "0.0");
        assert_eq!(tick(-2.0, &(-4.3..1.1), 1.0), "-2");
        assert_eq!(tick(1.5e9, &(1e9..2e9), 5e8), "1.5e9");
        assert_eq!(tick(2e9, &(1e9..2e9), 5e8), "2e9");
        assert_eq!(log_tick(0.001, false), "0.001");
        assert_eq!(log_tick(100.0, false), "100");
        assert_eq!(log_tick(1e-4, true), "10⁻⁴");
        assert_eq!(log_tick(1.0, true), "10⁰");
        assert_eq!(log_tick(1e7, true), "10⁷");
        assert_eq!(log_tick(2e-5, true), "2×10⁻⁵");
        assert_eq!(log_tick(0.09999999999999999, true), "10⁻¹");
    }

    #[test]
    fn draws_series_levels_and_no_data() {
        let plot = Plot {
            title: "a <title> & more".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_log: false,
            series: vec![
                series("line", Style::Line, vec![(0.0, 0.0), (1.0, 1.0)]),
                series("dots", Style::Points, vec![(0.5, 0.2), (0.7, 0.9)]),
            ],
            hlines: vec![Level {
                label: "limit".into(),
                value: 0.8,
            }],
            vlines: vec![Level {
                label: "here".into(),
                value: 0.25,
            }],
        };
        let s = svg(&plot).unwrap();
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("a &lt;title&gt; &amp; more"));
        for text in ["line", "dots", "limit", "here"] {
            assert!(s.contains(&format!("{text}\n</text>")), "{text}");
        }
        let empty = Plot {
            title: "nothing".into(),
            ..Default::default()
        };
        let s = svg(&empty).unwrap();
        assert!(s.contains("no data") && s.contains("nothing"));
    }
}

//! The qualification report as one self-contained HTML page (`qualify.html`) next to its data
//! (`qualify.json`).
//!
//! The page has no external assets: inline CSS, plots as inline SVG ([`plot::svg`]), system
//! fonts, no JavaScript and no URL the browser would fetch. It reads top to bottom: a header
//! with the system under test and the overall verdict, a summary table (one row per test, its
//! title linking to its section), then one section per test with its requirement, method,
//! outcome (the reason of a fail or a not-run set apart), figures and plots. It prints too.
//!
//! All text from the records is escaped; "://" is written as ":&#47;&#47;", which reads the same,
//! so that the page's source holds no URL at all beyond the SVG namespace.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::plot;
use super::report::write_json;
use crate::record::qualify::{Figure, Outcome, QualifyReport, SystemUnderTest, TestRecord};

/// Writes `qualify.html` and `qualify.json` (the report, pretty) into `dir`, creating it.
pub fn write(dir: &Path, report: &QualifyReport) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let html = dir.join("qualify.html");
    let json = dir.join("qualify.json");
    let page = page(report)?;
    std::fs::write(&html, page).with_context(|| format!("writing {}", html.display()))?;
    write_json(&json, report)?;
    Ok((html, json))
}

/// The whole page.
pub fn page(report: &QualifyReport) -> Result<String> {
    let mut h = String::with_capacity(64 * 1024);
    let verdict = if report.pass { "PASS" } else { "FAIL" };
    let sys = &report.system;
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(
        h,
        "<title>{verdict}: F-engine qualification, {} {} channels{}, {}</title>",
        esc(&sys.backend),
        sys.channels,
        sys.band
            .as_ref()
            .map(|b| format!(" {}", esc(&b.kind)))
            .unwrap_or_default(),
        esc(&utc(report.started_unix))
    );
    let _ = writeln!(h, "<style>{CSS}</style>\n</head>\n<body>");
    header(&mut h, report);
    summary(&mut h, report);
    for (i, t) in report.tests.iter().enumerate() {
        section(&mut h, i, t)?;
    }
    let _ = writeln!(
        h,
        "<footer>Written by harness {} (<code>harness qualify</code>). \
         The same records, every plotted point included, are in <code>qualify.json</code> \
         next to this page.</footer>\n</body>\n</html>",
        esc(&sys.harness_version)
    );
    Ok(h)
}

fn header(h: &mut String, report: &QualifyReport) {
    let sys: &SystemUnderTest = &report.system;
    let class = if report.pass { "pass" } else { "fail" };
    let verdict = if report.pass { "PASS" } else { "FAIL" };
    let count = |f: fn(&Outcome) -> bool| report.tests.iter().filter(|t| f(&t.outcome)).count();
    let passed = count(|o| matches!(o, Outcome::Pass));
    let failed = count(|o| matches!(o, Outcome::Fail { .. }));
    let not_run = count(|o| matches!(o, Outcome::NotRun { .. }));
    let _ = writeln!(h, "<header class=\"top\">");
    let _ = writeln!(
        h,
        "<div class=\"verdict {class}\"><span class=\"word\">{verdict}</span>\
         <span class=\"counts\">{passed} passed · {failed} failed · {not_run} not run</span></div>"
    );
    let _ = writeln!(h, "<div class=\"about\">");
    let _ = writeln!(
        h,
        "<h1>F-engine qualification{} <span class=\"run\">{}</span></h1>",
        match (&sys.output, &sys.band) {
            (Some(o), Some(b)) => format!(" of output {} ({})", esc(o), esc(&b.kind)),
            (Some(o), None) => format!(" of output {}", esc(o)),
            _ => String::new(),
        },
        if report.quick {
            "quick subset"
        } else {
            "full suite"
        }
    );
    // Three columns: the engine's geometry, its input, the run, where it was reached.
    let rows: [(&str, String); 13] = [
        ("Backend", esc(&sys.backend)),
        ("Channels", sys.channels.to_string()),
        ("Taps", sys.taps.to_string()),
        ("ADC rate", esc(&rate(sys.adc_sample_rate))),
        ("Sample bits", sys.sample_bits.to_string()),
        ("Output bits", sys.output_bits.to_string()),
        ("Spectra per heap", sys.spectra_per_heap.to_string()),
        ("Started", esc(&utc(report.started_unix))),
        ("Took", esc(&duration(report.duration_s))),
        ("Harness", esc(&sys.harness_version)),
        (
            "Engine",
            esc(&match &sys.output {
                Some(o) => format!("{}, output {o}", sys.engine_url),
                None => sys.engine_url.clone(),
            }),
        ),
        ("dsim", esc(&sys.dsim_url)),
        (
            "Band judged",
            esc(&sys.band.as_ref().map(|b| b.describe()).unwrap_or_default()),
        ),
    ];
    let _ = writeln!(h, "<dl class=\"system\">");
    for (k, v) in rows {
        let v = if v.is_empty() { "—".into() } else { v };
        let class = if matches!(k, "Engine" | "dsim") {
            " class=\"url\""
        } else {
            ""
        };
        let _ = writeln!(h, "<div><dt>{k}</dt><dd{class}>{v}</dd></div>");
    }
    let _ = writeln!(h, "</dl>\n</div>\n</header>");
}

fn summary(h: &mut String, report: &QualifyReport) {
    let _ = writeln!(h, "<section class=\"summary\">\n<h2>Summary</h2>");
    if report.tests.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"reason notrun\">No test was run.</p>\n</section>"
        );
        return;
    }
    let _ = writeln!(
        h,
        "<table>\n<thead><tr><th class=\"n\">#</th><th>Test</th><th>Outcome</th>\
         <th>Headline figure</th><th>Limit</th><th>Requirement</th></tr></thead>\n<tbody>"
    );
    for (i, t) in report.tests.iter().enumerate() {
        let (figure, limit) = match t.figures.first() {
            Some(f) => (
                format!(
                    "<span class=\"fname\">{}</span> <span class=\"value\">{}{}</span>",
                    esc(&f.name),
                    esc(&with_unit(f)),
                    mark(f.pass)
                ),
                esc(&limit_with_unit(f)),
            ),
            None => ("—".into(), String::new()),
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"n\">{}</td><td class=\"title\"><a href=\"#{}\">{}</a></td><td>{}</td>\
             <td class=\"headline\">{figure}</td><td class=\"limit\">{limit}</td><td class=\"req\">{}</td></tr>",
            i + 1,
            anchor(i, t),
            esc(&t.title),
            outcome_badge(&t.outcome),
            esc(&t.requirement)
        );
    }
    let _ = writeln!(h, "</tbody>\n</table>\n</section>");
}

fn section(h: &mut String, i: usize, t: &TestRecord) -> Result<()> {
    let _ = writeln!(
        h,
        "<section class=\"test\" id=\"{}\">\n<h2><span class=\"n\">{}.</span> {} {}</h2>",
        anchor(i, t),
        i + 1,
        esc(&t.title),
        outcome_badge(&t.outcome)
    );
    match &t.outcome {
        Outcome::Pass => {}
        Outcome::Fail { reason } => {
            let _ = writeln!(
                h,
                "<p class=\"reason fail\"><strong>Failed:</strong> {}</p>",
                esc(reason)
            );
        }
        Outcome::NotRun { reason } => {
            let _ = writeln!(
                h,
                "<p class=\"reason notrun\"><strong>Not run:</strong> {}</p>",
                esc(reason)
            );
        }
    }
    let _ = writeln!(
        h,
        "<dl class=\"what\">\n<dt>Requirement</dt><dd>{}</dd>\n<dt>Method</dt><dd>{}</dd>\n\
         <dt>Test</dt><dd><code>{}</code>{}</dd>\n</dl>",
        esc(&t.requirement),
        esc(&t.method),
        esc(&t.name),
        match &t.outcome {
            Outcome::NotRun { .. } => String::new(),
            _ => format!(", took {}", esc(&duration(t.duration_s))),
        }
    );
    if !t.figures.is_empty() {
        let _ = writeln!(
            h,
            "<table class=\"figures\">\n<thead><tr><th>Figure</th><th class=\"num\">Value</th>\
             <th>Unit</th><th>Limit</th><th>Result</th></tr></thead>\n<tbody>"
        );
        for f in &t.figures {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"limit\">{}</td>\
                 <td>{}</td></tr>",
                esc(&f.name),
                esc(&number(f.value)),
                esc(&f.unit),
                esc(&limit(f)),
                result(f.pass)
            );
        }
        let _ = writeln!(h, "</tbody>\n</table>");
    }
    for p in &t.plots {
        let svg = plot::svg(p).with_context(|| format!("plot {:?} of {}", p.title, t.name))?;
        let _ = writeln!(h, "<figure class=\"plot\">\n{}</figure>", no_urls_svg(&svg));
    }
    let _ = writeln!(h, "</section>");
    Ok(())
}

const CSS: &str = r#"
:root { --pass: #1a7f37; --fail: #c62828; --notrun: #9a6700; --ink: #1f2328; --muted: #59636e;
  --rule: #d1d9e0; --soft: #f6f8fa; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans",
  "Liberation Sans", Arial, sans-serif; color: var(--ink); background: #fff; max-width: 1000px;
  margin: 0 auto; padding: 24px 28px 48px; line-height: 1.45; font-size: 15px; }
h1 { font-size: 26px; margin: 0 0 10px; }
h1 .run { display: inline-block; vertical-align: middle; font-size: 14px; font-weight: 600;
  color: var(--ink); background: var(--soft); border: 1px solid var(--rule); border-radius: 6px;
  padding: 2px 10px; margin-left: 6px; }
h2 { font-size: 21px; margin: 0 0 12px; }
h2 .n { color: var(--muted); }
code { font-family: ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace;
  font-size: 0.92em; }
a { color: inherit; }
header.top { display: flex; gap: 28px; align-items: flex-start; padding-bottom: 18px;
  border-bottom: 3px solid var(--ink); }
.verdict { flex: none; width: 250px; text-align: center; color: #fff; border-radius: 10px;
  padding: 14px 10px 12px; }
.verdict.pass { background: var(--pass); }
.verdict.fail { background: var(--fail); }
.verdict .word { display: block; font-size: 54px; font-weight: 800; letter-spacing: 3px;
  line-height: 1; }
.verdict .counts { display: block; margin-top: 8px; font-size: 12px; font-weight: 600;
  white-space: nowrap; }
.about { flex: 1; min-width: 0; }
dl.system { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 6px 16px;
  margin: 0; }
dl.system div { min-width: 0; }
dl.system dt { font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em;
  color: var(--muted); }
dl.system dd { margin: 0; font-weight: 600; }
dl.system dd.url { overflow-wrap: anywhere; font-weight: 500; }
section { margin-top: 30px; }
section.test { border-top: 1px solid var(--rule); padding-top: 22px; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 14px; }
th, td { text-align: left; vertical-align: top; padding: 6px 10px;
  border-bottom: 1px solid var(--rule); }
thead th { background: var(--soft); font-size: 13px; border-bottom: 2px solid var(--rule); }
td.n, th.n { width: 2em; color: var(--muted); text-align: right; }
td.req { color: var(--muted); font-size: 14px; }
td.title { min-width: 11em; font-weight: 600; }
td.headline .fname { display: block; font-size: 13px; color: var(--muted); }
td.headline .value { font-weight: 700; }
td.limit, .value { white-space: nowrap; }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.figures { width: auto; min-width: 60%; }
.badge { display: inline-block; font-size: 13px; font-weight: 700; padding: 1px 9px;
  border-radius: 999px; border: 1.5px solid currentColor; vertical-align: middle;
  white-space: nowrap; }
.o-pass { color: var(--pass); }
.o-fail { color: #fff; background: var(--fail); border-color: var(--fail); }
.o-notrun { color: var(--notrun); }
.mark-pass { color: var(--pass); font-weight: 700; }
.mark-fail { color: var(--fail); font-weight: 700; }
.mark-none { color: var(--muted); }
.reason { margin: 0 0 14px; padding: 10px 14px; border-left: 6px solid; border-radius: 4px;
  font-size: 16px; }
.reason.fail { border-color: var(--fail); background: #fdecea; }
.reason.notrun { border-color: var(--notrun); background: #fff4d6; }
dl.what { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 8px; }
dl.what dt { font-weight: 700; }
dl.what dd { margin: 0; }
figure.plot { margin: 14px 0; }
figure.plot svg { display: block; width: 100%; height: auto; border: 1px solid var(--rule); }
footer { margin-top: 40px; padding-top: 10px; border-top: 1px solid var(--rule);
  color: var(--muted); font-size: 13px; }
@media (max-width: 720px) { header.top { flex-direction: column; }
  dl.system { grid-template-columns: repeat(2, minmax(0, 1fr)); } }
@media print {
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  body { max-width: none; padding: 0; font-size: 10.5pt; }
  a { text-decoration: none; }
  header.top, tr, figure.plot, .reason, dl.what { break-inside: avoid; }
  section.test { break-before: page; border-top: none; padding-top: 0; margin-top: 0; }
  h2 { break-after: avoid; }
  figure.plot svg { border: none; }
}
"#;

/// HTML-escapes text (element content and attribute values), and writes "://" so that the
/// source holds no URL.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out.replace("://", ":&#47;&#47;")
}

const SVG_XMLNS: &str = "xmlns=\"http://www.w3.org/2000/svg\"";

/// The SVG with "://" in its text written as in [`esc`], its namespace attribute left as is.
fn no_urls_svg(svg: &str) -> String {
    svg.split(SVG_XMLNS)
        .map(|part| part.replace("://", ":&#47;&#47;"))
        .collect::<Vec<_>>()
        .join(SVG_XMLNS)
}

/// The section's id: its position and its name, reduced to characters safe in a fragment.
fn anchor(i: usize, t: &TestRecord) -> String {
    let name: String = t
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("t{}-{name}", i + 1)
}

fn outcome_badge(o: &Outcome) -> String {
    let class = match o {
        Outcome::Pass => "o-pass",
        Outcome::Fail { .. } => "o-fail",
        Outcome::NotRun { .. } => "o-notrun",
    };
    format!("<span class=\"badge {class}\">{}</span>", o.word())
}

fn mark(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => " <span class=\"mark-pass\" title=\"met\">✓</span>",
        Some(false) => " <span class=\"mark-fail\" title=\"not met\">✗</span>",
        None => "",
    }
}

fn result(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "<span class=\"mark-pass\">✓ pass</span>",
        Some(false) => "<span class=\"mark-fail\">✗ FAIL</span>",
        None => "<span class=\"mark-none\">info</span>",
    }
}

/// The limit with ≥ and ≤ for >= and <=; empty when the figure is not judged.
fn limit(f: &Figure) -> String {
    f.limit
        .as_deref()
        .map(|l| l.replace(">=", "≥").replace("<=", "≤"))
        .unwrap_or_default()
}

/// The limit with the figure's unit, for the summary ("≥ 53 dB").
fn limit_with_unit(f: &Figure) -> String {
    match limit(f) {
        l if l.is_empty() || f.unit.is_empty() => l,
        l if f.unit.starts_with('°') => format!("{l}{}", f.unit),
        l => format!("{l} {}", f.unit),
    }
}

fn with_unit(f: &Figure) -> String {
    let v = number(f.value);
    if f.unit.is_empty() {
        v
    } else if f.unit.starts_with('°') {
        format!("{v}{}", f.unit)
    } else {
        format!("{v} {}", f.unit)
    }
}

/// A measured value for people: integers as integers (counts, channels) below ten million,
/// otherwise four significant digits without trailing zeros, exponent notation outside
/// 0.001 ..= 10 million.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞" } else { "−∞" }.into();
    }
    if v == v.trunc() && v.abs() < 1e7 {
        return format!("{v:.0}");
    }
    let a = v.abs();
    if !(1e-3..1e7).contains(&a) {
        let s = format!("{v:.3e}");
        return match s.split_once('e') {
            Some((m, e)) => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
            None => s,
        };
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A sample rate with an SI prefix: "1.712 Gsample/s".
fn rate(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 {
        return String::new();
    }
    let (div, prefix) = match r {
        r if r >= 1e9 => (1e9, "G"),
        r if r >= 1e6 => (1e6, "M"),
        r if r >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    format!("{} {prefix}sample/s", number(r / div))
}

/// "0.4 s", "42 s", "3 min 5 s", "1 h 02 min".
fn duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return String::new();
    }
    if s < 10.0 {
        return format!("{s:.1} s");
    }
    let t = s.round() as u64;
    match t {
        t if t < 60 => format!("{t} s"),
        t if t < 3600 => format!("{} min {} s", t / 60, t % 60),
        t => format!("{} h {:02} min", t / 3600, t % 3600 / 60),
    }
}

/// Unix time as "2025-03-14 09:26:53 UTC".
fn utc(unix: f64) -> String {
    if !unix.is_finite() {
        return String::new();
    }
    let secs = unix.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::qualify::{Level, Plot, Series, Style};

    fn system() -> SystemUnderTest {
        SystemUnderTest {
            engine_url: "http://fengine:7147".into(),
            output: Some("wideband".into()),
            dsim_url: "https://dsim:8080".into(),
            backend: "cuda".into(),
            channels: 4096,
            taps: 16,
            spectra_per_heap: 256,
            adc_sample_rate: 1.712e9,
            sample_bits: 10,
            output_bits: 8,
            band: Some(crate::record::qualify::JudgedBand {
                kind: "narrowband".into(),
                low_hz: 1.75e6,
                high_hz: 2.75e6,
                centre_hz: Some(2.25e6),
                decimation: 8,
                pass_band_hz: None,
            }),
            harness_version: "0.1.0".into(),
        }
    }

    fn synthetic() -> QualifyReport {
        let spectrum: Vec<(f64, f64)> = (0..512)
            .map(|c| {
                let x = c as f64;
                (
                    x,
                    if c == 100 {
                        0.0
                    } else {
                        -90.0 + (x * 0.37).sin()
                    },
                )
            })
            .collect();
        let linear: Vec<(f64, f64)> = (0..12)
            .map(|k| {
                let a = 1e-3 * 2f64.powi(k);
                (a, 20.0 * a.log10() + 0.01 * k as f64)
            })
            .collect();
        QualifyReport {
            started_unix: 1_741_944_413.25,
            duration_s: 754.5,
            system: system(),
            quick: true,
            tests: vec![
                TestRecord {
                    name: "channelisation".into(),
                    title: "Channelisation & SFDR <dB>".into(),
                    requirement: "SFDR >= 53 dB & tone in the right channel".into(),
                    method: "Tone at 100 channels; spectrum from <GET /spectrum>.".into(),
                    outcome: Outcome::Pass,
                    figures: vec![
                        Figure::at_least("SFDR", 89.123456, "dB", 53.0),
                        Figure::exactly("peak channel", 100.0, "", 100.0),
                        Figure::info("noise floor", -90.0, "dB"),
                    ],
                    plots: vec![
                        Plot {
                            title: "Spectrum <tone> & spurs".into(),
                            x_label: "channel".into(),
                            y_label: "power (dB)".into(),
                            x_log: false,
                            series: vec![Series {
                                name: "measured".into(),
                                style: Style::Line,
                                points: spectrum,
                            }],
                            hlines: vec![Level {
                                label: "SFDR limit -53 dB".into(),
                                value: -53.0,
                            }],
                            vlines: vec![Level {
                                label: "tone".into(),
                                value: 100.0,
                            }],
                        },
                        Plot {
                            title: "Linearity".into(),
                            x_label: "amplitude (full scale)".into(),
                            y_label: "output (dB)".into(),
                            x_log: true,
                            series: vec![
                                Series {
                                    name: "measured".into(),
                                    style: Style::Points,
                                    points: linear.clone(),
                                },
                                Series {
                                    name: "ideal".into(),
                                    style: Style::Line,
                                    points: linear
                                        .iter()
                                        .map(|&(a, _)| (a, 20.0 * a.log10()))
                                        .collect(),
                                },
                            ],
                            hlines: vec![],
                            vlines: vec![],
                        },
                    ],
                    duration_s: 12.5,
                },
                TestRecord {
                    name: "gains".into(),
                    title: "Gain control".into(),
                    requirement: "Gains apply within 1 heap".into(),
                    method: "PUT gains, then read back.".into(),
                    outcome: Outcome::Fail {
                        reason:
                            "gain applied 3 heaps late (<1 wanted) & see http://fengine:7147/status"
                                .into(),
                    },
                    figures: vec![Figure::at_most("delay", 3.0, "heaps", 1.0)],
                    plots: vec![Plot {
                        title: "Empty".into(),
                        ..Default::default()
                    }],
                    duration_s: 4.0,
                },
                TestRecord {
                    name: "delay".into(),
                    title: "Delay tracking".into(),
                    requirement: "Delay error <= 0.1 sample".into(),
                    method: "Step the delay.".into(),
                    outcome: Outcome::NotRun {
                        reason: "dsim has no delay control".into(),
                    },
                    figures: vec![],
                    plots: vec![],
                    duration_s: 0.0,
                },
            ],
            pass: false,
        }
    }

    #[test]
    fn numbers_durations_dates() {
        assert_eq!(number(89.123456), "89.12");
        assert_eq!(number(4096.0), "4096");
        assert_eq!(number(-0.5), "-0.5");
        assert_eq!(number(0.012345), "0.01235");
        assert_eq!(number(1.712e9), "1.712e9");
        assert_eq!(number(2.5e-6), "2.5e-6");
        assert_eq!(number(123456.7), "123457");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(rate(1.712e9), "1.712 Gsample/s");
        assert_eq!(duration(754.5), "12 min 35 s");
        assert_eq!(duration(4.0), "4.0 s");
        assert_eq!(duration(3725.0), "1 h 02 min");
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_741_944_413.25), "2025-03-14 09:26:53 UTC");
        assert_eq!(utc(951_825_600.0), "2000-02-29 12:00:00 UTC");
    }

    #[test]
    fn page_is_self_contained_and_escaped() {
        let r = synthetic();
        let page = page(&r).unwrap();
        let plots: usize = r.tests.iter().map(|t| t.plots.len()).sum();
        assert_eq!(plots, 3);
        assert_eq!(page.matches("<svg").count(), plots);
        // The only URL is the SVG namespace, once per plot.
        assert_eq!(page.matches(SVG_XMLNS).count(), plots);
        let rest = page.replace(SVG_XMLNS, "");
        for scheme in ["http://", "https://", "//"] {
            assert!(!rest.contains(scheme), "{scheme} in the page");
        }
        let lower = page.to_lowercase();
        for tag in [
            "<script", "<link", "<img", "<iframe", "<object", "url(", "@import", "src=",
        ] {
            assert!(!lower.contains(tag), "{tag} in the page");
        }
        // Escaped text, never the raw characters.
        assert!(page.contains("Channelisation &amp; SFDR &lt;dB&gt;"));
        assert!(!page.contains("SFDR <dB>"));
        assert!(page.contains("Tone at 100 channels; spectrum from &lt;GET /spectrum&gt;."));
        assert!(page.contains("(&lt;1 wanted) &amp; see http:&#47;&#47;fengine:7147/status"));
        assert!(page.contains("Spectrum &lt;tone&gt; &amp; spurs"));
        assert!(
            page.contains("http:&#47;&#47;fengine:7147")
                && page.contains("https:&#47;&#47;dsim:8080")
        );
        // The header, the summary's links and outcomes, the sections.
        assert!(page.contains("<span class=\"word\">FAIL</span>"));
        assert!(page.contains("1 passed · 1 failed · 1 not run"));
        assert!(page.contains("quick subset") && page.contains("1.712 Gsample/s"));
        assert!(page.contains("2025-03-14 09:26:53 UTC") && page.contains("12 min 35 s"));
        for (i, t) in r.tests.iter().enumerate() {
            let id = anchor(i, t);
            assert!(page.contains(&format!("href=\"#{id}\"")), "{id}");
            assert!(page.contains(&format!("id=\"{id}\"")), "{id}");
        }
        assert!(
            page.contains("<span class=\"fname\">SFDR</span> <span class=\"value\">89.12 dB <span")
        );
        assert!(page.contains("≥ 53 dB") && page.contains("≤ 1 heaps") && page.contains("= 100"));
        assert!(page.contains("<strong>Failed:</strong> gain applied 3 heaps late"));
        assert!(page.contains("<strong>Not run:</strong> dsim has no delay control"));
        assert!(page.contains("no data"));
        assert!(page.contains("✗ FAIL") && page.contains("✓ pass") && page.contains(">info<"));
        // Tags balance where it matters.
        for tag in ["section", "table", "figure", "svg", "dl", "header"] {
            assert_eq!(
                page.matches(&format!("<{tag}")).count(),
                page.matches(&format!("</{tag}>")).count(),
                "{tag}"
            );
        }
    }

    #[test]
    fn non_finite_values_render() {
        let mut r = synthetic();
        r.tests[0].figures[0].value = f64::NAN;
        r.tests[0].plots[0].series[0].points.push((f64::NAN, 1.0));
        r.tests[0].plots[1].series[0]
            .points
            .push((0.0, f64::NEG_INFINITY));
        let page = page(&r).unwrap();
        assert_eq!(page.matches("<svg").count(), 3);
        assert!(page.contains("<span class=\"value\">NaN dB <span"));
    }

    #[test]
    fn writes_html_and_json_that_reads_back() {
        let r = synthetic();
        let dir = std::env::temp_dir().join(format!("harness-qualify-{}", std::process::id()));
        let (html, json) = write(&dir, &r).unwrap();
        assert_eq!(html, dir.join("qualify.html"));
        assert_eq!(json, dir.join("qualify.json"));
        assert_eq!(std::fs::read_to_string(&html).unwrap(), page(&r).unwrap());
        let text = std::fs::read_to_string(&json).unwrap();
        assert!(text.contains("\n  \"tests\": ["), "pretty JSON");
        let back: QualifyReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.started_unix, r.started_unix);
        assert_eq!(back.duration_s, r.duration_s);
        assert_eq!(back.pass, r.pass);
        assert_eq!(back.quick, r.quick);
        assert_eq!(back.system.channels, r.system.channels);
        assert_eq!(back.system.adc_sample_rate, r.system.adc_sample_rate);
        assert_eq!(back.tests.len(), r.tests.len());
        for (b, t) in back.tests.iter().zip(&r.tests) {
            assert_eq!(b.name, t.name);
            assert_eq!(b.outcome, t.outcome);
            assert_eq!(b.figures, t.figures);
            assert_eq!(b.duration_s, t.duration_s);
            assert_eq!(b.plots.len(), t.plots.len());
            for (bp, tp) in b.plots.iter().zip(&t.plots) {
                assert_eq!(bp.x_log, tp.x_log);
                assert_eq!(bp.hlines, tp.hlines);
                assert_eq!(bp.vlines, tp.vlines);
                assert_eq!(bp.series.len(), tp.series.len());
                for (bs, ts) in bp.series.iter().zip(&tp.series) {
                    assert_eq!(bs.style, ts.style);
                    assert_eq!(bs.points.len(), ts.points.len());
                    for (i, (b, t)) in bs.points.iter().zip(&ts.points).enumerate() {
                        assert!(
                            b == t,
                            "{}: point {i} read back as {b:?}, was {t:?}",
                            tp.title
                        );
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

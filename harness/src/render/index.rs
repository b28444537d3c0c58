//! `index.html` of a report folder: one page that links every report a command has written
//! there (max-rate, response, qualify, and any other plot or data file), the plots shown in
//! place. Each command rewrites it after writing its own files, so commands that share an
//! `--out-dir` share one index.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::html::esc;

/// The reports the harness writes, by file name: a title and what the file holds.
const KNOWN: [(&str, &str, &str); 13] = [
    (
        "qualify.html",
        "Qualification",
        "the qualification report (tests, figures, plots)",
    ),
    (
        "max-rate.svg",
        "Max rate",
        "offered against received rate per trial, pass or fail, references, cores busy",
    ),
    ("max-rate.txt", "Max rate", "the trials as a table"),
    (
        "max-rate.json",
        "Max rate",
        "the search, every trial and the references as JSON",
    ),
    (
        "response.svg",
        "Channel response",
        "measured against theoretical response",
    ),
    ("response.json", "Channel response", "every point as JSON"),
    ("qualify.json", "Qualification", "the figures as JSON"),
    (
        "soak-rss.svg",
        "Soak",
        "each process's resident memory over time",
    ),
    (
        "soak-growth.svg",
        "Soak",
        "each process's memory, descriptors and threads against its baseline",
    ),
    (
        "soak.json",
        "Soak",
        "every sample, the verdict and its reasons as JSON",
    ),
    (
        "soak-risk.svg",
        "Soak at fractions of the max rate",
        "loss events per hour against the fraction of the max rate",
    ),
    (
        "soak-risk.txt",
        "Soak at fractions of the max rate",
        "loss events per hour at each fraction, as a table",
    ),
    (
        "soak-risk.json",
        "Soak at fractions of the max rate",
        "each fraction's loss events as JSON",
    ),
];

/// Writes `dir/index.html` from the files in `dir`; its path.
pub fn write(dir: &Path) -> Result<PathBuf> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n != "index.html" && is_report(n))
        .collect();
    // Known reports first, in KNOWN's order, then the rest by name.
    names.sort_by_key(|n| {
        (
            KNOWN.iter().position(|k| k.0 == n).unwrap_or(KNOWN.len()),
            n.clone(),
        )
    });
    let path = dir.join("index.html");
    std::fs::write(&path, page(&dir.display().to_string(), &names))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn is_report(name: &str) -> bool {
    [".svg", ".html", ".json", ".txt"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

fn page(folder: &str, names: &[String]) -> String {
    let mut body = String::new();
    let mut section = "";
    for name in names {
        let (title, what) = KNOWN
            .iter()
            .find(|k| k.0 == name)
            .map_or(("Other files", ""), |k| (k.1, k.2));
        if title != section {
            let _ = writeln!(body, "<h2>{}</h2>", esc(title));
            section = title;
        }
        let link = esc(name);
        if name.ends_with(".svg") {
            let _ = writeln!(
                body,
                "<figure><a href=\"{link}\"><img src=\"{link}\" alt=\"{link}\"></a>\
                 <figcaption><a href=\"{link}\">{link}</a> {}</figcaption></figure>",
                esc(what)
            );
        } else {
            let _ = writeln!(
                body,
                "<p><a href=\"{link}\">{link}</a> <span>{}</span></p>",
                esc(what)
            );
        }
    }
    if names.is_empty() {
        body.push_str("<p>No reports here yet.</p>\n");
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>harness reports: {f}</title>\n<style>\n\
         body {{ font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #1d2430; }}\n\
         h1 {{ font-size: 1.5em; }} h2 {{ margin-top: 1.6em; border-bottom: 1px solid #dde1e8; }}\n\
         figure {{ margin: 1em 0; }} img {{ max-width: 100%; border: 1px solid #dde1e8; }}\n\
         span, figcaption {{ color: #5b6475; }}\n\
         </style></head>\n<body>\n<h1>harness reports in {f}</h1>\n{body}</body></html>\n",
        f = esc(folder)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_every_report_and_shows_the_plots() {
        let dir = std::env::temp_dir().join(format!("harness-index-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        for f in [
            "response.svg",
            "max-rate.svg",
            "max-rate.json",
            "extra.svg",
            "fengine.log",
        ] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let html = std::fs::read_to_string(write(&dir).unwrap()).unwrap();
        let at = |s: &str| {
            html.find(s)
                .unwrap_or_else(|| panic!("{s} missing from {html}"))
        };
        assert!(at("<img src=\"max-rate.svg\"") < at("<img src=\"response.svg\""));
        assert!(at("<img src=\"response.svg\"") < at("<img src=\"extra.svg\""));
        at("<a href=\"max-rate.json\">");
        assert!(
            !html.contains("fengine.log") && !html.contains("logs"),
            "{html}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

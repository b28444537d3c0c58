//! Placeholder: replaced by the report renderer.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::record::qualify::QualifyReport;

pub fn write(dir: &Path, report: &QualifyReport) -> Result<(PathBuf, PathBuf)> {
    let json = dir.join("qualify.json");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)?;
    let html = dir.join("qualify.html");
    std::fs::write(&html, "<html></html>")?;
    Ok((html, json))
}

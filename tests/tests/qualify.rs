//! (5) `harness qualify --quick` in a container against dsim and the engine (CPU backend) in
//! theirs: every test of the suite runs and passes, and the report is written.

use std::time::Duration;

use acceptance::{docker, log_tail, Pipeline, Session, OUTPUT};
use anyhow::{Context, Result};

#[test]
fn qualify_quick_subset_passes_in_containers() -> Result<()> {
    let Some(session) = Session::start("qualify") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let (dsim, engine) = (p.dsim_url(), p.engine_url());
    let (code, c) = p.run_harness(
        "qualify",
        &[
            "qualify",
            "--quick",
            "--dst",
            OUTPUT,
            "--dsim-url",
            &dsim,
            "--engine-url",
            &engine,
            "--out-dir",
            "/data/qualify",
        ],
        Duration::from_secs(900),
    )?;
    let host = std::env::temp_dir().join(format!("{}-qualify", p.prefix));
    let _ = std::fs::remove_dir_all(&host);
    docker(&[
        "cp",
        &format!("{}:/data/qualify", c.id()),
        host.to_str().context("temp dir")?,
    ])?;
    let text = std::fs::read_to_string(host.join("qualify.json"))
        .with_context(|| format!("qualify.json was not written: {}", log_tail(&c, 60)))?;
    let report: serde_json::Value = serde_json::from_str(&text)?;
    let tests = report["tests"].as_array().context("tests")?;
    let failed: Vec<String> = tests
        .iter()
        .filter(|t| t["outcome"] != "pass")
        .map(|t| format!("{}: {}", t["name"], t))
        .collect();
    assert!(
        failed.is_empty() && tests.len() == 13,
        "{} tests, not passed: {failed:#?}\n{}\n{}",
        tests.len(),
        log_tail(&c, 60),
        p.logs()
    );
    assert_eq!(code, 0, "{}", log_tail(&c, 40));
    let html = std::fs::read_to_string(host.join("qualify.html"))?;
    assert!(html.contains("<svg"), "the report has its plots inline");
    let _ = std::fs::remove_dir_all(&host);
    Ok(())
}

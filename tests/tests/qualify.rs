//! (5) `harness qualify --quick` in a container against dsim and the engine (CPU backend) in
//! theirs: every test of the suite runs and passes, and the report is written; on the wideband
//! output of an engine of one, and on the narrowband output of the demo's engine (wideband and
//! narrowband), where the DDC's filter response is judged too.

use std::time::Duration;

use acceptance::{docker, log_tail, Outputs, Pipeline, Session, NB_CENTRE_HZ, NB_NAME, OUTPUT};
use anyhow::{Context, Result};

/// Runs `harness qualify --quick` with `args` and checks that `tests` tests ran and passed, and
/// that the report names the output judged and its band; returns the report.
fn qualify_passes(p: &Pipeline, args: &[&str], tests: usize) -> Result<serde_json::Value> {
    let (dsim, engine) = (p.dsim_url(), p.engine_url());
    let mut all = vec![
        "qualify",
        "--quick",
        "--dsim-url",
        &dsim,
        "--engine-url",
        &engine,
        "--out-dir",
        "/data/qualify",
    ];
    all.extend_from_slice(args);
    let (code, c) = p.run_harness("qualify", &all, Duration::from_secs(900))?;
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
    let run = report["tests"].as_array().context("tests")?;
    // Each test's outcome and figures, for the run's log (`--nocapture`).
    for t in run {
        eprintln!("{}: {} {}", t["name"], t["outcome"], t["figures"]);
    }
    let failed: Vec<String> = run
        .iter()
        .filter(|t| t["outcome"] != "pass")
        .map(|t| format!("{}: {}", t["name"], t))
        .collect();
    assert!(
        failed.is_empty() && run.len() == tests,
        "{} tests, not passed: {failed:#?}\n{}\n{}",
        run.len(),
        log_tail(&c, 60),
        p.logs()
    );
    assert_eq!(code, 0, "{}", log_tail(&c, 40));
    let html = std::fs::read_to_string(host.join("qualify.html"))?;
    assert!(html.contains("<svg"), "the report has its plots inline");
    let kind = report["system"]["band"]["kind"].as_str().unwrap_or("");
    assert!(
        html.contains(&format!("({kind})")),
        "the report says which output it judged"
    );
    let _ = std::fs::remove_dir_all(&host);
    Ok(report)
}

#[test]
fn qualify_quick_subset_passes_in_containers() -> Result<()> {
    let Some(session) = Session::start("qualify") else {
        return Ok(());
    };
    let p = Pipeline::start(&session)?;
    let report = qualify_passes(&p, &["--dst", OUTPUT], 13)?;
    assert_eq!(report["system"]["band"]["kind"], "wideband");
    Ok(())
}

/// The demo's narrowband output, chosen by name (its destinations from the engine's /status):
/// every test with a narrowband meaning and the DDC's filter response.
#[test]
fn qualify_quick_subset_passes_on_the_narrowband_output_in_containers() -> Result<()> {
    let Some(session) = Session::start("qualify-nb") else {
        return Ok(());
    };
    let p = Pipeline::start_with(&session, Outputs::WithNarrowband)?;
    let report = qualify_passes(&p, &["--output", NB_NAME], 14)?;
    assert_eq!(report["system"]["output"], NB_NAME);
    assert_eq!(report["system"]["band"]["kind"], "narrowband");
    assert_eq!(report["system"]["band"]["centre_hz"], NB_CENTRE_HZ);
    let names: Vec<&str> = report["tests"]
        .as_array()
        .context("tests")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"filter-response"), "{names:?}");
    Ok(())
}

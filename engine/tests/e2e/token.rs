//! The control token from the environment, end to end: the engine binary started with
//! FENGINE_CONTROL_TOKEN refuses a change without it or with another (401, nothing loaded), takes
//! one with it, and keeps GET open (the engine is started with `run`); `--help` names the variable
//! but never shows its value, and `bench` runs with it set.

use std::process::Command;

use serde_json::json;

use crate::setup::{serial, Setup};
use crate::system::{fengine_binary, System};

#[test]
fn the_control_token_comes_from_the_environment() {
    let _turn = serial();
    const TOKEN: &str = "e2e-t0ken";
    let help = Command::new(fengine_binary())
        .arg("--help")
        .env("FENGINE_CONTROL_TOKEN", TOKEN)
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("FENGINE_CONTROL_TOKEN"), "{help}");
    assert!(!help.contains(TOKEN), "--help shows the token");
    // The variable must not upset the other subcommand's parsing.
    let bench = Command::new(fengine_binary())
        .args([
            "bench",
            "--backend",
            "null",
            "--channels",
            "1024",
            "--frames",
            "1",
        ])
        .env("FENGINE_CONTROL_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        bench.status.success(),
        "fengine bench with FENGINE_CONTROL_TOKEN set: {}",
        String::from_utf8_lossy(&bench.stderr)
    );

    // Starting it reads GET /status without a token: reads are open.
    let mut sys =
        System::start_with_env(Setup::new(), 1.0, 1e-6, &[("FENGINE_CONTROL_TOKEN", TOKEN)]);
    let ctl = &sys.engine_ctl;
    let model = json!({"pol0": {"delay": 5e-7}});
    let before = ctl.get_json("/delays");
    for headers in [
        &[][..],
        &[("Authorization", "Bearer e2e-t0ke")][..],
        &[("Authorization", "e2e-t0ken")][..],
    ] {
        let (code, body) = ctl.send_with("PUT", "/delays", Some(&model), headers);
        assert_eq!(code, 401, "{headers:?}: {body}");
        assert!(body.contains("Authorization: Bearer"), "{body}");
    }
    assert_eq!(ctl.get_json("/delays"), before, "a refused change loaded");
    let bearer = format!("Bearer {TOKEN}");
    let (code, body) = ctl.send_with(
        "PUT",
        "/delays",
        Some(&model),
        &[("Authorization", bearer.as_str())],
    );
    assert_eq!(code, 200, "{body}");
    assert_ne!(ctl.get_json("/delays"), before);
    assert_eq!(ctl.engine_status().control.rejected_requests, 3);
    sys.assert_engine_healthy();
}

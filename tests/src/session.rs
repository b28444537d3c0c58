//! The containers' session: one test's hold on the machine (a cross-process lock, a name prefix),
//! the docker CLI, testcontainers pointed at the daemon (through the API version shim where the
//! daemon is older), the test's network, and the clean-up of what a killed run left behind.

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use crate::docker_proxy;

/// The images under test, as docker/build.sh names them.
pub const IMAGES: [&str; 3] = ["fgpu/dsim", "fgpu/fengine", "fgpu/harness"];

/// Their tag: FGPU_TAG, as docker/build.sh reads it (default `latest`), so that two checkouts
/// can test their own images side by side.
pub fn image_tag() -> String {
    std::env::var("FGPU_TAG")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "latest".into())
}

/// Label on every container and network the tests make.
pub const LABEL: &str = "fgpu-acceptance";

/// True when the CI variable says this is a CI run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// DOCKER_HOST as the process had it, before the shim replaced it for testcontainers.
static ORIGINAL_DOCKER_HOST: OnceLock<Option<String>> = OnceLock::new();

/// The docker CLI, talking to the daemon directly (not through the shim).
pub fn docker(args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("docker");
    cmd.args(args);
    match ORIGINAL_DOCKER_HOST.get() {
        Some(Some(h)) => {
            cmd.env("DOCKER_HOST", h);
        }
        Some(None) => {
            cmd.env_remove("DOCKER_HOST");
        }
        None => {}
    }
    let out = cmd
        .output()
        .with_context(|| format!("running docker {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "docker {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why the tests cannot run here, if they cannot: no Docker, or images not built.
fn missing_prerequisite() -> Option<String> {
    if let Err(e) = docker(&["version", "--format", "{{.Server.Version}}"]) {
        return Some(format!("Docker is not usable ({e:#})"));
    }
    let tag = image_tag();
    let missing: Vec<String> = IMAGES
        .iter()
        .map(|n| format!("{n}:{tag}"))
        .filter(|i| docker(&["image", "inspect", "--format", "{{.Id}}", i]).is_err())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "images not built: {} (docker/build.sh builds them)",
            missing.join(", ")
        )
    })
}

/// Points testcontainers at the daemon, through the API version shim when the daemon is older
/// than testcontainers' client (see [`docker_proxy`]). Once per process.
fn connect_testcontainers() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let original = std::env::var("DOCKER_HOST").ok();
        ORIGINAL_DOCKER_HOST.get_or_init(|| original.clone());
        let upstream = match original.as_deref() {
            None => PathBuf::from("/var/run/docker.sock"),
            Some(h) => match h.strip_prefix("unix://") {
                Some(p) => PathBuf::from(p),
                // A TCP or SSH daemon: used as it is (it has to speak testcontainers' API).
                None => return Ok(()),
            },
        };
        let daemon = docker_proxy::daemon_api_version(&upstream).map_err(|e| format!("{e:#}"))?;
        if daemon >= docker_proxy::CLIENT_API {
            return Ok(());
        }
        let sock = std::env::temp_dir().join(format!(
            "fgpu-acceptance-docker-{}.sock",
            std::process::id()
        ));
        docker_proxy::spawn(&sock, upstream, daemon).map_err(|e| format!("{e:#}"))?;
        eprintln!(
            "note: the Docker daemon speaks API {}.{}, testcontainers {}.{}: requests go through \
             a version shim at {}",
            daemon.0,
            daemon.1,
            docker_proxy::CLIENT_API.0,
            docker_proxy::CLIENT_API.1,
            sock.display()
        );
        // Read once, when testcontainers makes its client (after this).
        std::env::set_var("DOCKER_HOST", format!("unix://{}", sock.display()));
        Ok(())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Removes containers and networks left by a run that was killed.
fn remove_leftovers() {
    let filter = format!("label={LABEL}");
    if let Ok(ids) = docker(&["ps", "-aq", "--filter", &filter]) {
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            eprintln!("removing {} leftover test containers", ids.len());
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            let _ = docker(&args);
        }
    }
    if let Ok(ids) = docker(&["network", "ls", "-q", "--filter", &filter]) {
        for id in ids.split_whitespace() {
            let _ = docker(&["network", "rm", id]);
        }
    }
}

/// One test's hold on the machine: the cross-process lock and a unique name prefix.
pub struct Session {
    pub test: String,
    /// Prefix of every container and network name of this test.
    pub prefix: String,
    started: Instant,
    _lock: File,
}

impl Session {
    /// Starts a test, or returns None (after printing `skipped: ...`) when it must be skipped.
    /// Panics where a skip is not allowed (CI set and the images missing).
    pub fn start(test: &str) -> Option<Session> {
        if std::env::var("FGPU_ACCEPTANCE").is_ok_and(|v| v == "skip") {
            println!("skipped: {test}: FGPU_ACCEPTANCE=skip (scripts/test --no-docker)");
            return None;
        }
        if let Some(why) = missing_prerequisite() {
            if in_ci() {
                panic!("{test}: {why}; CI is set, so the container tests must run");
            }
            println!("skipped: {test}: {why}");
            return None;
        }
        let lock = lock_machine().expect("taking the acceptance test lock");
        remove_leftovers();
        connect_testcontainers().expect("connecting testcontainers to the Docker daemon");
        let prefix = format!("fgpu-at-{}-{test}", std::process::id()).replace('_', "-");
        eprintln!("== {test}: starting ({prefix})");
        Some(Session {
            test: test.into(),
            prefix,
            started: Instant::now(),
            _lock: lock,
        })
    }

    /// A user-defined bridge network for this test, MTU 9000 like compose.yaml's (the engine's
    /// 8 KiB packets go unfragmented).
    pub fn network(&self) -> Result<Network> {
        let name = format!("{}-net", self.prefix);
        docker(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--label",
            LABEL,
            "-o",
            "com.docker.network.driver.mtu=9000",
            &name,
        ])?;
        Ok(Network { name })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        eprintln!(
            "== {}: done in {:.1} s",
            self.test,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// One test at a time on this machine, whichever process runs it.
#[allow(clippy::incompatible_msrv)] // File::lock: the toolchain here is newer than the MSRV
fn lock_machine() -> Result<File> {
    let path = std::env::temp_dir().join("fgpu-acceptance.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if f.try_lock().is_err() {
        eprintln!(
            "waiting for another acceptance test run ({})",
            path.display()
        );
        f.lock()?;
    }
    Ok(f)
}

/// A Docker network, removed on drop (after the containers on it, which drop first).
pub struct Network {
    pub name: String,
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Err(e) = docker(&["network", "rm", &self.name]) {
            eprintln!("warning: {e:#}");
        }
    }
}

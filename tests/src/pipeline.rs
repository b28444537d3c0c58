//! The system under test in containers: dsim and the engine (CPU backend, the demo's
//! configuration) on the test's network, their control APIs from the host, `harness watch` and
//! one-off script containers beside them.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use testcontainers::bollard;
use testcontainers::core::{ContainerPort, ContainerRequest, Mount};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt};

use crate::http::default_output;
use crate::watch::RunningWatch;
use crate::{
    image_tag, log_tail, wait_until, Http, Network, Outputs, Session, CHANNELS, CONTROL_PORT,
    HEAP_SAMPLES, KATCP_PORT, LABEL, NB_CENTRE_HZ, NB_CHANNELS, NB_DECIMATION, NB_HEAPS_PER_FRAME,
    NB_NAME, NB_OUTPUT, OUTPUT, POL0_SRC, POL1_SRC, RATE, SPECTRA_PER_HEAP, TAPS, TONE_HZ,
};

pub(crate) fn request(
    img: &str,
    net: &Network,
    container_name: &str,
    cmd: Vec<String>,
) -> ContainerRequest<GenericImage> {
    hardened(GenericImage::new(img, &image_tag()).with_cmd(cmd))
        .with_network(net.name.clone())
        .with_container_name(container_name)
        .with_label(LABEL, "1")
        .with_env_var("RUST_LOG", "info")
        .with_startup_timeout(Duration::from_secs(60))
}

/// The lock-down compose.yaml gives every container (its `x-hardened`), so that the tests run
/// what users run: a read-only root filesystem with a tmpfs /tmp and a writable /data (a volume,
/// so that a report can be copied out after the container exits; removed with the container),
/// no capabilities, no privilege gain, bounded memory and processes.
pub(crate) fn hardened(
    image: impl Into<ContainerRequest<GenericImage>>,
) -> ContainerRequest<GenericImage> {
    image
        .into()
        .with_readonly_rootfs(true)
        .with_mount(Mount::tmpfs_mount("/tmp"))
        .with_cap_drop("ALL")
        .with_security_opt("no-new-privileges:true")
        .with_host_config_modifier(|host| {
            host.memory = Some(MEMORY_LIMIT);
            host.pids_limit = Some(PIDS_LIMIT);
            host.mounts
                .get_or_insert_with(Vec::new)
                .push(bollard::models::Mount {
                    target: Some("/data".into()),
                    typ: Some(bollard::models::MountType::VOLUME),
                    ..Default::default()
                });
        })
}

/// compose.yaml's `mem_limit` and `pids_limit` for dsim and the harness (the CPU engine of the
/// tests' size takes far less than either).
const MEMORY_LIMIT: i64 = 4 << 30;
const PIDS_LIMIT: i64 = 512;

pub(crate) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// dsim and the engine (CPU backend) on a network of their own, streaming.
/// Field order is drop order: the containers go before their network.
pub struct Pipeline {
    pub dsim: Container<GenericImage>,
    pub engine: Container<GenericImage>,
    pub net: Network,
    pub prefix: String,
}

impl Pipeline {
    /// Starts dsim, then the engine with its one wideband output, and waits until output heaps
    /// are being sent.
    pub fn start(session: &Session) -> Result<Pipeline> {
        Self::start_with(session, Outputs::Wideband)
    }

    /// [`start`](Self::start) with the engine serving `outputs`.
    pub fn start_with(session: &Session, outputs: Outputs) -> Result<Pipeline> {
        let net = session.network()?;
        let prefix = session.prefix.clone();
        let dsim = request(
            "fgpu/dsim",
            &net,
            &format!("{prefix}-dsim"),
            strings(&[
                "--pol0-dest",
                POL0_SRC,
                "--pol1-dest",
                POL1_SRC,
                "--rate",
                &RATE.to_string(),
                "--tone",
                &format!("{TONE_HZ}:0.5"),
                "--control",
                "0.0.0.0:8080",
                "--katcp",
                "0.0.0.0:7147",
            ]),
        )
        .start()
        .context("starting fgpu/dsim")?;
        let engine = request(
            "fgpu/fengine",
            &net,
            &format!("{prefix}-engine"),
            Self::engine_args(outputs),
        )
        .start()
        .context("starting fgpu/fengine")?;
        let p = Pipeline {
            dsim,
            engine,
            net,
            prefix,
        };
        p.dsim_http()?.wait_healthy(Duration::from_secs(60))?;
        p.wait_engine_settled(Duration::from_secs(90))?;
        Ok(p)
    }

    fn engine_args(outputs: Outputs) -> Vec<String> {
        let mut args = strings(&[
            "--src-pol0",
            POL0_SRC,
            "--src-pol1",
            POL1_SRC,
            "--dst",
            OUTPUT,
            "--adc-sample-rate",
            &RATE.to_string(),
            "--channels",
            &CHANNELS.to_string(),
            "--taps",
            &TAPS.to_string(),
            "--spectra-per-heap",
            &SPECTRA_PER_HEAP.to_string(),
            "--heap-samples",
            &HEAP_SAMPLES.to_string(),
            "--backend",
            "cpu",
            "--control",
            "0.0.0.0:8080",
            "--katcp",
            "0.0.0.0:7147",
        ]);
        if outputs == Outputs::WithNarrowband {
            // compose.cpu.yaml's narrowband output and frame.
            args.extend([
                "--narrowband".to_string(),
                format!(
                    "{NB_NAME}:dst={NB_OUTPUT},channels={NB_CHANNELS},\
                     decimation={NB_DECIMATION},centre={NB_CENTRE_HZ}"
                ),
                "--heaps-per-frame".to_string(),
                NB_HEAPS_PER_FRAME.to_string(),
            ]);
        }
        args
    }

    /// dsim's control API from the host (its published port).
    pub fn dsim_http(&self) -> Result<Http> {
        Ok(Http::new(
            self.dsim
                .get_host_port_ipv4(ContainerPort::Tcp(CONTROL_PORT))?,
        ))
    }

    /// The engine's control API from the host. The published port changes when the container
    /// restarts, so ask again after a restart.
    pub fn engine_http(&self) -> Result<Http> {
        Ok(Http::new(
            self.engine
                .get_host_port_ipv4(ContainerPort::Tcp(CONTROL_PORT))?,
        ))
    }

    /// Waits until the engine is healthy, sending, and settled: its missing-input count has not
    /// moved for 3 s (a starting engine can lose input while it warms up, more so on a loaded
    /// host). Returns the timestamp of its latest output heap then: heaps from there on must be
    /// clean.
    pub fn wait_engine_settled(&self, timeout: Duration) -> Result<u64> {
        wait_settled(|| self.engine_http(), timeout).with_context(|| self.logs())
    }

    /// Container DNS names on the network.
    pub fn dsim_url(&self) -> String {
        format!("http://{}-dsim:{CONTROL_PORT}", self.prefix)
    }
    pub fn engine_url(&self) -> String {
        format!("http://{}-engine:{CONTROL_PORT}", self.prefix)
    }

    /// dsim's and the engine's katcp fronts, as container DNS names on the network.
    pub fn dsim_katcp_url(&self) -> String {
        format!("katcp://{}-dsim:{KATCP_PORT}", self.prefix)
    }
    pub fn engine_katcp_url(&self) -> String {
        format!("katcp://{}-engine:{KATCP_PORT}", self.prefix)
    }

    /// Starts `harness watch` for `seconds` with `args` as given (the system's URLs among them).
    pub fn start_watch_args(
        &self,
        role: &str,
        args: &[&str],
        seconds: u32,
    ) -> Result<RunningWatch> {
        let duration = seconds.to_string();
        let mut all = vec!["watch", "--duration", &duration];
        all.extend(args);
        let c = request(
            "fgpu/harness",
            &self.net,
            &format!("{}-{role}", self.prefix),
            strings(&all),
        )
        .start()
        .with_context(|| format!("starting fgpu/harness ({role})"))?;
        Ok(RunningWatch::new(c, seconds))
    }

    /// Starts `harness watch` for `seconds` in a container on the network.
    pub fn start_watch(&self, seconds: u32) -> Result<RunningWatch> {
        self.watch_container("harness", &["--dst", OUTPUT], seconds)
    }

    /// Starts `harness watch --output NAME` for `seconds`: one output of several, its
    /// destinations from the engine's /status, as compose's demo and demo-nb watch theirs.
    pub fn start_watch_output(&self, output: &str, seconds: u32) -> Result<RunningWatch> {
        self.watch_container(&format!("harness-{output}"), &["--output", output], seconds)
    }

    fn watch_container(&self, role: &str, which: &[&str], seconds: u32) -> Result<RunningWatch> {
        let mut args = vec!["watch"];
        args.extend(which);
        let (duration, dsim, engine) = (seconds.to_string(), self.dsim_url(), self.engine_url());
        args.extend([
            "--duration",
            &duration,
            "--dsim-url",
            &dsim,
            "--engine-url",
            &engine,
        ]);
        let c = request(
            "fgpu/harness",
            &self.net,
            &format!("{}-{role}", self.prefix),
            strings(&args),
        )
        .start()
        .with_context(|| format!("starting fgpu/harness ({role})"))?;
        Ok(RunningWatch::new(c, seconds))
    }

    /// Starts `harness watch` for `seconds` and waits (up to 30 s) until it reports heaps
    /// arriving, so that what the test does next happens while it watches.
    pub fn watch_receiving(&self, seconds: u32) -> Result<RunningWatch> {
        let watch = self.start_watch(seconds)?;
        watch.wait_receiving(Duration::from_secs(30))?;
        Ok(watch)
    }

    /// Runs the harness image with `args` to its end (at most `timeout`); returns its exit code
    /// and the container, still there to copy files from.
    pub fn run_harness(
        &self,
        role: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Result<(i64, Container<GenericImage>)> {
        let c = request(
            "fgpu/harness",
            &self.net,
            &format!("{}-{role}", self.prefix),
            strings(args),
        )
        .start()
        .with_context(|| format!("starting the {role} container"))?;
        let mut code = None;
        wait_until(timeout, &format!("the {role} container to exit"), || {
            code = c.exit_code()?;
            Ok(code.is_some())
        })
        .with_context(|| log_tail(&c, 40))?;
        Ok((code.unwrap_or(-1), c))
    }

    /// A one-off container of the dsim image running `bash -c script` on the network (bash's
    /// /dev/udp and /dev/tcp make a small traffic source); returns its exit code and output.
    pub fn run_script(&self, role: &str, script: &str, timeout: Duration) -> Result<(i64, String)> {
        let c = hardened(
            GenericImage::new("fgpu/dsim", &image_tag())
                .with_entrypoint("bash")
                .with_cmd(["-c", script]),
        )
        .with_network(self.net.name.clone())
        .with_container_name(format!("{}-{role}", self.prefix))
        .with_label(LABEL, "1")
        .start()
        .with_context(|| format!("starting the {role} container"))?;
        let mut code = None;
        wait_until(timeout, &format!("the {role} container to exit"), || {
            code = c.exit_code()?;
            Ok(code.is_some())
        })?;
        Ok((code.unwrap_or(-1), log_tail(&c, 50)))
    }

    /// The last lines of dsim's and the engine's logs, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- dsim log (tail) ---\n{}\n--- engine log (tail) ---\n{}",
            log_tail(&self.dsim, 15),
            log_tail(&self.engine, 25)
        )
    }
}

/// Waits until an engine (its control API from `http`, asked again while it starts) is healthy,
/// sending, and settled: its missing-input count has not moved for 3 s (a starting engine can
/// lose input while it warms up, more so on a loaded host). Returns the timestamp of its latest
/// output heap then.
pub(crate) fn wait_settled(http: impl Fn() -> Result<Http>, timeout: Duration) -> Result<u64> {
    let start = Instant::now();
    let mut client = None;
    wait_until(timeout, "the engine's control API", || {
        client = http().ok();
        Ok(matches!(
            client.as_ref().map(|h| h.send("GET", "/health", None)),
            Some(Ok((200, _)))
        ))
    })?;
    let http = client.context("engine control")?;
    let left = timeout.saturating_sub(start.elapsed());
    // (heaps sent, heaps missing, since when both were so)
    let mut last: Option<(u64, u64, Instant)> = None;
    let mut settled_at = 0;
    wait_until(
        left,
        "the engine to send output without losing input for 3 s",
        || {
            let st = http.engine_status()?;
            let output = default_output(&st)?;
            let sent = output.heaps_sent;
            // Both polarisations together.
            let missing = st.heaps_missing();
            settled_at = output.last_timestamp;
            Ok(match last {
                Some((s0, m0, since)) if m0 == missing && sent > s0 => {
                    since.elapsed() >= Duration::from_secs(3)
                }
                _ => {
                    last = Some((sent, missing, Instant::now()));
                    false
                }
            })
        },
    )?;
    Ok(settled_at)
}

//! An array in containers: N antennas, each a dsim and an engine (CPU backend), on the test's
//! network as scripts/array lays them out for compose: antenna i's polarisations on
//! 239.10.0.(8i)+3 and 239.10.0.(8i+4)+3, digitiser id i, noise seed i + 1, its own tone; engine
//! i `--feng-id i --array-size N`; one sync time for all; every engine on the shared output groups.

use std::time::Duration;

use anyhow::{Context, Result};
use testcontainers::core::ContainerPort;
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage};

use crate::pipeline::{request, strings, wait_settled};
use crate::watch::RunningWatch;
use crate::{
    log_tail, Http, Network, Session, CHANNELS, CONTROL_PORT, HEAP_SAMPLES, OUTPUT,
    SPECTRA_PER_HEAP, TAPS,
};

/// Per antenna: an array of two shares the two cores one antenna has in the other tests.
pub const ARRAY_RATE: f64 = 8e6;

/// Antenna i's tone: the centre of channel n/4 + i n/(2N), as scripts/array places it.
pub fn array_tone_hz(i: usize, antennas: usize) -> f64 {
    let n = CHANNELS as usize;
    let channel = n / 4 + i * n / (2 * antennas);
    channel as f64 * ARRAY_RATE / (2 * n) as f64
}

/// One antenna's containers. Field order is drop order.
pub struct Antenna {
    pub dsim: Container<GenericImage>,
    pub engine: Container<GenericImage>,
}

/// The array's containers and their network (dropped after them).
pub struct Array {
    pub antennas: Vec<Antenna>,
    pub net: Network,
    pub prefix: String,
}

impl Array {
    /// Starts `n` antennas (all dsims, then all engines) and waits until every engine sends
    /// without losing input.
    pub fn start(session: &Session, n: usize) -> Result<Array> {
        let net = session.network()?;
        let prefix = session.prefix.clone();
        let sync_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
            .to_string();
        let rate = ARRAY_RATE.to_string();
        let mut dsims = Vec::new();
        for i in 0..n {
            let (pol0, pol1) = inputs(i);
            let tone = format!("{}:0.5", array_tone_hz(i, n));
            let args = [
                "--pol0-dest",
                &pol0,
                "--pol1-dest",
                &pol1,
                "--rate",
                &rate,
                "--tone",
                &tone,
                "--digitiser-id",
                &i.to_string(),
                "--seed",
                &(i + 1).to_string(),
                "--sync-time",
                &sync_time,
                // Four streaming containers share the test host's cores: a dsim descheduled for
                // a moment catches up rather than skips ahead (the engines buffer seconds of
                // input); one that cannot keep the rate still fails the test's rate checks.
                "--max-late",
                "1",
                "--control",
                "0.0.0.0:8080",
            ];
            let c = request(
                "fgpu/dsim",
                &net,
                &format!("{prefix}-dsim-{i}"),
                strings(&args),
            )
            .start()
            .with_context(|| format!("starting dsim {i}"))?;
            dsims.push(c);
        }
        let mut antennas = Vec::new();
        for (i, dsim) in dsims.into_iter().enumerate() {
            let (pol0, pol1) = inputs(i);
            let args = [
                "--src-pol0",
                &pol0,
                "--src-pol1",
                &pol1,
                "--dst",
                OUTPUT,
                "--adc-sample-rate",
                &rate,
                "--channels",
                &CHANNELS.to_string(),
                "--taps",
                &TAPS.to_string(),
                "--spectra-per-heap",
                &SPECTRA_PER_HEAP.to_string(),
                "--heap-samples",
                &HEAP_SAMPLES.to_string(),
                "--feng-id",
                &i.to_string(),
                "--array-size",
                &n.to_string(),
                "--sync-time",
                &sync_time,
                "--backend",
                "cpu",
                "--control",
                "0.0.0.0:8080",
            ];
            let engine = request(
                "fgpu/fengine",
                &net,
                &format!("{prefix}-engine-{i}"),
                strings(&args),
            )
            .start()
            .with_context(|| format!("starting engine {i}"))?;
            antennas.push(Antenna { dsim, engine });
        }
        let array = Array {
            antennas,
            net,
            prefix,
        };
        for (i, a) in array.antennas.iter().enumerate() {
            port_http(&a.dsim)?.wait_healthy(Duration::from_secs(60))?;
            wait_settled(|| port_http(&a.engine), Duration::from_secs(90))
                .with_context(|| format!("engine {i}"))
                .with_context(|| array.logs())?;
        }
        // Settled is not caught up: an engine that fell behind while four containers started on
        // a 2-core host sends its backlog at --send-rate-factor 1.1, a tenth over the rate, so a
        // second behind takes ten to drain. Watched meanwhile, the surplus counts as rate (which
        // `at_rate` allows, up to that tenth); 12 s drains 1.2 s of it first, so that the
        // window sees the steady rate.
        std::thread::sleep(Duration::from_secs(12));
        Ok(array)
    }

    /// The engine's control API of antenna `i` from the host.
    pub fn engine_http(&self, i: usize) -> Result<Http> {
        port_http(&self.antennas[i].engine)
    }

    /// Starts `harness watch --engines N` over every antenna for `seconds`.
    pub fn start_watch(&self, seconds: u32) -> Result<RunningWatch> {
        let urls = |role: &str| {
            (0..self.antennas.len())
                .map(|i| format!("http://{}-{role}-{i}:{CONTROL_PORT}", self.prefix))
                .collect::<Vec<_>>()
                .join(",")
        };
        let args = [
            "watch",
            "--dst",
            OUTPUT,
            "--engines",
            &self.antennas.len().to_string(),
            "--duration",
            &seconds.to_string(),
            "--dsim-url",
            &urls("dsim"),
            "--engine-url",
            &urls("engine"),
        ];
        let c = request(
            "fgpu/harness",
            &self.net,
            &format!("{}-harness", self.prefix),
            strings(&args),
        )
        .start()
        .context("starting fgpu/harness")?;
        Ok(RunningWatch::new(c, seconds))
    }

    /// The last lines of every dsim's and engine's log, for failure messages.
    pub fn logs(&self) -> String {
        self.antennas
            .iter()
            .enumerate()
            .map(|(i, a)| {
                format!(
                    "--- dsim {i} log (tail) ---\n{}\n--- engine {i} log (tail) ---\n{}",
                    log_tail(&a.dsim, 10),
                    log_tail(&a.engine, 15)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Antenna i's input groups.
fn inputs(i: usize) -> (String, String) {
    (
        format!("239.10.0.{}+3:7148", 8 * i),
        format!("239.10.0.{}+3:7148", 8 * i + 4),
    )
}

fn port_http(c: &Container<GenericImage>) -> Result<Http> {
    Ok(Http::new(
        c.get_host_port_ipv4(ContainerPort::Tcp(CONTROL_PORT))?,
    ))
}

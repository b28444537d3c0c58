//! Toolkit of the container acceptance tests (tests/tests/*.rs): the locally built images
//! `fgpu/dsim`, `fgpu/fengine` and `fgpu/harness` (`:latest`, from docker/build.sh) started with
//! testcontainers on a network of their own, the harness run in a container, and HTTP to the
//! control APIs through their published ports on 127.0.0.1.
//!
//! Rules every test follows, through [`Session::start`]:
//! - Images missing (or no Docker): the test prints `skipped: ...` and passes, unless `CI` is set,
//!   where that is a failure. `FGPU_ACCEPTANCE=skip` (scripts/test --no-docker) skips always.
//! - Nothing is pulled: the images are checked to be present before any container is created
//!   (testcontainers pulls only when the daemon says an image is missing).
//! - One test at a time, across processes (a file lock): the pipeline needs the 2 cores.
//! - Containers and networks carry the label `fgpu-acceptance`; they are removed when the test
//!   ends, pass or fail, and leftovers of a killed run are removed before the next test starts.
//!
//! Modules, by job:
//! - [`session`]: one test's hold on the machine, the docker CLI, testcontainers, the network.
//! - [`pipeline`]: dsim and the engine in containers, `harness watch` and script containers.
//! - [`array`](mod@array): an array of antennas (a dsim and an engine each) in containers.
//! - [`http`]: the control APIs from the host (ureq), the engine's status as `fgpu_api` types.
//! - [`watch`]: `harness watch`'s end and summary.
//! - [`docker_proxy`]: the Docker API version shim for older daemons.
//!
//! This file holds the configuration every test runs (the demo's) and what follows from it.

pub mod array;
pub mod docker_proxy;
pub mod http;
pub mod pipeline;
pub mod session;
pub mod watch;

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use testcontainers::{Container, GenericImage};

pub use array::{array_tone_hz, Array, ARRAY_RATE};
pub use http::Http;
pub use pipeline::Pipeline;
pub use session::{docker, image_tag, in_ci, Network, Session, IMAGES, LABEL};
pub use watch::{progress_heaps_per_s, RunningWatch, Watch};

/// The demo's CPU configuration (compose.yaml + compose.cpu.yaml), used by every test: a rate the
/// CPU backend sustains on a 2-core host with dsim, the harness and the test itself beside it.
/// (The demo's narrowband output, below, only the demo test adds.)
pub const RATE: f64 = 16e6;
/// The tone: the centre of channel CHANNELS/4 (RATE/8).
pub const TONE_HZ: f64 = 2e6;
pub const CHANNELS: u64 = 4096;
pub const TAPS: u64 = 16;
pub const SPECTRA_PER_HEAP: u64 = 256;
pub const HEAP_SAMPLES: u64 = 4096;
pub const POL0_SRC: &str = "239.10.0.0+3:7148";
pub const POL1_SRC: &str = "239.10.0.4+3:7148";
pub const OUTPUT: &str = "239.10.1.0+15:7148";
pub const SUBSTREAMS: usize = 16;
/// Control port inside every container.
pub const CONTROL_PORT: u16 = 8080;
/// The katcp port of dsim and the engine (compose's, katgpucbf's 7147), on the network only.
pub const KATCP_PORT: u16 = 7147;

/// Timestamp step between consecutive output heaps of a substream (ADC samples).
pub const OUTPUT_STEP: u64 = SPECTRA_PER_HEAP * 2 * CHANNELS;

/// Whether `got`, a count or rate of output over a watch's window, is at `expected`: at least
/// `low` of it (the engine kept up) and at most what an engine draining a backlog sends, with 2%
/// for the window's edges. An engine that fell behind for a moment (the test host's 2 cores are
/// shared by every streaming container) sends its backlog at its `--send-rate-factor` (the
/// default, in every test), so a window that catches the backlog draining sees more than the
/// rate, never more than that.
pub fn at_rate(got: f64, expected: f64, low: f64) -> bool {
    got >= low * expected && got <= 1.02 * fgpu_api::engine::SEND_RATE_FACTOR * expected
}

/// The demo's narrowband output (compose.yaml's and compose.cpu.yaml's `narrowband`), which the
/// demo test adds beside the wideband one ([`Outputs::WithNarrowband`]); the other tests run the
/// wideband output alone. Its band, RATE/(2 NB_DECIMATION) = 1 MHz wide around NB_CENTRE_HZ,
/// holds the tone RATE/64 below the centre: channel NB_CHANNELS/4.
pub const NB_NAME: &str = "narrowband";
pub const NB_OUTPUT: &str = "239.10.2.0+3:7148";
pub const NB_SUBSTREAMS: usize = 4;
pub const NB_CHANNELS: u64 = 1024;
pub const NB_DECIMATION: u64 = 8;
pub const NB_CENTRE_HZ: f64 = 2.25e6;
/// Timestamp step between a narrowband substream's heaps: spectra 2nD ADC samples apart.
pub const NB_OUTPUT_STEP: u64 = SPECTRA_PER_HEAP * 2 * NB_CHANNELS * NB_DECIMATION;
/// The demo's frames with the narrowband output: two of its heaps, four wideband heaps (the
/// frame of the wideband output alone, whose default is 4).
pub const NB_HEAPS_PER_FRAME: u64 = 2;

/// Which outputs the engine of a [`Pipeline`] serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// `--dst OUTPUT` alone: the output named wideband.
    Wideband,
    /// As the compose demo: the wideband output and the narrowband one ([`NB_NAME`]).
    WithNarrowband,
}

/// Polls `f` every 250 ms until it returns true; fails after `timeout`.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match f() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() > timeout {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The last `n` lines of a container's stdout and stderr.
pub fn log_tail(c: &Container<GenericImage>, n: usize) -> String {
    let mut text = String::from_utf8_lossy(&c.stdout_to_vec().unwrap_or_default()).into_owned();
    text.push_str(&String::from_utf8_lossy(
        &c.stderr_to_vec().unwrap_or_default(),
    ));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Output heaps (timestamps) that lose input when the digitiser heaps `dropped` are missing,
/// sorted, each once. Heap k holds samples [k HEAP_SAMPLES, (k + 1) HEAP_SAMPLES); output heap T
/// needs samples [T, T + span) with span = 2n (SPECTRA_PER_HEAP + TAPS - 1) (zero delay); `phase`
/// is the output timestamps' residue mod the step (from any output heap). The rule is the
/// harness's oracle (`harness::gaps::outputs_hit`), independent of the engine under test.
pub fn affected_output_heaps(dropped: &[u64], phase: u64) -> Vec<u64> {
    let span = harness::gaps::engine_heap_span(CHANNELS, SPECTRA_PER_HEAP, TAPS);
    let hit: std::collections::BTreeSet<u64> = dropped
        .iter()
        .flat_map(|&k| {
            harness::gaps::outputs_hit(
                k * HEAP_SAMPLES,
                (k + 1) * HEAP_SAMPLES,
                phase,
                OUTPUT_STEP,
                span,
            )
        })
        .collect();
    hit.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affected_heaps() {
        let span = (SPECTRA_PER_HEAP - 1) * 2 * CHANNELS + TAPS * 2 * CHANNELS;
        let phase = 12345 * 2 * CHANNELS % OUTPUT_STEP;
        // A dropped heap well inside one output heap's first spectra: that heap, and the
        // previous one when its last window reaches it.
        let t = 1000 * OUTPUT_STEP + phase;
        let k = t / HEAP_SAMPLES + 2;
        let got = affected_output_heaps(&[k], phase);
        for &h in &got {
            assert_eq!(h % OUTPUT_STEP, phase);
            assert!(h < (k + 1) * HEAP_SAMPLES && h + span > k * HEAP_SAMPLES);
        }
        assert!(got.contains(&t));
        assert_eq!(
            got.contains(&(t - OUTPUT_STEP)),
            t - OUTPUT_STEP + span > k * HEAP_SAMPLES
        );
        // Two drops close together share heaps (no duplicates).
        let two = affected_output_heaps(&[k, k + 1], phase);
        assert!(two.windows(2).all(|w| w[0] < w[1]));
    }
}

//! The [`Controller`]: what the engine has loaded (delays, gains) and the way to the pipeline's
//! command queue, shared by every front. Its operations, one module per resource, are in
//! `delays`, `gains`, `outputs` and `status`; what they share (the lock, the queue, finding an
//! output by name) is here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_channel::{Sender, TrySendError};
use num_complex::Complex32;

use super::ControlError;
use crate::backend::POLS;
use crate::config::EngineConfig;
use crate::metrics;
use crate::pipeline::Command;
use crate::stats::Stats;

/// What the controller has loaded into the pipeline, as its readers see it.
pub(super) struct Loaded {
    /// Both polarisations' delay models (zero until one is loaded).
    pub(super) delays: fgpu_api::engine::Delays,
    /// Whether a delay model has been loaded since start-up.
    pub(super) delays_loaded: bool,
    /// Each output's gains per polarisation, one per channel, by output name.
    pub(super) gains: BTreeMap<String, [Vec<Complex32>; POLS]>,
}

/// The engine's control, whatever the protocol: every check of a request and every change it
/// makes to the pipeline, with typed requests and replies (`fgpu_api::engine`) and typed
/// refusals ([`ControlError`]). Shared by the fronts behind an `Arc`; safe to call from any
/// thread.
pub struct Controller {
    pub(super) cfg: EngineConfig,
    pub(super) stats: Arc<Stats>,
    pub(super) backend: &'static str,
    commands: Sender<Command>,
    stop: Arc<AtomicBool>,
    pub(super) started: Instant,
    loaded: Mutex<Loaded>,
    /// What a scrape encodes: collectors reading `stats` at each one.
    metrics: prometheus_client::registry::Registry,
}

impl Controller {
    /// The control of an engine configured by `cfg`, whose pipeline runs `backend`, keeps `stats`,
    /// takes commands on `commands` and stops when `stop` is set.
    pub fn new(
        cfg: EngineConfig,
        stats: Arc<Stats>,
        backend: &'static str,
        commands: Sender<Command>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        // Every output starts with its configured gain on every channel.
        let gains = cfg
            .outputs
            .iter()
            .map(|o| {
                let g = vec![Complex32::new(o.gain, 0.0); o.geometry.channels];
                (o.name.clone(), [g.clone(), g])
            })
            .collect();
        // One engine per process: the scrape target tells engines apart, no feng_id label.
        let labels = metrics::EngineLabels {
            backend,
            feng_id: None,
        };
        Self {
            metrics: metrics::registry(stats.clone(), &labels),
            loaded: Mutex::new(Loaded {
                delays: Default::default(),
                delays_loaded: false,
                gains,
            }),
            cfg,
            stats,
            backend,
            commands,
            stop,
            started: Instant::now(),
        }
    }

    /// The engine's configuration (a front reads its own settings there: address, token).
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// False once the engine has been asked to stop.
    pub fn running(&self) -> bool {
        !self.stop.load(Relaxed)
    }

    /// Asks the engine to stop, as SIGTERM does (katcp's `?halt`).
    pub fn request_stop(&self) {
        self.stop.store(true, Relaxed);
    }

    /// A scrape: the engine's counters, then the process's own series (`process_*`).
    pub fn metrics(&self) -> String {
        metrics::render(&self.metrics)
    }

    /// Counts a request a front refused, whichever layer refused it (`GET /status` reports the
    /// count).
    pub fn count_refusal(&self) {
        self.stats.control_rejected.fetch_add(1, Relaxed);
    }

    /// The channels of output `name` (or the refusal that names the outputs there are).
    pub fn channels(&self, name: &str) -> Result<usize, ControlError> {
        Ok(self.cfg.outputs[self.output_index(name)?].geometry.channels)
    }

    /// Output `name`'s index in the configuration, as the pipeline knows it.
    pub(super) fn output_index(&self, name: &str) -> Result<usize, ControlError> {
        self.cfg
            .outputs
            .iter()
            .position(|o| o.name == name)
            .ok_or_else(|| self.no_such_output(name))
    }

    /// The refusal of output `name`, which this engine does not have: it names those it has.
    pub(super) fn no_such_output(&self, name: &str) -> ControlError {
        let outputs: Vec<&str> = self.cfg.outputs.iter().map(|o| o.name.as_str()).collect();
        ControlError::NoSuchOutput {
            name: name.to_string(),
            outputs: outputs.join(", "),
        }
    }

    /// The loaded state; held across a change, so that changes apply one at a time and what is
    /// read back ends with what the pipeline got last.
    pub(super) fn loaded(&self) -> Result<MutexGuard<'_, Loaded>, ControlError> {
        self.loaded.lock().map_err(|_| ControlError::Poisoned)
    }

    /// Queues a command for the pipeline; a full or closed queue refuses (nothing changed).
    pub(super) fn send(&self, c: Command) -> Result<(), ControlError> {
        self.commands.try_send(c).map_err(|e| match e {
            TrySendError::Full(_) => ControlError::Busy,
            TrySendError::Disconnected(_) => ControlError::Stopping,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A controller over a small engine configuration, and the pipeline's end of its command
    /// queue.
    pub(in crate::control) fn controller() -> (Controller, crossbeam_channel::Receiver<Command>) {
        controller_with(&[])
    }

    /// The same with `extra` flags.
    pub(in crate::control) fn controller_with(
        extra: &[&str],
    ) -> (Controller, crossbeam_channel::Receiver<Command>) {
        let mut flags = vec![
            "--channels",
            "16",
            "--taps",
            "4",
            "--spectra-per-heap",
            "256",
            "--heap-samples",
            "1024",
            "--adc-sample-rate",
            "1e6",
            "--max-delay",
            "1e-3",
        ];
        flags.extend_from_slice(extra);
        let args = crate::config::test_args(&flags).unwrap();
        let cfg = EngineConfig::from_args(&args).unwrap();
        let stats = Arc::new(Stats::for_config(&cfg));
        let (tx, rx) = crossbeam_channel::bounded(8);
        let c = Controller::new(cfg, stats, "null", tx, Arc::new(AtomicBool::new(false)));
        (c, rx)
    }

    /// A full queue and a stopped pipeline refuse a change, each with its sentence.
    #[test]
    fn a_full_or_closed_queue_refuses() {
        let (c, rx) = controller();
        let g = fgpu_api::engine::GainsRequest::both(fgpu_api::engine::Gain::Real(0.5));
        for _ in 0..4 {
            c.set_gains("wideband", &g).unwrap();
        }
        let e = c.set_gains("wideband", &g).unwrap_err();
        assert!(matches!(e, ControlError::Busy), "{e}");
        assert_eq!(
            e.to_string(),
            "the engine has too many requests queued; try again."
        );
        drop(rx);
        let e = c.set_gains("wideband", &g).unwrap_err();
        assert_eq!(e.to_string(), "the engine is stopping.");
    }
}

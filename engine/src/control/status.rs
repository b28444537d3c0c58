//! The engine as [`fgpu_api::engine::Status`], built in one place from the configuration, the
//! pipeline's counters and what the controller has loaded.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use fgpu_api::engine::{
    Control, Delays, Frames, Input, LaneStalls, Narrowband, Output, Placement, PolInput,
    RecvWindow, SchedWaits, Status, ThreadPlacement, ThreadWaits,
};

use super::Controller;
use crate::backend::{Bins, OutputKind, POLS};
use crate::config::EngineConfig;
use crate::stats::{self as st, Stats};

impl Controller {
    /// The engine's status now.
    pub fn status(&self) -> Status {
        let delays = self
            .loaded()
            .map(|l| l.delays_loaded.then_some(l.delays))
            .unwrap_or_default();
        build(
            &self.cfg,
            &self.stats,
            self.backend,
            self.running(),
            self.started.elapsed(),
            delays,
        )
    }
}

/// The status of an engine configured by `cfg`, whose pipeline keeps `stats`, running the
/// `backend` for `uptime`, with `delays` loaded (None before the first delay request).
pub(super) fn build(
    cfg: &EngineConfig,
    stats: &Stats,
    backend: &str,
    running: bool,
    uptime: Duration,
    delays: Option<Delays>,
) -> Status {
    let pols = (0..POLS)
        .map(|p| {
            let ps = &stats.pols[p];
            PolInput {
                pol: p,
                sources: ps
                    .bound
                    .lock()
                    .map(|b| b.iter().map(|a| a.to_string()).collect())
                    .unwrap_or_default(),
                receive_threads: ps.chunk.get().map_or(0, |lanes| lanes.len()),
                packets: ps.packets(),
                heaps_received: ps.heaps_received(),
                heaps_missing: ps.heaps_missing.load(Relaxed),
                resyncs: ps.resyncs(),
                unpaired_chunks: ps.unpaired_chunks.load(Relaxed),
                late_chunks: ps.late_chunks.load(Relaxed),
                socket_drops: ps.socket_drops.load(Relaxed),
                descriptor_heaps: ps.descriptor_heaps.load(Relaxed),
                digitiser_clip_heaps: ps.digitiser_clip_heaps.load(Relaxed),
                digitiser_clip_samples: ps.digitiser_clip_samples.load(Relaxed),
                rms_dbfs: ps.rms_dbfs(),
                full_scale_samples: ps.full_scale_samples.load(Relaxed),
                frames_measured: ps.frames_measured.load(Relaxed),
                last_timestamp: ps.last_timestamp.load(Relaxed),
                rejected: ps
                    .rejects
                    .snapshot()
                    .into_iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(r, n)| (r.name().to_string(), n))
                    .collect(),
                lanes: ps.lanes.get().map_or_else(Vec::new, |lanes| {
                    lanes.iter().enumerate().map(|(i, l)| lane(i, l)).collect()
                }),
            }
        })
        .collect();
    let outputs = cfg
        .outputs
        .iter()
        .enumerate()
        .map(|(k, spec)| (spec.name.clone(), output(cfg, stats, k)))
        .collect();
    let input = &cfg.input.geometry;
    Status {
        backend: backend.to_string(),
        fft_precision: cfg.fft_precision.name().to_string(),
        wideband_kernels: cfg.wideband_kernels.name().to_string(),
        running,
        uptime_s: uptime.as_secs_f64(),
        feng_id: cfg.feng_id,
        adc_sample_rate: cfg.fs,
        sync_time: cfg.sync_time,
        max_delay_s: cfg.max_delay,
        input: Input {
            sample_bits: input.sample_bits,
            heap_samples: cfg.input.heap_samples,
            chunk_samples: input.chunk_samples,
            overlap_samples: input.overlap_samples,
            pols,
            recv_window: recv_window(stats),
        },
        outputs,
        frames: Frames {
            computed: stats.frames_computed.load(Relaxed),
            empty: stats.frames_empty.load(Relaxed),
            last_timestamp: stats.last_frame_timestamp.load(Relaxed),
            last_unix_time: stats.last_frame_unix_ns.load(Relaxed) as f64 * 1e-9,
            processing_s_last: stats.chunk_time.last_ns.load(Relaxed) as f64 * 1e-9,
            processing_s_mean: stats.chunk_time.mean_seconds(),
            in_flight_max: stats.in_flight_max.load(Relaxed),
        },
        delay_out_of_span: stats.delay_out_of_span.load(Relaxed),
        delays,
        queues: stats
            .queue_depths()
            .into_iter()
            .map(|(q, d)| (q.to_string(), d as u64))
            .collect(),
        control: Control {
            rejected_requests: stats.control_rejected.load(Relaxed),
        },
        threads: stats
            .threads
            .lock()
            .map(|t| {
                t.iter()
                    .map(|(name, w)| ThreadWaits {
                        thread: name.clone(),
                        sched: sched(w),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        placement: placement(&cfg.placement),
    }
}

/// The stream threads' placement as the configuration gives it (each thread applied it at start,
/// or the engine did not start).
fn placement(p: &crate::config::StreamPlacement) -> Placement {
    Placement {
        threads: p
            .threads()
            .into_iter()
            .map(|(name, pl)| {
                let t = ThreadPlacement {
                    cores: pl.cores.map(|c| c.to_string()),
                    policy: pl.policy.to_string(),
                };
                (name, t)
            })
            .collect(),
        rest_cores: p.rest.as_ref().map(|c| c.to_string()),
        memory_locked: p.lock_memory,
    }
}

fn seconds(ns: &AtomicU64) -> f64 {
    ns.load(Relaxed) as f64 / 1e9
}

/// A Unix time in ns as seconds, None for 0 (never happened).
fn unix_time(ns: &AtomicU64) -> Option<f64> {
    let ns = ns.load(Relaxed);
    (ns > 0).then_some(ns as f64 / 1e9)
}

fn sched(w: &st::ThreadWaits) -> Option<SchedWaits> {
    w.known.load(Relaxed).then(|| SchedWaits {
        wait_s: seconds(&w.wait_ns),
        max_wait_s: seconds(&w.max_wait_ns),
        max_wait_unix_time: unix_time(&w.max_wait_unix_ns),
        max_wait_interval_s: seconds(&w.max_wait_interval_ns),
    })
}

fn lane(i: usize, l: &st::LaneStalls) -> LaneStalls {
    let when = unix_time(&l.longest_gap_unix_ns);
    LaneStalls {
        lane: i,
        longest_gap_s: seconds(&l.longest_gap_ns),
        longest_gap_unix_time: when,
        longest_gap_timestamp: when.map(|_| l.longest_gap_timestamp.load(Relaxed)),
        latest_heap_s: seconds(&l.latest_heap_ns),
        sched: sched(&l.waits),
    }
}

/// None until the pipeline has started.
fn recv_window(stats: &Stats) -> Option<RecvWindow> {
    let chunks = stats.recv_window_chunks.load(Relaxed);
    (chunks > 0).then(|| RecvWindow {
        chunks: chunks as usize,
        seconds: f64::from_bits(stats.recv_window_seconds_bits.load(Relaxed)),
        window_bytes: stats.recv_window_bytes.load(Relaxed),
        spare_bytes: stats.recv_spare_bytes.load(Relaxed),
    })
}

/// Output `k`'s section of the status: its shape, its band if narrowband (the centre in use) and
/// its counters.
pub(super) fn output(cfg: &EngineConfig, stats: &Stats, k: usize) -> Output {
    let per_sub = |v: &[AtomicU64]| -> Vec<u64> { v.iter().map(|c| c.load(Relaxed)).collect() };
    let (spec, os, g) = (&cfg.outputs[k], &stats.outputs[k], cfg.channelisation(k));
    Output {
        kind: spec.geometry.kind.label(),
        channels: g.output.channels,
        taps: g.output.taps,
        window_function: g.output.filter.window.name().into(),
        w_cutoff: g.output.filter.w_cutoff,
        bits: g.output.bits,
        dither_seed: g.output.dither,
        spectra_per_heap: g.output.spectra_per_heap,
        heaps_per_frame: g.heaps_per_frame(),
        lag_samples: spec.lag,
        substreams: spec.substreams(),
        channels_per_substream: spec.substream_channels(),
        destinations: spec.dests.iter().map(|d| d.to_string()).collect(),
        heaps_sent: os.total_sent(),
        heaps_skipped: os.total_skipped(),
        heaps_sent_per_substream: per_sub(&os.heaps_sent),
        heaps_skipped_per_substream: per_sub(&os.heaps_skipped),
        packets: os.packets_sent.load(Relaxed),
        bytes: os.bytes_sent.load(Relaxed),
        send_errors: os.send_errors.load(Relaxed),
        last_timestamp: os.last_output_timestamp.load(Relaxed),
        saturated: os.saturated.iter().map(|c| c.load(Relaxed)).collect(),
        narrowband: match g.output.kind {
            OutputKind::Wideband => None,
            OutputKind::Narrowband(ddc) => {
                let word = os.mixer.as_ref().map_or(0, |m| m.load(Relaxed));
                Some(Narrowband {
                    centre_hz: crate::signal::ddc::centre_frequency(word, cfg.fs),
                    mixer_word: word,
                    decimation: ddc.decimation,
                    ddc_taps: ddc.taps,
                    bandwidth_hz: cfg.fs / (2 * ddc.decimation) as f64,
                    pass_bandwidth_hz: match ddc.bins {
                        Bins::CentreHalf => None,
                        Bins::All(pass) => {
                            Some(pass.fraction * cfg.fs / (2 * ddc.decimation) as f64)
                        }
                    },
                })
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::controller::tests::controller;
    use super::*;

    /// The status carries the configuration's shape and the counters, keyed by output name,
    /// and reads back through the shared type.
    #[test]
    fn status_has_the_documented_fields() {
        let (s, _rx) = controller();
        s.stats.outputs[0].heaps_sent[0].fetch_add(5, Relaxed);
        s.stats.pols[1].heaps_missing.fetch_add(2, Relaxed);
        s.stats.pols[0].digitiser_clip_heaps.fetch_add(4, Relaxed);
        s.stats.pols[0]
            .digitiser_clip_samples
            .fetch_add(900, Relaxed);
        s.stats.outputs[0].saturated[1].fetch_add(3, Relaxed);
        s.stats.pols[1].record_input(
            crate::signal::power::InputPower {
                sum_squares: 511 * 511 / 2 * 1000,
                full_scale: 7,
            },
            1000,
            10,
        );
        let st = build(&s.cfg, &s.stats, s.backend, true, Duration::ZERO, None);
        let v = serde_json::to_value(&st).unwrap();
        for key in [
            "backend",
            "fft_precision",
            "wideband_kernels",
            "input",
            "outputs",
            "queues",
            "frames",
            "control",
            "delays",
            "placement",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(
            v["placement"]["threads"]["fengine-recv0.0"]["policy"],
            "other"
        );
        assert_eq!(v["placement"]["memory_locked"], false);
        assert_eq!(v["fft_precision"], "single");
        assert_eq!(v["wideband_kernels"], "two-pass");
        assert_eq!(v["outputs"]["wideband"]["channels"], 16);
        assert_eq!(v["outputs"]["wideband"]["heaps_sent"], 5);
        assert_eq!(v["outputs"]["wideband"]["saturated"][1], 3);
        assert_eq!(v["input"]["pols"][1]["heaps_missing"], 2);
        assert_eq!(v["input"]["pols"][0]["digitiser_clip_heaps"], 4);
        assert_eq!(v["input"]["pols"][0]["digitiser_clip_samples"], 900);
        assert_eq!(v["input"]["pols"][1]["digitiser_clip_samples"], 0);
        assert_eq!(v["input"]["pols"][0]["rms_dbfs"], serde_json::Value::Null);
        let db = v["input"]["pols"][1]["rms_dbfs"].as_f64().unwrap();
        assert!(db.abs() < 0.01, "{db}");
        assert_eq!(v["input"]["pols"][1]["full_scale_samples"], 7);
        assert_eq!(v["input"]["pols"][1]["frames_measured"], 1);
        assert_eq!(v["input"]["heap_samples"], 1024);
        let back: Status = serde_json::from_value(v).unwrap();
        assert_eq!(back, st);
        assert_eq!(back.wideband().map(|o| o.taps), Some(4));
        assert_eq!(back.heaps_missing(), 2);
    }
}

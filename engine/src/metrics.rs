//! GET /metrics: a `prometheus-client` collector that reads the counters of [`crate::stats`] at
//! scrape time, so nothing is counted twice.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::backend::POLS;
use crate::stats::{LaneStalls, PolStats, Stats, ThreadWaits};

/// Content type of GET /metrics: Prometheus text exposition, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The labels every series of one engine carries.
#[derive(Clone, Copy, Debug)]
pub struct EngineLabels {
    /// "reference", "cpu", "cuda" or "null".
    pub backend: &'static str,
    /// Set where one process serves several engines, to tell their series apart; with one engine
    /// per process the scrape target (Prometheus's `instance`) already does, and the series keep
    /// today's labels.
    pub feng_id: Option<u64>,
}

/// The registry GET /metrics encodes: the engine's counters, read at scrape time, under its
/// labels.
pub fn registry(stats: Arc<Stats>, labels: &EngineLabels) -> Registry {
    let backend = (Cow::Borrowed("backend"), Cow::Borrowed(labels.backend));
    let mut registry = Registry::with_labels(std::iter::once(backend));
    let engine = match labels.feng_id {
        Some(id) => registry.sub_registry_with_label(("feng_id".into(), id.to_string().into())),
        None => &mut registry,
    };
    engine.register_collector(Box::new(StatsCollector(stats)));
    registry
}

/// Prometheus text exposition (version 0.0.4) of `registry`, then the process's own series
/// (`process_resident_memory_bytes`, `process_open_fds`, `process_threads`, ...), which carry no
/// engine labels: they describe the process, whichever engines it serves.
pub fn render(registry: &Registry) -> String {
    let mut out = String::with_capacity(8192);
    // Writing into a String cannot fail, and the collector's encoding does not either.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
    fgpu_serve::process::encode_into(&mut out);
    out
}

/// Label pairs of one series (the registry adds the engine's).
type Labels = Vec<(&'static str, String)>;

/// Reads [`Stats`] at each scrape; nothing is counted twice.
struct StatsCollector(Arc<Stats>);

impl std::fmt::Debug for StatsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatsCollector")
    }
}

/// One family of counters. `name` is without `_total`, which the encoder appends.
fn counters<V: prometheus_client::encoding::EncodeCounterValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, V)>,
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One family of gauges.
fn gauges<V: prometheus_client::encoding::EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, V)>,
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for StatsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let stats = &*self.0;
        let enc = &mut enc;
        let per_pol = |f: &dyn Fn(&PolStats) -> u64| -> Vec<(Labels, u64)> {
            (0..POLS)
                .map(|p| (vec![("pol", p.to_string())], f(&stats.pols[p])))
                .collect()
        };
        let none = |v: u64| [(Labels::new(), v)];
        // Per-output figures carry the output's name.
        let per_sub =
            |f: &dyn Fn(&crate::stats::OutputStats) -> &[AtomicU64]| -> Vec<(Labels, u64)> {
                stats
                    .outputs
                    .iter()
                    .flat_map(|o| {
                        f(o).iter().enumerate().map(|(i, c)| {
                            (
                                vec![("output", o.name.clone()), ("substream", i.to_string())],
                                c.load(Relaxed),
                            )
                        })
                    })
                    .collect()
            };
        let of_output =
            |f: &dyn Fn(&crate::stats::OutputStats) -> &AtomicU64| -> Vec<(Labels, u64)> {
                stats
                    .outputs
                    .iter()
                    .map(|o| (vec![("output", o.name.clone())], f(o).load(Relaxed)))
                    .collect()
            };
        counters(
            enc,
            "fengine_input_packets",
            "Digitiser packets received, rejected ones included.",
            per_pol(&|p| p.packets()),
        )?;
        counters(
            enc,
            "fengine_input_heaps",
            "Digitiser heaps received complete.",
            per_pol(&|p| p.heaps_received()),
        )?;
        counters(
            enc,
            "fengine_input_missing_heaps",
            "Digitiser heaps absent from the chunks processed.",
            per_pol(&|p| p.heaps_missing.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_resyncs",
            "Times the input stream jumped (digitiser restart) and the receiver started again.",
            per_pol(&|p| p.resyncs()),
        )?;
        counters(
            enc,
            "fengine_input_socket_drops",
            "Packets the kernel dropped because a receive socket's buffer was full (a GSO super-packet counts once).",
            per_pol(&|p| p.socket_drops.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_descriptor_heaps",
            "Descriptor heaps received (item descriptors, no timestamp): metadata, not rejected.",
            per_pol(&|p| p.descriptor_heaps.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_digitiser_clip_heaps",
            "Digitiser heaps received whose status item says a sample saturated at the digitiser.",
            per_pol(&|p| p.digitiser_clip_heaps.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_digitiser_clip_samples",
            "Saturated samples reported by the status items of the digitiser heaps received.",
            per_pol(&|p| p.digitiser_clip_samples.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_full_scale_samples",
            "Input samples at full scale (|v| >= 2^(bits-1) - 1, katgpucbf's saturation rule), in the frames measured (those whose heaps all arrived).",
            per_pol(&|p| p.full_scale_samples.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_frames_measured",
            "Frames whose input the backend measured with all their heaps present.",
            per_pol(&|p| p.frames_measured.load(Relaxed)),
        )?;
        gauges(
            enc,
            "fengine_input_rms_dbfs",
            "The input's rms in dB relative to a full-scale sine, over the latest frame measured (absent before the first).",
            (0..POLS).filter_map(|p| {
                let v = stats.pols[p].rms_dbfs()?;
                Some((vec![("pol", p.to_string())], v))
            }),
        )?;
        counters(
            enc,
            "fengine_input_unpaired_chunks",
            "Chunks processed without the other polarisation's chunk.",
            per_pol(&|p| p.unpaired_chunks.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_late_chunks",
            "Chunks dropped for coming after their frame had gone without them.",
            per_pol(&|p| p.late_chunks.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_input_rejected_packets",
            "Digitiser packets dropped, by reason.",
            (0..POLS).flat_map(|p| {
                stats.pols[p]
                    .rejects
                    .snapshot()
                    .into_iter()
                    .map(move |(reason, n)| {
                        (
                            vec![
                                ("pol", p.to_string()),
                                ("reason", reason.name().to_string()),
                            ],
                            n,
                        )
                    })
            }),
        )?;
        counters(
            enc,
            "fengine_output_heaps",
            "Output heaps sent.",
            per_sub(&|o| &o.heaps_sent),
        )?;
        counters(
            enc,
            "fengine_output_skipped_heaps",
            "Output heaps not sent because some spectrum in them lacked input.",
            per_sub(&|o| &o.heaps_skipped),
        )?;
        counters(
            enc,
            "fengine_output_packets",
            "Output packets sent.",
            of_output(&|o| &o.packets_sent),
        )?;
        counters(
            enc,
            "fengine_output_bytes",
            "Output bytes sent (headers included).",
            of_output(&|o| &o.bytes_sent),
        )?;
        counters(
            enc,
            "fengine_output_send_errors",
            "Output heaps abandoned because the socket refused them.",
            of_output(&|o| &o.send_errors),
        )?;
        gauges(
            enc,
            "fengine_output_centre_hz",
            "A narrowband output's centre frequency in use (the mixer word's, quantised), Hz.",
            (0..stats.outputs.len()).filter_map(|k| {
                let hz = stats.centre_hz(k)?;
                Some((vec![("output", stats.outputs[k].name.clone())], hz))
            }),
        )?;
        counters(
            enc,
            "fengine_control_rejected_requests",
            "Control requests refused with a 4xx status (nothing was changed).",
            none(stats.control_rejected.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_saturated",
            "Complex output values with a part clamped to [-127, 127].",
            stats.outputs.iter().flat_map(|o| {
                (0..POLS).map(move |p| {
                    (
                        vec![("output", o.name.clone()), ("pol", p.to_string())],
                        o.saturated[p].load(Relaxed),
                    )
                })
            }),
        )?;
        counters(
            enc,
            "fengine_frames",
            "Frames computed by the backend.",
            none(stats.frames_computed.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_empty_frames",
            "Frames with no input data, not computed.",
            none(stats.frames_empty.load(Relaxed)),
        )?;
        counters(
            enc,
            "fengine_delay_out_of_span",
            "Spectra (per polarisation) whose delay put the window outside the data kept.",
            none(stats.delay_out_of_span.load(Relaxed)),
        )?;
        gauges(
            enc,
            "fengine_queue_depth",
            "Items waiting in each queue between pipeline stages.",
            stats
                .queue_depths()
                .into_iter()
                .map(|(q, d)| (vec![("queue", q.to_string())], d as u64)),
        )?;
        // A histogram with only the +Inf bucket: the sum and count a summary would give, in a
        // type the crate encodes.
        let t = &stats.chunk_time;
        enc.encode_descriptor(
            "fengine_chunk_processing_seconds",
            "Time from handing a frame to the backend until its output is ready.",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(
            t.sum_ns.load(Relaxed) as f64 * 1e-9,
            t.count.load(Relaxed),
            &[],
            None,
        )?;
        gauges(
            enc,
            "fengine_last_frame_timestamp",
            "ADC timestamp of the chunk of the last frame computed.",
            [(Labels::new(), stats.last_frame_timestamp.load(Relaxed))],
        )?;
        gauges(
            enc,
            "fengine_last_frame_time_seconds",
            "Unix time at which the last frame was computed.",
            [(
                Labels::new(),
                stats.last_frame_unix_ns.load(Relaxed) as f64 * 1e-9,
            )],
        )?;
        stalls(enc, stats)?;
        katgpucbf(enc, stats)
    }
}

/// The counters katgpucbf's fgpu exports, under its names and labels (`pol`, and `stream` for
/// the output's name), so that what reads a katgpucbf engine's Prometheus port reads this engine
/// alike.
fn katgpucbf(enc: &mut DescriptorEncoder, stats: &Stats) -> std::fmt::Result {
    let per_pol = |f: &dyn Fn(&PolStats) -> u64| -> Vec<(Labels, u64)> {
        (0..POLS)
            .map(|p| (vec![("pol", p.to_string())], f(&stats.pols[p])))
            .collect()
    };
    let per_stream = |f: &dyn Fn(&crate::stats::OutputStats) -> &[AtomicU64]| {
        stats
            .outputs
            .iter()
            .map(|o| {
                let total = f(o).iter().map(|c| c.load(Relaxed)).sum::<u64>();
                (vec![("stream", o.name.clone())], total)
            })
            .collect::<Vec<(Labels, u64)>>()
    };
    counters(
        enc,
        "fgpu_input_heaps",
        "number of heaps received",
        per_pol(&|p| p.heaps_received()),
    )?;
    counters(
        enc,
        "fgpu_input_missing_heaps",
        "number of heaps dropped on the input",
        per_pol(&|p| p.heaps_missing.load(Relaxed)),
    )?;
    counters(
        enc,
        "fgpu_output_heaps",
        "number of heaps transmitted",
        per_stream(&|o| &o.heaps_sent),
    )?;
    counters(
        enc,
        "fgpu_output_skipped_heaps",
        "heaps not sent because input data was incomplete",
        per_stream(&|o| &o.heaps_skipped),
    )?;
    // katgpucbf adds these two where a heap is sent; this engine where a frame is computed (the
    // same values in a stream that lost nothing), both at once, so that their ratio holds at any
    // reading.
    counters(
        enc,
        "fgpu_output_samples",
        "number of complex samples transmitted",
        stats.outputs.iter().map(|o| {
            (
                vec![("stream", o.name.clone())],
                o.values.load(Relaxed) * POLS as u64,
            )
        }),
    )?;
    counters(
        enc,
        "fgpu_output_clipped_samples",
        "number of samples that were saturated",
        stats.outputs.iter().flat_map(|o| {
            (0..POLS).map(move |p| {
                (
                    vec![("stream", o.name.clone()), ("pol", p.to_string())],
                    o.saturated[p].load(Relaxed),
                )
            })
        }),
    )
}

fn seconds(ns: &AtomicU64) -> f64 {
    ns.load(Relaxed) as f64 / 1e9
}

/// The receive window, and what each thread saw of its stalls (see docs/reliability.md).
fn stalls(enc: &mut DescriptorEncoder, stats: &Stats) -> std::fmt::Result {
    let lanes: Vec<(Labels, &LaneStalls)> = (0..POLS)
        .flat_map(|p| {
            let lanes = stats.pols[p].lanes.get().map_or(&[][..], |l| &l[..]);
            lanes.iter().enumerate().map(move |(i, l)| {
                let labels = vec![("pol", p.to_string()), ("lane", i.to_string())];
                (labels, &**l)
            })
        })
        .collect();
    let threads: Vec<(Labels, Arc<ThreadWaits>)> = stats
        .threads
        .lock()
        .map(|t| {
            t.iter()
                .map(|(name, w)| (vec![("thread", name.clone())], Arc::clone(w)))
                .collect()
        })
        .unwrap_or_default();
    gauges(
        enc,
        "fengine_input_longest_gap_seconds",
        "Longest wall time between two receive rounds of a receive thread that got data while the stream flowed.",
        lanes
            .iter()
            .map(|(l, s)| (l.clone(), seconds(&s.longest_gap_ns))),
    )?;
    gauges(
        enc,
        "fengine_input_latest_heap_seconds",
        "How far behind its receive thread's newest heap the latest heap arrived (stream time; a receive window shorter than this lost heaps).",
        lanes
            .iter()
            .map(|(l, s)| (l.clone(), seconds(&s.latest_heap_ns))),
    )?;
    // Only threads the kernel keeps scheduler statistics for.
    let known = |w: &ThreadWaits| w.known.load(Relaxed);
    counters(
        enc,
        "fengine_input_sched_wait_seconds",
        "Time a receive thread was ready to run but waited for a core.",
        lanes
            .iter()
            .filter(|(_, s)| known(&s.waits))
            .map(|(l, s)| (l.clone(), seconds(&s.waits.wait_ns))),
    )?;
    gauges(
        enc,
        "fengine_input_max_sched_wait_seconds",
        "Most a receive thread waited for a core within one sampling interval (about 0.1 s).",
        lanes
            .iter()
            .filter(|(_, s)| known(&s.waits))
            .map(|(l, s)| (l.clone(), seconds(&s.waits.max_wait_ns))),
    )?;
    counters(
        enc,
        "fengine_thread_sched_wait_seconds",
        "Time a pipeline thread (pairing, compute, send) was ready to run but waited for a core.",
        threads
            .iter()
            .filter(|(_, w)| known(w))
            .map(|(l, w)| (l.clone(), seconds(&w.wait_ns))),
    )?;
    gauges(
        enc,
        "fengine_thread_max_sched_wait_seconds",
        "Most a pipeline thread waited for a core within one sampling interval (about 0.1 s).",
        threads
            .iter()
            .filter(|(_, w)| known(w))
            .map(|(l, w)| (l.clone(), seconds(&w.max_wait_ns))),
    )?;
    gauges(
        enc,
        "fengine_input_recv_window_chunks",
        "Chunks each receive thread holds open for late heaps.",
        [(Labels::new(), stats.recv_window_chunks.load(Relaxed))],
    )?;
    gauges(
        enc,
        "fengine_input_recv_window_seconds",
        "Duration of the receive window: how long after its end a chunk reaches processing.",
        [(
            Labels::new(),
            f64::from_bits(stats.recv_window_seconds_bits.load(Relaxed)),
        )],
    )?;
    gauges(
        enc,
        "fengine_input_recv_buffer_bytes",
        "Bytes of the receivers' spare chunk buffers (the windows included), both polarisations.",
        [(Labels::new(), stats.recv_spare_bytes.load(Relaxed))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> Arc<Stats> {
        let s = Stats::new(&[(fgpu_api::engine::WIDEBAND, 2)]);
        s.outputs[0].heaps_sent[1].fetch_add(3, Relaxed);
        s.outputs[0].heaps_sent[0].fetch_add(4, Relaxed);
        s.outputs[0].heaps_skipped[1].fetch_add(2, Relaxed);
        s.pols[1].heaps_missing.fetch_add(6, Relaxed);
        s.outputs[0].values.fetch_add(1024, Relaxed);
        s.outputs[0].saturated[1].fetch_add(5, Relaxed);
        s.pols[1].digitiser_clip_heaps.fetch_add(2, Relaxed);
        s.pols[1].digitiser_clip_samples.fetch_add(77, Relaxed);
        s.pols[0].record_input(
            crate::signal::power::InputPower {
                sum_squares: 0,
                full_scale: 5,
            },
            100,
            10,
        );
        s.chunk_time.record(std::time::Duration::from_millis(2));
        let lane = crate::stats::LaneStalls::default();
        lane.gap(std::time::Duration::from_millis(250), Some(4096));
        let _ = s.pols[1].lanes.set(vec![Arc::new(lane)]);
        let waits = Arc::new(ThreadWaits::default());
        waits.known.store(true, Relaxed);
        waits.max_wait_ns.store(180_000_000, Relaxed);
        s.threads
            .lock()
            .unwrap()
            .push(("fengine-pair".into(), waits));
        s.queues
            .lock()
            .unwrap()
            .push(("pair_to_compute", Box::new(|| 4)));
        Arc::new(s)
    }

    #[test]
    fn renders_every_family_with_the_backend_label() {
        let labels = EngineLabels {
            backend: "cpu",
            feng_id: None,
        };
        let text = render(&registry(stats(), &labels));
        assert!(text.contains(
            "fengine_output_heaps_total{backend=\"cpu\",output=\"wideband\",substream=\"1\"} 3\n"
        ));
        assert!(text.contains(
            "fengine_input_rejected_packets_total{backend=\"cpu\",pol=\"0\",reason=\"too_old\"} 0\n"
        ));
        assert!(text.contains("fengine_queue_depth{backend=\"cpu\",queue=\"pair_to_compute\"} 4\n"));
        assert!(text.contains("fengine_chunk_processing_seconds_count{backend=\"cpu\"} 1\n"));
        assert!(text.contains("fengine_control_rejected_requests_total{backend=\"cpu\"} 0\n"));
        assert!(text
            .contains("fengine_input_digitiser_clip_heaps_total{backend=\"cpu\",pol=\"1\"} 2\n"));
        assert!(text.contains(
            "fengine_input_digitiser_clip_samples_total{backend=\"cpu\",pol=\"1\"} 77\n"
        ));
        assert!(text
            .contains("fengine_input_digitiser_clip_samples_total{backend=\"cpu\",pol=\"0\"} 0\n"));
        assert!(
            text.contains("fengine_input_full_scale_samples_total{backend=\"cpu\",pol=\"0\"} 5\n")
        );
        // Silence reads -200 dBFS; pol 1 has no measure yet and no series.
        assert!(
            text.contains("fengine_input_rms_dbfs{backend=\"cpu\",pol=\"0\"} -200.0\n"),
            "{text}"
        );
        assert!(!text.contains("fengine_input_rms_dbfs{backend=\"cpu\",pol=\"1\"}"));
        assert!(text.contains("# TYPE fengine_saturated_total counter\n"));
        assert!(
            text.contains(
                "fengine_input_longest_gap_seconds{backend=\"cpu\",pol=\"1\",lane=\"0\"} 0.25\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "fengine_thread_max_sched_wait_seconds{backend=\"cpu\",thread=\"fengine-pair\"} 0.18\n"
        ));
        assert!(text.contains("fengine_thread_sched_wait_seconds_total{backend=\"cpu\",thread=\"fengine-pair\"} 0.0\n"));
        assert!(
            text.contains("\nprocess_resident_memory_bytes ")
                && text.contains("\nprocess_open_fds ")
                && text.contains("\nprocess_threads "),
            "the process series, without the engine's labels"
        );
        assert!(!text.contains("# EOF"), "Prometheus text, not OpenMetrics");
        // Every sample line has a value that parses, and a family declared before it.
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, v) = line.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{line}");
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| declared.contains(*f))
                .unwrap_or(name);
            assert!(declared.contains(family), "{line} has no TYPE line");
        }
    }

    /// katgpucbf's counters, under its names and labels: each output's substreams summed.
    #[test]
    fn katgpucbfs_counters_under_its_names() {
        let labels = EngineLabels {
            backend: "cpu",
            feng_id: None,
        };
        let text = render(&registry(stats(), &labels));
        for line in [
            "fgpu_output_heaps_total{backend=\"cpu\",stream=\"wideband\"} 7\n",
            "fgpu_output_skipped_heaps_total{backend=\"cpu\",stream=\"wideband\"} 2\n",
            "fgpu_input_missing_heaps_total{backend=\"cpu\",pol=\"1\"} 6\n",
            "fgpu_input_missing_heaps_total{backend=\"cpu\",pol=\"0\"} 0\n",
            "fgpu_input_heaps_total{backend=\"cpu\",pol=\"0\"} 0\n",
            "fgpu_output_samples_total{backend=\"cpu\",stream=\"wideband\"} 2048\n",
            "fgpu_output_clipped_samples_total{backend=\"cpu\",stream=\"wideband\",pol=\"1\"} 5\n",
            "fgpu_output_clipped_samples_total{backend=\"cpu\",stream=\"wideband\",pol=\"0\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    /// With several engines in one process, each engine's series also carry its feng_id.
    #[test]
    fn an_engine_label_when_asked() {
        let labels = EngineLabels {
            backend: "cuda",
            feng_id: Some(3),
        };
        let text = render(&registry(stats(), &labels));
        assert!(text.contains(
            "fengine_output_heaps_total{backend=\"cuda\",feng_id=\"3\",output=\"wideband\",substream=\"1\"} 3\n"
        ));
    }
}

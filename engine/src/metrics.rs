//! The Prometheus text rendering of GET /metrics, from the counters of [`crate::stats`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::backend::POLS;
use crate::stats::{OutputStats, PolStats, Stats};

/// Prometheus text exposition (version 0.0.4). Every series carries the backend as a label.
pub fn render(stats: &Stats, backend: &str) -> String {
    let mut out = String::with_capacity(8192);
    let b = format!("backend=\"{backend}\"");
    // The one output there is today (labels per output come with several).
    let no_output = OutputStats::default();
    let o = stats.outputs.first().unwrap_or(&no_output);
    let mut family = |name: &str, kind: &str, help: &str, series: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in series {
            let sep = if labels.is_empty() { "" } else { "," };
            let _ = writeln!(out, "{name}{{{b}{sep}{labels}}} {v}");
        }
    };
    let per_pol = |f: &dyn Fn(&PolStats) -> u64| -> Vec<(String, f64)> {
        (0..POLS)
            .map(|p| (format!("pol=\"{p}\""), f(&stats.pols[p]) as f64))
            .collect()
    };
    family(
        "fengine_input_packets_total",
        "counter",
        "Digitiser packets received, rejected ones included.",
        &per_pol(&|p| p.packets()),
    );
    family(
        "fengine_input_heaps_total",
        "counter",
        "Digitiser heaps received complete.",
        &per_pol(&|p| p.heaps_received()),
    );
    family(
        "fengine_input_missing_heaps_total",
        "counter",
        "Digitiser heaps absent from the chunks processed.",
        &per_pol(&|p| p.heaps_missing.load(Relaxed)),
    );
    family(
        "fengine_input_resyncs_total",
        "counter",
        "Times the input stream jumped (digitiser restart) and the receiver started again.",
        &per_pol(&|p| p.resyncs()),
    );
    family(
        "fengine_input_socket_drops_total",
        "counter",
        "Packets the kernel dropped because a receive socket's buffer was full (a GSO super-packet counts once).",
        &per_pol(&|p| p.socket_drops.load(Relaxed)),
    );
    family(
        "fengine_input_unpaired_chunks_total",
        "counter",
        "Chunks processed without the other polarisation's chunk.",
        &per_pol(&|p| p.unpaired_chunks.load(Relaxed)),
    );
    let mut rejects = Vec::new();
    for p in 0..POLS {
        for (reason, n) in stats.pols[p].rejects.snapshot() {
            rejects.push((
                format!("pol=\"{p}\",reason=\"{}\"", reason.name()),
                n as f64,
            ));
        }
    }
    family(
        "fengine_input_rejected_packets_total",
        "counter",
        "Digitiser packets dropped, by reason.",
        &rejects,
    );
    let per_sub = |v: &[AtomicU64]| -> Vec<(String, f64)> {
        v.iter()
            .enumerate()
            .map(|(i, c)| (format!("substream=\"{i}\""), c.load(Relaxed) as f64))
            .collect()
    };
    family(
        "fengine_output_heaps_total",
        "counter",
        "Output heaps sent.",
        &per_sub(&o.heaps_sent),
    );
    family(
        "fengine_output_skipped_heaps_total",
        "counter",
        "Output heaps not sent because some spectrum in them lacked input.",
        &per_sub(&o.heaps_skipped),
    );
    let one = |v: u64| vec![(String::new(), v as f64)];
    family(
        "fengine_output_packets_total",
        "counter",
        "Output packets sent.",
        &one(o.packets_sent.load(Relaxed)),
    );
    family(
        "fengine_output_bytes_total",
        "counter",
        "Output bytes sent (headers included).",
        &one(o.bytes_sent.load(Relaxed)),
    );
    family(
        "fengine_output_send_errors_total",
        "counter",
        "Output heaps abandoned because the socket refused them.",
        &one(o.send_errors.load(Relaxed)),
    );
    family(
        "fengine_control_rejected_requests_total",
        "counter",
        "Control requests refused with a 4xx status (nothing was changed).",
        &one(stats.control_rejected.load(Relaxed)),
    );
    family(
        "fengine_saturated_total",
        "counter",
        "Complex output values with a part clamped to [-127, 127].",
        &(0..POLS)
            .map(|p| (format!("pol=\"{p}\""), o.saturated[p].load(Relaxed) as f64))
            .collect::<Vec<_>>(),
    );
    family(
        "fengine_frames_total",
        "counter",
        "Frames computed by the backend.",
        &one(stats.frames_computed.load(Relaxed)),
    );
    family(
        "fengine_empty_frames_total",
        "counter",
        "Frames with no input data, not computed.",
        &one(stats.frames_empty.load(Relaxed)),
    );
    family(
        "fengine_delay_out_of_span_total",
        "counter",
        "Spectra (per polarisation) whose delay put the window outside the data kept.",
        &one(stats.delay_out_of_span.load(Relaxed)),
    );
    family(
        "fengine_queue_depth",
        "gauge",
        "Items waiting in each queue between pipeline stages.",
        &stats
            .queue_depths()
            .into_iter()
            .map(|(q, d)| (format!("queue=\"{q}\""), d as f64))
            .collect::<Vec<_>>(),
    );
    let t = &stats.chunk_time;
    family(
        "fengine_chunk_processing_seconds",
        "summary",
        "Time from handing a frame to the backend until its output is ready.",
        &[],
    );
    let _ = writeln!(
        out,
        "fengine_chunk_processing_seconds_sum{{{b}}} {}",
        t.sum_ns.load(Relaxed) as f64 * 1e-9
    );
    let _ = writeln!(
        out,
        "fengine_chunk_processing_seconds_count{{{b}}} {}",
        t.count.load(Relaxed)
    );
    let mut gauge = |name: &str, help: &str, v: f64| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{{{b}}} {v}");
    };
    gauge(
        "fengine_last_frame_timestamp",
        "ADC timestamp of the chunk of the last frame computed.",
        stats.last_frame_timestamp.load(Relaxed) as f64,
    );
    gauge(
        "fengine_last_frame_time_seconds",
        "Unix time at which the last frame was computed.",
        stats.last_frame_unix_ns.load(Relaxed) as f64 * 1e-9,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_the_backend_label() {
        let s = Stats::new(&[(crate::config::WIDEBAND, 2)]);
        s.outputs[0].heaps_sent[1].fetch_add(3, Relaxed);
        s.chunk_time.record(std::time::Duration::from_millis(2));
        s.queues
            .lock()
            .unwrap()
            .push(("pair_to_compute", Box::new(|| 4)));
        let text = render(&s, "cpu");
        assert!(text.contains("fengine_output_heaps_total{backend=\"cpu\",substream=\"1\"} 3"));
        assert!(text.contains(
            "fengine_input_rejected_packets_total{backend=\"cpu\",pol=\"0\",reason=\"too_old\"} 0"
        ));
        assert!(text.contains("fengine_queue_depth{backend=\"cpu\",queue=\"pair_to_compute\"} 4"));
        assert!(text.contains("fengine_chunk_processing_seconds_count{backend=\"cpu\"} 1"));
        // Every sample line has a value that parses.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{line}");
        }
    }
}

//! The harness's commands, one module each: its arguments (clap) and how it runs. Each brings
//! the system up through [`bringup`](crate::bringup), runs a measuring loop that produces
//! records, and hands the records to [`render`](crate::render).

use fgpu_api::engine::Status;

use crate::bringup::Setup;
use crate::control::Engine;
use crate::feng_raw::OutputBits;

pub mod max_rate;
pub mod qualify;
pub mod response;
pub mod soak;
pub mod watch;

/// Says on stderr what [`bringup::setup`](crate::bringup::setup) launched or attached to: the
/// services, which of the engine's outputs the harness reads and where it goes, and each
/// engine's output format and dither (read from its `/status`, once).
fn announce(s: &Setup) {
    let status = |e: &Engine| e.status().ok();
    let name = s.output_name();
    if s.array.is_none() {
        let st = status(&s.services.engine);
        let backend = st.as_ref().map_or(s.backend.as_str(), |st| &st.backend);
        eprintln!(
            "{} system: fengine --backend {backend} ({}), dsim ({}), {} ({})",
            if s.local { "local" } else { "attached" },
            s.services.engine.url(),
            s.services.dsim.url(),
            output_where(s),
            output_text(st.as_ref(), name, s.geometry.bits),
        );
        return;
    }
    eprintln!(
        "{} array of {} antennas: fengine --backend {}, {} ({})",
        if s.local { "local" } else { "attached" },
        s.services.antennas.len(),
        s.backend,
        output_where(s),
        s.geometry.bits
    );
    for (i, a) in s.services.antennas.iter().enumerate() {
        eprintln!(
            "  antenna {i}: fengine ({}), dsim ({}), tone {}, output {}",
            a.engine.url(),
            a.dsim.url(),
            s.tones
                .get(i)
                .copied()
                .flatten()
                .map_or("none".into(), |t| format!("{} Hz", t.frequency)),
            output_text(status(&a.engine).as_ref(), name, s.geometry.bits),
        );
    }
}

/// The output read and where it goes: `output wide (of wide, fine) at 239.10.1.1+3:7148`; the
/// engine's other outputs only when it has several, the name only when known.
fn output_where(s: &Setup) -> String {
    let name = match &s.output {
        Some(o) if o.outputs.len() > 1 => format!(" {} (of {})", o.name, o.outputs.join(", ")),
        Some(o) => format!(" {}", o.name),
        None => String::new(),
    };
    format!("output{name} at {}", s.rx.endpoint())
}

/// An engine's output `name` as [`announce`] gives it: `8-bit, dither seed 5`, `4-bit, no
/// dither`; from the engine's status when read, else only the bits the harness receives.
fn output_text(status: Option<&Status>, name: Option<&str>, bits: OutputBits) -> String {
    match status.zip(name).and_then(|(s, n)| s.output(n)) {
        Some(w) => format!(
            "{}-bit, {}",
            w.bits,
            w.dither_seed
                .map_or("no dither".into(), |d| format!("dither seed {d}"))
        ),
        None => format!("{bits}, dither unknown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_format_and_dither_as_announced() {
        let mut status: Status = serde_json::from_value(serde_json::json!({
            "backend": "cpu", "running": true, "uptime_s": 1.0, "feng_id": 0,
            "adc_sample_rate": 1e8, "sync_time": null, "max_delay_s": 0.0,
            "input": {"sample_bits": 10, "heap_samples": 4096, "chunk_samples": 1048576,
                      "overlap_samples": 30720, "pols": []},
            // An older engine's output: no bits, no dither seed.
            "outputs": {"wideband": {
                "kind": "wideband", "channels": 1024, "taps": 16, "spectra_per_heap": 256,
                "heaps_per_frame": 4, "lag_samples": 30720, "substreams": 1,
                "channels_per_substream": 1024, "destinations": [], "heaps_sent": 0,
                "heaps_skipped": 0, "heaps_sent_per_substream": [0],
                "heaps_skipped_per_substream": [0], "packets": 0, "bytes": 0,
                "send_errors": 0, "last_timestamp": 0, "saturated": [0, 0]}},
            "frames": {"computed": 0, "empty": 0, "last_timestamp": 0, "last_unix_time": 0.0,
                       "processing_s_last": 0.0, "processing_s_mean": 0.0},
            "delay_out_of_span": 0, "delays": null, "queues": {},
            "control": {"rejected_requests": 0}
        }))
        .unwrap();
        assert_eq!(
            output_text(Some(&status), Some("wideband"), OutputBits::Eight),
            "8-bit, no dither"
        );
        let w = status.outputs.get_mut("wideband").unwrap();
        w.bits = 4;
        w.dither_seed = Some(5);
        assert_eq!(
            output_text(Some(&status), Some("wideband"), OutputBits::Four),
            "4-bit, dither seed 5"
        );
        assert_eq!(
            output_text(None, Some("wideband"), OutputBits::Four),
            "4-bit, dither unknown"
        );
        // Another output's format, by its name.
        let mut fine = status.outputs["wideband"].clone();
        fine.bits = 8;
        fine.dither_seed = None;
        status.outputs.insert("fine".into(), fine);
        assert_eq!(
            output_text(Some(&status), Some("fine"), OutputBits::Eight),
            "8-bit, no dither"
        );
    }
}

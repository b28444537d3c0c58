//! What each stage of the pipeline needs from the configuration, built once here from
//! [`EngineConfig`]: the stages see only their own spec ([`FrameSpec`], [`RecvSpec`],
//! [`PairSpec`], [`ComputeSpec`], one [`SendSpec`] per output), never the whole configuration.

use std::time::Duration;

use spead::transport::SocketConfig;

use super::compute::{ComputeOutput, ComputeSpec};
use super::pair::PairSpec;
use super::recv::RecvSpec;
use super::send::SendSpec;
use super::{max_pending, recv_window, FrameSpec};
use crate::config::{EngineConfig, StreamPlacement};

/// Every stage's spec, from one configuration.
#[derive(Clone, Debug)]
pub struct StageSpecs {
    pub frame: FrameSpec,
    pub recv: RecvSpec,
    pub pair: PairSpec,
    pub compute: ComputeSpec,
    /// One per output, in the configuration's order.
    pub send: Vec<SendSpec>,
    /// Where each stream thread runs (the send threads' are also in `send`).
    pub placement: StreamPlacement,
}

impl StageSpecs {
    pub fn new(cfg: &EngineConfig) -> Self {
        let input = &cfg.input;
        let slots = cfg.heaps_per_chunk();
        let chunk_seconds = cfg.chunk_seconds();
        let max_pending = max_pending(slots * input.heap_bytes, chunk_seconds);
        let window = recv_window(input.recv_window, chunk_seconds);
        let socket = |gso: bool| SocketConfig {
            buffer_bytes: cfg.socket_buffer,
            interface: cfg.interface,
            ttl: cfg.ttl,
            gso,
            gro: !gso,
        };
        Self {
            frame: FrameSpec {
                input: input.geometry,
                outputs: cfg.output_geometries(),
                gains: cfg.outputs.iter().map(|o| o.gain).collect(),
                slots,
                recv_lanes: input.recv_threads,
                max_pending,
                recv_window: window,
            },
            recv: RecvSpec {
                socket: socket(false),
                sources: input.sources.clone(),
                lanes: input.recv_threads,
                slots,
                heap_samples: input.heap_samples,
                heap_bytes: input.heap_bytes,
                chunk_samples: input.geometry.chunk_samples,
                fs: cfg.fs,
                window,
            },
            pair: PairSpec {
                chunk_samples: input.geometry.chunk_samples as u64,
                chunk: Duration::from_secs_f64(chunk_seconds.min(60.0)),
                max_pending,
            },
            compute: ComputeSpec {
                slots,
                heap_samples: input.heap_samples,
                outputs: (0..cfg.outputs.len())
                    .map(|k| ComputeOutput {
                        g: cfg.channelisation(k),
                        plan: cfg.plan(k),
                        mixer: cfg.outputs[k].mixer(),
                    })
                    .collect(),
            },
            send: cfg
                .outputs
                .iter()
                .enumerate()
                .map(|(k, o)| SendSpec {
                    g: cfg.channelisation(k),
                    plan: cfg.plan(k),
                    dests: o.dests.clone(),
                    threads: o.send_threads,
                    socket: socket(true),
                    packet_payload: cfg.packet_payload,
                    rate_factor: cfg.send_rate_factor,
                    burst: cfg.send_burst,
                    fs: cfg.fs,
                    array_size: cfg.array_size,
                    feng_id: cfg.feng_id,
                    placements: cfg.placement.send.get(k).cloned().unwrap_or_default(),
                })
                .collect(),
            placement: cfg.placement.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{config, test_args};
    use crate::pipeline::{recv_window, spare_chunks, RECV_WINDOW};

    /// Chunks of 4096 samples at 1 MHz: 4.096 ms each.
    const SMALL: [&str; 12] = [
        "--channels",
        "16",
        "--taps",
        "2",
        "--spectra-per-heap",
        "64",
        "--heaps-per-frame",
        "2",
        "--heap-samples",
        "256",
        "--adc-sample-rate",
        "1e6",
    ];

    #[test]
    fn a_window_in_seconds_is_whole_chunks_and_at_least_the_minimum() {
        let with = |w: &str| {
            let mut a = SMALL.to_vec();
            a.extend(["--recv-window", w]);
            StageSpecs::new(&config(&a))
        };
        // 0.5 s / 4.096 ms = 122.07: 123 chunks; the spare buffers grow with it.
        let s = with("0.5");
        assert_eq!(s.recv.window, 123);
        assert_eq!(s.frame.recv_window, 123);
        let minimum = with("0.001");
        assert_eq!(
            spare_chunks(123, s.frame.max_pending, 1)
                - spare_chunks(RECV_WINDOW, minimum.frame.max_pending, 1),
            120
        );
        // Exactly 10 chunks is 10, not 11.
        assert_eq!(with("0.04096").recv.window, 10);
        // Less than three chunks is three.
        assert_eq!(with("0.001").recv.window, RECV_WINDOW);
        // The default is the minimum, whatever the chunk.
        let default = StageSpecs::new(&config(&SMALL));
        assert_eq!(default.recv.window, RECV_WINDOW);
        assert_eq!(recv_window(None, 1e-6), RECV_WINDOW);
        assert_eq!(recv_window(Some(0.5), 1e-3), 500);
    }

    #[test]
    fn a_window_that_is_no_duration_is_refused() {
        for w in ["0", "-1", "nan", "inf", "11"] {
            let flag = format!("--recv-window={w}");
            let mut a = SMALL.to_vec();
            a.push(&flag);
            let e = crate::config::EngineConfig::from_args(&test_args(&a).unwrap())
                .expect_err(w)
                .to_string();
            assert!(e.starts_with("--recv-window "), "{e}");
        }
    }
}

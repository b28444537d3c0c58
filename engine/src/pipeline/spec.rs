//! What each stage of the pipeline needs from the configuration, built once here from
//! [`EngineConfig`]: the stages see only their own spec ([`FrameSpec`], [`RecvSpec`],
//! [`PairSpec`], [`ComputeSpec`], one [`SendSpec`] per output), never the whole configuration.

use std::time::Duration;

use spead::transport::SocketConfig;

use super::compute::{ComputeOutput, ComputeSpec};
use super::pair::PairSpec;
use super::recv::RecvSpec;
use super::send::SendSpec;
use super::{max_pending, FrameSpec};
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

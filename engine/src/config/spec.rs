//! The checked configuration: the engine's input and outputs ([`EngineConfig`], [`InputSpec`],
//! [`OutputSpec`]) and what they imply for each output.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use super::flags::{BackendKind, FftPrecision, WidebandKernels};
use crate::backend::{Channelisation, InputGeometry, OutputGeometry, POLS};
use crate::signal::delay::FramePlan;

/// Everything the pipeline needs, checked and derived from [`RunArgs`](super::RunArgs): the engine's one input,
/// its outputs, and what the engine as a whole runs with.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub input: InputSpec,
    /// The outputs, 1 to [`MAX_OUTPUTS`](super::MAX_OUTPUTS), in the order given: `--dst` makes one, [`WIDEBAND`](super::WIDEBAND);
    /// each `--wideband` one of the name it gives (unique, [`check_output_name`](super::check_output_name)). Every output
    /// is a whole number of heaps per frame, and no two share a destination address and port.
    pub outputs: Vec<OutputSpec>,
    /// Largest coarse delay magnitude in samples that keeps every window inside the span.
    pub max_delay_samples: u64,
    pub max_delay: f64,
    pub fs: f64,
    pub sync_time: Option<f64>,
    pub interface: Option<Ipv4Addr>,
    pub feng_id: u64,
    pub array_size: u64,
    pub packet_payload: usize,
    pub ttl: u32,
    pub send_rate_factor: f64,
    /// How far ahead of its pace output may leave.
    pub send_burst: Duration,
    pub socket_buffer: usize,
    pub backend: BackendKind,
    pub fft_precision: FftPrecision,
    pub wideband_kernels: WidebandKernels,
    pub gpu: usize,
    pub control: SocketAddr,
    /// The bearer token that changes over HTTP need, if any.
    pub control_token: Option<fgpu_serve::Token>,
    /// Where the stream threads run.
    pub placement: super::StreamPlacement,
    /// The katcp front's address, if it is on.
    pub katcp: Option<SocketAddr>,
}

/// The engine's input: both polarisations of one digitiser.
#[derive(Clone, Debug)]
pub struct InputSpec {
    pub geometry: InputGeometry,
    /// Samples per digitiser heap.
    pub heap_samples: usize,
    /// Packed bytes of one digitiser heap.
    pub heap_bytes: usize,
    pub sources: [Vec<SocketAddrV4>; POLS],
    /// Receive threads per polarisation (at least 1, at most one per source address).
    pub recv_threads: usize,
    /// `--recv-window`: the receive window in seconds, when given (see
    /// `crate::pipeline::recv_window`).
    pub recv_window: Option<f64>,
}

/// One output stream of the engine: what it computes and where it goes.
#[derive(Clone, Debug)]
pub struct OutputSpec {
    /// Keys the output in stats, control and `/status` ([`WIDEBAND`](super::WIDEBAND) for `--dst`'s output).
    pub name: String,
    /// What it computes, its kind ([`crate::backend::OutputKind`]) included.
    pub geometry: OutputGeometry,
    /// Spectrum m of the frame whose chunk starts at T has timestamp T - lag + m step (step 2n,
    /// or 2nD for a narrowband output).
    pub lag: usize,
    /// Substream destinations: substream i carries channels [i c, (i+1) c), c = channels / N.
    pub dests: Vec<SocketAddrV4>,
    /// Initial complex gain (real) for every channel of both polarisations.
    pub gain: f32,
    /// Send threads (at least 1, at most one per substream).
    pub send_threads: usize,
    /// What its kind starts with beyond the geometry; the same kind as the geometry's.
    pub start: OutputStart,
}

/// What an output of each kind starts with beyond its geometry: values the control API may
/// change at run time, unlike the geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStart {
    Wideband,
    Narrowband {
        /// The mixer word at start (`ddc::mixer_word` of its `centre=`, checked).
        mixer: u32,
    },
}

impl OutputSpec {
    /// A narrowband output's mixer word at start; `None` for a wideband output.
    pub fn mixer(&self) -> Option<u32> {
        match self.start {
            OutputStart::Wideband => None,
            OutputStart::Narrowband { mixer } => Some(mixer),
        }
    }
}

impl EngineConfig {
    /// Output `k`'s view of the input.
    pub fn channelisation(&self, k: usize) -> Channelisation {
        Channelisation::new(self.input.geometry, self.outputs[k].geometry)
    }

    /// Every output's geometry, in order: what backends are built for.
    pub fn output_geometries(&self) -> Vec<OutputGeometry> {
        self.outputs.iter().map(|o| o.geometry).collect()
    }

    /// Where output `k`'s spectra sit relative to the ADC stream.
    pub fn plan(&self, k: usize) -> FramePlan {
        FramePlan {
            lag: self.outputs[k].lag,
            fs: self.fs,
        }
    }

    /// Digitiser heaps per chunk (slots of the chunk assembler).
    pub fn heaps_per_chunk(&self) -> usize {
        self.input.geometry.chunk_samples / self.input.heap_samples
    }

    /// Wall-clock duration of one chunk.
    pub fn chunk_seconds(&self) -> f64 {
        self.input.geometry.chunk_samples as f64 / self.fs
    }
}

impl OutputSpec {
    pub fn substreams(&self) -> usize {
        self.dests.len()
    }

    /// Channels per output substream.
    pub fn substream_channels(&self) -> usize {
        self.geometry.channels / self.substreams()
    }

    /// Bytes of one substream's heap: its channels' slice of a heap.
    pub fn substream_bytes(&self) -> usize {
        self.geometry.heap_bytes() / self.substreams()
    }

    /// Samples between consecutive output heaps of one substream (S x 2n).
    pub fn heap_timestamp_step(&self) -> u64 {
        self.geometry.heap_samples() as u64
    }
}

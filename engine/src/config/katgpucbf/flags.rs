//! Every flag of katgpucbf's `fgpu` (`src/katgpucbf/fgpu/main.py` and the shared
//! `katgpucbf/main.py`), with katgpucbf's defaults, as clap parses them. Long options may be
//! shortened to any unambiguous prefix, as argparse allows.

use clap::Parser;

use super::output::KatOutput;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "fgpu",
    version,
    infer_long_args = true,
    about = "fengine reading katgpucbf's fgpu command line (see docs/katgpucbf.md): the same \
             flags and defaults, each either honoured, done the way this engine does it (said \
             in the start-up log) or refused with a sentence."
)]
pub struct FgpuArgs {
    /// A wideband output: name=,channels=,dst= and optionally taps=, w_cutoff=,
    /// window_function=hann|rect, dither=none|uniform, jones_per_batch= (repeatable).
    #[arg(long, value_name = "KEY=VALUE[,KEY=VALUE...]", value_parser = KatOutput::wideband)]
    pub wideband: Vec<KatOutput>,
    /// A narrowband output: the wideband keys and centre_frequency=, decimation=, ddc_taps=,
    /// weight_pass= (repeatable).
    #[arg(long, value_name = "KEY=VALUE[,KEY=VALUE...]", value_parser = KatOutput::narrowband)]
    pub narrowband: Vec<KatOutput>,
    /// katcp host (default: every interface).
    #[arg(long, default_value = "")]
    pub katcp_host: String,
    /// katcp port.
    #[arg(long, default_value_t = 7147)]
    pub katcp_port: u16,
    /// Port for Prometheus metrics (default: none): this engine's HTTP API, whose GET /metrics
    /// is Prometheus text, on every interface.
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    /// Python's asyncio monitor: accepted, nothing listens (there is no Python in this engine).
    #[arg(long)]
    pub aiomonitor: bool,
    #[arg(long)]
    pub aiomonitor_host: Option<String>,
    #[arg(long)]
    pub aiomonitor_port: Option<u16>,
    #[arg(long)]
    pub aiomonitor_webui_port: Option<u16>,
    #[arg(long)]
    pub aioconsole_port: Option<u16>,
    /// Input network device(s), by name (or IPv4 address).
    #[arg(long, value_delimiter = ',', value_name = "IFACE,...")]
    pub recv_interface: Vec<String>,
    /// ibverbs receive: the same packets go through kernel UDP sockets (GRO) here.
    #[arg(long)]
    pub recv_ibv: bool,
    /// Cores for the receive threads (-1: not bound).
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "-1"
    )]
    pub recv_affinity: Vec<i64>,
    /// ibverbs completion vectors: no meaning without ibverbs.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "0"
    )]
    pub recv_comp_vector: Vec<i64>,
    /// Receive buffer in bytes.
    #[arg(long, default_value_t = 1 << 27)]
    pub recv_buffer: usize,
    /// Samples per digitiser packet.
    #[arg(long, default_value_t = 4096)]
    pub recv_packet_samples: usize,
    /// Core for the send thread (-1: not bound).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub send_affinity: i64,
    /// Output network device(s), by name (or IPv4 address).
    #[arg(long, value_delimiter = ',', required = true, value_name = "IFACE,...")]
    pub send_interface: Vec<String>,
    /// Multicast TTL of the output.
    #[arg(long, default_value_t = 4)]
    pub send_ttl: u32,
    /// Send buffer in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub send_buffer: usize,
    /// ibverbs send: the same packets go through kernel UDP sockets (GSO) here.
    #[arg(long)]
    pub send_ibv: bool,
    /// ibverbs completion vector: no meaning without ibverbs.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub send_comp_vector: i64,
    /// Output rate as a multiple of the input's (0: as fast as possible).
    #[arg(long, default_value_t = 1.1)]
    pub send_rate_factor: f64,
    /// Payload bytes of an output packet.
    #[arg(long, default_value_t = 8192)]
    pub send_packet_payload: usize,
    /// ADC sample rate in Hz.
    #[arg(long, required = true)]
    pub adc_sample_rate: f64,
    /// Unix time of ADC timestamp 0.
    #[arg(long, required = true)]
    pub sync_time: f64,
    /// This engine's index in the array.
    #[arg(long, default_value_t = 0)]
    pub feng_id: u64,
    /// Engines in the array.
    #[arg(long, default_value_t = 65536)]
    pub array_size: u64,
    /// Jones vectors per output heap, for outputs that do not give jones_per_batch=.
    #[arg(long, default_value_t = 1 << 20)]
    pub jones_per_batch: usize,
    /// At most this many samples per polarisation in a frame (at least one heap of every output).
    #[arg(long, default_value_t = 1 << 25)]
    pub recv_chunk_samples: usize,
    /// At most this many Jones vectors of one output in a frame (rounded up to a heap).
    #[arg(long, default_value_t = 1 << 23)]
    pub send_chunk_jones: usize,
    /// Largest delay difference between the polarisations, in samples: here the largest delay
    /// magnitude (--max-delay, in seconds at the ADC rate).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_delay_diff: u64,
    /// Bits per digitiser sample.
    #[arg(long, default_value_t = 10)]
    pub dig_sample_bits: u32,
    /// Bits per output component: 8 or 4.
    #[arg(long, default_value_t = 8)]
    pub send_sample_bits: u32,
    /// Initial gain of every channel (default: this engine's, 1 at 10-bit input as fgpu's).
    #[arg(long, allow_negative_numbers = true)]
    pub gain: Option<f32>,
    /// Refused: this engine reads timestamps as the digitiser sends them.
    #[arg(long)]
    pub mask_timestamp: bool,
    /// Chunks assembled in GPU memory: here in pinned host memory, copied to the GPU.
    #[arg(long)]
    pub use_vkgdr: bool,
    /// Output sent from GPU memory: here copied to host memory and sent from there.
    #[arg(long)]
    pub use_peerdirect: bool,
    /// Refused: katgpucbf's queue monitor file, which this engine does not keep.
    #[arg(long)]
    pub monitor_log: Option<String>,
    /// Source endpoints, both polarisations: ADDR[+N][:PORT],... (the first half pol0, the
    /// second pol1; default port 7148).
    pub src: String,
}

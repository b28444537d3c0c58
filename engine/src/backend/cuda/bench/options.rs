//! What the benchmark measures, and the geometries and labels it derives from that.

use crate::backend::cuda::Tuning;
use crate::backend::{Channelisation, InputGeometry, OutputGeometry, OutputKind};
use crate::bench::BenchNarrowband;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub channels: Vec<usize>,
    pub taps: usize,
    pub sample_bits: u32,
    /// Output bits (8 or 4) and whether the output is dithered.
    pub output_bits: u32,
    pub dither: bool,
    pub spectra_per_heap: usize,
    /// New samples per polarisation per frame (rounded to whole heaps).
    pub chunk_samples: usize,
    /// Timed repetitions of the GPU-only pass (median reported).
    pub iterations: usize,
    /// Frames pushed through the whole backend (after warm-up).
    pub frames: usize,
    pub gpu_index: usize,
    /// Launch shapes to compare at `variant_channels` (GPU only); empty for none.
    pub variants: Vec<Tuning>,
    pub variant_channels: usize,
    /// Chunk sizes (samples per pol) at which to repeat (b) at `variant_channels`; empty for none.
    pub e2e_chunks: Vec<usize>,
    /// Narrowband outputs (with discard or without) computed beside each wideband one in (a),
    /// (b) and (c), from the same input: the figures are then the whole set's.
    pub narrowband: Vec<BenchNarrowband>,
    /// Outputs per `ddc` thread to compare for the set at `variant_channels` (GPU only, needs
    /// narrowband outputs); empty for none.
    pub ddc_variants: Vec<usize>,
    /// The launch choices of tables (a) to (c).
    pub tuning: Tuning,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            channels: vec![1024, 4096, 8192, 32768, 65536],
            taps: 16,
            sample_bits: 10,
            output_bits: 8,
            dither: false,
            spectra_per_heap: 256,
            chunk_samples: 1 << 26,
            iterations: 20,
            frames: 120,
            gpu_index: 0,
            variants: Vec::new(),
            variant_channels: 32768,
            e2e_chunks: Vec::new(),
            narrowband: Vec::new(),
            ddc_variants: Vec::new(),
            tuning: Tuning::default(),
        }
    }
}

pub(super) fn geometry(opts: &BenchOptions, channels: usize) -> Channelisation {
    let heap_samples = opts.spectra_per_heap * 2 * channels;
    let heaps_per_frame = (opts.chunk_samples / heap_samples).max(1);
    Channelisation::new(
        InputGeometry {
            sample_bits: opts.sample_bits,
            chunk_samples: heaps_per_frame * heap_samples,
            // Room for the FIR's history and 2048 samples of coarse delay either way.
            overlap_samples: (opts.taps - 1) * 2 * channels + 4096,
        },
        OutputGeometry {
            channels,
            taps: opts.taps,
            spectra_per_heap: opts.spectra_per_heap,
            bits: opts.output_bits,
            filter: Default::default(),
            dither: opts.dither.then_some(1),
            kind: OutputKind::Wideband,
        },
    )
}

/// The wideband output of `channels` channels and the options' narrowband outputs, on one input
/// whose overlap holds every output's window (and 2048 samples of coarse delay either way). A
/// narrowband output's heaps are at most a frame long.
pub(super) fn output_set(opts: &BenchOptions, channels: usize) -> Vec<Channelisation> {
    let wide = geometry(opts, channels);
    let chunk = wide.input.chunk_samples;
    let mut outputs = vec![wide.output];
    for nb in &opts.narrowband {
        let step = 2 * nb.channels * nb.decimation;
        outputs.push(OutputGeometry {
            channels: nb.channels,
            spectra_per_heap: opts.spectra_per_heap.min(chunk / step).max(1),
            // Checked where it was parsed.
            kind: nb.kind().unwrap_or(OutputKind::Wideband),
            ..wide.output
        });
    }
    let overlap = outputs
        .iter()
        .map(|o| o.window() - o.step() + 4096)
        .max()
        .unwrap_or(0)
        .next_multiple_of(256);
    let input = InputGeometry {
        overlap_samples: overlap,
        ..wide.input
    };
    outputs
        .into_iter()
        .map(|o| Channelisation::new(input, o))
        .collect()
}

/// Which kernels run the wideband output, for the bench's header.
pub(super) fn wideband_kernels(t: &kernels::Tuning) -> String {
    let three = "three passes (pfb_fir, cuFFT, postproc)";
    if !t.fused {
        return three.to_string();
    }
    let rows = if t.half_rows { ", float16 rows" } else { "" };
    let two = match t.fused_chunk {
        0 => format!("two passes (fused_fir in the fir column, fused_post in post{rows})"),
        k => format!("two passes in chunks of {k} spectra{rows} (fir column: both)"),
    };
    let sizes = match t.fused_max_channels {
        usize::MAX => format!("from {} channels", kernels::FUSED_MIN_CHANNELS),
        max => format!("from {} to {max} channels", kernels::FUSED_MIN_CHANNELS),
    };
    format!("{two} {sizes}, else {three}")
}

/// A short description of the narrowband outputs, for the report.
pub(super) fn narrowband_label(opts: &BenchOptions) -> String {
    if opts.narrowband.is_empty() {
        return String::new();
    }
    let list: Vec<String> = opts.narrowband.iter().map(BenchNarrowband::label).collect();
    format!(" + narrowband {}", list.join(", "))
}

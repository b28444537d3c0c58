//! The wideband output in two passes (`fused_fir`, `fused_post`; kernels/src/fused.cu), optionally
//! in chunks of spectra: each chunk's rows go to one of a few ring slots and are read back by
//! `fused_post` on a stream of its own while `fused_fir` makes the next chunk, so that the rows
//! are read from L2 rather than device memory, and a slot is overwritten while still in L2.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};

use super::compile::FusedKernels;
use super::device::{driver, DeviceBuffer};
use super::pipeline::SpanView;
use crate::backend::{Result, POLS};

/// Ring slots of a chunked run: `fused_fir` may be this many chunks ahead of `fused_post`.
const RING: usize = 3;
/// Spectra a `fused_fir` block slides through unless [`kernels::Tuning::fused_fir_spectra`] says:
/// 512 made `fused_fir` 2-7% faster than 8T = 128 at 4096-65536 channels, 16 taps (whole frames
/// 1-3%; kernels/HISTORY.md, "Version 10").
const FUSED_FIR_SPECTRA: usize = 512;

/// Device pointers of one frame's pass over an output.
pub(crate) struct FusedArgs {
    pub span: SpanView,
    pub offsets: sys::CUdeviceptr,
    pub weights: sys::CUdeviceptr,
    pub wn: sys::CUdeviceptr,
    pub fixup: sys::CUdeviceptr,
    pub gains: sys::CUdeviceptr,
    pub rotation: sys::CUdeviceptr,
    pub out: sys::CUdeviceptr,
    pub saturated: sys::CUdeviceptr,
    /// The frame's key for the float16 rows' rounding (unused for float32 rows).
    pub row_key: u32,
}

/// Chunked runs: the post stream and the events that order the ring.
struct Chunked {
    post: Arc<CudaStream>,
    start: CudaEvent,
    made: Vec<CudaEvent>,
    read: Vec<CudaEvent>,
}

pub(crate) struct FusedRun {
    kernels: FusedKernels,
    /// Spectra per chunk (the whole frame when not chunked).
    chunk: usize,
    /// Chunks the rows buffer holds.
    slots: usize,
    /// Complex values of one spectrum's rows (n).
    points: usize,
    /// Bytes of one of those values: 8 in float32, 4 in float16.
    row_bytes: usize,
    /// What `fused_fir` scales the rows by (a power of two; 1 in float32) and `fused_post`
    /// divides out again.
    row_scale: f32,
    fir: LaunchConfig,
    fir_spectra_per_block: u32,
    post: LaunchConfig,
    post_spectra_per_block: u32,
    /// The most `fused_post` blocks a launch takes: whole waves of as many as fit at once.
    post_blocks: u32,
    chunked: Option<Chunked>,
    /// [slot][pol][chunk][R][A] complex float32 or float16.
    rows: DeviceBuffer,
    /// Where `fused_fir` takes its samples by tensor copy (`kernels::Config::fused_fir_tma`).
    tma: Option<SpanBoxes>,
}

/// The shape of `fused_fir`'s tensor copies: words x column groups x spectra of a span.
#[derive(Clone, Copy, Debug)]
struct SpanBoxes {
    groups: u64,
    batch: u64,
    /// Words from a column group's samples to the next's (2A samples), and from a spectrum's to
    /// the next's (2n samples).
    group_words: u64,
    spectrum_words: u64,
}

/// `fused.cu`'s `SpanMaps`: a tensor map a polarisation, and the words from their 16-byte
/// aligned start to the span's first.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct SpanMaps {
    pol: [sys::CUtensorMap; POLS],
    lead: u32,
}
// SAFETY: plain bytes, passed by value as fused_fir's last parameter (`__grid_constant__`).
unsafe impl DeviceRepr for SpanMaps {}

impl SpanBoxes {
    /// The maps of `span`. A map's innermost extent stops where a box's last row would read
    /// past the span's two words of padding: the words it cuts off only ever go unread.
    fn maps(&self, span: &SpanView) -> Result<SpanMaps> {
        let lead = (span.ptr % 16) / 4;
        let reach = (self.groups - 1) * self.group_words + (self.batch - 1) * self.spectrum_words;
        let inner = (lead + span.words + 2).saturating_sub(reach).max(16);
        let map = |pol: u64| {
            word_map(
                span.ptr + pol * 4 * span.stride_words - 4 * lead,
                [inner, self.groups, self.batch],
                [4 * self.group_words, 4 * self.spectrum_words],
                [
                    kernels::FIR_TMA_WORDS as u32,
                    self.groups as u32,
                    self.batch as u32,
                ],
            )
        };
        Ok(SpanMaps {
            pol: [map(0)?, map(1)?],
            lead: lead as u32,
        })
    }
}

/// A tensor map of 32-bit words from `base` (16-byte aligned): `dims` innermost first, the outer
/// two `strides` bytes apart (multiples of 16, and they may overlap the extent inside them), copied
/// in boxes of `boxes`. `fused_fir`'s maps, and examples/tma_probe's.
pub fn word_map(
    base: sys::CUdeviceptr,
    dims: [u64; 3],
    strides: [u64; 2],
    boxes: [u32; 3],
) -> Result<sys::CUtensorMap> {
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    let steps = [1u32; 3];
    // SAFETY: arrays of the rank's length; the driver writes the map.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT32,
            3,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(driver("encoding a tensor map"))?;
    // SAFETY: written by the driver.
    Ok(unsafe { map.assume_init() })
}

impl FusedRun {
    /// `fused_fir` and `fused_post` as loaded.
    pub(super) fn kernels(&self) -> &FusedKernels {
        &self.kernels
    }

    /// For `cfg` and frames of `spectra` spectra, chunks of `chunk` (0: the whole frame), rows
    /// scaled by `row_scale` (see `signal::half_rows::row_scale`; 1 for float32 rows).
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        kernels: FusedKernels,
        cfg: &kernels::Config,
        spectra: usize,
        chunk: usize,
        row_scale: f32,
    ) -> Result<Self> {
        let (r, a) = cfg.fused_split();
        let (_, post_spectra) = cfg.fused_post_spectra();
        let batch = cfg.tuning.fir_batch;
        // Whole batches and whole post blocks per chunk.
        let unit = batch.max(post_spectra);
        let chunk = match chunk {
            0 => spectra,
            k => k.next_multiple_of(unit).min(spectra),
        };
        let chunked = chunk < spectra;
        let slots = if chunked { RING } else { 1 };
        let cols = cfg.fused_columns();
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("reading the multiprocessor count"))? as usize;
        // Runs of FUSED_FIR_SPECTRA per block (few window reloads and block starts, and few
        // waves, so that the last one's idle SMs cost little), unless that leaves fewer blocks
        // than fit at once (16 warps an SM, as registers allow).
        let mut per_block = match cfg.tuning.fused_fir_spectra {
            0 => FUSED_FIR_SPECTRA,
            k => k.next_multiple_of(batch),
        };
        let wave = 512 / (r * cols) * sms;
        while cfg.tuning.fused_fir_spectra == 0
            && per_block > batch
            && (a / cols) * chunk.div_ceil(per_block) * POLS < wave
        {
            per_block /= 2;
        }
        let per_block = per_block.clamp(batch, chunk.next_multiple_of(batch));
        // fused_post in whole waves (two blocks an SM of 256 threads, one of 512): one where
        // A >= 1024 (groups of 8 spectra, 1-3% faster than two), two where A <= 512 (groups of
        // 16-64 spectra balance better over twice the blocks: 0.3-0.6% faster than one).
        let post_threads = cfg.fused_post_threads();
        let post_waves = if a >= 1024 { 1 } else { 2 };
        let post_blocks = post_waves * (512 / post_threads) * sms;
        let event = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(driver("creating an event"))
        };
        let chunked = match chunked {
            false => None,
            true => Some(Chunked {
                post: ctx
                    .new_stream()
                    .map_err(driver("creating the post-processing stream"))?,
                start: event()?,
                made: (0..RING).map(|_| event()).collect::<Result<_>>()?,
                read: (0..RING).map(|_| event()).collect::<Result<_>>()?,
            }),
        };
        Ok(Self {
            kernels,
            chunk,
            slots,
            points: cfg.channels,
            row_bytes: cfg.fused_row_bytes(),
            row_scale,
            fir: LaunchConfig {
                grid_dim: ((a / cols) as u32, 1, POLS as u32),
                block_dim: ((r * cols) as u32, 1, 1),
                shared_mem_bytes: cfg.fused_fir_smem() as u32,
            },
            fir_spectra_per_block: per_block as u32,
            post: LaunchConfig {
                grid_dim: ((r / 2) as u32, 1, 1),
                block_dim: (post_threads as u32, 1, 1),
                shared_mem_bytes: cfg.fused_post_smem() as u32,
            },
            post_spectra_per_block: post_spectra as u32,
            post_blocks: post_blocks as u32,
            chunked,
            rows: DeviceBuffer::new(
                ctx,
                slots * POLS * chunk * cfg.channels * cfg.fused_row_bytes(),
            )?,
            tma: cfg.fused_fir_tma().then(|| {
                let bits = cfg.sample_bits as u64;
                SpanBoxes {
                    groups: r as u64,
                    batch: batch as u64,
                    group_words: 2 * a as u64 * bits / 32,
                    spectrum_words: 2 * cfg.channels as u64 * bits / 32,
                }
            }),
        })
    }

    /// Bytes of one complex value of the rows: 8 (float32) or 4 (float16).
    pub(super) fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Whether the passes run in chunks (and overlap on two streams).
    pub(super) fn chunked(&self) -> bool {
        self.chunked.is_some()
    }

    /// Enqueues the frame's two passes on `stream` (and, chunked, the post stream, joined back
    /// into `stream` at the end). `between` enqueues what goes between them on `stream` (the
    /// benchmark's timing events): after `fused_fir`, or chunked after both.
    pub(super) fn enqueue(
        &self,
        args: &FusedArgs,
        spectra: u32,
        stream: &CudaStream,
        between: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        let chunk = self.chunk as u32;
        if let Some(c) = &self.chunked {
            c.start
                .record(stream)
                .map_err(driver("recording an event"))?;
            c.post
                .wait(&c.start)
                .map_err(driver("waiting for an event"))?;
        }
        let chunks = spectra.div_ceil(chunk);
        for i in 0..chunks {
            let (first, count) = (i * chunk, chunk.min(spectra - i * chunk));
            let slot = i as usize % self.slots;
            let rows = self
                .rows
                .at(slot * POLS * self.chunk * self.points * self.row_bytes);
            match &self.chunked {
                None => {
                    self.launch_fir(args, rows, spectra, first, count, stream)?;
                    between()?;
                    self.launch_post(args, rows, spectra, first, count, stream)?;
                }
                Some(c) => {
                    if i as usize >= self.slots {
                        stream
                            .wait(&c.read[slot])
                            .map_err(driver("waiting for an event"))?;
                    }
                    self.launch_fir(args, rows, spectra, first, count, stream)?;
                    c.made[slot]
                        .record(stream)
                        .map_err(driver("recording an event"))?;
                    c.post
                        .wait(&c.made[slot])
                        .map_err(driver("waiting for an event"))?;
                    self.launch_post(args, rows, spectra, first, count, &c.post)?;
                    c.read[slot]
                        .record(&c.post)
                        .map_err(driver("recording an event"))?;
                }
            }
        }
        if let Some(c) = &self.chunked {
            let last = (chunks as usize - 1) % self.slots;
            stream
                .wait(&c.read[last])
                .map_err(driver("waiting for an event"))?;
            between()?;
        }
        Ok(())
    }

    fn launch_fir(
        &self,
        a: &FusedArgs,
        rows: sys::CUdeviceptr,
        spectra: u32,
        first: u32,
        count: u32,
        stream: &CudaStream,
    ) -> Result<()> {
        let (chunk, per_block) = (self.chunk as u32, self.fir_spectra_per_block);
        let mut fir = stream.launch_builder(&self.kernels.fir);
        fir.arg(&a.span.ptr)
            .arg(&a.span.stride_words)
            .arg(&a.offsets)
            .arg(&a.weights)
            .arg(&a.wn)
            .arg(&self.row_scale)
            .arg(&a.row_key)
            .arg(&rows)
            .arg(&spectra)
            .arg(&first)
            .arg(&count)
            .arg(&chunk)
            .arg(&per_block);
        let maps = self.tma.map(|t| t.maps(&a.span)).transpose()?;
        if let Some(maps) = &maps {
            fir.arg(maps);
        }
        let shape = LaunchConfig {
            grid_dim: (self.fir.grid_dim.0, count.div_ceil(per_block), POLS as u32),
            ..self.fir
        };
        // SAFETY: argument types and order match fused_fir; every buffer is sized for the geometry.
        unsafe { fir.launch(shape) }.map_err(driver("launching fused_fir"))?;
        Ok(())
    }

    fn launch_post(
        &self,
        a: &FusedArgs,
        rows: sys::CUdeviceptr,
        spectra: u32,
        first: u32,
        count: u32,
        stream: &CudaStream,
    ) -> Result<()> {
        let chunk = self.chunk as u32;
        let unscale = self.row_scale.recip();
        let mut post = stream.launch_builder(&self.kernels.post);
        post.arg(&rows)
            .arg(&a.fixup)
            .arg(&a.wn)
            .arg(&a.gains)
            .arg(&unscale)
            .arg(&a.rotation)
            .arg(&a.out)
            .arg(&a.saturated)
            .arg(&spectra)
            .arg(&first)
            .arg(&count)
            .arg(&chunk);
        // Whole waves of blocks (post_blocks), each taking every gridDim.y-th group of spectra.
        // Rounded up, the rows had left a last wave of a few blocks alone wherever R / 2 does
        // not divide them: 65536 channels 552 -> 458 µs.
        let groups = count.div_ceil(self.post_spectra_per_block);
        let rows = (self.post_blocks / self.post.grid_dim.0).max(1);
        let shape = LaunchConfig {
            grid_dim: (self.post.grid_dim.0, groups.min(rows), 1),
            ..self.post
        };
        // SAFETY: argument types and order match fused_post; buffers sized for the geometry.
        unsafe { post.launch(shape) }.map_err(driver("launching fused_post"))?;
        Ok(())
    }
}

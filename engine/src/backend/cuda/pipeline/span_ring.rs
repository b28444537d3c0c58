//! The span ring: consecutive frames' spans in one buffer, without a copy per frame.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::{RING_FRAMES, SLOTS};
use crate::backend::cuda::device::{check, DeviceBuffer};
use crate::backend::{InputGeometry, Result, POLS};

/// A frame's span on the device, as the kernels take it: its first word, the words from one
/// polarisation's row to the next, and the words of the span (reads past it are padding or
/// another frame's samples, which feed nothing stored).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanView {
    pub ptr: sys::CUdeviceptr,
    pub stride_words: u64,
    pub words: u64,
}

/// The spans of consecutive frames without a copy per frame. One buffer holds, per polarisation,
/// the overlap and then `frames` chunks: frame f's chunk follows frame f - 1's, so the samples
/// before it are already its overlap. Only a frame at the ring's start has its overlap copied in,
/// from the tail of the last span (device to device), so the copy costs 1/`frames` of a frame on
/// average. Every span starts on a word: a chunk is a whole number of heaps, at least 32 samples.
///
/// The ring holds at least SLOTS + ceil(overlap / chunk) chunks, so a write touches only samples
/// that frame seq - SLOTS + 1 or earlier read (the chunks within an overlap's reach of the written
/// stretch, one turn of the ring back), which the copy in already waits for.
pub(super) struct SpanRing {
    /// [pol][row] packed samples: overlap, `frames` chunks, padding.
    buffer: DeviceBuffer,
    pub(super) frames: usize,
    /// Bytes per polarisation (a multiple of 256, with room for the kernels' two-word reads past
    /// the last sample).
    row: usize,
    pub(super) overlap: usize,
    chunk: usize,
}

impl SpanRing {
    pub(super) fn new(ctx: &Arc<CudaContext>, input: &InputGeometry) -> Result<Self> {
        let bytes = |samples: usize| samples * input.sample_bits as usize / 8;
        let (overlap, chunk) = (bytes(input.overlap_samples), input.chunk_bytes());
        // The kernels index a frame's span (overlap and chunk) with 32-bit sample offsets.
        let span = input.overlap_samples + input.chunk_samples;
        if span > u32::MAX as usize {
            return Err(crate::backend::BackendError::Misuse(format!(
                "a frame's span of {span} samples (overlap and chunk) is more than the CUDA \
                 kernels' 32-bit sample offsets reach ({}); use fewer heaps a frame",
                u32::MAX
            )));
        }
        if !chunk.is_multiple_of(4) {
            return Err(crate::backend::BackendError::Misuse(format!(
                "a chunk of {chunk} bytes is not a whole number of 32-bit words"
            )));
        }
        let frames = RING_FRAMES.max(SLOTS + input.overlap_samples.div_ceil(input.chunk_samples));
        let row = (overlap + frames * chunk + 8).div_ceil(256) * 256;
        Ok(Self {
            // Zeroed: the first frame's overlap is silence, as in the reference backend.
            buffer: DeviceBuffer::zeroed(ctx, POLS * row)?,
            frames,
            row,
            overlap,
            chunk,
        })
    }

    /// Frame `seq`'s chunk position in the ring.
    pub(super) fn place(&self, seq: u64) -> usize {
        (seq % self.frames as u64) as usize
    }

    /// The span whose chunk is at `at`.
    pub(super) fn view(&self, at: usize) -> SpanView {
        SpanView {
            ptr: self.buffer.at(at * self.chunk),
            stride_words: (self.row / 4) as u64,
            words: (self.overlap + self.chunk).div_ceil(4) as u64,
        }
    }

    /// Where pol `pol`'s chunk at `at` goes.
    pub(super) fn chunk_ptr(&self, at: usize, pol: usize) -> sys::CUdeviceptr {
        self.buffer
            .at(pol * self.row + self.overlap + at * self.chunk)
    }

    /// Where `at` is the ring's start, copies the tail of the last span (at the ring's end) to
    /// the ring's head, on `stream`.
    pub(super) fn copy_overlap(&self, at: usize, stream: &CudaStream) -> Result<()> {
        if at != 0 || self.overlap == 0 {
            return Ok(());
        }
        for pol in 0..POLS {
            let row = pol * self.row;
            // SAFETY: both ranges lie inside the row and do not overlap (the tail starts
            // frames * chunk >= overlap bytes in).
            check(
                unsafe {
                    sys::cuMemcpyDtoDAsync_v2(
                        self.buffer.at(row),
                        self.buffer.at(row + self.frames * self.chunk),
                        self.overlap,
                        stream.cu_stream(),
                    )
                },
                "copying the overlap",
            )?;
        }
        Ok(())
    }
}

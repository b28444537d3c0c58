//! Backends: the signal path from packed input samples to 8-bit output heaps.
//!
//! A backend is built once per [`Geometry`] (kernels compiled, FFT plans made, buffers sized) and then
//! processes a stream of [`Frame`]s with no allocation. The engine owns everything around it: which
//! samples arrived, which spectra are valid, the delay model, and sending. A backend only computes.
//!
//! # The span
//! Per polarisation the backend keeps a contiguous *span* of samples: the last
//! [`Geometry::overlap_samples`] samples of the previous span, followed by the frame's new chunk of
//! [`Geometry::chunk_samples`] samples. Every PFB window of the frame lies inside the span (paper,
//! Fig. 2), at the per-spectrum offset the engine computed from the coarse delay.
//!
//! # Pipelining
//! [`Backend::submit`] hands a frame over and may return before the work is done;
//! [`Backend::wait`] returns the oldest submitted frame once its output is ready. Up to
//! [`Backend::max_in_flight`] frames may be submitted before a `wait`, which lets the CUDA backend
//! keep host-to-device copies, kernels and device-to-host copies busy at once. Synchronous backends
//! do the work in `submit` and report `max_in_flight() == 1`.

use std::any::Any;
use std::ptr::NonNull;

use num_complex::Complex32;

pub mod cpu;
pub mod cuda;
pub mod null;
pub mod reference;

/// Errors a backend reports. Never a panic: an engine must be able to fall back or say why.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot run on this host (no CUDA driver, no device, ...).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The geometry is not one this backend supports.
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    /// A device or library call failed.
    #[error("{0}")]
    Device(String),
    /// The caller broke the protocol (wait with nothing in flight, wrong buffer size, ...).
    #[error("misuse: {0}")]
    Misuse(String),
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// Number of polarisations: fixed by the wire formats.
pub const POLS: usize = 2;

/// Everything that fixes buffer sizes and compiled kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Output channels n (power of two). The FFT has 2n points; Nyquist is dropped.
    pub channels: usize,
    /// PFB taps T.
    pub taps: usize,
    /// Input sample width in bits: 8, 10, 12 or 16 (signed, packed MSB first).
    pub sample_bits: u32,
    /// Spectra per output heap (S).
    pub spectra_per_heap: usize,
    /// Output heaps (in time) per frame (H). A frame has S*H spectra and a chunk S*H*2n samples.
    pub heaps_per_frame: usize,
    /// Samples of the previous span kept ahead of each new chunk: at least (T-1)*2n, plus room for
    /// coarse delay. A multiple of 8 so that it is a whole number of bytes for every sample width.
    pub overlap_samples: usize,
}

impl Geometry {
    /// Samples per spectrum (2n).
    pub fn step(&self) -> usize {
        2 * self.channels
    }
    /// Samples in one PFB window (2nT).
    pub fn window(&self) -> usize {
        self.step() * self.taps
    }
    pub fn spectra_per_frame(&self) -> usize {
        self.spectra_per_heap * self.heaps_per_frame
    }
    /// New samples per polarisation per frame.
    pub fn chunk_samples(&self) -> usize {
        self.spectra_per_frame() * self.step()
    }
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_samples() * self.sample_bits as usize / 8
    }
    /// Samples per polarisation in a span (overlap + chunk).
    pub fn span_samples(&self) -> usize {
        self.overlap_samples + self.chunk_samples()
    }
    /// Highest valid window offset into the span.
    pub fn max_offset(&self) -> usize {
        self.span_samples() - self.window()
    }
    /// Bytes of one output heap for all channels: channels x S x 2 pols x (re, im).
    pub fn heap_bytes(&self) -> usize {
        self.channels * self.spectra_per_heap * POLS * 2
    }
    /// Bytes of a frame's output.
    pub fn output_bytes(&self) -> usize {
        self.heap_bytes() * self.heaps_per_frame
    }
    /// Checks the invariants every backend relies on, with a sentence saying what is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !self.channels.is_power_of_two() || self.channels < 16 || self.channels > 65536 {
            return Err(format!(
                "channels must be a power of two from 16 to 65536, not {}",
                self.channels
            ));
        }
        if self.taps == 0 || self.taps > 64 {
            return Err(format!("taps must be from 1 to 64, not {}", self.taps));
        }
        if ![8, 10, 12, 16].contains(&self.sample_bits) {
            return Err(format!(
                "sample bits must be 8, 10, 12 or 16, not {}",
                self.sample_bits
            ));
        }
        if self.spectra_per_heap == 0 || self.heaps_per_frame == 0 {
            return Err("spectra per heap and heaps per frame must be positive".into());
        }
        if !self.overlap_samples.is_multiple_of(8) {
            return Err(format!(
                "overlap ({} samples) must be a multiple of 8",
                self.overlap_samples
            ));
        }
        if self.overlap_samples < (self.taps - 1) * self.step() {
            return Err(format!(
                "overlap ({} samples) must hold at least (taps-1)*2n = {} samples",
                self.overlap_samples,
                (self.taps - 1) * self.step()
            ));
        }
        if self.span_samples() > u32::MAX as usize {
            return Err("span exceeds 2^32 samples: use smaller chunks".into());
        }
        Ok(())
    }
}

/// Where and how one spectrum of one polarisation is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpectrumDelay {
    /// Offset into the span (in samples) of the window's first sample: the spectrum's nominal
    /// position minus its coarse delay. At most [`Geometry::max_offset`].
    pub offset: u32,
    /// Residual delay after the coarse delay, in samples (|fine| <= 0.5 normally).
    pub fine: f32,
    /// Fringe phase in radians, added to every channel.
    pub phase: f32,
}

/// A host buffer: plain memory or CUDA pinned memory, owned by whoever allocated it.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Keeps the allocation alive; the CUDA backend downcasts it to find its pinned allocation.
    owner: Box<dyn Any + Send + Sync>,
}

// SAFETY: the buffer exclusively owns its allocation (through `owner`).
unsafe impl Send for HostBuffer {}
// SAFETY: a shared reference only reads the bytes (writing needs `&mut`), so several send threads
// may read one frame's output at once.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Ordinary heap memory, zeroed.
    pub fn zeroed(len: usize) -> Self {
        let mut v = vec![0u8; len].into_boxed_slice();
        let ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Self {
            ptr,
            len,
            owner: Box::new(v),
        }
    }
    /// Wraps memory owned by `owner` (for example a pinned allocation).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for as long as `owner` lives, and not be
    /// accessed through anything but this buffer.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Self {
        Self { ptr, len, owner }
    }
    pub fn owner(&self) -> &(dyn Any + Send + Sync) {
        self.owner.as_ref()
    }
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for HostBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: see `from_raw`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for HostBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: see `from_raw`; `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBuffer({} bytes)", self.len)
    }
}

/// One frame of work and its result. Allocated once by [`Backend::alloc_frame`], then recycled.
#[derive(Debug)]
pub struct Frame {
    /// ADC timestamp of the chunk's first sample (the span's first sample is `overlap` earlier).
    pub timestamp: u64,
    /// Per polarisation: the chunk's packed samples ([`Geometry::chunk_bytes`] bytes).
    pub chunk: [HostBuffer; POLS],
    /// Per polarisation: one entry per spectrum of the frame ([`Geometry::spectra_per_frame`]).
    pub delays: [Vec<SpectrumDelay>; POLS],
    /// Output in heap layout: `[heap][channel][spectrum in heap][pol][re, im]` as `i8`
    /// ([`Geometry::output_bytes`] bytes), so each output heap's slice of channels is contiguous.
    pub output: HostBuffer,
    /// Filled by the backend: complex values with a clamped real or imaginary part, per polarisation.
    pub saturated: [u64; POLS],
}

impl Frame {
    /// A frame in ordinary memory, sized for `g`.
    pub fn new_host(g: &Geometry) -> Self {
        Self {
            timestamp: 0,
            chunk: [
                HostBuffer::zeroed(g.chunk_bytes()),
                HostBuffer::zeroed(g.chunk_bytes()),
            ],
            delays: [
                vec![SpectrumDelay::default(); g.spectra_per_frame()],
                vec![SpectrumDelay::default(); g.spectra_per_frame()],
            ],
            output: HostBuffer::zeroed(g.output_bytes()),
            saturated: [0; POLS],
        }
    }

    /// The output as signed bytes.
    pub fn output_i8(&self) -> &[i8] {
        // SAFETY: u8 and i8 have the same layout.
        unsafe { std::slice::from_raw_parts(self.output.as_ptr() as *const i8, self.output.len()) }
    }
}

/// The signal path. See the module documentation for the protocol.
pub trait Backend: Send {
    /// Short name for logs and metrics: "reference", "cpu", "cuda", "null".
    fn name(&self) -> &'static str;
    fn geometry(&self) -> &Geometry;
    /// Allocates a frame whose buffers suit this backend (pinned memory for CUDA).
    fn alloc_frame(&self) -> Result<Frame>;
    /// Sets the complex gain per channel of one polarisation (`gains.len() == channels`), for frames
    /// submitted from now on.
    fn set_gains(&mut self, pol: usize, gains: &[Complex32]) -> Result<()>;
    /// Hands a frame over. Frames are processed in submission order; each frame's span starts with
    /// the previous frame's last `overlap_samples` samples.
    fn submit(&mut self, frame: Frame) -> Result<()>;
    /// Returns the oldest submitted frame with `output` and `saturated` filled, or `None` when
    /// nothing is in flight.
    fn wait(&mut self) -> Result<Option<Frame>>;
    /// Frames that may be submitted before the oldest must be waited for.
    fn max_in_flight(&self) -> usize;
}

// Helpers added for the reference, cpu and null backends (shared so every backend checks the same).

impl Geometry {
    /// Index of the complex output value of spectrum `spectrum` (in the frame), polarisation `pol`,
    /// channel `channel` in the `[heap][channel][spectrum in heap][pol]` layout: its bytes in
    /// [`Frame::output`] are `2 * index` (real) and `2 * index + 1` (imaginary).
    pub fn output_index(&self, spectrum: usize, pol: usize, channel: usize) -> usize {
        let (heap, s) = (
            spectrum / self.spectra_per_heap,
            spectrum % self.spectra_per_heap,
        );
        ((heap * self.channels + channel) * self.spectra_per_heap + s) * POLS + pol
    }
}

impl Frame {
    /// Checks that the frame's buffers are sized for `g` and that every delay is usable (offset
    /// within [`Geometry::max_offset`], finite fine delay and phase).
    pub fn check(&self, g: &Geometry) -> Result<()> {
        for pol in 0..POLS {
            if self.chunk[pol].len() != g.chunk_bytes() {
                return Err(BackendError::Misuse(format!(
                    "pol {pol} chunk has {} bytes, the geometry needs {}",
                    self.chunk[pol].len(),
                    g.chunk_bytes()
                )));
            }
            if self.delays[pol].len() != g.spectra_per_frame() {
                return Err(BackendError::Misuse(format!(
                    "pol {pol} has {} delays for {} spectra",
                    self.delays[pol].len(),
                    g.spectra_per_frame()
                )));
            }
            let bad = self.delays[pol].iter().position(|d| {
                d.offset as usize > g.max_offset() || !d.fine.is_finite() || !d.phase.is_finite()
            });
            if let Some(m) = bad {
                return Err(BackendError::Misuse(format!(
                    "pol {pol} spectrum {m}: {:?} is unusable (offsets run to {}, fine and phase must be finite)",
                    self.delays[pol][m],
                    g.max_offset()
                )));
            }
        }
        if self.output.len() != g.output_bytes() {
            return Err(BackendError::Misuse(format!(
                "output has {} bytes, the geometry needs {}",
                self.output.len(),
                g.output_bytes()
            )));
        }
        Ok(())
    }
}

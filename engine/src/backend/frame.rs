//! A frame of work: the input's chunk once ([`InputFrame`]) and each output's buffers
//! ([`OutputFrame`]), so that one upload of the input can feed every output (katgpucbf shares one
//! input item among its outputs' pipelines the same way).

use std::any::Any;
use std::ptr::NonNull;

use super::{BackendError, Channelisation, InputGeometry, OutputGeometry, Result, POLS};
use crate::signal::power::InputPower;

/// Where and how one spectrum of one polarisation is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpectrumDelay {
    /// Offset into the span (in samples) of the window's first sample: the spectrum's nominal
    /// position minus its coarse delay. At most [`Channelisation::max_offset`]; for a narrowband
    /// output a multiple of the DDC's subsampling S (its grid: D, or 2D without discard).
    pub offset: u32,
    /// Residual delay after the coarse delay, in samples (|fine| <= 0.5 normally); for a
    /// narrowband output in units of D samples (r' of `crate::signal::narrowband::narrowband_delay`).
    pub fine: f32,
    /// Fringe phase in radians, added to every channel (for a narrowband output with the mixer's
    /// phase over the delay folded in).
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

/// One frame of work and its results. Allocated once by [`super::Backend::alloc_frame`], then
/// recycled.
#[derive(Debug)]
pub struct Frame {
    pub input: InputFrame,
    /// One per output, in the engine's output order.
    pub outputs: Vec<OutputFrame>,
}

/// The input of a frame: one chunk per polarisation.
#[derive(Debug)]
pub struct InputFrame {
    /// ADC timestamp of the chunk's first sample (the span's first sample is `overlap` earlier).
    pub timestamp: u64,
    /// Per polarisation: the chunk's packed samples ([`InputGeometry::chunk_bytes`] bytes).
    pub chunk: [HostBuffer; POLS],
    /// Filled by the backend: per polarisation, the chunk's sum of squares and full-scale samples
    /// (`None` from a backend that does not look at the samples: null).
    pub power: Option<[InputPower; POLS]>,
}

/// What one output makes of a frame: its delays in, its heaps and saturation counts out.
#[derive(Debug)]
pub struct OutputFrame {
    /// Output timestamp (ADC samples, modulo 2^64) of the frame's first spectrum; spectrum m's is
    /// `timestamp + m 2n`. Set by the engine (docs/signal-path.md, t0); keys the dither.
    pub timestamp: u64,
    /// A narrowband output's mixer word F for this frame (`crate::signal::ddc::mixer_word`: the
    /// centre in 2^-32 turns per sample), set by the engine, so that a new centre takes effect
    /// from a frame on; unused (0) for a wideband output.
    pub mixer: u32,
    /// Per polarisation: one entry per spectrum of the frame
    /// ([`Channelisation::spectra_per_frame`]).
    pub delays: [Vec<SpectrumDelay>; POLS],
    /// Output in heap layout: `[heap][channel][spectrum in heap][pol][re, im]` as `i8`, or with
    /// 4-bit output one byte per complex value (`crate::signal::quantise::pack4`)
    /// ([`Channelisation::output_bytes`] bytes), so each output heap's slice of channels is
    /// contiguous.
    pub heaps: HostBuffer,
    /// Filled by the backend: complex values with a clamped real or imaginary part, per polarisation.
    pub saturated: [u64; POLS],
}

impl InputFrame {
    /// An input frame in ordinary memory.
    pub fn new_host(g: &InputGeometry) -> Self {
        Self {
            timestamp: 0,
            chunk: std::array::from_fn(|_| HostBuffer::zeroed(g.chunk_bytes())),
            power: None,
        }
    }
}

impl OutputFrame {
    /// Delays for `g` and heaps in `heaps` (ordinary or pinned memory, [`Channelisation::output_bytes`]).
    pub fn new(g: &Channelisation, heaps: HostBuffer) -> Self {
        Self {
            timestamp: 0,
            mixer: 0,
            delays: std::array::from_fn(|_| vec![SpectrumDelay::default(); g.spectra_per_frame()]),
            heaps,
            saturated: [0; POLS],
        }
    }

    /// An output frame in ordinary memory.
    pub fn new_host(g: &Channelisation) -> Self {
        Self::new(g, HostBuffer::zeroed(g.output_bytes()))
    }

    /// Every output component (real, imaginary, in output order), unpacked from 8 or 4 bits.
    pub fn components(&self, bits: u32) -> Vec<i8> {
        crate::signal::quantise::components(&self.heaps, bits)
    }

    /// The heaps as signed bytes.
    pub fn heaps_i8(&self) -> &[i8] {
        // SAFETY: u8 and i8 have the same layout.
        unsafe { std::slice::from_raw_parts(self.heaps.as_ptr() as *const i8, self.heaps.len()) }
    }

    /// Checks that the buffers are sized for `g` and that every delay is usable (offset within
    /// [`Channelisation::max_offset`], finite fine delay and phase); for a narrowband output also
    /// that every offset is a multiple of D and the mixer word keeps the band inside 0 .. fs/2
    /// (`crate::signal::ddc::check_mixer_word`).
    pub fn check(&self, g: &Channelisation) -> Result<()> {
        for pol in 0..POLS {
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
        if let super::OutputKind::Narrowband(ddc) = g.output.kind {
            crate::signal::ddc::check_mixer_word(self.mixer, ddc.decimation).map_err(|e| {
                BackendError::Misuse(format!("narrowband output's mixer word: {e}"))
            })?;
            for pol in 0..POLS {
                let d = ddc.subsampling();
                if let Some(m) = self.delays[pol]
                    .iter()
                    .position(|s| !(s.offset as usize).is_multiple_of(d))
                {
                    return Err(BackendError::Misuse(format!(
                        "pol {pol} spectrum {m}: offset {} is not a multiple of the subsampling {d} \
                         (a narrowband window starts on the DDC's grid)",
                        self.delays[pol][m].offset
                    )));
                }
            }
        }
        if self.heaps.len() != g.output_bytes() {
            return Err(BackendError::Misuse(format!(
                "output has {} bytes, the geometry needs {}",
                self.heaps.len(),
                g.output_bytes()
            )));
        }
        Ok(())
    }
}

impl Frame {
    /// A frame in ordinary memory for `input` and each of `outputs`.
    pub fn new_host(input: &InputGeometry, outputs: &[OutputGeometry]) -> Self {
        Self {
            input: InputFrame::new_host(input),
            outputs: outputs
                .iter()
                .map(|o| OutputFrame::new_host(&Channelisation::new(*input, *o)))
                .collect(),
        }
    }

    /// Checks that the frame's buffers are sized for `input` and `outputs`, and every delay usable.
    pub fn check(&self, input: &InputGeometry, outputs: &[OutputGeometry]) -> Result<()> {
        for pol in 0..POLS {
            if self.input.chunk[pol].len() != input.chunk_bytes() {
                return Err(BackendError::Misuse(format!(
                    "pol {pol} chunk has {} bytes, the geometry needs {}",
                    self.input.chunk[pol].len(),
                    input.chunk_bytes()
                )));
            }
        }
        if self.outputs.len() != outputs.len() {
            return Err(BackendError::Misuse(format!(
                "the frame has {} outputs, the backend {}",
                self.outputs.len(),
                outputs.len()
            )));
        }
        for (frame, output) in self.outputs.iter().zip(outputs) {
            frame.check(&Channelisation::new(*input, *output))?;
        }
        Ok(())
    }
}

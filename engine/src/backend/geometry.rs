//! The shapes that fix buffer sizes and compiled kernels: the input's ([`InputGeometry`]: sample
//! width, chunk, overlap) apart from each output's ([`OutputGeometry`]: channels, taps, spectra per
//! heap, bits), and one output's view of the input ([`Channelisation`]), where the quantities that
//! need both live (spectra and heaps per frame, the highest window offset).
//!
//! One input feeds every output of an engine: a frame holds the input's chunk once and each
//! output's buffers (see [`super::Frame`]).

use spead::samples::SAMPLE_BITS;

use super::POLS;
pub use crate::signal::narrowband::Bins;
pub(super) use crate::signal::weights::FilterDesign;

/// The input: both polarisations of one digitiser, processed a chunk at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputGeometry {
    /// Input sample width in bits: one of [`SAMPLE_BITS`] (signed, packed MSB first).
    pub sample_bits: u32,
    /// New samples per polarisation per frame.
    pub chunk_samples: usize,
    /// Samples of the previous span kept ahead of each new chunk: at least (T-1)*2n for every
    /// output, plus room for coarse delay. A multiple of 8 so that it is a whole number of bytes
    /// for every sample width.
    pub overlap_samples: usize,
}

/// Why a geometry cannot be computed: one sentence saying what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GeometryError(pub String);

impl From<GeometryError> for String {
    fn from(e: GeometryError) -> Self {
        e.0
    }
}

impl InputGeometry {
    /// Packed bytes of one polarisation's chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_samples * self.sample_bits as usize / 8
    }
    /// Samples per polarisation in a span (overlap + chunk).
    pub fn span_samples(&self) -> usize {
        self.overlap_samples + self.chunk_samples
    }
    /// Checks the input's own invariants, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<(), GeometryError> {
        self.check().map_err(GeometryError)
    }
    fn check(&self) -> Result<(), String> {
        if !SAMPLE_BITS.contains(&self.sample_bits) {
            return Err(format!(
                "sample bits must be 8, 10, 12 or 16, not {}",
                self.sample_bits
            ));
        }
        if self.chunk_samples == 0 || !self.chunk_samples.is_multiple_of(8) {
            return Err(format!(
                "a chunk ({} samples) must be a positive multiple of 8 samples",
                self.chunk_samples
            ));
        }
        if !self.overlap_samples.is_multiple_of(8) {
            return Err(format!(
                "overlap ({} samples) must be a multiple of 8",
                self.overlap_samples
            ));
        }
        if self.span_samples() > u32::MAX as usize {
            return Err("span exceeds 2^32 samples: use smaller chunks".into());
        }
        Ok(())
    }
}

/// A narrowband output's down-conversion (docs/signal-path.md §Narrowband): the input mixed to
/// baseband by the frame's mixer word ([`super::OutputFrame::mixer`], which may change from frame
/// to frame), low-pass filtered by `taps` taps and subsampled by S, before a complex PFB of P
/// points: S = D and the centre half of P = 2n bins kept, or (no discard, katgpucbf's VLBI mode)
/// S = 2D and all of P = n kept, as `bins` says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ddc {
    /// D: 8, 16 or 32 ([`crate::signal::ddc::DECIMATIONS`]). The band is fs/(2D) wide.
    pub decimation: usize,
    /// L: the DDC filter's length ([`Bins::default_ddc_taps`] by default).
    pub taps: usize,
    /// Which PFB bins are kept, and so the DDC's subsampling and filter design.
    pub bins: Bins,
}

impl Ddc {
    /// The DDC of decimation `decimation` with its default filter length, discarding the outer
    /// half of the PFB's bins.
    pub fn new(decimation: usize) -> Self {
        Self::with_bins(decimation, Bins::CentreHalf)
    }

    /// The DDC of decimation `decimation` keeping `bins`, with its default filter length.
    pub fn with_bins(decimation: usize, bins: Bins) -> Self {
        Self {
            decimation,
            taps: bins.default_ddc_taps(decimation),
            bins,
        }
    }

    /// S, the subsampling factor: D, or 2D without discard.
    pub fn subsampling(&self) -> usize {
        self.bins.subsampling(self.decimation)
    }

    /// P, the PFB's points for n channels: 2n, or n without discard.
    pub fn points(&self, channels: usize) -> usize {
        self.bins.points(channels)
    }

    /// The DDC filter h (float64; backends round it as they need).
    pub fn filter(&self) -> crate::signal::Result<Vec<f64>> {
        self.bins.ddc_filter(self.decimation, self.taps)
    }
}

/// What an output computes from the input, with what only that kind needs. Each backend builds one
/// per-kind piece of work from it when the output is made (its only `match` on the kind), so a
/// new kind is a new variant here plus one module per backend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OutputKind {
    /// The whole band 0 .. fs/2: a real PFB of 2n points keeping n channels.
    Wideband,
    /// A band of fs/(2D) around the frame's mixer word: down-converted, then a complex PFB that
    /// keeps the centre half of its 2n bins, or all n bins of an n-point one (`Ddc::bins`).
    Narrowband(Ddc),
}

impl OutputKind {
    /// The kind as the control API names it (`/status`).
    pub fn label(&self) -> fgpu_api::engine::OutputKind {
        match self {
            Self::Wideband => fgpu_api::engine::OutputKind::Wideband,
            Self::Narrowband(d) => match d.bins {
                Bins::CentreHalf => fgpu_api::engine::OutputKind::Narrowband,
                Bins::All(_) => fgpu_api::engine::OutputKind::NarrowbandNoDiscard,
            },
        }
    }
}

/// One output: a channelisation of the input (wideband, or narrowband of a band of it, as its
/// [`OutputKind`] says), sent in heaps of spectra.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutputGeometry {
    /// Output channels n (power of two). The FFT has 2n points; Nyquist is dropped.
    pub channels: usize,
    /// PFB taps T.
    pub taps: usize,
    /// Spectra per output heap (S).
    pub spectra_per_heap: usize,
    /// Bits per output value (real or imaginary part): 8, or 4 (both parts packed in one byte).
    pub bits: u32,
    /// The PFB filter's taper and sinc cutoff.
    pub filter: FilterDesign,
    /// The output dither's seed, or `None` for no dither (`crate::signal::dither`).
    pub dither: Option<u32>,
    /// Wideband, or narrowband with its down-conversion.
    pub kind: OutputKind,
}

impl OutputGeometry {
    /// D: 1 for a wideband output, the DDC's decimation for a narrowband one.
    pub fn decimation(&self) -> usize {
        match self.kind {
            OutputKind::Wideband => 1,
            OutputKind::Narrowband(d) => d.decimation,
        }
    }
    /// S, the grid a window may start on: 1 (wideband), the DDC's subsampling (narrowband).
    pub fn subsampling(&self) -> usize {
        match self.kind {
            OutputKind::Wideband => 1,
            OutputKind::Narrowband(d) => d.subsampling(),
        }
    }
    /// Input samples per spectrum: 2n (wideband), 2nD (narrowband).
    pub fn step(&self) -> usize {
        2 * self.channels * self.decimation()
    }
    /// Input samples one spectrum reads: 2nT (wideband); (PT - 1) S + L (narrowband: the DDC's
    /// L taps behind each of the window's PT subsampled samples).
    pub fn window(&self) -> usize {
        match self.kind {
            OutputKind::Wideband => self.step() * self.taps,
            OutputKind::Narrowband(d) => {
                (d.points(self.channels) * self.taps - 1) * d.subsampling() + d.taps
            }
        }
    }
    /// Samples of input per output heap (S x step).
    pub fn heap_samples(&self) -> usize {
        self.spectra_per_heap * self.step()
    }
    /// Bytes of one output heap for all channels: channels x S x 2 pols x (re, im).
    pub fn heap_bytes(&self) -> usize {
        self.channels * self.spectra_per_heap * POLS * 2 * self.bits as usize / 8
    }
    /// The PFB weights of this output's filter design (float64; backends round them as they
    /// need): 2nT of them, PT for a narrowband output.
    pub fn weights(&self) -> crate::signal::Result<Vec<f64>> {
        match self.kind {
            OutputKind::Wideband => {
                crate::signal::weights::pfb_weights(self.channels, self.taps, self.filter)
            }
            OutputKind::Narrowband(d) => d.bins.pfb_weights(self.channels, self.taps, self.filter),
        }
    }
    /// Checks the output's own invariants, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<(), GeometryError> {
        self.check().map_err(GeometryError)
    }
    fn check(&self) -> Result<(), String> {
        if !self.channels.is_power_of_two() || self.channels < 16 || self.channels > 65536 {
            return Err(format!(
                "channels must be a power of two from 16 to 65536, not {}",
                self.channels
            ));
        }
        if self.taps == 0 || self.taps > 64 {
            return Err(format!("taps must be from 1 to 64, not {}", self.taps));
        }
        if self.spectra_per_heap == 0 {
            return Err("spectra per heap must be positive".into());
        }
        if self.bits != 8 && self.bits != 4 {
            return Err(format!("output bits must be 8 or 4, not {}", self.bits));
        }
        if let OutputKind::Narrowband(d) = self.kind {
            crate::signal::ddc::check_decimation(d.decimation).map_err(|e| e.to_string())?;
            if d.taps == 0 || d.taps > crate::signal::ddc::MAX_DDC_TAPS {
                return Err(format!(
                    "DDC taps must be from 1 to {}, not {}",
                    crate::signal::ddc::MAX_DDC_TAPS,
                    d.taps
                ));
            }
            if let Bins::All(pass) = d.bins {
                crate::signal::no_discard::check_decimation(d.decimation)
                    .map_err(|e| e.to_string())?;
                pass.validate().map_err(|e| e.to_string())?;
            }
        }
        self.filter.validate().map_err(|e| e.to_string())
    }
}

/// One output's view of the input: what a backend computes for that output from each frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Channelisation {
    pub input: InputGeometry,
    pub output: OutputGeometry,
}

impl Channelisation {
    pub fn new(input: InputGeometry, output: OutputGeometry) -> Self {
        Self { input, output }
    }
    /// Samples per spectrum (2n).
    pub fn step(&self) -> usize {
        self.output.step()
    }
    /// Samples in one PFB window (2nT).
    pub fn window(&self) -> usize {
        self.output.window()
    }
    /// New samples per polarisation per frame.
    pub fn chunk_samples(&self) -> usize {
        self.input.chunk_samples
    }
    pub fn chunk_bytes(&self) -> usize {
        self.input.chunk_bytes()
    }
    /// Samples per polarisation in a span (overlap + chunk).
    pub fn span_samples(&self) -> usize {
        self.input.span_samples()
    }
    /// Spectra of this output per frame: one per 2n new samples.
    pub fn spectra_per_frame(&self) -> usize {
        self.input.chunk_samples / self.step()
    }
    /// Output heaps (in time) per frame (H): the chunk holds S*H*2n samples.
    pub fn heaps_per_frame(&self) -> usize {
        self.input.chunk_samples / self.output.heap_samples()
    }
    /// Highest valid window offset into the span; for a narrowband output the highest multiple
    /// of the subsampling (the DDC's grid), which is all of it when L is a multiple of S.
    pub fn max_offset(&self) -> usize {
        let d = self.output.subsampling();
        (self.span_samples() - self.window()) / d * d
    }
    /// Bytes of one output heap for all channels.
    pub fn heap_bytes(&self) -> usize {
        self.output.heap_bytes()
    }
    /// Bytes of a frame's output.
    pub fn output_bytes(&self) -> usize {
        self.heap_bytes() * self.heaps_per_frame()
    }
    /// Complex values of a frame's output (both polarisations).
    pub fn output_values(&self) -> usize {
        self.spectra_per_frame() * self.output.channels * POLS
    }
    /// Index of the complex output value of spectrum `spectrum` (in the frame), polarisation `pol`,
    /// channel `channel` in the `[heap][channel][spectrum in heap][pol]` layout: its bytes in
    /// [`super::OutputFrame::heaps`] are `2 * index` (real) and `2 * index + 1` (imaginary), or
    /// byte `index` with 4-bit output.
    pub fn output_index(&self, spectrum: usize, pol: usize, channel: usize) -> usize {
        let s_per_heap = self.output.spectra_per_heap;
        let (heap, s) = (spectrum / s_per_heap, spectrum % s_per_heap);
        ((heap * self.output.channels + channel) * s_per_heap + s) * POLS + pol
    }
    /// The dither key of spectrum `m` of a frame whose first spectrum has output timestamp
    /// `first`, or `None` if the output is not dithered.
    pub fn dither_key(&self, first: u64, m: usize) -> Option<u32> {
        let t0 = first.wrapping_add((m * self.step()) as u64);
        self.output
            .dither
            .map(|seed| crate::signal::dither::spectrum_key(seed, t0))
    }
    /// Largest magnitude of an output component: 127 for 8 bits, 7 for 4.
    pub fn limit(&self) -> i8 {
        crate::signal::quantise::limit(self.output.bits)
    }
    /// Checks the invariants every backend relies on, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<(), GeometryError> {
        self.check().map_err(GeometryError)
    }
    fn check(&self) -> Result<(), String> {
        self.output.check()?;
        self.input.check()?;
        let (input, output) = (&self.input, &self.output);
        if !input.chunk_samples.is_multiple_of(output.heap_samples()) {
            return Err(format!(
                "a chunk of {} samples is not a whole number of output heaps of {} spectra of {} samples",
                input.chunk_samples,
                output.spectra_per_heap,
                output.step()
            ));
        }
        if input.overlap_samples + output.step() < output.window() {
            return Err(format!(
                "overlap ({} samples) must hold at least the window less one step = {} samples",
                input.overlap_samples,
                output.window() - output.step()
            ));
        }
        let d = output.subsampling();
        if !input.overlap_samples.is_multiple_of(d) {
            return Err(format!(
                "overlap ({} samples) must be a multiple of the subsampling {d}, so that the DDC's \
                 grid starts every span",
                input.overlap_samples
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channelisation(chunk_samples: usize) -> Channelisation {
        Channelisation::new(
            InputGeometry {
                sample_bits: 10,
                chunk_samples,
                overlap_samples: 96,
            },
            OutputGeometry {
                channels: 16,
                taps: 4,
                spectra_per_heap: 2,
                bits: 8,
                filter: Default::default(),
                dither: None,
                kind: OutputKind::Wideband,
            },
        )
    }

    #[test]
    fn frame_quantities_follow_from_input_and_output() {
        let c = channelisation(3 * 2 * 32);
        assert!(c.validate().is_ok());
        assert_eq!(c.spectra_per_frame(), 6);
        assert_eq!(c.heaps_per_frame(), 3);
        assert_eq!(c.heap_bytes(), 16 * 2 * 2 * 2);
        assert_eq!(c.output_bytes(), 3 * c.heap_bytes());
        assert_eq!(c.max_offset(), 96 + 192 - 128);
        assert_eq!(c.output_index(3, 1, 2), ((16 + 2) * 2 + 1) * 2 + 1);
    }

    #[test]
    fn a_chunk_must_be_whole_output_heaps() {
        let e = channelisation(3 * 32).validate().unwrap_err();
        assert!(e.0.contains("whole number of output heaps"), "{e}");
        let e = channelisation(0).validate().unwrap_err();
        assert!(e.0.contains("positive"), "{e}");
    }
}

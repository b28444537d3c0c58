//! The narrowband output (docs/signal-path.md §Narrowband): n channels over a band fs/(2D) wide
//! around a centre frequency, from the DDC's complex stream at fs/D ([`super::ddc`]) through a
//! complex PFB, and the float64 reference that evaluates it literally, one spectrum at a time.
//!
//! - **PFB.** Windows of 2nT subsampled samples, the wideband design's weights for n channels and T
//!   taps ([`super::weights::pfb_weights`]), a 2n-point complex FFT. Only the centre half of the 2n
//!   bins is kept (the DDC filter's transition band and its aliases fall into the other half):
//!   channel c = 0..n-1 is bin (c - n/2) mod 2n, so channel n/2 holds the centre and channel c the
//!   sky frequency `centre + (c - n/2) fs / (2 D n)`.
//! - **Timestamps.** A spectrum's step is 2n subsampled samples, 2nD ADC samples. Its timestamp is,
//!   as for wideband, the ADC sample index of the first input sample its window reads before delay:
//!   the window is subsampled samples j0 .. j0 + 2nT with j0 = t0 / D, the first of which filters
//!   ADC samples t0 .. t0 + L. Timestamps are multiples of 2nD.
//! - **Delay.** A delay of d ADC samples (d = coarse + fine of [`DelayAt`]) must give the output of
//!   the input x[t - d]. The DDC runs on a fixed grid (one pass over a chunk, whatever the delays),
//!   so the window moves by whole subsampled samples only, k = round(d / D); the rest, rho = d - kD
//!   (|rho| <= D/2 ADC samples, r' = rho / D <= 1/2 subsampled sample), is a per-channel rotation
//!   like wideband's fine delay, with the channel's signed offset k' = c - n/2 from the centre; and
//!   because the mixer runs on absolute time, the mixed-down signal of x[t - d] is the mixed-down
//!   signal of x delayed by d *and turned by the mixer's phase over d*, -2 pi f_c d / fs, folded
//!   into the fringe phase ([`narrowband_delay`]; the derivation is in docs/signal-path.md).

use std::sync::Arc;

use num_complex::Complex64;
use rustfft::{Fft, FftPlanner};

use super::ddc::{self, check_decimation, check_mixer_word};
use super::delay::{wrap_phase, DelayAt};
use super::no_discard::{self, PassBand};
use super::weights::{pfb_weights, FilterDesign};
use super::{bail, Result};

/// The most PFB taps (as wideband).
pub const MAX_TAPS: usize = 64;

/// Which of its PFB's bins a narrowband output keeps, which fixes how its DDC subsamples and
/// filters. Both give n channels of fs/(2Dn) over the band fs/(2D), spectra 2nD ADC samples apart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bins {
    /// katgpucbf's narrowband: subsample by D, a 2n-point PFB, keep its centre n bins (the DDC
    /// filter's roll-off falls into the others); the Kaiser filter of [`ddc::ddc_filter`].
    CentreHalf,
    /// katgpucbf's no-discard (VLBI) narrowband: subsample by 2D, an n-point PFB, keep every bin;
    /// the remez filter of [`no_discard::ddc_filter`], flat over this pass band.
    All(PassBand),
}

impl Bins {
    /// S, the DDC's subsampling factor: D or 2D.
    pub fn subsampling(&self, decimation: usize) -> usize {
        match self {
            Self::CentreHalf => decimation,
            Self::All(_) => 2 * decimation,
        }
    }

    /// P, the PFB's points (its bins) for n output channels: 2n or n.
    pub fn points(&self, channels: usize) -> usize {
        match self {
            Self::CentreHalf => 2 * channels,
            Self::All(_) => channels,
        }
    }

    /// The default DDC length for decimation D: 12 D or 32 D.
    pub fn default_ddc_taps(&self, decimation: usize) -> usize {
        match self {
            Self::CentreHalf => ddc::default_ddc_taps(decimation),
            Self::All(_) => no_discard::default_taps(decimation),
        }
    }

    /// The DDC filter h of `taps` taps for decimation D (float64; backends round it as they need).
    pub fn ddc_filter(&self, decimation: usize, taps: usize) -> Result<Vec<f64>> {
        match self {
            Self::CentreHalf => ddc::ddc_filter(decimation, taps),
            Self::All(pass) => no_discard::ddc_filter(decimation, taps, *pass),
        }
    }

    /// The PFB weights for n channels and T taps: the wideband design's for P/2 channels (P T
    /// of them, as katgpucbf's for a spectrum of P subsampled samples).
    pub fn pfb_weights(
        &self,
        channels: usize,
        taps: usize,
        design: FilterDesign,
    ) -> Result<Vec<f64>> {
        pfb_weights(self.points(channels) / 2, taps, design)
    }

    /// The FFT bin (of P) that channel c of n is: (c - n/2) mod P.
    pub fn bin(&self, channel: usize, channels: usize) -> usize {
        let p = self.points(channels);
        (channel + p - channels / 2) % p
    }
}

/// A narrowband output's shape: what the DDC and the PFB need, and nothing of the engine's frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Narrowband {
    /// n, output channels: a power of two, at least 2.
    pub channels: usize,
    /// T, PFB taps (1 to [`MAX_TAPS`]).
    pub taps: usize,
    /// D, the DDC's decimation ([`ddc::DECIMATIONS`]).
    pub decimation: usize,
    /// L, the DDC filter's length ([`ddc::default_ddc_taps`] unless told otherwise).
    pub ddc_taps: usize,
    /// F, the mixer's phase increment in 2^-32 turns per sample ([`ddc::mixer_word`]).
    pub mixer: u32,
    /// The PFB weights' design (as wideband's).
    pub filter: FilterDesign,
    /// The centre half of a 2n-point PFB (with discard) or all of an n-point one (no discard).
    pub bins: Bins,
}

impl Narrowband {
    /// A narrowband output of `channels` channels, `taps` taps and decimation `decimation` around
    /// mixer word `mixer`, with the default DDC length and PFB design; checked.
    pub fn new(channels: usize, taps: usize, decimation: usize, mixer: u32) -> Result<Self> {
        let g = Self {
            channels,
            taps,
            decimation,
            ddc_taps: ddc::default_ddc_taps(decimation),
            mixer,
            filter: FilterDesign::default(),
            bins: Bins::CentreHalf,
        };
        g.validate()?;
        Ok(g)
    }

    /// A no-discard narrowband output of `channels` channels, `taps` taps and decimation
    /// `decimation` around mixer word `mixer`, flat over `pass`, with the default DDC length and
    /// PFB design; checked.
    pub fn no_discard(
        channels: usize,
        taps: usize,
        decimation: usize,
        mixer: u32,
        pass: PassBand,
    ) -> Result<Self> {
        let bins = Bins::All(pass);
        let g = Self {
            ddc_taps: bins.default_ddc_taps(decimation),
            bins,
            ..Self::new(channels, taps, decimation, mixer)?
        };
        g.validate()?;
        Ok(g)
    }

    /// Checks every field, with a sentence saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        if !(self.channels >= 2 && self.channels.is_power_of_two()) {
            bail!(
                "narrowband channels must be a power of two, at least 2, not {}",
                self.channels
            );
        }
        if !(1..=MAX_TAPS).contains(&self.taps) {
            bail!("the PFB needs 1 to {MAX_TAPS} taps, not {}", self.taps);
        }
        check_decimation(self.decimation)?;
        if self.ddc_taps == 0 || self.ddc_taps > ddc::MAX_DDC_TAPS {
            bail!(
                "the DDC needs 1 to {} taps, not {}",
                ddc::MAX_DDC_TAPS,
                self.ddc_taps
            );
        }
        check_mixer_word(self.mixer, self.decimation)?;
        if let Err(e) = self.filter.validate() {
            bail!("{e}");
        }
        if let Bins::All(pass) = self.bins {
            no_discard::check_decimation(self.decimation)?;
            pass.validate()?;
        }
        Ok(())
    }

    /// S, the DDC's subsampling factor: D, or 2D without discard.
    pub fn subsampling(&self) -> usize {
        self.bins.subsampling(self.decimation)
    }

    /// P, the PFB's points: 2n, or n without discard.
    pub fn points(&self) -> usize {
        self.bins.points(self.channels)
    }

    /// The step between spectra in ADC samples, 2nD (P subsampled samples).
    pub fn step(&self) -> usize {
        self.points() * self.subsampling()
    }

    /// A window in subsampled samples, PT.
    pub fn subsampled_window(&self) -> usize {
        self.points() * self.taps
    }

    /// The ADC samples one window reads: its PT subsampled samples, S apart, each filtering L.
    pub fn window(&self) -> usize {
        (self.subsampled_window() - 1) * self.subsampling() + self.ddc_taps
    }

    /// The signed offset k' = c - n/2 of channel c from the centre, in channels.
    pub fn channel_offset(&self, channel: usize) -> i64 {
        channel as i64 - (self.channels / 2) as i64
    }

    /// The FFT bin (of P) that output channel c is: (c - n/2) mod P.
    pub fn bin(&self, channel: usize) -> usize {
        self.bins.bin(channel, self.channels)
    }

    /// The centre actually used, F fs / 2^32 Hz: the centre of channel n/2.
    pub fn centre_frequency(&self, fs: f64) -> f64 {
        ddc::centre_frequency(self.mixer, fs)
    }

    /// The band's width, fs / (2D) Hz.
    pub fn bandwidth(&self, fs: f64) -> f64 {
        fs / (2 * self.decimation) as f64
    }

    /// One channel's width (and spacing), fs / (2 D n) Hz.
    pub fn channel_width(&self, fs: f64) -> f64 {
        fs / self.step() as f64
    }

    /// The sky frequency at the centre of channel c: centre + (c - n/2) fs / (2 D n) Hz.
    pub fn channel_frequency(&self, channel: usize, fs: f64) -> f64 {
        self.centre_frequency(fs) + self.channel_offset(channel) as f64 * self.channel_width(fs)
    }
}

/// What a backend is handed per spectrum and polarisation for a narrowband output: the
/// narrowband counterpart of wideband's (coarse, fine, phase).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NarrowbandDelay {
    /// k, the coarse delay in whole subsampled samples: round(d / S), ties away from zero. The
    /// window of the spectrum with timestamp t0 starts at subsampled sample t0/S - k.
    pub coarse: i64,
    /// r' = (d - kS) / D, the residual in units of D ADC samples (a subsampled sample with
    /// discard, half of one without), within [-S/(2D), S/(2D)]: the rotation is the same for both.
    pub fine: f64,
    /// The fringe phase p minus the mixer's phase over the whole delay, 2 pi F d / 2^32, wrapped
    /// to [-pi, pi).
    pub phase: f64,
}

impl NarrowbandDelay {
    /// The rotation of channel c of n: `exp(i (phase - pi k' r' / n))`, k' = c - n/2 the channel's
    /// signed offset from the centre (not its FFT bin, which differs by 2n below the centre).
    pub fn rotation(&self, channel: usize, channels: usize) -> Complex64 {
        let offset = channel as f64 - (channels / 2) as f64;
        Complex64::from_polar(
            1.0,
            self.phase - std::f64::consts::PI * offset * self.fine / channels as f64,
        )
    }
}

/// Maps a delay model evaluated at a spectrum's timestamp (d = `at.coarse + at.fine` ADC samples,
/// fringe phase `at.phase`) to what a narrowband output of decimation D, DDC subsampling S (D, or
/// 2D without discard) and mixer word F needs.
///
/// The output for input x[t - d] is: the undelayed stream's window moved back by k = round(d/S)
/// subsampled samples, each channel turned by exp(-i pi k' r' / n) for the residual r' = (d -
/// kS)/D (channel c's offset k' fs/(2Dn) from the centre, turned over rho = d - kS ADC samples),
/// and every channel turned by exp(-2 pi i F d / 2^32) (the mixer's phase over d), besides
/// the fringe phase. The mixer term is computed as exactly as the mixer itself: the coarse part's
/// phase `(at.coarse F) mod 2^32` in integers, only `F at.fine / 2^32` (at most a quarter turn) in
/// floating point. The mapping does not depend on n.
pub fn narrowband_delay(
    at: &DelayAt,
    decimation: usize,
    subsampling: usize,
    word: u32,
) -> NarrowbandDelay {
    let (d, s) = (decimation as i64, subsampling as i64);
    let total = at.coarse as f64 + at.fine;
    let coarse = (total / s as f64).round() as i64; // ties away from zero
    let rho = (at.coarse - coarse * s) as f64 + at.fine;
    let mixer_turns = ddc::mixer_phase(at.coarse as u64, word) as f64 / 4_294_967_296.0
        + word as f64 * at.fine / 4_294_967_296.0;
    NarrowbandDelay {
        coarse,
        fine: rho / d as f64,
        phase: wrap_phase(at.phase - std::f64::consts::TAU * mixer_turns),
    }
}

/// The float64 narrowband channeliser of one polarisation: the oracle for narrowband backends.
/// Mixer, filter and subsampling, FIR over taps, 2n-point complex FFT, the kept bins and the
/// per-channel rotation, before gain and quantisation; evaluated literally per spectrum.
pub struct NarrowbandReference {
    geometry: Narrowband,
    weights: Vec<f64>,
    ddc_filter: Vec<f64>,
    fft: Arc<dyn Fft<f64>>,
}

impl NarrowbandReference {
    pub fn new(geometry: Narrowband) -> Result<Self> {
        geometry.validate()?;
        let bins = geometry.bins;
        let weights = bins.pfb_weights(geometry.channels, geometry.taps, geometry.filter)?;
        let ddc_filter = bins.ddc_filter(geometry.decimation, geometry.ddc_taps)?;
        let fft = FftPlanner::new().plan_fft_forward(geometry.points());
        Ok(Self {
            geometry,
            weights,
            ddc_filter,
            fft,
        })
    }

    pub fn geometry(&self) -> &Narrowband {
        &self.geometry
    }

    /// Mixes with `word` from now on (a narrowband output's centre may change from frame to
    /// frame); checked as [`check_mixer_word`] checks it.
    pub fn set_mixer(&mut self, word: u32) -> Result<()> {
        check_mixer_word(word, self.geometry.decimation)?;
        self.geometry.mixer = word;
        Ok(())
    }

    /// The PFB weights (PT, as wideband's for P/2 channels and T taps).
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The DDC filter h (L taps, unit gain at DC or, no-discard, over the pass band).
    pub fn ddc_filter(&self) -> &[f64] {
        &self.ddc_filter
    }

    /// The first ADC sample the window of the spectrum with timestamp `t0` reads under `delay`:
    /// (t0/S - k) S, as a signed number (negative only before the stream's start).
    pub fn window_start(&self, t0: u64, delay: &NarrowbandDelay) -> i128 {
        let d = self.geometry.subsampling() as i128;
        (t0 as i128 / d - delay.coarse as i128) * d
    }

    /// Spectrum with timestamp `t0` (a multiple of 2nD) of a polarisation whose real samples
    /// `samples` start at absolute ADC sample `first`, under the delay model's value `delay` at
    /// t0: the n channels' values before gain and quantisation. Fails unless the window (after
    /// delay) lies inside the samples.
    pub fn spectrum(
        &self,
        samples: &[f64],
        first: u64,
        t0: u64,
        delay: &DelayAt,
    ) -> Result<Vec<Complex64>> {
        let g = &self.geometry;
        if !t0.is_multiple_of(g.step() as u64) {
            bail!(
                "a narrowband spectrum's timestamp is a multiple of 2nD = {}, not {t0}",
                g.step()
            );
        }
        let nb = narrowband_delay(delay, g.decimation, g.subsampling(), g.mixer);
        let start = self.window_start(t0, &nb);
        let end = start + g.window() as i128;
        let have = first as i128..first as i128 + samples.len() as i128 + 1;
        if !(have.contains(&start) && have.contains(&end)) {
            bail!(
                "the window of spectrum {t0} under delay {delay:?} reads ADC samples {start} .. {end}, the samples hold {} .. {}",
                have.start,
                have.end - 1
            );
        }
        let x = |t: u64| Complex64::new(samples[t.wrapping_sub(first) as usize], 0.0);
        Ok(self.spectrum_of(x, t0, &nb))
    }

    /// [`Self::spectrum`] for any input given as a function of the absolute ADC sample index
    /// (complex test signals too), under an already mapped delay; `t0` unchecked.
    pub fn spectrum_of(
        &self,
        x: impl Fn(u64) -> Complex64,
        t0: u64,
        nb: &NarrowbandDelay,
    ) -> Vec<Complex64> {
        let dec = self.geometry.subsampling() as u64;
        let j0 = (t0 / dec).wrapping_sub(nb.coarse as u64);
        self.window_spectrum(x, j0.wrapping_mul(dec), nb)
    }

    /// The spectrum of the window whose first ADC sample is `start`, wherever that lies (`nb`'s
    /// coarse part is not used: the window is already placed), turned by `nb`'s residual and
    /// phase: what a backend computes from a window offset, r' and p'.
    pub fn window_spectrum(
        &self,
        x: impl Fn(u64) -> Complex64,
        start: u64,
        nb: &NarrowbandDelay,
    ) -> Vec<Complex64> {
        let g = &self.geometry;
        let (n, step, dec) = (g.channels, g.points(), g.subsampling());
        // Mix each input sample of the window once (the filters of neighbouring subsampled
        // samples overlap by L - D), then filter and subsample: the same sums as ddc::ddc_sample.
        let mixed: Vec<Complex64> = (0..g.window() as u64)
            .map(|i| {
                let t = start.wrapping_add(i);
                x(t) * ddc::mixer(t, g.mixer)
            })
            .collect();
        let y = |i: usize| -> Complex64 {
            let m = &mixed[i * dec..i * dec + g.ddc_taps];
            m.iter().zip(&self.ddc_filter).map(|(v, h)| v * h).sum()
        };
        // g_t = sum over taps j of y[j0 + t + P j] w[t + P j]
        let mut buf = vec![Complex64::new(0.0, 0.0); step];
        for j in 0..g.taps {
            for (t, b) in buf.iter_mut().enumerate() {
                *b += y(t + step * j) * self.weights[t + step * j];
            }
        }
        self.fft.process(&mut buf); // X_b = sum_t g_t exp(-2 pi i b t / P)
        (0..n).map(|c| buf[g.bin(c)] * nb.rotation(c, n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::ddc::{default_ddc_taps, filter_response, phase_radians, DECIMATIONS};
    use crate::signal::delay::DelayModel;
    use crate::signal::weights::{dc_gain, WindowFunction};
    use std::f64::consts::{PI, TAU};

    const FS: f64 = 1712e6;
    const TWO_POW_32: f64 = 4_294_967_296.0;

    /// A centre of 700/2048 of fs (585.2 MHz at 1712 MHz), on the wideband grid of up to 1024
    /// channels so that tones at narrowband channel centres can be compared with wideband.
    const WORD: u32 = 700 << 21;

    /// A real tone of amplitude `a` whose phase at sample t is exactly (t G mod 2^32) / 2^32 turns:
    /// frequency G fs / 2^32 (folded into 0 .. fs/2).
    fn tone(word: u32, a: f64) -> impl Fn(u64) -> f64 {
        move |t| a * phase_radians(ddc::mixer_phase(t, word)).cos()
    }

    /// The word of the frequency `centre + offset` where `offset` is in units of fs / 2^32.
    fn offset_word(offset: i64) -> u32 {
        (WORD as i64).wrapping_add(offset) as u32
    }

    /// Deterministic noise: uniform in [-100, 100), a hash of the absolute sample index.
    fn noise(t: u64) -> f64 {
        let mut z = t.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 200.0
    }

    fn real(f: impl Fn(u64) -> f64) -> impl Fn(u64) -> Complex64 {
        move |t| Complex64::new(f(t), 0.0)
    }

    /// The no-discard chain's response to tones swept over twice its band, read as katgpucbf's
    /// qualification reads it (`no_discard::sweep_figures`): complex tones at the centres of
    /// channels -n/2 .. 3n/2, through the whole float64 chain (mixer, remez DDC, n-point PFB),
    /// each read in the channel it lands in. Pass band 64 of 107 MHz (the qualification's case
    /// at 1712 Msample/s and D 8), n 64, T 4.
    #[test]
    // One decimation for now: D 16 and 32 join the list once their designs converge.
    #[allow(clippy::single_element_loop)]
    fn no_discard_swept_tones_meet_katgpucbfs_requirements() {
        for (d, fraction) in [(8usize, 64.0 / 107.0)] {
            let n = 64;
            let pass = PassBand {
                fraction,
                weight: no_discard::DEFAULT_WEIGHT_PASS,
            };
            let r = NarrowbandReference::new(Narrowband::no_discard(n, 4, d, WORD, pass).unwrap())
                .unwrap();
            let g = *r.geometry();
            let t0 = 1000 * g.step() as u64;
            let width = (TWO_POW_32 / g.step() as f64) as i64; // one channel, in word units
            let power: Vec<f64> = (0..2 * n)
                .map(|i| {
                    let word = offset_word((i as i64 - n as i64) * width);
                    let x = |t: u64| {
                        Complex64::from_polar(1.0, phase_radians(ddc::mixer_phase(t, word)))
                    };
                    let y = r.spectrum_of(x, t0, &NO_DELAY);
                    y[(i + n / 2) % n].norm_sqr()
                })
                .collect();
            let f = no_discard::sweep_figures(&power, n, pass);
            eprintln!(
                "no-discard D {d} (L {}), pass {fraction:.3} of the band, float64 chain, {} tones: \
                 ripple {:.4} dB, worst alias into the pass band {:.1} dB",
                g.ddc_taps,
                power.len(),
                f.ripple_db,
                f.alias_db
            );
            assert!(f.ripple_db < 0.1, "D {d}: ripple {} dB", f.ripple_db);
            assert!(f.alias_db < -80.0, "D {d}: alias {} dB", f.alias_db);
        }
    }

    const NO_DELAY: NarrowbandDelay = NarrowbandDelay {
        coarse: 0,
        fine: 0.0,
        phase: 0.0,
    };

    /// The wideband channeliser's value in channel k, by docs/signal-path.md's formulas: the FIR
    /// over taps of the real window starting at t0, then bin k of the 2n-point DFT.
    fn wideband_channel(
        x: &impl Fn(u64) -> f64,
        n: usize,
        w: &[f64],
        t0: u64,
        k: usize,
    ) -> Complex64 {
        let step = 2 * n;
        (0..step)
            .map(|t| {
                let g: f64 = (0..w.len() / step)
                    .map(|j| x(t0 + (t + step * j) as u64) * w[t + step * j])
                    .sum();
                Complex64::from_polar(g, -TAU * (k * t) as f64 / step as f64)
            })
            .sum()
    }

    fn rel_error(a: &[Complex64], b: &[Complex64]) -> f64 {
        let err = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).norm_sqr())
            .sum::<f64>();
        let pow = a.iter().map(|x| x.norm_sqr()).sum::<f64>();
        (err / pow).sqrt()
    }

    #[test]
    fn geometry() {
        let g = Narrowband::new(1024, 16, 8, WORD).unwrap();
        assert_eq!(g.step(), 16384);
        assert_eq!(g.subsampled_window(), 32768);
        assert_eq!(g.window(), 32767 * 8 + 96);
        assert_eq!((g.bin(512), g.bin(0), g.bin(1023)), (0, 1536, 511));
        assert_eq!((g.channel_offset(0), g.channel_offset(1023)), (-512, 511));
        let centre = 700.0 / 2048.0 * FS;
        assert_eq!(g.centre_frequency(FS), centre);
        assert_eq!(g.bandwidth(FS), FS / 16.0);
        assert_eq!(g.channel_frequency(512, FS), centre);
        assert_eq!(g.channel_frequency(0, FS), centre - FS / 32.0);
        assert_eq!(g.channel_frequency(612, FS), centre + 100.0 * FS / 16384.0);
        // Refusals, each with its sentence.
        let bad = |g: Narrowband| g.validate().unwrap_err().0;
        assert!(bad(Narrowband { channels: 48, ..g }).contains("power of two"));
        assert!(bad(Narrowband { channels: 1, ..g }).contains("power of two"));
        assert!(bad(Narrowband { taps: 0, ..g }).contains("taps"));
        assert!(bad(Narrowband { decimation: 4, ..g }).contains("8, 16 or 32"));
        assert!(bad(Narrowband { ddc_taps: 0, ..g }).contains("DDC"));
        assert!(bad(Narrowband {
            mixer: 1 << 20,
            ..g
        })
        .contains("outside 0 .. fs/2"));
        // A centre that fits with D = 16 but not D = 8.
        let edge = ddc::mixer_word(40e6, FS, 16).unwrap();
        assert!(Narrowband::new(1024, 4, 16, edge).is_ok());
        assert!(Narrowband::new(1024, 4, 8, edge).is_err());
    }

    /// Unit-by-hand cases of the mapping, each worked out from d = kD + rho.
    #[test]
    fn delay_mapping_by_hand() {
        let word = 1u32 << 30; // fs/4: the mixer turns a quarter per sample
        let at = |coarse: i64, fine: f64, phase: f64| DelayAt {
            coarse,
            fine,
            phase,
        };
        let check = |a: DelayAt, k: i64, fine: f64, phase: f64| {
            let nb = narrowband_delay(&a, 8, 8, word);
            assert_eq!(nb.coarse, k, "{a:?}");
            assert!((nb.fine - fine).abs() < 1e-15, "{a:?}: {nb:?}");
            assert!(
                (wrap_phase(nb.phase - phase)).abs() < 1e-12,
                "{a:?}: {nb:?}"
            );
        };
        check(at(0, 0.0, 0.0), 0, 0.0, 0.0);
        // 16 samples: 2 subsampled samples, 4 whole turns of the mixer.
        check(at(16, 0.0, 0.5), 2, 0.0, 0.5);
        // 1 sample: rho = 1, r' = 1/8, the mixer a quarter turn: -pi/2.
        check(at(1, 0.0, 0.0), 0, 0.125, -PI / 2.0);
        // 12 = 1.5 D: ties away from zero, k = 2, rho = -4; the mixer 3 whole turns.
        check(at(12, 0.0, 0.0), 2, -0.5, 0.0);
        check(at(-12, 0.0, 0.0), -2, 0.5, 0.0);
        // 5 samples: k = 1, rho = -3 (r' = -3/8); the mixer 5/4 turns: -pi/2.
        check(at(5, 0.0, 0.0), 1, -0.375, -PI / 2.0);
        // -3.25 samples: k = 0, r' = -3.25/8; the mixer -13/16 turns: +13 pi / 8 = -3 pi / 8.
        check(at(-3, -0.25, 0.0), 0, -3.25 / 8.0, -3.0 * PI / 8.0);
        // A large delay: 10^6 + 3.5 samples, k = 125000, rho = 3.5, the mixer 250000.875 turns.
        check(
            at(1_000_004, -0.5, 1.0),
            125_000,
            3.5 / 8.0,
            1.0 - 1.75 * PI,
        );
        // The rotation uses the signed offset from the centre.
        let nb = NarrowbandDelay {
            coarse: 0,
            fine: 0.25,
            phase: 0.1,
        };
        let r = nb.rotation(0, 64); // k' = -32
        assert!((r - Complex64::from_polar(1.0, 0.1 + PI * 32.0 * 0.25 / 64.0)).norm() < 1e-15);
        assert!((nb.rotation(32, 64) - Complex64::from_polar(1.0, 0.1)).norm() < 1e-15);
    }

    /// A tone at the centre lands in channel n/2, one 0.3 of the band above it in channel n/2 +
    /// 0.3 n (the nearest channel on the wideband grid too), each at the wideband channeliser's
    /// level for the same tone, and with the phase the filter's linear phase predicts.
    #[test]
    fn tones_land_at_the_wideband_level() {
        let (n, taps, a) = (1024, 4, 100.0);
        for d in DECIMATIONS {
            let g = Narrowband::new(n, taps, d, WORD).unwrap();
            let r = NarrowbandReference::new(g).unwrap();
            let t0 = g.step() as u64 * 12345;
            // k' a multiple of D keeps the tone on the wideband grid of n channels.
            let above = (d * ((0.3 * n as f64 / d as f64).round() as usize)) as i64;
            for k in [0, above] {
                let word = offset_word(k * (TWO_POW_32 as i64 / g.step() as i64));
                let x = tone(word, a);
                let y = r.spectrum_of(real(&x), t0, &NO_DELAY);
                let c = (n as i64 / 2 + k) as usize;
                let peak = (0..n)
                    .max_by(|&i, &j| y[i].norm().total_cmp(&y[j].norm()))
                    .unwrap();
                assert_eq!(peak, c, "D {d}: tone at offset {k} peaks in {peak}");
                // Wideband: the same tone, same weights, at its channel (word / 2^32 * 2n).
                let wk = (word as u64 * 2 * n as u64 / (1u64 << 32)) as usize;
                let wb = wideband_channel(&x, n, r.weights(), t0, wk);
                let level = 20.0 * (y[c].norm() / wb.norm()).log10();
                // Predicted: (a/2) sum(w) H(-nu), nu the offset in cycles per ADC sample.
                let nu = k as f64 / g.step() as f64;
                let want = a / 2.0 * dc_gain(r.weights()) * filter_response(r.ddc_filter(), -nu);
                let err = (y[c] - want).norm() / want.norm();
                println!(
                    "D {d:2}, n {n}: tone {:+.4} of the band from the centre ({:.4} MHz) in channel {c}: \
                     {level:+.6} dB against wideband channel {wk} (|X| {:.3} vs {:.3}); \
                     off the prediction by {err:.1e}",
                    k as f64 / n as f64,
                    g.channel_frequency(c, FS) / 1e6,
                    y[c].norm(),
                    wb.norm(),
                );
                assert!(level.abs() < 0.001, "D {d}: {level} dB");
                assert!(err < 1e-4, "D {d}: {err}");
            }
        }
    }

    /// White noise: a narrowband channel holds 1/D of the noise power of a wideband one (whose
    /// channels hold the input's variance, unit-energy weights), D times narrower, while a tone
    /// keeps its level (above).
    #[test]
    fn noise_level_is_one_dth_of_wideband() {
        let (n, taps) = (64, 4);
        let variance = 100.0f64.powi(2) / 3.0; // of `noise`
        for d in DECIMATIONS {
            let r = NarrowbandReference::new(Narrowband::new(n, taps, d, WORD).unwrap()).unwrap();
            let spectra = 400;
            let power: f64 = (0..spectra as u64)
                .flat_map(|s| {
                    r.spectrum_of(
                        real(noise),
                        r.geometry().step() as u64 * (1000 + s),
                        &NO_DELAY,
                    )
                })
                .map(|v| v.norm_sqr())
                .sum::<f64>()
                / (spectra * n) as f64;
            let db = 10.0 * (power * d as f64 / variance).log10();
            println!(
                "D {d:2}: noise power per channel {db:+.3} dB from 1/D of a wideband channel's"
            );
            assert!(db.abs() < 0.3, "D {d}: {db} dB");
        }
    }

    /// The strongest response of the kept channels to tones whose mixed-down frequency aliases
    /// into the kept band, relative to an in-band tone of the same amplitude. The DDC filter's
    /// response over every alias band is scanned finely (what the worst tone can leak); then the
    /// whole chain is run for real tones at, among others, f_c +- fs/D, f_c + fs/D +- fs/(8D),
    /// the stopband's edges and the scan's worst frequency, and over a grid of every alias band,
    /// each placed so that its alias falls on a channel centre (the PFB's full gain).
    #[test]
    fn anti_alias_rejection() {
        let (n, taps) = (256, 4);
        for d in DECIMATIONS {
            let g = Narrowband::new(n, taps, d, WORD).unwrap();
            let r = NarrowbandReference::new(g).unwrap();
            let h = r.ddc_filter();
            let df = d as f64;
            // Baseband frequencies g (cycles per ADC sample, mod 1) that alias into the kept band
            // |g'| < 1/(4D): |g - k/D| < 1/(4D), k != 0. The region k = D/2 straddles +-1/2.
            let mut worst = (f64::MIN, 0.0);
            for k in 1..=d as i64 / 2 {
                for sign in [-1.0, 1.0] {
                    let points = 8192;
                    for i in 0..=points {
                        let f =
                            sign * (k as f64 / df) + (i as f64 / points as f64 - 0.5) / (2.0 * df);
                        let db = 20.0 * filter_response(h, f).norm().log10();
                        if db > worst.0 {
                            worst = (db, f);
                        }
                    }
                }
            }
            // Refine around the scan's worst point.
            let step = 1.0 / (2.0 * df * 8192.0);
            for i in -1000..=1000 {
                let f = worst.1 + step * i as f64 / 1000.0;
                let alias = f - (f * df).round() / df;
                if alias.abs() < 0.25 / df && (f * df).round() != 0.0 {
                    let db = 20.0 * filter_response(h, f).norm().log10();
                    if db > worst.0 {
                        worst = (db, f);
                    }
                }
            }
            // The whole chain: the in-band reference, then tones whose alias sits on channel k'.
            // A real tone is two complex ones, at +f and -f: the grid sweeps complex tones, each
            // one component (every frequency mod fs, so every image too), against a complex tone
            // at the centre; the named frequencies are real tones, as a digitiser delivers them.
            let t0 = g.step() as u64 * 777;
            let channel = TWO_POW_32 as i64 / g.step() as i64; // one channel in 2^-32 of fs
            let alias_word =
                |k: i64, kp: i64| offset_word(k * (TWO_POW_32 as i64 / d as i64) + kp * channel);
            let peak = |y: Vec<Complex64>| y.iter().map(|v| v.norm()).fold(0.0, f64::max);
            let complex_tone = |word: u32| {
                move |t: u64| Complex64::from_polar(1.0, phase_radians(ddc::mixer_phase(t, word)))
            };
            let complex_level = |word: u32| peak(r.spectrum_of(complex_tone(word), t0, &NO_DELAY));
            let real_level = |word: u32| peak(r.spectrum_of(real(tone(word, 1.0)), t0, &NO_DELAY));
            let (complex_ref, real_ref) = (complex_level(WORD), real_level(WORD));
            let nh = n as i64 / 2;
            let wk = (worst.1 * df).round() as i64;
            let wkp =
                (((worst.1 - wk as f64 / df) * g.step() as f64).round() as i64).clamp(-nh, nh - 1);
            let named = [
                ("f_c + fs/D", alias_word(1, 0)),
                ("f_c - fs/D", alias_word(-1, 0)),
                ("f_c + fs/D + fs/(8D)", alias_word(1, n as i64 / 4)),
                ("f_c + fs/D - fs/(8D)", alias_word(1, -(n as i64) / 4)),
                ("f_c + 3fs/(4D) (stopband edge)", alias_word(1, -nh)),
                ("f_c - 3fs/(4D) - 1 channel", alias_word(-1, nh - 1)),
                ("the scan's worst", alias_word(wk, wkp)),
            ];
            let mut strongest = (f64::MIN, String::new());
            let mut report = Vec::new();
            for (name, word) in named {
                // Real tones only where the tone itself (folded into 0 .. fs/2) lies in an alias
                // band, not in or beside the kept band.
                let folded = (word as f64 / TWO_POW_32).min(1.0 - word as f64 / TWO_POW_32);
                assert!(
                    (folded - WORD as f64 / TWO_POW_32).abs() >= 0.75 / df - 1e-12,
                    "{name}"
                );
                let db = 20.0 * (real_level(word) / real_ref).log10();
                report.push(format!("{name} {db:.1}"));
                if db > strongest.0 {
                    strongest = (db, format!("real tone at {name}"));
                }
            }
            for k in 1..=d as i64 / 2 {
                for sign in [-1, 1] {
                    for kp in (-nh..nh).step_by(n / 32) {
                        let db =
                            20.0 * (complex_level(alias_word(sign * k, kp)) / complex_ref).log10();
                        if db > strongest.0 {
                            strongest = (db, format!("alias band {} channel {kp:+}", sign * k));
                        }
                    }
                }
            }
            println!(
                "D {d:2}, L {}: DDC filter over every alias band at most {:.1} dB (at {:+.6} fs from the centre, \
                 {:.3} MHz); whole chain, n {n}: strongest leak {:.1} dB ({}); {}",
                h.len(),
                worst.0,
                worst.1,
                (worst.1 * FS + g.centre_frequency(FS)).rem_euclid(FS) / 1e6,
                strongest.0,
                strongest.1,
                report.join(", "),
            );
            assert!(worst.0 < -60.0 && strongest.0 < -60.0);
            // The margin the default length is chosen for.
            assert!(worst.0 < -85.0 && strongest.0 < -85.0, "D {d}");
        }
    }

    /// A delay of whole subsampled samples (any multiple of D, negative too) moves the window and
    /// turns every channel by the mixer's phase over d: exact to float64 on noise.
    #[test]
    fn delay_by_multiples_of_d_is_exact_on_noise() {
        let (n, taps) = (64, 4);
        for d in DECIMATIONS {
            let r = NarrowbandReference::new(Narrowband::new(n, taps, d, WORD).unwrap()).unwrap();
            let t0 = r.geometry().step() as u64 * 1_000_003;
            let mut worst = 0.0f64;
            for m in [0i64, 1, -1, 7, -13, 1000, -4097] {
                let delay = m * d as i64;
                let delayed = |t: u64| noise(t.wrapping_sub(delay as u64));
                let direct = r.spectrum_of(real(delayed), t0, &NO_DELAY);
                let phase = 0.7;
                let at = DelayAt {
                    coarse: delay,
                    fine: 0.0,
                    phase,
                };
                let mapped = r.spectrum_of(real(noise), t0, &narrowband_delay(&at, d, d, WORD));
                let want: Vec<_> = direct
                    .iter()
                    .map(|v| v * Complex64::from_polar(1.0, phase))
                    .collect();
                worst = worst.max(rel_error(&want, &mapped));
            }
            println!(
                "D {d:2}: delays of whole subsampled samples on noise: relative error {worst:.1e}"
            );
            assert!(worst < 1e-12, "D {d}: {worst}");
        }
    }

    /// Any delay, fractional or not, on a signal the per-channel rotation describes exactly: complex
    /// tones of random amplitude and phase at the centre of every one of the 2n bins (the discarded
    /// ones too), through a PFB that is a plain FFT (one tap, rectangular, no sinc), so that each
    /// channel holds its own tone and nothing else. The delayed input is x(t - d) evaluated
    /// exactly; the mapped delay comes from a delay model evaluated like the engine's. Equal to
    /// float64 precision, and each part of the mapping is needed: without the mixer term, with it
    /// over k D instead of d, or with the FFT bin instead of the signed offset, it fails.
    #[test]
    fn any_delay_is_exact_on_channel_centred_tones() {
        let n = 64;
        for d in DECIMATIONS {
            let g = Narrowband {
                taps: 1,
                filter: FilterDesign {
                    window: WindowFunction::Rect,
                    w_cutoff: 0.0,
                },
                ..Narrowband::new(n, 1, d, WORD).unwrap()
            };
            let r = NarrowbandReference::new(g).unwrap();
            let channel = TWO_POW_32 as i64 / g.step() as i64;
            // Tone b' (offset -n .. n-1 channels): word, amplitude and phase from the noise hash.
            let tones: Vec<(u32, Complex64)> = (-(n as i64)..n as i64)
                .map(|b| {
                    let amp = Complex64::from_polar(
                        1.0 + noise(b as u64) / 200.0,
                        noise(!(b as u64)) / 100.0 * PI,
                    );
                    (offset_word(b * channel), amp)
                })
                .collect();
            let signal = |delay: f64| {
                let tones = tones.clone();
                move |t: u64| -> Complex64 {
                    tones
                        .iter()
                        .map(|&(word, amp)| {
                            // Exact phase at t, minus the frequency times the delay.
                            let turns = ddc::mixer_phase(t, word) as f64 / TWO_POW_32
                                - word as f64 / TWO_POW_32 * delay;
                            amp * Complex64::from_polar(1.0, TAU * turns)
                        })
                        .sum()
                }
            };
            let t0 = g.step() as u64 * 4321;
            let mut worst = 0.0f64;
            let mut wrong = [f64::MAX; 3];
            for delay in [
                3.0,
                -5.0,
                13.0,
                d as f64 / 2.0,
                -(d as f64) / 2.0,
                2.3,
                -7.61,
                1000.5,
                12345.678,
                -54321.123,
            ] {
                let model = DelayModel::fixed(delay / FS, 0.3);
                let at = model.at(t0 as i128, FS).unwrap();
                let total = at.coarse as f64 + at.fine;
                let direct = r.spectrum_of(signal(total), t0, &NO_DELAY);
                let want: Vec<_> = direct
                    .iter()
                    .map(|v| v * Complex64::from_polar(1.0, 0.3))
                    .collect();
                let nb = narrowband_delay(&at, d, d, WORD);
                assert!(nb.fine.abs() <= 0.5);
                let mapped = r.spectrum_of(signal(0.0), t0, &nb);
                worst = worst.max(rel_error(&want, &mapped));
                // The same with each part of the mapping left out or done wrong.
                let mixer_turns = |samples: f64| WORD as f64 / TWO_POW_32 * samples;
                let no_mixer = NarrowbandDelay { phase: 0.3, ..nb };
                let coarse_only = NarrowbandDelay {
                    phase: 0.3 - TAU * mixer_turns((nb.coarse * d as i64) as f64),
                    ..nb
                };
                let by_bin: Vec<_> = mapped
                    .iter()
                    .enumerate()
                    .map(|(c, v)| {
                        let extra = g.bin(c) as f64 - g.channel_offset(c) as f64;
                        v * Complex64::from_polar(1.0, -PI * extra * nb.fine / n as f64)
                    })
                    .collect();
                if nb.fine.abs() > 0.01 {
                    wrong[0] =
                        wrong[0].min(rel_error(&want, &r.spectrum_of(signal(0.0), t0, &no_mixer)));
                    wrong[1] = wrong[1].min(rel_error(
                        &want,
                        &r.spectrum_of(signal(0.0), t0, &coarse_only),
                    ));
                    wrong[2] = wrong[2].min(rel_error(&want, &by_bin));
                }
            }
            println!(
                "D {d:2}: any delay on channel-centred tones: relative error {worst:.1e}; \
                 wrong mappings: no mixer term {:.2}, mixer over kD {:.2}, FFT bin for k' {:.2}",
                wrong[0], wrong[1], wrong[2]
            );
            assert!(worst < 1e-9, "D {d}: {worst}");
            assert!(wrong.iter().all(|&e| e > 0.1), "{wrong:?}");
        }
    }

    /// On real noise through the default PFB, a residual that is not a whole subsampled sample is
    /// approximated by the per-channel rotation, exactly as wideband's fine delay is: exact at
    /// each channel's centre, off by a phase slope of pi r' / n per channel across it. The error
    /// shrinks as 1/n, which the figures show; the alternative (the wrong mapping) is O(1).
    #[test]
    fn residual_delay_on_noise_is_the_fine_delay_approximation() {
        let taps = 4;
        let d = 16;
        for n in [64, 256] {
            let r = NarrowbandReference::new(Narrowband::new(n, taps, d, WORD).unwrap()).unwrap();
            let t0 = r.geometry().step() as u64 * 99_991;
            let mut figures = Vec::new();
            for delay in [1i64, 3, 8, -5, 21, -40] {
                let delayed = |t: u64| noise(t.wrapping_sub(delay as u64));
                let mut direct = Vec::new();
                let mut mapped = Vec::new();
                // Several spectra for a steadier figure.
                for s in 0..8u64 {
                    let ts = t0 + s * r.geometry().step() as u64;
                    direct.extend(r.spectrum_of(real(delayed), ts, &NO_DELAY));
                    let at = DelayAt {
                        coarse: delay,
                        fine: 0.0,
                        phase: 0.0,
                    };
                    mapped.extend(r.spectrum_of(
                        real(noise),
                        ts,
                        &narrowband_delay(&at, d, d, WORD),
                    ));
                }
                let nb = narrowband_delay(
                    &DelayAt {
                        coarse: delay,
                        fine: 0.0,
                        phase: 0.0,
                    },
                    d,
                    d,
                    WORD,
                );
                let err = rel_error(&direct, &mapped);
                figures.push(format!("d {delay} (r' {:+.4}): {err:.2e}", nb.fine));
                // Bound: the phase slope across a channel's response, pi |r'| / n per channel.
                assert!(
                    err < 2.0 * PI * nb.fine.abs() / n as f64 + 1e-12,
                    "n {n} d {delay}: {err}"
                );
            }
            println!(
                "D {d}, n {n}, T {taps}: residual delays on noise, relative error {}",
                figures.join(", ")
            );
        }
    }

    /// The slice interface: the window an undelayed spectrum reads starts at its timestamp, a
    /// delay moves it by k D, and a window outside the samples is refused.
    #[test]
    fn spectra_from_samples() {
        let g = Narrowband::new(64, 4, 8, WORD).unwrap();
        let r = NarrowbandReference::new(g).unwrap();
        let t0 = g.step() as u64 * 50;
        let samples: Vec<f64> = (0..g.window() as u64).map(|i| noise(t0 + i)).collect();
        let zero = DelayAt {
            coarse: 0,
            fine: 0.0,
            phase: 0.0,
        };
        let y = r.spectrum(&samples, t0, t0, &zero).unwrap();
        assert_eq!(y, r.spectrum_of(real(noise), t0, &NO_DELAY));
        assert!(r.spectrum(&samples[1..], t0 + 1, t0, &zero).is_err());
        assert!(r
            .spectrum(&samples[..samples.len() - 1], t0, t0, &zero)
            .is_err());
        assert!(r
            .spectrum(&samples, t0, t0 + 8, &zero)
            .unwrap_err()
            .0
            .contains("multiple of 2nD"));
        // 2.3 subsampled samples of delay (18.4 ADC samples): k = 2, the window starts 16 earlier.
        let at = DelayAt {
            coarse: 18,
            fine: 0.4,
            phase: 0.0,
        };
        let nb = narrowband_delay(&at, 8, 8, WORD);
        assert_eq!(r.window_start(t0, &nb), t0 as i128 - 16);
        let first = t0 - 16;
        let shifted: Vec<f64> = (0..g.window() as u64).map(|i| noise(first + i)).collect();
        let y = r.spectrum(&shifted, first, t0, &at).unwrap();
        assert_eq!(y, r.spectrum_of(real(noise), t0, &nb));
        assert!(r.spectrum(&samples, t0, t0, &at).is_err());
        assert_eq!(g.ddc_taps, default_ddc_taps(8));
    }
}

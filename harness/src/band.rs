//! Which frequency each channel of an output holds: the one place that knows an output kind's
//! channel plan. The content check (where a tone should peak), `response` (where to put the
//! tone for a channel offset), `qualify` (a channel's frequency) and the live page (where a new
//! tone lands) all ask a [`Band`] rather than computing k fs / (2n) themselves.
//!
//! An output's band comes from the engine's `/status` through [`Band::of`]: its kind, and for a
//! narrowband output the mixer word and decimation it reports (docs/signal-path.md,
//! "Narrowband"). Frequencies are worked out at the rate the caller gives (dsim's, usually),
//! as the engine's mixer and PFB work in cycles per sample, not in Hz.

use anyhow::{bail, Context, Result};
use fgpu_api::engine::{Output, OutputKind};
use serde::Serialize;

/// The frequencies an output's n channels cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Band {
    /// The whole band of a real input, 0 .. fs/2: channel k is centred on k fs / (2n).
    #[default]
    Wideband,
    /// fs / (2D) around a centre f_c = F fs / 2^32: channel c is centred on
    /// f_c + (c - n/2) fs / (2Dn), so channel n/2 holds the centre.
    Narrowband {
        /// F, the mixer's phase increment in 2^-32 turns per ADC sample: the centre in use.
        mixer_word: u32,
        /// The decimation D.
        decimation: usize,
        /// L, the DDC filter's taps (its group delay is (L - 1)/2 ADC samples).
        ddc_taps: usize,
        /// A narrowband output without discard (katgpucbf's VLBI mode): its pass band as a
        /// fraction of the band fs/(2D), around the centre. Its DDC subsamples by 2D and its
        /// n-point PFB keeps every bin, so the channels outside the pass band lie in the
        /// filter's roll-off. None for the kind with discard, whose every channel is pass band.
        #[serde(skip_serializing_if = "Option::is_none")]
        pass_fraction: Option<f64>,
    },
}

impl Band {
    /// The band of an output as the engine's `/status` describes it; an error for a narrowband
    /// output that does not say where its band is.
    pub fn of(output: &Output) -> Result<Self> {
        Ok(match (output.kind, &output.narrowband) {
            (OutputKind::Wideband, _) => Band::Wideband,
            // No discard changes how the engine gets there, not which frequency a channel holds.
            (OutputKind::Narrowband | OutputKind::NarrowbandNoDiscard, Some(nb))
                if nb.decimation > 0 =>
            {
                Band::Narrowband {
                    mixer_word: nb.mixer_word,
                    decimation: nb.decimation,
                    ddc_taps: nb.ddc_taps,
                    pass_fraction: match output.kind {
                        OutputKind::NarrowbandNoDiscard => Some(
                            nb.pass_bandwidth_hz
                                .filter(|p| *p > 0.0 && nb.bandwidth_hz > 0.0)
                                .map(|p| p / nb.bandwidth_hz)
                                .context(
                                    "a no-discard output that does not report its pass band",
                                )?,
                        ),
                        _ => None,
                    },
                }
            }
            (OutputKind::Narrowband | OutputKind::NarrowbandNoDiscard, _) => {
                bail!("a narrowband output that does not report its band (centre, decimation)")
            }
        })
    }

    /// The centre frequency at `adc_rate`, Hz (None for wideband, which has none).
    pub fn centre_hz(&self, adc_rate: f64) -> Option<f64> {
        match *self {
            Band::Wideband => None,
            Band::Narrowband { mixer_word, .. } => {
                Some(f64::from(mixer_word) / 4_294_967_296.0 * adc_rate)
            }
        }
    }

    /// The name of the output kind, as the engine's `/status` spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Band::Wideband => "wideband",
            Band::Narrowband {
                pass_fraction: None,
                ..
            } => "narrowband",
            Band::Narrowband { .. } => "narrowband_no_discard",
        }
    }

    /// A narrowband output without discard's pass band as a fraction of its band; None for
    /// the other kinds.
    pub fn pass_fraction(&self) -> Option<f64> {
        match *self {
            Band::Narrowband { pass_fraction, .. } => pass_fraction,
            Band::Wideband => None,
        }
    }

    /// ADC samples per sample the output's PFB reads: 1, or a narrowband output's D. A spectrum
    /// steps 2n of them.
    pub fn decimation(&self) -> usize {
        match *self {
            Band::Wideband => 1,
            Band::Narrowband { decimation, .. } => decimation.max(1),
        }
    }

    /// The DDC filter's taps L: 1 for wideband, which reads each sample once.
    pub fn ddc_taps(&self) -> usize {
        match *self {
            Band::Wideband => 1,
            Band::Narrowband { ddc_taps, .. } => ddc_taps.max(1),
        }
    }

    /// S, the ADC samples between two of the PFB's inputs: 1 for wideband, D for narrowband,
    /// 2D without discard.
    pub fn subsampling(&self) -> usize {
        match self.pass_fraction() {
            Some(_) => 2 * self.decimation(),
            None => self.decimation(),
        }
    }

    /// The channels of the PFB design whose weights the output uses: n, or n/2 for a no-discard
    /// output, whose n-point PFB takes the design of n/2 channels (half as long a window).
    pub fn pfb_design_channels(&self, channels: usize) -> usize {
        match self.pass_fraction() {
            Some(_) => (channels / 2).max(1),
            None => channels,
        }
    }

    /// ADC samples between spectra: 2nD.
    pub fn step_samples(&self, channels: usize) -> u64 {
        2 * (channels * self.decimation()) as u64
    }

    /// ADC samples one spectrum reads from its timestamp on (zero delay): its 2nTD/S PFB
    /// inputs are S apart and each reads L: (2nT - 1) D + L with discard, (nT - 1) 2D + L
    /// without, 2nT for wideband.
    pub fn window_samples(&self, channels: usize, taps: usize) -> u64 {
        let s = self.subsampling() as u64;
        let inputs = 2 * (channels * taps * self.decimation()) as u64 / s;
        (inputs - 1) * s + self.ddc_taps() as u64
    }

    /// The band's edges, Hz: a wideband output's Nyquist zone 0 .. fs/2, a narrowband output's
    /// channels' outer edges (half a channel beyond the first and last centres).
    pub fn edges_hz(&self, adc_rate: f64, channels: usize) -> (f64, f64) {
        match self {
            Band::Wideband => (0.0, adc_rate / 2.0),
            Band::Narrowband { .. } => (
                self.frequency(-0.5, adc_rate, channels),
                self.frequency(channels as f64 - 0.5, adc_rate, channels),
            ),
        }
    }

    /// The pass band, Hz: the band's edges, or a no-discard output's pass band around its
    /// centre, where its DDC filter is flat.
    pub fn pass_band_hz(&self, adc_rate: f64, channels: usize) -> (f64, f64) {
        match (self.centre_hz(adc_rate), self.pass_fraction()) {
            (Some(c), Some(f)) => {
                let half = f * adc_rate / (4.0 * self.decimation() as f64);
                (c - half, c + half)
            }
            _ => self.edges_hz(adc_rate, channels),
        }
    }

    /// The channels whose centres lie in the pass band: every channel but a no-discard
    /// output's roll-off (channel n/2 at the centre, n channels across the band).
    pub fn pass_channels(&self, channels: usize) -> std::ops::RangeInclusive<usize> {
        let last = channels.saturating_sub(1);
        match self.pass_fraction() {
            None => 0..=last,
            Some(f) => {
                let (mid, half) = (channels as f64 / 2.0, f.min(1.0) * channels as f64 / 2.0);
                let first = (mid - half).ceil().max(0.0) as usize;
                let end = ((mid + half).floor() as usize).min(last);
                first.min(end)..=end
            }
        }
    }

    /// The spacing of the channels' centres, Hz.
    pub fn channel_width(&self, adc_rate: f64, channels: usize) -> f64 {
        let n = channels.max(1) as f64;
        match *self {
            Band::Wideband => adc_rate / (2.0 * n),
            Band::Narrowband { decimation, .. } => adc_rate / (2.0 * decimation.max(1) as f64 * n),
        }
    }

    /// The centre frequency of (fractional) channel `channel`, Hz.
    pub fn frequency(&self, channel: f64, adc_rate: f64, channels: usize) -> f64 {
        let width = self.channel_width(adc_rate, channels);
        match self.centre_hz(adc_rate) {
            None => channel * width,
            Some(centre) => centre + (channel - channels as f64 / 2.0) * width,
        }
    }

    /// The (fractional) channel whose centre a real tone of `freq_hz` falls on; its nearest
    /// channel is where it should peak. The input is real: a frequency above fs/2 folds back
    /// first. A narrowband output answers outside 0 .. n for a tone outside its band.
    pub fn channel(&self, freq_hz: f64, adc_rate: f64, channels: usize) -> f64 {
        let (f, width) = (
            fold(freq_hz, adc_rate),
            self.channel_width(adc_rate, channels),
        );
        match self.centre_hz(adc_rate) {
            None => f / width,
            Some(centre) => channels as f64 / 2.0 + (f - centre) / width,
        }
    }

    /// Whether a tone at (fractional) channel `channel` lies inside the output's channels.
    pub fn holds(channel: f64, channels: usize) -> bool {
        channel > -0.5 && channel < channels as f64 - 0.5
    }
}

/// The frequency in 0 .. fs/2 that a real input sampled at `adc_rate` shows for `freq_hz`.
pub fn fold(freq_hz: f64, adc_rate: f64) -> f64 {
    let f = freq_hz.rem_euclid(adc_rate);
    if f > adc_rate / 2.0 {
        adc_rate - f
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A narrowband band centred on (about) `centre_hz` at `adc_rate`, as the engine quantises
    /// it: F = round(f_c / fs 2^32).
    fn narrowband(centre_hz: f64, adc_rate: f64, decimation: usize) -> Band {
        Band::Narrowband {
            mixer_word: (centre_hz / adc_rate * 4_294_967_296.0).round() as u32,
            decimation,
            ddc_taps: 12 * decimation,
            pass_fraction: None,
        }
    }

    #[test]
    fn wideband_channels_are_k_fs_over_2n_and_fold() {
        let b = Band::Wideband;
        assert_eq!(b.channel(1712e6 / 8.0, 1712e6, 1024), 256.0);
        assert!((b.channel(100e6, 1000e6, 1000) - 200.0).abs() < 1e-9);
        // Above fs/2 and above fs: folded back.
        assert!((b.channel(900e6, 1000e6, 1000) - 200.0).abs() < 1e-9);
        assert!((b.channel(1100e6, 1000e6, 1000) - 200.0).abs() < 1e-9);
        assert_eq!(b.frequency(256.0, 1712e6, 1024), 1712e6 / 8.0);
        assert_eq!(b.channel_width(1712e6, 1024), 1712e6 / 2048.0);
        // The same tone in outputs of different channel counts: the channel scales with n.
        let f = b.frequency(40.0, 16e6, 256);
        assert_eq!(b.channel(f, 16e6, 1024), 160.0);
    }

    /// Channel c of a narrowband output covers f_c + (c - n/2) fs / (2Dn) (docs/signal-path.md).
    #[test]
    fn narrowband_channels_sit_around_the_centre() {
        let (fs, n) = (1712e6, 1024);
        // fs / 4: F = 2^30 exactly.
        let b = narrowband(428e6, fs, 8);
        assert_eq!(
            b,
            Band::Narrowband {
                mixer_word: 1 << 30,
                decimation: 8,
                ddc_taps: 96,
                pass_fraction: None,
            }
        );
        assert_eq!(b.kind(), "narrowband");
        // A spectrum steps 2nD samples and reads (2nT - 1) D + L of them.
        assert_eq!(b.step_samples(n), 16 * 1024);
        assert_eq!(b.window_samples(n, 4), (2 * 1024 * 4 - 1) * 8 + 96);
        assert_eq!(Band::Wideband.window_samples(n, 4), 2 * 1024 * 4);
        assert_eq!(Band::Wideband.edges_hz(fs, n), (0.0, fs / 2.0));
        let (lo, hi) = b.edges_hz(fs, n);
        assert!((lo - (428e6 - fs / 32.0 - fs / 32768.0)).abs() < 1e-6);
        assert!((hi - lo - fs / 16.0).abs() < 1e-6);
        assert_eq!(b.centre_hz(fs), Some(428e6));
        assert_eq!(b.channel_width(fs, n), fs / (2.0 * 8.0 * 1024.0));
        assert_eq!(b.channel(428e6, fs, n), 512.0);
        assert_eq!(b.frequency(512.0, fs, n), 428e6);
        for c in [0.0, 1.0, 100.25, 511.0, 513.0, 1023.0] {
            let f = b.frequency(c, fs, n);
            assert!((f - (428e6 + (c - 512.0) * fs / 16384.0)).abs() < 1e-6);
            assert!((b.channel(f, fs, n) - c).abs() < 1e-9, "channel {c}");
        }
        // The n channels span the band, fs/(2D), channel 0 at half of it below the centre.
        let span = b.frequency(n as f64, fs, n) - b.frequency(0.0, fs, n);
        assert!((span - fs / 16.0).abs() < 1e-6);
        assert!((b.frequency(0.0, fs, n) - (428e6 - fs / 32.0)).abs() < 1e-6);
        // A tone outside the band lands outside the channels; an alias folds first.
        assert!(!Band::holds(b.channel(100e6, fs, n), n));
        assert!(Band::holds(b.channel(fs - 428e6 + 1e6, fs, n), n));
        // A centre off the 2^-32 grid is the quantised one: far below a channel from the asked.
        let b = narrowband(300e6, fs, 32);
        assert!((b.centre_hz(fs).unwrap() - 300e6).abs() <= fs / 2f64.powi(33));
        // The band scales with the rate, as the mixer works in cycles per sample.
        assert_eq!(
            b.channel(b.centre_hz(2.0 * fs).unwrap(), 2.0 * fs, n),
            512.0
        );
    }

    /// The band an output's status describes.
    #[test]
    fn bands_of_outputs() {
        let mut out: Output = serde_json::from_value(serde_json::json!({
            "kind": "wideband", "channels": 1024, "taps": 16, "spectra_per_heap": 256,
            "heaps_per_frame": 4, "lag_samples": 30720, "substreams": 1,
            "channels_per_substream": 1024, "destinations": [], "heaps_sent": 0,
            "heaps_skipped": 0, "heaps_sent_per_substream": [0],
            "heaps_skipped_per_substream": [0], "packets": 0, "bytes": 0,
            "send_errors": 0, "last_timestamp": 0, "saturated": [0, 0]}))
        .unwrap();
        assert_eq!(Band::of(&out).unwrap(), Band::Wideband);
        out.kind = OutputKind::Narrowband;
        let err = Band::of(&out).unwrap_err().to_string();
        assert!(err.contains("does not report its band"), "{err}");
        out.narrowband = Some(fgpu_api::engine::Narrowband {
            centre_hz: 428e6,
            mixer_word: 1 << 30,
            decimation: 16,
            ddc_taps: 192,
            bandwidth_hz: 53.5e6,
            pass_bandwidth_hz: None,
        });
        assert_eq!(
            Band::of(&out).unwrap(),
            Band::Narrowband {
                mixer_word: 1 << 30,
                decimation: 16,
                ddc_taps: 192,
                pass_fraction: None,
            }
        );
        // Without discard: the pass band is part of the band, and must be reported.
        out.kind = OutputKind::NarrowbandNoDiscard;
        let err = Band::of(&out).unwrap_err().to_string();
        assert!(err.contains("pass band"), "{err}");
        if let Some(nb) = out.narrowband.as_mut() {
            nb.pass_bandwidth_hz = Some(32e6);
        }
        assert_eq!(Band::of(&out).unwrap().pass_fraction(), Some(32e6 / 53.5e6));
        assert_eq!(Band::of(&out).unwrap().kind(), "narrowband_no_discard");
    }

    /// No discard (katgpucbf's VLBI mode): the same channels, the PFB's inputs 2D apart, n
    /// points on the design of n/2 channels, and the pass band in the middle.
    #[test]
    fn no_discard_bands_keep_the_channels_and_name_the_pass_band() {
        let (fs, n) = (1712e6, 1024);
        let with = narrowband(428e6, fs, 8);
        let Band::Narrowband {
            mixer_word,
            decimation,
            ..
        } = with
        else {
            unreachable!()
        };
        let without = Band::Narrowband {
            mixer_word,
            decimation,
            ddc_taps: 256,
            pass_fraction: Some(64.0 / 107.0),
        };
        assert_eq!(without.kind(), "narrowband_no_discard");
        assert_eq!(with.kind(), "narrowband");
        assert_eq!((with.subsampling(), without.subsampling()), (8, 16));
        assert_eq!(
            (with.pfb_design_channels(n), without.pfb_design_channels(n)),
            (n, n / 2)
        );
        assert_eq!(Band::Wideband.subsampling(), 1);
        // The same step, but n T inputs 2D apart: D fewer samples than nT 2D - D.
        assert_eq!(without.step_samples(n), with.step_samples(n));
        assert_eq!(without.window_samples(n, 4), (1024 * 4 - 1) * 16 + 256);
        for c in [0.0, 300.0, 512.0, 1023.0] {
            assert_eq!(without.frequency(c, fs, n), with.frequency(c, fs, n));
        }
        // 64 MHz of the 107 MHz band: channels 512 -+ 306.2, whole channels inside.
        let width = without.channel_width(fs, n);
        let pass = without.pass_channels(n);
        assert_eq!(pass, 206..=818);
        assert!(428e6 - without.frequency(206.0, fs, n) <= 32e6);
        assert!(428e6 - without.frequency(205.0, fs, n) > 32e6);
        assert!(without.frequency(818.0, fs, n) - 428e6 <= 32e6 + width * 1e-9);
        assert_eq!(with.pass_channels(n), 0..=1023);
        assert_eq!(Band::Wideband.pass_channels(n), 0..=1023);
        assert_eq!(with.pass_band_hz(fs, n), with.edges_hz(fs, n));
        let (lo, hi) = without.pass_band_hz(fs, n);
        assert!(
            (lo - 396e6).abs() < 1e-3 && (hi - 460e6).abs() < 1e-3,
            "{lo} {hi}"
        );
    }

    #[test]
    fn bands_as_recorded() {
        assert_eq!(
            serde_json::to_value(Band::Wideband).unwrap(),
            serde_json::json!({"kind": "wideband"})
        );
        assert_eq!(
            serde_json::to_value(Band::Narrowband {
                mixer_word: 1 << 30,
                decimation: 16,
                ddc_taps: 192,
                pass_fraction: None,
            })
            .unwrap(),
            serde_json::json!({"kind": "narrowband", "mixer_word": 1 << 30, "decimation": 16,
                "ddc_taps": 192})
        );
    }
}

//! What the live page is sent once an interval: a [`Frame`] of counters, rates, the services'
//! state and the spectrum decimated to at most [`MAX_BINS`] points per polarisation, so that a
//! page costs the harness the same whatever the channel count.

use serde::Serialize;

use crate::content::{db, ChannelPower, Peak, Verdict};
use crate::record::WatchInterval;

/// Points per polarisation the page draws: a screen's width, not the band's channels.
pub const MAX_BINS: usize = 1024;

/// Weight of the newest interval in the averaged spectrum (an exponential average: about five
/// intervals remembered).
const AVERAGE_WEIGHT: f64 = 0.2;

/// One interval as the page shows it. `seq` is the interval's number in the watch feed: the
/// page shows it, and `GET /api/status?seq=N` answers the same frame, so what the page shows
/// can be checked against what the harness measured.
#[derive(Clone, Debug, Serialize)]
pub struct Frame {
    pub seq: u64,
    pub elapsed_s: f64,
    pub rate: Rates,
    pub counters: Counters,
    pub spectrum: Spectrum,
    pub verdict: Option<Verdict>,
    pub engine: ServiceState,
    /// The engine's latest input level per polarisation, in dB relative to a full-scale sine
    /// (null where it does not measure it: the null backend, an older engine).
    pub input_rms_dbfs: [Option<f64>; 2],
    pub dsim: DsimState,
    /// Whether the page may change dsim's tone and the engine's gain and delay.
    pub controls: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Rates {
    /// Received over the interval, ADC sample/s per polarisation.
    pub received: f64,
    /// dsim's requested rate (its `/status`), or the rate the harness was given.
    pub configured: Option<f64>,
    pub heaps_per_s: f64,
}

/// Counts since the watch began. The engine's are its own counters' growth since the page's
/// first look at them; None when the engine could not be read.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Counters {
    pub heaps: u64,
    pub gaps: u64,
    pub late: u64,
    pub duplicates: u64,
    pub malformed: u64,
    pub socket_drops: u64,
    pub engine_missing_input: Option<f64>,
    pub engine_skipped_output: Option<f64>,
    pub saturated: Option<f64>,
    /// The engine's input samples at full scale, per polarisation.
    pub full_scale_pol0: Option<u64>,
    pub full_scale_pol1: Option<u64>,
    /// Saturated samples the digitiser's status items reported to the engine, per polarisation.
    pub digitiser_clip_pol0: Option<u64>,
    pub digitiser_clip_pol1: Option<u64>,
    pub dsim_heaps_skipped: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Spectrum {
    pub channels: usize,
    /// Channels folded into each point (the largest of them is drawn, so a tone never hides).
    pub channels_per_bin: usize,
    /// dsim's ADC rate.
    pub adc_rate: Option<f64>,
    /// The output watched: its name where the engine has several (None: its only one) and its
    /// kind, "wideband", "narrowband" or "narrowband_no_discard", as the page's title says.
    pub output: Option<String>,
    pub kind: &'static str,
    /// The frequency axis, where the ADC rate is known: channel c is centred on
    /// `first_channel_hz + c channel_width_hz` (wideband 0 and fs/(2n); a narrowband output's
    /// band lies around its centre, so the page cannot assume wideband's k fs/(2n)).
    pub first_channel_hz: Option<f64>,
    pub channel_width_hz: Option<f64>,
    /// The tone's fractional channel, when known.
    pub expected_channel: Option<f64>,
    /// Per polarisation, the interval's power per point in dB (null: no data in the interval).
    pub latest: [Vec<Option<f32>>; 2],
    /// Per polarisation, the exponential average over intervals, in dB.
    pub average: [Vec<Option<f32>>; 2],
    pub peaks: [Option<PeakView>; 2],
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct PeakView {
    pub channel: usize,
    pub power_db: f64,
    pub contrast_db: f64,
}

impl From<&Peak> for PeakView {
    fn from(p: &Peak) -> Self {
        Self {
            channel: p.channel,
            power_db: round(p.power_db(), 2),
            contrast_db: round(p.contrast_db(), 2),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ServiceState {
    pub url: Option<String>,
    pub backend: Option<String>,
    /// Why the service could not be read this interval.
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct DsimState {
    pub url: Option<String>,
    /// "running", "finished" or "stopped".
    pub state: Option<String>,
    pub tone_hz: Option<f64>,
    pub tone_amplitude: Option<f64>,
    pub error: Option<String>,
}

/// The power per point of one polarisation: the largest channel mean of each bin, linear.
pub fn decimate(power: &ChannelPower, pol: usize, per_bin: usize) -> Vec<Option<f64>> {
    let per_bin = per_bin.max(1);
    (0..power.channels().div_ceil(per_bin))
        .map(|b| {
            let end = ((b + 1) * per_bin).min(power.channels());
            (b * per_bin..end)
                .filter_map(|c| power.mean(c, pol))
                .max_by(f64::total_cmp)
        })
        .collect()
}

/// Channels per point so that `channels` fit in [`MAX_BINS`].
pub fn channels_per_bin(channels: usize) -> usize {
    channels.div_ceil(MAX_BINS).max(1)
}

/// The running average of the decimated spectrum, per polarisation, in linear power.
#[derive(Default)]
pub struct Averager {
    average: [Vec<Option<f64>>; 2],
}

impl Averager {
    /// Folds in one interval; a point without data keeps its average. The shape changing (a
    /// restarted engine with other channels) starts the average again.
    pub fn add(&mut self, latest: &[Vec<Option<f64>>; 2]) {
        for (avg, new) in self.average.iter_mut().zip(latest) {
            if avg.len() != new.len() {
                *avg = new.clone();
                continue;
            }
            for (a, n) in avg.iter_mut().zip(new) {
                *a = match (*a, *n) {
                    (Some(a), Some(n)) => Some(a + AVERAGE_WEIGHT * (n - a)),
                    (None, n) => n,
                    (a, None) => a,
                };
            }
        }
    }

    pub fn get(&self) -> &[Vec<Option<f64>>; 2] {
        &self.average
    }
}

/// dB to 0.1 dB (what a screen shows), as f32 so the JSON stays short; zero power is null.
pub fn to_db(points: &[Option<f64>]) -> Vec<Option<f32>> {
    points
        .iter()
        .map(|p| {
            p.map(db)
                .filter(|d| d.is_finite())
                .map(|d| round(d, 1) as f32)
        })
        .collect()
}

fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

/// The counters the watch feed carries; the services' are filled in by the caller.
pub fn counters(r: &WatchInterval) -> Counters {
    Counters {
        heaps: r.sequence.received,
        gaps: r.sequence.gaps,
        late: r.sequence.late,
        duplicates: r.sequence.duplicates,
        malformed: r.malformed,
        socket_drops: r.socket_drops,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A band where channel `tone` of pol 0 has power `a` per value and every other channel 1.
    fn band(channels: usize, tone: usize, a: i8) -> ChannelPower {
        let mut p = ChannelPower::new(channels);
        let mut heap = Vec::new();
        for c in 0..channels {
            let v = if c == tone { a } else { 1 };
            heap.extend_from_slice(&[v as u8, 0, 1, 0]);
        }
        assert!(p.add_heap(&heap, 0, channels, crate::feng_raw::OutputBits::Eight));
        p
    }

    #[test]
    fn decimation_keeps_the_tone_in_its_bin() {
        let p = band(4096, 1000, 10);
        let per = channels_per_bin(4096);
        assert_eq!(per, 4);
        let d = decimate(&p, 0, per);
        assert_eq!(d.len(), 1024);
        assert_eq!(
            d[250],
            Some(100.0),
            "the tone's bin holds its power, not the mean"
        );
        assert!(d
            .iter()
            .enumerate()
            .all(|(i, v)| i == 250 || *v == Some(1.0)));
        // Pol 1 has no tone.
        assert!(decimate(&p, 1, per).iter().all(|v| *v == Some(1.0)));
    }

    #[test]
    fn a_band_that_does_not_divide_keeps_its_last_channels() {
        let p = band(1500, 1499, 3);
        let per = channels_per_bin(1500);
        assert_eq!(per, 2);
        let d = decimate(&p, 0, per);
        assert_eq!(d.len(), 750);
        assert_eq!(d[749], Some(9.0));
    }

    #[test]
    fn points_without_data_are_null_and_keep_their_average() {
        let p = ChannelPower::new(8);
        assert!(decimate(&p, 0, 1).iter().all(Option::is_none));
        let mut avg = Averager::default();
        avg.add(&[vec![Some(10.0), Some(10.0)], vec![None, None]]);
        avg.add(&[vec![Some(20.0), None], vec![Some(5.0), None]]);
        assert_eq!(avg.get()[0], vec![Some(12.0), Some(10.0)]);
        assert_eq!(avg.get()[1], vec![Some(5.0), None]);
        // A new shape starts again.
        avg.add(&[vec![Some(1.0)], vec![Some(1.0)]]);
        assert_eq!(avg.get()[0], vec![Some(1.0)]);
    }

    #[test]
    fn db_points_are_rounded_and_zero_is_null() {
        assert_eq!(
            to_db(&[Some(100.0), Some(0.0), None, Some(2.0)]),
            vec![Some(20.0), None, None, Some(3.0)]
        );
    }
}

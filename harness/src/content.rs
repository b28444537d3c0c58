//! What the heaps hold: per-channel power of the output, the strongest channel per
//! polarisation, and whether it is the channel of the tone dsim sends.
//!
//! A heap's `feng_raw` is `(channels_per_substream, spectra_per_heap, 2 pols)` complex values,
//! channel major, 8-bit (two int8 each) or 4-bit (one byte each) as the engine says
//! ([`feng_raw`](crate::feng_raw), docs/wire-formats.md). Reading every heap at 12 GB/s would cost
//! the harness the cores the engine needs, so the monitor samples heaps at a bounded rate per
//! substream.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::feng_raw::{unpack4, OutputBits};
use crate::receive::HeapSink;

/// Sum of |x|^2 per channel and polarisation, and the spectra summed, for a whole band.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelPower {
    power: Vec<[f64; 2]>,
    spectra: Vec<u64>,
}

impl ChannelPower {
    pub fn new(channels: usize) -> Self {
        Self {
            power: vec![[0.0; 2]; channels],
            spectra: vec![0; channels],
        }
    }

    pub fn channels(&self) -> usize {
        self.power.len()
    }

    /// Whether any spectrum of `channel` was added since the last clear.
    pub fn sampled(&self, channel: usize) -> bool {
        self.spectra.get(channel).is_some_and(|&n| n > 0)
    }

    pub fn clear(&mut self) {
        self.power.iter_mut().for_each(|p| *p = [0.0; 2]);
        self.spectra.iter_mut().for_each(|s| *s = 0);
    }

    /// Adds one heap's `feng_raw` of `n` channels from `first_channel`, in the output format
    /// `bits` (the spectra per heap follow from its length). Returns false (and adds nothing)
    /// when the payload is not a whole number of spectra of `n` channels, or runs past the band.
    pub fn add_heap(
        &mut self,
        data: &[u8],
        first_channel: usize,
        n: usize,
        bits: OutputBits,
    ) -> bool {
        let bytes = bits.spectrum_bytes();
        if n == 0 || data.is_empty() || !data.len().is_multiple_of(n * bytes) {
            return false;
        }
        let spectra = data.len() / (n * bytes);
        let per_channel = spectra * bytes;
        if first_channel + n > self.power.len() {
            return false;
        }
        for (c, block) in data.chunks_exact(per_channel).enumerate() {
            // Integer sums: exact, and faster than float per sample. 32-bit sums over 64 KiB
            // pieces (at most 2^15 squares of at most 2^14 per polarisation: below 2^32) let the
            // compiler vectorise the loop; the pieces add up in 64 bits.
            let mut acc = [0u64; 2];
            for piece in block.chunks(1 << 16) {
                let part = match bits {
                    OutputBits::Eight => power8(piece),
                    OutputBits::Four => power4(piece),
                };
                acc[0] += u64::from(part[0]);
                acc[1] += u64::from(part[1]);
            }
            let p = &mut self.power[first_channel + c];
            p[0] += acc[0] as f64;
            p[1] += acc[1] as f64;
            self.spectra[first_channel + c] += spectra as u64;
        }
        true
    }

    /// Mean power per spectrum of a channel and polarisation (None if nothing was summed).
    pub fn mean(&self, channel: usize, pol: usize) -> Option<f64> {
        let s = *self.spectra.get(channel)?;
        (s > 0).then(|| self.power[channel][pol] / s as f64)
    }

    /// Per polarisation: the strongest channel, its mean power, and the median channel power
    /// (of channels with data), to tell a tone from noise.
    pub fn strongest(&self) -> [Option<Peak>; 2] {
        [0, 1].map(|pol| {
            let mut means: Vec<(usize, f64)> = (0..self.power.len())
                .filter_map(|c| self.mean(c, pol).map(|m| (c, m)))
                .collect();
            let &(channel, power) = means
                .iter()
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
            let mid = means.len() / 2;
            means.select_nth_unstable_by(mid, |a, b| a.1.total_cmp(&b.1));
            Some(Peak {
                channel,
                power,
                median: means[mid].1,
            })
        })
    }
}

/// Per polarisation, the sum of |x|^2 over a piece of 8-bit values (4 bytes a spectrum).
fn power8(piece: &[u8]) -> [u32; 2] {
    let sq = |b: u8| {
        let x = b as i8 as i32;
        (x * x) as u32
    };
    let mut part = [0u32; 2];
    for v in piece.chunks_exact(4) {
        part[0] += sq(v[0]) + sq(v[1]);
        part[1] += sq(v[2]) + sq(v[3]);
    }
    part
}

/// Per polarisation, the sum of |x|^2 over a piece of 4-bit values (2 bytes a spectrum).
fn power4(piece: &[u8]) -> [u32; 2] {
    let sq = |b: u8| {
        let [re, im] = unpack4(b).map(i32::from);
        (re * re + im * im) as u32
    };
    let mut part = [0u32; 2];
    for v in piece.chunks_exact(2) {
        part[0] += sq(v[0]);
        part[1] += sq(v[1]);
    }
    part
}

/// The strongest channel of one polarisation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Peak {
    pub channel: usize,
    /// Mean |x|^2 per spectrum, in output counts squared.
    pub power: f64,
    /// Median over channels of the same.
    pub median: f64,
}

impl Peak {
    pub fn power_db(&self) -> f64 {
        db(self.power)
    }
    /// How far the peak stands above the median channel.
    pub fn contrast_db(&self) -> f64 {
        db(self.power) - db(self.median)
    }
}

pub fn db(power: f64) -> f64 {
    if power > 0.0 {
        10.0 * power.log10()
    } else {
        f64::NEG_INFINITY
    }
}

/// What the content check concluded for one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The strongest channel of both polarisations is the tone's.
    Match,
    /// A polarisation's strongest channel is elsewhere.
    WrongChannel,
    /// No channel stands out: no tone in the output (zeros, or noise only).
    NoTone,
    /// No data analysed in the interval.
    NoData,
}

/// A tone must stand this far above the median channel to count as seen.
pub const MIN_CONTRAST_DB: f64 = 10.0;

/// Checks both polarisations' peaks against the tone's fractional channel. A tone within 0.1
/// channel of a boundary between two channels may peak in either.
pub fn check(peaks: &[Option<Peak>; 2], expected: f64) -> Verdict {
    let mut verdict = Verdict::Match;
    for p in peaks {
        let Some(p) = p else { return Verdict::NoData };
        // NaN (no power anywhere) is no tone too.
        if p.contrast_db().is_nan() || p.contrast_db() < MIN_CONTRAST_DB {
            return Verdict::NoTone;
        }
        if (p.channel as f64 - expected).abs() > 0.6 {
            verdict = Verdict::WrongChannel;
        }
    }
    verdict
}

/// The tone's channel the content check expects. A live page that moves dsim's tone moves it
/// too, and the check rests a moment while the new tone makes its way to the output (an interval
/// of the old tone and the new says nothing).
#[derive(Clone, Debug, Default)]
pub struct Expected(Arc<Mutex<ExpectedState>>);

#[derive(Debug, Default)]
struct ExpectedState {
    channel: Option<f64>,
    resume_at: Option<Instant>,
}

impl Expected {
    pub fn new(channel: Option<f64>) -> Self {
        Self(Arc::new(Mutex::new(ExpectedState {
            channel,
            resume_at: None,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ExpectedState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel expected now, resting or not (None: content is not checked).
    pub fn channel(&self) -> Option<f64> {
        self.lock().channel
    }

    /// The channel to check this interval against: None while resting (or when not checked).
    pub fn checking(&self) -> Option<f64> {
        let s = self.lock();
        match s.resume_at {
            Some(t) if Instant::now() < t => None,
            _ => s.channel,
        }
    }

    /// The tone moved to `channel`: check against it after `rest`. A run that does not check
    /// content (the null backend) is left so.
    pub fn retune(&self, channel: f64, rest: Duration) {
        let mut s = self.lock();
        if s.channel.is_some() {
            s.channel = Some(channel);
            s.resume_at = Some(Instant::now() + rest);
        }
    }
}

/// Samples heaps (at most one per substream per `interval`) into a [`ChannelPower`] that the
/// progress loop takes once a second.
pub struct ContentMonitor {
    interval: Duration,
    per_substream: usize,
    bits: OutputBits,
    state: Mutex<MonitorState>,
}

struct MonitorState {
    acc: ChannelPower,
    last: Vec<Option<Instant>>,
    bad_shape: u64,
}

impl ContentMonitor {
    /// A monitor of `channels` over `substreams`, of output in the format `bits`.
    pub fn new(channels: usize, substreams: usize, interval: Duration, bits: OutputBits) -> Self {
        Self {
            interval,
            per_substream: channels / substreams.max(1),
            bits,
            state: Mutex::new(MonitorState {
                acc: ChannelPower::new(channels),
                last: vec![None; substreams],
                bad_shape: 0,
            }),
        }
    }

    /// Takes what was summed since the last call, and the count of heaps of the wrong shape.
    pub fn take(&self) -> (ChannelPower, u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut fresh = ChannelPower::new(s.acc.channels());
        std::mem::swap(&mut fresh, &mut s.acc);
        (fresh, std::mem::take(&mut s.bad_shape))
    }
}

impl HeapSink for ContentMonitor {
    fn heap(&self, substream: usize, first_channel: usize, _timestamp: u64, data: &[u8]) {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(last)) = s.last.get(substream) {
            if now.duration_since(*last) < self.interval {
                return;
            }
        }
        if let Some(slot) = s.last.get_mut(substream) {
            *slot = Some(now);
        }
        if !s
            .acc
            .add_heap(data, first_channel, self.per_substream, self.bits)
        {
            s.bad_shape += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EIGHT: OutputBits = OutputBits::Eight;
    const FOUR: OutputBits = OutputBits::Four;

    /// A heap of `ch` channels x `spectra` where channel `tone` holds (a, 0) in pol 0 and (0, b)
    /// in pol 1 and every other value is `noise`.
    fn heap(ch: usize, spectra: usize, tone: usize, a: i8, b: i8, noise: i8) -> Vec<u8> {
        let mut d = Vec::with_capacity(ch * spectra * 4);
        for c in 0..ch {
            for _ in 0..spectra {
                if c == tone {
                    d.extend_from_slice(&[a as u8, 0, 0, b as u8]);
                } else {
                    d.extend_from_slice(&[noise as u8; 4]);
                }
            }
        }
        d
    }

    #[test]
    fn the_expected_channel_rests_after_a_retune() {
        let e = Expected::new(Some(4.0));
        assert_eq!(e.checking(), Some(4.0));
        e.retune(9.0, Duration::from_secs(60));
        assert_eq!((e.channel(), e.checking()), (Some(9.0), None));
        e.retune(10.0, Duration::ZERO);
        assert_eq!(e.checking(), Some(10.0));
        let off = Expected::new(None);
        off.retune(3.0, Duration::ZERO);
        assert_eq!(
            off.checking(),
            None,
            "a run without a content check stays without"
        );
    }

    #[test]
    fn power_and_strongest_channel() {
        let mut acc = ChannelPower::new(16);
        assert!(!acc.sampled(11));
        assert!(acc.add_heap(&heap(8, 4, 3, -100, 50, 1), 8, 8, EIGHT));
        assert_eq!(acc.mean(11, 0), Some(10000.0));
        assert!(acc.sampled(11) && acc.sampled(8) && !acc.sampled(7) && !acc.sampled(99));
        assert_eq!(acc.mean(11, 1), Some(2500.0));
        assert_eq!(acc.mean(8, 0), Some(2.0));
        assert_eq!(acc.mean(0, 0), None);
        let [p0, p1] = acc.strongest();
        let (p0, p1) = (p0.unwrap(), p1.unwrap());
        assert_eq!((p0.channel, p0.power, p0.median), (11, 10000.0, 2.0));
        assert_eq!(p1.channel, 11);
        assert!((p0.power_db() - 40.0).abs() < 1e-9);
        assert_eq!(check(&[Some(p0), Some(p1)], 11.2), Verdict::Match);
        assert_eq!(check(&[Some(p0), Some(p1)], 13.0), Verdict::WrongChannel);
        assert_eq!(check(&[Some(p0), None], 11.0), Verdict::NoData);
    }

    #[test]
    fn long_blocks_of_full_scale_sum_exactly() {
        // 140000 spectra: a channel's sum of squares passes 2^32 (one 32-bit sum would wrap).
        let spectra = 140_000;
        let mut data = vec![0x80u8; 2 * spectra * 4]; // -128 everywhere
        data[3] = 1; // pol 1 imaginary of channel 0's first spectrum: 1 instead of -128
        let mut acc = ChannelPower::new(2);
        assert!(acc.add_heap(&data, 0, 2, EIGHT));
        let full = (spectra * 2 * 128 * 128) as f64;
        assert_eq!(acc.mean(0, 0), Some(full / spectra as f64));
        assert_eq!(
            acc.mean(0, 1),
            Some((full - 16384.0 + 1.0) / spectra as f64)
        );
        assert_eq!(acc.mean(1, 1), Some(full / spectra as f64));
    }

    #[test]
    fn flat_or_zero_output_is_no_tone() {
        let mut acc = ChannelPower::new(8);
        acc.add_heap(&[0u8; 8 * 2 * 4], 0, 8, EIGHT);
        let peaks = acc.strongest();
        assert_eq!(check(&peaks, 3.0), Verdict::NoTone);
    }

    #[test]
    fn bad_shapes_are_refused() {
        let mut acc = ChannelPower::new(8);
        assert!(!acc.add_heap(&[0u8; 7], 0, 2, EIGHT));
        assert!(!acc.add_heap(&[0u8; 8 * 2 * 4], 1, 8, EIGHT));
        assert!(!acc.add_heap(&[0u8; 8], 0, 0, EIGHT));
        assert!(!acc.add_heap(&[], 0, 8, EIGHT));
        // 4-bit: 2 bytes per channel and spectrum.
        assert!(!acc.add_heap(&[0u8; 8 * 3], 0, 8, FOUR));
        assert!(!acc.add_heap(&[0u8; 8 * 2 * 2], 1, 8, FOUR));
        assert!(
            !acc.add_heap(&[0u8; 6], 0, 3, EIGHT),
            "one 4-bit spectrum of 3 channels is no whole 8-bit one"
        );
        assert!(acc.add_heap(&[0u8; 6], 0, 3, FOUR));
    }

    /// [`heap`] in 4-bit output: channel `tone` holds (a, 0) in pol 0 and (0, b) in pol 1, every
    /// other value is (noise, noise); nibbles packed by hand, real part high.
    fn heap4(ch: usize, spectra: usize, tone: usize, a: i8, b: i8, noise: i8) -> Vec<u8> {
        let nib = |v: i8| (v as u8) & 0x0f;
        let mut d = Vec::with_capacity(ch * spectra * 2);
        for c in 0..ch {
            for _ in 0..spectra {
                if c == tone {
                    d.extend_from_slice(&[nib(a) << 4, nib(b)]);
                } else {
                    d.extend_from_slice(&[nib(noise) << 4 | nib(noise); 2]);
                }
            }
        }
        d
    }

    #[test]
    fn power_and_strongest_channel_of_4_bit_output() {
        let mut acc = ChannelPower::new(16);
        assert!(acc.add_heap(&heap4(8, 4, 3, -7, 5, 1), 8, 8, FOUR));
        assert_eq!(acc.mean(11, 0), Some(49.0));
        assert_eq!(acc.mean(11, 1), Some(25.0));
        assert_eq!(acc.mean(8, 0), Some(2.0));
        assert_eq!(acc.mean(8, 1), Some(2.0));
        assert!(acc.sampled(8) && acc.sampled(15) && !acc.sampled(7));
        let [p0, p1] = acc.strongest();
        let (p0, p1) = (p0.unwrap(), p1.unwrap());
        assert_eq!((p0.channel, p0.power, p0.median), (11, 49.0, 2.0));
        assert_eq!((p1.channel, p1.power), (11, 25.0));
        assert_eq!(check(&[Some(p0), Some(p1)], 11.0), Verdict::Match);
        // Negative noise, sign-extended: (-3, -3) is power 18, not (13, 13)'s 338.
        let mut acc = ChannelPower::new(8);
        assert!(acc.add_heap(&heap4(8, 2, 0, 7, 7, -3), 0, 8, FOUR));
        assert_eq!(acc.mean(5, 0), Some(18.0));
        assert_eq!(acc.mean(0, 1), Some(49.0));
    }

    #[test]
    fn every_4_bit_value_adds_its_own_power() {
        // One channel, a spectrum per byte value of pol 0 (pol 1 zero): the sum over all 256
        // codes is 16 * 2 * (sum of v^2 over -8..7) = 32 * 344.
        let mut data = Vec::new();
        for b in 0..=255u8 {
            data.extend_from_slice(&[b, 0]);
        }
        let mut acc = ChannelPower::new(1);
        assert!(acc.add_heap(&data, 0, 1, FOUR));
        assert_eq!(acc.mean(0, 0), Some(32.0 * 344.0 / 256.0));
        assert_eq!(acc.mean(0, 1), Some(0.0));
    }

    #[test]
    fn long_blocks_of_4_bit_full_scale_sum_exactly() {
        // 300000 spectra of (-8, -8): several 64 KiB pieces per channel.
        let spectra = 300_000;
        let mut data = vec![0x88u8; 2 * spectra * 2];
        data[1] = 0x10; // pol 1 of channel 0's first spectrum: (1, 0)
        let mut acc = ChannelPower::new(2);
        assert!(acc.add_heap(&data, 0, 2, FOUR));
        let full = (spectra * 128) as f64;
        assert_eq!(acc.mean(0, 0), Some(full / spectra as f64));
        assert_eq!(acc.mean(0, 1), Some((full - 128.0 + 1.0) / spectra as f64));
        assert_eq!(acc.mean(1, 1), Some(128.0));
    }

    #[test]
    fn a_4_bit_monitor_finds_the_tone() {
        let m = ContentMonitor::new(16, 2, Duration::ZERO, FOUR);
        m.heap(0, 0, 0, &heap4(8, 4, 2, 6, 6, 0));
        m.heap(1, 8, 0, &heap4(8, 4, 2, 1, 1, 1));
        let (acc, bad) = m.take();
        assert_eq!(bad, 0);
        assert_eq!(acc.mean(2, 0), Some(36.0));
        assert_eq!(acc.mean(10, 1), Some(1.0));
        assert_eq!(acc.mean(11, 0), Some(2.0));
        assert_eq!(acc.strongest()[1].map(|p| p.channel), Some(2));
        // An 8-bit heap of the same spectra is twice as long: 4-bit of 8 spectra, still a whole
        // number; one of an odd length is of the wrong shape.
        m.heap(0, 0, 1, &heap(8, 4, 2, 6, 6, 0));
        m.heap(1, 8, 1, &[0u8; 8 * 2 * 3 + 1]);
        assert_eq!(m.take().1, 1);
    }

    #[test]
    fn monitor_samples_per_substream() {
        let m = ContentMonitor::new(16, 2, Duration::from_secs(3600), EIGHT);
        let h = heap(8, 4, 2, 100, 100, 0);
        m.heap(0, 0, 0, &h);
        // Within the interval: skipped.
        m.heap(0, 0, 1, &heap(8, 4, 5, 127, 127, 0));
        m.heap(1, 8, 0, &h);
        let (acc, bad) = m.take();
        assert_eq!(bad, 0);
        assert_eq!(acc.mean(2, 0), Some(10000.0));
        assert_eq!(acc.mean(5, 0), Some(0.0));
        assert_eq!(acc.mean(10, 1), Some(10000.0));
        // Taken: empty again.
        assert_eq!(m.take().0.mean(2, 0), None);
    }
}

//! The suite's view of the engine's output: per channel and polarisation the power, and per
//! channel the cross-power of the polarisations, summed over spectra whose timestamps fall in a
//! window; optionally a trace, one entry per spectrum. Each substream keeps its own sums (its
//! own lock), heap by heap, so the receive threads never wait on each other; the band is
//! assembled from the heaps every substream delivered, so that every channel sums the same
//! spectra (a heap lost in one substream alone is left out of the others too: summed, it would
//! give that substream's channels another mean time, and under a delay or phase rate another
//! phase, than the rest of the band). The values are read in the engine's output format, 8-bit
//! or 4-bit ([`crate::feng_raw`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use num_complex::Complex64;

use crate::feng_raw::OutputBits;
use crate::receive::HeapSink;

/// Sums over the spectra of a window, for the whole band.
#[derive(Clone, Debug, Default)]
pub struct Integration {
    /// Sum of |x_p|^2 per channel, p = 0, 1.
    pub power: [Vec<f64>; 2],
    /// Sum of x1 conj(x0) per channel: its phase is pol1's phase minus pol0's.
    pub cross: Vec<Complex64>,
    /// Spectra summed, the same in every channel: those every substream delivered.
    pub spectra: u64,
    /// Spectra summed per channel (all equal to `spectra`).
    pub counts: Vec<u64>,
    /// Spectra of the window some substream delivered but not every one, left out of the sums
    /// (per substream: a heap lost in one substream leaves out its spectra in the others).
    pub left_out: u64,
    /// Values with a component at the clamp (+-127 for 8-bit output, +-7 for 4-bit), per
    /// polarisation.
    pub saturated: [u64; 2],
    /// Values seen per polarisation (channels x spectra over every substream).
    pub values: u64,
    /// The mean timestamp of the spectra summed (None if none): where a heap went missing, not
    /// the window's middle.
    pub mean_timestamp: Option<f64>,
}

impl Integration {
    fn count(&self, channel: usize) -> f64 {
        self.counts
            .get(channel)
            .copied()
            .unwrap_or(self.spectra)
            .max(1) as f64
    }
    /// Mean power of a channel in polarisation p.
    pub fn mean_power(&self, pol: usize, channel: usize) -> f64 {
        self.power[pol][channel] / self.count(channel)
    }
    /// Mean power per channel of polarisation p.
    pub fn mean_spectrum(&self, pol: usize) -> Vec<f64> {
        (0..self.power[pol].len())
            .map(|c| self.mean_power(pol, c))
            .collect()
    }
    /// The magnitude of each channel's mean cross-power.
    pub fn mean_cross_power(&self) -> Vec<f64> {
        self.cross
            .iter()
            .enumerate()
            .map(|(c, x)| x.norm() / self.count(c))
            .collect()
    }
}

/// Per spectrum: the weighted cross sum over every channel, and each polarisation's value of
/// one probe channel.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TracePoint {
    /// Sum over channels of weight_c x1 conj(x0).
    pub cross: Complex64,
    /// The probe channel's value per polarisation.
    pub probe: [Complex64; 2],
    /// Substreams that contributed (complete when equal to their number).
    pub parts: usize,
}

/// What a trace records: the window, the channel weights and the probe channel.
#[derive(Clone, Debug)]
struct TraceSpec {
    weights: Vec<Complex64>,
    probe: usize,
}

/// One substream's sums over the window's spectra of one heap.
#[derive(Debug)]
struct HeapSums {
    power: [Vec<f64>; 2],
    cross: Vec<Complex64>,
    spectra: u64,
    /// Sum over the spectra summed of (timestamp - from).
    since_from: u128,
    saturated: [u64; 2],
    values: u64,
}

#[derive(Debug, Default)]
struct Part {
    armed: bool,
    from: u64,
    to: u64,
    /// By the heap's timestamp.
    heaps: BTreeMap<u64, HeapSums>,
    trace: Option<TraceSpec>,
    points: BTreeMap<u64, TracePoint>,
}

impl Part {
    fn spectra(&self) -> u64 {
        self.heaps.values().map(|h| h.spectra).sum()
    }
}

/// A [`HeapSink`] that integrates the whole band, substream by substream.
pub struct Spectra {
    channels: usize,
    /// ADC samples between spectra: 2n, or 2nD for a narrowband output.
    step: u64,
    per_substream: usize,
    bits: OutputBits,
    parts: Vec<Mutex<Part>>,
}

/// Spectra a trace may hold (bounded memory whatever the window).
pub const MAX_TRACE: usize = 1 << 16;

impl Spectra {
    /// Sums for `channels` over `substreams`, of output in the format `bits`.
    pub fn new(channels: usize, substreams: usize, bits: OutputBits) -> Self {
        let substreams = substreams.max(1);
        Self {
            channels,
            step: 2 * channels as u64,
            per_substream: channels / substreams,
            bits,
            parts: (0..substreams)
                .map(|_| Mutex::new(Part::default()))
                .collect(),
        }
    }

    /// For an output whose PFB reads every `decimation`-th ADC sample (a narrowband output's D):
    /// its spectra are 2nD samples apart.
    pub fn with_decimation(mut self, decimation: usize) -> Self {
        self.step = 2 * (self.channels * decimation.max(1)) as u64;
        self
    }

    fn lock(&self, i: usize) -> std::sync::MutexGuard<'_, Part> {
        self.parts[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts fresh sums over spectra with timestamps in `[from, to)`.
    pub fn arm(&self, from: u64, to: u64) {
        self.arm_with(from, to, None);
    }

    /// As [`arm`](Self::arm), and records a trace point per spectrum: the cross sum weighted by
    /// `weights` (one per channel) and the values of channel `probe`.
    pub fn arm_trace(&self, from: u64, to: u64, weights: Vec<Complex64>, probe: usize) {
        self.arm_with(from, to, Some(TraceSpec { weights, probe }));
    }

    fn arm_with(&self, from: u64, to: u64, trace: Option<TraceSpec>) {
        for i in 0..self.parts.len() {
            let mut p = self.lock(i);
            *p = Part {
                armed: true,
                from,
                to,
                trace: trace.clone(),
                ..Part::default()
            };
        }
    }

    /// The heaps every substream has summed so far (their timestamps), and each substream's
    /// count of spectra summed.
    fn common(&self) -> (Vec<u64>, Vec<u64>) {
        let mut common: Option<Vec<u64>> = None;
        let mut spectra = Vec::with_capacity(self.parts.len());
        for i in 0..self.parts.len() {
            let p = self.lock(i);
            spectra.push(p.spectra());
            common = Some(match common {
                None => p.heaps.keys().copied().collect(),
                Some(c) => c.into_iter().filter(|t| p.heaps.contains_key(t)).collect(),
            });
        }
        (common.unwrap_or_default(), spectra)
    }

    /// Spectra summed so far that every substream delivered.
    pub fn spectra(&self) -> u64 {
        let (common, _) = self.common();
        let p = self.lock(0);
        common
            .iter()
            .filter_map(|t| p.heaps.get(t))
            .map(|h| h.spectra)
            .sum()
    }

    /// Stops summing and returns the sums of the whole band over the heaps every substream
    /// delivered.
    pub fn take(&self) -> Integration {
        let n = self.per_substream;
        let mut out = Integration {
            power: [vec![0.0; self.channels], vec![0.0; self.channels]],
            cross: vec![Complex64::default(); self.channels],
            counts: vec![0; self.channels],
            ..Integration::default()
        };
        let (common, each) = self.common();
        let (mut since_from, mut from) = (0u128, 0u64);
        for (i, delivered) in each.into_iter().enumerate() {
            let mut p = self.lock(i);
            p.armed = false;
            from = p.from;
            let c0 = i * n;
            let mut spectra = 0;
            for h in common.iter().filter_map(|t| p.heaps.get(t)) {
                for pol in 0..2 {
                    let sum = &mut out.power[pol][c0..c0 + n];
                    sum.iter_mut().zip(&h.power[pol]).for_each(|(s, x)| *s += x);
                    out.saturated[pol] += h.saturated[pol];
                }
                let sum = &mut out.cross[c0..c0 + n];
                sum.iter_mut().zip(&h.cross).for_each(|(s, x)| *s += x);
                out.values += h.values;
                spectra += h.spectra;
                if i == 0 {
                    since_from += h.since_from;
                }
            }
            out.counts[c0..c0 + n].fill(spectra);
            out.spectra = spectra;
            out.left_out += delivered - spectra;
        }
        if out.spectra > 0 {
            out.mean_timestamp = Some(from as f64 + since_from as f64 / out.spectra as f64);
        }
        out
    }

    /// Stops and returns the trace: per spectrum timestamp, the sums over every substream.
    pub fn take_trace(&self) -> BTreeMap<u64, TracePoint> {
        let mut out: BTreeMap<u64, TracePoint> = BTreeMap::new();
        for i in 0..self.parts.len() {
            let mut p = self.lock(i);
            p.armed = false;
            for (&t, q) in &p.points {
                let e = out.entry(t).or_default();
                e.cross += q.cross;
                e.probe[0] += q.probe[0];
                e.probe[1] += q.probe[1];
                e.parts += q.parts;
            }
        }
        out
    }
}

impl HeapSink for Spectra {
    fn heap(&self, substream: usize, first_channel: usize, timestamp: u64, data: &[u8]) {
        let n = self.per_substream;
        if substream >= self.parts.len() || n == 0 {
            return;
        }
        // (channels, spectra, 2 pols) complex values of `bytes` a spectrum's two.
        let bits = self.bits;
        let bytes = bits.spectrum_bytes();
        let spectra = data.len() / (n * bytes);
        if spectra == 0 || data.len() != n * spectra * bytes {
            return;
        }
        let step = self.step;
        let mut p = self.lock(substream);
        let (from, to) = (p.from, p.to);
        let in_window = |s: usize| {
            let t = timestamp + s as u64 * step;
            t >= from && t < to
        };
        if !p.armed || !(0..spectra).any(in_window) {
            return;
        }
        let complex = |v: [i32; 2]| Complex64::new(f64::from(v[0]), f64::from(v[1]));
        let part = &mut *p;
        let sums = part.heaps.entry(timestamp).or_insert_with(|| HeapSums {
            power: [vec![0.0; n], vec![0.0; n]],
            cross: vec![Complex64::default(); n],
            spectra: 0,
            since_from: 0,
            saturated: [0; 2],
            values: 0,
        });
        let mut counted = 0u64;
        for c in 0..n {
            let block = &data[c * spectra * bytes..(c + 1) * spectra * bytes];
            for (s, x) in block.chunks_exact(bytes).enumerate() {
                if !in_window(s) {
                    continue;
                }
                let [v0, v1] = bits.decode(x);
                let (x0, x1) = (complex(v0), complex(v1));
                sums.power[0][c] += x0.norm_sqr();
                sums.power[1][c] += x1.norm_sqr();
                let cross = x1 * x0.conj();
                sums.cross[c] += cross;
                sums.saturated[0] += u64::from(bits.at_limit(v0));
                sums.saturated[1] += u64::from(bits.at_limit(v1));
                counted += 1;
                if let Some(spec) = &part.trace {
                    let t = timestamp + s as u64 * step;
                    if part.points.len() >= MAX_TRACE && !part.points.contains_key(&t) {
                        continue;
                    }
                    let channel = first_channel + c;
                    let e = part.points.entry(t).or_default();
                    if c == 0 {
                        e.parts += 1;
                    }
                    if let Some(w) = spec.weights.get(channel) {
                        e.cross += w * cross;
                    }
                    if channel == spec.probe {
                        e.probe = [x0, x1];
                    }
                }
            }
        }
        sums.values += counted;
        for s in (0..spectra).filter(|&s| in_window(s)) {
            sums.spectra += 1;
            sums.since_from += u128::from(timestamp + s as u64 * step - from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heap of `n` channels x `s` spectra where channel c, spectrum j has pol0 = (c, j) and
    /// pol1 = (j, -c).
    fn heap(n: usize, s: usize) -> Vec<u8> {
        let mut d = Vec::new();
        for c in 0..n {
            for j in 0..s {
                d.extend([
                    c as i8 as u8,
                    j as i8 as u8,
                    j as i8 as u8,
                    (-(c as i8)) as u8,
                ]);
            }
        }
        d
    }

    #[test]
    fn sums_the_window_only_and_assembles_the_band() {
        let sp = Spectra::new(8, 2, OutputBits::Eight);
        // Spectra every 16 samples; heaps of 4 spectra.
        sp.arm(32, 96);
        sp.heap(0, 0, 0, &heap(4, 4)); // spectra at 0, 16, 32, 48: two in the window
        sp.heap(1, 4, 0, &heap(4, 4));
        sp.heap(0, 0, 64, &heap(4, 4)); // 64, 80 in; 96, 112 out
        sp.heap(1, 4, 64, &heap(4, 4));
        let i = sp.take();
        assert_eq!(i.spectra, 4);
        assert_eq!(i.values, 32);
        assert_eq!(i.counts, vec![4; 8]);
        // Channel 3 (first substream) and 7 (second, its local channel 3) see pol0 = (3, j) for
        // j in {2, 3, 0, 1}: power 4 * 9 + 4 + 9 + 0 + 1.
        assert_eq!(i.power[0][3], 36.0 + 14.0);
        assert_eq!(i.power[0][7], 36.0 + 14.0);
        // cross = x1 conj(x0) = (j - 3i)(3 - ji) = 3j - j^2 i - 9i - 3j = -(j^2 + 9) i.
        assert_eq!(i.cross[3], Complex64::new(0.0, -(14.0 + 36.0)));
        assert_eq!(i.mean_timestamp, Some(56.0));
        // Nothing is added once taken.
        sp.heap(0, 0, 32, &heap(4, 4));
        assert_eq!(sp.take().spectra, 4);
    }

    /// A heap lost in one substream is left out of every substream: each channel sums the same
    /// spectra, and the mean timestamp is theirs.
    #[test]
    fn a_heap_lost_in_one_substream_is_left_out_of_all() {
        let sp = Spectra::new(8, 2, OutputBits::Eight);
        sp.arm(32, 96);
        assert_eq!(sp.take().mean_timestamp, None);
        sp.arm(32, 96);
        for t in [0, 64] {
            sp.heap(0, 0, t, &heap(4, 4));
        }
        sp.heap(1, 4, 0, &heap(4, 4)); // the second substream's heap at 64 is lost
        assert_eq!(sp.spectra(), 2);
        let i = sp.take();
        assert_eq!((i.spectra, i.left_out), (2, 2));
        assert_eq!(i.counts, vec![2; 8]);
        // Spectra 32 and 48 (j = 2, 3) in both substreams: channel 3 and 7 alike.
        assert_eq!(i.power[0][3], 2.0 * 9.0 + 4.0 + 9.0);
        assert_eq!(i.power[0][7], i.power[0][3]);
        assert_eq!(i.values, 16);
        assert_eq!(i.mean_timestamp, Some(40.0));
    }

    /// Heaps lost in different substreams: the band is the sum over the heaps all delivered,
    /// exactly as if only those had been sent.
    #[test]
    fn the_band_sums_the_heaps_every_substream_delivered() {
        let (lossy, clean) = (
            Spectra::new(8, 2, OutputBits::Eight),
            Spectra::new(8, 2, OutputBits::Eight),
        );
        lossy.arm(0, 256);
        clean.arm(0, 256);
        // Heaps of 4 spectra, 16 samples apart, at 0, 64, 128 and 192; the first substream
        // loses the heap at 64, the second the one at 192.
        for t in [0, 64, 128, 192] {
            let d: Vec<u8> = heap(4, 4)
                .iter()
                .map(|&v| v.wrapping_add(t as u8))
                .collect();
            if t != 64 {
                lossy.heap(0, 0, t, &d);
            }
            if t != 192 {
                lossy.heap(1, 4, t, &d);
            }
            if t == 0 || t == 128 {
                clean.heap(0, 0, t, &d);
                clean.heap(1, 4, t, &d);
            }
        }
        let (a, b) = (lossy.take(), clean.take());
        assert_eq!((a.spectra, a.left_out), (8, 8));
        assert_eq!((a.power, a.cross, a.counts), (b.power, b.cross, b.counts));
        assert_eq!(a.mean_timestamp, b.mean_timestamp);
        assert_eq!(a.mean_timestamp, Some(88.0));
    }

    /// A narrowband output's spectra are 2nD samples apart: a heap's spectra are timed so.
    #[test]
    fn a_decimated_output_steps_2nd() {
        let sp = Spectra::new(8, 2, OutputBits::Eight).with_decimation(8);
        // Heaps of 4 spectra at 0 and 512 (4 x 128): the window [128, 640) holds spectra
        // 128, 256, 384 and 512 of each substream.
        sp.arm(128, 640);
        for (sub, first) in [(0, 0), (1, 4)] {
            for t in [0, 512] {
                sp.heap(sub, first, t, &heap(4, 4));
            }
        }
        let i = sp.take();
        assert_eq!(i.spectra, 4);
        assert_eq!(i.mean_timestamp, Some(320.0));
    }

    #[test]
    fn counts_clamped_values_and_traces_each_spectrum() {
        let sp = Spectra::new(2, 1, OutputBits::Eight);
        let w = vec![Complex64::new(1.0, 0.0), Complex64::new(0.0, 1.0)];
        sp.arm_trace(0, 100, w, 1);
        let mut d = heap(2, 2);
        d[0] = 127; // channel 0, spectrum 0, pol0 re
        sp.heap(0, 0, 0, &d);
        let i = sp.take();
        assert_eq!(i.saturated, [1, 0]);
        let t = sp.take_trace();
        assert_eq!(t.len(), 2);
        // Spectrum at 4 (j = 1): channel 0 cross (1)(0 - i*1)... x0 = (0, 1), x1 = (1, 0):
        // x1 conj(x0) = -i; channel 1: x0 = (1, 1), x1 = (1, -1): (1 - i)(1 - i) = -2i,
        // weighted by i: 2. Sum: 2 - i.
        assert_eq!(t[&4].cross, Complex64::new(2.0, -1.0));
        assert_eq!(
            t[&4].probe,
            [Complex64::new(1.0, 1.0), Complex64::new(1.0, -1.0)]
        );
        assert_eq!(t[&4].parts, 1);
    }

    /// [`heap`] in 4-bit output, the values wrapped into -8..7 (c and j below 8 here).
    fn heap4(n: usize, s: usize) -> Vec<u8> {
        heap(n, s)
            .chunks_exact(2)
            .map(|v| (v[0] << 4) | (v[1] & 0x0f))
            .collect()
    }

    #[test]
    fn four_bit_output_sums_as_its_8_bit_twin() {
        let (eight, four) = (
            Spectra::new(8, 2, OutputBits::Eight),
            Spectra::new(8, 2, OutputBits::Four),
        );
        for sp in [&eight, &four] {
            sp.arm(32, 96);
        }
        for (sub, c0) in [(0, 0), (1, 4)] {
            for t in [0, 64] {
                eight.heap(sub, c0, t, &heap(4, 4));
                four.heap(sub, c0, t, &heap4(4, 4));
            }
        }
        let (a, b) = (eight.take(), four.take());
        assert_eq!((b.spectra, b.values), (4, 32));
        assert_eq!(a.power, b.power);
        assert_eq!(a.cross, b.cross);
        // pol1's imaginary part is -c: channel 3's, -3, sign-extended.
        assert_eq!(b.cross[3], Complex64::new(0.0, -(14.0 + 36.0)));
        assert_eq!(b.saturated, [0, 0]);
    }

    #[test]
    fn four_bit_values_at_7_are_clamped() {
        let sp = Spectra::new(2, 1, OutputBits::Four);
        sp.arm(0, 100);
        let mut d = heap4(2, 2);
        d[0] = 0x70; // channel 0, spectrum 0, pol0 (7, 0)
        d[3] = 0x09; // channel 0, spectrum 1, pol1 (0, -7)
        d[5] = 0x16; // channel 1, spectrum 0, pol1 (1, 6): not clamped
        sp.heap(0, 0, 0, &d);
        let i = sp.take();
        assert_eq!(i.saturated, [1, 1]);
        assert_eq!(i.power[0][0], 49.0 + 1.0);
    }

    #[test]
    fn negative_clamps_count_too() {
        let sp = Spectra::new(2, 1, OutputBits::Eight);
        sp.arm(0, 100);
        let mut d = heap(2, 2);
        d[1] = (-127i8) as u8; // channel 0, spectrum 0, pol0 imaginary
        sp.heap(0, 0, 0, &d);
        assert_eq!(sp.take().saturated, [1, 0]);
    }

    #[test]
    fn ignores_heaps_of_the_wrong_shape() {
        let sp = Spectra::new(8, 2, OutputBits::Eight);
        sp.arm(0, u64::MAX);
        sp.heap(0, 0, 0, &[0u8; 15]);
        sp.heap(5, 0, 0, &heap(4, 1));
        assert_eq!(sp.take().spectra, 0);
        let sp = Spectra::new(8, 2, OutputBits::Four);
        sp.arm(0, u64::MAX);
        sp.heap(0, 0, 0, &[0u8; 7]);
        assert_eq!(sp.take().spectra, 0);
    }
}

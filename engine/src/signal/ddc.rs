//! The narrowband output's digital down-converter (docs/signal-path.md §Narrowband): mix the real
//! input down by the centre frequency, low-pass filter and keep every D-th sample, in one step.
//!
//! - **Mixer.** The centre is quantised to a 32-bit phase increment F (turns per sample in units of
//!   2^-32), and the mixer's phase at absolute ADC sample t is exactly `(t F mod 2^32) / 2^32`
//!   turns: a wrapping integer multiply, so every backend (float64 here, float32 on a GPU) starts
//!   from the same phase however large t is, with no accumulator to drift or to carry between
//!   frames. The centre actually used is F fs / 2^32.
//! - **Filter.** `y[j] = sum_{k<L} h[k] x[jD + k] exp(-2 pi i phase(jD + k))`, computed only for the
//!   kept samples. Of the fs/D band left after subsampling only the centre fs/(2D) is kept (the
//!   PFB discards the outer half of its bins), so h must pass |f| <= fs/(4D) and stop what
//!   aliases onto it, |f - k fs/D| < fs/(4D) for k != 0, i.e. from 3 fs/(4D) on; the transition
//!   between them folds into discarded bins. h is a Kaiser-windowed sinc with its cutoff at
//!   fs/(2D), the middle of that transition, and unit DC gain (see [`ddc_filter`]).
//!
//! Timestamps are absolute ADC sample indices (u64, wrapping): subsampled sample j is the one whose
//! filter starts at ADC sample jD, so the subsampled grid is the same for every antenna and every
//! frame, and a delay can move a spectrum's window along it in whole subsampled samples.

use num_complex::Complex64;

use super::{bail, weights::sinc, Result};

/// The decimations the narrowband output supports (katgpucbf's narrowband modes).
pub const DECIMATIONS: [usize; 3] = [8, 16, 32];

/// The default DDC length in multiples of the decimation: L = 12 D (96, 192 or 384 taps). Kaiser's
/// formula gives about 93 dB of stopband attenuation for this length over the transition of
/// fs/(2D); measured over every alias band, the worst is 92.7 dB (D = 8) to 93.6 dB (D = 32)
/// (`narrowband::tests::anti_alias_rejection`), 30 dB beyond the 60 dB the output needs, with a
/// passband ripple of 0.0004 dB, while it costs 12 real-by-complex multiply-adds per input sample.
/// 10 D would still give about 79 dB, 8 D only about 65 dB: too little margin. A multiple of D,
/// so that in a polyphase implementation each input sample feeds exactly L/D outputs.
pub const DEFAULT_TAPS_PER_DECIMATION: usize = 12;

/// The most DDC taps accepted.
pub const MAX_DDC_TAPS: usize = 4096;

/// `2^32` as a float, the mixer's phase unit.
const TWO_POW_32: f64 = 4_294_967_296.0;

/// Checks a decimation, with a sentence saying what is wrong.
pub fn check_decimation(decimation: usize) -> Result<()> {
    if !DECIMATIONS.contains(&decimation) {
        bail!("the narrowband decimation must be 8, 16 or 32, not {decimation}");
    }
    Ok(())
}

/// The default DDC length for `decimation`: [`DEFAULT_TAPS_PER_DECIMATION`] times it.
pub fn default_ddc_taps(decimation: usize) -> usize {
    DEFAULT_TAPS_PER_DECIMATION * decimation
}

/// The mixer's phase increment F = round(centre / fs 2^32) for a centre frequency `centre_hz` at
/// sample rate `fs` (Hz), checked: the kept band, `fs/(2D)` wide around the quantised centre,
/// must lie inside 0 .. fs/2.
pub fn mixer_word(centre_hz: f64, fs: f64, decimation: usize) -> Result<u32> {
    check_decimation(decimation)?;
    if !(fs.is_finite() && fs > 0.0) {
        bail!("the sample rate must be a positive number of Hz, not {fs}");
    }
    if !centre_hz.is_finite() {
        bail!("the narrowband centre must be a number of Hz, not {centre_hz}");
    }
    let word = (centre_hz / fs * TWO_POW_32).round();
    if !(0.0..TWO_POW_32).contains(&word) {
        bail!(
            "the narrowband centre {centre_hz} Hz lies outside 0 .. {} Hz (fs/2), its band of {} Hz would not fit",
            fs / 2.0,
            fs / (2.0 * decimation as f64)
        );
    }
    let word = word as u32;
    check_mixer_word(word, decimation).map_err(|_| {
        let half = fs / (4.0 * decimation as f64);
        super::SignalError(format!(
            "a narrowband centre of {centre_hz} Hz (quantised to {} Hz) with decimation {decimation} \
             puts its band of {} Hz outside 0 .. {} Hz: the centre must lie from {half} Hz to {} Hz",
            centre_frequency(word, fs),
            2.0 * half,
            fs / 2.0,
            fs / 2.0 - half,
        ))
    })?;
    Ok(word)
}

/// Checks that the band of a mixer word, `1/(2D)` of fs wide around `F / 2^32`, lies within 0 ..
/// fs/2: `F >= 2^30 / D` and `F <= 2^31 - 2^30 / D` (exact integers for D a power of two).
pub fn check_mixer_word(word: u32, decimation: usize) -> Result<()> {
    check_decimation(decimation)?;
    let half = (1u64 << 30) / decimation as u64;
    if (word as u64) < half || word as u64 > (1u64 << 31) - half {
        bail!(
            "a mixer word of {word} (centre {} of fs) with decimation {decimation} puts the band outside 0 .. fs/2: it must lie from {half} to {}",
            word as f64 / TWO_POW_32,
            (1u64 << 31) - half
        );
    }
    Ok(())
}

/// The centre actually used, `F fs / 2^32` Hz.
pub fn centre_frequency(word: u32, fs: f64) -> f64 {
    word as f64 * fs / TWO_POW_32
}

/// The mixer's phase at absolute ADC sample `t`, in units of 2^-32 turns: `(t F) mod 2^32`. Exact
/// for every t (a wrapping multiply keeps the low 32 bits, the only ones that matter); a sample
/// index before the stream's start, wrapped to u64, gives the phase of its negative value.
#[inline]
pub fn mixer_phase(t: u64, word: u32) -> u32 {
    t.wrapping_mul(word as u64) as u32
}

/// A phase in units of 2^-32 turns as radians in [0, 2 pi).
#[inline]
pub fn phase_radians(phase: u32) -> f64 {
    std::f64::consts::TAU * (phase as f64 / TWO_POW_32)
}

/// The mixer's value at absolute sample `t`: `exp(-2 pi i phase(t))`.
#[inline]
pub fn mixer(t: u64, word: u32) -> Complex64 {
    let (s, c) = phase_radians(mixer_phase(t, word)).sin_cos();
    Complex64::new(c, -s)
}

/// The zeroth-order modified Bessel function of the first kind, by its power series (converges
/// quickly for the arguments a Kaiser window uses, beta <= 20).
fn bessel_i0(x: f64) -> f64 {
    let q = x * x / 4.0;
    let (mut term, mut sum) = (1.0, 1.0);
    for k in 1..200 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// Kaiser's estimate of the stopband attenuation (dB) an L-tap Kaiser-windowed sinc reaches over a
/// transition of fs/(2D): `A = 2.285 (L - 1) dw + 7.95` with dw = pi / D rad/sample.
pub fn kaiser_attenuation_db(decimation: usize, taps: usize) -> f64 {
    2.285 * (taps as f64 - 1.0) * std::f64::consts::PI / decimation as f64 + 7.95
}

/// Kaiser's beta for a stopband attenuation of `a` dB.
pub fn kaiser_beta(a: f64) -> f64 {
    if a > 50.0 {
        0.1102 * (a - 8.7)
    } else if a >= 21.0 {
        0.5842 * (a - 21.0).powf(0.4) + 0.07886 * (a - 21.0)
    } else {
        0.0
    }
}

/// The DDC's low-pass filter h[0..L) for decimation D: a sinc with its cutoff at fs/(2D) (-6 dB
/// there, halfway between the kept band's edge fs/(4D) and the first alias band's edge
/// 3 fs/(4D)), times a Kaiser window whose beta suits the attenuation Kaiser's formula promises
/// for L taps over that transition ([`kaiser_attenuation_db`]), scaled to unit DC gain (sum of h
/// = 1).
///
/// Unit DC gain keeps a tone's level: a real tone `A cos(2 pi f t)` in the kept band becomes a
/// complex baseband tone of amplitude A/2 (times the passband ripple), exactly what the wideband
/// PFB sees of it, so with the same PFB weights (n channels, T taps) a narrowband channel gives
/// the tone the same value as a wideband one (`narrowband::tests`). Noise is another matter: a
/// narrowband channel is D times narrower, so it holds 1/D of the noise power a wideband channel
/// does (the kept band lies in the passband, where |H| = 1); the engine's gain must make up the
/// difference, a factor sqrt(D), if narrowband noise is to leave the quantiser at wideband's
/// level. (The subsampled stream as a whole carries D sum h^2 = 0.91 of 1/D of the input's power:
/// the transition band, which the PFB discards, is part of it.)
pub fn ddc_filter(decimation: usize, taps: usize) -> Result<Vec<f64>> {
    check_decimation(decimation)?;
    if taps == 0 || taps > MAX_DDC_TAPS {
        bail!("the DDC needs 1 to {MAX_DDC_TAPS} taps, not {taps}");
    }
    let beta = kaiser_beta(kaiser_attenuation_db(decimation, taps));
    let centre = (taps as f64 - 1.0) / 2.0;
    let i0_beta = bessel_i0(beta);
    let mut h: Vec<f64> = (0..taps)
        .map(|k| {
            let u = if taps > 1 {
                (k as f64 - centre) / centre
            } else {
                0.0
            };
            let window = bessel_i0(beta * (1.0 - u * u).max(0.0).sqrt()) / i0_beta;
            window * sinc((k as f64 - centre) / decimation as f64)
        })
        .collect();
    let dc: f64 = h.iter().sum();
    h.iter_mut().for_each(|v| *v /= dc);
    Ok(h)
}

/// The filter's complex response `H(f) = sum_k h[k] exp(-2 pi i f k)` at `f` cycles per ADC
/// sample: a baseband tone `exp(2 pi i f t)` comes out of the DDC multiplied by `conj` of this
/// (for real h, `H(-f)`); its magnitude is what matters here.
pub fn filter_response(h: &[f64], f: f64) -> Complex64 {
    h.iter()
        .enumerate()
        .map(|(k, &v)| Complex64::from_polar(v, -std::f64::consts::TAU * f * k as f64))
        .sum()
}

/// One DDC output, subsampled sample `j` (absolute: its filter starts at ADC sample jD), from any
/// input given as a function of the absolute ADC sample index: `sum_k h[k] x(jD + k) mixer(jD +
/// k)`. Real digitiser samples come in as complex numbers with zero imaginary part; a complex
/// input (a test signal with no negative frequencies) works the same way.
pub fn ddc_sample(
    x: impl Fn(u64) -> Complex64,
    j: u64,
    decimation: usize,
    h: &[f64],
    word: u32,
) -> Complex64 {
    let start = j.wrapping_mul(decimation as u64);
    h.iter()
        .enumerate()
        .map(|(k, &v)| {
            let t = start.wrapping_add(k as u64);
            x(t) * mixer(t, word) * v
        })
        .sum()
}

/// The DDC of a run of real samples whose first is at absolute ADC sample `first`: every output
/// whose L input samples lie in the run, as `(j0, y)` with `y[i]` subsampled sample j0 + i (j0 D is
/// the first multiple of D at or after `first`). Empty when the run is shorter than one filter.
pub fn ddc(
    samples: &[f64],
    first: u64,
    decimation: usize,
    h: &[f64],
    word: u32,
) -> Result<(u64, Vec<Complex64>)> {
    check_decimation(decimation)?;
    if h.is_empty() {
        bail!("the DDC filter has no taps");
    }
    let d = decimation as u64;
    let j0 = first.div_ceil(d);
    let skip = (j0 * d - first) as usize;
    let outputs = match samples.len().checked_sub(skip + h.len()) {
        Some(room) => room / decimation + 1,
        None => 0,
    };
    let x = |t: u64| Complex64::new(samples[t.wrapping_sub(first) as usize], 0.0);
    let y = (0..outputs as u64)
        .map(|i| ddc_sample(x, j0 + i, decimation, h, word))
        .collect();
    Ok((j0, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixer_words_and_centres() {
        let fs = 1712e6;
        // A quarter of fs: F = 2^30 exactly.
        assert_eq!(mixer_word(428e6, fs, 8).unwrap(), 1 << 30);
        let f = mixer_word(300e6, fs, 16).unwrap();
        assert!((centre_frequency(f, fs) - 300e6).abs() <= fs / TWO_POW_32 / 2.0);
        // The band must fit: for D = 8 the half-width is fs/32 = 53.5 MHz.
        assert!(mixer_word(53.5e6, fs, 8).is_ok());
        assert!(mixer_word(856e6 - 53.5e6, fs, 8).is_ok());
        let low = mixer_word(53.4e6, fs, 8).unwrap_err().0;
        assert!(low.contains("must lie from 53500000 Hz"), "{low}");
        assert!(mixer_word(856e6 - 53.4e6, fs, 8).is_err());
        assert!(mixer_word(-1.0, fs, 8).is_err());
        assert!(mixer_word(1e12, fs, 8).is_err());
        assert!(mixer_word(f64::NAN, fs, 8).is_err());
        assert!(mixer_word(300e6, 0.0, 8).is_err());
        assert!(mixer_word(300e6, fs, 4)
            .unwrap_err()
            .0
            .contains("8, 16 or 32"));
        // The limits in words, for every decimation.
        for d in DECIMATIONS {
            let half = (1u32 << 30) / d as u32;
            assert!(check_mixer_word(half, d).is_ok());
            assert!(check_mixer_word(half - 1, d).is_err());
            assert!(check_mixer_word((1 << 31) - half, d).is_ok());
            assert!(check_mixer_word((1 << 31) - half + 1, d).is_err());
        }
    }

    /// The mixer's phase is exact at any timestamp: near 2^48 (the engine's 48-bit timestamps) the
    /// wrapping multiply agrees with exact 128-bit arithmetic and with a phase accumulator (what a
    /// GPU thread stepping along its samples would keep) started from the first sample's phase, and
    /// a step of 2^32 samples returns to the same phase.
    #[test]
    fn mixer_is_exact_near_2_pow_48() {
        let words = [1u32 << 30, 0x1234_5679, 0x3fff_ffff, 0x0bad_cafe, 12345];
        for word in words {
            let t0 = (1u64 << 48) - 5000;
            let mut acc = mixer_phase(t0, word);
            for t in t0..t0 + 10_000 {
                let exact = ((t as u128 * word as u128) % (1u128 << 32)) as u32;
                assert_eq!(mixer_phase(t, word), exact, "t {t} word {word}");
                assert_eq!(acc, exact, "accumulator at t {t} word {word}");
                acc = acc.wrapping_add(word);
                assert_eq!(mixer_phase(t + (1 << 32), word), exact);
            }
            // The mixer value from the phase matches exp(-2 pi i f t) computed with the phase
            // reduced exactly (f t mod 1, as a rational with denominator 2^32).
            let t = (1u64 << 48) + 7;
            let turns = ((t as u128 * word as u128) % (1u128 << 32)) as f64 / TWO_POW_32;
            let want = Complex64::from_polar(1.0, -std::f64::consts::TAU * turns);
            assert!((mixer(t, word) - want).norm() < 1e-15);
            // Computed naively in float64, f t at 2^48 has lost all of its fractional part's
            // precision: the exact phase is what makes the mixer reproducible.
            let naive = (word as f64 / TWO_POW_32 * t as f64).fract();
            println!(
                "mixer word {word:#010x} at t = 2^48 + 7: exact phase {turns:.12} turns, naive float64 {naive:.12}"
            );
        }
        // Negative timestamps (spectra before the stream's start) wrap consistently: the phase of
        // -t is minus the phase of t.
        for word in words {
            for t in [1u64, 77, 1 << 40] {
                let neg = 0u64.wrapping_sub(t);
                assert_eq!(mixer_phase(neg, word), mixer_phase(t, word).wrapping_neg());
            }
        }
    }

    #[test]
    fn filter_design() {
        for d in DECIMATIONS {
            let l = default_ddc_taps(d);
            let h = ddc_filter(d, l).unwrap();
            assert_eq!(h.len(), l);
            assert!((h.iter().sum::<f64>() - 1.0).abs() < 1e-14);
            for k in 0..l {
                assert!((h[k] - h[l - 1 - k]).abs() < 1e-15, "asymmetric at {k}");
            }
            // -6 dB at the cutoff fs/(2D), flat over the kept band, deep beyond 3 fs/(4D).
            let db = |f: f64| 20.0 * filter_response(&h, f).norm().log10();
            let cutoff = db(0.5 / d as f64);
            assert!(
                (cutoff + 6.02).abs() < 0.05,
                "D {d}: {cutoff} dB at the cutoff"
            );
            let pass = (0..=200)
                .map(|i| db(0.25 / d as f64 * i as f64 / 200.0))
                .fold(0.0f64, |m, v| m.max(v.abs()));
            let stop = (0..=2000)
                .map(|i| db((0.75 + 0.25 * i as f64 / 2000.0) / d as f64))
                .fold(f64::MIN, f64::max);
            let noise = h.iter().map(|v| v * v).sum::<f64>() * d as f64;
            println!(
                "DDC filter D {d}, {l} taps: Kaiser beta {:.3} (Kaiser's estimate {:.1} dB); passband ripple {pass:.5} dB, \
                 {cutoff:.2} dB at fs/(2D), stopband from 3fs/(4D) to fs/D <= {stop:.1} dB; D sum h^2 = {noise:.4}",
                kaiser_beta(kaiser_attenuation_db(d, l)),
                kaiser_attenuation_db(d, l),
            );
            assert!(pass < 0.001, "D {d}: passband ripple {pass} dB");
            assert!(stop < -80.0, "D {d}: stopband {stop} dB");
        }
        assert!(ddc_filter(8, 0).is_err());
        assert!(ddc_filter(8, MAX_DDC_TAPS + 1).is_err());
        assert!(ddc_filter(12, 96).is_err());
        assert!((bessel_i0(0.0) - 1.0).abs() < 1e-16);
        // I0(1) = 1.2660658777520082.
        assert!((bessel_i0(1.0) - 1.266_065_877_752_008_2).abs() < 1e-15);
    }

    /// `ddc` over a slice agrees with `ddc_sample` on the absolute grid, whatever the slice's first
    /// timestamp, and a complex baseband tone comes out as the filter's response times the tone.
    #[test]
    fn ddc_over_a_slice() {
        let (d, word) = (16, 0x2345_6789u32);
        let h = ddc_filter(d, default_ddc_taps(d)).unwrap();
        let x = |t: u64| ((t as f64) * 0.37).sin() * 100.0 + ((t % 7) as f64);
        for first in [0u64, 5, 16, 1_000_003, (1 << 48) - 3] {
            let samples: Vec<f64> = (0..1000).map(|i| x(first + i)).collect();
            let (j0, y) = ddc(&samples, first, d, &h, word).unwrap();
            assert!(j0 * d as u64 >= first);
            assert!(j0 * (d as u64) < first + d as u64);
            let last_end = (j0 + y.len() as u64 - 1) * d as u64 + h.len() as u64;
            assert!(last_end <= first + 1000 && last_end + d as u64 > first + 1000);
            for (i, v) in y.iter().enumerate() {
                let want = ddc_sample(|t| Complex64::new(x(t), 0.0), j0 + i as u64, d, &h, word);
                assert_eq!(*v, want);
            }
        }
        assert!(ddc(&[0.0; 10], 0, d, &h, word).unwrap().1.is_empty());
        // A complex tone at the centre plus nu: y[j] = exp(2 pi i nu jD) H(-nu).
        let nu = 0.01;
        let f = word as f64 / TWO_POW_32 + nu;
        let tone = |t: u64| Complex64::from_polar(1.0, std::f64::consts::TAU * f * t as f64);
        for j in [3u64, 100] {
            let y = ddc_sample(tone, j, d, &h, word);
            let want =
                Complex64::from_polar(1.0, std::f64::consts::TAU * nu * (j * d as u64) as f64)
                    * filter_response(&h, -nu);
            assert!((y - want).norm() < 1e-9, "{y} vs {want}");
        }
    }
}

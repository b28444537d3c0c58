//! What every backend must do, as checks shared by the backends' tests: random streams, delays and
//! gains, comparisons against the float64 reference, and the tone and delay checks each backend
//! runs through a [`Processor`]. Kept apart from the reference backend itself, as RustFFT keeps
//! its `test_utils` apart from its algorithms.

use num_complex::{Complex32, Complex64};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spead::samples::range as sample_range;

use super::{
    Backend, BackendError, Channelisation, Ddc, Frame, InputGeometry, OutputFrame, OutputGeometry,
    OutputKind, SpectrumDelay, MAX_OUTPUTS, POLS,
};
use crate::signal::ddc::{mixer_phase, phase_radians};
use crate::signal::delay::{fill_delays, wrap_phase, DelayAt, DelayModel, FramePlan, Placement};
use crate::signal::narrowband::narrowband_delay;
use crate::signal::unpack::pack;
use crate::signal::weights;

/// A geometry with room for coarse delays of up to `margin` samples either way (a multiple of
/// 4): overlap (T-1) 2n + 2 margin, nominal offset of spectrum m = margin + m 2n.
pub(crate) fn geometry(
    channels: usize,
    taps: usize,
    bits: u32,
    s: usize,
    h: usize,
    margin: usize,
) -> Channelisation {
    Channelisation::new(
        InputGeometry {
            sample_bits: bits,
            chunk_samples: s * h * 2 * channels,
            overlap_samples: (taps - 1) * 2 * channels + 2 * margin,
        },
        OutputGeometry {
            channels,
            taps,
            spectra_per_heap: s,
            bits: 8,
            filter: Default::default(),
            dither: None,
            kind: OutputKind::Wideband,
        },
    )
}

/// A narrowband output of `channels` channels, `taps` taps, decimation `decimation` (default DDC
/// length) and `s` spectra per heap: 8-bit, undithered, the default filter design.
pub(crate) fn narrowband_output(
    channels: usize,
    taps: usize,
    decimation: usize,
    s: usize,
) -> OutputGeometry {
    OutputGeometry {
        channels,
        taps,
        spectra_per_heap: s,
        bits: 8,
        filter: Default::default(),
        dither: None,
        kind: OutputKind::Narrowband(Ddc::new(decimation)),
    }
}

/// [`narrowband_output`] without discard (katgpucbf's VLBI mode): subsampled by 2D through the
/// remez filter of its default length, flat over 0.6 of the band, all n bins of an n-point PFB.
pub(crate) fn no_discard_output(
    channels: usize,
    taps: usize,
    decimation: usize,
    s: usize,
) -> OutputGeometry {
    let pass = crate::signal::no_discard::PassBand {
        fraction: 0.6,
        weight: crate::signal::no_discard::DEFAULT_WEIGHT_PASS,
    };
    OutputGeometry {
        kind: OutputKind::Narrowband(Ddc::with_bins(decimation, crate::backend::Bins::All(pass))),
        ..narrowband_output(channels, taps, decimation, s)
    }
}

/// A wideband output (64 channels, 4 taps, dithered), a narrowband one with discard (64 channels,
/// 4 taps, D 8) and two without (64 channels 4 taps D 8, 8-bit dithered; 128 channels 2 taps
/// D 8, 4-bit), for chunks of 16384 samples: the no-discard kind beside the others.
pub(crate) fn no_discard_outputs() -> Vec<OutputGeometry> {
    let (_, three) = three_outputs(0);
    vec![
        three[0],
        narrowband_output(64, 4, 8, 4),
        OutputGeometry {
            dither: Some(11),
            ..no_discard_output(64, 4, 8, 4)
        },
        OutputGeometry {
            bits: 4,
            ..no_discard_output(128, 2, 8, 4)
        },
    ]
}

/// A random mixer word for decimation `decimation`: a centre anywhere its band fits.
pub(crate) fn random_mixer_word(rng: &mut StdRng, decimation: usize) -> u32 {
    let half = (1u32 << 30) / decimation as u32;
    rng.random_range(half..=(1u32 << 31) - half)
}

/// A frame in ordinary memory for the one output of `g`.
pub(crate) fn host_frame(g: &Channelisation) -> Frame {
    Frame::new_host(&g.input, &[g.output])
}

pub(crate) fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Near-Gaussian noise (a sum of four uniforms: cheap in debug builds) of rms 10% of full
/// scale, never all zero.
pub(crate) fn noise(rng: &mut StdRng, bits: u32, len: usize) -> Vec<i16> {
    let (lo, _) = sample_range(bits);
    // Each byte is uniform on [0, 256): variance 256^2 / 12; four of them: 256^2 / 3.
    let scale = 0.1 * -(lo as f64) / (256.0 / 3f64.sqrt());
    let mut x: u64 = rng.random::<u64>() | 1;
    let v: Vec<i16> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            let sum = b[0] as i32 + b[1] as i32 + b[2] as i32 + b[3] as i32 - 510;
            (sum as f64 * scale).round() as i16
        })
        .collect();
    assert!(v.iter().any(|&x| x != 0));
    v
}

/// Packs `samples` (one chunk per polarisation) into the frame.
pub(crate) fn load_chunk(frame: &mut Frame, bits: u32, samples: [&[i16]; POLS]) {
    for (chunk, samples) in frame.input.chunk.iter_mut().zip(samples) {
        pack(samples, bits, chunk).unwrap();
    }
}

/// Sets both polarisations' gains of the first output.
pub(crate) fn set_gains(backend: &mut dyn Backend, gains: &[Vec<Complex32>; POLS]) {
    set_output_gains(backend, 0, gains);
}

/// Sets both polarisations' gains of output `output`.
pub(crate) fn set_output_gains(
    backend: &mut dyn Backend,
    output: usize,
    gains: &[Vec<Complex32>; POLS],
) {
    for (pol, g) in gains.iter().enumerate() {
        backend.set_gains(output, pol, g).unwrap();
    }
}

/// Random coarse delays within `margin`, fine delays in [-0.5, 0.5], phases in [-pi, pi), and a
/// random output timestamp (which keys the dither), for the first output.
pub(crate) fn random_delays(
    rng: &mut StdRng,
    g: &Channelisation,
    margin: usize,
    frame: &mut Frame,
) {
    random_output_delays(rng, g, margin, &mut frame.outputs[0]);
}

/// [`random_delays`] for one output, `g` being its channelisation. A narrowband output also gets
/// a random mixer word ([`narrowband_delays`]).
pub(crate) fn random_output_delays(
    rng: &mut StdRng,
    g: &Channelisation,
    margin: usize,
    out: &mut OutputFrame,
) {
    if let OutputKind::Narrowband(ddc) = g.output.kind {
        let word = random_mixer_word(rng, ddc.decimation);
        narrowband_delays(rng, g, margin, word, out);
        return;
    }
    out.timestamp = rng.random();
    for pol in 0..POLS {
        for (m, d) in out.delays[pol].iter_mut().enumerate() {
            let c = rng.random_range(-(margin as i64)..=margin as i64);
            *d = SpectrumDelay {
                offset: (margin as i64 + (m * g.step()) as i64 - c) as u32,
                fine: rng.random_range(-0.5f32..=0.5),
                phase: rng.random_range(-std::f32::consts::PI..std::f32::consts::PI),
            };
        }
    }
}

/// A narrowband output's frame as the engine makes it: mixer word `word`, a random output
/// timestamp, and per spectrum a random delay d of up to `margin` - D/2 ADC samples either way
/// (fractional, negative or positive; `margin` a multiple of D) and a random phase, mapped as
/// `narrowband_delay` maps them: window offset margin + m 2nD - kD, r', p'. Returns the delays
/// before the mapping, per polarisation and spectrum.
pub(crate) fn narrowband_delays(
    rng: &mut StdRng,
    g: &Channelisation,
    margin: usize,
    word: u32,
    out: &mut OutputFrame,
) -> [Vec<DelayAt>; POLS] {
    let (dec, d) = (g.output.decimation(), g.output.subsampling());
    assert!(
        margin.is_multiple_of(d) && margin >= d,
        "margin {margin}, S {d}"
    );
    out.mixer = word;
    out.timestamp = rng.random();
    let most = (margin - d / 2) as f64;
    let mut delays = [Vec::new(), Vec::new()];
    for (pol, delays) in delays.iter_mut().enumerate() {
        for (m, s) in out.delays[pol].iter_mut().enumerate() {
            let delay = rng.random_range(-most..=most);
            let at = DelayAt {
                coarse: delay.round() as i64,
                fine: delay - delay.round(),
                phase: rng.random_range(-std::f64::consts::PI..std::f64::consts::PI),
            };
            let nb = narrowband_delay(&at, dec, d, word);
            let offset = (margin + m * g.step()) as i64 - nb.coarse * d as i64;
            assert!((0..=g.max_offset() as i64).contains(&offset));
            *s = SpectrumDelay {
                offset: offset as u32,
                fine: nb.fine as f32,
                phase: nb.phase as f32,
            };
            delays.push(at);
        }
    }
    delays
}

/// Random complex gains putting outputs at about 30 rms for the noise of [`noise`] (8-bit output;
/// scaled to the range of 4-bit output; sqrt(D) higher for a narrowband output, whose channels
/// hold 1/D of the noise); about 1% of channels ten times higher so that some values saturate.
pub(crate) fn random_gains(rng: &mut StdRng, g: &Channelisation) -> [Vec<Complex32>; POLS] {
    let level = 30.0 * g.limit() as f32 / 127.0 * (g.output.subsampling() as f32).sqrt();
    let sigma = 0.1 * (1 << (g.input.sample_bits - 1)) as f32;
    std::array::from_fn(|_| {
        (0..g.output.channels)
            .map(|_| {
                let boost = if rng.random_range(0..100) == 0 {
                    10.0
                } else {
                    1.0
                };
                let mag = boost * level / sigma * rng.random_range(0.5f32..1.5);
                Complex32::from_polar(mag, rng.random_range(-3.2f32..3.2))
            })
            .collect()
    })
}

/// Copies the timestamp, chunks and every output's timestamp, mixer word and delays of `src` into
/// `dst` (frames of the same geometry).
pub(crate) fn copy_input(src: &Frame, dst: &mut Frame) {
    dst.input.timestamp = src.input.timestamp;
    for pol in 0..POLS {
        dst.input.chunk[pol].copy_from_slice(&src.input.chunk[pol]);
    }
    for (d, s) in dst.outputs.iter_mut().zip(&src.outputs) {
        d.timestamp = s.timestamp;
        d.mixer = s.mixer;
        d.delays.clone_from(&s.delays);
    }
}

/// Fills every output with 0x80 (-128, or -8 in the high nibble of 4-bit output), a byte no
/// backend writes, so unwritten bytes show.
pub(crate) fn poison(frame: &mut Frame) {
    for out in &mut frame.outputs {
        out.heaps.fill(0x80);
        out.saturated = [u64::MAX; POLS];
    }
}

/// Asserts that every byte of every output was written.
pub(crate) fn assert_written(frame: &Frame) {
    for (k, out) in frame.outputs.iter().enumerate() {
        if let Some(i) = out.heaps_i8().iter().position(|&v| v == i8::MIN) {
            panic!("output {k} byte {i} was not written");
        }
    }
}

/// ||a - b|| / ||b||.
pub(crate) fn relative_error(a: impl Iterator<Item = Complex64>, b: &[Complex64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in a.zip(b) {
        num += (x - y).norm_sqr();
        den += y.norm_sqr();
    }
    assert!(den > 0.0, "reference output is all zero");
    (num / den).sqrt()
}

/// (values differing by exactly 1, total values); panics on a larger difference.
pub(crate) fn int8_differences(a: &[i8], b: &[i8]) -> (usize, usize) {
    assert_eq!(a.len(), b.len());
    let mut ones = 0;
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let d = (x as i32 - y as i32).abs();
        assert!(d <= 1, "output byte {i}: {x} vs {y}");
        ones += usize::from(d == 1);
    }
    (ones, a.len())
}

/// Something that processes the frames of one stream and returns their unquantised outputs
/// in output order (a backend built for one geometry).
pub(crate) type Processor = Box<dyn FnMut(&mut Frame) -> Vec<Complex64>>;

/// Tones at (and beside) channel centres land in their channel with the amplitude and phase the
/// weights predict, and leak into neighbours as [`weights::response_db`] says.
/// Both tapers: the rectangular one's higher sidelobes must show where the weights say.
pub(crate) fn check_tone(make: &dyn Fn(&Channelisation) -> Processor) {
    for window in weights::WindowFunction::ALL {
        let mut g = geometry(1024, 16, 10, 20, 1, 0);
        g.output.filter.window = window;
        check_tone_with(make, g);
    }
}

fn check_tone_with(make: &dyn Fn(&Channelisation) -> Processor, mut g: Channelisation) {
    // Spectra from T-1 on have windows wholly in the chunk (overlap (T-1) 2n, no delay).
    g.input.overlap_samples = (g.output.taps - 1) * g.step();
    let w = g.output.weights().unwrap();
    let (n, step) = (g.output.channels, g.step());
    let pi = std::f64::consts::PI;
    let amp = 500.0;
    for (k, frac, phi) in [
        (100usize, 0.0, 0.7),
        (700, 0.0, -2.0),
        (333, 0.3, 0.1),
        (5, -0.45, 1.0),
    ] {
        let f = k as f64 + frac;
        // Chunk sample t is ADC sample t; window of spectrum m starts at (m - T + 1) 2n.
        let samples: Vec<i16> = (0..g.chunk_samples())
            .map(|t| (amp * (2.0 * pi * f * t as f64 / step as f64 + phi).cos()).round() as i16)
            .collect();
        let mut frame = host_frame(&g);
        load_chunk(&mut frame, g.input.sample_bits, [&samples, &samples]);
        for pol in 0..POLS {
            for (m, d) in frame.outputs[0].delays[pol].iter_mut().enumerate() {
                d.offset = (m * step) as u32;
            }
        }
        poison(&mut frame);
        let out = make(&g)(&mut frame);
        assert_written(&frame);
        let predicted = amp / 2.0 * weights::response(&w, n, frac).sqrt();
        for m in g.output.taps - 1..g.spectra_per_frame() {
            let x = out[g.output_index(m, 0, k)];
            assert_eq!(
                x,
                out[g.output_index(m, 1, k)],
                "both pols carry the same samples"
            );
            let rel = x.norm() / predicted - 1.0;
            assert!(
                rel.abs() < 1e-3,
                "k {k}{frac:+} m {m}: |X| {} vs {predicted}",
                x.norm()
            );
            if frac != 0.0 {
                continue;
            }
            // The window starts at a multiple of 2n, so the tone's phase comes out unchanged.
            let dphi = (x.arg() - phi + pi).rem_euclid(2.0 * pi) - pi;
            assert!(dphi.abs() < 1e-3, "k {k} phase {} vs {phi}", x.arg());
            for j in [1usize, 2, 3, 10] {
                for kk in [k - j, k + j] {
                    let got = 20.0 * (out[g.output_index(m, 0, kk)].norm() / x.norm()).log10();
                    let want = weights::response_db(&w, n, kk as f64 - f);
                    if want > -50.0 {
                        assert!(
                            (got - want).abs() < 0.1,
                            "k {k} beside {kk}: {got} dB vs {want} dB"
                        );
                    } else {
                        assert!(
                            got < -45.0,
                            "k {k} beside {kk}: {got} dB, predicted {want} dB"
                        );
                    }
                }
            }
        }
    }
}

/// Sum of tones (frequencies in channels) at sample `t + advance`.
fn tones(t: f64, advance: f64, step: usize) -> f64 {
    let pi = std::f64::consts::PI;
    [
        (40.0, 150.0, 0.3),
        (301.25, 150.0, -1.1),
        (812.0, 150.0, 2.5),
    ]
    .iter()
    .map(|&(f, a, phi)| a * (2.0 * pi * f * (t + advance) / step as f64 + phi).cos())
    .sum()
}

/// A stream advanced by tau samples (dsim's convention) through an engine delayed by tau gives
/// the undelayed stream's spectra; a fringe phase adds to every channel.
pub(crate) fn check_delay_cancels(make: &dyn Fn(&Channelisation) -> Processor) {
    let margin = 2048;
    let g = geometry(1024, 4, 10, 8, 1, margin);
    let fs = 1712e6;
    let plan = FramePlan {
        lag: (g.output.taps - 1) * g.step() + margin,
        fs,
    };
    let spectra = g.spectra_per_frame();
    let t_first = 1u64 << 30;
    // Two frames of the advanced stream; the second frame's windows all hold real data.
    let run = |advance: f64, delay: f64, phase: f64| {
        let model = DelayModel {
            load_time: t_first,
            delay: delay / fs,
            phase,
            ..DelayModel::default()
        };
        let mut placed = [
            vec![Placement::default(); spectra],
            vec![Placement::default(); spectra],
        ];
        let mut process = make(&g);
        let mut out = Vec::new();
        let mut frame = host_frame(&g);
        for f in 0..2 {
            frame.input.timestamp = t_first + (f * g.chunk_samples()) as u64;
            let s: Vec<i16> = (0..g.chunk_samples())
                .map(|i| {
                    tones((frame.input.timestamp + i as u64) as f64, advance, g.step()).round()
                        as i16
                })
                .collect();
            load_chunk(&mut frame, 10, [&s, &s]);
            let outside = fill_delays(
                &g,
                &plan,
                frame.input.timestamp,
                &[model, model],
                &mut frame.outputs[0].delays,
                &mut placed,
            )
            .unwrap();
            assert_eq!(outside, 0);
            poison(&mut frame);
            out = process(&mut frame);
            assert_written(&frame);
        }
        out
    };
    let reference = run(0.0, 0.0, 0.0);
    for (tau, phase) in [
        (37.3, 0.0),
        (-12.7, 0.0),
        (0.45, 0.0),
        (100.5, 0.0),
        (-0.5, 0.0),
        (5.2, 1.3),
    ] {
        let delayed = run(tau, tau, phase);
        for m in 0..spectra {
            for k in [40usize, 301, 812] {
                for pol in 0..POLS {
                    let e = g.output_index(m, pol, k);
                    let ratio = delayed[e] / reference[e] * Complex64::from_polar(1.0, -phase);
                    assert!(
                        (ratio - 1.0).norm() < 2e-3,
                        "tau {tau} m {m} k {k}: ratio {ratio}"
                    );
                }
            }
        }
        // Without the engine's delay the same stream does not line up (the test can fail).
        let uncorrected = run(tau, 0.0, 0.0);
        let e = g.output_index(0, 0, 301);
        assert!(
            (uncorrected[e] / reference[e] - 1.0).norm() > 0.1,
            "tau {tau}"
        );
    }
}

/// The mean output of a weak tone over 10^5 spectra: a tone at the centre of channel 10 whose
/// gain puts it at 0.3 LSB (real, each spectrum), through `backend` (built for the geometry
/// [`dither_geometry`] returns, with `dither` set on its output). Returns the mean complex output
/// of the tone's channel, both polarisations together.
pub(crate) fn weak_tone_mean(backend: &mut dyn Backend) -> Complex64 {
    let g = Channelisation::new(*backend.input(), backend.outputs()[0]);
    let (n, step, taps) = (g.output.channels, g.step(), g.output.taps);
    let (k, amp, level) = (10usize, 400.0, 0.3);
    let w = g.output.weights().unwrap();
    // Unit gain at 10 bits puts the tone at amp / 2 * sqrt(response) (check_tone).
    let tone_gain = level / (amp / 2.0 * weights::response(&w, n, 0.0).sqrt());
    let mut gains = vec![Complex32::new(0.0, 0.0); n];
    gains[k] = Complex32::new(tone_gain as f32, 0.0);
    for pol in 0..POLS {
        backend.set_gains(0, pol, &gains).unwrap();
    }
    let pi = std::f64::consts::PI;
    let frames = 100_000usize.div_ceil(g.spectra_per_frame()) + 1;
    let (mut sum, mut count) = (Complex64::new(0.0, 0.0), 0usize);
    let mut frame = backend.alloc_frame().unwrap();
    for f in 0..frames {
        let first = f * g.chunk_samples();
        let s: Vec<i16> = (0..g.chunk_samples())
            .map(|i| {
                (amp * (2.0 * pi * (k * (first + i)) as f64 / step as f64).cos()).round() as i16
            })
            .collect();
        load_chunk(&mut frame, g.input.sample_bits, [&s, &s]);
        frame.input.timestamp = first as u64;
        frame.outputs[0].timestamp = first as u64;
        for pol in 0..POLS {
            for (m, d) in frame.outputs[0].delays[pol].iter_mut().enumerate() {
                *d = SpectrumDelay {
                    offset: (m * step) as u32,
                    fine: 0.0,
                    phase: 0.0,
                };
            }
        }
        poison(&mut frame);
        backend.submit(frame).unwrap();
        frame = backend.wait().unwrap().unwrap();
        assert_written(&frame);
        let q = frame.outputs[0].components(g.output.bits);
        // Frame 0's first T-1 windows reach into the silent overlap.
        for m in if f == 0 { taps - 1 } else { 0 }..g.spectra_per_frame() {
            for pol in 0..POLS {
                let e = g.output_index(m, pol, k);
                sum += Complex64::new(q[2 * e] as f64, q[2 * e + 1] as f64);
                count += 1;
            }
        }
    }
    assert!(count >= 2 * 100_000);
    sum / count as f64
}

/// A geometry for [`weak_tone_mean`]: 64 channels, 4 taps, 10-bit input, 4096 spectra a frame.
pub(crate) fn dither_geometry(bits: u32, dither: Option<u32>) -> Channelisation {
    let mut g = geometry(64, 4, 10, 256, 16, 0);
    g.input.overlap_samples = (g.output.taps - 1) * g.step();
    g.output.bits = bits;
    g.output.dither = dither;
    g
}

/// The dither requirement on a backend: without dither a 0.3 LSB tone rounds to nothing; with it
/// the mean comes back within 2% (10^5 spectra, 8- and 4-bit output).
pub(crate) fn check_dither_unbiased(make: &dyn Fn(&Channelisation) -> Box<dyn Backend>) {
    for bits in [8, 4] {
        let plain = weak_tone_mean(make(&dither_geometry(bits, None)).as_mut());
        assert_eq!(
            plain,
            Complex64::new(0.0, 0.0),
            "{bits}-bit output without dither"
        );
        let dithered = weak_tone_mean(make(&dither_geometry(bits, Some(42))).as_mut());
        println!(
            "{bits}-bit output: weak tone of 0.3 LSB, mean {plain} without dither, {dithered} with"
        );
        assert!(
            (dithered.re / 0.3 - 1.0).abs() < 0.02 && dithered.im.abs() < 0.02 * 0.3,
            "{bits}-bit output with dither: mean {dithered}, want 0.3"
        );
    }
}

/// The input sensors a backend reports are the exact integer measure of each chunk (sum of
/// squares, samples at either end of the range), frame after frame, for every sample width.
pub(crate) fn check_input_power(make: &dyn Fn(&Channelisation) -> Box<dyn Backend>) {
    for bits in [8, 10, 12, 16] {
        let g = geometry(256, 4, bits, 4, 3, 64);
        let mut backend = make(&g);
        let mut rng = rng(bits as u64);
        let (lo, hi) = sample_range(bits);
        let mut frame = backend.alloc_frame().unwrap();
        for f in 0..3 {
            let mut x = [
                noise(&mut rng, bits, g.chunk_samples()),
                noise(&mut rng, bits, g.chunk_samples()),
            ];
            // Some samples at full scale (both ends, and the negative of the top code, which
            // katgpucbf's rule counts too), a different number per polarisation and frame.
            for (pol, x) in x.iter_mut().enumerate() {
                for i in 0..(5 * f + 3 * pol + 1) {
                    let at = rng.random_range(0..x.len());
                    x[at] = [hi, lo, -hi][i % 3];
                }
            }
            load_chunk(&mut frame, bits, [&x[0], &x[1]]);
            random_delays(&mut rng, &g, 64, &mut frame);
            frame.input.power = None;
            backend.submit(frame).unwrap();
            frame = backend.wait().unwrap().unwrap();
            let want = [0, 1].map(|pol| crate::signal::power::InputPower::of(&x[pol], bits));
            assert_eq!(frame.input.power, Some(want), "{bits}-bit input, frame {f}");
            assert!(want.iter().all(|p| p.full_scale > 0 && p.sum_squares > 0));
        }
    }
}

/// Builds a backend for an input and its outputs, as the engine does.
pub(crate) type Make<'a> = &'a dyn Fn(InputGeometry, &[OutputGeometry]) -> Box<dyn Backend>;

/// Builds a backend for an input and its outputs, or says why not.
pub(crate) type TryMake<'a> =
    &'a dyn Fn(InputGeometry, &[OutputGeometry]) -> Result<Box<dyn Backend>, BackendError>;

/// How closely a backend with several outputs must agree, output by output, with a backend built
/// for that output alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Agreement {
    /// Every byte and saturation count.
    Exact,
    /// Components at most 1 LSB apart in under 0.1% of values (over all the frames), saturation
    /// counts within 1 + 0.1% (a value on the edge of saturating may fall either side): the CPU
    /// against the reference.
    OneLsb,
}

/// Outputs of three shapes from one input (10-bit, chunk 4096, room for coarse delays of
/// `margin` either way): 64 channels 4 taps 8-bit dithered; 256 channels 8 taps 4-bit undithered;
/// 128 channels 1 tap rectangular window, 8-bit.
pub(crate) fn three_outputs(margin: usize) -> (InputGeometry, Vec<OutputGeometry>) {
    let base = OutputGeometry {
        channels: 64,
        taps: 4,
        spectra_per_heap: 8,
        bits: 8,
        filter: Default::default(),
        dither: Some(3),
        kind: OutputKind::Wideband,
    };
    let outputs = vec![
        base,
        OutputGeometry {
            channels: 256,
            taps: 8,
            spectra_per_heap: 4,
            bits: 4,
            dither: None,
            ..base
        },
        OutputGeometry {
            channels: 128,
            taps: 1,
            spectra_per_heap: 4,
            filter: weights::FilterDesign {
                window: weights::WindowFunction::Rect,
                ..Default::default()
            },
            dither: None,
            ..base
        },
    ];
    (input_for(&outputs, 10, 4096, margin), outputs)
}

/// An input of `bits`-bit samples and chunks of `chunk_samples` whose overlap holds every output's
/// window less one step and coarse delays of `margin` either way, a multiple of every output's
/// decimation.
pub(crate) fn input_for(
    outputs: &[OutputGeometry],
    bits: u32,
    chunk_samples: usize,
    margin: usize,
) -> InputGeometry {
    let taps = outputs.iter().map(|o| o.window() - o.step()).max();
    let grid = outputs.iter().map(|o| o.subsampling()).fold(8, usize::max);
    InputGeometry {
        sample_bits: bits,
        chunk_samples,
        overlap_samples: (taps.unwrap_or(0) + 2 * margin).next_multiple_of(grid),
    }
}

/// A wideband output and three narrowband ones of different centres (each frame's own random
/// mixer word), channels, taps, bits and dither, for chunks of 16384 samples: 64 channels 4 taps
/// 8-bit dithered (wideband); 64 channels 4 taps D 8 4-bit undithered; 128 channels 2 taps D 16
/// 8-bit dithered; 32 channels 8 taps D 8 8-bit dithered.
pub(crate) fn mixed_outputs() -> Vec<OutputGeometry> {
    let (_, three) = three_outputs(0);
    vec![
        three[0],
        OutputGeometry {
            bits: 4,
            ..narrowband_output(64, 4, 8, 4)
        },
        OutputGeometry {
            dither: Some(8),
            ..narrowband_output(128, 2, 16, 4)
        },
        // The decimation and DDC filter of the first narrowband output: the CUDA backend makes
        // the two in one pass.
        OutputGeometry {
            dither: Some(9),
            ..narrowband_output(32, 8, 8, 8)
        },
    ]
}

/// A backend built with several outputs gives, for each, what a backend built with that output
/// alone gives from the same frames (samples, that output's delays, timestamp, mixer word and
/// gains), frame after frame so that the span carries over: exactly, or as `Agreement` says for
/// each backend in `against`; and the same input sensors. Runs a set of three outputs of
/// different shapes ([`three_outputs`]) and a set of two of one shape (each with its own gains,
/// delays and timestamps). `writes_every_byte`: whether the backend fills every output byte (all
/// but null).
pub(crate) fn check_outputs_as_if_alone(
    make: Make,
    against: &[(Make, Agreement)],
    writes_every_byte: bool,
) {
    let (_, three) = three_outputs(0);
    let two = vec![three[0], three[0]];
    outputs_as_if_alone(
        make,
        against,
        writes_every_byte,
        [
            ("three shapes", three, 4096),
            ("one shape twice", two, 4096),
        ],
    );
}

/// [`check_outputs_as_if_alone`] for a wideband output beside three narrowband ones
/// ([`mixed_outputs`]), each narrowband output with its own random mixer word in every frame.
pub(crate) fn check_mixed_outputs_as_if_alone(
    make: Make,
    against: &[(Make, Agreement)],
    writes_every_byte: bool,
) {
    outputs_as_if_alone(
        make,
        against,
        writes_every_byte,
        [("wideband and narrowband", mixed_outputs(), 16384)],
    );
}

/// [`check_mixed_outputs_as_if_alone`] for a set of the caller's (chunks of `chunk` samples).
pub(crate) fn check_set_as_if_alone(
    make: Make,
    against: &[(Make, Agreement)],
    writes_every_byte: bool,
    name: &str,
    outputs: Vec<OutputGeometry>,
    chunk: usize,
) {
    outputs_as_if_alone(make, against, writes_every_byte, [(name, outputs, chunk)]);
}

/// The sets (name, outputs, chunk samples) of [`check_outputs_as_if_alone`].
fn outputs_as_if_alone<const N: usize>(
    make: Make,
    against: &[(Make, Agreement)],
    writes_every_byte: bool,
    sets: [(&str, Vec<OutputGeometry>, usize); N],
) {
    let margin = 64;
    for (set, outputs, chunk) in sets {
        let input = input_for(&outputs, 10, chunk, margin);
        let gs: Vec<Channelisation> = outputs
            .iter()
            .map(|o| Channelisation::new(input, *o))
            .collect();
        let mut gain_rng = rng(outputs.len() as u64 + 190);
        let mut rng = rng(outputs.len() as u64 + 90);
        let mut multi = make(input, &outputs);
        assert_eq!(multi.outputs(), &outputs[..]);
        let mut alone: Vec<Vec<Box<dyn Backend>>> = against
            .iter()
            .map(|(make, _)| outputs.iter().map(|o| make(input, &[*o])).collect())
            .collect();
        // Random gains for output k, channel 5 well beyond full scale so that every output
        // saturates.
        let mut new_gains =
            |k: usize, multi: &mut dyn Backend, alone: &mut [Vec<Box<dyn Backend>>]| {
                let mut gains = random_gains(&mut gain_rng, &gs[k]);
                for pol_gains in &mut gains {
                    pol_gains[5] *= 10.0;
                }
                set_output_gains(multi, k, &gains);
                for backends in alone {
                    set_gains(backends[k].as_mut(), &gains);
                }
            };
        for k in 0..outputs.len() {
            new_gains(k, multi.as_mut(), &mut alone);
        }
        // (values off by one, values) per comparison and output, over all frames.
        let mut ones = vec![vec![(0usize, 0usize); outputs.len()]; against.len()];
        let mut saturated = vec![0u64; outputs.len()];
        let mut frame = multi.alloc_frame().unwrap();
        assert_eq!(frame.outputs.len(), outputs.len());
        for (out, g) in frame.outputs.iter().zip(&gs) {
            assert_eq!(out.heaps.len(), g.output_bytes(), "{set}");
            assert!(out.delays.iter().all(|d| d.len() == g.spectra_per_frame()));
        }
        let frames = 4;
        for f in 0..frames {
            if f == 2 {
                // New gains for the last output only, from this frame on.
                new_gains(outputs.len() - 1, multi.as_mut(), &mut alone);
            }
            let x = [
                noise(&mut rng, 10, input.chunk_samples),
                noise(&mut rng, 10, input.chunk_samples),
            ];
            load_chunk(&mut frame, 10, [&x[0], &x[1]]);
            frame.input.timestamp = (1 << 24) + (f * input.chunk_samples) as u64;
            for (out, g) in frame.outputs.iter_mut().zip(&gs) {
                random_output_delays(&mut rng, g, margin, out);
            }
            // Each output's own frame for the backends of one output.
            let mut singles: Vec<Vec<Frame>> = alone
                .iter()
                .map(|backends| {
                    backends
                        .iter()
                        .zip(&frame.outputs)
                        .map(|(b, out)| {
                            let mut single = b.alloc_frame().unwrap();
                            single.input.timestamp = frame.input.timestamp;
                            for pol in 0..POLS {
                                single.input.chunk[pol].copy_from_slice(&frame.input.chunk[pol]);
                            }
                            single.outputs[0].timestamp = out.timestamp;
                            single.outputs[0].mixer = out.mixer;
                            single.outputs[0].delays.clone_from(&out.delays);
                            poison(&mut single);
                            single.input.power = None;
                            single
                        })
                        .collect()
                })
                .collect();
            poison(&mut frame);
            frame.input.power = None;
            multi.submit(frame).unwrap();
            frame = multi.wait().unwrap().unwrap();
            if writes_every_byte {
                assert_written(&frame);
            }
            for (c, ((backends, singles), (_, agreement))) in
                alone.iter_mut().zip(&mut singles).zip(against).enumerate()
            {
                for (k, (b, single)) in backends.iter_mut().zip(singles.drain(..)).enumerate() {
                    b.submit(single).unwrap();
                    let single = b.wait().unwrap().unwrap();
                    let case = format!(
                        "{set}: output {k} ({} ch, {} taps, D {}, {}-bit) frame {f} against {} \
                         alone",
                        outputs[k].channels,
                        outputs[k].taps,
                        outputs[k].decimation(),
                        outputs[k].bits,
                        b.name()
                    );
                    assert_eq!(
                        frame.input.power, single.input.power,
                        "{case}: input sensors"
                    );
                    let (got, want) = (&frame.outputs[k], &single.outputs[0]);
                    assert_eq!(got.heaps.len(), want.heaps.len(), "{case}");
                    match agreement {
                        Agreement::Exact => {
                            if let Some(i) =
                                (0..got.heaps.len()).find(|&i| got.heaps[i] != want.heaps[i])
                            {
                                panic!(
                                    "{case}: byte {i} is {} alone, {} beside other outputs",
                                    want.heaps[i], got.heaps[i]
                                );
                            }
                            assert_eq!(got.saturated, want.saturated, "{case}: saturated");
                        }
                        Agreement::OneLsb => {
                            let bits = outputs[k].bits;
                            let (o, t) =
                                int8_differences(&got.components(bits), &want.components(bits));
                            ones[c][k].0 += o;
                            ones[c][k].1 += t;
                            for pol in 0..POLS {
                                let (x, y) =
                                    (got.saturated[pol] as i64, want.saturated[pol] as i64);
                                assert!(
                                    (x - y).abs() <= 1 + y / 1000,
                                    "{case}: pol {pol} saturated {x} vs {y}"
                                );
                            }
                        }
                    }
                    saturated[k] += want.saturated.iter().sum::<u64>();
                }
            }
        }
        for (c, per_output) in ones.iter().enumerate() {
            for (k, &(o, t)) in per_output.iter().enumerate() {
                if against[c].1 == Agreement::OneLsb {
                    let fraction = o as f64 / t as f64;
                    eprintln!("{set}: output {k}: {o} of {t} values off by one ({fraction:.1e})");
                    assert!(
                        fraction < 1e-3,
                        "{set}: output {k}: {o} of {t} values off by one"
                    );
                }
            }
        }
        if writes_every_byte {
            for (k, &s) in saturated.iter().enumerate() {
                assert!(
                    s > 0,
                    "{set}: output {k}: the gains should saturate some values"
                );
            }
        }
    }
}

/// A backend serves from 1 to [`MAX_OUTPUTS`] outputs: none or too many are refused with a
/// sentence saying so, as is an invalid output among valid ones (naming it); eight are served.
pub(crate) fn check_output_counts(make: TryMake) {
    let (input, three) = three_outputs(16);
    let refused = |outputs: &[OutputGeometry]| match make(input, outputs) {
        Ok(_) => panic!("{} outputs accepted", outputs.len()),
        Err(e) => e.to_string(),
    };
    let e = refused(&[]);
    assert!(
        e.contains("no outputs") && e.contains("at least one output"),
        "{e}"
    );
    let nine: Vec<OutputGeometry> = three
        .iter()
        .cycle()
        .take(MAX_OUTPUTS + 1)
        .copied()
        .collect();
    let e = refused(&nine);
    assert!(e.contains("9 outputs") && e.contains("at most 8"), "{e}");
    let mut bad = three.clone();
    bad[1].taps = 100;
    let e = refused(&bad);
    assert!(e.contains("output 1: taps must be"), "{e}");
    for count in 1..=MAX_OUTPUTS {
        let outputs = &nine[..count];
        let b = make(input, outputs).unwrap_or_else(|e| panic!("{count} outputs: {e}"));
        assert_eq!(b.outputs(), outputs);
        assert_eq!(b.alloc_frame().unwrap().outputs.len(), count);
    }
}

/// Processes the frames of one stream through a backend of several outputs and returns each
/// output's unquantised values in output order.
pub(crate) type OutputsProcessor = Box<dyn FnMut(&mut Frame) -> Vec<Vec<Complex64>>>;

/// Tones through a narrowband output beside a wideband one of the same channels and taps (so the
/// same PFB weights), from one input: a real tone at the narrowband centre lands in channel n/2
/// and one 0.3125 of the band above it in channel n/2 + 0.3125 n, each at the level the wideband
/// output gives it (within 0.1 dB; both tones sit on channel centres of both outputs) and with the
/// phase docs/signal-path.md predicts: the tone's phase at the window's first sample less the
/// mixer's there, plus the DDC filter's pi nu (L - 1). Both polarisations (different amplitudes
/// and phases), D 8 and 16, at timestamps near 2^40. Returns (D, channel, worst dB difference,
/// worst phase error in rad) for the report.
pub(crate) fn check_narrowband_tones(
    make: &dyn Fn(InputGeometry, &[OutputGeometry]) -> OutputsProcessor,
) -> Vec<(usize, usize, f64, f64)> {
    let (n, taps) = (256usize, 4usize);
    let two32 = 4_294_967_296.0f64;
    let mut report = Vec::new();
    for d in [8usize, 16] {
        let wide = OutputGeometry {
            kind: OutputKind::Wideband,
            spectra_per_heap: 4,
            ..narrowband_output(n, taps, d, 2)
        };
        let narrow = narrowband_output(n, taps, d, 2);
        let chunk = 4 * 2 * n * 16; // 4 narrowband spectra at D 16, 8 at D 8
        let input = InputGeometry {
            sample_bits: 10,
            chunk_samples: chunk,
            overlap_samples: (narrow.window() - narrow.step()).next_multiple_of(32),
        };
        assert!(input.overlap_samples <= chunk, "frame 1's span is all data");
        let (gw, gn) = (
            Channelisation::new(input, wide),
            Channelisation::new(input, narrow),
        );
        // Wideband channel k's centre as a mixer word: k / (2n) turns per sample.
        let word = |k: usize| ((k as u64) << 32) / (2 * n) as u64;
        let kc = 100; // the narrowband centre, 0.195 fs
        let q = (0.3 * n as f64 / d as f64).round() as usize * d; // narrowband channels above it
        let f = word(kc) as u32;
        let h_taps = Ddc::new(d).taps as f64;
        for (c, k) in [(n / 2, kc), (n / 2 + q, kc + q / d)] {
            let g_word = word(k) as u32;
            let (amp, phi) = ([400.0, 250.0], [0.7, -2.1]);
            let mut process = make(input, &[wide, narrow]);
            let mut frame = Frame::new_host(&input, &[wide, narrow]);
            let t_first = 1u64 << 40;
            let (mut worst, mut worst_phase) = (0.0f64, 0.0f64);
            for fr in 0..2 {
                frame.input.timestamp = t_first + (fr * chunk) as u64;
                let x: [Vec<i16>; POLS] = std::array::from_fn(|pol| {
                    (0..chunk as u64)
                        .map(|i| {
                            let t = frame.input.timestamp + i;
                            let turns = phase_radians(mixer_phase(t, g_word));
                            (amp[pol] * (turns + phi[pol]).cos()).round() as i16
                        })
                        .collect()
                });
                load_chunk(&mut frame, 10, [&x[0], &x[1]]);
                frame.outputs[1].mixer = f;
                for (out, g) in frame.outputs.iter_mut().zip([&gw, &gn]) {
                    for pol in 0..POLS {
                        for (m, s) in out.delays[pol].iter_mut().enumerate() {
                            *s = SpectrumDelay {
                                offset: (m * g.step()) as u32,
                                fine: 0.0,
                                phase: 0.0,
                            };
                        }
                    }
                }
                poison(&mut frame);
                let values = process(&mut frame);
                assert_written(&frame);
                if fr == 0 {
                    continue; // its windows reach into the silent first overlap
                }
                let span_start = frame.input.timestamp - input.overlap_samples as u64;
                let nu = (g_word as f64 - f as f64) / two32; // cycles per ADC sample
                for pol in 0..POLS {
                    let wideband = values[0][gw.output_index(0, pol, k)].norm();
                    for m in 0..gn.spectra_per_frame() {
                        let spectrum: Vec<Complex64> = (0..n)
                            .map(|ch| values[1][gn.output_index(m, pol, ch)])
                            .collect();
                        let peak = (0..n)
                            .max_by(|&a, &b| spectrum[a].norm().total_cmp(&spectrum[b].norm()))
                            .unwrap();
                        let case = format!("D {d}, tone in channel {c}, pol {pol}, spectrum {m}");
                        assert_eq!(peak, c, "{case}");
                        let y = spectrum[c];
                        let db = 20.0 * (y.norm() / wideband).log10();
                        worst = worst.max(db.abs());
                        assert!(db.abs() < 0.1, "{case}: {db} dB from wideband's level");
                        // Phase: the tone's less the mixer's at t0, plus the filter's.
                        let t0 = span_start + (m * gn.step()) as u64;
                        let turns = mixer_phase(t0, g_word).wrapping_sub(mixer_phase(t0, f));
                        let want = phase_radians(turns)
                            + phi[pol]
                            + std::f64::consts::PI * nu * (h_taps - 1.0);
                        let err = wrap_phase(y.arg() - want);
                        worst_phase = worst_phase.max(err.abs());
                        assert!(err.abs() < 1e-3, "{case}: phase off by {err} rad");
                    }
                }
            }
            report.push((d, c, worst, worst_phase));
        }
    }
    report
}

/// A narrowband output's mixer word takes effect from the frame that brings it, for the whole
/// window, the part in the overlap included. Backend A gets F1, F1, F2, F2 for four frames of noise
/// plus a weak tone at F2's centre; B gets F2 and C F1 throughout (the same samples, delays,
/// timestamps and gains). A equals C (every byte and count) in frames 0 and 1, equals B in frames
/// 2 and 3, and differs from C there in most values; and the tone stands out in channel n/2 of A
/// from frame 2 on but not before: a backend that ignored the word, kept the first, or kept the
/// overlap's DDC from the frame before would fail.
pub(crate) fn check_mixer_change(make: Make) {
    let (d, margin) = (16, 64);
    let out = OutputGeometry {
        dither: Some(5),
        ..narrowband_output(64, 4, d, 4)
    };
    let input = input_for(&[out], 10, 4 * out.heap_samples(), margin);
    let g = Channelisation::new(input, out);
    assert!(
        g.window() - g.step() > 2 * g.step(),
        "windows reach into the overlap"
    );
    let f1 = (0.13 * 4_294_967_296.0) as u32;
    let f2 = (0.31 * 4_294_967_296.0) as u32;
    let n = out.channels;
    let words = [[f1, f1, f2, f2], [f2; 4], [f1; 4]];
    let mut backends: Vec<Box<dyn Backend>> = (0..3).map(|_| make(input, &[out])).collect();
    let gains = vec![Complex32::new(0.8, 0.3); n];
    for b in &mut backends {
        set_gains(b.as_mut(), &[gains.clone(), gains.clone()]);
    }
    let mut rng = rng(321);
    for f in 0..4 {
        let timestamp = (1u64 << 36) + (f * input.chunk_samples) as u64;
        let x: [Vec<i16>; POLS] = std::array::from_fn(|_| {
            let noise = noise(&mut rng, 10, input.chunk_samples);
            noise
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let t = timestamp + i as u64;
                    v + (20.0 * phase_radians(mixer_phase(t, f2)).cos()).round() as i16
                })
                .collect()
        });
        let mut template = backends[0].alloc_frame().unwrap();
        load_chunk(&mut template, 10, [&x[0], &x[1]]);
        template.input.timestamp = timestamp;
        narrowband_delays(&mut rng, &g, margin, f2, &mut template.outputs[0]);
        let done: Vec<Frame> = backends
            .iter_mut()
            .zip(&words)
            .map(|(b, words)| {
                let mut frame = b.alloc_frame().unwrap();
                copy_input(&template, &mut frame);
                frame.outputs[0].mixer = words[f];
                poison(&mut frame);
                b.submit(frame).unwrap();
                let frame = b.wait().unwrap().unwrap();
                assert_written(&frame);
                frame
            })
            .collect();
        let (a, b, c) = (
            &done[0].outputs[0],
            &done[1].outputs[0],
            &done[2].outputs[0],
        );
        let same = |x: &OutputFrame, y: &OutputFrame| {
            x.heaps[..] == y.heaps[..] && x.saturated == y.saturated
        };
        let differ = a
            .components(8)
            .iter()
            .zip(c.components(8))
            .filter(|(x, y)| **x != *y)
            .count();
        // Mean magnitude of channel n/2 against the other channels'.
        let q = a.components(8);
        let (mut centre, mut rest) = (0.0, 0.0);
        for m in 0..g.spectra_per_frame() {
            for pol in 0..POLS {
                for ch in 0..n {
                    let e = g.output_index(m, pol, ch);
                    let v = Complex64::new(q[2 * e] as f64, q[2 * e + 1] as f64).norm();
                    if ch == n / 2 {
                        centre += v;
                    } else {
                        rest += v / (n - 1) as f64;
                    }
                }
            }
        }
        let contrast = centre / rest;
        println!(
            "mixer change, frame {f}: words {:#x} {:#x} {:#x}; A differs from C in {differ} of {} \
             components; channel n/2 {contrast:.1} times the others",
            words[0][f],
            words[1][f],
            words[2][f],
            q.len()
        );
        if f < 2 {
            assert!(same(a, c), "frame {f}: A and C had the same word");
            assert!(contrast < 2.0, "frame {f}: tone in channel n/2 before F2");
        } else {
            assert!(
                same(a, b),
                "frame {f}: A with F2 differs from B, F2 throughout"
            );
            assert!(
                differ > q.len() * 8 / 10,
                "frame {f}: A barely differs from C"
            );
            assert!(contrast > 5.0, "frame {f}: no tone in channel n/2 with F2");
        }
    }
}

/// Narrowband geometries a backend refuses with a sentence saying why (a decimation not 8, 16 or
/// 32, an overlap off the DDC's grid, no DDC taps, naming the output among several), and frames
/// (a mixer word whose band leaves 0 .. fs/2, a window offset off the grid); a good one it takes.
pub(crate) fn check_narrowband_refusals(make: TryMake) {
    let margin = 64;
    let out = narrowband_output(64, 4, 16, 4);
    let input = input_for(&[out], 10, 4 * out.heap_samples(), margin);
    let refused = |input: InputGeometry, outputs: &[OutputGeometry]| match make(input, outputs) {
        Ok(_) => panic!("{outputs:?} accepted"),
        Err(e) => e.to_string(),
    };
    for decimation in [1, 4, 12, 64] {
        let bad = OutputGeometry {
            kind: OutputKind::Narrowband(Ddc {
                taps: 96,
                ..Ddc::new(decimation)
            }),
            ..out
        };
        let e = refused(input, &[bad]);
        assert!(e.contains("must be 8, 16 or 32, not"), "{e}");
    }
    let d32 = narrowband_output(64, 4, 32, 4);
    let mut off_grid = input_for(&[d32], 10, 4 * d32.heap_samples(), margin);
    off_grid.overlap_samples += 16;
    let e = refused(off_grid, &[d32]);
    assert!(
        e.contains("must be a multiple of the subsampling 32"),
        "{e}"
    );
    let no_taps = OutputGeometry {
        kind: OutputKind::Narrowband(Ddc {
            taps: 0,
            ..Ddc::new(16)
        }),
        ..out
    };
    let e = refused(input, &[no_taps]);
    assert!(e.contains("DDC taps must be from 1"), "{e}");
    let (_, three) = three_outputs(0);
    let e = refused(input, &[three[0], no_taps]);
    assert!(
        e.starts_with("unsupported configuration: output 1: DDC taps"),
        "{e}"
    );
    println!("refused: {e}");

    let mut backend = make(input, &[out]).unwrap();
    let g = Channelisation::new(input, out);
    let mut rng = rng(5);
    let mut frame = backend.alloc_frame().unwrap();
    narrowband_delays(&mut rng, &g, margin, 1 << 29, &mut frame.outputs[0]);
    for word in [0, (1 << 26) - 1, (1 << 31) - (1 << 26) + 1, u32::MAX] {
        frame.outputs[0].mixer = word;
        let e = backend.submit(frame).unwrap_err().to_string();
        assert!(
            e.contains("mixer word") && e.contains("outside 0 .. fs/2"),
            "{e}"
        );
        frame = backend.alloc_frame().unwrap();
        narrowband_delays(&mut rng, &g, margin, 1 << 29, &mut frame.outputs[0]);
    }
    frame.outputs[0].delays[1][3].offset += 8;
    let e = backend.submit(frame).unwrap_err().to_string();
    assert!(e.contains("not a multiple of the subsampling 16"), "{e}");
    println!("refused: {e}");
    let mut frame = backend.alloc_frame().unwrap();
    narrowband_delays(&mut rng, &g, margin, 1 << 29, &mut frame.outputs[0]);
    backend.submit(frame).unwrap();
    assert!(backend.wait().unwrap().is_some());
}

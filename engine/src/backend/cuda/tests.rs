//! GPU tests against the float64 reference and the float32 CPU backend. On a host without CUDA
//! each prints `skipped: no CUDA device` and passes.

use num_complex::{Complex32, Complex64};
use rayon::prelude::*;

use super::*;
use crate::backend::conformance::*;
use crate::backend::cpu::CpuBackend;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{Bins, OutputKind, SpectrumDelay, Synchronous, POLS};
use crate::signal::weights::FilterDesign;
use crate::signal::{dither, gain, unpack, weights};

fn skip(why: &str) {
    println!("skipped: no CUDA device ({why})");
}

/// A CUDA backend, or None (after saying so) where this host has no CUDA.
fn cuda(g: &Channelisation) -> Option<CudaBackend> {
    cuda_tuned(g, Tuning::default())
}

/// As [`cuda`], with launch choices other than the defaults.
fn cuda_tuned(g: &Channelisation, tuning: Tuning) -> Option<CudaBackend> {
    match CudaBackend::with_tuning(&[*g], 0, tuning) {
        Ok(b) => Some(b),
        Err(BackendError::Unavailable(why)) => {
            skip(&why);
            None
        }
        Err(e) => panic!("CUDA backend for {g:?}: {e}"),
    }
}

/// A host copy of `frame`'s inputs, for the CPU backends.
fn host_copy(g: &Channelisation, frame: &Frame) -> Frame {
    let mut f = host_frame(g);
    copy_inputs(frame, &mut f);
    f
}

/// `from`'s samples, delays and timestamps into `to` (of the same geometry).
fn copy_inputs(from: &Frame, to: &mut Frame) {
    for pol in 0..POLS {
        to.input.chunk[pol].copy_from_slice(&from.input.chunk[pol]);
        to.outputs[0].delays[pol].clone_from(&from.outputs[0].delays[pol]);
    }
    to.input.timestamp = from.input.timestamp;
    to.outputs[0].timestamp = from.outputs[0].timestamp;
}

/// Frame `f` of a two-frame check: random noise, then random delays (f = 0) or nominal ones.
fn load_check_frame(
    rng: &mut rand::rngs::StdRng,
    g: &Channelisation,
    margin: usize,
    f: usize,
    frame: &mut Frame,
) {
    let bits = g.input.sample_bits;
    let s0 = noise(rng, bits, g.chunk_samples());
    let s1 = noise(rng, bits, g.chunk_samples());
    load_chunk(frame, bits, [&s0, &s1]);
    if f == 0 {
        random_delays(rng, g, margin, frame);
    } else {
        nominal_delays(g, margin, frame);
    }
}

/// Nominal delays: window of spectrum m at `margin + m 2n`, no fine delay or phase.
fn nominal_delays(g: &Channelisation, margin: usize, frame: &mut Frame) {
    for pol in 0..POLS {
        for (m, d) in frame.outputs[0].delays[pol].iter_mut().enumerate() {
            *d = SpectrumDelay {
                offset: (margin + m * g.step()) as u32,
                fine: 0.0,
                phase: 0.0,
            };
        }
    }
}

/// How one GPU frame compares with the reference and CPU backends.
#[derive(Clone, Debug, Default)]
struct Comparison {
    /// Output components.
    values: usize,
    /// Components differing from the float64 reference by 1 (more fails at once).
    off_by_one: usize,
    /// Components differing from the CPU backend.
    cpu_mismatch: usize,
    /// ... of which the CPU's float was not within `tol` of a rounding boundary: must be 0.
    cpu_mismatch_clear: usize,
    /// Components whose CPU float lies within `tol` of a rounding boundary.
    near_boundary: usize,
    /// The boundary margin used: float noise, from the CPU's own distance to the reference.
    tol: f64,
    /// |GPU - reference| saturation counts, against what boundary cases allow.
    saturation_gap: u64,
    saturation_allowed: u64,
}

impl Comparison {
    /// Prints the figures of `case` and holds them to the accuracy bar: under 0.1% of values off
    /// by one from the float64 reference, every difference from the CPU at a rounding boundary,
    /// saturation counts within what boundary cases allow.
    fn report_and_check(&self, case: &str) {
        println!(
            "{case}: off by one {} of {} ({:.4}%), {} differ from CPU ({} clear of a rounding \
             boundary), saturation gap {}/{}",
            self.off_by_one,
            self.values,
            100.0 * self.off_by_one as f64 / self.values as f64,
            self.cpu_mismatch,
            self.cpu_mismatch_clear,
            self.saturation_gap,
            self.saturation_allowed
        );
        assert!(
            (self.off_by_one as f64) < 1e-3 * self.values as f64,
            "{case}: {self:?}"
        );
        assert_eq!(self.cpu_mismatch_clear, 0, "{case}: {self:?}");
        assert!(
            self.saturation_gap <= self.saturation_allowed,
            "{case}: {self:?}"
        );
    }
}

/// Distance of `x` from the nearest rounding boundary (n + 1/2).
fn boundary_distance(x: f32) -> f64 {
    let a = (x as f64).abs();
    (a - a.floor() - 0.5).abs()
}

fn compare(
    g: &Channelisation,
    gpu: &Frame,
    reference: &Frame,
    ref_values: &[Complex64],
    cpu: &Frame,
    cpu_values: &[Complex32],
) -> Comparison {
    let bits = g.output.bits;
    let (go, ro, co) = (
        gpu.outputs[0].components(bits),
        reference.outputs[0].components(bits),
        cpu.outputs[0].components(bits),
    );
    let clamp_edge = g.limit() as f32 + 0.5;
    // Float noise: the CPU's worst distance from the float64 values, twice over (the GPU's float32
    // arithmetic differs in order, not in precision), and never under 1e-4.
    let cpu_err = ref_values
        .iter()
        .zip(cpu_values)
        .map(|(r, c)| (r.re - c.re as f64).abs().max((r.im - c.im as f64).abs()))
        .fold(0.0, f64::max);
    let tol = (4.0 * cpu_err).max(1e-4);
    let mut c = Comparison {
        values: go.len(),
        tol,
        ..Default::default()
    };
    let mut sat_boundary = [0u64; POLS];
    // Every element, with the dither it was rounded with (the same on every backend).
    let elements = (0..g.spectra_per_frame()).flat_map(|m| {
        let key = g.dither_key(gpu.outputs[0].timestamp, m);
        (0..POLS).flat_map(move |pol| {
            (0..g.output.channels).map(move |k| {
                let d = key.map_or([0.0; 2], |key| dither::value(key, k, pol));
                (g.output_index(m, pol, k), pol, d)
            })
        })
    });
    for (e, pol, d) in elements {
        let cv = cpu_values[e];
        let mut near_clamp = false;
        for (part, x) in [cv.re + d[0], cv.im + d[1]].into_iter().enumerate() {
            let i = 2 * e + part;
            let d = (go[i] as i32 - ro[i] as i32).abs();
            assert!(
                d <= 1,
                "output byte {i}: GPU {} vs reference {} (float {})",
                go[i],
                ro[i],
                x
            );
            c.off_by_one += usize::from(d == 1);
            let near = boundary_distance(x) <= tol;
            c.near_boundary += usize::from(near);
            near_clamp |= near && (x.abs() - clamp_edge).abs() <= tol as f32;
            if go[i] != co[i] {
                c.cpu_mismatch += 1;
                c.cpu_mismatch_clear += usize::from(!near);
            }
        }
        sat_boundary[pol] += u64::from(near_clamp);
    }
    for ((g, r), b) in gpu.outputs[0]
        .saturated
        .iter()
        .zip(&reference.outputs[0].saturated)
        .zip(sat_boundary)
    {
        c.saturation_gap += g.abs_diff(*r);
        c.saturation_allowed += b;
    }
    c
}

/// The default tuning with the two-pass kernels (`fused`) at every size they take, or the
/// three-pass ones everywhere.
fn kernel_set(fused: bool) -> Tuning {
    Tuning {
        fused,
        ..Tuning::default()
    }
}

/// The two-pass kernels with the split R x A taking up to 64 rows: at 65536 channels R = 64
/// and A = 1024 (the float16 rows' split) instead of the default 32 x 2048.
fn rows_up_to_64() -> Tuning {
    Tuning {
        fused_max_r: 64,
        ..kernel_set(true)
    }
}

/// [`check_tuned`] with a filter design of its own.
fn check_design(
    channels: usize,
    taps: usize,
    bits: u32,
    filter: FilterDesign,
) -> Option<Vec<Comparison>> {
    check_output(channels, taps, bits, |o| o.filter = filter)
}

/// [`check_tuned`] with the output changed by `output` (filter design, bits, dither).
fn check_output(
    channels: usize,
    taps: usize,
    bits: u32,
    output: impl Fn(&mut OutputGeometry),
) -> Option<Vec<Comparison>> {
    check_tuned(channels, taps, bits, Tuning::default(), output)
}

/// One stream through the GPU, reference and CPU backends: frame 1 with random coarse and fine
/// delays, phases and gains; frame 2 nominal with default gains (set between the frames).
fn check_tuned(
    channels: usize,
    taps: usize,
    bits: u32,
    tuning: Tuning,
    output: impl Fn(&mut OutputGeometry),
) -> Option<Vec<Comparison>> {
    let margin = 100;
    let mut g = geometry(channels, taps, bits, 7, 5, margin);
    output(&mut g.output);
    let mut gpu = cuda_tuned(&g, tuning)?;
    let mut reference = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
    let mut cpu = Synchronous::new(CpuBackend::new(g.input, &[g.output]).unwrap());
    let mut rng = rng((channels * 1000 + taps * 10) as u64 + bits as u64);
    let gains = random_gains(&mut rng, &g);
    let default = gain::default_gains(channels, bits, g.output.bits);
    let mut out = Vec::new();
    for f in 0..2 {
        for (pol, random) in gains.iter().enumerate() {
            let gain = if f == 0 { random } else { &default };
            gpu.set_gains(0, pol, gain).unwrap();
            reference.set_gains(0, pol, gain).unwrap();
            cpu.set_gains(0, pol, gain).unwrap();
        }
        let mut frame = gpu.alloc_frame().unwrap();
        load_check_frame(&mut rng, &g, margin, f, &mut frame);
        let mut rf = host_copy(&g, &frame);
        let mut cf = host_copy(&g, &frame);
        poison(&mut frame);
        gpu.submit(frame).unwrap();
        let frame = gpu.wait().unwrap().expect("a frame in flight");
        assert_written(&frame);
        let rv = reference.process_unquantised(&mut rf).unwrap();
        let cv = cpu.process_unquantised(&mut cf).unwrap();
        out.push(compare(&g, &frame, &rf, &rv, &cf, &cv));
    }
    Some(out)
}

#[test]
fn unavailable_is_an_error_not_a_panic() {
    let g = geometry(1024, 4, 10, 4, 1, 0);
    match CudaBackend::new(g.input, &[g.output], 0) {
        Ok(b) => println!("CUDA present: {}", b.device_name()),
        Err(BackendError::Unavailable(why)) => {
            assert!(!cuda_available());
            assert!(why.len() > 20, "a sentence: {why}");
            skip(&why);
        }
        Err(e) => panic!("{e}"),
    }
    // A GPU that does not exist is unavailable, not a panic.
    let g = geometry(1024, 4, 10, 4, 1, 0);
    assert!(matches!(
        CudaBackend::new(g.input, &[g.output], 4096),
        Err(BackendError::Unavailable(_))
    ));
}

/// NVRTC compiles every configuration of the matrix (needs libnvrtc only, not a GPU).
#[test]
fn kernels_compile_for_sm90() {
    // SAFETY: only tries to dlopen libnvrtc.
    if !std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
        .unwrap_or(false)
    {
        skip("libnvrtc not found");
        return;
    }
    let mut configs = Vec::new();
    for channels in [16, 1024, 65536] {
        for taps in [1, 4, 16, 32] {
            for bits in [8, 10, 12, 16] {
                // Narrowband kernels too, in a third of the cases (odd DDC lengths included).
                let decimation = [1, 8, 32][(taps + bits as usize) % 3];
                configs.push(kernels::Config {
                    channels,
                    taps,
                    sample_bits: bits,
                    spectra_per_heap: 256,
                    output_bits: if taps == 4 { 4 } else { 8 },
                    dither: bits != 12,
                    decimation,
                    ddc_taps: 12 * 8 + taps % 2,
                    nb_points: if decimation > 1 { 2 * channels } else { 0 },
                    tuning: Tuning::default(),
                });
            }
        }
    }
    // No-discard narrowband modules: the DDC subsampling by 2D = 16 through the remez filter's
    // 32 D = 256 taps, an n-point PFB keeping every bin, its FFT unzipped by 4 or not, both
    // output widths, dithered or not.
    for channels in [16, 64, 1024, 65536] {
        for bits in [8, 10, 12, 16] {
            configs.push(kernels::Config {
                channels,
                taps: 4,
                sample_bits: bits,
                spectra_per_heap: 256,
                output_bits: if bits == 10 { 4 } else { 8 },
                dither: bits != 12,
                decimation: 16,
                ddc_taps: 256,
                nb_points: channels,
                tuning: Tuning {
                    nb_unzip_from: if bits <= 10 { 0 } else { usize::MAX },
                    ..Tuning::default()
                },
            });
        }
    }
    // The two-pass kernels at every split R x A (R 8 to 64, A up to 2048), 4- and 8-bit output.
    for (channels, tuning) in [
        (2048, Tuning::default()),
        (8192, Tuning::default()),
        (16384, Tuning::default()),
        (32768, Tuning::default()),
        (65536, rows_up_to_64()),
    ] {
        configs.push(kernels::Config {
            channels,
            taps: 16,
            sample_bits: 10,
            spectra_per_heap: 256,
            output_bits: if channels == 8192 { 4 } else { 8 },
            dither: channels == 32768,
            decimation: 1,
            ddc_taps: 0,
            nb_points: 0,
            tuning,
        });
    }
    // fused_fir's samples by tensor copy, at every sample width (R = 16 and 32).
    for (channels, bits) in [(4096, 8), (32768, 10), (32768, 12), (65536, 16)] {
        configs.push(kernels::Config {
            channels,
            taps: 16,
            sample_bits: bits,
            spectra_per_heap: 256,
            output_bits: 8,
            dither: false,
            decimation: 1,
            ddc_taps: 0,
            nb_points: 0,
            tuning: Tuning {
                fused_fir_tma: true,
                fused_fir_ahead: Some(0),
                ..Tuning::default()
            },
        });
    }
    // fused_post with every barrier its group's (the row barriers off).
    for channels in [1024, 8192, 32768, 65536] {
        configs.push(kernels::Config {
            channels,
            taps: 16,
            sample_bits: 10,
            spectra_per_heap: 256,
            output_bits: 8,
            dither: channels == 65536,
            decimation: 1,
            ddc_taps: 0,
            nb_points: 0,
            tuning: Tuning {
                fused_post_row_sync: false,
                ..Tuning::default()
            },
        });
    }
    // And with float16 rows.
    for channels in [1024, 32768, 65536] {
        configs.push(kernels::Config {
            channels,
            taps: 16,
            sample_bits: 10,
            spectra_per_heap: 256,
            output_bits: 8,
            dither: channels == 1024,
            decimation: 1,
            ddc_taps: 0,
            nb_points: 0,
            tuning: Tuning::half_rows(),
        });
    }
    configs.par_iter().for_each(|cfg| {
        let cubin = compile_cubin(&kernels::source(cfg), "sm_90")
            .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        assert!(cubin.len() > 1000);
    });
    // The narrowband DDCs in one launch, each decimation, an odd length and a pair of one shape,
    // and a pair of no-discard ones (subsampling 16, 256 taps), at every width the tensor cores
    // take.
    [8, 10, 12].par_iter().for_each(|&bits| {
        let set: Vec<kernels::Config> = [
            (8, 96, 2048),
            (16, 192, 2048),
            (32, 384, 2048),
            (8, 97, 2048),
            (8, 96, 2048),
            (16, 256, 1024),
            (16, 256, 1024),
        ]
        .map(|(decimation, ddc_taps, nb_points)| kernels::Config {
            channels: 1024,
            taps: 16,
            sample_bits: bits,
            spectra_per_heap: 256,
            output_bits: 8,
            dither: true,
            decimation,
            ddc_taps,
            nb_points,
            tuning: Tuning::default(),
        })
        .into();
        let src = kernels::ddc_set_source(&set.iter().collect::<Vec<_>>()).unwrap();
        let cubin = compile_cubin(&src, "sm_90").unwrap_or_else(|e| panic!("{bits}-bit set: {e}"));
        assert!(cubin.len() > 1000);
    });
}

/// The acceptance matrix: every channel count, tap count and sample width, with and without
/// delays, through both kernel sets (two passes, the default, and three).
#[test]
fn matches_reference_and_cpu() {
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    let mut configs = Vec::new();
    for channels in [1024, 4096, 8192, 32768, 65536] {
        for taps in [4, 16, 32] {
            for bits in [8, 10, 12, 16] {
                for (what, tuning) in [("2-pass", kernel_set(true)), ("3-pass", kernel_set(false))]
                {
                    configs.push((channels, taps, bits, what, tuning));
                }
                // At 65536 channels, the other split too (R = 64, A = 1024).
                if channels == 65536 && taps == 16 {
                    configs.push((channels, taps, bits, "2-pass, R = 64", rows_up_to_64()));
                }
            }
        }
    }
    let results: Vec<_> = configs
        .par_iter()
        .with_max_len(1)
        .map(|(n, t, b, what, tuning)| {
            let frames = check_tuned(*n, *t, *b, *tuning, |_| ()).expect("CUDA was present");
            ((*n, *t, *b, *what), frames)
        })
        .collect();
    println!("channels taps bits kernels | frame: off-by-1 vs f64 | GPU != CPU (clear of boundary) | near boundary, tol | sat gap/allowed");
    let (mut values, mut ones, mut clear, mut mism) = (0, 0, 0, 0);
    for ((n, t, b, k), frames) in &results {
        for (f, c) in frames.iter().enumerate() {
            println!(
                "{n:>8} {t:>4} {b:>4} {k} | {f}: {:>8} ({:.4}%) | {:>6} ({}) | {:>6}, {:.1e} | {}/{}",
                c.off_by_one,
                100.0 * c.off_by_one as f64 / c.values as f64,
                c.cpu_mismatch,
                c.cpu_mismatch_clear,
                c.near_boundary,
                c.tol,
                c.saturation_gap,
                c.saturation_allowed
            );
            values += c.values;
            ones += c.off_by_one;
            clear += c.cpu_mismatch_clear;
            mism += c.cpu_mismatch;
        }
    }
    println!(
        "total: {values} components, {ones} off by one vs float64 ({:.5}%), {mism} differ from CPU, {clear} of them clear of a rounding boundary",
        100.0 * ones as f64 / values as f64
    );
    for ((n, t, b, k), frames) in &results {
        for (f, c) in frames.iter().enumerate() {
            assert!(
                (c.off_by_one as f64) < 1e-3 * c.values as f64,
                "{n} ch {t} taps {b} bits {k} frame {f}: {c:?}"
            );
            assert_eq!(
                c.cpu_mismatch_clear, 0,
                "{n} ch {t} taps {b} bits {k} frame {f}: {c:?}"
            );
            assert!(
                c.saturation_gap <= c.saturation_allowed,
                "{n} ch {t} taps {b} bits {k} frame {f}: {c:?}"
            );
        }
    }
}

/// The other filter designs (rectangular taper, other cutoffs, one tap: a plain FFT) against
/// the float64 reference and the CPU backend, as the acceptance matrix.
#[test]
fn filter_designs_match_reference_and_cpu() {
    use crate::signal::weights::WindowFunction::{Hann, Rect};
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    for (channels, taps, window, w_cutoff) in [
        (1024, 1, Rect, 0.0),
        (32768, 1, Rect, 0.0),
        (4096, 16, Rect, 1.0),
        (8192, 4, Hann, 0.75),
        (65536, 1, Hann, 1.0),
    ] {
        let filter = FilterDesign { window, w_cutoff };
        let frames = check_design(channels, taps, 10, filter).expect("CUDA was present");
        for (f, c) in frames.iter().enumerate() {
            c.report_and_check(&format!("{channels} ch {taps} taps {filter:?} frame {f}"));
        }
    }
}

/// Dithered and 4-bit outputs against the float64 reference and the CPU backend: the same
/// counter-based dither on every backend, 4-bit values packed in nibbles and clamped at 7.
#[test]
fn dither_and_four_bits_match_reference_and_cpu() {
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    for (channels, taps, bits, dither) in [
        (1024, 16, 8u32, Some(1u32)),
        (32768, 16, 8, Some(2)),
        (4096, 16, 4, None),
        (8192, 4, 4, Some(3)),
        (65536, 16, 4, Some(4)),
    ] {
        let output = |o: &mut OutputGeometry| {
            o.bits = bits;
            o.dither = dither;
        };
        for fused in [false, true] {
            let frames = check_tuned(channels, taps, 10, kernel_set(fused), output)
                .expect("CUDA was present");
            for (f, c) in frames.iter().enumerate() {
                let case = format!(
                    "{channels} ch {taps} taps {bits}-bit output, dither {dither:?}, {} passes",
                    if fused { 2 } else { 3 }
                );
                c.report_and_check(&format!("{case}, frame {f}"));
            }
        }
    }
}

/// The input sensors on the GPU: the chunk's exact sum of squares and full-scale count.
#[test]
fn input_power_is_measured_exactly() {
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    check_input_power(&|g| Box::new(cuda(g).expect("CUDA was present")));
}

/// The dither requirement on the GPU: a 0.3 LSB tone over 10^5 spectra.
#[test]
fn dither_recovers_a_weak_tone() {
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    check_dither_unbiased(&|g| Box::new(cuda(g).expect("CUDA was present")));
}

/// A CUDA backend of its own for these outputs.
fn own_cuda(i: InputGeometry, o: &[OutputGeometry]) -> Box<dyn Backend> {
    Box::new(CudaBackend::new(i, o, 0).expect("CUDA backend"))
}

/// The float64 reference for these outputs.
fn float64_reference(i: InputGeometry, o: &[OutputGeometry]) -> Box<dyn Backend> {
    Box::new(Synchronous::new(
        ReferenceBackend::new(i, o).expect("reference"),
    ))
}

/// What each output of a set is held to: byte for byte a CUDA backend of its own, and within
/// 1 LSB of the float64 reference.
const AS_ALONE_AND_REFERENCE: [(Make<'static>, Agreement); 2] = [
    (&own_cuda, Agreement::Exact),
    (&float64_reference, Agreement::OneLsb),
];

/// One input, several outputs of different shapes (channels, taps, window, 4- and 8-bit,
/// dithered or not): each output's bytes are exactly those of a CUDA backend built for it alone,
/// and within 1 LSB of the float64 reference (under 0.1% of values); the input is measured once.
#[test]
fn outputs_share_one_input_as_if_alone() {
    let (input, outputs) = three_outputs(16);
    if cuda(&Channelisation::new(input, outputs[0])).is_none() {
        return;
    }
    check_outputs_as_if_alone(&own_cuda, &AS_ALONE_AND_REFERENCE, true);
}

/// Beside a wideband output, narrowband ones (each frame's own mixer word) come out exactly as
/// from a CUDA backend of their own and within 1 LSB of the float64 reference; a new mixer word
/// takes effect from its frame; bad narrowband shapes and frames are refused with a sentence.
#[test]
fn narrowband_beside_wideband_as_if_alone() {
    let (input, outputs) = three_outputs(16);
    if cuda(&Channelisation::new(input, outputs[0])).is_none() {
        return;
    }
    check_mixed_outputs_as_if_alone(&own_cuda, &AS_ALONE_AND_REFERENCE, true);
    check_mixer_change(&own_cuda);
    check_narrowband_refusals(&|i, o| {
        CudaBackend::new(i, o, 0).map(|b| Box::new(b) as Box<dyn Backend>)
    });
}

/// A wideband output the two-pass kernels take (1024 channels, 16 taps) beside a narrowband
/// output and a small wideband one (three passes): each byte for byte what a backend of its own
/// makes, and within one LSB of the float64 reference.
#[test]
fn two_pass_output_beside_others_as_if_alone() {
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    let (_, three) = three_outputs(0);
    let two_pass = OutputGeometry {
        channels: 1024,
        taps: 16,
        ..three[0]
    };
    let narrowband = OutputGeometry {
        bits: 4,
        ..narrowband_output(64, 4, 8, 4)
    };
    check_set_as_if_alone(
        &own_cuda,
        &AS_ALONE_AND_REFERENCE,
        true,
        "two passes beside others",
        vec![two_pass, narrowband, three[0]],
        16384,
    );
}

/// From 1 to 8 outputs are served, none or nine refused with a sentence.
#[test]
fn output_counts_are_checked() {
    let (input, outputs) = three_outputs(16);
    if cuda(&Channelisation::new(input, outputs[0])).is_none() {
        return;
    }
    check_output_counts(&|i, o| CudaBackend::new(i, o, 0).map(|b| Box::new(b) as Box<dyn Backend>));
}

/// The two passes' launch shapes change only who computes what, so each gives the same bytes as
/// the defaults: in chunks (each chunk's rows in a ring slot, post-processed on a stream of its
/// own; a last chunk shorter than the rest, 104 = 3 x 32 + 8, and the ring of 3 slots wrapping
/// within a frame), other `fused_fir` columns and sample loads, other `fused_post` tiles.
/// Frames in flight, random delays, a dithered output.
#[test]
fn fused_launch_shapes_give_the_same_bytes() {
    let shapes = [
        (
            4096,
            8,
            13,
            "chunks of 32",
            Tuning {
                fused_chunk: 32,
                ..Tuning::default()
            },
        ),
        (
            4096,
            8,
            13,
            "16 columns, a tile of 2048",
            Tuning {
                fused_fir_columns: 16,
                fused_tile: 2048,
                ..Tuning::default()
            },
        ),
        (
            2048,
            8,
            13,
            "each sample pair from its own offset",
            Tuning {
                fused_fir_word_steps: Some(false),
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "sample pairs at word steps",
            Tuning {
                fused_fir_word_steps: Some(true),
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "chunks of 16",
            Tuning {
                fused_chunk: 16,
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "4 columns, a tile of 8192",
            Tuning {
                fused_fir_columns: 4,
                fused_tile: 8192,
                ..Tuning::default()
            },
        ),
        (
            65536,
            16,
            4,
            "4 columns, a tile of 16384 (4 spectra where A = 2048)",
            Tuning {
                fused_fir_columns: 4,
                fused_tile: 16384,
                ..Tuning::default()
            },
        ),
        (
            2048,
            8,
            13,
            "no sample pair loaded a batch ahead, nor tensor copies",
            Tuning {
                fused_fir_ahead: Some(0),
                fused_fir_tma: false,
                ..Tuning::default()
            },
        ),
        (
            2048,
            8,
            13,
            "every sample pair loaded a batch ahead",
            Tuning {
                fused_fir_ahead: Some(16),
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "6 sample pairs loaded a batch ahead",
            Tuning {
                fused_fir_ahead: Some(6),
                ..Tuning::default()
            },
        ),
        (
            4096,
            8,
            13,
            "rows prefetched into L2",
            Tuning {
                fused_post_prefetch: Some(1),
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "rows not prefetched",
            Tuning {
                fused_post_prefetch: Some(0),
                ..Tuning::default()
            },
        ),
        (
            65536,
            16,
            4,
            "rows prefetched 2 steps ahead",
            Tuning {
                fused_post_prefetch: Some(2),
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "samples by each thread's loads, not tensor copies",
            Tuning {
                fused_fir_tma: false,
                ..Tuning::default()
            },
        ),
        (
            65536,
            16,
            4,
            "samples by each thread's loads, not tensor copies",
            Tuning {
                fused_fir_tma: false,
                ..Tuning::default()
            },
        ),
        (
            2048,
            8,
            13,
            "samples by tensor copy, no pairs ahead",
            Tuning {
                fused_fir_tma: true,
                fused_fir_ahead: Some(0),
                ..Tuning::default()
            },
        ),
        (
            4096,
            8,
            13,
            "every fused_post barrier its group's",
            Tuning {
                fused_post_row_sync: false,
                ..Tuning::default()
            },
        ),
        (
            8192,
            16,
            4,
            "every fused_post barrier its group's",
            Tuning {
                fused_post_row_sync: false,
                ..Tuning::default()
            },
        ),
        (
            65536,
            16,
            4,
            "every fused_post barrier its group's",
            Tuning {
                fused_post_row_sync: false,
                ..Tuning::default()
            },
        ),
        (
            65536,
            16,
            4,
            "blocks of 64 spectra",
            Tuning {
                fused_fir_spectra: 64,
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "fused_post's operands a channel at a time, none ahead",
            Tuning {
                fused_post_gather: 1,
                fused_post_ahead: Some(false),
                ..Tuning::default()
            },
        ),
        (
            65536,
            16,
            4,
            "fused_post's operands 2 channels at a time, 2 ahead",
            Tuning {
                fused_post_gather: 2,
                fused_post_ahead: Some(true),
                ..Tuning::default()
            },
        ),
        (
            2048,
            8,
            13,
            "fused_post's operands 4 channels at a time, none ahead",
            Tuning {
                fused_post_gather: 4,
                fused_post_ahead: Some(false),
                ..Tuning::default()
            },
        ),
        (
            32768,
            16,
            4,
            "fused_post's row loads all a step early",
            Tuning {
                fused_post_early: Some(16),
                ..Tuning::default()
            },
        ),
        (
            1024,
            8,
            13,
            "fused_post's row loads 8 a step early",
            Tuning {
                fused_post_early: Some(8),
                ..Tuning::default()
            },
        ),
    ];
    for (channels, s, h, what, shaped) in shapes {
        let margin = 1000;
        let mut g = geometry(channels, 16, 10, s, h, margin);
        g.output.dither = Some(5);
        let whole = kernel_set(true);
        let Some(mut a) = cuda_tuned(&g, whole) else {
            return;
        };
        let mut b = cuda_tuned(&g, shaped).expect("CUDA was present");
        let mut rng = rng(channels as u64 + 5);
        let gains = random_gains(&mut rng, &g);
        for (pol, gain) in gains.iter().enumerate() {
            a.set_gains(0, pol, gain).unwrap();
            b.set_gains(0, pol, gain).unwrap();
        }
        let frames = a.max_in_flight() + 3;
        let compare = |fa: Frame, fb: Frame| {
            assert_written(&fa);
            assert_eq!(fa.input.timestamp, fb.input.timestamp);
            assert!(
                fa.outputs[0].heaps[..] == fb.outputs[0].heaps[..],
                "{channels} channels, {what}: the bytes differ from the defaults'"
            );
            assert_eq!(fa.outputs[0].saturated, fb.outputs[0].saturated);
        };
        for f in 0..frames {
            if f >= a.max_in_flight() {
                compare(a.wait().unwrap().unwrap(), b.wait().unwrap().unwrap());
            }
            let mut fa = a.alloc_frame().unwrap();
            let s0 = noise(&mut rng, 10, g.chunk_samples());
            let s1 = noise(&mut rng, 10, g.chunk_samples());
            load_chunk(&mut fa, 10, [&s0, &s1]);
            fa.input.timestamp = (f * g.chunk_samples()) as u64;
            random_delays(&mut rng, &g, margin, &mut fa);
            let mut fb = b.alloc_frame().unwrap();
            load_chunk(&mut fb, 10, [&s0, &s1]);
            fb.input.timestamp = fa.input.timestamp;
            fb.outputs[0].delays = fa.outputs[0].delays.clone();
            fb.outputs[0].timestamp = fa.outputs[0].timestamp; // the dither's key
            poison(&mut fa);
            poison(&mut fb);
            a.submit(fa).unwrap();
            b.submit(fb).unwrap();
        }
        while let Some(fa) = a.wait().unwrap() {
            compare(fa, b.wait().unwrap().unwrap());
        }
        println!(
            "{channels} channels, {} spectra a frame, {what}: {frames} frames identical",
            g.spectra_per_frame()
        );
    }
}

/// Float16 rows (`--fft-precision half`) against their float64 model (`signal::half_rows`: the
/// reference with the rows rounded where the kernels round them): at most 1 LSB apart in under
/// 0.1% of values, as the float32 paths are held to the plain reference. The same frames through
/// the float32 two-pass kernels measure what float16 costs: the output's error power against the
/// unrounded float64 values (rounding included), float16 over float32, in dB.
#[test]
fn half_rows_match_their_float64_model() {
    if let Err(e) = probe(0) {
        return skip(&e.to_string());
    }
    println!("channels taps bits out R | frame: off-by-1 vs model | vs float64 | error power f32, f16 (LSB^2) | loss");
    // The last: 65536 channels split 64 x 1024 instead of the default 32 x 2048.
    let cases: [(usize, usize, u32, u32, bool, usize); 8] = [
        (1024, 16, 10, 8, false, 0),
        (4096, 4, 8, 8, false, 0),
        (8192, 16, 10, 4, true, 0),
        (16384, 32, 12, 8, false, 0),
        (32768, 16, 10, 8, false, 0),
        (32768, 16, 16, 8, true, 0),
        (65536, 16, 10, 8, false, 0),
        (65536, 16, 10, 8, true, 64),
    ];
    for (channels, taps, bits, out_bits, dithered, max_r) in cases {
        let half_tuning = Tuning {
            fused_max_r: max_r,
            ..Tuning::half_rows()
        };
        let margin = 100;
        let mut g = geometry(channels, taps, bits, 7, 5, margin);
        g.output.bits = out_bits;
        g.output.dither = dithered.then_some(99);
        let (Some(mut half), Some(mut single)) = (
            cuda_tuned(&g, half_tuning),
            cuda_tuned(&g, kernel_set(true)),
        ) else {
            return;
        };
        let mut modelled = ReferenceBackend::new(g.input, &[g.output]).unwrap();
        let (r, _) = kernels::fused_split(channels, &half_tuning);
        modelled.model_half_rows(0, r).unwrap();
        let mut modelled = Synchronous::new(modelled);
        let mut plain = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut rng = rng((channels * 1000 + taps * 10) as u64 + bits as u64 + 7);
        let gains = random_gains(&mut rng, &g);
        let default = gain::default_gains(channels, bits, out_bits);
        for f in 0..2 {
            for (pol, random) in gains.iter().enumerate() {
                let gain = if f == 0 { random } else { &default };
                half.set_gains(0, pol, gain).unwrap();
                single.set_gains(0, pol, gain).unwrap();
                modelled.set_gains(0, pol, gain).unwrap();
                plain.set_gains(0, pol, gain).unwrap();
            }
            let mut frame = half.alloc_frame().unwrap();
            load_check_frame(&mut rng, &g, margin, f, &mut frame);
            let mut mf = host_copy(&g, &frame);
            let mut pf = host_copy(&g, &frame);
            let mut sf = single.alloc_frame().unwrap();
            copy_inputs(&frame, &mut sf);
            poison(&mut frame);
            poison(&mut sf);
            half.submit(frame).unwrap();
            single.submit(sf).unwrap();
            let hf = half.wait().unwrap().expect("a frame in flight");
            let sf = single.wait().unwrap().expect("a frame in flight");
            assert_written(&hf);
            let mv = modelled.process_unquantised(&mut mf).unwrap();
            let pv = plain.process_unquantised(&mut pf).unwrap();
            // The model as both "reference" and "CPU": the CPU figures are not the bar here.
            let mv32: Vec<Complex32> = mv
                .iter()
                .map(|v| Complex32::new(v.re as f32, v.im as f32))
                .collect();
            let c = compare(&g, &hf, &mf, &mv, &mf, &mv32);
            let pv32: Vec<Complex32> = pv
                .iter()
                .map(|v| Complex32::new(v.re as f32, v.im as f32))
                .collect();
            let vs_plain = compare(&g, &hf, &pf, &pv, &pf, &pv32);
            let (e32, e16) = (error_power(&g, &sf, &pv), error_power(&g, &hf, &pv));
            let loss = 10.0 * (e16 / e32).log10();
            println!(
                "{channels:>8} {taps:>4} {bits:>4} {out_bits}{} R {r} | {f}: {:>6} of {} ({:.4}%) | {:>6} ({:.4}%) | {e32:.5}, {e16:.5} | {loss:.4} dB",
                if dithered { "d" } else { " " },
                c.off_by_one,
                c.values,
                100.0 * c.off_by_one as f64 / c.values as f64,
                vs_plain.off_by_one,
                100.0 * vs_plain.off_by_one as f64 / vs_plain.values as f64,
            );
            let case = format!("{channels} ch ({r} rows) {taps} taps {bits} bits frame {f}");
            assert!(
                (c.off_by_one as f64) < 1e-3 * c.values as f64,
                "{case}: {c:?}"
            );
            assert!(c.saturation_gap <= c.saturation_allowed, "{case}: {c:?}");
            assert!(loss < 0.05, "{case}: float16 rows cost {loss:.3} dB");
        }
    }
}

/// Mean squared error, in output LSB^2 per component, of `gpu`'s output against the unrounded
/// float64 values `exact` (less the dither each value was rounded with), over unsaturated values.
fn error_power(g: &Channelisation, gpu: &Frame, exact: &[Complex64]) -> f64 {
    let bits = g.output.bits;
    let out = gpu.outputs[0].components(bits);
    let limit = g.limit() as f64;
    let (mut sum, mut count) = (0.0, 0usize);
    for m in 0..g.spectra_per_frame() {
        for pol in 0..POLS {
            for k in 0..g.output.channels {
                let e = g.output_index(m, pol, k);
                for (part, x) in [exact[e].re, exact[e].im].into_iter().enumerate() {
                    if x.abs() < limit {
                        sum += (out[2 * e + part] as f64 - x).powi(2);
                        count += 1;
                    }
                }
            }
        }
    }
    sum / count as f64
}

/// Consecutive frames, several in flight, more frames than slots, random delays reaching into the
/// overlap: each frame's span starts with the previous span's tail, through
/// two wraps of the span ring (where the overlap is copied). Also a chunk shorter than the
/// overlap, where the tail includes the previous frame's own overlap.
#[test]
fn frames_carry_the_overlap() {
    for (channels, taps, s, h) in [(1024, 16, 8, 3), (4096, 16, 1, 1)] {
        let margin = 2000;
        let g = geometry(channels, taps, 10, s, h, margin);
        let Some(mut gpu) = cuda(&g) else { return };
        assert!(gpu.max_in_flight() >= 3);
        let mut reference = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
        let mut rng = rng(channels as u64 + 77);
        let gains = random_gains(&mut rng, &g);
        for (pol, gain) in gains.iter().enumerate() {
            gpu.set_gains(0, pol, gain).unwrap();
            reference.set_gains(0, pol, gain).unwrap();
        }
        let frames = 2 * gpu.pipeline.ring_frames() + 2;
        let mut expected = std::collections::VecDeque::new();
        let (mut waited, mut ones, mut values) = (0, 0, 0);
        for f in 0..frames {
            let mut frame = gpu.alloc_frame().unwrap();
            let s0 = noise(&mut rng, 10, g.chunk_samples());
            let s1 = noise(&mut rng, 10, g.chunk_samples());
            load_chunk(&mut frame, 10, [&s0, &s1]);
            frame.input.timestamp = (f * g.chunk_samples()) as u64;
            random_delays(&mut rng, &g, margin, &mut frame);
            let mut rf = host_copy(&g, &frame);
            reference.process_unquantised(&mut rf).unwrap();
            expected.push_back(rf);
            poison(&mut frame);
            if f >= gpu.max_in_flight() {
                let done = gpu.wait().unwrap().unwrap();
                let want = expected.pop_front().unwrap();
                assert_written(&done);
                let (o, v) = int8_differences(
                    &done.outputs[0].components(8),
                    &want.outputs[0].components(8),
                );
                assert_eq!(done.input.timestamp, want.input.timestamp);
                ones += o;
                values += v;
                waited += 1;
            }
            gpu.submit(frame).unwrap();
        }
        while let Some(done) = gpu.wait().unwrap() {
            let want = expected.pop_front().unwrap();
            assert_written(&done);
            let (o, v) = int8_differences(
                &done.outputs[0].components(8),
                &want.outputs[0].components(8),
            );
            ones += o;
            values += v;
            waited += 1;
        }
        assert_eq!(waited, frames);
        println!("{channels} ch, chunk {} / overlap {} samples: {frames} frames, {ones} of {values} off by one", g.chunk_samples(), g.input.overlap_samples);
        assert!((ones as f64) < 1e-3 * values as f64);
    }
}

#[test]
fn misuse_is_an_error() {
    let g = geometry(1024, 4, 8, 2, 1, 8);
    let Some(mut gpu) = cuda(&g) else { return };
    assert!(gpu.wait().unwrap().is_none());
    let mut f = gpu.alloc_frame().unwrap();
    f.outputs[0].delays[1][0].offset = g.max_offset() as u32 + 1;
    assert!(matches!(gpu.submit(f), Err(BackendError::Misuse(_))));
    for _ in 0..gpu.max_in_flight() {
        gpu.submit(gpu.alloc_frame().unwrap()).unwrap();
    }
    assert!(matches!(
        gpu.submit(gpu.alloc_frame().unwrap()),
        Err(BackendError::Misuse(_))
    ));
    assert!(gpu.set_gains(0, 0, &[Complex32::new(1.0, 0.0); 3]).is_err());
    while gpu.wait().unwrap().is_some() {}
    // Ordinary (unpinned) host frames work too.
    let mut f = host_frame(&g);
    nominal_delays(&g, 8, &mut f);
    poison(&mut f);
    gpu.submit(f).unwrap();
    assert_written(&gpu.wait().unwrap().unwrap());
}

/// Paper, Fig. 6: a full-scale tone at a channel centre, quantised to 10 bits with uniform dither,
/// averaged (as voltages) over many spectra. Float32 rounding in the FFT is data-dependent and
/// would show as spurs; we require every channel away from the tone to be below -100 dB.
/// Other channels get a high gain so that small spurs survive 8-bit quantisation (the noise from
/// the dither keeps that quantisation unbiased); results are divided by the gains.
/// Both kernel sets: three passes (cuFFT) and two (our own FFT).
/// And with float16 rows (`--fft-precision half`), rounded stochastically: rounded to nearest
/// they measured -96.0 dB, which this bar fails (kernels/HISTORY.md, "Float16 rows").
#[test]
fn dithered_tone_has_no_spurs() {
    for (tuning, what) in [
        (kernel_set(false), "3 passes"),
        (kernel_set(true), "2 passes"),
        (Tuning::half_rows(), "2 passes, float16 rows"),
    ] {
        if let Some(worst) = tone_spurs(tuning, what) {
            assert!(
                worst.0 < -100.0,
                "{what}: spur at {:.1} dB in channel {}",
                worst.0,
                worst.1
            );
        }
    }
}

/// The worst spur (dB, channel) of a dithered tone through `tuning`'s kernels, or None without
/// CUDA.
fn tone_spurs(tuning: Tuning, what: &str) -> Option<(f64, usize)> {
    let (channels, taps, tone) = (1024usize, 16usize, 192usize);
    let (s, h, frames) = (256, 32, 4); // 32768 spectra
    let mut g = geometry(channels, taps, 10, s, h, 0);
    g.input.overlap_samples = (taps - 1) * 2 * channels;
    let mut gpu = cuda_tuned(&g, tuning)?;
    let w = weights::default_weights(channels, taps).unwrap();
    let amp = 500.0f64; // of 511
    let tone_x = amp / 2.0 * weights::dc_gain(&w);
    // Channels where the filter itself leaks more than -130 dB are not spurs: give them a gain that
    // keeps the tone in range and leave them out of the search.
    let near: Vec<bool> = (0..channels)
        .map(|k| weights::response_db(&w, channels, k as f64 - tone as f64) > -130.0)
        .collect();
    let (g_low, g_high) = (100.0 / tone_x, 40.0);
    let gains: Vec<Complex32> = near
        .iter()
        .map(|&nr| Complex32::new(if nr { g_low } else { g_high } as f32, 0.0))
        .collect();
    for pol in 0..POLS {
        gpu.set_gains(0, pol, &gains).unwrap();
    }
    let mut rng = rng(2023);
    let step = g.step();
    let mut sum = vec![Complex64::new(0.0, 0.0); POLS * channels];
    let mut count = 0usize;
    let mut samples = vec![0i16; g.chunk_samples()];
    for f in 0..frames {
        let mut frame = gpu.alloc_frame().unwrap();
        for pol in 0..POLS {
            for (i, v) in samples.iter_mut().enumerate() {
                let t = (f * g.chunk_samples() + i) as f64;
                let x = amp * (2.0 * std::f64::consts::PI * tone as f64 * t / step as f64).cos();
                // Uniform dither of one LSB, then round: the error is white and independent of x.
                *v = (x + rand::Rng::random_range(&mut rng, -0.5..0.5))
                    .round()
                    .clamp(-512.0, 511.0) as i16;
            }
            unpack::pack(&samples, 10, &mut frame.input.chunk[pol]).unwrap();
            // Window m starts m 2n into the span; frame 0's first T-1 windows reach into the
            // silent overlap and are left out below.
            for (m, d) in frame.outputs[0].delays[pol].iter_mut().enumerate() {
                *d = SpectrumDelay {
                    offset: (m * step) as u32,
                    fine: 0.0,
                    phase: 0.0,
                };
            }
        }
        gpu.submit(frame).unwrap();
        let frame = gpu.wait().unwrap().unwrap();
        let out = frame.outputs[0].heaps_i8();
        let first = if f == 0 { taps - 1 } else { 0 };
        for m in first..g.spectra_per_frame() {
            for pol in 0..POLS {
                for k in 0..channels {
                    let e = g.output_index(m, pol, k);
                    sum[pol * channels + k] +=
                        Complex64::new(out[2 * e] as f64, out[2 * e + 1] as f64)
                            / gains[k].re as f64;
                }
            }
            count += 1;
        }
    }
    let mut worst = (f64::NEG_INFINITY, 0usize);
    let mut tone_level = [0.0; POLS];
    for pol in 0..POLS {
        let avg = |k: usize| sum[pol * channels + k].norm() / count as f64;
        tone_level[pol] = avg(tone);
        for k in (1..channels).filter(|&k| !near[k]) {
            let db = 20.0 * (avg(k) / avg(tone)).log10();
            if db > worst.0 {
                worst = (db, k);
            }
        }
    }
    println!(
        "{what}: dithered 10-bit tone in channel {tone} of {channels}, {count} spectra averaged: tone {:.1} ({:.1} predicted), worst spur {:.1} dB (channel {})",
        tone_level[0], tone_x, worst.0, worst.1
    );
    assert!(
        (tone_level[0] / tone_x - 1.0).abs() < 1e-2,
        "{what}: tone level"
    );
    Some(worst)
}

/// A narrowband output (DDC, complex PFB, centre half of the bins, rotation about the centre)
/// against the float64 narrowband oracle (`signal::narrowband::NarrowbandReference`), spectrum
/// by spectrum over consecutive frames at timestamps near 2^40 (the mixer's phase), with random
/// window moves, residual delays and phases: at most 1 LSB apart, in under 0.1% of values.
#[test]
fn narrowband_matches_the_float64_oracle() {
    // The last has 66000 spectra a frame, more than a grid's 65535 rows.
    let cases = [
        (256, 4, 8, 10, 4),
        (64, 8, 16, 8, 4),
        (128, 2, 32, 12, 4),
        (64, 4, 8, 16, 4),
        (16, 2, 8, 10, 33000),
    ];
    check_against_narrowband_oracle(&cases, Bins::CentreHalf);
}

/// A no-discard (VLBI) narrowband output (the DDC subsampling by 2D through the remez filter of
/// 32 D taps, an n-point PFB, every bin kept) against the float64 oracle as
/// [`narrowband_matches_the_float64_oracle`] checks the kind with discard: D 8 (the one a
/// no-discard output takes), 16 to 256 channels, 2 to 8 taps, 8- to 16-bit input; residuals r'
/// over their whole range, up to D ADC samples (half a subsampled sample) either way.
#[test]
fn no_discard_matches_the_float64_oracle() {
    let pass = crate::signal::no_discard::PassBand {
        fraction: 0.6,
        weight: crate::signal::no_discard::DEFAULT_WEIGHT_PASS,
    };
    // The last has 66000 spectra a frame, more than a grid's 65535 rows.
    let cases = [
        (256, 4, 8, 10, 4),
        (64, 8, 8, 8, 4),
        (128, 2, 8, 12, 4),
        (64, 4, 8, 16, 4),
        (16, 2, 8, 10, 33000),
    ];
    check_against_narrowband_oracle(&cases, Bins::All(pass));
}

/// The oracle check of narrowband outputs keeping `bins`, for each case (channels, taps,
/// decimation, input bits, spectra per heap), with the DDC on the tensor cores and on the FMA
/// pipe (16-bit samples, not exact in float16, always take the FMA one).
fn check_against_narrowband_oracle(cases: &[(usize, usize, usize, u32, usize)], bins: Bins) {
    use crate::backend::Ddc;
    use crate::signal::ddc::mixer_word;
    use crate::signal::narrowband::{Narrowband, NarrowbandDelay, NarrowbandReference};
    use crate::signal::quantise::quantise_f64;
    use rand::Rng;

    for (&(channels, taps, decimation, bits, spectra_per_heap), ddc_mma) in
        cases.iter().flat_map(|c| [(c, true), (c, false)])
    {
        let dec = decimation;
        let ddc = Ddc::with_bins(dec, bins);
        // Windows start on the DDC's grid: S = D, or 2D without discard.
        let sub = ddc.subsampling();
        let output = OutputGeometry {
            channels,
            taps,
            spectra_per_heap,
            bits: 8,
            filter: Default::default(),
            dither: None,
            kind: OutputKind::Narrowband(ddc),
        };
        let (step, window) = (output.step(), output.window());
        let kmax = 8usize; // coarse moves of up to 8 subsampled samples either way
        let reach = sub as f32 / (2 * dec) as f32; // |r'| <= S / 2D: 1/2, or 1 without discard
        let overlap = (window - step + 2 * kmax * sub).next_multiple_of(8 * sub);
        let chunk = 2 * output.heap_samples();
        let input = InputGeometry {
            sample_bits: bits,
            chunk_samples: chunk,
            overlap_samples: overlap,
        };
        let g = Channelisation::new(input, output);
        // The tensor-core runs also unzip the FFT (at any size), the FMA ones do not.
        let tuning = Tuning {
            ddc_mma,
            nb_unzip_from: if ddc_mma { 0 } else { usize::MAX },
            ..Tuning::default()
        };
        let Some(mut gpu) = cuda_tuned(&g, tuning) else {
            return;
        };
        let word = mixer_word(0.21, 1.0, dec).unwrap();
        let geometry = Narrowband {
            ddc_taps: ddc.taps,
            bins,
            ..Narrowband::new(channels, taps, dec, word).unwrap()
        };
        let oracle = NarrowbandReference::new(geometry).unwrap();
        let gain = Complex32::new(1.5, -0.5);
        for pol in 0..POLS {
            gpu.set_gains(0, pol, &vec![gain; channels]).unwrap();
        }
        // Spectrum m of a frame at A: t0 = A - lag + m step, window at span offset
        // offset0 + m step - k S, inside the span for |k| <= kmax.
        let offset0 = kmax * sub;
        let lag = overlap - offset0;
        let mut rng = rng(channels as u64 + sub as u64);
        let first_chunk = (1u64 << 40).next_multiple_of(chunk as u64);
        // Every sample from the first span's start (its overlap: zeros, as on the device).
        let mut history: [Vec<f64>; POLS] = [vec![0.0; overlap], vec![0.0; overlap]];
        let (mut ones, mut values, mut worst) = (0usize, 0usize, 0i32);
        for f in 0..3u64 {
            let a = first_chunk + f * chunk as u64;
            let mut frame = gpu.alloc_frame().unwrap();
            let x = [noise(&mut rng, bits, chunk), noise(&mut rng, bits, chunk)];
            load_chunk(&mut frame, bits, [&x[0], &x[1]]);
            for pol in 0..POLS {
                history[pol].extend(x[pol].iter().map(|&v| v as f64));
            }
            frame.input.timestamp = a;
            let out = &mut frame.outputs[0];
            out.mixer = word;
            out.timestamp = a - lag as u64;
            let mut delays = [Vec::new(), Vec::new()];
            for (spectra, mapped) in out.delays.iter_mut().zip(&mut delays) {
                for (m, d) in spectra.iter_mut().enumerate() {
                    let k = rng.random_range(-(kmax as i64)..=kmax as i64);
                    // Values exact in f32, so that device and oracle turn by the same angles.
                    let nb = NarrowbandDelay {
                        coarse: k,
                        fine: rng.random_range(-reach..=reach) as f64,
                        phase: rng.random_range(-3.1f32..3.1) as f64,
                    };
                    *d = SpectrumDelay {
                        offset: (offset0 as i64 + (m * step) as i64 - k * sub as i64) as u32,
                        fine: nb.fine as f32,
                        phase: nb.phase as f32,
                    };
                    mapped.push(nb);
                }
            }
            poison(&mut frame);
            gpu.submit(frame).unwrap();
            let done = gpu.wait().unwrap().unwrap();
            assert_written(&done);
            let got = done.outputs[0].components(8);
            let span0 = first_chunk - overlap as u64; // the history's first sample
            for pol in 0..POLS {
                let h = &history[pol];
                let sample = |t: u64| Complex64::new(h[(t - span0) as usize], 0.0);
                // (values off by one, values, worst difference), the spectra in parallel.
                let (o, v, w) = delays[pol]
                    .par_iter()
                    .enumerate()
                    .map(|(m, nb)| {
                        let t0 = a - lag as u64 + (m * step) as u64;
                        let want = oracle.spectrum_of(sample, t0, nb);
                        let (mut o, mut w) = (0usize, 0i32);
                        for (c, v) in want.iter().enumerate() {
                            let v = v * Complex64::new(gain.re as f64, gain.im as f64);
                            let e = g.output_index(m, pol, c);
                            for (part, wanted) in [(0, v.re), (1, v.im)] {
                                let q = quantise_f64(wanted, 127).0 as i32;
                                let diff = (got[2 * e + part] as i32 - q).abs();
                                w = w.max(diff);
                                o += usize::from(diff == 1);
                            }
                        }
                        (o, 2 * want.len(), w)
                    })
                    .reduce(|| (0, 0, 0), |x, y| (x.0 + y.0, x.1 + y.1, x.2.max(y.2)));
                ones += o;
                values += v;
                worst = worst.max(w);
            }
        }
        // Frames 2 and 3 follow on: their DDCs copy what the one before made.
        assert_eq!(gpu.pipeline.outputs[0].ddc_carries(), 2);
        println!(
            "{} {channels} ch, {taps} taps, D {dec} (subsampling {sub}, {}-point PFB), {bits}-bit \
             input, {} spectra a frame, DDC on {}, FFT unzipped by {}: {ones} of {values} \
             components off by one ({:.4}%), worst {worst}",
            match bins {
                Bins::CentreHalf => "narrowband",
                Bins::All(_) => "no-discard narrowband",
            },
            ddc.points(channels),
            g.spectra_per_frame(),
            if ddc_mma && bits <= 12 {
                "tensor cores"
            } else {
                "FMA"
            },
            if ddc_mma { 4 } else { 1 },
            100.0 * ones as f64 / values as f64
        );
        assert!(worst <= 1, "a component more than 1 LSB from the oracle");
        assert!((ones as f64) < 1e-3 * values as f64);
    }
}

/// Beside a wideband output and a narrowband one with discard, two no-discard outputs (one
/// dithered, one of 4 bits; their DDCs a pair in the frame's `ddc_set`) come out exactly as from
/// a CUDA backend of their own and within 1 LSB of the float64 reference.
#[test]
fn no_discard_beside_other_kinds_as_if_alone() {
    let outputs = no_discard_outputs();
    let input = input_for(&outputs, 10, 16384, 64);
    if cuda(&Channelisation::new(input, outputs[2])).is_none() {
        return;
    }
    check_set_as_if_alone(
        &own_cuda,
        &AS_ALONE_AND_REFERENCE,
        true,
        "wideband, narrowband and no-discard",
        outputs,
        16384,
    );
}

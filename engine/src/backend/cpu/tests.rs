//! The CPU backend against the reference, and its own invariants (thread counts, frame lengths,
//! outputs alone or together).

use num_complex::{Complex32, Complex64};

use super::CpuBackend;
use crate::backend::conformance::*;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{
    Backend, Channelisation, Frame, InputGeometry, OutputGeometry, OutputKind, SpectrumDelay,
    Synchronous, POLS,
};
use crate::signal::quantise;
use crate::signal::weights::FilterDesign;
use rand::Rng;

fn to64(v: &[Complex32]) -> impl Iterator<Item = Complex64> + '_ {
    v.iter().map(|c| Complex64::new(c.re as f64, c.im as f64))
}

/// Random frames (noise, delays, gains) through both backends; returns the worst fraction of
/// int8 values off by one and the worst relative error before quantisation.
#[allow(clippy::too_many_arguments)]
fn compare(
    channels: usize,
    taps: usize,
    output: impl Fn(&mut OutputGeometry),
    bits: u32,
    s: usize,
    h: usize,
    frames: usize,
    seed: u64,
) -> (f64, f64) {
    let margin = 1000;
    let mut g = geometry(channels, taps, bits, s, h, margin);
    output(&mut g.output);
    let (ones, rel, _) = compare_with(g, margin, frames, seed);
    (ones, rel)
}

/// [`compare`] for any channelisation `g` with room for delays of `margin` samples: also
/// returns the values off by one and the values over all frames. A narrowband output gets
/// each frame's random mixer word and delays mapped as the engine maps them, and channel 5's
/// gains ten times higher (so that few channels still saturate).
fn compare_with(
    g: Channelisation,
    margin: usize,
    frames: usize,
    seed: u64,
) -> (f64, f64, (usize, usize)) {
    let bits = g.input.sample_bits;
    let mut cpu = Synchronous::new(CpuBackend::new(g.input, &[g.output]).unwrap());
    let mut rb = Synchronous::new(ReferenceBackend::new(g.input, &[g.output]).unwrap());
    let mut rng = rng(seed);
    let mut gains = random_gains(&mut rng, &g);
    let narrowband = matches!(g.output.kind, OutputKind::Narrowband(_));
    if narrowband {
        for pol_gains in &mut gains {
            pol_gains[5] *= 10.0;
        }
    }
    let mut totals = (0, 0);
    // A narrowband output's first span starts at an odd ADC sample, off the grid of every
    // decimation (the DDC's grid is the span's; its mixer runs on absolute time).
    let first = match narrowband {
        true => (rng.random::<u64>() >> 20) | 1,
        false => 0,
    };
    set_gains(&mut cpu, &gains);
    set_gains(&mut rb, &gains);
    let (mut worst_ones, mut worst_rel) = (0.0f64, 0.0f64);
    let mut saturated = 0;
    let mut a = cpu.alloc_frame().unwrap();
    let mut b = rb.alloc_frame().unwrap();
    for f in 0..frames {
        let x = [
            noise(&mut rng, bits, g.chunk_samples()),
            noise(&mut rng, bits, g.chunk_samples()),
        ];
        load_chunk(&mut a, bits, [&x[0], &x[1]]);
        a.input.timestamp = first.wrapping_add((f * g.chunk_samples()) as u64);
        random_delays(&mut rng, &g, margin, &mut a);
        copy_input(&a, &mut b);
        poison(&mut a);
        poison(&mut b);
        let got = cpu.process_unquantised(&mut a).unwrap();
        let want = rb.process_unquantised(&mut b).unwrap();
        assert_written(&a);
        assert!(
            got.iter().all(|v| v.re.is_finite() && v.im.is_finite()),
            "unwritten value"
        );
        let rel = relative_error(to64(&got), &want);
        let (ones, total) = int8_differences(
            &a.outputs[0].components(g.output.bits),
            &b.outputs[0].components(g.output.bits),
        );
        for pol in 0..POLS {
            // A value on the edge of saturating may fall either side.
            let (x, y) = (
                a.outputs[0].saturated[pol] as i64,
                b.outputs[0].saturated[pol] as i64,
            );
            assert!(
                (x - y).abs() <= 1 + y / 1000,
                "frame {f} pol {pol} saturated {x} vs {y}"
            );
            saturated += y;
        }
        worst_ones = worst_ones.max(ones as f64 / total as f64);
        worst_rel = worst_rel.max(rel);
        totals.0 += ones;
        totals.1 += total;
    }
    assert!(saturated > 0, "the gains should saturate some values");
    (worst_ones, worst_rel, totals)
}

/// Every combination of taps {4, 16} and sample bits {8, 10} at one channel count, with
/// `s` x `h` spectra per frame (few at large n, to keep debug builds quick).
fn matches_reference(channels: usize, s: usize, h: usize) {
    let mut seed = channels as u64;
    for taps in [4usize, 16] {
        for bits in [8, 10] {
            seed += 1;
            // The span starts as zeros: run until the last frame's windows hold data in at
            // least their middle half (where the weights are large), so that some values
            // saturate.
            let frames = (taps / 2).div_ceil(s * h) + 1;
            let t = std::time::Instant::now();
            let (ones, rel) = compare(channels, taps, |_| {}, bits, s, h, frames, seed);
            let case = format!("{channels} ch {taps} taps {bits} bits, {frames} frames");
            eprintln!(
                "{case}: off by one {ones:.2e}, relative error {rel:.2e}, {:.1} s",
                t.elapsed().as_secs_f64()
            );
            assert!(ones < 1e-3, "{case}: {ones} of values off by one");
            assert!(rel < 1e-5, "{case}: relative error {rel}");
        }
    }
}

#[test]
fn matches_reference_1024() {
    matches_reference(1024, 4, 2);
}

#[test]
fn matches_reference_4096() {
    matches_reference(4096, 2, 2);
}

#[test]
fn matches_reference_32768() {
    matches_reference(32768, 2, 2);
}

/// The other filter designs: rectangular taper, other cutoffs, one tap (a plain FFT).
#[test]
fn matches_reference_with_every_filter_design() {
    use crate::signal::weights::WindowFunction::{Hann, Rect};
    for (seed, (channels, taps, window, w_cutoff)) in [
        (1024usize, 1usize, Rect, 0.0),
        (1024, 16, Rect, 1.0),
        (4096, 4, Hann, 0.75),
        (4096, 1, Hann, 1.0),
    ]
    .into_iter()
    .enumerate()
    {
        let filter = FilterDesign { window, w_cutoff };
        let frames = (taps / 2).div_ceil(4) + 1;
        let design = |o: &mut OutputGeometry| o.filter = filter;
        let (ones, rel) = compare(channels, taps, design, 10, 4, 1, frames, 500 + seed as u64);
        let case = format!("{channels} ch {taps} taps {filter:?}");
        eprintln!("{case}: off by one {ones:.2e}, relative error {rel:.2e}");
        assert!(ones < 1e-3, "{case}: {ones} of values off by one");
        assert!(rel < 1e-5, "{case}: relative error {rel}");
    }
}

/// Dithered and 4-bit outputs, each and both: the same values as the reference, dither
/// included (the same counter-based values on both sides).
#[test]
fn matches_reference_with_dither_and_four_bits() {
    for (seed, (bits, dither)) in [(8u32, Some(11u32)), (4, None), (4, Some(12))]
        .into_iter()
        .enumerate()
    {
        let output = |o: &mut OutputGeometry| {
            o.bits = bits;
            o.dither = dither;
        };
        let (ones, rel) = compare(1024, 16, output, 10, 4, 2, 3, 700 + seed as u64);
        let case = format!("{bits}-bit output, dither {dither:?}");
        eprintln!("{case}: off by one {ones:.2e}, relative error {rel:.2e}");
        assert!(ones < 1e-3, "{case}: {ones} of values off by one");
        assert!(rel < 1e-5, "{case}: relative error {rel}");
    }
}

/// Narrowband outputs against the reference: D 8, 16 and 32, 64 to 256 channels, 2 to 8
/// taps, 8- and 10-bit input, 8- and 4-bit output, dithered or not, random gains (some
/// saturating), a random mixer word per frame, random delays of either sign and any fraction
/// (window moves of whole subsampled samples, r' and p' as the engine maps them), over
/// consecutive frames.
#[test]
fn narrowband_matches_reference() {
    let cases = [
        (64usize, 4usize, 8usize, 10u32, 8u32, None),
        (256, 4, 16, 10, 8, Some(21u32)),
        (128, 8, 8, 8, 4, Some(22)),
        (64, 2, 16, 10, 4, None),
        (128, 4, 32, 8, 8, Some(23)),
    ];
    let (mut ones, mut total) = (0, 0);
    for (seed, (channels, taps, d, bits, out_bits, dither)) in cases.into_iter().enumerate() {
        let margin = 8 * d;
        let mut output = narrowband_output(channels, taps, d, 8);
        output.bits = out_bits;
        output.dither = dither;
        // Chunks of 2 heaps; the frames after the first have their windows in data.
        let input = input_for(&[output], bits, 2 * output.heap_samples(), margin);
        let g = Channelisation::new(input, output);
        let frames = 2 + input.overlap_samples.div_ceil(input.chunk_samples);
        let t = std::time::Instant::now();
        let (worst, rel, (o, v)) = compare_with(g, margin, frames, 900 + seed as u64);
        let case = format!(
            "narrowband {channels} ch {taps} taps D {d}, {bits}-bit input, {out_bits}-bit \
             output, dither {dither:?}, {frames} frames"
        );
        eprintln!(
            "{case}: {o} of {v} values off by one (worst frame {worst:.2e}), relative error \
             {rel:.2e}, {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(worst < 1e-3, "{case}: {worst} of values off by one");
        assert!(rel < 1e-5, "{case}: relative error {rel}");
        ones += o;
        total += v;
    }
    eprintln!("narrowband, all cases: {ones} of {total} values off by one");
}

/// No-discard (VLBI) narrowband outputs against the reference: D 8, 32 to 256 channels, 2 to 8
/// taps, 8- to 12-bit input, 8- and 4-bit output, the remez DDC of 32 D taps, random mixer words,
/// delays (windows moving by whole samples of the 2D grid, r' up to 1) and gains.
#[test]
fn no_discard_matches_reference() {
    let cases = [
        (64usize, 4usize, 8usize, 10u32, 8u32, None),
        (256, 4, 8, 10, 8, Some(31u32)),
        (128, 8, 8, 8, 4, Some(32)),
        (32, 2, 8, 12, 8, None),
    ];
    let (mut ones, mut total) = (0, 0);
    for (seed, (channels, taps, d, bits, out_bits, dither)) in cases.into_iter().enumerate() {
        let margin = 8 * d;
        let mut output = no_discard_output(channels, taps, d, 8);
        output.bits = out_bits;
        output.dither = dither;
        let input = input_for(&[output], bits, 2 * output.heap_samples(), margin);
        let g = Channelisation::new(input, output);
        let frames = 2 + input.overlap_samples.div_ceil(input.chunk_samples);
        let (worst, rel, (o, v)) = compare_with(g, margin, frames, 950 + seed as u64);
        let case = format!(
            "no-discard {channels} ch {taps} taps D {d}, {bits}-bit input, {out_bits}-bit \
             output, dither {dither:?}, {frames} frames"
        );
        eprintln!(
            "{case}: {o} of {v} values off by one (worst frame {worst:.2e}), relative error \
             {rel:.2e}"
        );
        assert!(worst < 1e-3, "{case}: {worst} of values off by one");
        assert!(rel < 1e-5, "{case}: relative error {rel}");
        ones += o;
        total += v;
    }
    eprintln!("no-discard, all cases: {ones} of {total} values off by one");
}

/// Beside a wideband output and a narrowband one with discard, two no-discard outputs come out
/// exactly as from a CPU backend of their own and within 1 LSB of the reference.
#[test]
fn no_discard_beside_other_kinds() {
    let multi = |input: InputGeometry, outputs: &[OutputGeometry]| -> Box<dyn Backend> {
        Box::new(Synchronous::new(
            CpuBackend::with_threads(input, outputs, 3).unwrap(),
        ))
    };
    check_set_as_if_alone(
        &multi,
        &[
            (&cpu_backend, Agreement::Exact),
            (&reference_backend, Agreement::OneLsb),
        ],
        true,
        "wideband, narrowband and no-discard",
        no_discard_outputs(),
        16384,
    );
}

fn cpu_outputs(input: InputGeometry, outputs: &[OutputGeometry]) -> OutputsProcessor {
    let mut cb = Synchronous::new(CpuBackend::new(input, outputs).unwrap());
    Box::new(move |frame| {
        cb.process_unquantised_outputs(frame)
            .unwrap()
            .iter()
            .map(|v| to64(v).collect())
            .collect()
    })
}

#[test]
fn narrowband_tones_land_in_their_channels() {
    for (d, c, db, phase) in check_narrowband_tones(&cpu_outputs) {
        eprintln!(
            "D {d}: tone in channel {c}: within {db:.5} dB of the wideband level, phase \
             within {phase:.1e} rad"
        );
    }
}

#[test]
fn mixer_word_takes_effect_from_its_frame() {
    check_mixer_change(&cpu_backend);
}

#[test]
fn narrowband_refusals_are_sentences() {
    check_narrowband_refusals(&|input, outputs| {
        Ok(Box::new(Synchronous::new(CpuBackend::new(input, outputs)?)))
    });
}

/// Beside a wideband output, three narrowband ones (each frame's own mixer word) come out
/// exactly as from a CPU backend of their own (on another thread count, so the DDC's pieces
/// fall elsewhere) and within 1 LSB of the reference.
#[test]
fn each_output_as_if_alone_with_narrowband() {
    let multi = |input: InputGeometry, outputs: &[OutputGeometry]| -> Box<dyn Backend> {
        Box::new(Synchronous::new(
            CpuBackend::with_threads(input, outputs, 3).unwrap(),
        ))
    };
    check_mixed_outputs_as_if_alone(
        &multi,
        &[
            (&cpu_backend, Agreement::Exact),
            (&reference_backend, Agreement::OneLsb),
        ],
        true,
    );
}

/// Throughput of one narrowband output (1024 channels, 4 taps, default DDC) on one thread and
/// on every core, beside a wideband output of 1024 channels and 4 taps (D 1) timed alike, for
/// the record: `cargo test --release -p fengine --lib narrowband_throughput -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn narrowband_throughput() {
    for (d, threads) in [(1, 1), (8, 1), (16, 1), (32, 1), (1, 0), (8, 0), (16, 0)] {
        let output = match d {
            1 => OutputGeometry {
                kind: OutputKind::Wideband,
                spectra_per_heap: 256 * 8,
                ..narrowband_output(1024, 4, 8, 256)
            },
            _ => narrowband_output(1024, 4, d, 256),
        };
        let input = input_for(&[output], 10, output.heap_samples(), 8 * d);
        let g = Channelisation::new(input, output);
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let mut cpu =
            Synchronous::new(CpuBackend::with_threads(input, &[output], threads).unwrap());
        let mut rng = rng(1);
        let mut frame = cpu.alloc_frame().unwrap();
        let x = noise(&mut rng, 10, input.chunk_samples);
        load_chunk(&mut frame, 10, [&x, &x]);
        random_delays(&mut rng, &g, 8 * d, &mut frame);
        let frames = 6;
        let mut elapsed = 0.0;
        for f in 0..frames {
            let t = std::time::Instant::now();
            cpu.submit(frame).unwrap();
            frame = cpu.wait().unwrap().unwrap();
            if f > 0 {
                elapsed += t.elapsed().as_secs_f64();
            }
        }
        let rate = ((frames - 1) * input.chunk_samples) as f64 / elapsed;
        eprintln!(
            "{} 1024 ch, 4 taps, D {d}, L {}: {:.1} Msample/s per polarisation pair \
             on {threads} threads ({:.2} ms a frame of {} samples)",
            if d == 1 { "wideband" } else { "narrowband" },
            match output.kind {
                OutputKind::Wideband => 0,
                OutputKind::Narrowband(d) => d.taps,
            },
            rate / 1e6,
            elapsed / (frames - 1) as f64 * 1e3,
            input.chunk_samples
        );
    }
}

#[test]
fn input_power_is_measured_exactly() {
    check_input_power(&|g| {
        Box::new(Synchronous::new(
            CpuBackend::new(g.input, &[g.output]).unwrap(),
        ))
    });
}

#[test]
fn dither_recovers_a_weak_tone() {
    check_dither_unbiased(&|g| {
        Box::new(Synchronous::new(
            CpuBackend::new(g.input, &[g.output]).unwrap(),
        ))
    });
}

#[test]
fn two_frames_equal_one_long_one() {
    // Frames of H heaps, twice, against one frame of 2H heaps over the same samples.
    let margin = 200;
    let short = geometry(256, 8, 10, 3, 2, margin);
    let mut long = short;
    long.input.chunk_samples *= 2;
    let mut rng = rng(77);
    let gains = random_gains(&mut rng, &short);
    let chunk = short.chunk_samples();
    let x = [
        noise(&mut rng, 10, 2 * chunk),
        noise(&mut rng, 10, 2 * chunk),
    ];
    let mut long_frame = host_frame(&long);
    load_chunk(&mut long_frame, 10, [&x[0], &x[1]]);
    random_delays(&mut rng, &long, margin, &mut long_frame);
    poison(&mut long_frame);

    let mut cpu_long = Synchronous::new(CpuBackend::new(long.input, &[long.output]).unwrap());
    let mut cpu_short =
        Synchronous::new(CpuBackend::with_threads(short.input, &[short.output], 1).unwrap());
    let mut ref_long = Synchronous::new(ReferenceBackend::new(long.input, &[long.output]).unwrap());
    let mut ref_short =
        Synchronous::new(ReferenceBackend::new(short.input, &[short.output]).unwrap());
    set_gains(&mut cpu_long, &gains);
    set_gains(&mut cpu_short, &gains);
    set_gains(&mut ref_long, &gains);
    set_gains(&mut ref_short, &gains);
    let mut ref_long_frame = host_frame(&long);
    copy_input(&long_frame, &mut ref_long_frame);
    let cpu_all = cpu_long.process_unquantised(&mut long_frame).unwrap();
    let ref_all = ref_long.process_unquantised(&mut ref_long_frame).unwrap();

    let spectra = short.spectra_per_frame();
    for f in 0..2 {
        let mut frame = host_frame(&short);
        let range = f * chunk..(f + 1) * chunk;
        load_chunk(&mut frame, 10, [&x[0][range.clone()], &x[1][range]]);
        for pol in 0..POLS {
            for m in 0..spectra {
                // The same window: the long span is `chunk` samples longer.
                let d = long_frame.outputs[0].delays[pol][f * spectra + m];
                frame.outputs[0].delays[pol][m] = SpectrumDelay {
                    offset: d.offset - (chunk * f) as u32,
                    ..d
                };
            }
        }
        let mut ref_frame = host_frame(&short);
        copy_input(&frame, &mut ref_frame);
        poison(&mut frame);
        let cpu_part = cpu_short.process_unquantised(&mut frame).unwrap();
        let ref_part = ref_short.process_unquantised(&mut ref_frame).unwrap();
        assert_written(&frame);
        for pol in 0..POLS {
            for m in 0..spectra {
                for k in 0..short.output.channels {
                    let (e, el) = (
                        short.output_index(m, pol, k),
                        long.output_index(f * spectra + m, pol, k),
                    );
                    assert_eq!(
                        cpu_part[e], cpu_all[el],
                        "cpu frame {f} spectrum {m} pol {pol} channel {k}"
                    );
                    assert_eq!(
                        ref_part[e], ref_all[el],
                        "ref frame {f} spectrum {m} pol {pol} channel {k}"
                    );
                    let (q, ql) = (
                        frame.outputs[0].heaps_i8(),
                        long_frame.outputs[0].heaps_i8(),
                    );
                    assert_eq!([q[2 * e], q[2 * e + 1]], [ql[2 * el], ql[2 * el + 1]]);
                }
            }
        }
    }
}

fn cpu_processor(g: &Channelisation) -> Processor {
    let mut cb = Synchronous::new(CpuBackend::new(g.input, &[g.output]).unwrap());
    Box::new(move |frame| to64(&cb.process_unquantised(frame).unwrap()).collect())
}

#[test]
fn tone_lands_in_its_channel() {
    check_tone(&cpu_processor);
}

#[test]
fn delay_cancels_advance() {
    check_delay_cancels(&cpu_processor);
}

#[test]
fn submit_matches_unquantised_path_and_thread_count() {
    let margin = 64;
    let g = geometry(128, 4, 12, 5, 3, margin);
    let mut rng = rng(5);
    let gains = random_gains(&mut rng, &g);
    let mut one = Synchronous::new(CpuBackend::with_threads(g.input, &[g.output], 1).unwrap());
    let mut three = Synchronous::new(CpuBackend::with_threads(g.input, &[g.output], 3).unwrap());
    set_gains(&mut one, &gains);
    set_gains(&mut three, &gains);
    for _ in 0..3 {
        let mut a = one.alloc_frame().unwrap();
        let x = [
            noise(&mut rng, 12, g.chunk_samples()),
            noise(&mut rng, 12, g.chunk_samples()),
        ];
        load_chunk(&mut a, 12, [&x[0], &x[1]]);
        random_delays(&mut rng, &g, margin, &mut a);
        let mut b = three.alloc_frame().unwrap();
        copy_input(&a, &mut b);
        poison(&mut a);
        poison(&mut b);
        let values = one.process_unquantised(&mut a).unwrap();
        three.submit(b).unwrap();
        let b = three.wait().unwrap().unwrap();
        assert_written(&b);
        assert_eq!(a.outputs[0].heaps_i8(), b.outputs[0].heaps_i8());
        assert_eq!(a.outputs[0].saturated, b.outputs[0].saturated);
        for (e, v) in values.iter().enumerate() {
            let q = quantise::quantise_c32(*v, [0.0; 2], quantise::LIMIT).0;
            assert_eq!(
                [
                    a.outputs[0].heaps_i8()[2 * e],
                    a.outputs[0].heaps_i8()[2 * e + 1]
                ],
                q,
                "value {e}"
            );
        }
    }
}

fn cpu_backend(input: InputGeometry, outputs: &[OutputGeometry]) -> Box<dyn Backend> {
    Box::new(Synchronous::new(CpuBackend::new(input, outputs).unwrap()))
}

fn reference_backend(input: InputGeometry, outputs: &[OutputGeometry]) -> Box<dyn Backend> {
    Box::new(Synchronous::new(
        ReferenceBackend::new(input, outputs).unwrap(),
    ))
}

/// Built with several outputs (on 3 threads), the CPU backend gives each exactly what it gives
/// built with that output alone, and what the reference gives within 1 LSB.
#[test]
fn each_output_as_if_alone() {
    let multi = |input: InputGeometry, outputs: &[OutputGeometry]| -> Box<dyn Backend> {
        Box::new(Synchronous::new(
            CpuBackend::with_threads(input, outputs, 3).unwrap(),
        ))
    };
    check_outputs_as_if_alone(
        &multi,
        &[
            (&cpu_backend, Agreement::Exact),
            (&reference_backend, Agreement::OneLsb),
        ],
        true,
    );
}

#[test]
fn serves_one_to_eight_outputs() {
    check_output_counts(&|input, outputs| {
        Ok(Box::new(Synchronous::new(CpuBackend::new(input, outputs)?)))
    });
}

/// The unquantised values of every output are those of the output alone.
#[test]
fn unquantised_values_per_output() {
    let margin = 32;
    let (input, outputs) = three_outputs(margin);
    let mut cb = Synchronous::new(CpuBackend::new(input, &outputs).unwrap());
    let mut rng = rng(13);
    let mut frame = cb.alloc_frame().unwrap();
    let x = noise(&mut rng, 10, input.chunk_samples);
    load_chunk(&mut frame, 10, [&x, &x]);
    for (out, o) in frame.outputs.iter_mut().zip(&outputs) {
        random_output_delays(&mut rng, &Channelisation::new(input, *o), margin, out);
    }
    let values = cb.process_unquantised_outputs(&mut frame).unwrap();
    assert_eq!(values.len(), 3);
    for (k, o) in outputs.iter().enumerate() {
        let mut alone = Synchronous::new(CpuBackend::new(input, &[*o]).unwrap());
        let mut single = Frame::new_host(&input, &[*o]);
        copy_input(&frame, &mut single);
        single.outputs[0].timestamp = frame.outputs[k].timestamp;
        single.outputs[0]
            .delays
            .clone_from(&frame.outputs[k].delays);
        let want = alone.process_unquantised(&mut single).unwrap();
        assert!(values[k]
            .iter()
            .all(|v| v.re.is_finite() && v.im.is_finite()));
        assert_eq!(
            values[k]
                .iter()
                .map(|v| (v.re.to_bits(), v.im.to_bits()))
                .collect::<Vec<_>>(),
            want.iter()
                .map(|v| (v.re.to_bits(), v.im.to_bits()))
                .collect::<Vec<_>>(),
            "output {k}"
        );
    }
}

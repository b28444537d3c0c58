//! What the configuration derives rather than checks: how far delays move each output's windows,
//! each output's lag, the overlap kept between chunks, and thread counts.

use crate::backend::OutputGeometry;

/// Output bytes/s given to each send thread when `--send-threads` is 0.
const SEND_BYTES_PER_THREAD: f64 = 2e9;
/// Input bytes/s per polarisation given to each receive thread when `--recv-threads` is 0: one
/// thread's kernel copy (GRO) plus its copy into chunk memory hold about 2 GB/s.
const RECV_BYTES_PER_THREAD: f64 = 2e9;

/// Rounds `x` up to a multiple of `m` (m > 0).
fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// How far (input samples) a coarse delay of up to `max_delay_samples` either way moves an
/// output's windows: the delay itself for a wideband output; rounded up to a multiple of S (the
/// DDC's subsampling) for a narrowband one, whose window moves by k = round(d / S) subsampled
/// samples (|k| <= ceil(max / S)), S input samples each.
pub fn delay_room(g: &OutputGeometry, max_delay_samples: usize) -> usize {
    round_up(max_delay_samples, g.subsampling())
}

/// An output's lag (docs/signal-path.md, Timestamps): spectrum m of the frame whose chunk starts
/// at A has timestamp A - lag + m step, and its window starts at span offset overlap - lag + m
/// step - c (c the coarse delay in input samples, a multiple of D for narrowband). The last
/// spectrum's window, (M - 1) step + window - lag + room past the overlap at the most negative
/// delay, must end within the chunk of M steps: lag >= window - step + room, rounded up to a
/// step so that timestamps stay multiples of it. Wideband: (T - 1) 2n + max delay, as before.
pub fn output_lag(g: &OutputGeometry, max_delay_samples: usize) -> usize {
    let step = g.step();
    round_up(
        g.window().saturating_sub(step) + delay_room(g, max_delay_samples),
        step,
    )
}

/// The samples kept ahead of each chunk for outputs of these geometries and lags: the first
/// spectrum's window at the most positive delay starts at overlap - lag - room >= 0, so the
/// overlap is the largest lag + room, rounded up to a multiple of 8 (whole bytes at every sample
/// width) and of every decimation (the DDC's grid starts every span).
pub fn overlap_samples(
    outputs: &[OutputGeometry],
    lags: &[usize],
    max_delay_samples: usize,
) -> usize {
    let need = outputs
        .iter()
        .zip(lags)
        .map(|(g, lag)| lag + delay_room(g, max_delay_samples))
        .max()
        .unwrap_or(0);
    // Decimations are powers of two: the largest is a multiple of the others.
    let unit = outputs.iter().map(|g| g.subsampling()).fold(8, usize::max);
    round_up(need, unit)
}

/// Send threads of an output: `flag` (`--send-threads`) where given, else one per
/// [`SEND_BYTES_PER_THREAD`] of its output, at least 1 and at most one per substream.
pub(super) fn send_threads(flag: usize, g: &OutputGeometry, fs: f64, substreams: usize) -> usize {
    match flag {
        // One kernel-UDP sender thread moves about 3 GB/s with GSO (docs/performance.md). Output
        // bytes per input sample: 2 x bits / 8 for wideband, D times less for narrowband.
        0 => {
            let bytes_per_sample = 2.0 * g.bits as f64 / 8.0 / g.decimation() as f64;
            (bytes_per_sample * fs / SEND_BYTES_PER_THREAD).ceil() as usize
        }
        n => n,
    }
    .clamp(1, substreams)
}

/// Receive threads per polarisation: `flag` (`--recv-threads`) where given, else one per
/// [`RECV_BYTES_PER_THREAD`] of input, at least 1 and at most one per source address.
pub(super) fn recv_threads(flag: usize, fs: f64, sample_bits: u32, fewest_sources: usize) -> usize {
    match flag {
        0 => {
            let bytes = fs * sample_bits as f64 / 8.0;
            (bytes / RECV_BYTES_PER_THREAD).ceil() as usize
        }
        n => n,
    }
    .clamp(1, fewest_sources)
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::{config, test_args as args};
    use crate::config::EngineConfig;

    #[test]
    fn lag_and_overlap_cover_the_delay_range() {
        let a = args(&[
            "--channels",
            "1024",
            "--taps",
            "4",
            "--spectra-per-heap",
            "64",
            "--adc-sample-rate",
            "1e8",
            "--max-delay",
            "1e-5",
        ])
        .unwrap();
        let c = EngineConfig::from_args(&a).unwrap();
        assert_eq!(c.max_delay_samples, 1000);
        // (T-1) 2n + D = 6144 + 1000 -> 8192; overlap = 9192.
        assert_eq!(c.outputs[0].lag, 8192);
        assert_eq!(c.input.geometry.overlap_samples, 9192);
        assert_eq!(c.heaps_per_chunk(), 64 * 4 * 2048 / 4096);
    }

    /// Each output keeps its own lag; the overlap covers the longest, and the chunk is H heaps of
    /// the widest output, a whole number of the other's heaps. Order does not matter.
    #[test]
    fn chunk_overlap_and_lags_of_1024_and_4096_channels() {
        let flags = [
            "--taps",
            "4",
            "--spectra-per-heap",
            "64",
            "--heaps-per-frame",
            "4",
            "--adc-sample-rate",
            "1e8",
            "--max-delay",
            "1e-5",
        ];
        let narrow = "narrow:dst=127.0.0.1:7150,channels=1024";
        let wide = "wide:dst=127.0.0.1:7151,channels=4096";
        for outputs in [[narrow, wide], [wide, narrow]] {
            let mut v = flags.to_vec();
            for o in outputs {
                v.extend(["--wideband", o]);
            }
            let c = config(&v);
            assert_eq!(c.max_delay_samples, 1000);
            let k = |name: &str| c.outputs.iter().position(|o| o.name == name).unwrap();
            let (n, w) = (k("narrow"), k("wide"));
            // 3 x 2048 + 1000 -> 8192 and 3 x 8192 + 1000 -> 32768; overlap 32768 + 1000.
            assert_eq!((c.outputs[n].lag, c.outputs[w].lag), (8192, 32768));
            assert_eq!(c.input.geometry.overlap_samples, 33768);
            assert_eq!(c.input.geometry.chunk_samples, 64 * 4 * 8192);
            assert_eq!(c.heaps_per_chunk(), 64 * 4 * 8192 / 4096);
            assert_eq!(c.channelisation(n).heaps_per_frame(), 16);
            assert_eq!(c.channelisation(w).heaps_per_frame(), 4);
            for k in 0..2 {
                c.channelisation(k).validate().unwrap();
                c.plan(k).validate(&c.channelisation(k)).unwrap();
            }
        }
        // The 1024-channel output alone: the same lag, as before (lag_and_overlap_cover_...).
        let mut v = flags.to_vec();
        v.extend(["--wideband", narrow]);
        let c = config(&v);
        assert_eq!(c.outputs[0].lag, 8192);
        assert_eq!(c.input.geometry.overlap_samples, 9192);
        assert_eq!(c.input.geometry.chunk_samples, 64 * 4 * 2048);
    }

    /// A wideband and a narrowband output: each lag covers its window less a step plus the delay
    /// room (rounded up to D for narrowband), the overlap the larger lag plus its room (a multiple
    /// of 8 and of D), and the chunk H heaps of the longer heap (in samples).
    #[test]
    fn lags_overlap_and_chunk_of_a_wideband_and_a_narrowband_output() {
        let flags = [
            "--taps",
            "4",
            "--spectra-per-heap",
            "64",
            "--heaps-per-frame",
            "4",
            "--adc-sample-rate",
            "1e8",
            "--max-delay",
            "1e-5",
        ];
        let wide = "wide:dst=127.0.0.1:7150,channels=1024";
        let nb = "nb:dst=127.0.0.1:7151,channels=256,decimation=16,centre=3e7";
        // Wideband outputs come first, whatever the order of the flags.
        for order in [
            [("--wideband", wide), ("--narrowband", nb)],
            [("--narrowband", nb), ("--wideband", wide)],
        ] {
            let mut v = flags.to_vec();
            for (flag, spec) in order {
                v.extend([flag, spec]);
            }
            let c = config(&v);
            assert_eq!(c.max_delay_samples, 1000);
            let (w, n) = (&c.outputs[0], &c.outputs[1]);
            assert_eq!((w.name.as_str(), n.name.as_str()), ("wide", "nb"));
            // Wideband as before: 3 x 2048 + 1000 -> 8192.
            assert_eq!(w.lag, 8192);
            // Narrowband: step 2 x 256 x 16 = 8192; window (2 x 256 x 4 - 1) 16 + 192 = 32944;
            // room round_up(1000, 16) = 1008; 32944 - 8192 + 1008 = 25760 -> 32768.
            assert_eq!(n.geometry.step(), 8192);
            assert_eq!(n.geometry.window(), 32944);
            assert_eq!(n.lag, 32768);
            // max(8192 + 1000, 32768 + 1008) = 33776, a multiple of 16.
            assert_eq!(c.input.geometry.overlap_samples, 33776);
            assert_eq!(c.input.geometry.chunk_samples, 64 * 4 * 8192);
            assert_eq!(c.channelisation(0).heaps_per_frame(), 16);
            assert_eq!(c.channelisation(1).heaps_per_frame(), 4);
            for k in 0..2 {
                c.channelisation(k).validate().unwrap();
                c.plan(k).validate(&c.channelisation(k)).unwrap();
            }
        }
        // Whatever the shapes, every window fits at the extreme delays: the first spectrum's at
        // +max, the last one's at -max (k = round(d / D) subsampled samples, ties away).
        for (channels, taps, decimation, ddc_taps, delay) in [
            (64, 4, 8, 96, 1e-5),
            (16, 1, 8, 3, 1e-5),
            (1024, 16, 32, 384, 3.3e-6),
            (256, 2, 16, 1000, 0.0),
            (32, 8, 32, 40, 1.6e-7),
        ] {
            let spec = format!(
                "nb:dst=127.0.0.1:7151,channels={channels},decimation={decimation},\
                 centre=3e7,taps={taps},ddc_taps={ddc_taps}"
            );
            let max = delay.to_string();
            let c = config(&[
                "--narrowband",
                &spec,
                "--adc-sample-rate",
                "1e8",
                "--max-delay",
                &max,
                "--spectra-per-heap",
                "16",
                "--heap-samples",
                "512",
            ]);
            let g = c.channelisation(0);
            let (lag, dec) = (c.outputs[0].lag as i64, decimation as i64);
            let overlap = g.input.overlap_samples as i64;
            assert_eq!(overlap % 8, 0);
            assert_eq!(overlap % dec, 0);
            let d = c.max_delay_samples as f64;
            let k = (d / dec as f64).round() as i64;
            let first = overlap - lag - k * dec;
            let last =
                overlap - lag + (g.spectra_per_frame() as i64 - 1) * g.step() as i64 + k * dec;
            assert!(first >= 0, "{spec}: {first}");
            assert!(
                last + g.window() as i64 <= g.span_samples() as i64,
                "{spec}: {last}"
            );
            assert!(last <= g.max_offset() as i64);
        }
    }
}

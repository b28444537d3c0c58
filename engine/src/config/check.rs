//! From [`RunArgs`] to [`EngineConfig`]: every key of every output filled in from its own keys or
//! the flags, then each check that turns a bad combination into one sentence.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::time::Duration;

use spead::packet::PACKET_HEADER_BYTES;
use spead::transport::{Endpoint, MAX_UDP_PAYLOAD};

use super::derive::{delay_room, output_lag, overlap_samples, recv_threads, send_threads};
use super::error::{sentence, ConfigError};
use super::flags::RunArgs;
use super::output_arg::check_output_name;
use super::spec::{EngineConfig, InputSpec, OutputSpec, OutputStart};
use super::StreamPlacement;
use super::{MAX_OUTPUTS, WIDEBAND};

/// The longest `--recv-window`: every chunk waits this long before it is processed.
const MAX_RECV_WINDOW_S: f64 = 10.0;
use crate::backend::{Bins, Channelisation, Ddc, InputGeometry, OutputGeometry, OutputKind};
use crate::signal::ddc;
use crate::signal::delay::FramePlan;
use crate::signal::no_discard::PassBand;
use crate::signal::weights::FilterDesign;

/// One output as the command line asks for it, every key filled in, before the engine-wide
/// derivation.
struct Requested {
    name: String,
    /// Made by `--wideband` or `--narrowband`: its refusals name it. `--dst`'s output is named
    /// by its flags.
    named: bool,
    dst: Endpoint,
    geometry: OutputGeometry,
    /// `None`: the default gain for its bits (and decimation).
    gain: Option<f32>,
    /// A narrowband output's `centre=`, Hz.
    centre: Option<f64>,
}

impl Requested {
    /// `msg` as a sentence that names the output where `--wideband` or `--narrowband` made it.
    fn refuse(&self, msg: impl Into<String>) -> ConfigError {
        let msg = sentence(msg);
        ConfigError(if self.named {
            format!("output {:?}: {msg}", self.name)
        } else {
            msg
        })
    }

    /// How refusals call its destinations.
    fn dst_flag(&self) -> &'static str {
        if self.named {
            "dst="
        } else {
            "--dst "
        }
    }
}

impl EngineConfig {
    /// Checks the arguments and derives the geometry. Errors are one sentence for the user.
    pub fn from_args(a: &RunArgs) -> Result<Self, ConfigError> {
        Self::check(a)
    }

    /// The outputs the command line asks for, in order (`--dst`'s or the `--wideband` ones, then
    /// the `--narrowband` ones), each key given or taken from the output flags. Dither seeds: the
    /// output's own `dither=`, else none with `--no-dither`, else `--dither-seed` + k for output
    /// k, else a random seed unlike every other output's.
    fn requested(a: &RunArgs) -> Result<Vec<Requested>, ConfigError> {
        let flags = OutputGeometry {
            channels: a.channels,
            taps: a.taps,
            spectra_per_heap: a.spectra_per_heap,
            bits: a.output_bits,
            filter: FilterDesign {
                window: a.window_function,
                w_cutoff: a.w_cutoff,
            },
            dither: None,
            kind: OutputKind::Wideband,
        };
        // The flags' seed for output k; `None`: draw one.
        let flag_seed = |k: usize| match (a.no_dither, a.dither_seed) {
            (true, _) => Some(None),
            (false, Some(seed)) => Some(Some(seed.wrapping_add(k as u32))),
            (false, None) => None,
        };
        let mut wanted = Vec::new();
        let mut seeds = Vec::new();
        let narrowband = a.narrowband.as_slice();
        match (&a.dst, a.wideband.as_slice()) {
            (Some(dst), []) => {
                wanted.push(Requested {
                    name: WIDEBAND.to_string(),
                    named: false,
                    dst: dst.clone(),
                    geometry: flags,
                    gain: a.gain,
                    centre: None,
                });
                seeds.push(flag_seed(0));
            }
            (None, []) if narrowband.is_empty() => {
                return Err(ConfigError(
                    "give --dst, or one or more --wideband or --narrowband outputs.".into(),
                ))
            }
            (None, []) => {}
            (Some(_), [_, ..]) => {
                return Err(ConfigError(
                    "give either --dst or --wideband, not both.".into(),
                ))
            }
            (None, specs) => {
                for w in specs {
                    wanted.push(Requested {
                        name: w.name.clone(),
                        named: true,
                        dst: w.dst.clone(),
                        geometry: w.geometry_over(flags),
                        gain: w.gain.or(a.gain),
                        centre: None,
                    });
                    seeds.push(w.dither.or_else(|| flag_seed(seeds.len())));
                }
            }
        }
        for w in narrowband {
            // The parser demands channels, decimation and centre; the defaults only guard.
            let decimation = w.decimation.unwrap_or(ddc::DECIMATIONS[0]);
            let bins = match w.pass_bandwidth {
                None => Bins::CentreHalf,
                Some(hz) => Bins::All(
                    PassBand::new(hz, a.adc_sample_rate / (2 * decimation) as f64)
                        .map_err(|e| ConfigError(format!("output {:?}: {e}.", w.name)))?,
                ),
            };
            let ddc = Ddc {
                decimation,
                taps: w
                    .ddc_taps
                    .unwrap_or_else(|| bins.default_ddc_taps(decimation)),
                bins,
            };
            if let Bins::All(_) = bins {
                // A remez design may fail: say so now rather than when the backend starts.
                ddc.filter()
                    .map_err(|e| ConfigError(format!("output {:?}: {e}.", w.name)))?;
            }
            wanted.push(Requested {
                name: w.name.clone(),
                named: true,
                dst: w.dst.clone(),
                geometry: OutputGeometry {
                    kind: OutputKind::Narrowband(ddc),
                    ..w.geometry_over(flags)
                },
                // --gain is a wideband gain: see `narrowband_gain`.
                gain: w.gain,
                centre: w.centre,
            });
            seeds.push(w.dither.or_else(|| flag_seed(seeds.len())));
        }
        if wanted.len() > MAX_OUTPUTS {
            return Err(ConfigError(format!(
                "{} outputs is more than {MAX_OUTPUTS}; an engine makes at most {MAX_OUTPUTS} \
                 (--dst or --wideband, and --narrowband, together).",
                wanted.len()
            )));
        }
        for (k, w) in wanted.iter().enumerate() {
            check_output_name(&w.name)?;
            if wanted[..k].iter().any(|o| o.name == w.name) {
                let dst = if w.name == WIDEBAND && a.dst.is_some() {
                    " (--dst's output is named wideband)"
                } else {
                    ""
                };
                return Err(ConfigError(format!(
                    "output {:?} is given twice{dst}; every output needs a name of its own.",
                    w.name
                )));
            }
        }
        let mut taken: Vec<u32> = seeds.iter().flatten().flatten().copied().collect();
        for (w, seed) in wanted.iter_mut().zip(seeds) {
            w.geometry.dither = seed.unwrap_or_else(|| {
                let mut drawn: u32 = rand::random();
                while taken.contains(&drawn) {
                    drawn = rand::random();
                }
                taken.push(drawn);
                Some(drawn)
            });
        }
        Ok(wanted)
    }

    fn check(a: &RunArgs) -> Result<Self, ConfigError> {
        if let Some(why) = a.fft_precision.refusal(a.backend) {
            return Err(ConfigError(why));
        }
        if let Some(why) = a.wideband_kernels.refusal(a.backend, a.fft_precision) {
            return Err(ConfigError(why));
        }
        if !(a.adc_sample_rate.is_finite() && a.adc_sample_rate >= 1.0) {
            return Err(ConfigError(format!(
                "--adc-sample-rate {} is not a positive rate in Hz.",
                a.adc_sample_rate
            )));
        }
        if !(a.max_delay.is_finite() && a.max_delay >= 0.0) {
            return Err(ConfigError(format!(
                "--max-delay {} is not a delay of 0 seconds or more.",
                a.max_delay
            )));
        }
        // Rounded up, but not for the last bits of floating-point error (1e-5 s x 1e8 Hz).
        let max_delay_samples = (a.max_delay * a.adc_sample_rate * (1.0 - 1e-12)).ceil();
        if max_delay_samples > 1e9 {
            return Err(ConfigError(format!(
                "--max-delay {} s is {max_delay_samples} samples at this rate; at most 1e9 samples are supported.",
                a.max_delay
            )));
        }
        let max_delay_samples = max_delay_samples as u64;
        if let Some(w) = a.recv_window {
            if !(w.is_finite() && w > 0.0 && w <= MAX_RECV_WINDOW_S) {
                return Err(ConfigError(format!(
                    "--recv-window {w} is not a window of more than 0 and at most {MAX_RECV_WINDOW_S} seconds."
                )));
            }
        }
        let wanted = Self::requested(a)?;
        if a.spectra_per_heap == 0 || a.heaps_per_frame == 0 {
            return Err(ConfigError(
                "spectra per heap and heaps per frame must be positive.".into(),
            ));
        }
        for w in &wanted {
            w.geometry.validate().map_err(|e| w.refuse(e))?;
        }
        // Windows must fit the span for any coarse delay within --max-delay (docs/signal-path.md,
        // `output_lag`, `overlap_samples`).
        let d = max_delay_samples as usize;
        let geometries: Vec<OutputGeometry> = wanted.iter().map(|w| w.geometry).collect();
        let lags: Vec<usize> = geometries.iter().map(|g| output_lag(g, d)).collect();
        let longest = (0..wanted.len())
            .max_by_key(|&k| {
                (
                    lags[k] + delay_room(&geometries[k], d),
                    std::cmp::Reverse(k),
                )
            })
            .expect("at least one output");
        let overlap = overlap_samples(&geometries, &lags, d);
        // Steps (2n, 2nD) are powers of two: the longest output heap is a whole number of every
        // output's.
        let widest = wanted.iter().map(|w| w.geometry.step()).max().unwrap_or(0);
        let input = InputGeometry {
            sample_bits: a.sample_bits,
            chunk_samples: a
                .spectra_per_heap
                .saturating_mul(a.heaps_per_frame)
                .saturating_mul(widest),
            overlap_samples: overlap,
        };
        input.validate().map_err(sentence)?;
        for w in &wanted {
            Channelisation::new(input, w.geometry)
                .validate()
                .map_err(|e| w.refuse(e))?;
        }
        let chunk = input.chunk_samples;
        if a.heap_samples == 0 || !a.heap_samples.is_multiple_of(8) {
            return Err(ConfigError(format!(
                "--heap-samples {} must be a positive multiple of 8.",
                a.heap_samples
            )));
        }
        let several = wanted.len() > 1;
        if !chunk.is_multiple_of(a.heap_samples) {
            let channels = if several {
                "the most channels of any output"
            } else {
                "channels"
            };
            return Err(ConfigError(format!(
                "a frame's chunk of {chunk} samples (spectra-per-heap x heaps-per-frame x 2 x {channels}) is not a whole number of {}-sample digitiser heaps.",
                a.heap_samples
            )));
        }
        if overlap > chunk {
            let whose = if several || wanted[longest].named {
                format!("output {:?}'s taps", wanted[longest].name)
            } else {
                "taps".to_string()
            };
            return Err(ConfigError(format!(
                "the overlap of {overlap} samples that {whose} and --max-delay need exceeds a frame's chunk of {chunk} samples; raise --heaps-per-frame or --spectra-per-heap, or lower --max-delay."
            )));
        }
        let heap_bytes = a.heap_samples * a.sample_bits as usize / 8;
        if heap_bytes + PACKET_HEADER_BYTES > MAX_UDP_PAYLOAD {
            return Err(ConfigError(format!(
                "a digitiser heap of {} samples makes a packet larger than a UDP datagram.",
                a.heap_samples
            )));
        }
        if a.packet_payload < 64 || a.packet_payload + PACKET_HEADER_BYTES > MAX_UDP_PAYLOAD {
            return Err(ConfigError(format!(
                "--packet-payload {} must be from 64 to {} bytes.",
                a.packet_payload,
                MAX_UDP_PAYLOAD - PACKET_HEADER_BYTES
            )));
        }
        let mut senders: HashMap<SocketAddrV4, &str> = HashMap::new();
        for w in &wanted {
            let substreams = w.dst.addrs.len();
            if substreams == 0 || !w.geometry.channels.is_multiple_of(substreams) {
                return Err(w.refuse(format!(
                    "{} channels cannot be divided evenly over {substreams} output substreams",
                    w.geometry.channels
                )));
            }
            if substreams > 256 {
                return Err(w.refuse(format!("{substreams} output substreams is more than 256")));
            }
            if w.dst.addrs.iter().any(|d| d.port() == 0) {
                return Err(w.refuse(format!(
                    "{}{} needs a port other than 0",
                    w.dst_flag(),
                    w.dst
                )));
            }
            for addr in &w.dst.addrs {
                if let Some(other) = senders.insert(*addr, &w.name) {
                    return Err(ConfigError(format!(
                        "outputs {other:?} and {:?} both send to {addr}; each output needs \
                         destinations of its own.",
                        w.name
                    )));
                }
            }
        }
        for (p, src) in [&a.src_pol0, &a.src_pol1].iter().enumerate() {
            if src.addrs.is_empty() || src.addrs.len() > 64 {
                return Err(ConfigError(format!(
                    "--src-pol{p} {src} must name 1 to 64 addresses."
                )));
            }
            if src
                .addrs
                .iter()
                .any(|s| s.ip().is_multicast() && s.port() == 0)
            {
                return Err(ConfigError(format!(
                    "--src-pol{p} {src} is multicast and needs a port other than 0."
                )));
            }
        }
        let fewest_sources = a.src_pol0.addrs.len().min(a.src_pol1.addrs.len());
        if a.recv_threads > fewest_sources {
            return Err(ConfigError(format!(
                "--recv-threads {} needs at least that many source addresses per polarisation \
                 (ADDR+N:PORT); --src-pol0 has {} and --src-pol1 {}.",
                a.recv_threads,
                a.src_pol0.addrs.len(),
                a.src_pol1.addrs.len()
            )));
        }
        if let Some(t) = a.sync_time {
            if !(t.is_finite() && t >= 0.0) {
                return Err(ConfigError(format!(
                    "--sync-time {t} is not a Unix time in seconds."
                )));
            }
        }
        if let Some(gain) = a.gain {
            if !gain.is_finite() {
                return Err(ConfigError(format!(
                    "--gain {gain} is not a finite number."
                )));
            }
        }
        for w in &wanted {
            if let Some(gain) = w.gain.filter(|g| !g.is_finite()) {
                return Err(w.refuse(format!("gain {gain} is not a finite number")));
            }
        }
        let mut starts = Vec::with_capacity(wanted.len());
        for w in &wanted {
            starts.push(match (w.geometry.kind, w.centre) {
                (OutputKind::Narrowband(ddc), Some(centre)) => OutputStart::Narrowband {
                    mixer: ddc::mixer_word(centre, a.adc_sample_rate, ddc.decimation)
                        .map_err(|e| w.refuse(e.to_string()))?,
                },
                (OutputKind::Narrowband(_), None) => return Err(w.refuse("needs centre=HZ")),
                (OutputKind::Wideband, _) => OutputStart::Wideband,
            });
        }
        if !(a.send_burst.is_finite() && (0.0..=1e6).contains(&a.send_burst)) {
            return Err(ConfigError(format!(
                "--send-burst {} must be between 0 and 1000000 microseconds.",
                a.send_burst
            )));
        }
        if !(a.send_rate_factor.is_finite() && a.send_rate_factor >= 0.0) {
            return Err(ConfigError(format!(
                "--send-rate-factor {} must be 0 (unpaced) or a positive factor.",
                a.send_rate_factor
            )));
        }
        if a.array_size == 0 || a.feng_id >= a.array_size {
            return Err(ConfigError(format!(
                "--feng-id {} must be below --array-size {} (at least 1).",
                a.feng_id, a.array_size
            )));
        }
        for (w, &lag) in wanted.iter().zip(&lags) {
            let plan = FramePlan {
                lag,
                fs: a.adc_sample_rate,
            };
            plan.validate(&Channelisation::new(input, w.geometry))
                .map_err(|e| w.refuse(e.to_string()))?;
        }
        let outputs = wanted
            .into_iter()
            .zip(lags)
            .zip(starts)
            .map(|((w, lag), start)| OutputSpec {
                send_threads: send_threads(
                    a.send_threads,
                    &w.geometry,
                    a.adc_sample_rate,
                    w.dst.addrs.len(),
                ),
                gain: match (w.gain, w.geometry.kind) {
                    (Some(gain), _) => gain,
                    (None, OutputKind::Wideband) => {
                        crate::signal::gain::default_gain(a.sample_bits, w.geometry.bits)
                    }
                    // --gain, or the default, is a wideband output's gain.
                    (None, OutputKind::Narrowband(ddc)) => crate::signal::gain::narrowband_gain(
                        a.gain.unwrap_or_else(|| {
                            crate::signal::gain::default_gain(a.sample_bits, w.geometry.bits)
                        }),
                        ddc.subsampling(),
                    ),
                },
                geometry: w.geometry,
                lag,
                dests: w.dst.addrs,
                name: w.name,
                start,
            })
            .collect();
        let mut cfg = Self {
            input: InputSpec {
                geometry: input,
                heap_samples: a.heap_samples,
                heap_bytes,
                sources: [a.src_pol0.addrs.clone(), a.src_pol1.addrs.clone()],
                recv_threads: recv_threads(
                    a.recv_threads,
                    a.adc_sample_rate,
                    a.sample_bits,
                    fewest_sources,
                ),
                recv_window: a.recv_window,
            },
            outputs,
            max_delay_samples,
            max_delay: a.max_delay,
            fs: a.adc_sample_rate,
            sync_time: a.sync_time,
            interface: a.interface,
            feng_id: a.feng_id,
            array_size: a.array_size,
            packet_payload: a.packet_payload,
            ttl: a.ttl,
            send_rate_factor: a.send_rate_factor,
            send_burst: Duration::from_secs_f64(a.send_burst * 1e-6),
            socket_buffer: a.socket_buffer,
            backend: a.backend,
            fft_precision: a.fft_precision,
            wideband_kernels: a.wideband_kernels,
            gpu: a.gpu,
            control: a.control,
            control_token: a.control_token.clone(),
            katcp: a.katcp,
            placement: Default::default(),
        };
        let sends: Vec<usize> = cfg.outputs.iter().map(|o| o.send_threads).collect();
        cfg.placement = StreamPlacement::from_args(a, cfg.input.recv_threads, &sends)?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::test_support::{config, refusal, test_args as args};
    use crate::config::{Cli, WIDEBAND};
    use crate::signal::weights::WindowFunction;

    #[test]
    fn defaults_make_a_valid_config() {
        let c = EngineConfig::from_args(&args(&[]).unwrap()).unwrap();
        let [out] = &c.outputs[..] else {
            panic!("one output: {:?}", c.outputs)
        };
        assert_eq!(out.name, WIDEBAND);
        let (g, lag) = (c.channelisation(0), out.lag);
        assert_eq!(g.output.channels, 4096);
        assert_eq!(g.heaps_per_frame(), 4);
        assert!(lag.is_multiple_of(g.step()) && lag >= (g.output.taps - 1) * g.step());
        assert!(g.input.overlap_samples >= lag + c.max_delay_samples as usize);
        assert_eq!(g.input.overlap_samples % 8, 0);
        assert_eq!(out.gain, 1.0);
        // The control API is not reachable from other hosts unless asked for, and open.
        assert_eq!(c.control, "127.0.0.1:7147".parse().unwrap());
        assert!(c.control.ip().is_loopback());
        assert!(c.control_token.is_none());
    }

    #[test]
    fn bad_combinations_are_sentences() {
        for (extra, want) in [
            (vec!["--channels", "1000"], "power of two"),
            (vec!["--heap-samples", "3000"], "whole number"),
            (
                vec!["--max-delay", "1", "--adc-sample-rate", "1e8"],
                "overlap",
            ),
            (vec!["--dst", "127.0.0.1+2:9"], "divided evenly"),
            (vec!["--feng-id", "3"], "array-size"),
            (vec!["--max-delay=-1"], "max-delay"),
            (vec!["--w-cutoff=-0.5"], "cutoff"),
            (vec!["--w-cutoff", "inf"], "cutoff"),
            (vec!["--taps", "65"], "taps must be from 1 to 64"),
            (vec!["--taps", "0"], "taps must be from 1 to 64"),
            (vec!["--output-bits", "6"], "output bits must be 8 or 4"),
            (
                vec!["--fft-precision", "half", "--backend", "cpu"],
                "--fft-precision half is the CUDA backend's",
            ),
            (
                vec!["--fft-precision", "half", "--backend", "reference"],
                "--backend cuda",
            ),
            (
                vec!["--wideband-kernels", "three-pass", "--backend", "cpu"],
                "--backend cuda",
            ),
            (
                vec![
                    "--wideband-kernels",
                    "three-pass",
                    "--fft-precision",
                    "half",
                ],
                "two-pass kernels'",
            ),
        ] {
            let e = EngineConfig::from_args(&args(&extra).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
            assert!(e.ends_with('.'), "{e:?}");
        }
    }

    /// Without --wideband, --dst and the output flags make the one output named wideband, as
    /// before; --dst is then required.
    #[test]
    fn the_one_output_shorthand_is_unchanged() {
        let c = config(&["--channels", "1024", "--taps", "4", "--output-bits", "4"]);
        let [out] = &c.outputs[..] else {
            panic!("one output: {:?}", c.outputs)
        };
        assert_eq!(out.name, WIDEBAND);
        assert_eq!(out.dests, vec!["127.0.0.1:7150".parse().unwrap()]);
        assert_eq!((out.geometry.channels, out.geometry.taps), (1024, 4));
        assert_eq!(out.geometry.bits, 4);
        assert_eq!(out.gain, 1.0 / 16.0);
        assert_eq!(c.input.geometry.chunk_samples, 256 * 4 * 2048);
        let e = Cli::try_parse_from([
            "fengine",
            "--src-pol0",
            "127.0.0.1:1",
            "--src-pol1",
            "127.0.0.1:2",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("--dst"), "{e}");
    }

    /// Each --wideband output takes its own keys, and the output flags for the keys it leaves
    /// out (the gain's default follows its own bits).
    #[test]
    fn wideband_outputs_take_their_keys_and_the_flags_for_the_rest() {
        let c = config(&[
            "--wideband",
            "wide:dst=127.0.0.1+3:7150,channels=1024",
            "--wideband",
            "fine_4-bit:dst=127.0.1.1+7:7150,channels=4096,taps=4,bits=4,window=rect,w_cutoff=0.5,dither=off,gain=0.25",
            "--taps",
            "8",
            "--dither-seed",
            "10",
        ]);
        let [wide, fine] = &c.outputs[..] else {
            panic!("two outputs: {:?}", c.outputs)
        };
        assert_eq!(wide.name, "wide");
        let g = wide.geometry;
        assert_eq!(
            (g.channels, g.taps, g.bits, g.dither),
            (1024, 8, 8, Some(10))
        );
        assert_eq!(g.filter, FilterDesign::default());
        assert_eq!(wide.gain, 1.0);
        assert_eq!(wide.dests.len(), 4);
        assert_eq!(wide.send_threads, 2, "8 bits at 1712 Msample/s: 3.4 GB/s");
        assert_eq!(fine.name, "fine_4-bit");
        let g = fine.geometry;
        assert_eq!((g.channels, g.taps, g.bits, g.dither), (4096, 4, 4, None));
        assert_eq!(
            (g.filter.window, g.filter.w_cutoff),
            (WindowFunction::Rect, 0.5)
        );
        assert_eq!(fine.gain, 0.25);
        assert_eq!(fine.dests[7], "127.0.1.8:7150".parse().unwrap());
        assert_eq!(fine.send_threads, 1, "4 bits at 1712 Msample/s: 1.7 GB/s");
        assert_eq!(c.output_geometries(), vec![wide.geometry, fine.geometry]);

        // Seeds: --dither-seed S gives output k S + k; dither= wins; none given draws one each.
        let seeds = |extra: &[&str]| -> Vec<Option<u32>> {
            let mut v = vec![
                "--wideband",
                "a:dst=127.0.0.1:7150",
                "--wideband",
                "b:dst=127.0.0.1:7151",
                "--wideband",
                "c:dst=127.0.0.1:7152,dither=3",
            ];
            v.extend_from_slice(extra);
            config(&v)
                .outputs
                .iter()
                .map(|o| o.geometry.dither)
                .collect()
        };
        assert_eq!(seeds(&["--dither-seed", "7"]), [Some(7), Some(8), Some(3)]);
        let max = u32::MAX.to_string();
        assert_eq!(
            seeds(&["--dither-seed", max.as_str()]),
            [Some(u32::MAX), Some(0), Some(3)]
        );
        assert_eq!(seeds(&["--no-dither"]), [None, None, Some(3)]);
        let drawn = seeds(&[]);
        assert!(drawn.iter().all(Option::is_some), "{drawn:?}");
        assert!(drawn[0] != drawn[1] && drawn[2] == Some(3), "{drawn:?}");
        // The default gain follows each output's bits; --gain is everyone's default.
        let c = config(&[
            "--wideband",
            "a:dst=127.0.0.1:7150,bits=4",
            "--wideband",
            "b:dst=127.0.0.1:7151",
            "--sample-bits",
            "8",
        ]);
        assert_eq!([c.outputs[0].gain, c.outputs[1].gain], [0.25, 4.0]);
        let c = config(&[
            "--wideband",
            "a:dst=127.0.0.1:7150,bits=4",
            "--wideband",
            "b:dst=127.0.0.1:7151,gain=2",
            "--gain",
            "0.5",
        ]);
        assert_eq!([c.outputs[0].gain, c.outputs[1].gain], [0.5, 2.0]);
    }

    /// What --wideband outputs may not be: each refusal one sentence that names the output (or
    /// the offending part).
    #[test]
    fn bad_wideband_outputs_are_refused_by_name() {
        // `--wideband` before each spec.
        let wb = |specs: &[&'static str]| -> Vec<&'static str> {
            specs.iter().flat_map(|s| ["--wideband", *s]).collect()
        };
        let nine: Vec<String> = (0..9)
            .map(|k| format!("o{k}:dst=127.0.0.1:{}", 7150 + k))
            .collect();
        let nine: Vec<&str> = nine.iter().flat_map(|s| ["--wideband", s]).collect();
        let long = format!("{}:dst=127.0.0.1:7150", "x".repeat(65));
        let a = "a:dst=127.0.0.1:7150";
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (
                wb(&[a, "a:dst=127.0.0.1:7151"]),
                "output \"a\" is given twice",
            ),
            (
                wb(&["Wide:dst=127.0.0.1:7150"]),
                "output name \"Wide\" must be 1 to 64 characters from a-z, 0-9, _ and -.",
            ),
            (
                wb(&["a.b:dst=127.0.0.1:7150"]),
                "output name \"a.b\" must be",
            ),
            (wb(&[":dst=127.0.0.1:7150"]), "output name \"\" must be"),
            (vec!["--wideband", &long], "must be 1 to 64 characters"),
            (
                wb(&["status:dst=127.0.0.1:7150"]),
                "output name \"status\" would clash with the control API's routes",
            ),
            (wb(&["gains:dst=127.0.0.1:7150"]), "would clash"),
            (
                wb(&["a:dst=127.0.0.1+3:7150", "b:dst=127.0.0.3:7150"]),
                "outputs \"a\" and \"b\" both send to 127.0.0.3:7150",
            ),
            (
                wb(&[a, "b:dst=127.0.0.1+2:7151"]),
                "output \"b\": 4096 channels cannot be divided evenly over 3 output",
            ),
            (nine, "9 outputs is more than 8;"),
            (
                wb(&[a, "b:dst=127.0.0.1:7151,channels=1000"]),
                "output \"b\": channels must be a power of two from 16 to 65536, not 1000",
            ),
            (
                wb(&[a, "b:dst=127.0.0.1:7151,taps=65"]),
                "output \"b\": taps must be from 1 to 64",
            ),
            (
                wb(&[a, "b:dst=127.0.0.1:7151,w_cutoff=-1"]),
                "output \"b\": the sinc cutoff must be",
            ),
            (
                wb(&["a:dst=127.0.0.1:0"]),
                "output \"a\": dst=127.0.0.1:0 needs a port other than 0.",
            ),
            (
                [
                    wb(&[
                        "a:dst=127.0.0.1:7150,channels=16",
                        "b:dst=127.0.0.1:7151,channels=1024,taps=64",
                    ]),
                    vec!["--heaps-per-frame", "1", "--spectra-per-heap", "8"],
                ]
                .concat(),
                "output \"b\"'s taps and --max-delay need exceeds a frame's chunk",
            ),
            (
                vec!["--dst", "127.0.0.1:7150", "--wideband", a],
                "cannot be used with",
            ),
        ];
        for (extra, want) in cases {
            let e = refusal(&extra);
            assert!(e.contains(want), "{extra:?}: {e:?} should say {want:?}");
            let line = e.lines().next().unwrap();
            assert!(
                line.ends_with('.') || line.contains("cannot be used with"),
                "{e:?}"
            );
        }
    }

    /// A --narrowband output takes its keys (channels, decimation and centre required), the
    /// output flags for the common keys it leaves out, and a default gain sqrt(D) times the
    /// wideband one; its centre is quantised to the mixer word.
    #[test]
    fn narrowband_outputs_take_their_keys() {
        let c = config(&[
            "--dst",
            "127.0.0.1:7150",
            "--narrowband",
            "nb:dst=127.0.0.1+1:7151,channels=1024,decimation=16,centre=400e6",
            "--narrowband",
            "nb2:dst=127.0.0.1:7160,channels=256,decimation=32,centre=1e8,taps=4,ddc_taps=320,\
             bits=4,window=rect,w_cutoff=0.5,dither=off,gain=3",
            "--taps",
            "8",
            "--dither-seed",
            "10",
        ]);
        let [wide, nb, nb2] = &c.outputs[..] else {
            panic!("three outputs: {:?}", c.outputs)
        };
        assert_eq!(
            (wide.name.as_str(), wide.geometry.kind, wide.start),
            (WIDEBAND, OutputKind::Wideband, OutputStart::Wideband)
        );
        assert_eq!(nb.name.as_str(), "nb");
        let g = nb.geometry;
        assert_eq!(
            (g.channels, g.taps, g.bits, g.dither, g.filter),
            (1024, 8, 8, Some(11), FilterDesign::default())
        );
        assert_eq!(g.kind, OutputKind::Narrowband(Ddc::new(16)));
        assert_eq!(Ddc::new(16).taps, 192);
        assert_eq!(g.step(), 2 * 1024 * 16);
        assert_eq!(
            nb.mixer(),
            Some(ddc::mixer_word(400e6, 1712e6, 16).unwrap())
        );
        assert_eq!(nb.gain, 4.0, "sqrt(16) x the 10-bit, 8-bit default of 1");
        assert_eq!(nb.dests.len(), 2);
        assert_eq!(
            nb.send_threads, 1,
            "8 bits / 16 at 1712 Msample/s: 0.2 GB/s"
        );
        let g = nb2.geometry;
        assert_eq!((g.channels, g.taps, g.bits, g.dither), (256, 4, 4, None));
        assert_eq!(
            (g.filter.window, g.filter.w_cutoff),
            (WindowFunction::Rect, 0.5)
        );
        assert_eq!(
            g.kind,
            OutputKind::Narrowband(Ddc {
                taps: 320,
                ..Ddc::new(32)
            })
        );
        assert_eq!(nb2.gain, 3.0);
        // The default gain follows the bits, --gain (a wideband gain) and D.
        let gain = |extra: &[&str]| {
            let mut v = vec![
                "--narrowband",
                "nb:dst=127.0.0.1:7151,channels=1024,decimation=8,centre=400e6",
            ];
            v.extend_from_slice(extra);
            let c = config(&v);
            assert_eq!(c.outputs.len(), 1, "a narrowband output alone");
            c.outputs[0].gain
        };
        assert_eq!(gain(&[]), 8f32.sqrt());
        assert_eq!(gain(&["--sample-bits", "8"]), 4.0 * 8f32.sqrt());
        assert_eq!(gain(&["--output-bits", "4"]), 8f32.sqrt() / 16.0);
        assert_eq!(gain(&["--gain", "0.5"]), 0.5 * 8f32.sqrt());
        // The quantised centre: F = round(f_c / fs 2^32).
        let c = config(&[
            "--adc-sample-rate",
            "1e8",
            "--narrowband",
            "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=12345678.9",
        ]);
        let word = (12345678.9 / 1e8 * 2f64.powi(32)).round() as u32;
        assert_eq!(c.outputs[0].start, OutputStart::Narrowband { mixer: word });
    }

    /// What a --narrowband output may not be: each refusal one sentence that names the output
    /// (and the key where one is at fault).
    #[test]
    fn bad_narrowband_outputs_are_refused_by_name() {
        let nb = |spec: &'static str| vec!["--narrowband", spec];
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=12,centre=4e8"),
                "output \"nb\": decimation=12 must be 8, 16 or 32.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=x,centre=4e8"),
                "decimation=x must be 8, 16 or 32.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,decimation=8,centre=4e8"),
                "output \"nb\": needs channels=N.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,centre=4e8"),
                "output \"nb\": needs decimation=8, 16 or 32.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8"),
                "output \"nb\": needs centre=HZ.",
            ),
            (
                nb("nb:channels=64,decimation=8,centre=4e8"),
                "output \"nb\": needs dst=ADDR[+N]:PORT.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,centre=5e8"),
                "the key centre is given twice.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=high"),
                "output \"nb\": centre=high is not a frequency in Hz.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=inf"),
                "centre=inf is not a frequency in Hz.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,colour=red"),
                "unknown key \"colour\"; the keys are dst, channels, decimation, centre",
            ),
            (
                nb("nb"),
                "\"nb\" is not NAME:dst=ADDR[+N]:PORT,channels=N,decimation=D,centre=HZ",
            ),
            (
                nb("Nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8"),
                "output name \"Nb\" must be",
            ),
            // The band, fs/(2D) = 107 MHz wide at D = 8, within 0 .. 856 MHz.
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=50e6"),
                "output \"nb\": a narrowband centre of 50000000 Hz",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=850e6"),
                "must lie from 53500000 Hz to 802500000 Hz.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=-1e6"),
                "output \"nb\": the narrowband centre -1000000 Hz lies outside 0 .. 856000000 Hz",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=2e9"),
                "lies outside 0 .. 856000000 Hz",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=1000,decimation=8,centre=4e8"),
                "output \"nb\": channels must be a power of two from 16 to 65536, not 1000.",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,taps=65"),
                "output \"nb\": taps must be from 1 to 64",
            ),
            (
                nb("nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8,ddc_taps=0"),
                "output \"nb\": DDC taps must be from 1 to 4096, not 0.",
            ),
            (
                nb("nb:dst=127.0.0.1+2:7151,channels=64,decimation=8,centre=4e8"),
                "output \"nb\": 64 channels cannot be divided evenly over 3 output",
            ),
            (
                [
                    nb("nb:dst=127.0.0.1:7150,channels=64,decimation=8,centre=4e8"),
                    vec!["--dst", "127.0.0.1:7150"],
                ]
                .concat(),
                "outputs \"wideband\" and \"nb\" both send to 127.0.0.1:7150",
            ),
            (
                [
                    nb("wideband:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8"),
                    vec!["--dst", "127.0.0.1:7150"],
                ]
                .concat(),
                "output \"wideband\" is given twice (--dst's output is named wideband)",
            ),
            (
                [
                    nb("a:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8"),
                    vec!["--wideband", "a:dst=127.0.0.1:7150"],
                ]
                .concat(),
                "output \"a\" is given twice;",
            ),
            (
                vec![
                    "--wideband",
                    "a:dst=127.0.0.1:7150,decimation=8",
                    "--narrowband",
                    "nb:dst=127.0.0.1:7151,channels=64,decimation=8,centre=4e8",
                ],
                "output \"a\": decimation= belongs to a narrowband output (--narrowband), not a \
                 wideband one.",
            ),
            (
                [
                    nb("nb:dst=127.0.0.1:7151,channels=65536,decimation=32,centre=4e8,taps=64"),
                    vec!["--spectra-per-heap", "1", "--heaps-per-frame", "1"],
                ]
                .concat(),
                "output \"nb\"'s taps and --max-delay need exceeds a frame's chunk",
            ),
        ];
        for (extra, want) in cases {
            let e = refusal(&extra);
            assert!(e.contains(want), "{extra:?}: {e:?} should say {want:?}");
            assert!(e.lines().next().unwrap().ends_with('.'), "{e:?}");
        }
        // Eight outputs in all, wideband and narrowband together.
        let specs: Vec<String> = (0..9)
            .map(|k| {
                if k < 5 {
                    format!("w{k}:dst=127.0.0.1:{}", 7150 + k)
                } else {
                    format!(
                        "n{k}:dst=127.0.0.1:{},channels=64,decimation=8,centre=4e8",
                        7150 + k
                    )
                }
            })
            .collect();
        let mut v: Vec<&str> = Vec::new();
        for (k, s) in specs.iter().enumerate() {
            v.extend([if k < 5 { "--wideband" } else { "--narrowband" }, s]);
        }
        let e = refusal(&v);
        assert!(e.contains("9 outputs is more than 8;"), "{e}");
        assert_eq!(config(&v[..16]).outputs.len(), 8);
        // Without any output, clap says what is missing.
        let e = Cli::try_parse_from([
            "fengine",
            "--src-pol0",
            "127.0.0.1:1",
            "--src-pol1",
            "127.0.0.1:2",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("--dst"), "{e}");
    }

    #[test]
    fn pass_bandwidth_makes_a_no_discard_output() {
        let c = config(&[
            "--narrowband",
            "vlbi:dst=127.0.0.1+1:7151,channels=1024,decimation=8,centre=400e6,pass_bandwidth=64e6",
        ]);
        let g = c.outputs[0].geometry;
        let OutputKind::Narrowband(ddc) = g.kind else {
            panic!("{:?}", g.kind)
        };
        let Bins::All(pass) = ddc.bins else {
            panic!("{:?}", ddc.bins)
        };
        assert!((pass.fraction - 64.0 / 107.0).abs() < 1e-12);
        assert_eq!(
            (ddc.taps, ddc.subsampling(), g.step()),
            (256, 16, 2 * 1024 * 8)
        );
        assert_eq!(
            g.kind.label(),
            fgpu_api::engine::OutputKind::NarrowbandNoDiscard
        );
        // Four times the wideband gain for D 8 and S 16.
        let wide = crate::signal::gain::default_gain(10, 8);
        assert_eq!(c.outputs[0].gain, 4.0 * wide);
        for (bad, why) in [
            ("pass_bandwidth=107e6", "less than the band"),
            ("pass_bandwidth=-1", "not a positive bandwidth"),
            ("pass_bandwidth=x", "not a positive bandwidth"),
        ] {
            let e = refusal(&[
                "--narrowband",
                &format!("vlbi:dst=127.0.0.1:7151,channels=1024,decimation=8,centre=400e6,{bad}"),
            ]);
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = refusal(&[
            "--narrowband",
            "vlbi:dst=127.0.0.1:7151,channels=1024,decimation=16,centre=400e6,pass_bandwidth=30e6",
        ]);
        assert!(e.contains("decimation 8, not 16"), "{e}");
    }
}

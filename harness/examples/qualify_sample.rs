//! A realistic, made-up `harness qualify` report, to look at the HTML page without a system:
//! a channelisation spectrum of 4096 channels with its SFDR limit, a linearity sweep on a log
//! axis, a gain scatter, a phase-against-channel plot that fails, and a test that was not run.
//!
//!   cargo run --release -p harness --example qualify_sample -- DIR
//!
//! writes DIR/qualify.html and DIR/qualify.json; `scripts/screenshot DIR/qualify.html out.png`
//! renders the page.

use std::f64::consts::PI;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use harness::record::qualify::{
    Figure, Level, Outcome, Plot, QualifyReport, Series, Style, SystemUnderTest, TestRecord,
};

const CHANNELS: usize = 4096;

/// xorshift64*: deterministic noise, no dependency.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * PI * v).cos()
    }
}

fn channelisation(rng: &mut Rng) -> TestRecord {
    let tone = 1234.3;
    // Noise floor near -101 dBc (an average of 64 spectra), the tone's main lobe, three spurs.
    let spectrum: Vec<(f64, f64)> = (0..CHANNELS)
        .map(|c| {
            let mean: f64 = (0..8).map(|_| -rng.uniform().max(1e-12).ln()).sum::<f64>() / 8.0;
            let mut p = 10f64.powf(-10.1) * mean;
            let d = c as f64 - tone;
            if d.abs() < 3.0 {
                p += 10f64.powf(-1.2 * d * d);
            }
            p += match c {
                0 => 10f64.powf(-7.8),
                2468 => 10f64.powf(-7.41),
                3703 => 10f64.powf(-7.12),
                _ => 0.0,
            };
            (c as f64, 10.0 * p.log10())
        })
        .collect();
    let peak = spectrum.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    let spectrum: Vec<(f64, f64)> = spectrum.iter().map(|&(c, p)| (c, p - peak)).collect();
    let spur = spectrum
        .iter()
        .filter(|p| (p.0 - tone).abs() > 3.0)
        .map(|p| p.1)
        .fold(f64::MIN, f64::max);
    TestRecord {
        name: "channelisation".into(),
        title: "Channelisation and SFDR".into(),
        requirement: "A tone appears in its own channel, and every other channel is at least \
                      53 dB below it (SFDR >= 53 dB) across the band."
            .into(),
        method: "dsim sends a tone at channel 1234.3 of 4096 at -6 dBFS with noise; the harness \
                 averages 64 spectra of the engine's output and compares the strongest channel \
                 outside the tone's main lobe with the tone."
            .into(),
        outcome: Outcome::Pass,
        figures: vec![
            Figure::at_least("SFDR", -spur, "dB", 53.0),
            Figure::exactly("strongest channel", 1234.0, "", 1234.0),
            Figure::info("worst spur at channel", 3703.0, ""),
            Figure::info("median noise floor", -101.37, "dBc"),
        ],
        plots: vec![Plot {
            title: "Spectrum of a tone at channel 1234.3 (64 spectra averaged)".into(),
            x_label: "channel".into(),
            y_label: "power relative to the tone (dB)".into(),
            x_log: false,
            series: vec![Series {
                name: "engine output, polarisation 0".into(),
                style: Style::Line,
                points: spectrum,
            }],
            hlines: vec![Level {
                label: "SFDR limit: -53 dBc".into(),
                value: -53.0,
            }],
            vlines: vec![Level {
                label: "tone 1234.3".into(),
                value: 1234.3,
            }],
        }],
        duration_s: 41.8,
    }
}

fn linearity(rng: &mut Rng) -> TestRecord {
    let amplitudes: Vec<f64> = (0..=26)
        .map(|k| 10f64.powf(-4.2 + 0.15 * k as f64))
        .collect();
    let floor = 10f64.powf(-8.9);
    let measured: Vec<(f64, f64)> = amplitudes
        .iter()
        .map(|&a| {
            // Quantisation noise at the bottom, a little compression near full scale.
            let compress = 1.0 - 0.02 * (a / 0.5).powi(3);
            let p = (a * compress).powi(2) + floor;
            (a, 10.0 * p.log10() + 0.01 * rng.normal())
        })
        .collect();
    let ideal: Vec<(f64, f64)> = amplitudes.iter().map(|&a| (a, 20.0 * a.log10())).collect();
    let deviation: Vec<(f64, f64)> = measured
        .iter()
        .zip(&ideal)
        .map(|(m, i)| (m.0, m.1 - i.1))
        .collect();
    let worst = deviation
        .iter()
        .filter(|d| d.0 >= 1e-3)
        .map(|d| d.1.abs())
        .fold(0.0, f64::max);
    TestRecord {
        name: "linearity".into(),
        title: "Linearity over the input range".into(),
        requirement: "Output power follows input power within ±0.5 dB from -60 dBFS to -6 dBFS."
            .into(),
        method: "dsim steps a tone's amplitude over 27 levels, 0.15 decade apart; the harness \
                 integrates the tone's channel at each level and compares with 20·log10 of the \
                 amplitude."
            .into(),
        outcome: Outcome::Pass,
        figures: vec![
            Figure::at_most("largest deviation, -60 to -6 dBFS", worst, "dB", 0.5),
            Figure::info("deviation at -84 dBFS", deviation[0].1, "dB"),
            Figure::info("levels", amplitudes.len() as f64, ""),
        ],
        plots: vec![
            Plot {
                title: "Output power against tone amplitude".into(),
                x_label: "tone amplitude (fraction of full scale)".into(),
                y_label: "output power (dB)".into(),
                x_log: true,
                series: vec![
                    Series {
                        name: "measured".into(),
                        style: Style::Points,
                        points: measured,
                    },
                    Series {
                        name: "ideal: 20·log10(amplitude)".into(),
                        style: Style::Line,
                        points: ideal,
                    },
                ],
                hlines: vec![],
                vlines: vec![Level {
                    label: "-60 dBFS".into(),
                    value: 1e-3,
                }],
            },
            Plot {
                title: "Deviation from ideal".into(),
                x_label: "tone amplitude (fraction of full scale)".into(),
                y_label: "measured - ideal (dB)".into(),
                x_log: true,
                series: vec![Series {
                    name: "deviation".into(),
                    style: Style::Points,
                    points: deviation,
                }],
                hlines: vec![
                    Level {
                        label: "+0.5 dB".into(),
                        value: 0.5,
                    },
                    Level {
                        label: "-0.5 dB".into(),
                        value: -0.5,
                    },
                ],
                vlines: vec![Level {
                    label: "-60 dBFS".into(),
                    value: 1e-3,
                }],
            },
        ],
        duration_s: 95.2,
    }
}

fn gains(rng: &mut Rng) -> TestRecord {
    let points: Vec<(f64, f64)> = (0..256)
        .map(|_| {
            let g = 0.05 + 1.95 * rng.uniform();
            (g, g * (1.0 + 0.0012 * rng.normal()))
        })
        .collect();
    let worst = points
        .iter()
        .map(|p| (p.1 / p.0 - 1.0).abs() * 100.0)
        .fold(0.0, f64::max);
    TestRecord {
        name: "gains".into(),
        title: "Per-channel gains".into(),
        requirement: "A gain set on a channel scales that channel's output by it, within 1%."
            .into(),
        method: "PUT random gains on 256 channels while a noise signal runs; the measured gain \
                 is each channel's output amplitude over its amplitude at gain 1."
            .into(),
        outcome: Outcome::Pass,
        figures: vec![
            Figure::at_most("largest gain error", worst, "%", 1.0),
            Figure::exactly("channels checked", 256.0, "", 256.0),
        ],
        plots: vec![Plot {
            title: "Measured against requested gain, 256 channels".into(),
            x_label: "requested gain".into(),
            y_label: "measured gain".into(),
            x_log: false,
            series: vec![
                Series {
                    name: "channels".into(),
                    style: Style::Points,
                    points,
                },
                Series {
                    name: "measured = requested".into(),
                    style: Style::Line,
                    points: vec![(0.0, 0.0), (2.0, 2.0)],
                },
            ],
            hlines: vec![],
            vlines: vec![],
        }],
        duration_s: 18.4,
    }
}

fn delay(rng: &mut Rng) -> TestRecord {
    let delay = 2.5;
    let actual = 2.528;
    let phase = |c: f64, d: f64| -180.0 * c * d / CHANNELS as f64;
    let measured: Vec<(f64, f64)> = (0..CHANNELS)
        .step_by(32)
        .map(|c| {
            let c = c as f64;
            (c, phase(c, actual) + 0.4 * rng.normal())
        })
        .collect();
    let expected = vec![(0.0, 0.0), (CHANNELS as f64, phase(CHANNELS as f64, delay))];
    let residual: Vec<(f64, f64)> = measured
        .iter()
        .map(|&(c, p)| (c, p - phase(c, delay)))
        .collect();
    let rms = (measured
        .iter()
        .map(|&(c, p)| (p - phase(c, delay)).powi(2))
        .sum::<f64>()
        / measured.len() as f64)
        .sqrt();
    TestRecord {
        name: "delay".into(),
        title: "Delay compensation".into(),
        requirement: "With a delay of 2.5 samples loaded, the phase across the band follows the \
                      delay within 1° rms (delay error <= 0.01 sample)."
            .into(),
        method: "dsim delays polarisation 1 by 2.5 samples against polarisation 0; the engine \
                 loads the same delay; the harness takes the phase of the cross-power of the two \
                 polarisations in every 32nd channel."
            .into(),
        outcome: Outcome::Fail {
            reason: format!(
                "phase error {rms:.1}° rms, above the 1° limit: the fitted delay is {actual} \
                 samples, not 2.5 (0.028 sample short of compensation)"
            ),
        },
        figures: vec![
            Figure::at_most("rms phase error", rms, "°", 1.0),
            Figure::at_most("delay error", actual - delay, "sample", 0.01),
            Figure::info("fitted delay", actual, "sample"),
        ],
        plots: vec![
            Plot {
                title: "Cross-power phase against channel, 2.5 samples loaded".into(),
                x_label: "channel".into(),
                y_label: "phase, unwrapped (degrees)".into(),
                x_log: false,
                series: vec![
                    Series {
                        name: "measured".into(),
                        style: Style::Points,
                        points: measured,
                    },
                    Series {
                        name: "expected for 2.5 samples".into(),
                        style: Style::Line,
                        points: expected,
                    },
                ],
                hlines: vec![],
                vlines: vec![],
            },
            Plot {
                title: "Phase error against channel".into(),
                x_label: "channel".into(),
                y_label: "measured - expected (degrees)".into(),
                x_log: false,
                series: vec![Series {
                    name: "phase error".into(),
                    style: Style::Points,
                    points: residual,
                }],
                hlines: vec![
                    Level {
                        label: "+1°".into(),
                        value: 1.0,
                    },
                    Level {
                        label: "-1°".into(),
                        value: -1.0,
                    },
                ],
                vlines: vec![],
            },
        ],
        duration_s: 27.0,
    }
}

fn sustained() -> TestRecord {
    TestRecord {
        name: "sustained-rate".into(),
        title: "Sustained rate".into(),
        requirement: "The engine runs 10 minutes at 1.712 Gsample/s per polarisation with no \
                      missing input and no skipped output."
            .into(),
        method: "dsim runs at the rate; the harness watches every output substream and the \
                 engine's counters for the whole window."
            .into(),
        outcome: Outcome::NotRun {
            reason: "quick run: the 10-minute sustained-rate test runs only in the full suite \
                     (leave out --quick)"
                .into(),
        },
        figures: vec![],
        plots: vec![],
        duration_s: 0.0,
    }
}

fn main() -> anyhow::Result<()> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(Into::into)
        .ok_or_else(|| anyhow::anyhow!("usage: qualify_sample DIR"))?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let tests = vec![
        channelisation(&mut rng),
        linearity(&mut rng),
        gains(&mut rng),
        delay(&mut rng),
        sustained(),
    ];
    let duration_s: f64 = tests.iter().map(|t| t.duration_s).sum::<f64>() + 12.0;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let report = QualifyReport {
        started_unix: now - duration_s,
        duration_s,
        system: SystemUnderTest {
            engine_url: "http://fengine:7147".into(),
            output: Some("wideband".into()),
            dsim_url: "http://dsim:8080".into(),
            backend: "cuda".into(),
            channels: CHANNELS,
            taps: 16,
            spectra_per_heap: 256,
            adc_sample_rate: 1.712e9,
            sample_bits: 10,
            output_bits: 8,
            harness_version: env!("CARGO_PKG_VERSION").into(),
            band: Some(harness::record::qualify::JudgedBand {
                kind: "wideband".into(),
                low_hz: 0.0,
                high_hz: 0.856e9,
                centre_hz: None,
                decimation: 1,
                pass_band_hz: None,
            }),
        },
        quick: true,
        pass: tests.iter().all(|t| t.outcome.passed()),
        tests,
    };
    let (html, json) = harness::render::html::write(&dir, &report)?;
    println!("{}\n{}", html.display(), json.display());
    Ok(())
}

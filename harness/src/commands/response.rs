//! `harness response`: measure the channel response (paper, 5.2) and compare it with the
//! theory; write response.json and response.svg.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;

use super::announce;
use crate::bringup::{self, Setup, SystemArgs};
use crate::render::progress::response_step_line;
use crate::render::{self, report};
use crate::response::{self, CrossAccumulator, ResponseConfig, ResponseGeometry};
use crate::signals;

#[derive(Args)]
pub struct ResponseArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    /// The channel measured [default: n/4].
    #[arg(long)]
    pub channel: Option<usize>,
    /// Channels each side of the centre the tone visits.
    #[arg(long, default_value_t = 2.0)]
    pub span: f64,
    /// Tone steps per channel.
    #[arg(long, default_value_t = 16)]
    pub steps_per_channel: usize,
    /// Integration per step (s).
    #[arg(long, default_value_t = 1.0)]
    pub integration: f64,
    /// Wait after each tone/gain change before integrating (s).
    #[arg(long, default_value_t = 0.5)]
    pub settle: f64,
    /// Tone amplitude, fraction of full scale.
    #[arg(long, default_value_t = 0.9)]
    pub amplitude: f64,
    /// Output level (counts) each step's gain aims the tone at [default: 40 for 8-bit output,
    /// 40 x 7/127 = 2.2 for 4-bit].
    #[arg(long)]
    pub target: Option<f64>,
    /// Largest gain set.
    #[arg(long, default_value_t = 1000.0)]
    pub max_gain: f64,
    /// Keep the engine's gain (no PUT /gains; the output's bits then limit the range).
    #[arg(long)]
    pub no_gains: bool,
    /// Compare only where the theory is above this (dB).
    #[arg(long, default_value_t = -60.0, allow_hyphen_values = true)]
    pub floor_db: f64,
    /// Largest deviation (dB) that passes.
    #[arg(long, default_value_t = 0.5)]
    pub tolerance_db: f64,
    /// Where response.json and response.svg go.
    #[arg(long, default_value = "harness-response")]
    pub out_dir: PathBuf,
}

/// Runs `harness response`; true when the deviation is within the tolerance.
pub fn run(a: ResponseArgs) -> Result<bool> {
    bringup::one_engine(&a.system, "response")?;
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let mut acc = None;
    let channel_arg = a.channel;
    let s = bringup::setup(
        &a.system,
        &a.system.backend,
        None,
        Some(&a.out_dir),
        |g, subs| {
            let channel = channel_arg.unwrap_or(g.channels / 4);
            let c = Arc::new(CrossAccumulator::new(channel, g.channels, subs, g.bits));
            acc = Some(c.clone());
            Some(c)
        },
    )?;
    announce(&s);
    let acc = acc.context("accumulator")?;
    let channel = a.channel.unwrap_or(s.geometry.channels / 4);
    if channel >= s.geometry.channels {
        bail!(
            "--channel {channel} is not below {} channels",
            s.geometry.channels
        );
    }
    let geometry = ResponseGeometry {
        channels: s.geometry.channels,
        taps: s.geometry.taps,
        sample_bits: a.system.sample_bits,
        output_bits: s.geometry.bits,
        adc_rate: s
            .adc_rate
            .context("the ADC rate is unknown: give --adc-rate")?,
        filter: s.geometry.filter,
        band: s.geometry.band,
    };
    let output = s.output_name().map(String::from);
    // The plot names the output where the engine has several.
    let label = s.output_label().map(|o| format!("output {o}, "));
    let config = ResponseConfig {
        channel,
        span: a.span,
        steps_per_channel: a.steps_per_channel,
        integration: Duration::from_secs_f64(a.integration.max(0.0)),
        settle: Duration::from_secs_f64(a.settle.max(0.0)),
        amplitude: a.amplitude,
        // Little noise, so that high gains far from the centre do not clamp it (dither stays).
        noise: Some(a.system.noise.unwrap_or(0.001)),
        target: a
            .target
            .unwrap_or(response::scaled_level(40.0, s.geometry.bits)),
        max_gain: a.max_gain,
        floor_db: a.floor_db,
        tolerance_db: a.tolerance_db,
        set_gains: !a.no_gains,
    };
    // Give the system a moment to produce output before the first step.
    signals::sleep(Duration::from_millis(500))?;
    let result = response::measure(&s.services, &s.rx, &acc, config, geometry, &mut |step| {
        eprintln!("{}", response_step_line(step))
    });
    let Setup { services, rx, .. } = s;
    drop(rx);
    drop(services);
    let mut r = result?;
    r.output = output.clone();
    report::write_json(&a.out_dir.join("response.json"), &r)?;
    let theory = response::theory_curve(&geometry, -a.span.abs(), a.span.abs(), 801);
    report::plot_response(
        &a.out_dir.join("response.svg"),
        &theory,
        &r.points,
        a.floor_db,
        &format!(
            "channel response: {}{} channels, {} taps, channel {}",
            label.unwrap_or_default(),
            geometry.channels,
            geometry.taps,
            channel
        ),
    )?;
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "pass": r.pass,
            "output": output,
            "max_deviation_db": r.max_deviation_db,
            "worst_offset": r.worst_offset,
            "compared_points": r.compared,
            "floor_db": a.floor_db,
            "tolerance_db": a.tolerance_db,
            "json": a.out_dir.join("response.json"),
            "svg": a.out_dir.join("response.svg"),
            "index": render::index::write(&a.out_dir)?,
        }))?
    );
    Ok(r.pass)
}

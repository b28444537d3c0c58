//! Delay and phase, with their rates, and delay enable/disable: the same noise in both
//! polarisations, polarisation 1 advanced by a known delay in dsim, the engine loaded to
//! compensate; the residual phase across the band is measured from the cross-power of the
//! polarisations.
//!
//! Conventions (docs/signal-path.md): dsim's delay tau advances polarisation 1, so its
//! cross-power x1 conj(x0) turns by +2 pi f tau / fs in the channel centred on sky frequency f
//! (+pi k tau / n in wideband channel k); the engine's delay d (samples) turns it back by
//! -2 pi f d / fs, and its phase p adds p. A narrowband output means the same: its mixer's turn
//! over the delay, 2 pi f_c d / fs, is part of the engine's compensation, so the residual is
//! judged the same way, and the phase slope across its channels is D times shallower.

use anyhow::Result;
use fgpu_api::engine::{DelayRequest, PolDelay};
use num_complex::Complex64;

use super::lost_data::LossCounters;
use super::{channel_axis, level, plot, points, NOISE};
use crate::qualify::analysis::{deg, phase_errors, PhaseLine};
use crate::qualify::bench::{noise, LostWindow};
use crate::qualify::spectra::Integration;
use crate::qualify::{Bench, Check, Geometry, Measured, Plan};
use crate::record::qualify::{Figure, Plot};

/// The delay dsim applies to polarisation 1 (samples): a whole part for the coarse delay and a
/// fraction for the fine one.
const TAU: f64 = 3.37;
/// Residual phase allowed in any judged channel after compensation (degrees).
const PHASE_DEG: f64 = 1.0;
/// How close the uncompensated slope must be to dsim's delay (samples): the bench's own check.
const BENCH_SAMPLES: f64 = 0.01;

/// [`BENCH_SAMPLES`] for the output: D times it for a narrowband output, whose band is D times
/// narrower, so that the limit is the same phase across its band (the slope's noise is).
fn bench_samples(g: &Geometry) -> f64 {
    BENCH_SAMPLES * g.band.decimation() as f64
}
/// The channels judged lie below this fraction of Nyquist: dsim's delayed noise is exact there.
const BAND: f64 = 0.9;

pub(super) const DELAY: Check = Check {
    name: "delay",
    title: "Delay",
    requirement: "With polarisation 1 advanced by 3.37 samples and the engine loaded with that delay, the residual phase is within 1 degree in every channel below 0.9 of Nyquist (a narrowband output: through its mixer, every channel of a band below that). (katgpucbf: CBF-REQ-0128, 0185)",
    method: "The same noise (one seed) in both polarisations; dsim advances polarisation 1 by 3.37 samples (exactly: tones at the delayed time, noise by a fractional delay exact to 0.2 degree below 0.9 of Nyquist). First without compensation the phase slope of x1 conj(x0) must show dsim's delay (within 0.01 samples, 0.01 D for a narrowband output of decimation D: the bench checks itself); then with the engine's delay loaded the residual phase of every channel is measured. A window the output moved past with fewer than half its spectra received (heaps lost to a stalled host) sets the attempt aside, reported with what dsim, the engine and the harness lost around it, and the test is made once more.",
    run: delay,
    needs_ddc: false,
};

pub(super) const DELAY_ENABLE: Check = Check {
    name: "delay-enable",
    title: "Delay enable/disable",
    requirement: "Loading the compensating delay, clearing it and loading it again gives, each time, the state asked for: the residual within 1 degree when loaded, dsim's delay within 0.01 samples (narrowband: 0.01 D) when cleared. (katgpucbf: CBF-REQ-0066, 0110, 0187, 0188)",
    method: "As the delay test, toggling the engine's model three times: loaded, cleared (all zero), loaded. A window lost to heaps lost on the way is handled as in the delay test: the attempt is reported and made once more.",
    run: delay_enable,
    needs_ddc: false,
};

pub(super) const PHASE: Check = Check {
    name: "phase",
    title: "Phase",
    requirement: "A fringe phase of 0.7 rad loaded on polarisation 1 (with the compensating delay) shows in every channel below 0.9 of the band within 1 degree. (katgpucbf: CBF-REQ-0128, 0112)",
    method: "As the delay test, with phase 0.7 rad in the model; each channel's phase is compared with 0.7 rad. A window lost to heaps lost on the way is handled as in the delay test: the attempt is reported and made once more.",
    run: phase,
    needs_ddc: false,
};

pub(super) const DELAY_RATE: Check = Check {
    name: "delay-rate",
    title: "Delay rate",
    requirement: "A delay rate loaded at a timestamp makes the residual delay drift as predicted: in two windows after the load, the residual delay is within 0.01 samples (narrowband: 0.01 D) of -rate (t - t_load). (katgpucbf: CBF-REQ-0128, 0185)",
    method: "The compensating delay plus a rate of half a sample (narrowband: D/2) per S samples (S four integration windows), loaded at a future timestamp. The residual delay is the phase slope of x1 conj(x0) (a least-squares line across the channels, every channel summed over the same spectra) in a window starting one window after the load and in one S later; a linear drift averages to its value at the mean timestamp of the spectra summed, which is the prediction. A window lost to heaps lost on the way is handled as in the delay test: the attempt is reported and made once more.",
    run: delay_rate,
    needs_ddc: false,
};

pub(super) const PHASE_RATE: Check = Check {
    name: "phase-rate",
    title: "Phase rate",
    requirement: "A phase rate loaded at a timestamp makes the phase drift as predicted: in two windows after the load, every channel below 0.9 of the band is within 1 degree of rate (t - t_load). (katgpucbf: CBF-REQ-0128, 0112)",
    method: "The compensating delay plus a phase rate of one radian per S samples, loaded at a future timestamp; each window's phase per channel is compared with the model at the mean timestamp of the spectra summed. A window lost to heaps lost on the way is handled as in the delay test: the attempt is reported and made once more.",
    run: phase_rate,
    needs_ddc: false,
};

/// What the delay checks share: the signal set up, the channels judged.
struct Setup {
    from: u64,
    judged: Vec<usize>,
    tau: f64,
}

/// Why the delay checks do not run.
#[derive(Debug, thiserror::Error)]
enum DelayOutOfRange {
    #[error(
        "the engine's --max-delay ({max:.2} samples) is below the {needed:.2} samples these tests load"
    )]
    MaxDelay { max: f64, needed: f64 },
    #[error("the output has no two channels below 0.9 of Nyquist, where dsim's delay is exact")]
    NoChannels,
}

/// The signal set up for a delay check, or why the check does not run (the outer error: the
/// bench failed).
fn prepare(b: &Bench) -> Result<Result<Setup, DelayOutOfRange>> {
    let g = b.geometry;
    if g.max_delay_samples < TAU + 2.0 {
        return Ok(Err(DelayOutOfRange::MaxDelay {
            max: g.max_delay_samples,
            needed: TAU + 2.0,
        }));
    }
    b.clear_delays()?;
    b.set_gain(g.noise_gain(15.0, NOISE))?;
    let from =
        b.set_signal_delayed(vec![noise(NOISE, 401)], vec![noise(NOISE, 401)], [0.0, TAU])?;
    let from = from.max(b.after_now()?);
    let judged = g.channels_below(BAND);
    if judged.len() < 2 {
        return Ok(Err(DelayOutOfRange::NoChannels));
    }
    Ok(Ok(Setup {
        from,
        judged,
        tau: TAU,
    }))
}

/// A model for polarisation 1 (polarisation 0 left at zero), in samples and radians.
fn model(
    b: &Bench,
    delay: f64,
    rate: f64,
    phase: f64,
    phase_rate: f64,
    load: Option<u64>,
) -> DelayRequest {
    let pol1 = PolDelay {
        delay: delay / b.geometry.adc_rate,
        delay_rate: rate,
        phase,
        phase_rate,
    };
    DelayRequest {
        load_timestamp: load,
        ..DelayRequest::both(PolDelay::default(), pol1)
    }
}

/// Loads a model at once and returns the first timestamp it surely holds for.
fn load(b: &Bench, req: &DelayRequest) -> Result<u64> {
    b.services.engine.set_delays(req)?;
    b.after_now()
}

/// The residual delay (samples) and phase offset (radians) of a cross-power over the judged
/// channels.
fn residual(cross: &[Complex64], s: &Setup, g: &Geometry) -> (f64, f64) {
    let line = PhaseLine::fit(cross, &s.judged);
    (g.delay_of_slope(line.slope), line.offset)
}

/// The largest |phase error| (degrees) against a model, and the errors for a plot.
fn worst(cross: &[Complex64], s: &Setup, model: impl Fn(usize) -> f64) -> (f64, Vec<(f64, f64)>) {
    let e = phase_errors(cross, &s.judged, model);
    let w = e.iter().map(|x| deg(x.1).abs()).fold(0.0, f64::max);
    (w, e.into_iter().map(|(k, r)| (k as f64, deg(r))).collect())
}

fn error_plot(g: &Geometry, title: &str, series: Vec<(&str, Vec<(f64, f64)>)>) -> Plot {
    let mut p = plot(
        title,
        &channel_axis(g, "channel"),
        "phase error (degree)",
        series.into_iter().map(|(n, s)| points(n, s)).collect(),
    );
    p.hlines.push(level("+1 degree", PHASE_DEG));
    p.hlines.push(level("-1 degree", -PHASE_DEG));
    p
}

/// Measures the uncompensated delay: a judged figure of the bench's own accuracy.
fn uncompensated(
    b: &Bench,
    s: &Setup,
    from: u64,
    spectra: u64,
    m: &mut Measured,
    label: &str,
) -> Result<f64> {
    let int = b.integrate(from, spectra)?;
    let (tau, _) = residual(&int.cross, s, &b.geometry);
    m.figures.push(Figure::at_most(
        &format!("{label}: measured delay less dsim's {:.2} samples", s.tau),
        (tau - s.tau).abs(),
        "samples",
        bench_samples(&b.geometry),
    ));
    Ok(tau)
}

/// Loads the compensating delay (and `phase`) and measures the residual.
fn compensated(
    b: &Bench,
    s: &Setup,
    spectra: u64,
    phase: f64,
    m: &mut Measured,
    label: &str,
) -> Result<Vec<(f64, f64)>> {
    let from = load(b, &model(b, s.tau, 0.0, phase, 0.0, None))?;
    let int = b.integrate(from, spectra)?;
    let (res, _) = residual(&int.cross, s, &b.geometry);
    let (w, errors) = worst(&int.cross, s, |_| phase);
    m.figures.push(Figure::at_most(
        &format!("{label}: worst residual phase"),
        w,
        "degree",
        PHASE_DEG,
    ));
    m.figures.push(Figure::info(
        &format!("{label}: residual delay"),
        res / b.geometry.adc_rate * 1e12,
        "ps",
    ));
    Ok(errors)
}

fn delay(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    check_once_more(b, plan, "delay", progress, delay_attempt)
}

fn delay_attempt(
    b: &Bench,
    plan: &Plan,
    s: &Setup,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured> {
    let mut m = Measured::default();
    // A second attempt starts after the first, from the stream's present.
    let from = s.from.max(b.after_now()?);
    let tau = uncompensated(b, s, from, plan.spectra, &mut m, "uncompensated")?;
    progress(&format!(
        "delay: uncompensated, measured {tau:.4} samples (dsim {TAU})"
    ));
    let errors = compensated(b, s, plan.spectra, 0.0, &mut m, "compensated")?;
    progress("delay: compensated");
    // The headline is the compensated residual; the bench's own check follows.
    m.figures.rotate_left(1);
    b.clear_delays()?;
    m.plots.push(error_plot(
        &b.geometry,
        "residual phase with the delay compensated",
        vec![("channels", errors)],
    ));
    Ok(m)
}

fn delay_enable(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    check_once_more(b, plan, "delay-enable", progress, delay_enable_attempt)
}

fn delay_enable_attempt(
    b: &Bench,
    plan: &Plan,
    s: &Setup,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured> {
    let mut m = Measured::default();
    let spectra = (plan.spectra / 2).max(200);
    let first = compensated(b, s, spectra, 0.0, &mut m, "loaded")?;
    progress("delay-enable: loaded");
    b.clear_delays()?;
    let from = b.after_now()?;
    let tau = uncompensated(b, s, from, spectra, &mut m, "cleared")?;
    progress(&format!("delay-enable: cleared, {tau:.4} samples"));
    let again = compensated(b, s, spectra, 0.0, &mut m, "loaded again")?;
    progress("delay-enable: loaded again");
    b.clear_delays()?;
    m.plots.push(error_plot(
        &b.geometry,
        "residual phase, loaded and loaded again",
        vec![("loaded", first), ("loaded again", again)],
    ));
    Ok(m)
}

fn phase(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    check_once_more(b, plan, "phase", progress, phase_attempt)
}

fn phase_attempt(
    b: &Bench,
    plan: &Plan,
    s: &Setup,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured> {
    let mut m = Measured::default();
    let errors = compensated(b, s, plan.spectra, 0.7, &mut m, "phase 0.7 rad")?;
    progress("phase: measured");
    b.clear_delays()?;
    m.plots.push(error_plot(
        &b.geometry,
        "phase less 0.7 rad, per channel",
        vec![("channels", errors)],
    ));
    Ok(m)
}

/// The windows of a rate test: (start, end) of each, after a load at `t_load`, and S. At least
/// 800 spectra each: with 200, the residual's own noise (dithered output, a short integration)
/// reached the 0.01-sample limit on a loaded 2-core host (0.0109 once).
fn windows(b: &Bench, plan: &Plan, t_load: u64) -> ([(u64, u64); 2], f64) {
    let step = b.geometry.step();
    let w = plan.spectra.max(800) * step;
    let s = 4 * w;
    let first = t_load.div_ceil(step) * step + w;
    ([(first, first + w), (first + s, first + s + w)], s as f64)
}

/// Where a drift that is linear in time averages to over the window [w0, w1): the mean timestamp
/// of the spectra summed (the middle spectrum's if every one arrived).
fn mid_point(int: &Integration, w0: u64, w1: u64, b: &Bench) -> f64 {
    int.mean_timestamp
        .unwrap_or((w0 + w1) as f64 / 2.0 - 0.5 * b.geometry.step() as f64)
}

/// Runs a test's `attempt` (models loaded, windows measured). Where the output moved past a
/// window with fewer than half its spectra received (heaps lost on the way: a stalled host), that
/// attempt is reported with what dsim, the engine and the harness lost around it, and the test
/// made once more; the second attempt is judged.
fn once_more(
    b: &Bench,
    name: &str,
    progress: &mut dyn FnMut(&str),
    mut attempt: impl FnMut(&mut dyn FnMut(&str)) -> Result<Measured>,
) -> Result<Measured> {
    let before = LossCounters::read(b)?;
    let first = attempt(progress);
    let lost = match &first {
        Err(e) => match e.downcast_ref::<LostWindow>() {
            Some(lost) => (lost.got, lost.want, e.to_string()),
            None => return first,
        },
        Ok(_) => return first,
    };
    let around = before.since(b)?;
    b.clear_delays()?;
    progress(&format!(
        "{name}: attempt 1 set aside ({}) while {}: measuring again",
        lost.2,
        around.describe()
    ));
    let mut m = attempt(progress)?;
    let p = "attempt 1 (set aside: a window lost to heaps lost on the way), ";
    m.figures.push(Figure::info(
        &format!("{p}spectra of the window received"),
        lost.0 as f64,
        "spectra",
    ));
    m.figures.push(Figure::info(
        &format!("{p}spectra of the window"),
        lost.1 as f64,
        "spectra",
    ));
    m.figures.extend(around.figures(p));
    Ok(m)
}

/// One attempt of a check of this family, from its setup.
type Attempt = fn(&Bench, &Plan, &Setup, &mut dyn FnMut(&str)) -> Result<Measured>;

/// A check of this family: the delay test's setup, then the attempt, made once more where a
/// window was lost.
fn check_once_more(
    b: &Bench,
    plan: &Plan,
    name: &str,
    progress: &mut dyn FnMut(&str),
    attempt: Attempt,
) -> Result<Measured> {
    let s = match prepare(b)? {
        Ok(s) => s,
        Err(why) => return Ok(Measured::not_run(why.to_string())),
    };
    once_more(b, name, progress, |progress| attempt(b, plan, &s, progress))
}

fn delay_rate(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    check_once_more(b, plan, "delay-rate", progress, delay_rate_attempt)
}

fn delay_rate_attempt(
    b: &Bench,
    plan: &Plan,
    s: &Setup,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured> {
    let t_load = s.from.max(b.after_now()?);
    let (wins, span) = windows(b, plan, t_load);
    // Half a sample of drift per S samples; the residual is tau - (tau + rate (t - t_load)),
    // predicted at the mean timestamp of the spectra that arrived (a heap lost on a loaded host
    // moves it from the window's middle: at a whole sample per S that alone once put window 2 at
    // 0.0101 samples from the prediction).
    // D times it for a narrowband output, as its limit.
    let rate = 0.5 * b.geometry.band.decimation() as f64 / span;
    b.services
        .engine
        .set_delays(&model(b, s.tau, rate, 0.0, 0.0, Some(t_load)))?;
    let mut m = Measured::default();
    let mut measured = Vec::new();
    for (i, &(w0, w1)) in wins.iter().enumerate() {
        let int = b.integrate_window(w0, w1)?;
        let (res, _) = residual(&int.cross, s, &b.geometry);
        let mid = mid_point(&int, w0, w1, b);
        let want = -rate * (mid - t_load as f64);
        progress(&format!(
            "delay-rate: window {}: residual {res:.4} samples, predicted {want:.4}",
            i + 1
        ));
        m.figures.push(Figure::at_most(
            &format!("window {}: residual delay less prediction", i + 1),
            (res - want).abs(),
            "samples",
            bench_samples(&b.geometry),
        ));
        measured.push((mid, res, want));
    }
    b.clear_delays()?;
    let got = -(measured[1].1 - measured[0].1) / (measured[1].0 - measured[0].0);
    m.figures
        .push(Figure::info("delay rate loaded", rate, "s/s"));
    m.figures.push(Figure::info(
        "delay rate measured, relative error",
        (got / rate - 1.0) * 100.0,
        "%",
    ));
    let t = |x: f64| (x - t_load as f64) / b.geometry.adc_rate;
    m.plots.push(plot(
        "residual delay against time since the load",
        "time since the load (s of ADC time)",
        "residual delay (samples)",
        vec![
            points("measured", measured.iter().map(|x| (t(x.0), x.1)).collect()),
            super::line(
                "predicted",
                measured.iter().map(|x| (t(x.0), x.2)).collect(),
            ),
        ],
    ));
    Ok(m)
}

fn phase_rate(b: &Bench, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    check_once_more(b, plan, "phase-rate", progress, phase_rate_attempt)
}

fn phase_rate_attempt(
    b: &Bench,
    plan: &Plan,
    s: &Setup,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured> {
    let t_load = s.from.max(b.after_now()?);
    let (wins, span) = windows(b, plan, t_load);
    let fs = b.geometry.adc_rate;
    // One radian per S samples.
    let omega = fs / span;
    b.services
        .engine
        .set_delays(&model(b, s.tau, 0.0, 0.0, omega, Some(t_load)))?;
    let mut m = Measured::default();
    let mut series = Vec::new();
    let mut measured = Vec::new();
    for (i, &(w0, w1)) in wins.iter().enumerate() {
        let int = b.integrate_window(w0, w1)?;
        let mid = mid_point(&int, w0, w1, b);
        let want = omega * (mid - t_load as f64) / fs;
        let (w, errors) = worst(&int.cross, s, |_| want);
        let (_, offset) = residual(&int.cross, s, &b.geometry);
        progress(&format!(
            "phase-rate: window {}: phase {:.3} rad, predicted {want:.3}, worst error {w:.3} degree",
            i + 1,
            offset
        ));
        m.figures.push(Figure::at_most(
            &format!("window {}: worst phase error", i + 1),
            w,
            "degree",
            PHASE_DEG,
        ));
        series.push(errors);
        measured.push((mid, offset, want));
    }
    b.clear_delays()?;
    let got = (measured[1].1 - measured[0].1) / (measured[1].0 - measured[0].0) * fs;
    m.figures
        .push(Figure::info("phase rate loaded", omega, "rad/s"));
    m.figures.push(Figure::info(
        "phase rate measured, relative error",
        (got / omega - 1.0) * 100.0,
        "%",
    ));
    let second = series.pop().unwrap_or_default();
    let first = series.pop().unwrap_or_default();
    m.plots.push(error_plot(
        &b.geometry,
        "phase less the model at each window's mid-point",
        vec![("window 1", first), ("window 2", second)],
    ));
    Ok(m)
}

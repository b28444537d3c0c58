//! Compute stage: owns the backend. Per frame it evaluates the delay models (per spectrum: span
//! offset, fine delay, phase), decides which spectra are valid from the presence flags of the span
//! (the previous chunk's tail and this chunk, both polarisations), and keeps up to
//! `max_in_flight` frames in the backend. Frames leave in the order they came.
//!
//! A frame with no input at all is not computed (its heaps are all skipped). The span the backend
//! keeps starts with the tail of the previous *computed* frame, so that tail counts as present only
//! when that frame was the previous chunk; after a gap or a resync the first spectra of the next
//! frame are invalid, which is how frames that mix old and new data get flagged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::{send_until_stop, Command, Meta, PipelineError, Work, TICK};
use crate::backend::{Backend, Channelisation, SpectrumDelay, POLS};
use crate::signal::delay::{fill_output_delays, spectrum_valid, DelayModel, FramePlan, Placement};
use crate::stats::{unix_ns, Stats};

/// Gaps (in chunks) longer than this are a restart, not lost data: not counted as missing heaps.
const MAX_COUNTED_GAP: u64 = 1024;

/// The delay models of one polarisation: the one in force and those loaded for later.
#[derive(Debug, Default)]
struct Models {
    current: DelayModel,
    /// (first timestamp it applies to, model), in order.
    pending: VecDeque<(u64, DelayModel)>,
}

impl Models {
    /// A new model supersedes any loaded for the same time or later.
    fn load(&mut self, apply_from: u64, model: DelayModel) {
        self.pending.retain(|(from, _)| *from < apply_from);
        self.pending.push_back((apply_from, model));
    }

    /// Makes every model due by `t` current.
    fn promote(&mut self, t: i128) {
        while let Some(&(from, m)) = self.pending.front() {
            if from as i128 > t {
                break;
            }
            self.current = m;
            self.pending.pop_front();
        }
    }
}

/// What the compute stage needs: the chunks' heaps, and where each output's spectra sit.
#[derive(Clone, Debug)]
pub struct ComputeSpec {
    /// Digitiser heaps per chunk.
    pub slots: usize,
    /// Samples per digitiser heap.
    pub heap_samples: usize,
    /// Per output, in the configuration's order.
    pub outputs: Vec<ComputeOutput>,
}

/// One output as the compute stage sees it.
#[derive(Clone, Debug)]
pub struct ComputeOutput {
    pub g: Channelisation,
    pub plan: FramePlan,
    /// A narrowband output's mixer word at start; `None` for a wideband output.
    pub mixer: Option<u32>,
}

enum InFlight {
    Submitted(Meta),
    /// Not computed; waits here so that frames stay in order.
    Skipped(Work),
}

/// What the compute stage keeps for one output: where its spectra sit, and scratch for their
/// placements and validity.
struct OutputPlan {
    g: Channelisation,
    plan: FramePlan,
    /// A narrowband output's mixer word, for every frame from the next prepared on; `None` for
    /// a wideband output.
    mixer: Option<u32>,
    placements: [Vec<Placement>; POLS],
    alt_delays: [Vec<SpectrumDelay>; POLS],
    alt_placements: [Vec<Placement>; POLS],
    spectrum_valid: Vec<bool>,
}

impl OutputPlan {
    fn new(g: Channelisation, plan: FramePlan, mixer: Option<u32>) -> Self {
        let spectra = g.spectra_per_frame();
        Self {
            g,
            plan,
            mixer,
            placements: std::array::from_fn(|_| vec![Placement::default(); spectra]),
            alt_delays: std::array::from_fn(|_| vec![SpectrumDelay::default(); spectra]),
            alt_placements: std::array::from_fn(|_| vec![Placement::default(); spectra]),
            spectrum_valid: vec![false; spectra],
        }
    }
}

pub struct Compute {
    backend: Box<dyn Backend>,
    /// Digitiser heaps per chunk, and samples per digitiser heap.
    slots: usize,
    heap_samples: usize,
    /// Per output, in the configuration's order.
    outputs: Vec<OutputPlan>,
    /// Delay models act on the input: every output follows them.
    models: [Models; POLS],
    /// Presence of the previous computed chunk then this one, per polarisation.
    span_present: [Vec<bool>; POLS],
    last_computed: Option<u64>,
    last_present: [Vec<bool>; POLS],
    last_seen: Option<u64>,
    in_flight: VecDeque<InFlight>,
    submitted: usize,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    delay_errors: u64,
}

impl Compute {
    pub fn new(
        spec: &ComputeSpec,
        backend: Box<dyn Backend>,
        stats: Arc<Stats>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let slots = spec.slots;
        stats
            .in_flight_max
            .store(backend.max_in_flight().max(1) as u64, Relaxed);
        Self {
            backend,
            slots,
            heap_samples: spec.heap_samples,
            outputs: spec
                .outputs
                .iter()
                .map(|o| OutputPlan::new(o.g, o.plan, o.mixer))
                .collect(),
            models: Default::default(),
            span_present: std::array::from_fn(|_| vec![false; 2 * slots]),
            last_computed: None,
            last_present: std::array::from_fn(|_| vec![false; slots]),
            last_seen: None,
            in_flight: VecDeque::new(),
            submitted: 0,
            stats,
            stop,
            delay_errors: 0,
        }
    }

    pub fn run(
        mut self,
        rx: Receiver<Work>,
        tx: Sender<Work>,
        commands: Receiver<Command>,
    ) -> Result<(), PipelineError> {
        let result = self.run_inner(&rx, &tx, &commands);
        if result.is_err() {
            self.stop.store(true, Relaxed);
        }
        result
    }

    fn run_inner(
        &mut self,
        rx: &Receiver<Work>,
        tx: &Sender<Work>,
        commands: &Receiver<Command>,
    ) -> Result<(), PipelineError> {
        while !self.stop.load(Relaxed) {
            while let Ok(c) = commands.try_recv() {
                self.command(c);
            }
            match rx.recv_timeout(TICK) {
                Ok(mut work) => {
                    let compute = self.prepare(&mut work);
                    self.enqueue(work, compute, tx)?;
                }
                // Idle: finish what is in flight so that output is not held back.
                Err(RecvTimeoutError::Timeout) => {
                    while !self.in_flight.is_empty() {
                        self.complete_oldest(tx)?;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Gains { output, pol, gains } => {
                if let Err(e) = self.backend.set_gains(output, pol, &gains) {
                    tracing::warn!(output, pol, "gains not applied: {e}");
                }
            }
            Command::Delay {
                pol,
                apply_from,
                model,
            } => {
                if let Some(m) = self.models.get_mut(pol) {
                    m.load(apply_from, model);
                    self.stats.pending_delays[pol].store(m.pending.len() as u64, Relaxed);
                }
            }
            Command::Centre { output, mixer } => match self.outputs.get_mut(output) {
                Some(o) if o.mixer.is_some() => o.mixer = Some(mixer),
                _ => tracing::warn!(output, "centre not applied: not a narrowband output"),
            },
        }
    }

    /// Fills the frame's delays and the meta's validity. Returns whether to compute the frame.
    fn prepare(&mut self, work: &mut Work) -> bool {
        let slots = self.slots;
        let id = work.meta.id;
        let Work { frame, meta } = work;

        // Chunks that never arrived at all (neither polarisation) are lost data too.
        if let Some(prev) = self.last_seen {
            let gap = id.saturating_sub(prev).saturating_sub(1);
            if id > prev && gap > 0 && gap <= MAX_COUNTED_GAP {
                for p in 0..POLS {
                    self.stats.pols[p]
                        .heaps_missing
                        .fetch_add(gap * slots as u64, Relaxed);
                }
                for (o, plan) in self.stats.outputs.iter().zip(&self.outputs) {
                    let heaps = plan.g.heaps_per_frame() as u64;
                    for s in &o.heaps_skipped {
                        s.fetch_add(gap * heaps, Relaxed);
                    }
                }
            }
        }
        self.last_seen = Some(id);
        for p in 0..POLS {
            let missing = meta.present[p].iter().filter(|&&x| !x).count();
            self.stats.pols[p]
                .heaps_missing
                .fetch_add(missing as u64, Relaxed);
        }

        let any_input = meta.present.iter().any(|p| p.iter().any(|&x| x));
        let timestamp = frame.input.timestamp;
        // Models due by the earliest spectrum of any output take over; later ones switch within
        // each output's frame in `fill`.
        if any_input {
            let first = self
                .outputs
                .iter()
                .map(|o| o.plan.spectrum_timestamp(&o.g, timestamp, 0))
                .min();
            if let Some(first) = first {
                for m in &mut self.models {
                    m.promote(first);
                }
            }
        }

        // The span: the previous computed chunk's flags (if it is the previous chunk), then ours.
        let prev_ok = id.checked_sub(1).is_some() && self.last_computed == id.checked_sub(1);
        for p in 0..POLS {
            let (head, tail) = self.span_present[p].split_at_mut(slots);
            if prev_ok {
                head.copy_from_slice(&self.last_present[p]);
            } else {
                head.fill(false);
            }
            tail.copy_from_slice(&meta.present[p]);
        }
        for k in 0..self.outputs.len() {
            let o = &self.outputs[k];
            // Negative only for the first frames after timestamp 0; wrapped, it still keys the
            // dither uniquely.
            frame.outputs[k].timestamp = o.plan.spectrum_timestamp(&o.g, timestamp, 0) as u64;
            // The frame's one mixer word: its DDC and its delays' mixer term use the same.
            frame.outputs[k].mixer = o.mixer.unwrap_or(0);
            let delays = &mut frame.outputs[k].delays;
            let delays_ok = any_input && self.fill(k, timestamp, delays);
            let o = &mut self.outputs[k];
            let g = o.g;
            let span_start = (g.chunk_samples() - g.input.overlap_samples) as u64;
            for (m, valid) in o.spectrum_valid.iter_mut().enumerate() {
                *valid = delays_ok
                    && (0..POLS).all(|p| {
                        o.placements[p][m].in_span
                            && spectrum_valid(
                                &self.span_present[p],
                                self.heap_samples,
                                span_start,
                                delays[p][m].offset,
                                g.window(),
                            )
                    });
            }
            let s = g.output.spectra_per_heap;
            for (h, v) in meta.heap_valid[k].iter_mut().enumerate() {
                *v = o.spectrum_valid[h * s..(h + 1) * s].iter().all(|&x| x);
            }
        }
        for (p, m) in self.models.iter().enumerate() {
            self.stats.pending_delays[p].store(m.pending.len() as u64, Relaxed);
        }
        if any_input {
            self.last_computed = Some(id);
            for p in 0..POLS {
                self.last_present[p].copy_from_slice(&meta.present[p]);
            }
        }
        any_input
    }

    /// Evaluates the delay models for every spectrum of output `k` in the frame starting at
    /// `timestamp`. A model loaded for a time inside the frame takes over from that spectrum on (a
    /// second model due in the same frame waits for the next frame).
    fn fill(&mut self, k: usize, timestamp: u64, delays: &mut [Vec<SpectrumDelay>; POLS]) -> bool {
        let o = &mut self.outputs[k];
        let (g, plan, mixer) = (&o.g, &o.plan, o.mixer.unwrap_or(0));
        let last = plan.spectrum_timestamp(g, timestamp, g.spectra_per_frame() - 1);
        let current = [self.models[0].current, self.models[1].current];
        let result = fill_output_delays(
            g,
            plan,
            timestamp,
            &current,
            mixer,
            delays,
            &mut o.placements,
        );
        let mut outside = match result {
            Ok(n) => n,
            Err(e) => return self.delay_error(e.to_string()),
        };
        let next: [Option<(u64, DelayModel)>; POLS] = std::array::from_fn(|p| {
            self.models[p]
                .pending
                .front()
                .copied()
                .filter(|(from, _)| (*from as i128) <= last)
        });
        if next.iter().any(Option::is_some) {
            let models = std::array::from_fn(|p| next[p].map_or(current[p], |(_, m)| m));
            let alt = fill_output_delays(
                g,
                plan,
                timestamp,
                &models,
                mixer,
                &mut o.alt_delays,
                &mut o.alt_placements,
            );
            if let Err(e) = alt {
                return self.delay_error(e.to_string());
            }
            outside = 0;
            for p in 0..POLS {
                let Some((from, _)) = next[p] else { continue };
                let switched = (0..g.spectra_per_frame())
                    .find(|&m| plan.spectrum_timestamp(g, timestamp, m) >= from as i128)
                    .unwrap_or(g.spectra_per_frame());
                delays[p][switched..].copy_from_slice(&o.alt_delays[p][switched..]);
                o.placements[p][switched..].copy_from_slice(&o.alt_placements[p][switched..]);
            }
            for p in 0..POLS {
                outside += o.placements[p].iter().filter(|x| !x.in_span).count();
            }
        }
        if outside > 0 {
            self.stats
                .delay_out_of_span
                .fetch_add(outside as u64, Relaxed);
        }
        true
    }

    fn delay_error(&mut self, e: String) -> bool {
        if self.delay_errors.is_multiple_of(1000) {
            tracing::warn!("delay model unusable, frame flagged: {e}");
        }
        self.delay_errors += 1;
        false
    }

    fn enqueue(
        &mut self,
        mut work: Work,
        compute: bool,
        tx: &Sender<Work>,
    ) -> Result<(), PipelineError> {
        if compute {
            while self.submitted >= self.backend.max_in_flight().max(1) {
                self.complete_oldest(tx)?;
            }
            work.meta.submitted_at = Some(Instant::now());
            let Work { frame, meta } = work;
            self.backend.submit(frame).map_err(|e| self.failed(e))?;
            self.in_flight.push_back(InFlight::Submitted(meta));
            self.submitted += 1;
        } else {
            work.meta.computed = false;
            self.stats.frames_empty.fetch_add(1, Relaxed);
            self.in_flight.push_back(InFlight::Skipped(work));
        }
        // Skipped frames at the front need nothing from the backend.
        while matches!(self.in_flight.front(), Some(InFlight::Skipped(_))) {
            self.complete_oldest(tx)?;
        }
        Ok(())
    }

    /// The backend's error as the stage's.
    fn failed(&self, error: crate::backend::BackendError) -> PipelineError {
        PipelineError::Backend {
            backend: self.backend.name(),
            error,
        }
    }

    fn complete_oldest(&mut self, tx: &Sender<Work>) -> Result<(), PipelineError> {
        let work = match self.in_flight.pop_front() {
            None => return Ok(()),
            Some(InFlight::Skipped(w)) => w,
            Some(InFlight::Submitted(mut meta)) => {
                let frame = self
                    .backend
                    .wait()
                    .map_err(|e| self.failed(e))?
                    .ok_or_else(|| PipelineError::NoFrame(self.backend.name()))?;
                self.submitted -= 1;
                if let Some(t) = meta.submitted_at {
                    self.stats.chunk_time.record(t.elapsed());
                }
                meta.computed = true;
                // Input sensors only from whole chunks: a missing heap's zeros would read as a
                // quieter input.
                if let Some(power) = frame.input.power {
                    let g = self.backend.input();
                    for (p, power) in power.into_iter().enumerate() {
                        if meta.present[p].iter().all(|&x| x) {
                            self.stats.pols[p].record_input(power, g.chunk_samples, g.sample_bits);
                        }
                    }
                }
                for (stats, out) in self.stats.outputs.iter().zip(&frame.outputs) {
                    for p in 0..POLS {
                        stats.saturated[p].fetch_add(out.saturated[p], Relaxed);
                    }
                    stats.values.fetch_add(stats.frame_values, Relaxed);
                }
                self.stats.frames_computed.fetch_add(1, Relaxed);
                self.stats
                    .last_frame_timestamp
                    .store(frame.input.timestamp, Relaxed);
                self.stats.last_frame_unix_ns.store(unix_ns(), Relaxed);
                Work { frame, meta }
            }
        };
        // A closed queue means shutdown; the frame is dropped with the pipeline.
        send_until_stop(tx, work, &self.stop);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{null::NullBackend, Frame, Synchronous};
    use crate::config::EngineConfig;
    use crate::pipeline::StageSpecs;
    use crate::signal::ddc;
    use crate::signal::delay::fill_delays;
    use crate::signal::narrowband::narrowband_delay;

    /// A wideband output of 1024 channels and a narrowband one of 256 channels (D = 16, 192 DDC
    /// taps, 4 PFB taps) at 1e8 samples/s, --max-delay 1e-5 (1000 samples).
    fn engine() -> (EngineConfig, Compute) {
        let args = crate::config::test_args(&[
            "--taps",
            "4",
            "--spectra-per-heap",
            "64",
            "--heaps-per-frame",
            "4",
            "--heap-samples",
            "4096",
            "--adc-sample-rate",
            "1e8",
            "--max-delay",
            "1e-5",
            "--wideband",
            "wide:dst=127.0.0.1:7150,channels=1024",
            "--narrowband",
            "nb:dst=127.0.0.1:7151,channels=256,decimation=16,centre=3e7",
        ])
        .unwrap();
        let cfg = EngineConfig::from_args(&args).unwrap();
        let backend = NullBackend::new(cfg.input.geometry, &cfg.output_geometries()).unwrap();
        let compute = Compute::new(
            &StageSpecs::new(&cfg).compute,
            Box::new(Synchronous::new(backend)),
            Arc::new(Stats::for_config(&cfg)),
            Arc::new(AtomicBool::new(false)),
        );
        (cfg, compute)
    }

    /// Frame `id` with every input heap present, or all but digitiser heap `missing` of pol 0.
    fn work(cfg: &EngineConfig, id: u64, missing: Option<usize>) -> Work {
        let mut meta = Meta::new(&StageSpecs::new(cfg).frame);
        meta.id = id;
        for p in 0..POLS {
            meta.present[p].fill(true);
        }
        if let Some(h) = missing {
            meta.present[0][h] = false;
        }
        let mut frame = Frame::new_host(&cfg.input.geometry, &cfg.output_geometries());
        frame.input.timestamp = id * cfg.input.geometry.chunk_samples as u64;
        Work { frame, meta }
    }

    /// Prepares frames `id - 1` and `id` (so that the span's head counts as present) under a
    /// fixed `delay` (s) and `phase` on both polarisations; frame `id`.
    fn prepared(cfg: &EngineConfig, c: &mut Compute, id: u64, delay: f64, phase: f64) -> Work {
        c.command(Command::Delay {
            pol: 0,
            apply_from: 0,
            model: DelayModel::fixed(delay, phase),
        });
        c.command(Command::Delay {
            pol: 1,
            apply_from: 0,
            model: DelayModel::fixed(-delay, -phase),
        });
        let mut w = work(cfg, id - 1, None);
        assert!(c.prepare(&mut w));
        let mut w = work(cfg, id, None);
        assert!(c.prepare(&mut w));
        w
    }

    /// Narrowband spectra get the model at their timestamps mapped by `narrowband_delay`:
    /// offsets on the DDC's grid, k = round(d / D) subsampled samples before their undelayed
    /// place, every window inside the span up to +-max delay (all heaps valid), and the frame's
    /// mixer word; the wideband output's delays are exactly `fill_delays`' as before.
    #[test]
    fn narrowband_delays_are_mapped_and_wideband_is_unchanged() {
        let (cfg, mut c) = engine();
        let (wide, nb) = (0, 1);
        let word = cfg.outputs[nb].mixer().unwrap();
        assert_eq!(word, ddc::mixer_word(3e7, 1e8, 16).unwrap());
        let fs = cfg.fs;
        // +-max delay (1000 samples: k = +-63 of D = 16, ties away from zero), fractions, zero.
        for delay in [1e-5, -1e-5, 0.0, 1.234e-6, -7.775e-6, 8e-8, 4.99e-6] {
            let id = 1000;
            let w = prepared(&cfg, &mut c, id, delay, 0.3);
            for k in [wide, nb] {
                let g = cfg.channelisation(k);
                let plan = cfg.plan(k);
                let out = &w.frame.outputs[k];
                assert!(
                    w.meta.heap_valid[k].iter().all(|&v| v),
                    "{delay} output {k}"
                );
                for p in 0..POLS {
                    let model = DelayModel::fixed(if p == 0 { delay } else { -delay }, 0.0);
                    for (m, d) in out.delays[p].iter().enumerate() {
                        let t0 = plan.spectrum_timestamp(&g, w.frame.input.timestamp, m);
                        let at = DelayModel {
                            phase: if p == 0 { 0.3 } else { -0.3 },
                            ..model
                        }
                        .at(t0, fs)
                        .unwrap();
                        let nominal = (g.input.overlap_samples - plan.lag + m * g.step()) as i64;
                        assert!(d.offset as usize <= g.max_offset(), "{delay} {k} {m}");
                        if k == wide {
                            assert_eq!(d.offset as i64, nominal - at.coarse);
                            assert_eq!((d.fine, d.phase), (at.fine as f32, at.phase as f32));
                            continue;
                        }
                        let want = narrowband_delay(&at, 16, 16, word);
                        assert_eq!(d.offset % 16, 0, "{delay} {m}");
                        assert_eq!(d.offset as i64, nominal - want.coarse * 16);
                        assert_eq!((d.fine, d.phase), (want.fine as f32, want.phase as f32));
                        assert!(d.fine.abs() <= 0.5);
                        // The window, as the reference reads it, lies in the span.
                        let span_start =
                            w.frame.input.timestamp as i128 - g.input.overlap_samples as i128;
                        let start = (t0 / 16 - want.coarse as i128) * 16;
                        assert_eq!(start - span_start, d.offset as i128);
                        assert!(d.offset as usize + g.window() <= g.span_samples());
                    }
                }
                assert_eq!(out.mixer, if k == nb { word } else { 0 });
            }
            // The wideband delays are exactly `fill_delays`' (bit for bit, as before narrowband).
            let g = cfg.channelisation(wide);
            let s = g.spectra_per_frame();
            let mut delays = [
                vec![SpectrumDelay::default(); s],
                vec![SpectrumDelay::default(); s],
            ];
            let mut placed = [vec![Placement::default(); s], vec![Placement::default(); s]];
            let models = [
                DelayModel::fixed(delay, 0.3),
                DelayModel::fixed(-delay, -0.3),
            ];
            let ts = w.frame.input.timestamp;
            fill_delays(&g, &cfg.plan(wide), ts, &models, &mut delays, &mut placed).unwrap();
            assert_eq!(w.frame.outputs[wide].delays, delays);
        }
        // Beyond the max delay (a rate took it there) the first narrowband window leaves the
        // span: flagged, and its offset clamped onto the grid.
        let w = prepared(&cfg, &mut c, 1000, 1.03e-5, 0.0);
        assert!(!w.meta.heap_valid[nb][0]);
        assert!(w.frame.outputs[nb].delays[0]
            .iter()
            .all(|d| d.offset % 16 == 0));
    }

    /// A new centre takes effect from the next frame prepared: its mixer word, and the mixer term
    /// of its delays. A centre for a wideband output is ignored.
    #[test]
    fn a_new_centre_applies_to_whole_frames() {
        let (cfg, mut c) = engine();
        let nb = 1;
        let old = cfg.outputs[nb].mixer().unwrap();
        let new = ddc::mixer_word(4e7, 1e8, 16).unwrap();
        let w = prepared(&cfg, &mut c, 50, 2.5e-6, 0.0);
        assert_eq!(w.frame.outputs[nb].mixer, old);
        c.command(Command::Centre {
            output: nb,
            mixer: new,
        });
        c.command(Command::Centre {
            output: 0,
            mixer: new,
        });
        let w = prepared(&cfg, &mut c, 52, 2.5e-6, 0.0);
        assert_eq!(w.frame.outputs[nb].mixer, new);
        assert_eq!(w.frame.outputs[0].mixer, 0);
        let g = cfg.channelisation(nb);
        let t0 = cfg
            .plan(nb)
            .spectrum_timestamp(&g, w.frame.input.timestamp, 0);
        let at = DelayModel::fixed(2.5e-6, 0.0).at(t0, cfg.fs).unwrap();
        let want = narrowband_delay(&at, 16, 16, new);
        assert_eq!(w.frame.outputs[nb].delays[0][0].phase, want.phase as f32);
        assert_ne!(want.phase, narrowband_delay(&at, 16, 16, old).phase);
    }

    /// A lost input heap invalidates exactly the narrowband spectra whose windows ((2nT - 1) D + L
    /// samples from t0 - kD) touch it, and with them their output heaps.
    #[test]
    fn a_lost_heap_invalidates_the_narrowband_windows_that_touch_it() {
        let (cfg, mut c) = engine();
        let nb = 1;
        let g = cfg.channelisation(nb);
        let plan = cfg.plan(nb);
        let hs = cfg.input.heap_samples as i128;
        for (delay, missing) in [(0.0, 0), (1e-5, 130), (-1e-5, 500), (3.3e-6, 300)] {
            let id = 20;
            let _ = prepared(&cfg, &mut c, id, delay, 0.0);
            let mut w = work(&cfg, id + 1, Some(missing));
            assert!(c.prepare(&mut w));
            let chunk_start = w.frame.input.timestamp as i128;
            let lost = chunk_start + missing as i128 * hs..chunk_start + (missing as i128 + 1) * hs;
            let s = g.output.spectra_per_heap;
            let spectra_ok: Vec<bool> = (0..g.spectra_per_frame())
                .map(|m| {
                    let t0 = plan.spectrum_timestamp(&g, w.frame.input.timestamp, m);
                    let at = DelayModel::fixed(delay, 0.0).at(t0, cfg.fs).unwrap();
                    let k = narrowband_delay(&at, 16, 16, cfg.outputs[nb].mixer().unwrap()).coarse;
                    let start = t0 - k as i128 * 16;
                    let end = start + g.window() as i128;
                    end <= lost.start || start >= lost.end
                })
                .collect();
            let want: Vec<bool> = spectra_ok.chunks(s).map(|c| c.iter().all(|&v| v)).collect();
            assert_eq!(w.meta.heap_valid[nb], want, "{delay} {missing}");
            assert!(want.iter().any(|&v| !v) && want.iter().any(|&v| v));
        }
    }

    #[test]
    fn later_loads_supersede_pending_ones() {
        let mut m = Models::default();
        m.load(100, DelayModel::fixed(1.0, 0.0));
        m.load(200, DelayModel::fixed(2.0, 0.0));
        m.load(150, DelayModel::fixed(3.0, 0.0));
        assert_eq!(m.pending.len(), 2);
        m.promote(120);
        assert_eq!(m.current.delay, 1.0);
        m.promote(10_000);
        assert_eq!(m.current.delay, 3.0);
        assert!(m.pending.is_empty());
    }
}

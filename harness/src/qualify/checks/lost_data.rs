//! Lost data: a dsim drop list gives exactly the flagged output the test bed's oracle predicts,
//! and the engine counts exactly the input it missed.
//!
//! The engine's counters are read before and after, so whatever else loses input between the
//! two reads is counted too: on a loaded host dsim can fall behind and skip heaps, or a receive
//! socket overflow. Each counter is read as close to the dropped heaps as is safe (`measure`),
//! and around each attempt the check reads what dsim, the engine and the harness say they lost
//! besides; an attempt whose counts are off while those show a loss is reported with that loss,
//! and measured once more. The comparison itself stays exact.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use fgpu_api::dsim::{FaultsRequest, PolFaults, Selector};

use super::{plot, points};
use crate::control::EngineCounts;
use crate::gaps::outputs_hit;
use crate::qualify::{Bench, Check, Measured, Plan};
use crate::receive::Snapshot;
use crate::record::qualify::Figure;
use crate::signals;

pub(super) const LOST_DATA: Check = Check {
    name: "lost-data",
    title: "Lost data",
    requirement: "Digitiser heaps dropped on purpose (one of polarisation 0, three of polarisation 1) remove exactly the output heaps the test bed's oracle predicts in every substream, and the engine counts exactly the heaps it missed.",
    method: "dsim's drop list names heaps about a second ahead; the harness's receiver tracks every substream's timestamps; the oracle (harness::gaps::outputs_hit, written from the signal path's definition, not the engine's code) predicts which output heaps' windows touch a dropped heap (a narrowband output's windows read (2nT - 1) D + L samples each, its spectra 2nD apart). The engine counts a missing heap where it prepares a frame and a skipped one where it sends: its missing count is read last while its input is still short of the first dropped heap and again once the frame of the last is computed, its skipped count last while its output is short of the heap before the first one predicted and again once the output has passed the last heap the drops touch, so that a loss in other frames stays out of the counts. An engine that does not say how far its input and output have got with its counters (katcp: katgpucbf's fgpu has them in sensors sampled apart from its Prometheus counters) has both counts read while dsim's newest timestamp, a chunk on, is short of the first dropped heap, and again once the harness has received output heaps two chunks past the last one's frame. Around that, dsim's skipped heaps and catch-ups, the engine's rejected packets by reason and socket drops (where its front says them), and the harness's own socket drops are read: where the counts are off and those show input or output lost besides the drops (a host that stalled), the attempt is reported with that loss and the measurement made once more; the second attempt is judged.",
    run: lost_data,
    needs_ddc: false,
};

/// Heaps dsim drops: one of polarisation 0, three of polarisation 1.
const DROPPED: u64 = 4;

fn lost_data(b: &Bench, _plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Measured> {
    let first = attempt(b, progress)?;
    let mut m = Measured::default();
    if first.exact() || !first.disturbance.any() {
        first.judge(&mut m);
        return Ok(m);
    }
    progress(&format!(
        "lost-data: attempt 1 off ({}) while {}: measuring again",
        first.counts(),
        first.disturbance.describe()
    ));
    let second = attempt(b, progress)?;
    second.judge(&mut m);
    first.set_aside(&mut m);
    Ok(m)
}

/// What was lost around one attempt besides the heaps dropped on purpose, from the counters of
/// the programs that lose it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Disturbance {
    /// Heaps dsim never sent: its senders fell too far behind.
    dsim_skipped: u64,
    /// Stalls dsim's senders made up by sending late, in a burst.
    dsim_catch_ups: u64,
    /// Input packets the engine rejected, by reason (no buffer, too old, ...).
    engine_rejected: BTreeMap<String, u64>,
    /// Input packets the kernel dropped at the engine's full receive sockets, where its front
    /// says (katcp, as katgpucbf's fgpu, does not).
    engine_socket_drops: Option<u64>,
    /// Output packets the kernel dropped at the harness's full receive sockets.
    harness_socket_drops: u64,
}

impl Disturbance {
    fn between(
        engine: (&EngineCounts, &EngineCounts),
        dsim: (&fgpu_api::dsim::Status, &fgpu_api::dsim::Status),
        rx: (&Snapshot, &Snapshot),
    ) -> Self {
        let empty = BTreeMap::new();
        let r0 = engine.0.rejected.as_ref().unwrap_or(&empty);
        let engine_rejected = engine
            .1
            .rejected
            .iter()
            .flatten()
            .map(|(reason, &n)| {
                let d = n.saturating_sub(r0.get(reason).copied().unwrap_or(0));
                (reason.clone(), d)
            })
            .filter(|&(_, d)| d > 0)
            .collect();
        let harness = |s: &Snapshot| s.substreams.iter().map(|x| x.socket_drops).sum::<u64>();
        Self {
            dsim_skipped: dsim.1.heaps_skipped.saturating_sub(dsim.0.heaps_skipped),
            dsim_catch_ups: dsim.1.catch_ups.saturating_sub(dsim.0.catch_ups),
            engine_rejected,
            engine_socket_drops: match (engine.0.socket_drops, engine.1.socket_drops) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            },
            harness_socket_drops: harness(rx.1).saturating_sub(harness(rx.0)),
        }
    }

    pub(super) fn any(&self) -> bool {
        self.dsim_skipped > 0
            || self.dsim_catch_ups > 0
            || !self.engine_rejected.is_empty()
            || self.engine_socket_drops.is_some_and(|n| n > 0)
            || self.harness_socket_drops > 0
    }

    /// One phrase: what was lost, or that nothing was.
    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.dsim_skipped > 0 {
            parts.push(format!(
                "dsim fell behind and skipped {} heaps",
                self.dsim_skipped
            ));
        }
        if self.dsim_catch_ups > 0 {
            parts.push(format!(
                "dsim caught up after {} stalls",
                self.dsim_catch_ups
            ));
        }
        for (reason, n) in &self.engine_rejected {
            parts.push(format!("the engine rejected {n} input packets ({reason})"));
        }
        if let Some(n) = self.engine_socket_drops.filter(|&n| n > 0) {
            parts.push(format!("the engine's sockets dropped {n} input packets"));
        }
        if self.harness_socket_drops > 0 {
            parts.push(format!(
                "the harness's sockets dropped {} output packets",
                self.harness_socket_drops
            ));
        }
        if parts.is_empty() {
            "nothing else was lost".into()
        } else {
            parts.join(", ")
        }
    }

    /// The evidence as figures, reported, not judged.
    pub(super) fn figures(&self, prefix: &str) -> Vec<Figure> {
        let mut f = vec![
            Figure::info(
                &format!("{prefix}dsim: heaps skipped (it fell behind)"),
                self.dsim_skipped as f64,
                "heaps",
            ),
            Figure::info(
                &format!("{prefix}dsim: catch-ups after a stall"),
                self.dsim_catch_ups as f64,
                "",
            ),
            Figure::info(
                &format!("{prefix}harness: output packets its sockets dropped"),
                self.harness_socket_drops as f64,
                "packets",
            ),
        ];
        if let Some(n) = self.engine_socket_drops {
            f.push(Figure::info(
                &format!("{prefix}engine: input packets its sockets dropped"),
                n as f64,
                "packets",
            ));
        }
        for (reason, n) in &self.engine_rejected {
            f.push(Figure::info(
                &format!("{prefix}engine: input packets rejected ({reason})"),
                *n as f64,
                "packets",
            ));
        }
        f
    }
}

/// What dsim, the engine and the harness had counted lost at one moment: read before and after
/// a measurement, the [`Disturbance`] between.
pub(super) struct LossCounters {
    engine: EngineCounts,
    dsim: fgpu_api::dsim::Status,
    rx: Snapshot,
}

impl LossCounters {
    pub(super) fn read(b: &Bench) -> Result<Self> {
        Ok(Self {
            dsim: b.services.dsim.status()?,
            engine: b.services.engine.counts()?,
            rx: b.rx.snapshot(),
        })
    }

    /// What was lost from this reading to now.
    pub(super) fn since(&self, b: &Bench) -> Result<Disturbance> {
        let now = Self::read(b)?;
        Ok(Disturbance::between(
            (&self.engine, &now.engine),
            (&self.dsim, &now.dsim),
            (&self.rx, &now.rx),
        ))
    }
}

/// One drop list and what came of it.
struct Attempt {
    substreams: usize,
    /// Substreams whose missing heaps are exactly the predicted ones.
    matched: usize,
    /// Output heaps the oracle predicts, every substream together.
    predicted: u64,
    /// The engine's count of digitiser heaps missing between the two reads.
    engine_missing: u64,
    /// The engine's count of this output's heaps skipped between the two reads.
    engine_skipped: u64,
    /// Output heaps missing in the harness's view, besides the predicted ones, from the start of
    /// the attempt to the last heap the drops touch.
    unpredicted: u64,
    disturbance: Disturbance,
    plotted: Vec<(f64, f64)>,
}

impl Attempt {
    fn exact(&self) -> bool {
        self.matched == self.substreams
            && self.engine_missing == DROPPED
            && self.engine_skipped == self.predicted
    }

    fn counts(&self) -> String {
        format!(
            "{} of {} substreams as predicted, the engine counted {} heaps missing for {DROPPED} dropped and skipped {} output heaps for {} predicted",
            self.matched, self.substreams, self.engine_missing, self.engine_skipped, self.predicted
        )
    }

    /// The figures this attempt is judged by, with what else was lost around it.
    fn judge(&self, m: &mut Measured) {
        m.figures.push(Figure::exactly(
            "substreams whose missing heaps are exactly the predicted ones",
            self.matched as f64,
            "substreams",
            self.substreams as f64,
        ));
        m.figures.push(Figure::exactly(
            "digitiser heaps the engine counted missing",
            self.engine_missing as f64,
            "heaps",
            DROPPED as f64,
        ));
        // This output's: the engine's other outputs lose heaps of their own.
        m.figures.push(Figure::exactly(
            "output heaps the engine skipped",
            self.engine_skipped as f64,
            "heaps",
            self.predicted as f64,
        ));
        m.figures.push(Figure::info(
            "output heaps missing besides the predicted ones (harness)",
            self.unpredicted as f64,
            "heaps",
        ));
        m.figures.extend(self.disturbance.figures("around it, "));
        m.plots.push(plot(
            "substream 0: predicted (1) and missing (0) output heaps",
            "output heap after the first drop",
            "",
            vec![points("heaps", self.plotted.clone())],
        ));
    }

    /// A first attempt set aside for a loss elsewhere: its counts and that loss, reported.
    fn set_aside(&self, m: &mut Measured) {
        let p = "attempt 1 (set aside: input or output lost besides the drops), ";
        for (what, value, unit) in [
            ("substreams as predicted", self.matched as u64, "substreams"),
            (
                "digitiser heaps the engine counted missing",
                self.engine_missing,
                "heaps",
            ),
            (
                "output heaps the engine skipped",
                self.engine_skipped,
                "heaps",
            ),
            ("output heaps predicted", self.predicted, "heaps"),
            (
                "output heaps missing besides the predicted ones (harness)",
                self.unpredicted,
                "heaps",
            ),
        ] {
            m.figures
                .push(Figure::info(&format!("{p}{what}"), value as f64, unit));
        }
        m.figures.extend(self.disturbance.figures(p));
    }
}

fn attempt(b: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Attempt> {
    let g = b.geometry;
    let engine = &b.services.engine;
    let dsim_start = b.services.dsim.status()?;
    // Before the drop list: these counts cannot hold the drops.
    let engine_start = engine.counts()?;
    let rx_start = b.rx.snapshot();
    let hs = dsim_start.heap_samples as u64;
    let out_step = g.spectra_per_heap as u64 * g.step();
    let span = g.heap_span();
    // About a second ahead, and past the engine's frames in flight.
    let ahead = (g.adc_rate as u64).max(6 * g.chunk_samples as u64) / hs + 8;
    let k0 = dsim_start.timestamp / hs + ahead;
    let gap = (4 * out_step + span) / hs + 8;
    let k1 = k0 + gap;
    let drop = |selector: Selector| PolFaults {
        drop: Some(selector),
        ..Default::default()
    };
    b.services.dsim.set_faults(&FaultsRequest {
        pol0: Some(drop(Selector {
            heaps: vec![k0],
            ..Default::default()
        })),
        pol1: Some(drop(Selector {
            ranges: vec![[k1, k1 + 3]],
            ..Default::default()
        })),
    })?;
    let none = FaultsRequest {
        pol0: Some(PolFaults::default()),
        pol1: Some(PolFaults::default()),
    };
    progress(&format!(
        "lost-data: dropping heap {k0} of pol 0 and {k1}..{} of pol 1",
        k1 + 2
    ));
    let lo = (k0 * hs).saturating_sub(span + out_step);
    let hi = (k1 + 3) * hs + span;
    // The oracle's output heaps per substream, on its heaps' lattice.
    let predicted_in = |first_timestamp: Option<u64>| -> BTreeSet<u64> {
        let phase = first_timestamp.unwrap_or(0) % out_step;
        [(k0, k0 + 1), (k1, k1 + 3)]
            .iter()
            .flat_map(|&(a, e)| outputs_hit(a * hs, e * hs, phase, out_step, span))
            .filter(|t| (lo..=hi).contains(t))
            .collect()
    };
    let first_predicted = rx_start
        .substreams
        .iter()
        .filter_map(|s| predicted_in(s.first_timestamp).first().copied())
        .min()
        .unwrap_or(lo);
    let result = measure(b, (k0, k1), hs, first_predicted, &engine_start, progress);
    // The drop list goes whatever happened: a later measurement must not lose these heaps.
    let cleared = b.services.dsim.set_faults(&none);
    let reads = result?;
    cleared?;
    let dsim_end = b.services.dsim.status()?;
    let rx_end = b.rx.snapshot();
    let disturbance = Disturbance::between(
        (&engine_start, &reads.skipped_after),
        (&dsim_start, &dsim_end),
        (&rx_start, &rx_end),
    );

    // Output heaps the harness had not seen yet when the attempt began.
    let seen_from = rx_start
        .substreams
        .iter()
        .filter_map(|s| s.newest_timestamp)
        .min()
        .unwrap_or(0);
    let mut matched = 0;
    let mut predicted = 0u64;
    let mut unpredicted = 0u64;
    let mut plotted = Vec::new();
    for s in &reads.snap.substreams {
        let want = predicted_in(s.first_timestamp);
        let missing: Vec<u64> = s
            .missing
            .iter()
            .flat_map(|&(a, e)| (a..e).step_by(out_step as usize))
            .collect();
        let got: BTreeSet<u64> = missing
            .iter()
            .copied()
            .filter(|t| (lo..=hi).contains(t))
            .collect();
        unpredicted += missing
            .iter()
            .filter(|&&t| t > seen_from && t <= hi && !want.contains(&t))
            .count() as u64;
        predicted += want.len() as u64;
        if want == got {
            matched += 1;
        } else {
            progress(&format!(
                "lost-data: substream {}: predicted {want:?}, missing {got:?}",
                s.index
            ));
        }
        if s.index == 0 {
            let x = |t: u64| (t as f64 - (k0 * hs) as f64) / out_step as f64;
            plotted = want
                .iter()
                .map(|&t| (x(t), 1.0))
                .chain(got.iter().map(|&t| (x(t), 0.0)))
                .collect();
        }
    }
    let a = Attempt {
        substreams: reads.snap.substreams.len(),
        matched,
        predicted,
        engine_missing: reads
            .missing_after
            .missing_input
            .saturating_sub(reads.missing_before.missing_input),
        engine_skipped: reads
            .skipped_after
            .skipped_output
            .saturating_sub(reads.skipped_before.skipped_output),
        unpredicted,
        disturbance,
        plotted,
    };
    progress(&format!(
        "lost-data: {}; around it {}",
        a.counts(),
        a.disturbance.describe()
    ));
    Ok(a)
}

/// The engine's counters around the drops: each read as close to them as is safe.
struct Reads {
    /// The latest counts read while the engine's input was short of the first dropped heap.
    missing_before: EngineCounts,
    /// The latest counts read while its output was short of the heap before the first
    /// predicted (where the front says how far its output has got; else as `missing_before`).
    skipped_before: EngineCounts,
    /// The first counts read once the frame of the last dropped heap was computed.
    missing_after: EngineCounts,
    /// The counts once the harness has seen the output pass the last heap the drops touch.
    skipped_after: EngineCounts,
    /// The harness's view then.
    snap: Snapshot,
}

/// With the drop list in force, reads the engine's counters as close to the drops as is safe.
/// No engine can count heap k0 missing before a later heap has arrived, so counts read while its
/// newest input is short of it have not counted the drops; an output sends (or skips) its heaps
/// in order, so counts read while its newest output heap is short of the one before the first
/// predicted have not counted their skips. Every loss before those reads, or after the frames and
/// heaps the drops touch, stays out of the counts.
///
/// How far the engine's input and output had got comes with the counts where the front says it
/// (HTTP's status). Where it does not (katcp: katgpucbf's sensors are sampled apart from its
/// Prometheus counters), dsim's newest timestamp read after the counts, and a chunk more, bounds
/// the engine's input (it cannot have heaps dsim has not sent), and the skipped count is read
/// with the missing one; the frame of the last drop is known computed once the harness has
/// received output heaps two chunks past it (frames are computed in order).
fn measure(
    b: &Bench,
    (k0, k1): (u64, u64),
    hs: u64,
    first_predicted: u64,
    start: &EngineCounts,
    progress: &mut dyn FnMut(&str),
) -> Result<Reads> {
    let g = b.geometry;
    let engine = &b.services.engine;
    let out_step = g.spectra_per_heap as u64 * g.step();
    let chunk = (g.chunk_samples as u64).max(1);
    let span = g.heap_span();
    let hi = (k1 + 3) * hs + span;
    let limit = Duration::from_secs_f64(
        3.0 * (hi.saturating_sub(b.newest_input()?)) as f64 / g.adc_rate + 30.0,
    );
    let waited = Instant::now();
    let sleep = |ms| signals::sleep(Duration::from_millis(ms)).map_err(|_| anyhow!("interrupted"));
    // The counts, and how far the engine's input can have got when they were read.
    let read = || -> Result<(EngineCounts, u64)> {
        let c = engine.counts()?;
        let input = match c.newest_input {
            Some(t) => t,
            None => b.services.dsim.status()?.timestamp + chunk,
        };
        Ok((c, input))
    };
    let first = k0 * hs;
    let output_guard = first_predicted.saturating_sub(out_step);
    let (mut missing_before, mut skipped_before) = (start.clone(), start.clone());
    let (mut input_before, mut sent_before) = (None, None);
    let (mut input_done, mut output_done) = (false, false);
    while !(input_done && output_done) {
        let (c, input) = read()?;
        if !input_done {
            input_done = input >= first.saturating_sub(chunk / 4);
            if input < first {
                missing_before = c.clone();
                input_before = Some(input);
            }
        }
        if !output_done {
            let (done, short) = match c.sent_through {
                Some(sent) => (sent + 2 * out_step >= first_predicted, sent < output_guard),
                None => (input_done, input < first),
            };
            output_done = done;
            if short {
                sent_before = c.sent_through;
                skipped_before = c;
            }
        }
        if waited.elapsed() > limit {
            bail!("the engine did not reach the dropped heaps within {limit:?}");
        }
        sleep(50)?;
    }
    let short_of = |t: Option<u64>, of: u64| match t {
        Some(t) => format!("{:.2} s", of.saturating_sub(t) as f64 / g.adc_rate),
        None => "an unknown time".into(),
    };
    let output = match start.sent_through {
        Some(_) => format!(
            "its output {} short of the first heap predicted lost",
            short_of(sent_before, first_predicted)
        ),
        None => "its skipped count read with the missing one".into(),
    };
    progress(&format!(
        "lost-data: the engine's counters read with its input {}{} short of the first drop and {output}",
        if start.newest_input.is_some() { "" } else { "at least " },
        short_of(input_before, first),
    ));
    let last_chunk = ((k1 + 3) * hs - 1) / chunk * chunk;
    let missing_after = loop {
        // The output's evidence is taken before the counts, so that it holds for them.
        let passed = b.output_passed(last_chunk + 2 * chunk);
        let c = engine.counts()?;
        if c.computed_through.map_or(passed, |t| t >= last_chunk) {
            break c;
        }
        if waited.elapsed() > limit {
            bail!("the engine computed no frame past timestamp {last_chunk} within {limit:?}");
        }
        sleep(50)?;
    };
    let snap = loop {
        let snap = b.rx.snapshot();
        if snap
            .substreams
            .iter()
            .all(|s| s.newest_timestamp.is_some_and(|t| t > hi + 2 * out_step))
        {
            break snap;
        }
        if waited.elapsed() > limit {
            bail!("the output did not pass timestamp {hi} within {limit:?}");
        }
        sleep(50)?;
    };
    Ok(Reads {
        missing_before,
        skipped_before,
        missing_after,
        skipped_after: engine.counts()?,
        snap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet() -> Disturbance {
        Disturbance::default()
    }

    #[test]
    fn nothing_lost_is_no_disturbance() {
        assert!(!quiet().any());
        assert_eq!(quiet().describe(), "nothing else was lost");
    }

    #[test]
    fn each_loss_counts_and_is_named() {
        let mut d = quiet();
        d.engine_rejected.insert("too_old".into(), 12);
        assert!(d.any());
        assert_eq!(
            d.describe(),
            "the engine rejected 12 input packets (too_old)"
        );
        let d = Disturbance {
            dsim_skipped: 1460,
            dsim_catch_ups: 2,
            ..quiet()
        };
        assert_eq!(
            d.describe(),
            "dsim fell behind and skipped 1460 heaps, dsim caught up after 2 stalls"
        );
        for d in [
            Disturbance {
                engine_socket_drops: Some(1),
                ..quiet()
            },
            Disturbance {
                harness_socket_drops: 1,
                ..quiet()
            },
        ] {
            assert!(d.any(), "{d:?}");
        }
    }

    fn attempt(missing: u64, skipped: u64, matched: usize) -> Attempt {
        Attempt {
            substreams: 16,
            matched,
            predicted: 32,
            engine_missing: missing,
            engine_skipped: skipped,
            unpredicted: 0,
            disturbance: quiet(),
            plotted: Vec::new(),
        }
    }

    #[test]
    fn only_the_exact_counts_pass() {
        assert!(attempt(4, 32, 16).exact());
        assert!(!attempt(1460, 32, 16).exact());
        assert!(!attempt(4, 96, 16).exact());
        assert!(!attempt(4, 32, 15).exact());
        let mut m = Measured::default();
        attempt(1460, 96, 16).judge(&mut m);
        let failed: Vec<&str> = m
            .figures
            .iter()
            .filter(|f| f.pass == Some(false))
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(
            failed,
            [
                "digitiser heaps the engine counted missing",
                "output heaps the engine skipped"
            ]
        );
    }

    /// A set-aside attempt is reported, never judged: the second attempt alone decides.
    #[test]
    fn a_set_aside_attempt_is_reported_not_judged() {
        let mut m = Measured::default();
        let mut first = attempt(1460, 96, 16);
        first.disturbance.dsim_skipped = 1456;
        first.set_aside(&mut m);
        assert!(m.figures.iter().all(|f| f.pass.is_none()));
        assert!(m
            .figures
            .iter()
            .any(|f| f.name.contains("dsim: heaps skipped") && f.value == 1456.0));
    }
}

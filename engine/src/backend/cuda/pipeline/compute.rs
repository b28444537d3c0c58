//! The compute stream's part of a frame (every output, each on its lane) and the input sensors'
//! kernel beside it.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};

use super::{Pipeline, StageMarks};
use crate::backend::cuda::device::driver;
use crate::backend::{Result, POLS};

/// Threads per block of `input_power` (its `__launch_bounds__`), and most blocks per polarisation.
const POWER_BLOCK: u32 = 256;
const POWER_BLOCKS: u32 = 512;

impl Pipeline {
    /// The compute stream's part of a frame: every output's FIR, FFT, post-processing (each on
    /// its lane); with `carry` (benchmark only) the ring's overlap copy first where the frame
    /// starts a buffer, to time it. With `marks`,
    /// records an event between stages (the FIR and FFT marks are the first output's) and around
    /// each output's, on its lane.
    pub(super) fn enqueue_compute(
        &self,
        slot: usize,
        carry: bool,
        marks: Option<&StageMarks>,
    ) -> Result<()> {
        let s = &self.slots[slot];
        let mark = |i: usize| -> Result<()> {
            match marks {
                Some(m) => m.0[i]
                    .record(&self.compute)
                    .map_err(driver("recording a timing event")),
                None => Ok(()),
            }
        };
        self.compute
            .wait(&s.copied_in)
            .map_err(driver("ordering compute after the copy in"))?;
        // The slot's previous output has left the device.
        self.compute
            .wait(&s.copied_out)
            .map_err(driver("ordering compute after the copy out"))?;
        mark(0)?;
        if carry {
            self.ring.copy_overlap(s.at, &self.compute)?;
        }
        mark(1)?;
        let span = self.ring.view(s.at);
        let own = |lane: &Arc<CudaStream>| !Arc::ptr_eq(lane, &self.compute);
        let own_lane = |k: usize| own(&self.lanes[k]);
        let set_lane = self.ddc_set.as_ref().map(|(_, lane, _)| lane);
        if self.lanes.iter().chain(set_lane).any(own) {
            self.forked
                .record(&self.compute)
                .map_err(driver("forking the outputs' streams"))?;
        }
        if let Some((set, lane, done)) = &self.ddc_set {
            if own(lane) {
                lane.wait(&self.forked)
                    .map_err(driver("ordering the DDCs after the overlap"))?;
            }
            set.enqueue(&self.outputs, slot, span, lane)?;
            done.record(lane).map_err(driver("recording the DDCs"))?;
        }
        for (k, stage) in self.outputs.iter().enumerate() {
            let lane = &self.lanes[k];
            if own_lane(k) {
                lane.wait(&self.forked)
                    .map_err(driver("ordering an output after the overlap"))?;
            }
            let record = |i: usize| -> Result<()> {
                match marks.and_then(|m| m.1.get(k)) {
                    Some(ev) => ev[i]
                        .record(lane)
                        .map_err(driver("recording a timing event")),
                    None => Ok(()),
                }
            };
            record(0)?;
            if let Some((set, set_lane, done)) = &self.ddc_set {
                if set.members.contains(&k) && !Arc::ptr_eq(set_lane, lane) {
                    lane.wait(done)
                        .map_err(driver("ordering an output after its DDC"))?;
                }
            }
            let m = |i: usize| -> Result<()> {
                if k == 0 {
                    mark(i)?;
                }
                record(i - 1)
            };
            stage.enqueue_compute(slot, span, lane, &m)?;
            record(3)?;
            if own_lane(k) {
                self.joined[k]
                    .record(lane)
                    .map_err(driver("recording an output's compute"))?;
                self.compute
                    .wait(&self.joined[k])
                    .map_err(driver("joining the outputs' streams"))?;
            }
        }
        mark(4)?;
        s.computed
            .record(&self.compute)
            .map_err(driver("recording compute"))
    }

    /// The input sensors' kernel, on a stream of its own: it only reads the new chunk, so it runs
    /// beside the FIR (which leaves DRAM bandwidth idle) instead of after it. It waits for the
    /// copy in and for the slot's counters to have been read out and cleared.
    pub(super) fn enqueue_sensors(&self, slot: usize) -> Result<()> {
        let s = &self.slots[slot];
        for (event, what) in [
            (&s.copied_in, "the copy in"),
            (&s.copied_out, "the copy out"),
        ] {
            self.sensors.wait(event).map_err(driver(what))?;
        }
        let span = self.ring.view(s.at);
        // The input sensors read the new chunk, which follows the overlap in the span.
        let (first_pair, pairs) = (
            (self.input.overlap_samples / 2) as u64,
            (self.input.chunk_samples / 2) as u64,
        );
        let sums = s.sensors.ptr();
        let blocks = pairs
            .div_ceil(8 * POWER_BLOCK as u64)
            .min(POWER_BLOCKS as u64) as u32;
        // Every output's module holds the same input_power (one input): the first's serves.
        let mut power = self
            .sensors
            .launch_builder(&self.outputs[0].kernels.input_power);
        power
            .arg(&span.ptr)
            .arg(&span.stride_words)
            .arg(&first_pair)
            .arg(&pairs)
            .arg(&sums);
        let shape = LaunchConfig {
            grid_dim: (blocks.max(1), POLS as u32, 1),
            block_dim: (POWER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: argument types and order match input_power; the pairs lie in the span and the
        // counters are SENSOR_BYTES.
        unsafe { power.launch(shape) }.map_err(driver("launching input_power"))?;
        s.measured
            .record(&self.sensors)
            .map_err(driver("recording the input measure"))
    }
}

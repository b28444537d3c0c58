//! A frame's way through the device: the copy in, the copy out, and waiting for it to have left.

use cudarc::driver::sys;

use super::slot::SENSOR_BYTES;
use super::{Pipeline, SLOTS};
use crate::backend::cuda::device::{check, driver};
use crate::backend::{Frame, Result, POLS};
use crate::signal::power::InputPower;

impl Pipeline {
    /// Enqueues all of `frame`'s work (copy in, compute, copy out) as the next frame of the
    /// stream; returns its slot. The caller must not have more than [`IN_FLIGHT`] frames
    /// unfinished, must keep `frame`'s buffers alive and untouched until [`Self::finish`], and must
    /// have checked the frame against the geometry.
    pub(in crate::backend::cuda) fn enqueue(&mut self, frame: &mut Frame) -> Result<usize> {
        self.bind()?;
        let slot = (self.seq % SLOTS as u64) as usize;
        let span_start = frame
            .input
            .timestamp
            .wrapping_sub(self.input.overlap_samples as u64);
        for (stage, out) in self.outputs.iter_mut().zip(&frame.outputs) {
            stage.stage_params(slot, out, span_start);
        }
        self.copy_in(slot, self.seq, frame)?;
        self.enqueue_sensors(slot)?;
        self.enqueue_compute(slot, false, None)?;
        self.copy_out(slot, frame)?;
        self.seq += 1;
        Ok(slot)
    }

    /// Waits for the frame in `slot` to have left the device; fills its saturation counts and
    /// input sensors.
    pub(in crate::backend::cuda) fn finish(&self, slot: usize, frame: &mut Frame) -> Result<()> {
        self.bind()?;
        let s = &self.slots[slot];
        s.copied_out
            .synchronize()
            .map_err(driver("waiting for a frame"))?;
        for (stage, out) in self.outputs.iter().zip(&mut frame.outputs) {
            out.saturated = stage.saturated(slot);
        }
        let b = s.sensors_host.as_slice();
        let word = |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
        frame.input.power = Some(std::array::from_fn(|p| InputPower {
            sum_squares: word(p),
            full_scale: word(POLS + p),
        }));
        Ok(())
    }

    /// Copies frame `seq`'s chunk (and, at the ring's start, its overlap) into the ring,
    /// and its outputs' parameters into `slot`.
    pub(super) fn copy_in(&mut self, slot: usize, seq: u64, frame: &Frame) -> Result<()> {
        let at = self.ring.place(seq);
        self.slots[slot].at = at;
        let next = &self.slots[(slot + 1) % SLOTS];
        // The ring's stretch this frame writes was last read by frame seq - SLOTS + 1 or earlier
        // (see SpanRing), as were the slot's parameters (frame seq - SLOTS).
        self.h2d
            .wait(&next.computed)
            .map_err(driver("ordering the copy in"))?;
        // ... and the slot's own input measure (on its own stream) has read it.
        self.h2d
            .wait(&self.slots[slot].measured)
            .map_err(driver("ordering the copy in after the input measure"))?;
        // The span starts with the previous span's tail (written earlier on this same stream).
        if seq > 0 {
            self.ring.copy_overlap(at, &self.h2d)?;
        }
        for pol in 0..POLS {
            // SAFETY: the chunk fits at its place in this pol's row; the host buffer is the
            // frame's chunk, kept alive by the caller until the frame is finished.
            check(
                unsafe {
                    sys::cuMemcpyHtoDAsync_v2(
                        self.ring.chunk_ptr(at, pol),
                        frame.input.chunk[pol].as_ptr() as *const _,
                        self.input.chunk_bytes(),
                        self.h2d.cu_stream(),
                    )
                },
                "copying a chunk to the device",
            )?;
        }
        for stage in &mut self.outputs {
            stage.copy_params(slot, &self.h2d)?;
        }
        self.slots[slot]
            .copied_in
            .record(&self.h2d)
            .map_err(driver("recording the copy in"))
    }

    fn copy_out(&self, slot: usize, frame: &mut Frame) -> Result<()> {
        let s = &self.slots[slot];
        for event in [&s.computed, &s.measured] {
            self.d2h
                .wait(event)
                .map_err(driver("ordering the copy out"))?;
        }
        for (stage, out) in self.outputs.iter().zip(&mut frame.outputs) {
            // SAFETY: the frame's heaps were checked against the output's geometry by the caller,
            // who keeps them alive until the frame is finished.
            unsafe { stage.copy_out(slot, out.heaps.as_mut_ptr(), &self.d2h)? };
        }
        let d2h = self.d2h.cu_stream();
        // SAFETY: both sensor buffers are SENSOR_BYTES.
        unsafe {
            check(
                sys::cuMemcpyDtoHAsync_v2(
                    s.sensors_host.as_ptr() as *mut _,
                    s.sensors.ptr(),
                    SENSOR_BYTES,
                    d2h,
                ),
                "copying the input sensors to the host",
            )?;
            check(
                sys::cuMemsetD8Async(s.sensors.ptr(), 0, SENSOR_BYTES, d2h),
                "clearing the input sensors",
            )?;
        }
        s.copied_out
            .record(&self.d2h)
            .map_err(driver("recording the copy out"))
    }
}

//! What frame `seq` owns in slot `seq % SLOTS` until it is waited for.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent};

use crate::backend::cuda::device::{driver, DeviceBuffer, PinnedAlloc};
use crate::backend::{Result, POLS};

/// Bytes of the input sensors' counters, u64 per polarisation: the sum of squares, then the
/// full-scale samples.
pub(super) const SENSOR_BYTES: usize = 2 * 8 * POLS;

/// Everything frame `seq` owns on the device, apart from its outputs' buffers, until it is waited
/// for.
pub(super) struct Slot {
    /// The frame's chunk position in the span ring.
    pub(super) at: usize,
    /// The input sensors' counters, and their host copy.
    pub(super) sensors: DeviceBuffer,
    pub(super) sensors_host: PinnedAlloc,
    pub(super) copied_in: CudaEvent,
    pub(super) computed: CudaEvent,
    /// The input sensors' kernel has read the chunk and written its counters.
    pub(super) measured: CudaEvent,
    pub(super) copied_out: CudaEvent,
}

impl Slot {
    /// The slot before its first frame: counters zeroed, events not yet recorded.
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let event = |flags| {
            ctx.new_event(Some(flags))
                .map_err(driver("creating an event"))
        };
        Ok(Self {
            at: 0,
            // Zeroed; after each frame the copy out clears them.
            sensors: DeviceBuffer::zeroed(ctx, SENSOR_BYTES)?,
            sensors_host: PinnedAlloc::new(ctx, SENSOR_BYTES)?,
            copied_in: event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
            computed: event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
            measured: event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
            // Blocking: `wait` sleeps rather than spins, leaving the CPU to the network threads.
            copied_out: event(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC)?,
        })
    }
}

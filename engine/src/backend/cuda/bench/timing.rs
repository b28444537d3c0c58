//! Timing events and medians.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent};

use crate::backend::cuda::device::driver;
use crate::backend::Result;

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub(super) fn timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(driver("creating a timing event"))
}

pub(super) fn elapsed_ms(a: &CudaEvent, b: &CudaEvent) -> Result<f64> {
    a.elapsed_ms(b)
        .map(f64::from)
        .map_err(driver("reading a timing event"))
}

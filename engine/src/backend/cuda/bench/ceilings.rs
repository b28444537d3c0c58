//! The ceilings measured in the same run: device-to-device copy, device write, and PCIe each way
//! and both at once.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::timing::{elapsed_ms, timing_event};
use crate::backend::cuda::device::{check, driver, DeviceBuffer, PinnedAlloc};
use crate::backend::Result;

/// Ceilings measured in the same run, GB/s.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read plus written.
    pub d2d: f64,
    /// Device memory written alone (a memset): the ceiling of a kernel that mostly writes.
    pub d_write: f64,
    pub h2d: f64,
    pub d2h: f64,
    /// Both directions at once: (host to device, device to host).
    pub both: (f64, f64),
}

/// Device copy and PCIe bandwidths, measured now.
pub(super) fn measure(ctx: &Arc<CudaContext>) -> Result<Ceilings> {
    const BYTES: usize = 512 << 20;
    const REPS: usize = 8;
    let a = DeviceBuffer::new(ctx, BYTES)?;
    let b = DeviceBuffer::new(ctx, BYTES)?;
    let host_in = PinnedAlloc::new(ctx, BYTES)?;
    let host_out = PinnedAlloc::new(ctx, BYTES)?;
    let s1 = ctx.new_stream().map_err(driver("creating a stream"))?;
    let s2 = ctx.new_stream().map_err(driver("creating a stream"))?;
    let d2d = timed(ctx, &s1, REPS, |s| {
        // SAFETY: two distinct device buffers of BYTES bytes.
        check(
            unsafe { sys::cuMemcpyDtoDAsync_v2(b.ptr(), a.ptr(), BYTES, s.cu_stream()) },
            "device copy",
        )
    })?;
    let d_write = timed(ctx, &s1, REPS, |s| {
        // SAFETY: a device buffer of BYTES bytes. Not zeros: no path may treat them specially.
        check(
            unsafe { sys::cuMemsetD32Async(b.ptr(), 0x5a5a_5a5a, BYTES / 4, s.cu_stream()) },
            "device memset",
        )
    })?;
    let h2d = timed(ctx, &s1, REPS, |s| {
        // SAFETY: pinned and device buffers of BYTES bytes.
        check(
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    a.ptr(),
                    host_in.as_ptr() as *const _,
                    BYTES,
                    s.cu_stream(),
                )
            },
            "host-to-device copy",
        )
    })?;
    let d2h = timed(ctx, &s1, REPS, |s| {
        // SAFETY: pinned and device buffers of BYTES bytes.
        check(
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    host_out.as_ptr() as *mut _,
                    b.ptr(),
                    BYTES,
                    s.cu_stream(),
                )
            },
            "device-to-host copy",
        )
    })?;
    // Both at once: each direction on its own stream, timed by its own events.
    let (e0, e1, e2, e3) = (
        timing_event(ctx)?,
        timing_event(ctx)?,
        timing_event(ctx)?,
        timing_event(ctx)?,
    );
    let start = timing_event(ctx)?;
    start.record(&s1).map_err(driver("recording"))?;
    s2.wait(&start).map_err(driver("ordering"))?;
    e0.record(&s1).map_err(driver("recording"))?;
    e2.record(&s2).map_err(driver("recording"))?;
    for _ in 0..REPS {
        // SAFETY: as above; the two directions touch different buffers.
        unsafe {
            check(
                sys::cuMemcpyHtoDAsync_v2(
                    a.ptr(),
                    host_in.as_ptr() as *const _,
                    BYTES,
                    s1.cu_stream(),
                ),
                "host-to-device copy",
            )?;
            check(
                sys::cuMemcpyDtoHAsync_v2(
                    host_out.as_ptr() as *mut _,
                    b.ptr(),
                    BYTES,
                    s2.cu_stream(),
                ),
                "device-to-host copy",
            )?;
        }
    }
    e1.record(&s1).map_err(driver("recording"))?;
    e3.record(&s2).map_err(driver("recording"))?;
    let gb = (REPS * BYTES) as f64 * 1e-9;
    let both = (
        gb / (elapsed_ms(&e0, &e1)? * 1e-3),
        gb / (elapsed_ms(&e2, &e3)? * 1e-3),
    );
    Ok(Ceilings {
        d2d: 2.0 * d2d,
        d_write,
        h2d,
        d2h,
        both,
    })
}

/// GB/s of `reps` runs of `op` (each moving 512 MiB one way) on `stream`, after one warm-up.
fn timed(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    reps: usize,
    op: impl Fn(&CudaStream) -> Result<()>,
) -> Result<f64> {
    op(stream)?;
    let (a, b) = (timing_event(ctx)?, timing_event(ctx)?);
    a.record(stream).map_err(driver("recording"))?;
    for _ in 0..reps {
        op(stream)?;
    }
    b.record(stream).map_err(driver("recording"))?;
    Ok((reps * (512 << 20)) as f64 * 1e-9 / (elapsed_ms(&a, &b)? * 1e-3))
}

//! cuFFT: one batched in-place complex-to-complex plan, made once, bound to the compute stream.

use std::sync::Arc;

use cudarc::cufft::sys;
use cudarc::driver::{sys::CUdeviceptr, CudaContext, CudaStream};

use super::device::{driver, no_panic};
use crate::backend::{BackendError, Result};

/// cuFFT's forward direction (exp(-2 pi i jk/N)), CUFFT_FORWARD in cufft.h.
const FORWARD: i32 = -1;

fn check(res: sys::cufftResult, what: &str) -> Result<()> {
    if res == sys::cufftResult::CUFFT_SUCCESS {
        Ok(())
    } else {
        Err(BackendError::Device(format!("cuFFT {what}: {res:?}")))
    }
}

/// `batch` forward FFTs of `len` complex float32 points, contiguous, in place.
pub(crate) struct FftPlan {
    handle: sys::cufftHandle,
    ctx: Arc<CudaContext>,
    /// Bytes of work area cuFFT allocated for the plan.
    pub work_bytes: usize,
}

// SAFETY: the handle is only used through &mut or from one thread at a time (the backend is Send,
// not Sync).
unsafe impl Send for FftPlan {}

impl FftPlan {
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        len: usize,
        batch: usize,
        stream: &CudaStream,
    ) -> Result<Self> {
        let (len_i, batch_i) = match (i32::try_from(len), i32::try_from(batch)) {
            (Ok(l), Ok(b)) if (len as u128 * batch as u128) < (1u128 << 31) => (l, b),
            _ => {
                return Err(BackendError::Unsupported(format!(
                    "an FFT batch of {batch} x {len} points is too large: use smaller frames"
                )))
            }
        };
        ctx.bind_to_thread()
            .map_err(driver("binding the CUDA context"))?;
        no_panic("planning the FFT with cuFFT", || -> Result<Self> {
            let mut handle: sys::cufftHandle = 0;
            // SAFETY: valid out-pointer; context current.
            check(
                unsafe { sys::cufftPlan1d(&mut handle, len_i, sys::cufftType::CUFFT_C2C, batch_i) },
                "making the plan",
            )?;
            let mut plan = Self {
                handle,
                ctx: ctx.clone(),
                work_bytes: 0,
            };
            // SAFETY: live plan and stream of this context.
            check(
                unsafe { sys::cufftSetStream(plan.handle, stream.cu_stream() as _) },
                "binding the plan to the compute stream",
            )?;
            let mut work = 0usize;
            // SAFETY: live plan; valid out-pointer.
            check(
                unsafe { sys::cufftGetSize(plan.handle, &mut work) },
                "reading the plan's work area",
            )?;
            plan.work_bytes = work;
            Ok(plan)
        })?
    }

    /// Enqueues the forward transforms of `data` on the plan's stream.
    pub(super) fn forward(&self, data: CUdeviceptr) -> Result<()> {
        let p = data as *mut sys::cufftComplex;
        // SAFETY: `data` holds batch x len complex values (checked by the caller's sizing).
        check(
            unsafe { sys::cufftExecC2C(self.handle, p, p, FORWARD) },
            "running the FFT",
        )
    }
}

impl Drop for FftPlan {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: created by cufftPlan1d, destroyed once.
            let _ = unsafe { sys::cufftDestroy(self.handle) };
        }
    }
}

//! CUDA driver plumbing: finding the libraries, the context, owned device and pinned memory.
//!
//! cudarc loads libcuda, libnvrtc and libcufft at run time and panics when one is missing, so
//! [`probe`] looks for each library first and turns every failure into
//! [`BackendError::Unavailable`] with a sentence saying what is missing.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, DriverError};

use crate::backend::{BackendError, HostBuffer, Result};

/// A driver status as a backend error that says what was being done.
pub(crate) fn check(res: sys::CUresult, what: &str) -> Result<()> {
    if res == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(BackendError::Device(format!("{what}: {}", error_text(res))))
    }
}

/// Maps a cudarc driver error to a backend error that says what was being done.
pub(crate) fn driver(what: &'static str) -> impl FnOnce(DriverError) -> BackendError {
    move |e| BackendError::Device(format!("{what}: {}", error_text(e.0)))
}

/// The driver's name and description of a status.
fn error_text(res: sys::CUresult) -> String {
    let mut s: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the driver returns a pointer to a static string or leaves it null.
    let ok = unsafe { sys::cuGetErrorString(res, &mut s) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !s.is_null() {
        // SAFETY: non-null, NUL-terminated static string from the driver.
        let text = unsafe { CStr::from_ptr(s) }.to_string_lossy();
        format!("{res:?} ({text})")
    } else {
        format!("{res:?}")
    }
}

/// Runs `f`, turning a panic (cudarc panics when a library or a symbol is missing) into a sentence.
pub(crate) fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        BackendError::Unavailable(format!("{what} failed: {msg}"))
    })
}

/// The run-time libraries this backend needs that cannot be loaded.
pub fn missing_libraries() -> Vec<&'static str> {
    // SAFETY: each function only tries to dlopen the library's usual names.
    type Probe = (&'static str, fn() -> bool);
    let present: [Probe; 3] = [
        ("the NVIDIA driver library libcuda.so", || unsafe {
            cudarc::driver::sys::is_culib_present()
        }),
        ("NVRTC (libnvrtc.so)", || unsafe {
            cudarc::nvrtc::sys::is_culib_present()
        }),
        ("cuFFT (libcufft.so)", || unsafe {
            cudarc::cufft::sys::is_culib_present()
        }),
    ];
    present
        .into_iter()
        .filter(|(_, f)| !catch_unwind(f).unwrap_or(false))
        .map(|(name, _)| name)
        .collect()
}

/// Checks that the libraries load and that GPU `gpu_index` exists, without creating a context.
pub fn probe(gpu_index: usize) -> Result<()> {
    let missing = missing_libraries();
    if !missing.is_empty() {
        return Err(BackendError::Unavailable(format!(
            "CUDA is not usable on this host: cannot load {} (install the NVIDIA driver and the \
             CUDA 13 runtime libraries, put them on LD_LIBRARY_PATH, or choose another backend)",
            missing.join(", ")
        )));
    }
    let count = no_panic("querying the CUDA driver", || {
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            let init = sys::cuInit(0);
            if init != sys::CUresult::CUDA_SUCCESS {
                return Err(init);
            }
            let mut count = 0;
            let res = sys::cuDeviceGetCount(&mut count);
            if res != sys::CUresult::CUDA_SUCCESS {
                return Err(res);
            }
            Ok(count)
        }
    })?
    .map_err(|e| {
        BackendError::Unavailable(format!(
            "the CUDA driver loaded but reports no usable GPU: {}",
            error_text(e)
        ))
    })?;
    if count <= 0 {
        return Err(BackendError::Unavailable(
            "the CUDA driver loaded but this host has no GPU".into(),
        ));
    }
    if gpu_index >= count as usize {
        return Err(BackendError::Unavailable(format!(
            "GPU {gpu_index} was asked for but this host has {count} GPU(s)"
        )));
    }
    Ok(())
}

/// The primary context of GPU `gpu_index`, with cudarc's per-buffer event tracking off (this
/// backend orders its streams itself with events).
pub(crate) fn context(gpu_index: usize) -> Result<Arc<CudaContext>> {
    let ctx = no_panic("creating the CUDA context", || CudaContext::new(gpu_index))?
        .map_err(driver("creating the CUDA context"))?;
    // SAFETY: no cudarc-tracked buffers are ever created in this context.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// (free, total) device memory in bytes.
pub(crate) fn memory_info(ctx: &CudaContext) -> Result<(usize, usize)> {
    ctx.bind_to_thread()
        .map_err(driver("binding the CUDA context"))?;
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers; context current.
    check(
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "reading device memory use",
    )?;
    Ok((free, total))
}

/// Device memory, freed on drop.
pub(crate) struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceBuffer {
    /// `bytes` of uninitialised device memory (256-byte aligned, as cuMemAlloc guarantees).
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread()
            .map_err(driver("binding the CUDA context"))?;
        let mut ptr = 0;
        // SAFETY: valid out-pointer; context current.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) },
            &format!("allocating {bytes} bytes of device memory"),
        )?;
        Ok(Self {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// `bytes` of device memory set to zero (synchronously: only used while setting up).
    pub(super) fn zeroed(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        let buf = Self::new(ctx, bytes)?;
        // SAFETY: the range was just allocated.
        check(
            unsafe { sys::cuMemsetD8_v2(buf.ptr, 0, bytes) },
            "clearing device memory",
        )?;
        Ok(buf)
    }

    /// Device address of byte `offset`.
    pub(super) fn at(&self, offset: usize) -> sys::CUdeviceptr {
        debug_assert!(offset <= self.bytes);
        self.ptr + offset as u64
    }

    pub(super) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Errors here cannot be reported; the context's own drop records them.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by cuMemAlloc in this context, freed once.
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Page-locked host memory (so that copies are true DMA and run asynchronously), freed on drop.
pub(crate) struct PinnedAlloc {
    ptr: NonNull<u8>,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the allocation is plain host memory owned by this value.
unsafe impl Send for PinnedAlloc {}
// SAFETY: through `&self` the allocation is only read (its address and length).
unsafe impl Sync for PinnedAlloc {}

impl PinnedAlloc {
    /// `len` bytes of zeroed pinned memory. Not write-combined: the engine reads outputs on the CPU.
    pub(super) fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        ctx.bind_to_thread()
            .map_err(driver("binding the CUDA context"))?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 = plain page-locked memory.
        check(
            unsafe { sys::cuMemHostAlloc(&mut p, len.max(1), 0) },
            &format!("allocating {len} bytes of pinned host memory"),
        )?;
        let ptr = NonNull::new(p as *mut u8)
            .ok_or_else(|| BackendError::Device("cuMemHostAlloc returned a null pointer".into()))?;
        // SAFETY: `len` bytes were just allocated at `ptr`.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(Self {
            ptr,
            len,
            ctx: ctx.clone(),
        })
    }

    pub(super) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: exclusive access through &mut self to `len` owned bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` owned bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// A [`HostBuffer`] that owns this allocation.
    pub(super) fn into_host_buffer(self) -> HostBuffer {
        let (ptr, len) = (self.ptr, self.len);
        // SAFETY: the buffer owns the allocation through `owner`, which keeps it alive.
        unsafe { HostBuffer::from_raw(ptr, len, Box::new(self)) }
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
            let _ = unsafe { sys::cuMemFreeHost(self.ptr.as_ptr() as *mut std::ffi::c_void) };
        }
    }
}

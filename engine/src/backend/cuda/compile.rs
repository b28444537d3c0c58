//! NVRTC: compiles the configuration's kernels once, straight to machine code for the present GPU.

use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys as dsys, CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{sys, Ptx};

use super::device::{driver, no_panic};
use crate::backend::{BackendError, Result};

/// The loaded module and its kernels.
pub(crate) struct Kernels {
    pub fir: CudaFunction,
    pub postproc: CudaFunction,
    pub input_power: CudaFunction,
    /// A narrowband output's kernels.
    pub narrowband: Option<NarrowbandKernels>,
    /// The two-pass wideband kernels, where the output runs them (`kernels::Config::fused`).
    pub fused: Option<FusedKernels>,
    /// Keeps the module loaded while the functions are in use.
    _module: Arc<CudaModule>,
}

/// `ddc` (unless the output's DDC is in the frame's `ddc_set`), `nb_fir` and `nb_postproc`.
pub(crate) struct NarrowbandKernels {
    pub ddc: Option<CudaFunction>,
    pub fir: CudaFunction,
    pub postproc: CudaFunction,
}

/// `fused_fir` and `fused_post` (its dynamic shared memory allowed).
pub(crate) struct FusedKernels {
    pub fir: CudaFunction,
    pub post: CudaFunction,
}

/// Where start-up time went.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompileTimes {
    pub nvrtc_ms: f64,
    pub load_ms: f64,
}

impl Kernels {
    /// Compiles `cfg`'s module for the context's GPU and loads it.
    pub(super) fn build(
        ctx: &Arc<CudaContext>,
        cfg: &kernels::Config,
    ) -> Result<(Self, CompileTimes)> {
        cfg.validate()
            .map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("reading the compute capability"))?;
        let arch = format!("sm_{major}{minor}");
        let t0 = Instant::now();
        let cubin = compile_cubin(&kernels::source(cfg), &arch)?;
        let t1 = Instant::now();
        let module = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(driver("loading the compiled kernels"))?;
        let fir = module
            .load_function(kernels::PFB_FIR_KERNEL)
            .map_err(driver("finding pfb_fir"))?;
        let postproc = module
            .load_function(kernels::POSTPROC_KERNEL)
            .map_err(driver("finding postproc"))?;
        let input_power = module
            .load_function(kernels::INPUT_POWER_KERNEL)
            .map_err(driver("finding input_power"))?;
        let narrowband = if cfg.decimation > 1 {
            Some(NarrowbandKernels {
                ddc: match cfg.ddc_mma() {
                    true => None,
                    false => Some(
                        module
                            .load_function(kernels::DDC_KERNEL)
                            .map_err(driver("finding ddc"))?,
                    ),
                },
                fir: module
                    .load_function(kernels::NB_FIR_KERNEL)
                    .map_err(driver("finding nb_fir"))?,
                postproc: module
                    .load_function(kernels::NB_POSTPROC_KERNEL)
                    .map_err(driver("finding nb_postproc"))?,
            })
        } else {
            None
        };
        let fused = if cfg.fused() {
            Some(FusedKernels {
                fir: with_shared_memory(&module, kernels::FUSED_FIR_KERNEL, cfg.fused_fir_smem())?,
                post: with_shared_memory(
                    &module,
                    kernels::FUSED_POST_KERNEL,
                    cfg.fused_post_smem(),
                )?,
            })
        } else {
            None
        };
        let times = CompileTimes {
            nvrtc_ms: (t1 - t0).as_secs_f64() * 1e3,
            load_ms: t1.elapsed().as_secs_f64() * 1e3,
        };
        Ok((
            Self {
                fir,
                postproc,
                input_power,
                narrowband,
                fused,
                _module: module,
            },
            times,
        ))
    }
}

/// Finds kernel `name` in `module` and allows it `bytes` of dynamic shared memory (past the
/// default 48 KB).
fn with_shared_memory(module: &Arc<CudaModule>, name: &str, bytes: usize) -> Result<CudaFunction> {
    let f = module
        .load_function(name)
        .map_err(driver("finding a two-pass kernel"))?;
    f.set_attribute(
        dsys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        bytes as i32,
    )
    .map_err(driver("allowing a kernel its shared memory"))?;
    Ok(f)
}

/// Compiles `src` for the context's GPU, loads it and finds kernel `name`.
pub(crate) fn build_one(
    ctx: &Arc<CudaContext>,
    src: &str,
    name: &str,
) -> Result<(Arc<CudaModule>, CudaFunction, CompileTimes)> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(driver("reading the compute capability"))?;
    let t0 = Instant::now();
    let cubin = compile_cubin(src, &format!("sm_{major}{minor}"))?;
    let t1 = Instant::now();
    let module = ctx
        .load_module(Ptx::from_binary(cubin))
        .map_err(driver("loading the compiled kernels"))?;
    let f = module
        .load_function(name)
        .map_err(driver("finding a kernel"))?;
    let times = CompileTimes {
        nvrtc_ms: (t1 - t0).as_secs_f64() * 1e3,
        load_ms: t1.elapsed().as_secs_f64() * 1e3,
    };
    Ok((module, f, times))
}

/// Registers per thread of a compiled kernel (for reports).
pub(crate) fn registers(f: &CudaFunction) -> Option<i32> {
    f.get_attribute(dsys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)
        .ok()
}

/// Owns an NVRTC program; destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn nvrtc_check(res: sys::nvrtcResult, what: &str) -> Result<()> {
    if res == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(BackendError::Device(format!("NVRTC {what}: {res:?}")))
    }
}

/// Compiles CUDA C `src` to a CUBIN for `arch` ("sm_90"). Needs only libnvrtc, not a GPU.
pub fn compile_cubin(src: &str, arch: &str) -> Result<Vec<u8>> {
    let src = CString::new(src)
        .map_err(|_| BackendError::Device("kernel source contains a NUL byte".into()))?;
    let options: Vec<CString> = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ]
    .into_iter()
    .filter_map(|o| CString::new(o).ok())
    .collect();
    let opt_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    no_panic("compiling the kernels with NVRTC", || -> Result<Vec<u8>> {
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: valid pointers; no headers.
        nvrtc_check(
            unsafe {
                sys::nvrtcCreateProgram(
                    &mut prog,
                    src.as_ptr(),
                    c"fengine.cu".as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null(),
                )
            },
            "creating the program",
        )?;
        let prog = Program(prog);
        // SAFETY: options outlive the call.
        let res =
            unsafe { sys::nvrtcCompileProgram(prog.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
        if res != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(BackendError::Device(format!(
                "NVRTC could not compile the kernels for {arch} ({res:?}):\n{}",
                program_log(&prog)
            )));
        }
        let mut size = 0usize;
        // SAFETY: compiled program; valid out-pointer.
        nvrtc_check(
            unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) },
            "sizing the CUBIN",
        )?;
        let mut cubin = vec![0u8; size];
        // SAFETY: buffer of the size NVRTC asked for.
        nvrtc_check(
            unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char) },
            "reading the CUBIN",
        )?;
        if cubin.is_empty() {
            return Err(BackendError::Device(format!(
                "NVRTC made no machine code for {arch}"
            )));
        }
        Ok(cubin)
    })?
}

fn program_log(prog: &Program) -> String {
    let mut size = 0usize;
    // SAFETY: valid program and out-pointer.
    if unsafe { sys::nvrtcGetProgramLogSize(prog.0, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut log = vec![0u8; size];
    // SAFETY: buffer of the size NVRTC asked for.
    if unsafe { sys::nvrtcGetProgramLog(prog.0, log.as_mut_ptr() as *mut c_char) }
        != sys::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    CStr::from_bytes_until_nul(&log)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

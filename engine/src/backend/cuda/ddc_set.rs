//! The DDC of every narrowband output of a frame in one launch (`ddc_set`, on the tensor cores):
//! each block stages a stretch of packed input once and makes every output's part of it, so the
//! input is read from device memory once for them all rather than once per output.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};

use super::compile::{build_one, CompileTimes};
use super::device::driver;
use super::output::OutputStage;
use super::pipeline::SpanView;
use crate::backend::{BackendError, Result, POLS};

/// One output's part of a launch: `DdcOut` in ddc_set.cu, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DdcOut {
    /// The taps table (`kernels::Config::ddc_taps_table`) in the slot's parameters.
    pub taps: sys::CUdeviceptr,
    /// The output's DDC buffer, [pol][samples].
    pub out: sys::CUdeviceptr,
    pub samples: u32,
    /// Make [first, end) only.
    pub first: u32,
    pub end: u32,
    pub phase0: u32,
    pub phase_step: u32,
    /// 1 / the taps' scale.
    pub scale: f32,
}

/// `DdcSet` in ddc_set.cu for up to `DDC_SET_MAX` outputs: the kernel reads the first
/// `DDC_SET_N`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DdcSetArg([DdcOut; kernels::DDC_SET_MAX]);

// SAFETY: plain old data laid out as the kernel's parameter.
unsafe impl DeviceRepr for DdcSetArg {}

/// The set's kernel and the outputs it serves.
pub(crate) struct DdcSet {
    f: CudaFunction,
    _module: Arc<CudaModule>,
    /// Indices of the outputs it serves, in the pipeline's order (the kernel's k).
    pub members: Vec<usize>,
    /// Input samples per block and outputs per block of each member.
    per_block: Vec<u32>,
    shared_bytes: u32,
    warps: u32,
    pub compile: CompileTimes,
}

impl DdcSet {
    /// The set for `outputs`' narrowband outputs whose DDC runs on the tensor cores; None if
    /// there are none.
    pub(super) fn new(ctx: &Arc<CudaContext>, outputs: &[OutputStage]) -> Result<Option<Self>> {
        let (members, cfgs): (Vec<usize>, Vec<&kernels::Config>) = outputs
            .iter()
            .enumerate()
            .filter_map(|(k, o)| {
                o.narrowband_config()
                    .filter(|c| c.ddc_mma())
                    .map(|c| (k, c))
            })
            .unzip();
        if cfgs.is_empty() {
            return Ok(None);
        }
        if cfgs.len() > kernels::DDC_SET_MAX {
            return Err(BackendError::Unsupported(format!(
                "at most {} narrowband outputs per engine, not {}",
                kernels::DDC_SET_MAX,
                cfgs.len()
            )));
        }
        let src =
            kernels::ddc_set_source(&cfgs).map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let (module, f, compile) = build_one(ctx, &src, kernels::DDC_SET_KERNEL)?;
        let raw = cfgs.iter().map(|c| c.mma_raw_words()).max().unwrap_or(0);
        let samples = cfgs.iter().map(|c| c.mma_smem_bytes()).max().unwrap_or(0);
        // The float16 samples start on 16 bytes after the packed words (ddc_set.cu).
        let shared_bytes = (4 * raw.next_multiple_of(4) + samples) as u32;
        f.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes as i32,
        )
        .map_err(driver("giving ddc_set its shared memory"))?;
        Ok(Some(Self {
            f,
            _module: module,
            per_block: cfgs
                .iter()
                .map(|c| c.ddc_outputs_per_block() as u32)
                .collect(),
            members,
            shared_bytes,
            warps: cfgs[0].tuning.ddc_mma_warps as u32,
            compile,
        }))
    }

    /// Enqueues the set's work for the frame in `slot` on `stream`: each member's carry copy, then
    /// one launch for the outputs each makes.
    pub(super) fn enqueue(
        &self,
        outputs: &[OutputStage],
        slot: usize,
        span: SpanView,
        stream: &CudaStream,
    ) -> Result<()> {
        let mut arg = DdcSetArg::default();
        // Stretches of `ddc_set_span` input samples: block `stretch` makes each output k's
        // outputs [stretch n_k, (stretch + 1) n_k).
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        for (k, &o) in self.members.iter().enumerate() {
            if let Some(part) = outputs[o].enqueue_ddc_set_part(slot, stream)? {
                let n = self.per_block[k];
                lo = lo.min(part.first / n);
                hi = hi.max(part.end.div_ceil(n));
                arg.0[k] = part;
            }
        }
        if lo >= hi {
            return Ok(());
        }
        let shape = LaunchConfig {
            grid_dim: (hi - lo, POLS as u32, 1),
            block_dim: (32 * self.warps, 1, 1),
            shared_mem_bytes: self.shared_bytes,
        };
        let mut launch = stream.launch_builder(&self.f);
        launch
            .arg(&span.ptr)
            .arg(&span.stride_words)
            .arg(&span.words)
            .arg(&lo)
            .arg(&arg);
        // SAFETY: argument types and order match ddc_set (DdcSetArg holds at least DDC_SET_N
        // outputs); each member's buffer holds `samples` per pol and its part stores only
        // [first, end) of them; an output with nothing to make has end 0 and stores nothing.
        unsafe { launch.launch(shape) }.map_err(driver("launching ddc_set"))?;
        Ok(())
    }
}

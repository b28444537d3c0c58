//! The CUDA C files, embedded in the crate, and the names of their kernels.

// Self-contained (no includes), as NVRTC needs: `common.cuh` goes first in every module.
pub(crate) const COMMON: &str = include_str!("common.cuh");
pub(crate) const PFB_FIR: &str = include_str!("pfb_fir.cu");
pub(crate) const POSTPROC: &str = include_str!("postproc.cu");
pub(crate) const INPUT_POWER: &str = include_str!("input_power.cu");
pub(crate) const NARROWBAND: &str = include_str!("narrowband.cu");
pub(crate) const DDC_SET: &str = include_str!("ddc_set.cu");
pub(crate) const FUSED: &str = include_str!("fused.cu");

/// Kernel names, as `extern "C"` in the sources.
pub const PFB_FIR_KERNEL: &str = "pfb_fir";
pub const POSTPROC_KERNEL: &str = "postproc";
pub const INPUT_POWER_KERNEL: &str = "input_power";
pub const DDC_KERNEL: &str = "ddc";
pub const NB_FIR_KERNEL: &str = "nb_fir";
pub const NB_POSTPROC_KERNEL: &str = "nb_postproc";
pub const DDC_SET_KERNEL: &str = "ddc_set";
pub const FUSED_FIR_KERNEL: &str = "fused_fir";
pub const FUSED_POST_KERNEL: &str = "fused_post";

//! Building the pipeline: streams, lanes and events, the outputs' stages, the span ring and the
//! slots; and what that cost.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext};

use super::slot::Slot;
use super::span_ring::SpanRing;
use super::{Pipeline, SLOTS};
use crate::backend::cuda::compile::CompileTimes;
use crate::backend::cuda::ddc_set::DdcSet;
use crate::backend::cuda::device::{driver, memory_info};
use crate::backend::cuda::output::OutputStage;
use crate::backend::{Channelisation, Result};

/// Start-up costs, for the benchmark and logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Startup {
    /// Summed over the outputs.
    pub compile: CompileTimes,
    pub fft_plan_ms: f64,
    pub alloc_ms: f64,
    pub total_ms: f64,
    /// Device memory taken by this backend (free memory before minus after), including cuFFT's work area.
    pub device_bytes: usize,
    pub fft_work_bytes: usize,
    /// Registers a thread of the first output's FIR and post-processing kernels, those that run:
    /// `fused_fir` and `fused_post` on two passes, else `pfb_fir` and `postproc`.
    pub fir_registers: Option<i32>,
    pub postproc_registers: Option<i32>,
}

impl Pipeline {
    /// Builds every output's stage (`outputs` validated, all of one input) and the slots.
    pub(in crate::backend::cuda) fn new(
        ctx: Arc<CudaContext>,
        outputs: &[Channelisation],
        tuning: kernels::Tuning,
    ) -> Result<Self> {
        let t_start = Instant::now();
        let input = outputs
            .first()
            .ok_or_else(|| crate::backend::BackendError::Misuse("no outputs".into()))?
            .input;
        let (free_before, _) = memory_info(&ctx)?;
        let stream = |what| ctx.new_stream().map_err(driver(what));
        // The copy in runs first among equals: its overlap copy is a kernel, which the outputs'
        // kernels on several streams would otherwise crowd out, holding back the next frame.
        let (_, first) = cudarc::driver::result::stream::get_priority_range()
            .map_err(driver("reading the stream priorities"))?;
        let h2d = ctx
            .new_stream_with_priority(first)
            .map_err(driver("creating the host-to-device stream"))?;
        let compute = stream("creating the compute stream")?;
        let d2h = stream("creating the device-to-host stream")?;
        let sensors = stream("creating the input sensors' stream")?;

        let lanes = (0..outputs.len())
            .map(|k| match k > 0 && tuning.concurrent_outputs {
                true => stream("creating an output's stream"),
                false => Ok(compute.clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        let sync_event = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(driver("creating an event"))
        };
        let forked = sync_event()?;
        let joined = lanes.iter().map(|_| sync_event()).collect::<Result<_>>()?;
        let stages = outputs
            .iter()
            .zip(&lanes)
            .map(|(g, lane)| OutputStage::new(&ctx, lane, *g, tuning, SLOTS))
            .collect::<Result<Vec<_>>>()?;

        let ddc_set = match DdcSet::new(&ctx, &stages)? {
            None => None,
            Some(set) => {
                let lane = match tuning.concurrent_outputs {
                    true => stream("creating the DDC set's stream")?,
                    false => compute.clone(),
                };
                Some((set, lane, sync_event()?))
            }
        };

        let t_alloc = Instant::now();
        let ring = SpanRing::new(&ctx, &input)?;
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            slots.push(Slot::new(&ctx)?);
        }
        ctx.synchronize()
            .map_err(driver("setting up device memory"))?;
        let alloc_ms = t_alloc.elapsed().as_secs_f64() * 1e3;
        let (free_after, _) = memory_info(&ctx)?;

        let (fir_registers, postproc_registers) = stages[0].registers();
        let startup = Startup {
            compile: {
                let set = ddc_set.iter().map(|(s, ..)| s.compile);
                let all: Vec<CompileTimes> = stages.iter().map(|o| o.compile).chain(set).collect();
                CompileTimes {
                    nvrtc_ms: all.iter().map(|c| c.nvrtc_ms).sum(),
                    load_ms: all.iter().map(|c| c.load_ms).sum(),
                }
            },
            fft_plan_ms: stages.iter().map(|o| o.fft_plan_ms).sum(),
            alloc_ms,
            total_ms: t_start.elapsed().as_secs_f64() * 1e3,
            device_bytes: free_before.saturating_sub(free_after),
            fft_work_bytes: stages.iter().map(|o| o.fft_work_bytes()).sum(),
            fir_registers,
            postproc_registers,
        };
        Ok(Self {
            input,
            ctx,
            h2d,
            compute,
            d2h,
            sensors,
            outputs: stages,
            lanes,
            forked,
            joined,
            ddc_set,
            slots,
            ring,
            seq: 0,
            startup,
        })
    }
}

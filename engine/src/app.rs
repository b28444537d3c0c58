//! What `fengine run` and `fengine bench` do: choose and build the backend, start the pipeline and
//! the control server, and wait for a stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::{self, Backend, Geometry};
use crate::config::{BackendKind, BenchArgs, EngineConfig, RunArgs};
use crate::control::{self, ControlState};
use crate::metrics::Stats;
use crate::pipeline::Pipeline;

/// Builds the backend of `kind` for `geometry`. `auto` takes CUDA when GPU `gpu` is usable and the
/// CPU backend otherwise, and logs which.
pub fn make_backend(
    kind: BackendKind,
    geometry: Geometry,
    gpu: usize,
) -> Result<Box<dyn Backend>, String> {
    let unavailable =
        |name: &str, e: backend::BackendError| format!("the {name} backend cannot run here: {e}.");
    let b: Box<dyn Backend> = match kind {
        BackendKind::Cpu => {
            Box::new(backend::cpu::CpuBackend::new(geometry).map_err(|e| unavailable("cpu", e))?)
        }
        BackendKind::Reference => Box::new(
            backend::reference::ReferenceBackend::new(geometry)
                .map_err(|e| unavailable("reference", e))?,
        ),
        BackendKind::Null => {
            Box::new(backend::null::NullBackend::new(geometry).map_err(|e| unavailable("null", e))?)
        }
        BackendKind::Cuda => {
            let b = backend::cuda::CudaBackend::new(geometry, gpu)
                .map_err(|e| unavailable("cuda", e))?;
            tracing::info!(gpu, device = %b.device_name(), "CUDA backend ready");
            Box::new(b)
        }
        BackendKind::Auto => match backend::cuda::probe(gpu) {
            Ok(()) => match backend::cuda::CudaBackend::new(geometry.clone(), gpu) {
                Ok(b) => {
                    tracing::info!(gpu, device = %b.device_name(), "backend auto: using CUDA");
                    Box::new(b)
                }
                Err(e) => {
                    tracing::warn!("backend auto: CUDA failed to start ({e}); using the CPU");
                    Box::new(
                        backend::cpu::CpuBackend::new(geometry)
                            .map_err(|e| unavailable("cpu", e))?,
                    )
                }
            },
            Err(e) => {
                tracing::info!("backend auto: no usable GPU ({e}); using the CPU");
                Box::new(
                    backend::cpu::CpuBackend::new(geometry).map_err(|e| unavailable("cpu", e))?,
                )
            }
        },
    };
    Ok(b)
}

/// `fengine run`: runs until SIGINT or SIGTERM (or a fatal error).
pub fn run(args: &RunArgs) -> Result<(), String> {
    let cfg = EngineConfig::from_args(args)?;
    let g = &cfg.geometry;
    tracing::info!(
        channels = g.channels,
        taps = g.taps,
        sample_bits = g.sample_bits,
        spectra_per_heap = g.spectra_per_heap,
        heaps_per_frame = g.heaps_per_frame,
        chunk_samples = g.chunk_samples(),
        overlap_samples = g.overlap_samples,
        lag_samples = cfg.lag,
        max_delay_samples = cfg.max_delay_samples,
        substreams = cfg.substreams(),
        "configuration"
    );
    let stats = Arc::new(Stats::new(cfg.substreams()));
    let stop = Arc::new(AtomicBool::new(false));
    let (kind, geometry, gpu) = (cfg.backend, cfg.geometry.clone(), cfg.gpu);
    let pipeline = Pipeline::start(
        &cfg,
        Box::new(move || make_backend(kind, geometry, gpu)),
        stats.clone(),
        stop.clone(),
    )?;
    let state = ControlState::new(
        cfg.clone(),
        stats.clone(),
        pipeline.backend,
        pipeline.commands.clone(),
        stop.clone(),
    );
    let control = match control::start(state) {
        Ok((_, handle)) => handle,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            let _ = pipeline.join();
            return Err(e);
        }
    };
    let result = pipeline.join();
    stop.store(true, Ordering::Relaxed);
    let _ = control.join();
    log_totals(&stats);
    tracing::info!("stopped");
    result
}

/// What came in and what went out over the run, so that a log alone says where data was lost.
fn log_totals(stats: &Stats) {
    for (pol, p) in stats.pols.iter().enumerate() {
        let rejected: Vec<String> = p
            .rejects
            .snapshot()
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect();
        tracing::info!(
            pol,
            heaps_received = p.heaps_received(),
            heaps_missing = p.heaps_missing.load(Ordering::Relaxed),
            unpaired_chunks = p.unpaired_chunks.load(Ordering::Relaxed),
            resyncs = p.resyncs(),
            socket_drops = p.socket_drops.load(Ordering::Relaxed),
            rejected = %rejected.join(" "),
            "input totals"
        );
    }
    tracing::info!(
        heaps_sent = stats.total_sent(),
        heaps_skipped = stats.total_skipped(),
        "output totals"
    );
}

/// `fengine bench`: the generic benchmark, and for CUDA also the CUDA backend's own report.
pub fn bench(args: &BenchArgs) -> Result<(), String> {
    let g = Geometry {
        channels: args.channels,
        taps: args.taps,
        sample_bits: args.sample_bits,
        spectra_per_heap: args.spectra_per_heap,
        heaps_per_frame: args.heaps_per_frame,
        // The FIR's history plus a little coarse delay.
        overlap_samples: args.taps.max(1) * 2 * args.channels,
    };
    g.validate().map_err(crate::config::sentence)?;
    if args.frames == 0 {
        return Err("--frames must be at least 1.".into());
    }
    let mut b = make_backend(args.backend, g.clone(), args.gpu)?;
    let r = crate::bench::run(b.as_mut(), args.frames)
        .map_err(|e| format!("the benchmark failed: {e}."))?;
    println!("{r}");
    if b.name() == "cuda" {
        drop(b);
        let opts = backend::cuda::bench::BenchOptions {
            channels: vec![args.channels],
            taps: args.taps,
            sample_bits: args.sample_bits,
            spectra_per_heap: args.spectra_per_heap,
            chunk_samples: g.chunk_samples(),
            frames: args.frames,
            gpu_index: args.gpu,
            ..Default::default()
        };
        let mut out = std::io::stdout();
        backend::cuda::bench::run(&opts, &mut out)
            .map_err(|e| format!("the CUDA benchmark failed: {e}."))?;
    }
    Ok(())
}

//! What `fengine run` and `fengine bench` do: choose and build the backend, start the pipeline and
//! the control server, and wait for a stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::{self, Backend, InputGeometry, OutputGeometry, Synchronous};
use crate::config::{
    BackendKind, BenchArgs, ConfigError, EngineConfig, FftPrecision, RunArgs, StreamPlacement,
    WidebandKernels,
};
use crate::control::{self, Controller};
use crate::pipeline::{Pipeline, PipelineError, StageSpecs};
use crate::stats::Stats;

/// Why `fengine run` or `fengine bench` could not start or stopped with an error: one sentence
/// for the user.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The command line does not make a working engine.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Start-up failed: a socket, a backend, a thread, the control server.
    #[error("{0}")]
    Start(String),
    /// The pipeline could not start, or one of its stages failed while running.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The benchmark could not run.
    #[error("{0}")]
    Bench(String),
}

/// The CUDA backend's kernel choices for `precision` and `kernels`.
fn cuda_tuning(precision: FftPrecision, kernels: WidebandKernels) -> backend::cuda::Tuning {
    let tuning = match precision {
        FftPrecision::Single => backend::cuda::Tuning::default(),
        FftPrecision::Half => backend::cuda::Tuning::half_rows(),
    };
    backend::cuda::Tuning {
        fused: kernels == WidebandKernels::TwoPass,
        ..tuning
    }
}

/// Builds the backend of `kind` for `input` and `outputs`. `auto` takes CUDA when GPU `gpu` is
/// usable and the CPU backend otherwise, and logs which.
///
/// `precision` half is the CUDA backend's alone: with `auto` and no usable GPU it is an error, not
/// the CPU backend (whose output would not be what was asked for). `kernels` chooses among the
/// CUDA backend's (the CPU's output is the same to 1 LSB whichever).
pub fn make_backend(
    kind: BackendKind,
    precision: FftPrecision,
    kernels: WidebandKernels,
    input: InputGeometry,
    outputs: &[OutputGeometry],
    gpu: usize,
) -> Result<Box<dyn Backend>, String> {
    let unavailable =
        |name: &str, e: backend::BackendError| format!("the {name} backend cannot run here: {e}.");
    if let Some(why) = precision.refusal(kind) {
        return Err(why);
    }
    if let Some(why) = kernels.refusal(kind, precision) {
        return Err(why);
    }
    let cuda = || {
        backend::cuda::CudaBackend::with_outputs(
            input,
            outputs,
            gpu,
            cuda_tuning(precision, kernels),
        )
    };
    let cpu = || -> Result<Box<dyn Backend>, String> {
        if precision == FftPrecision::Half {
            return Err(
                "--fft-precision half needs the CUDA backend, and no usable GPU was found: \
                 give --fft-precision single to run on the CPU."
                    .into(),
            );
        }
        Ok(Box::new(Synchronous::new(
            backend::cpu::CpuBackend::new(input, outputs).map_err(|e| unavailable("cpu", e))?,
        )))
    };
    let b: Box<dyn Backend> = match kind {
        BackendKind::Cpu => cpu()?,
        BackendKind::Reference => Box::new(Synchronous::new(
            backend::reference::ReferenceBackend::new(input, outputs)
                .map_err(|e| unavailable("reference", e))?,
        )),
        BackendKind::Null => Box::new(Synchronous::new(
            backend::null::NullBackend::new(input, outputs).map_err(|e| unavailable("null", e))?,
        )),
        BackendKind::Cuda => {
            let b = cuda().map_err(|e| unavailable("cuda", e))?;
            let s = b.startup();
            // What this engine took of the GPU's memory: free before less free after (its
            // buffers and cuFFT's work area, not the context), which engines starting on the
            // same GPU at the same moment blur; nvidia-smi's per-process figure does not.
            tracing::info!(
                gpu,
                device = %b.device_name(),
                device_mib = s.device_bytes >> 20,
                fft_work_mib = s.fft_work_bytes >> 20,
                fft_precision = precision.name(),
                wideband_kernels = kernels.name(),
                "CUDA backend ready"
            );
            Box::new(b)
        }
        BackendKind::Auto => match backend::cuda::probe(gpu) {
            Ok(()) => match cuda() {
                Ok(b) => {
                    tracing::info!(
                        gpu,
                        device = %b.device_name(),
                        fft_precision = precision.name(),
                        wideband_kernels = kernels.name(),
                        "backend auto: using CUDA"
                    );
                    Box::new(b)
                }
                Err(e) => {
                    tracing::warn!("backend auto: CUDA failed to start ({e}); using the CPU");
                    cpu()?
                }
            },
            Err(e) => {
                tracing::info!("backend auto: no usable GPU ({e}); using the CPU");
                cpu()?
            }
        },
    };
    Ok(b)
}

/// `fengine run`: runs until `stop` is set (the program sets it on SIGINT or SIGTERM) or a stage
/// fails.
pub fn run(args: &RunArgs, stop: Arc<AtomicBool>) -> Result<(), EngineError> {
    let cfg = EngineConfig::from_args(args)?;
    let input = &cfg.input.geometry;
    tracing::info!(
        sample_bits = input.sample_bits,
        chunk_samples = input.chunk_samples,
        overlap_samples = input.overlap_samples,
        max_delay_samples = cfg.max_delay_samples,
        "configuration: input"
    );
    for (k, o) in cfg.outputs.iter().enumerate() {
        let g = cfg.channelisation(k);
        tracing::info!(
            output = %o.name,
            kind = ?o.geometry.kind.label(),
            channels = g.output.channels,
            taps = g.output.taps,
            window_function = g.output.filter.window.name(),
            w_cutoff = g.output.filter.w_cutoff,
            bits = g.output.bits,
            dither_seed = ?g.output.dither,
            spectra_per_heap = g.output.spectra_per_heap,
            heaps_per_frame = g.heaps_per_frame(),
            lag_samples = o.lag,
            substreams = o.substreams(),
            decimation = g.output.decimation(),
            centre_hz = o.mixer().map(|w| crate::signal::ddc::centre_frequency(w, cfg.fs)),
            "configuration: output"
        );
    }
    place_process(&cfg.placement)?;
    let stats = Arc::new(Stats::for_config(&cfg));
    let (kind, precision, kernels, input, outputs, gpu) = (
        cfg.backend,
        cfg.fft_precision,
        cfg.wideband_kernels,
        cfg.input.geometry,
        cfg.output_geometries(),
        cfg.gpu,
    );
    let pipeline = Pipeline::start(
        StageSpecs::new(&cfg),
        Box::new(move || {
            make_backend(kind, precision, kernels, input, &outputs, gpu)
                .map_err(PipelineError::NoBackend)
        }),
        stats.clone(),
        stop.clone(),
    )?;
    let controller = Arc::new(Controller::new(
        cfg.clone(),
        stats.clone(),
        pipeline.backend,
        pipeline.commands.clone(),
        stop.clone(),
    ));
    let fronts = control::http::start(controller.clone())
        .map(|(_, handle)| handle)
        .map_err(|e| e.to_string())
        .and_then(|http| match control::katcp::start(controller) {
            Ok(katcp) => Ok((http, katcp.map(|(_, handle)| handle))),
            Err(e) => Err(e.to_string()),
        });
    let (control, katcp) = match fronts {
        Ok(handles) => handles,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            let _ = pipeline.join();
            return Err(EngineError::Start(e));
        }
    };
    let result = pipeline.join();
    stop.store(true, Ordering::Relaxed);
    let _ = control.join();
    if let Some(katcp) = katcp {
        let _ = katcp.join();
    }
    log_totals(&stats);
    tracing::info!("stopped");
    Ok(result?)
}

/// Locks memory and moves the calling thread (and so every thread it starts but the stream
/// threads, which place themselves) to the rest's cores, as the flags ask; logs the layout.
fn place_process(p: &StreamPlacement) -> Result<(), EngineError> {
    let start = |e: placement::PlacementError| EngineError::Start(format!("{e}."));
    if p.lock_memory {
        placement::lock_memory().map_err(start)?;
    }
    if let Some(rest) = &p.rest {
        rest.pin_current_thread().map_err(start)?;
    }
    let layout: Vec<String> = p
        .threads()
        .into_iter()
        .map(|(name, pl)| format!("{name}: {pl}"))
        .collect();
    tracing::info!(
        threads = %layout.join("; "),
        rest = %p.rest.as_ref().map_or("any core".into(), |c| format!("cores {c}")),
        memory_locked = p.lock_memory,
        "placement"
    );
    Ok(())
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
            late_chunks = p.late_chunks.load(Ordering::Relaxed),
            resyncs = p.resyncs(),
            socket_drops = p.socket_drops.load(Ordering::Relaxed),
            rejected = %rejected.join(" "),
            "input totals"
        );
    }
    for o in &stats.outputs {
        tracing::info!(
            output = %o.name,
            heaps_sent = o.total_sent(),
            heaps_skipped = o.total_skipped(),
            "output totals"
        );
    }
}

/// `fengine bench`: the generic benchmark, and for CUDA also the CUDA backend's own report.
pub fn bench(args: &BenchArgs) -> Result<(), EngineError> {
    if args.spectra_per_heap == 0 || args.heaps_per_frame == 0 {
        return Err(EngineError::Bench(
            "spectra per heap and heaps per frame must be positive.".into(),
        ));
    }
    let output = OutputGeometry {
        channels: args.channels,
        taps: args.taps,
        spectra_per_heap: args.spectra_per_heap,
        bits: args.output_bits,
        filter: Default::default(),
        dither: args.dither.then_some(1),
        kind: backend::OutputKind::Wideband,
    };
    let chunk = args
        .spectra_per_heap
        .saturating_mul(args.heaps_per_frame)
        .saturating_mul(2 * args.channels);
    let mut outputs = vec![output];
    for nb in &args.narrowband {
        // Heaps of at most a frame: a narrowband spectrum spans 2nD samples.
        let spectra = (chunk / (2 * nb.channels * nb.decimation)).max(1);
        outputs.push(OutputGeometry {
            channels: nb.channels,
            spectra_per_heap: args.spectra_per_heap.min(spectra),
            kind: nb
                .kind()
                .map_err(|e| EngineError::Bench(crate::config::sentence(e)))?,
            ..output
        });
    }
    let input = InputGeometry {
        sample_bits: args.sample_bits,
        chunk_samples: chunk,
        // Every output's FIR history plus a step of coarse delay (a window), on every DDC's grid.
        overlap_samples: outputs
            .iter()
            .map(|o| o.window())
            .max()
            .unwrap_or(0)
            .next_multiple_of(256),
    };
    for (k, o) in outputs.iter().enumerate() {
        backend::Channelisation::new(input, *o)
            .validate()
            .map_err(|e| EngineError::Bench(crate::config::sentence(format!("output {k}: {e}"))))?;
    }
    if args.frames == 0 {
        return Err(EngineError::Bench("--frames must be at least 1.".into()));
    }
    let mut b = make_backend(
        args.backend,
        args.fft_precision,
        args.wideband_kernels,
        input,
        &outputs,
        args.gpu,
    )
    .map_err(EngineError::Start)?;
    let r = crate::bench::run(b.as_mut(), args.frames)
        .map_err(|e| EngineError::Bench(format!("the benchmark failed: {e}.")))?;
    println!("{r}");
    if b.name() == "cuda" {
        drop(b);
        let opts = backend::cuda::bench::BenchOptions {
            channels: vec![args.channels],
            taps: args.taps,
            sample_bits: args.sample_bits,
            output_bits: args.output_bits,
            dither: args.dither,
            spectra_per_heap: args.spectra_per_heap,
            chunk_samples: input.chunk_samples,
            frames: args.frames,
            gpu_index: args.gpu,
            narrowband: args.narrowband.clone(),
            tuning: cuda_tuning(args.fft_precision, args.wideband_kernels),
            ..Default::default()
        };
        let mut out = std::io::stdout();
        backend::cuda::bench::run(&opts, &mut out)
            .map_err(|e| EngineError::Bench(format!("the CUDA benchmark failed: {e}.")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::conformance::geometry;

    /// float16 rows are the CUDA backend's: the CPU backends refuse them with a sentence, and
    /// `auto` without a GPU refuses rather than fall back to float32 on the CPU.
    #[test]
    fn half_precision_needs_cuda() {
        let g = geometry(1024, 4, 10, 4, 1, 0);
        let make = |kind| {
            make_backend(
                kind,
                FftPrecision::Half,
                WidebandKernels::TwoPass,
                g.input,
                &[g.output],
                0,
            )
        };
        for kind in [BackendKind::Cpu, BackendKind::Reference] {
            let e = make(kind).err().expect("refused");
            assert!(e.contains("--backend cuda") && e.ends_with('.'), "{e}");
        }
        assert!(make(BackendKind::Null).is_ok());
        if backend::cuda::cuda_available() {
            assert!(make(BackendKind::Auto).is_ok());
        } else {
            let e = make(BackendKind::Auto).err().expect("refused");
            assert!(e.contains("no usable GPU") && e.ends_with('.'), "{e}");
        }
        // Single precision still falls back to the CPU.
        let b = make_backend(
            BackendKind::Auto,
            FftPrecision::Single,
            WidebandKernels::TwoPass,
            g.input,
            &[g.output],
            0,
        );
        assert!(b.is_ok());
    }

    /// `--wideband-kernels` reaches the CUDA backend's tuning (two passes or three), keeps the
    /// precision's other choices, and the CPU backends refuse a choice they do not have.
    #[test]
    fn wideband_kernels_choose_the_cuda_kernel_set() {
        use backend::cuda::Tuning;
        let two = cuda_tuning(FftPrecision::Single, WidebandKernels::TwoPass);
        let three = cuda_tuning(FftPrecision::Single, WidebandKernels::ThreePass);
        assert_eq!(two, Tuning::default());
        assert!(two.fused && !three.fused);
        assert_eq!(
            Tuning {
                fused: true,
                ..three
            },
            Tuning::default()
        );
        assert!(cuda_tuning(FftPrecision::Half, WidebandKernels::TwoPass).half_rows);
        let g = geometry(1024, 4, 10, 4, 1, 0);
        let make = |kind, precision| {
            make_backend(
                kind,
                precision,
                WidebandKernels::ThreePass,
                g.input,
                &[g.output],
                0,
            )
        };
        for kind in [BackendKind::Cpu, BackendKind::Reference] {
            let e = make(kind, FftPrecision::Single).err().expect("refused");
            assert!(e.contains("--backend cuda") && e.ends_with('.'), "{e}");
        }
        let e = make(BackendKind::Cuda, FftPrecision::Half)
            .err()
            .expect("refused");
        assert!(e.contains("two-pass") && e.ends_with('.'), "{e}");
        // auto without a GPU runs the CPU backend, which has one set of kernels.
        assert!(make(BackendKind::Auto, FftPrecision::Single).is_ok());
    }
}

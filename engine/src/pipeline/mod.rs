//! The engine's data path: stages on their own threads joined by bounded queues, with every buffer
//! allocated at start and recycled through return queues (paper, Fig. 1).
//!
//! ```text
//!  recv pol0 --chunks--> pair --frames--> compute --frames--> send --> network
//!  recv pol1 --chunks-->  ^  \                                  |
//!     ^   ^               |   '--chunks with spent buffers--> recv
//!     '---'               '------------- free frames ----------'
//! ```
//!
//! - [`recv`]: one or more threads per polarisation; digitiser heaps go straight into chunk buffers
//!   (the frames' own, pinned for CUDA) through spead's `ChunkAssembler`.
//! - [`pair`]: matches the two polarisations' chunks by chunk id and swaps their buffers into a free
//!   frame, handing the frame's spent buffers back to the receivers.
//! - [`compute`]: delay model, validity, and the backend (up to `max_in_flight` frames in flight).
//! - [`send`]: each output's heaps whose spectra are all valid, as SPEAD packets through GSO, to
//!   that output's destinations.

pub mod compute;
mod error;
mod monitor;
pub mod pair;
mod placed;
pub mod recv;
pub mod send;
pub mod spec;

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use num_complex::Complex32;

use crate::backend::{
    Backend, Channelisation, Frame, HostBuffer, InputGeometry, OutputGeometry, POLS,
};
use crate::signal::delay::DelayModel;
use crate::stats::Stats;
pub use error::PipelineError;
use monitor::Watched;
use placed::spawn_placed;
pub use spec::StageSpecs;

/// Chunks each receiver fills at once, at least (spead2 uses 2; one more absorbs reordering across
/// sender threads). `--recv-window` sets the window in time above this.
pub const RECV_WINDOW: usize = 3;
/// Chunks each receive thread's window holds: `seconds` (`--recv-window`) of chunks lasting
/// `chunk_seconds`, rounded up, and at least [`RECV_WINDOW`]; without it, [`RECV_WINDOW`].
///
/// The default stays the minimum because a larger window is not free: a chunk leaves the window
/// only when a heap of a chunk `window - 1` later arrives (spead's `Window`), so every chunk
/// reaches the pairing stage (window - 1) chunk durations after it ends, in the steady state
/// too, and the window's buffers are allocated at start. A stall itself does not move a lane's
/// window (see `recv`); what the window must cover is the skew between a lane's sockets as it
/// catches up, which each lane measures as its latest heap (`LaneStalls::latest_heap_ns`). At
/// GPU rates three chunks are tens of ms, shorter than that skew: docs/performance.md gives the
/// window that held there.
pub fn recv_window(seconds: Option<f64>, chunk_seconds: f64) -> usize {
    let n = seconds.map_or(0.0, |s| {
        (s / chunk_seconds.max(1e-12) * (1.0 - 1e-12)).ceil()
    });
    (n.min(1e6) as usize).max(RECV_WINDOW)
}

/// Spare chunk buffers per polarisation beyond the frames' own: the receivers' windows, one chunk
/// being opened, what the pairing stage holds, and two more; several lanes of one polarisation
/// may be a chunk or two apart.
pub fn spare_chunks(window: usize, max_pending: usize, recv_lanes: usize) -> usize {
    let lag = if recv_lanes > 1 { 2 } else { 0 };
    window + max_pending + 3 + lag
}
/// Chunks of one polarisation the pairing stage holds while waiting for the other, at least.
pub const MAX_PENDING: usize = 2;
/// Input time the engine rides out when a thread or a sender stalls, whatever the chunk size: one
/// polarisation waits this long for the other, and the receivers have spare buffers for it. With
/// small chunks, a few chunks alone are a few tens of ms, which a busy 2-core host can exceed.
pub const SLACK: Duration = Duration::from_millis(250);
/// Memory per polarisation beyond which [`SLACK`] buys no more chunks.
const SLACK_BYTES: usize = 256 << 20;

/// Chunks of one polarisation the pairing stage holds while waiting for the other: enough for
/// [`SLACK`] (within `SLACK_BYTES`), and at least [`MAX_PENDING`], for chunks of `chunk_bytes`
/// per polarisation that last `chunk_seconds`.
pub fn max_pending(chunk_bytes: usize, chunk_seconds: f64) -> usize {
    let chunk_bytes = chunk_bytes.max(1);
    let by_time = (SLACK.as_secs_f64() / chunk_seconds).ceil();
    let by_memory = (SLACK_BYTES / chunk_bytes) as f64;
    (by_time.min(by_memory) as usize).max(MAX_PENDING)
}
/// How often blocked threads look at the stop flag.
pub const TICK: Duration = Duration::from_millis(50);

/// What the frames and their bookkeeping are sized for, and what the backend starts with.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    pub input: InputGeometry,
    /// Every output's geometry, in order: what the backend must have been built for.
    pub outputs: Vec<OutputGeometry>,
    /// Each output's initial gain (real) for every channel of both polarisations.
    pub gains: Vec<f32>,
    /// Digitiser heaps per chunk.
    pub slots: usize,
    /// Receive threads per polarisation.
    pub recv_lanes: usize,
    /// Chunks of one polarisation the pairing stage may hold ([`max_pending`]).
    pub max_pending: usize,
    /// Chunks each receive thread's window holds ([`recv_window`]).
    pub recv_window: usize,
}

/// A frame and what the engine knows about it beyond the backend's [`Frame`].
pub struct Work {
    pub frame: Frame,
    pub meta: Meta,
}

/// Per-frame bookkeeping, allocated once per frame and reused.
#[derive(Debug)]
pub struct Meta {
    /// Chunk id: the chunk starts at ADC sample `id * chunk_samples`.
    pub id: u64,
    /// Per polarisation, per digitiser heap of the chunk: received whole.
    pub present: [Vec<bool>; POLS],
    /// Per output, per output heap of the frame: every spectrum in it is valid (both
    /// polarisations).
    pub heap_valid: Vec<Vec<bool>>,
    /// The backend computed this frame (otherwise `output` is stale and nothing is sent).
    pub computed: bool,
    pub submitted_at: Option<Instant>,
}

impl Meta {
    /// Bookkeeping sized for the input and outputs of `spec`.
    pub fn new(spec: &FrameSpec) -> Self {
        let slots = spec.slots;
        Self {
            id: 0,
            present: [vec![false; slots], vec![false; slots]],
            heap_valid: spec
                .outputs
                .iter()
                .map(|&o| vec![false; Channelisation::new(spec.input, o).heaps_per_frame()])
                .collect(),
            computed: false,
            submitted_at: None,
        }
    }
}

/// Requests from the control server to the compute thread (which owns the backend).
#[derive(Clone, Debug)]
pub enum Command {
    /// Gains of one polarisation of output `output` (its index in the configuration).
    Gains {
        output: usize,
        pol: usize,
        gains: Vec<Complex32>,
    },
    /// Use `model` for spectra with timestamps from `apply_from` on (0: from the next frame).
    /// Delays act on the input: every output follows them.
    Delay {
        pol: usize,
        apply_from: u64,
        model: DelayModel,
    },
    /// Narrowband output `output` mixes with `mixer` (a checked `crate::signal::ddc::mixer_word`)
    /// from the next frame the compute stage prepares on: the whole frame, its mixer and its
    /// delays' mixer term alike.
    Centre { output: usize, mixer: u32 },
}

/// Builds the backend on the compute thread, so that a GPU context belongs to the thread using it.
pub type BackendFactory =
    Box<dyn FnOnce() -> Result<Box<dyn Backend>, PipelineError> + Send + 'static>;

/// What the compute thread reports once its backend is up.
struct Ready {
    backend: &'static str,
    max_in_flight: usize,
    frames: Vec<Frame>,
    /// Extra chunk buffers per polarisation for the receivers' windows.
    spare: [Vec<HostBuffer>; POLS],
}

/// The running pipeline.
pub struct Pipeline {
    threads: Vec<(&'static str, Stage)>,
    /// The threads whose scheduler waits [`join`](Self::join) samples.
    watched: Vec<Watched>,
    stop: Arc<AtomicBool>,
    pub commands: Sender<Command>,
    pub backend: &'static str,
}

impl Pipeline {
    /// Binds the sockets, builds the backend (through `make_backend`, on the compute thread),
    /// allocates every buffer and starts the stages, each with its own part of `specs`. Errors are
    /// sentences.
    pub fn start(
        specs: StageSpecs,
        make_backend: BackendFactory,
        stats: Arc<Stats>,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, PipelineError> {
        let StageSpecs {
            frame: frame_spec,
            recv: recv_spec,
            pair: pair_spec,
            compute: compute_spec,
            send: send_specs,
            placement,
        } = specs;
        let receivers = [
            recv::bind(&recv_spec, 0, &stats)?,
            recv::bind(&recv_spec, 1, &stats)?,
        ];
        let transmitters = send::transmitters(&send_specs)?;

        let (commands_tx, commands_rx) = bounded::<Command>(64);
        let (ready_tx, ready_rx) = bounded::<Result<Ready, PipelineError>>(1);
        let (to_send_tx, to_send_rx) = bounded::<Work>(2);
        let (to_compute_tx, to_compute_rx) = bounded::<Work>(2);

        // Kept for the queue-depth gauges (the originals move to their threads).
        let to_compute_depth = to_compute_rx.clone();
        let mut threads = Vec::new();
        let mut watched = Vec::new();
        let compute = {
            let frame_spec = frame_spec.clone();
            let placement = placement.compute.clone();
            let stats = stats.clone();
            let stop = stop.clone();
            let all = Arc::clone(&stats);
            // Not placed here: the thread places itself once the backend is up (below).
            let unplaced = placement::Placement::default();
            spawn_watched(&mut watched, &all, "fengine-compute", unplaced, move || {
                let mut backend = match make_backend() {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Ok(());
                    }
                };
                // Placed once the backend is up, so that threads it starts (a CPU pool, the CUDA
                // driver's) keep the process's cores and normal scheduling.
                let placed = allocate(&frame_spec, backend.as_mut()).and_then(|ready| {
                    placement
                        .apply()
                        .map(|()| ready)
                        .map_err(|error| PipelineError::Placement {
                            thread: "fengine-compute".into(),
                            error,
                        })
                });
                match placed {
                    Ok(ready) => {
                        let _ = ready_tx.send(Ok(ready));
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Ok(());
                    }
                }
                compute::Compute::new(&compute_spec, backend, stats, stop).run(
                    to_compute_rx,
                    to_send_tx,
                    commands_rx,
                )
            })?
        };
        threads.push(("compute", compute));
        let ready = match ready_rx.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let _ = join_all(threads);
                return Err(e);
            }
            Err(_) => {
                let e = join_all(threads)
                    .err()
                    .unwrap_or(PipelineError::ComputeStopped);
                return Err(e);
            }
        };

        let frames = ready.frames.len();
        let spare_per_pol = ready.spare[0].len();
        let buffers_per_pol = frames + spare_per_pol;
        let (free_tx, free_rx) = bounded::<Work>(frames);
        for frame in ready.frames {
            let meta = Meta::new(&frame_spec);
            // Cannot fail: the queue holds exactly `frames` items.
            let _ = free_tx.try_send(Work { frame, meta });
        }
        // Chunks (and resync notices) from both receivers: room for every buffer there is, so a
        // receiver never blocks handing one over.
        let (to_pair_tx, to_pair_rx) = bounded::<recv::RecvMsg>(2 * buffers_per_pol + 64);
        let (ret0_tx, ret0_rx) = bounded(buffers_per_pol + 4);
        let (ret1_tx, ret1_rx) = bounded(buffers_per_pol + 4);

        if let Ok(mut q) = stats.queues.lock() {
            q.push(("recv_to_pair", depth(&to_pair_rx)));
            q.push(("pair_to_compute", depth(&to_compute_depth)));
            q.push(("compute_to_send", depth(&to_send_rx)));
            q.push(("free_frames", depth(&free_rx)));
            q.push(("returned_chunks_pol0", depth(&ret0_rx)));
            q.push(("returned_chunks_pol1", depth(&ret1_rx)));
        }

        let [rx0, rx1] = receivers;
        let [spare0, spare1] = ready.spare;
        for (pol, sockets, spare, returns) in [(0, rx0, spare0, ret0_rx), (1, rx1, spare1, ret1_rx)]
        {
            let stage = if pol == 0 { "recv pol0" } else { "recv pol1" };
            let lanes = recv::lanes(
                &recv_spec,
                pol,
                sockets,
                spare,
                to_pair_tx.clone(),
                returns,
                &stats,
                &stop,
            );
            for (j, lane) in lanes.into_iter().enumerate() {
                let placed = placement.recv[pol].get(j).cloned().unwrap_or_default();
                match spawn_placed(&lane.name(), placed, move || lane.run()) {
                    Ok(t) => threads.push((stage, t)),
                    Err(e) => return abort(&stop, threads, e),
                }
            }
        }
        drop(to_pair_tx);
        let pair = pair::Pair::new(&pair_spec, stats.clone(), stop.clone());
        let pair_placement = placement.pair.clone();
        match spawn_watched(
            &mut watched,
            &stats,
            "fengine-pair",
            pair_placement,
            move || pair.run(to_pair_rx, free_rx, to_compute_tx, [ret0_tx, ret1_tx]),
        ) {
            Ok(t) => threads.push(("pair", t)),
            Err(e) => return abort(&stop, threads, e),
        }
        let out_stats = stats.clone();
        let out_stop = stop.clone();
        let send_placement = placement.pair.clone();
        match spawn_watched(
            &mut watched,
            &stats,
            "fengine-send",
            send_placement,
            move || {
                send::run(
                    transmitters,
                    &send_specs,
                    to_send_rx,
                    free_tx,
                    out_stats,
                    out_stop,
                )
            },
        ) {
            Ok(t) => threads.push(("send", t)),
            Err(e) => return abort(&stop, threads, e),
        }
        tracing::info!(
            backend = ready.backend,
            frames,
            max_in_flight = ready.max_in_flight,
            chunk_buffers_per_pol = buffers_per_pol,
            "pipeline started"
        );
        record_window(&stats, &frame_spec, &recv_spec, spare_per_pol);
        Ok(Self {
            threads,
            watched,
            stop,
            commands: commands_tx,
            backend: ready.backend,
        })
    }

    pub fn stop_flag(&self) -> &Arc<AtomicBool> {
        &self.stop
    }

    /// Waits until the stop flag is set (by a signal or a failing stage), then for every stage.
    /// Returns the first stage error.
    pub fn join(mut self) -> Result<(), PipelineError> {
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            for w in &mut self.watched {
                w.sample(now);
            }
            if self.threads.iter().any(|(_, t)| t.is_finished()) {
                // A stage ended by itself: that is an error (or a panic); stop the rest.
                self.stop.store(true, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(TICK);
        }
        self.stop.store(true, Ordering::Relaxed);
        join_all(self.threads)
    }
}

/// A stage's thread.
type Stage = JoinHandle<Result<(), PipelineError>>;

fn spawn(
    name: &str,
    f: impl FnOnce() -> Result<(), PipelineError> + Send + 'static,
) -> Result<Stage, PipelineError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|error| PipelineError::Thread {
            name: name.into(),
            error,
        })
}

/// [`spawn`], and the thread gives its id to the scheduler watch ([`monitor`]).
fn spawn_watched(
    watched: &mut Vec<Watched>,
    stats: &Stats,
    name: &str,
    placement: placement::Placement,
    f: impl FnOnce() -> Result<(), PipelineError> + Send + 'static,
) -> Result<Stage, PipelineError> {
    let (w, tid): (Watched, Arc<AtomicI32>) = Watched::new(stats, name);
    watched.push(w);
    spawn_placed(name, placement, move || {
        tid.store(placement::current_tid(), Ordering::Relaxed);
        f()
    })
}

/// Records the receive window and the memory of the receivers' chunk buffers in `stats`, and
/// says so in the log.
fn record_window(stats: &Stats, frame: &FrameSpec, recv: &recv::RecvSpec, spare_per_pol: usize) {
    let chunk_bytes = frame.input.chunk_bytes() as u64;
    let seconds = (recv.window * recv.chunk_samples) as f64 / recv.fs;
    let window_bytes = chunk_bytes * (recv.window * POLS) as u64;
    let spare_bytes = chunk_bytes * (spare_per_pol * POLS) as u64;
    stats
        .recv_window_chunks
        .store(recv.window as u64, Ordering::Relaxed);
    stats
        .recv_window_seconds_bits
        .store(seconds.to_bits(), Ordering::Relaxed);
    stats
        .recv_window_bytes
        .store(window_bytes, Ordering::Relaxed);
    stats.recv_spare_bytes.store(spare_bytes, Ordering::Relaxed);
    tracing::info!(
        chunks = recv.window,
        seconds,
        window_mib = window_bytes as f64 / (1 << 20) as f64,
        spare_buffers_per_pol = spare_per_pol,
        spare_mib = spare_bytes as f64 / (1 << 20) as f64,
        "receive window: each chunk waits this long for late heaps; the memory is both polarisations'"
    );
}

/// Stops and joins the stages already started, and returns `e`.
fn abort(
    stop: &AtomicBool,
    threads: Vec<(&'static str, Stage)>,
    e: PipelineError,
) -> Result<Pipeline, PipelineError> {
    stop.store(true, Ordering::Relaxed);
    let _ = join_all(threads);
    Err(e)
}

fn join_all(threads: Vec<(&'static str, Stage)>) -> Result<(), PipelineError> {
    let mut first = Ok(());
    for (name, t) in threads {
        let r = match t.join() {
            Ok(r) => r,
            Err(_) => Err(PipelineError::Panicked(name)),
        };
        if let Err(e) = r {
            tracing::error!(stage = name, "{e}");
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Frames for the pipeline and spare chunk buffers for the receivers, all from the backend (pinned
/// memory for CUDA), and the initial gains.
fn allocate(spec: &FrameSpec, backend: &mut dyn Backend) -> Result<Ready, PipelineError> {
    if *backend.input() != spec.input || backend.outputs() != spec.outputs {
        return Err(PipelineError::WrongGeometry);
    }
    for (k, (output, &gain)) in spec.outputs.iter().zip(&spec.gains).enumerate() {
        let gains = vec![Complex32::new(gain, 0.0); output.channels];
        for pol in 0..POLS {
            backend
                .set_gains(k, pol, &gains)
                .map_err(PipelineError::InitialGains)?;
        }
    }
    let max_in_flight = backend.max_in_flight().max(1);
    // In flight in the backend, one being prepared, two in each queue, one sending, one pairing.
    let frames = max_in_flight + 6;
    let alloc = |backend: &dyn Backend| backend.alloc_frame().map_err(PipelineError::Allocate);
    let mut out = Vec::with_capacity(frames);
    for _ in 0..frames {
        out.push(alloc(backend)?);
    }
    let spares = spare_chunks(spec.recv_window, spec.max_pending, spec.recv_lanes);
    let mut spare: [Vec<HostBuffer>; POLS] = [Vec::new(), Vec::new()];
    for _ in 0..spares {
        let f = alloc(backend)?;
        let [a, b] = f.input.chunk;
        spare[0].push(a);
        spare[1].push(b);
    }
    Ok(Ready {
        backend: backend.name(),
        max_in_flight,
        frames: out,
        spare,
    })
}

/// A queue-depth gauge reading `r`.
fn depth<T: Send + 'static>(r: &Receiver<T>) -> crate::stats::DepthFn {
    let r = r.clone();
    Box::new(move || r.len())
}

/// Sends `item`, waiting for room but giving up when `stop` is set. Returns false if the item was
/// not delivered.
pub(crate) fn send_until_stop<T>(tx: &Sender<T>, mut item: T, stop: &AtomicBool) -> bool {
    loop {
        match tx.send_timeout(item, TICK) {
            Ok(()) => return true,
            Err(SendTimeoutError::Timeout(back)) => {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
                item = back;
            }
            Err(SendTimeoutError::Disconnected(_)) => return false,
        }
    }
}

/// Receives an item, waiting but giving up when `stop` is set or the queue is closed.
pub(crate) fn recv_until_stop<T>(rx: &Receiver<T>, stop: &AtomicBool) -> Option<T> {
    loop {
        match rx.recv_timeout(TICK) {
            Ok(item) => return Some(item),
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

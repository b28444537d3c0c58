//! dsim, the digitiser simulator: both polarisations of one digitiser as SPEAD streams in the
//! MeerKAT digitiser format, paced to the wall clock, controllable over HTTP while it runs.
//!
//! In-process use (tests, the benchmark):
//!
//! ```no_run
//! let cfg = dsim::Config::new("127.0.0.1:7148".parse().unwrap(), "127.0.0.1:7149".parse().unwrap());
//! let handle = dsim::Dsim::start(cfg).unwrap();
//! println!("{:?}", handle.status().achieved_rate);
//! handle.stop();
//! ```
//!
//! Modules: [`config`] (what to do), [`spec`] (the signal in force and its forms), [`signal`]
//! (samples), [`buffer`] (packets of the repeating
//! buffer), [`schedule`] (when each heap is due), [`sender`] (send threads), [`descriptors`]
//! (the descriptor heaps' thread), [`faults`],
//! [`status`], [`metrics`], [`placement`] (where threads run), [`control`] (HTTP), [`cli`],
//! [`bench`](mod@bench).

pub mod bench;
pub mod buffer;
pub mod catchup;
pub mod cli;
pub mod config;
pub mod control;
pub mod descriptors;
pub mod faults;
pub mod katcp;
pub mod katgpucbf;
pub mod metrics;
pub mod placement;
pub mod schedule;
pub mod sender;
pub mod signal;
pub mod signal_lang;
pub mod spec;
pub mod state;
pub mod status;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spead::transport::{Sender, SocketConfig, UdpSocket};

pub use config::{BadRequest, Config, RequestError, SignalSpec, SignalUpdate, Tone};
pub use faults::{FaultsRequest, PolFaults};
pub use fgpu_api::dsim::{RateChange, SignalChange, SignalRequest};
pub use spec::{Component, PolSignal, PolsRequest, Signal};
pub use status::Status;

use faults::FaultRules;

use buffer::Layout;
use faults::FaultPlan;
use schedule::{unix_now, Schedule, Versioned};
use signal::Generator;
use state::{PolState, Shared, SignalState, Switch};

/// Time from start-up to the first heap when the sync time is now or in the past.
const START_MARGIN: f64 = 0.05;
/// Bytes per second one send thread is given when threads are picked from the rate.
pub const BYTES_PER_THREAD: f64 = 3e9;
/// Timestamps are 48-bit immediates.
const MAX_TIMESTAMP: u64 = 1 << 48;

pub struct Dsim;

impl Dsim {
    /// Builds the signal buffers, opens the sockets and starts sending (and the HTTP control
    /// server, if configured). Errors are sentences for the user.
    pub fn start(config: Config) -> anyhow::Result<DsimHandle> {
        config.validate()?;
        let hs = config.heap_samples;
        let packet = config::packet_bytes(hs, config.sample_bits);
        let threads = match config.threads {
            0 => ((config.rate / hs as f64 * packet as f64) / BYTES_PER_THREAD)
                .ceil()
                .clamp(1.0, 16.0) as usize,
            n => n,
        };
        let layouts = common_layouts(&config, threads)?;
        let placed = config.placement.plan(threads)?;
        if config.placement.lock_memory {
            ::placement::lock_memory().map_err(|e| anyhow::anyhow!("{e}."))?;
        }
        // The rest first: threads started from here on (buffer building, control) inherit it.
        if let Some(main) = &placed.main {
            main.pin_current_thread()
                .map_err(|e| anyhow::anyhow!("--main-affinity: {e}."))?;
        }
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let built = Instant::now();
        let mut signal = config.start_signal();
        if let Some(req) = &config.signals {
            let lang = spec::read_signals(req, layouts[0].period(), config.rate)
                .map_err(|e| anyhow::anyhow!("--signals: {e}"))?;
            signal = signal.with_lang(lang);
        }
        let generators: Vec<Generator> = (0..2)
            .map(|p| {
                Generator::new(
                    &signal,
                    config.rate,
                    p,
                    hs,
                    config.sample_bits,
                    layouts[p].period(),
                )
            })
            .collect();
        let mut slots: Vec<Vec<Vec<buffer::Slot>>> = (0..2)
            .map(|p| {
                buffer::build_all(
                    &layouts[p],
                    &generators[p],
                    digitiser_id(&config, p),
                    workers,
                )
            })
            .collect();
        tracing::info!(
            buffer_heaps = layouts[0].buffer_heaps,
            seconds = built.elapsed().as_secs_f64(),
            "signal buffers built"
        );

        // GSO is on by default; GRO is a receive feature.
        let socket_cfg = SocketConfig {
            buffer_bytes: config.socket_buffer,
            interface: config.interface,
            ttl: config.ttl,
            gro: false,
            ..SocketConfig::default()
        };
        let mut senders = Vec::new();
        for _pol in 0..2 {
            let mut mine = Vec::new();
            for _ in 0..threads {
                let sender = udp_sender(&socket_cfg)
                    .map_err(|e| anyhow::anyhow!("cannot open a sending socket: {e}."))?;
                mine.push(sender);
            }
            senders.push(mine);
        }

        let now = unix_now();
        let sync_time = config.sync_time.unwrap_or(now);
        let ahead = (now + START_MARGIN - sync_time) * config.rate / hs as f64;
        let first_heap = if ahead > 0.0 { ahead.ceil() as u64 } else { 0 };
        let limit = MAX_TIMESTAMP / hs as u64;
        if first_heap >= limit {
            anyhow::bail!(
                "the sync time {sync_time} is so long ago that timestamps at {} samples/s would pass 2^48; choose a later --sync-time.",
                config.rate
            );
        }
        let by_count = config.heaps.map(|n| first_heap + n);
        let by_time = config
            .duration
            .map(|d| first_heap + (d * config.rate / hs as f64).ceil().max(1.0) as u64);
        let end_heap = [by_count, by_time, Some(limit)].into_iter().flatten().min();

        let mut channels = [Vec::new(), Vec::new()];
        let mut receivers = [Vec::new(), Vec::new()];
        for p in 0..2 {
            for _ in 0..threads {
                let (tx, rx) = mpsc::channel::<Switch>();
                channels[p].push(tx);
                receivers[p].push(rx);
            }
        }
        let [ch0, ch1] = channels;
        let pol_state = |p: usize, switches| PolState {
            pol: p,
            layout: layouts[p],
            endpoint: config.dests[p].clone(),
            dests: config.dests[p]
                .addrs
                .iter()
                .map(|&a| SocketAddr::V4(a))
                .collect(),
            counters: (0..threads).map(|_| Default::default()).collect(),
            faults: Versioned::new(
                [&config.faults.pol0, &config.faults.pol1][p]
                    .as_ref()
                    .map(|f| FaultPlan::new(f, signal.seed, p))
                    .unwrap_or_default(),
            ),
            fault_counters: Default::default(),
            progress: (0..threads).map(|_| Mutex::new(None)).collect(),
            started: AtomicU64::new(0),
            switches: Mutex::new(switches),
        };
        let shared = Arc::new(Shared {
            heap_samples: hs,
            threads,
            pols: [pol_state(0, ch0), pol_state(1, ch1)],
            schedule: Versioned::new(Schedule::new(sync_time, first_heap, config.rate, hs)),
            signal: Mutex::new(SignalState {
                common: SignalSpec {
                    seed: signal.seed,
                    ..config.signal.clone()
                },
                tone_frequencies: [0, 1].map(|p| generators[p].tone_frequencies(config.rate)),
                signal,
                rate: config.rate,
                from_heap: first_heap,
                max_period: layouts[0].period(),
            }),
            signal_busy: Mutex::new(()),
            stop: AtomicBool::new(false),
            running: AtomicUsize::new(2 * threads),
            first_heap,
            end_heap,
            sync_time,
            resume_from: AtomicU64::new(0),
            stalled_until_ns: AtomicU64::new(0),
            started_at: Instant::now(),
            rate_window: Default::default(),
            config,
        });

        // Before the data, as katgpucbf's dsim, so that a receiver has the descriptors first.
        let descriptors = descriptors::DescriptorThread::spawn(shared.clone())
            .map_err(|e| anyhow::anyhow!("cannot start sending the descriptor heaps: {e}."))?;
        let mut handles = Vec::new();
        // Each send thread takes its placement itself and says whether the kernel let it.
        let (placed_tx, placed_rx) = mpsc::channel();
        for p in (0..2).rev() {
            let pol_slots = slots.pop().unwrap_or_default();
            let pol_senders = std::mem::take(&mut senders[p]);
            let pol_rx = std::mem::take(&mut receivers[p]);
            for (j, ((s, tx), rx)) in pol_slots
                .into_iter()
                .zip(pol_senders)
                .zip(pol_rx)
                .enumerate()
            {
                let worker = sender::Worker::new(shared.clone(), p, j, s, rx, tx);
                let name = format!("dsim-p{p}-t{j}");
                let placement = placed.send[p][j].clone();
                let placed_tx = placed_tx.clone();
                let thread = name.clone();
                let h = std::thread::Builder::new().name(name).spawn(move || {
                    let applied = placement.apply().map_err(|e| format!("{thread}: {e}."));
                    let ok = applied.is_ok();
                    let _ = placed_tx.send(applied);
                    // Dropped now, not as the thread ends: the starter reads until every sender is gone.
                    drop(placed_tx);
                    if ok {
                        worker.run();
                    }
                })?;
                handles.push(h);
            }
        }
        drop(placed_tx);
        if let Some(e) = placed_rx.iter().find_map(Result::err) {
            shared.stop.store(true, Ordering::SeqCst);
            for h in handles {
                let _ = h.join();
            }
            anyhow::bail!(e);
        }
        let layout: Vec<String> = placed
            .send
            .iter()
            .enumerate()
            .flat_map(|(p, t)| {
                t.iter()
                    .enumerate()
                    .map(move |(j, pl)| format!("dsim-p{p}-t{j}: {pl}"))
            })
            .collect();
        tracing::info!(
            threads = %layout.join("; "),
            rest = %placed.main.as_ref().map_or("any core".into(), |c| format!("cores {c}")),
            memory_locked = shared.config.placement.lock_memory,
            "placement"
        );
        let monitor_stop = Arc::new(AtomicBool::new(false));
        let monitor = {
            let (shared, stop) = (shared.clone(), monitor_stop.clone());
            std::thread::Builder::new()
                .name("dsim-monitor".into())
                .spawn(move || monitor(&shared, &stop))?
        };
        let controller = Controller {
            shared: shared.clone(),
        };
        let control = match shared.config.control {
            Some(addr) => Some(control::ControlServer::spawn(
                addr,
                shared.config.control_token.clone(),
                controller.clone(),
            )?),
            None => None,
        };
        tracing::info!(
            rate = shared.config.rate,
            sync_time,
            first_timestamp = first_heap * hs as u64,
            end_timestamp = end_heap.map(|e| e * hs as u64),
            threads_per_pol = threads,
            pol0 = %shared.config.dests[0],
            pol1 = %shared.config.dests[1],
            "sending"
        );
        Ok(DsimHandle {
            controller,
            workers: handles,
            descriptors,
            monitor: Some(monitor),
            monitor_stop,
            control,
        })
    }
}

/// Both polarisations share one buffer length (so tones snap to the same frequencies): a
/// multiple of each one's batch times threads.
fn common_layouts(config: &Config, threads: usize) -> Result<[Layout; 2], BadRequest> {
    let (hs, bits) = (config.heap_samples, config.sample_bits);
    let l0 = Layout::new(hs, bits, config.dests[0].addrs.len(), threads, 1)?;
    let l1 = Layout::new(hs, bits, config.dests[1].addrs.len(), threads, 1)?;
    let unit = lcm(l0.buffer_heaps, l1.buffer_heaps);
    let heaps = config.buffer_heaps.div_ceil(unit) * unit;
    Ok([
        Layout::new(hs, bits, l0.groups, threads, heaps)?,
        Layout::new(hs, bits, l1.groups, threads, heaps)?,
    ])
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b) * b
}

/// The digitiser id item: polarisation in bit 0, digitiser index above it.
fn digitiser_id(config: &Config, pol: usize) -> u64 {
    (config.digitiser_id << 1) | pol as u64
}

/// Samples progress for the rate window and logs a status line every 10 s.
fn monitor(shared: &Shared, stop: &AtomicBool) {
    let mut last_log = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(status::SAMPLE_INTERVAL);
        {
            let mut w = shared.rate_window.lock().unwrap_or_else(|e| e.into_inner());
            for p in &shared.pols {
                if let Some(pr) = p.progress() {
                    w.push(p.pol, pr);
                }
            }
        }
        if last_log.elapsed() >= status::RATE_WINDOW && !shared.finished() {
            last_log = Instant::now();
            let s = status::status(shared);
            tracing::info!(
                rate = s.rate,
                achieved_rate = s.achieved_rate,
                rate_error = s.rate_error,
                rate_ok = s.rate_ok,
                timestamp = s.timestamp,
                heaps_sent = s.pols.iter().map(|p| p.heaps_sent).sum::<u64>(),
                saturated = s.pols.iter().map(|p| p.saturated_samples).sum::<u64>(),
                send_errors = s.pols.iter().map(|p| p.send_errors).sum::<u64>(),
                heaps_skipped = s.heaps_skipped,
                "status"
            );
        }
    }
}

/// The operations the HTTP API offers, callable in-process too. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    shared: Arc<Shared>,
}

impl Controller {
    pub fn status(&self) -> Status {
        status::status(&self.shared)
    }

    /// A scrape: the collector reads the status, and so every counter, now; then the process's
    /// own series (memory, descriptors, threads).
    pub fn metrics(&self) -> String {
        let c = self.clone();
        let mut text = metrics::encode(&metrics::registry(move || c.status()));
        fgpu_serve::process::encode_into(&mut text);
        text
    }

    pub fn signal(&self) -> status::SignalStatus {
        self.status().signal
    }

    pub fn faults(&self) -> FaultsRequest {
        let get = |p: usize| Some(self.shared.pols[p].faults.load().spec().clone());
        FaultsRequest {
            pol0: get(0),
            pol1: get(1),
        }
    }

    fn ensure_running(&self) -> Result<(), RequestError> {
        if self.shared.finished() || self.shared.stop.load(Ordering::Relaxed) {
            Err(RequestError::Conflict(
                "dsim has stopped sending, so there is nothing to change.".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// A heap, a multiple of `align`, that no send thread has reached yet and that is at least
    /// 20 ms away by the wall clock.
    fn boundary(&self, align: u64) -> Result<u64, RequestError> {
        let s = &self.shared;
        let schedule = s.schedule.load();
        let now = schedule.index_at(Instant::now());
        let batch = s.max_batch() as u64;
        let started = s
            .pols
            .iter()
            .map(|p| p.started.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0);
        // Any thread's next batch starts at most threads * batch after the latest one started.
        let reach = started + (s.threads as u64 + 1) * batch;
        let heaps_20ms = (schedule.rate_at(now) / s.heap_samples as f64 * 0.02).ceil() as u64;
        let k = reach
            .max(now + heaps_20ms)
            .max(s.first_heap)
            .next_multiple_of(align);
        match s.end_heap {
            Some(end) if k >= end => Err(RequestError::Conflict(format!(
                "the run ends at heap {end}, before the change could take effect (heap {k})."
            ))),
            _ => Ok(k),
        }
    }

    /// Sends at `rate` samples/s from a heap shortly ahead; timestamps stay continuous. Tone
    /// frequencies are fixed in cycles per sample, so in Hz they scale with the rate.
    pub fn set_rate(&self, rate: f64) -> Result<RateChange, RequestError> {
        config::validate_rate(rate)?;
        self.ensure_running()?;
        let k = self.boundary(1)?;
        self.shared.schedule.update(|s| {
            let mut s = s.clone();
            s.change_rate(k, rate);
            (s, ())
        });
        let schedule = self.shared.schedule.load();
        let change = RateChange {
            rate,
            from_heap: k,
            from_timestamp: k * self.shared.heap_samples as u64,
            from_unix_time: schedule.unix_due(k),
        };
        tracing::info!(rate, from_heap = k, "rate changed");
        Ok(change)
    }

    /// Builds the new signal and switches to it at a batch boundary shortly ahead, named in the
    /// reply. Blocks while the buffer is built.
    ///
    /// The per-polarisation form replaces the polarisations it gives (and the seed, if given).
    /// The common form rebuilds both polarisations from the latest common-form signal with the
    /// fields given replaced (fields left out keep their values there): a per-polarisation signal
    /// set since is replaced as a whole.
    pub fn set_signal(&self, request: &SignalRequest) -> Result<SignalChange, RequestError> {
        let s = &self.shared;
        let _one_at_a_time = s.signal_busy.lock().unwrap_or_else(|e| e.into_inner());
        let current = s.signal.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let rate = s.schedule.load().latest_rate();
        let max_period = s.pols[0].layout.period();
        let (signal, common) =
            spec::resolve(request, &current.signal, &current.common, rate, max_period)?;
        self.ensure_running()?;
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut freqs: [Vec<f64>; 2] = Default::default();
        let mut built = Vec::new();
        for p in &s.pols {
            let g = Generator::new(
                &signal,
                rate,
                p.pol,
                s.heap_samples,
                s.config.sample_bits,
                p.layout.period(),
            );
            freqs[p.pol] = g.tone_frequencies(rate);
            built.push(buffer::build_all(
                &p.layout,
                &g,
                digitiser_id(&s.config, p.pol),
                workers,
            ));
        }
        let align = lcm(s.pols[0].layout.batch, s.pols[1].layout.batch) as u64;
        let k = self.boundary(align)?;
        for (p, per_thread) in s.pols.iter().zip(built) {
            let switches = p.switches.lock().unwrap_or_else(|e| e.into_inner());
            for (tx, slots) in switches.iter().zip(per_thread) {
                // A thread that has ended has no use for it.
                let _ = tx.send(Switch {
                    from_heap: k,
                    slots,
                });
            }
        }
        let state = SignalState {
            signal,
            common,
            tone_frequencies: freqs,
            rate,
            from_heap: k,
            max_period,
        };
        *s.signal.lock().unwrap_or_else(|e| e.into_inner()) = state.clone();
        tracing::info!(from_heap = k, signal = ?state.signal, "signal changed");
        Ok(SignalChange {
            from_heap: k,
            from_timestamp: k * s.heap_samples as u64,
            from_unix_time: s.schedule.load().unix_due(k),
            signal: state.status(),
        })
    }

    /// Replaces the faults of each polarisation named; applies from the next batch each thread
    /// sends. Returns the faults now in force.
    pub fn set_faults(&self, req: &FaultsRequest) -> Result<FaultsRequest, RequestError> {
        req.validate()?;
        let seed = self
            .shared
            .signal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .signal
            .seed;
        for (p, f) in [&req.pol0, &req.pol1].into_iter().enumerate() {
            if let Some(f) = f {
                let plan = FaultPlan::new(f, seed, p);
                self.shared.pols[p].faults.update(|_| (plan, ()));
                tracing::info!(pol = p, faults = ?f, "faults set");
            }
        }
        Ok(self.faults())
    }

    /// Asks the send threads to stop after their current send.
    pub fn request_stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }

    pub fn is_finished(&self) -> bool {
        self.shared.finished()
    }
}

/// A running dsim. Dropping it stops it.
pub struct DsimHandle {
    controller: Controller,
    workers: Vec<JoinHandle<()>>,
    descriptors: descriptors::DescriptorThread,
    monitor: Option<JoinHandle<()>>,
    monitor_stop: Arc<AtomicBool>,
    control: Option<control::ControlServer>,
}

impl DsimHandle {
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    pub fn status(&self) -> Status {
        self.controller.status()
    }

    /// Where the HTTP control server listens, if it runs.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control.as_ref().map(|c| c.addr)
    }

    pub fn is_finished(&self) -> bool {
        self.controller.is_finished()
    }

    /// Stops sending (unless the run already ended by itself) and waits for the threads;
    /// returns the final status.
    pub fn stop(mut self) -> Status {
        if !self.is_finished() {
            self.controller.request_stop();
        }
        self.finish()
    }

    /// Waits until the run ends by itself (heap count or duration) or is stopped.
    pub fn wait(mut self) -> Status {
        self.finish()
    }

    /// Holds every send thread still for `stall` from its next batch on, as a host that
    /// deschedules the process does: the threads then catch up, or skip ahead past --max-late.
    /// For tests of that behaviour; a real stall needs no help.
    #[doc(hidden)]
    pub fn stall_senders(&self, stall: Duration) {
        let s = &self.controller.shared;
        let until = (s.started_at.elapsed() + stall).as_nanos() as u64;
        s.stalled_until_ns.store(until.max(1), Ordering::SeqCst);
    }

    /// Waits up to `timeout` for the run to end; true if it has.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while !self.is_finished() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    fn finish(&mut self) -> Status {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        self.descriptors.stop();
        let shared = &self.controller.shared;
        if shared.config.send_stop {
            send_stop_heaps(shared);
        }
        self.monitor_stop.store(true, Ordering::Relaxed);
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
        if let Some(mut c) = self.control.take() {
            c.stop();
        }
        let s = self.controller.status();
        tracing::info!(
            state = %s.state,
            heaps_sent = s.pols.iter().map(|p| p.heaps_sent).sum::<u64>(),
            bytes_sent = s.pols.iter().map(|p| p.bytes_sent).sum::<u64>(),
            "dsim done"
        );
        s
    }
}

impl Drop for DsimHandle {
    fn drop(&mut self) {
        if !self.workers.is_empty() || self.monitor.is_some() {
            self.controller.request_stop();
            self.finish();
        }
    }
}

/// A sink for heaps: dsim's one choice of transport, a UDP socket (a send thread's, or the stop
/// heaps').
fn udp_sender(cfg: &SocketConfig) -> std::io::Result<Sender> {
    UdpSocket::sender(cfg).map(Sender::new)
}

/// A SPEAD stream-stop heap to every destination, so receivers such as spead2 end cleanly.
fn send_stop_heaps(shared: &Shared) {
    use spead::{items, HeapItem, HeapWriter};
    let cfg = SocketConfig {
        interface: shared.config.interface,
        ttl: shared.config.ttl,
        buffer_bytes: 1 << 20,
        ..Default::default()
    };
    let Ok(mut tx) = udp_sender(&cfg) else {
        tracing::warn!("cannot open a socket for the stop heaps");
        return;
    };
    let heap_cnt = shared
        .pols
        .iter()
        .map(|p| p.started.load(Ordering::SeqCst) + p.layout.batch as u64)
        .max()
        .unwrap_or(0);
    let stop = [HeapItem::immediate(
        items::STREAM_CTRL,
        items::STREAM_CTRL_STOP,
    )];
    for p in &shared.pols {
        for &dest in &p.dests {
            HeapWriter::new(1024).write(heap_cnt, &stop, |pkt| {
                if let Err(e) = tx.send_segments(dest, pkt, pkt.len()) {
                    tracing::warn!(%dest, error = %e, "stop heap not sent");
                }
            });
        }
    }
}

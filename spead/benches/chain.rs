//! The F-engine chain's transport alone, on loopback: what one host can carry when the programs
//! do nothing but move datagrams. Three stages, as in the test bed:
//! - digitiser lanes send 5192-byte datagrams (4096 10-bit samples and a 72-byte header), GSO,
//!   paced at the sample rate: lane i carries its share of both polarisations;
//! - relay lanes receive them (GRO) and, for every two input datagrams, send one 8264-byte output
//!   datagram (8192 bytes of 8-bit complex channels and a header: the engine's output per input
//!   sample), GSO, straight from memory they never write: no user-space copy, no compute;
//! - sink lanes receive those (GRO) and read each header, as the harness counts heaps.
//!
//! Every byte therefore crosses loopback twice, exactly as in dsim -> fengine -> harness (4.54
//! bytes per sample per polarisation), with none of the programs' own costs. What the host's
//! cores spend at a rate here is what the kernel's copies alone cost the chain there: the floor
//! under any implementation's CPU. The highest rate held is a reference, not a bound: a relay
//! receives and sends on one thread, so a burst can overrun its socket where the engine, with
//! separate receive and send threads, keeps up.
//!
//! A rate is held when no datagram was lost over the whole run and the digitisers kept up; the
//! last line names the highest rate held.
//!
//! `cargo bench -p spead --bench chain`. Environment:
//! - `SPEAD_CHAIN_RATES` (default `2,3,4,5,6,6.3,7,8`): sample rates per polarisation, Gsample/s.
//! - `SPEAD_CHAIN_LANES` (default 8): threads in each stage.
//! - `SPEAD_CHAIN_SECS` (default 3): seconds measured per rate, after 1 s of warm-up.
//! - `SPEAD_CHAIN_BUFFER` (default 64 MiB): SO_RCVBUF / SO_SNDBUF asked per socket.
//! - `SPEAD_CHAIN_INPUT_MIB` (default 80, dsim's signal buffer of both polarisations) and
//!   `SPEAD_CHAIN_OUTPUT_MIB` (default 256, beyond any cache, as the engine's output frames): the
//!   digitiser and relay lanes send from rings of these sizes in all, so that, as in the real
//!   programs, what is sent is not always in a cache. 0 sends one burst's buffer over and over
//!   (always cached): a best case no real digitiser or engine has.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spead::transport::{
    pace, DropCounter, Pacer, Rate, Receiver, RecvConfig, Sender, SocketConfig, UdpSocket,
    MAX_UDP_PAYLOAD,
};

mod common;
use common::env;

const IN_DATAGRAM: usize = 5192;
const IN_SAMPLES: u64 = 4096;
const OUT_DATAGRAM: usize = 8264;
/// Input datagrams per output datagram: 4096 samples of a polarisation in, 1 byte per sample out.
const IN_PER_OUT: u64 = 2;
const WARMUP: Duration = Duration::from_secs(1);

/// Datagrams and bytes a stage moved, counted by its threads as they go.
#[derive(Default)]
struct Count {
    datagrams: AtomicU64,
    bytes: AtomicU64,
}

impl Count {
    fn add(&self, datagrams: u64, bytes: u64) {
        self.datagrams.fetch_add(datagrams, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }
    fn read(&self) -> (u64, u64) {
        (self.datagrams.load(Relaxed), self.bytes.load(Relaxed))
    }
}

#[derive(Default)]
struct Counts {
    sent: Count,
    relayed_in: Count,
    relayed_out: Count,
    sunk: Count,
    late_sends: AtomicU64,
    /// What the kernel dropped at the relays' and the sinks' full sockets (GSO super-packets
    /// count once).
    relay_drops: AtomicU64,
    sink_drops: AtomicU64,
}

/// Jiffies the whole host spent busy and stolen (from `/proc/stat`).
fn host_jiffies() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    (at(0) + at(1) + at(2) + at(5) + at(6), at(7))
}

/// Jiffies this process's threads spent on the CPU, per stage (thread names start with it).
fn stage_jiffies() -> [u64; 3] {
    let mut out = [0u64; 3];
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // "tid (comm) state ...": utime and stime are fields 14 and 15.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|x| x.parse().ok())
            .collect();
        let jiffies = f.iter().sum::<u64>();
        if let Some(i) = STAGES.iter().position(|s| head.contains(&format!("({s}"))) {
            out[i] += jiffies;
        }
    }
    out
}

const STAGES: [&str; 3] = ["digitiser", "relay", "sink"];

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

struct Lane {
    tx: UdpSocket,
    relay_rx: UdpSocket,
    relay_tx: UdpSocket,
    sink_rx: UdpSocket,
    relay_addr: SocketAddr,
    sink_addr: SocketAddr,
}

fn open_lane(buffer: usize) -> io::Result<Lane> {
    let send = SocketConfig {
        gso: true,
        gro: false,
        buffer_bytes: buffer,
        ..Default::default()
    };
    let recv = SocketConfig {
        gso: false,
        gro: true,
        ..send
    };
    let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    let relay_rx = UdpSocket::bind(any, &recv)?;
    let sink_rx = UdpSocket::bind(any, &recv)?;
    Ok(Lane {
        relay_addr: relay_rx.local_addr()?,
        sink_addr: sink_rx.local_addr()?,
        tx: UdpSocket::sender(&send)?,
        relay_tx: UdpSocket::sender(&send)?,
        relay_rx,
        sink_rx,
    })
}

/// Sends `per_s` input datagrams a second from `socket` to `dest`, in GSO bursts, until `stop`.
fn digitiser(
    socket: UdpSocket,
    dest: SocketAddr,
    per_s: f64,
    mut ring: Ring,
    counts: &Counts,
    stop: &AtomicBool,
) {
    let mut tx = Sender::new(socket);
    let burst = (ring.burst / IN_DATAGRAM) as u64;
    let Some(rate) = Rate::per_second(per_s) else {
        return;
    };
    let pacer = Pacer::new(Instant::now(), 0, rate);
    let mut k = 0u64;
    while !stop.load(Relaxed) {
        if pace::sleep_until(pacer.due(k), pace::DEFAULT_SPIN) > Duration::from_millis(1) {
            counts.late_sends.fetch_add(1, Relaxed);
        }
        let buf = ring.next_mut();
        // Stamp each header, as dsim does.
        for (i, d) in buf.chunks_mut(IN_DATAGRAM).enumerate() {
            d[..8].copy_from_slice(&(k + i as u64).to_be_bytes());
        }
        if tx.send_segments(dest, buf, IN_DATAGRAM).is_err() {
            break;
        }
        counts.sent.add(burst, buf.len() as u64);
        k += burst;
    }
}

/// Bursts of `burst` bytes taken in turn from a ring of about `bytes` (at least one burst),
/// written through before any thread starts sending, so that no page is first touched mid-run.
struct Ring {
    data: Vec<u8>,
    burst: usize,
    at: usize,
}

impl Ring {
    fn new(burst: usize, bytes: usize, fill: u8) -> Self {
        let bursts = bytes.div_ceil(burst).max(1);
        Self {
            data: vec![fill; bursts * burst],
            burst,
            at: 0,
        }
    }

    fn next_mut(&mut self) -> &mut [u8] {
        let start = self.at;
        self.at = (self.at + self.burst) % self.data.len();
        &mut self.data[start..start + self.burst]
    }
}

/// Receives input datagrams and sends one output datagram for every [`IN_PER_OUT`] of them.
fn relay(
    rx: UdpSocket,
    tx: UdpSocket,
    dest: SocketAddr,
    mut ring: Ring,
    counts: &Counts,
    stop: &AtomicBool,
) {
    let cfg = RecvConfig {
        max_datagram: IN_DATAGRAM,
        ..Default::default()
    };
    let mut drops = DropCounter::from_reading(rx.drops());
    let mut rx = Receiver::with_config(rx, cfg);
    let mut tx = Sender::new(tx);
    let per_send = ring.burst / OUT_DATAGRAM;
    let mut owed_in = 0u64;
    'run: while let Some(n) = next_batch(&mut rx, &counts.relayed_in, stop) {
        owed_in += n;
        while owed_in >= IN_PER_OUT {
            let k = ((owed_in / IN_PER_OUT) as usize).min(per_send);
            let buf = &ring.next_mut()[..k * OUT_DATAGRAM];
            if tx.send_segments(dest, buf, OUT_DATAGRAM).is_err() {
                break 'run;
            }
            counts.relayed_out.add(k as u64, buf.len() as u64);
            owed_in -= k as u64 * IN_PER_OUT;
        }
    }
    counts.relay_drops.fetch_add(drops.take(&rx), Relaxed);
}

/// Waits for the next batch (until `stop`), reads each datagram's header and adds the batch to
/// `count` in one go (threads share the counters). Returns its datagrams; None once stopped or
/// on a receive error.
fn next_batch(rx: &mut Receiver, count: &Count, stop: &AtomicBool) -> Option<u64> {
    while !stop.load(Relaxed) {
        match rx.recv(Duration::from_millis(10)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(_) => return None,
        }
        let (mut n, mut bytes) = (0u64, 0u64);
        for d in rx.datagrams() {
            std::hint::black_box(&d[..8]);
            n += 1;
            bytes += d.len() as u64;
        }
        count.add(n, bytes);
        return Some(n);
    }
    None
}

/// Receives output datagrams and reads each header.
fn sink(rx: UdpSocket, counts: &Counts, stop: &AtomicBool) {
    let cfg = RecvConfig {
        max_datagram: OUT_DATAGRAM,
        ..Default::default()
    };
    let mut drops = DropCounter::from_reading(rx.drops());
    let mut rx = Receiver::with_config(rx, cfg);
    while next_batch(&mut rx, &counts.sunk, stop).is_some() {}
    counts.sink_drops.fetch_add(drops.take(&rx), Relaxed);
}

/// One rate's figures over the measured window.
struct Row {
    rate: f64,
    offered: f64,
    sent: f64,
    relayed_in: f64,
    relayed_out: f64,
    sunk: f64,
    loss_in: f64,
    loss_out: f64,
    /// Socket drops at the relays and the sinks over the whole run.
    drops: [u64; 2],
    busy: f64,
    steal: f64,
    /// Cores used by each of [`STAGES`].
    stages: [f64; 3],
    late: u64,
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name(name.to_string()).spawn(f)
}

fn run_rate(
    rate: f64,
    lanes: usize,
    secs: f64,
    buffer: usize,
    [input_ring, output_ring]: [usize; 2],
) -> io::Result<Row> {
    let sockets: Vec<Lane> = (0..lanes)
        .map(|_| open_lane(buffer))
        .collect::<io::Result<_>>()?;
    let counts = Arc::new(Counts::default());
    let [stop_send, stop_relay, stop_sink] = [(); 3].map(|_| Arc::new(AtomicBool::new(false)));
    // Both polarisations' input datagrams, shared out over the lanes.
    let per_lane = 2.0 * rate / IN_SAMPLES as f64 / lanes as f64;
    let mut handles = Vec::new();
    let bursts = [IN_DATAGRAM, OUT_DATAGRAM].map(|d| MAX_UDP_PAYLOAD / d * d);
    for lane in sockets {
        let input = Ring::new(bursts[0], input_ring, 0x5a);
        let output = Ring::new(bursts[1], output_ring, 0xa5);
        let (c, s) = (counts.clone(), stop_sink.clone());
        handles.push(spawn("sink", move || sink(lane.sink_rx, &c, &s))?);
        let (c, s) = (counts.clone(), stop_relay.clone());
        let (rx, tx, to) = (lane.relay_rx, lane.relay_tx, lane.sink_addr);
        handles.push(spawn("relay", move || relay(rx, tx, to, output, &c, &s))?);
        let (c, s) = (counts.clone(), stop_send.clone());
        let (tx, to) = (lane.tx, lane.relay_addr);
        handles.push(spawn("digitiser", move || {
            digitiser(tx, to, per_lane, input, &c, &s)
        })?);
    }
    thread::sleep(WARMUP);
    let snap = |c: &Counts| {
        [
            c.sent.read(),
            c.relayed_in.read(),
            c.relayed_out.read(),
            c.sunk.read(),
        ]
    };
    let (a, ja, sa, ta) = (
        snap(&counts),
        host_jiffies(),
        stage_jiffies(),
        Instant::now(),
    );
    let late0 = counts.late_sends.load(Relaxed);
    thread::sleep(Duration::from_secs_f64(secs));
    let (b, jb, sb) = (snap(&counts), host_jiffies(), stage_jiffies());
    let t = ta.elapsed().as_secs_f64();
    let late = counts.late_sends.load(Relaxed) - late0;
    // Stop stage by stage, each after the one before has drained, so that losses are counted
    // over the whole run from totals (a window's edges would count datagrams in flight).
    for stop in [&stop_send, &stop_relay, &stop_sink] {
        stop.store(true, Relaxed);
        thread::sleep(Duration::from_millis(200));
    }
    for h in handles {
        h.join()
            .map_err(|_| io::Error::other("a thread panicked"))?;
    }
    let end = snap(&counts);
    let d = |i: usize| (b[i].1 - a[i].1) as f64 / t / 1e9;
    let loss = |i: usize| {
        let (sent, got) = (end[i].0, end[i + 1].0);
        100.0 * sent.saturating_sub(got) as f64 / sent.max(1) as f64
    };
    let ticks = clock_ticks() * t;
    Ok(Row {
        rate,
        offered: 2.0 * rate / IN_SAMPLES as f64 * IN_DATAGRAM as f64 / 1e9,
        sent: d(0),
        relayed_in: d(1),
        relayed_out: d(2),
        sunk: d(3),
        loss_in: loss(0),
        loss_out: loss(2),
        drops: [
            counts.relay_drops.load(Relaxed),
            counts.sink_drops.load(Relaxed),
        ],
        busy: (jb.0 - ja.0) as f64 / ticks,
        steal: (jb.1 - ja.1) as f64 / ticks,
        stages: [0, 1, 2].map(|i| sb[i].saturating_sub(sa[i]) as f64 / ticks),
        late,
    })
}

fn main() {
    let rates: Vec<f64> = env("SPEAD_CHAIN_RATES", "2,3,4,5,6,6.3,7,8".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r > 0.0)
        .map(|r| r * 1e9)
        .collect();
    let lanes: usize = env("SPEAD_CHAIN_LANES", 8usize).clamp(1, 64);
    let secs: f64 = env("SPEAD_CHAIN_SECS", 3.0f64).clamp(0.5, 600.0);
    let buffer: usize = env("SPEAD_CHAIN_BUFFER", 64usize << 20);
    let input_mib: usize = env("SPEAD_CHAIN_INPUT_MIB", 80);
    let output_mib: usize = env("SPEAD_CHAIN_OUTPUT_MIB", 256);
    let sources = [input_mib, output_mib].map(|m| (m << 20) / lanes);
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "spead chain on loopback: {lanes} digitiser, {lanes} relay and {lanes} sink threads, \
         {secs} s per rate after 1 s warm-up, {cpus} CPUs; sent from rings of {input_mib} MiB \
         (input) and {output_mib} MiB (output) in all"
    );
    println!(
        "input {IN_DATAGRAM} B per {IN_SAMPLES} samples, output {OUT_DATAGRAM} B per {IN_PER_OUT} \
         input datagrams; GB = 1e9 bytes; loss: datagrams sent but not received; sock drops: \
         super-packets the kernel dropped at full relay/sink sockets"
    );
    println!(
        "{:>8} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "Gsps/pol",
        "offer GB/s",
        "sent",
        "relay in",
        "relay out",
        "sink",
        "loss in%",
        "loss out%",
        "sock drops",
        "host busy",
        "steal",
        "digitiser",
        "relay",
        "sink",
        "late",
        "held"
    );
    let mut best: Option<f64> = None;
    for &rate in &rates {
        match run_rate(rate, lanes, secs, buffer, sources) {
            Ok(r) => {
                let held = r.loss_in == 0.0 && r.loss_out == 0.0 && r.sent >= 0.99 * r.offered;
                if held {
                    best = Some(best.map_or(rate, |c| c.max(rate)));
                }
                println!(
                    "{:>8.2} {:>9.2} {:>8.2} {:>9.2} {:>9.2} {:>8.2} {:>8.3} {:>9.3} {:>11} {:>7.1}/{cpus:<2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9} {:>6}",
                    r.rate / 1e9,
                    r.offered,
                    r.sent,
                    r.relayed_in,
                    r.relayed_out,
                    r.sunk,
                    r.loss_in,
                    r.loss_out,
                    format!("{}/{}", r.drops[0], r.drops[1]),
                    r.busy,
                    r.steal,
                    r.stages[0],
                    r.stages[1],
                    r.stages[2],
                    r.late,
                    if held { "yes" } else { "no" }
                );
            }
            Err(e) => println!("{:>8.2}  failed: {e}", rate / 1e9),
        }
    }
    match best {
        Some(c) => println!(
            "highest rate held: {:.2} Gsample/s per polarisation",
            c / 1e9
        ),
        None => println!("highest rate held: none of the rates was held"),
    }
}

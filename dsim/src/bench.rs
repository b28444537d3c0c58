//! `dsim bench`: dsim sends both polarisations into a loopback sink in the same process
//! (one GRO receive thread per destination address, counting heaps, bytes and gaps) and the
//! sent and received rates are printed side by side.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use spead::items;
use spead::packet::{Limits, Packet};
use spead::transport::{Endpoint, Receiver, SocketConfig, UdpSocket};

use crate::config::{self, Config, SignalSpec, Tone};
use crate::Dsim;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Sample rates to try, per polarisation, in samples/s, comma-separated; 'max' sends
    /// unpaced (as fast as the threads can).
    #[arg(
        long,
        value_name = "SAMPLES_PER_S[,...]|max",
        default_value = "6.3e9",
        value_delimiter = ','
    )]
    pub rate: Vec<String>,

    /// Seconds measured per rate (after a 1 s warm-up).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub seconds: f64,

    /// Send threads per polarisation; 0 picks from the rate as the main command does.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,

    /// Destination addresses per polarisation (127.0.P.1 upwards), one receive thread each.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub groups: u32,

    /// Samples per heap.
    #[arg(long, value_name = "SAMPLES", default_value_t = config::DEFAULT_HEAP_SAMPLES)]
    pub heap_samples: usize,

    /// Bits per sample.
    #[arg(long, value_name = "BITS", default_value_t = config::DEFAULT_SAMPLE_BITS)]
    pub sample_bits: u32,

    /// Heaps in the signal buffer (smaller than the default to start quickly).
    #[arg(long, value_name = "HEAPS", default_value_t = 2048)]
    pub buffer_heaps: usize,

    /// Socket buffer size in bytes for senders and receivers (capped by `net.core.rmem_max` and `wmem_max`).
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20)]
    pub socket_buffer: usize,

    /// Print one JSON object per rate instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What one receive thread has seen; written by it alone, read by the bench at any time.
#[derive(Debug, Default)]
#[repr(align(128))]
struct SinkCounter {
    datagrams: AtomicU64,
    bytes: AtomicU64,
    /// Datagrams that are not digitiser heaps.
    rejected: AtomicU64,
}

fn sink(mut rx: Receiver, stop: Arc<AtomicBool>, counter: Arc<SinkCounter>) {
    let limits = Limits {
        max_packet: 65_536,
        max_heap: 1 << 20,
    };
    while !stop.load(Ordering::Relaxed) {
        match rx.recv(Duration::from_millis(50)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "sink receive failed");
                break;
            }
        }
        let (mut n, mut bytes, mut bad) = (0, 0, 0);
        for d in rx.datagrams() {
            let ok = Packet::decode(d, &limits)
                .ok()
                .and_then(|p| p.immediate(items::TIMESTAMP))
                .is_some();
            if ok {
                n += 1;
                bytes += d.len() as u64;
            } else {
                bad += 1;
            }
        }
        counter.datagrams.fetch_add(n, Ordering::Relaxed);
        counter.bytes.fetch_add(bytes, Ordering::Relaxed);
        counter.rejected.fetch_add(bad, Ordering::Relaxed);
    }
}

/// Both sides at one instant: latest timestamp sent and datagrams and bytes received, per
/// polarisation.
struct Snapshot {
    at: Instant,
    timestamp: [u64; 2],
    received: [u64; 2],
    bytes: [u64; 2],
    late_s: Option<f64>,
}

fn snapshot(dsim: &crate::DsimHandle, sinks: &[(usize, Arc<SinkCounter>)]) -> Snapshot {
    let s = dsim.status();
    let mut received = [0; 2];
    let mut bytes = [0; 2];
    for (p, c) in sinks {
        received[*p] += c.datagrams.load(Ordering::Relaxed);
        bytes[*p] += c.bytes.load(Ordering::Relaxed);
    }
    Snapshot {
        at: Instant::now(),
        timestamp: [0, 1].map(|p| s.pols[p].timestamp.unwrap_or(0)),
        received,
        bytes,
        late_s: s.late_s,
    }
}

/// Results of one rate, measured between two snapshots after a warm-up.
#[derive(Debug, Serialize)]
pub struct BenchResult {
    pub requested_rate: Option<f64>,
    /// Length of the measured interval.
    pub seconds: f64,
    pub threads_per_pol: usize,
    pub receive_threads: usize,
    /// Per polarisation, samples/s over the interval: sent (timestamps dsim advanced through)
    /// and received (heaps the sink counted, times samples per heap).
    pub sent_rate: [f64; 2],
    pub received_rate: [f64; 2],
    /// Whole run: heaps dsim sent, heaps the sink received, and the difference.
    pub heaps_sent: [u64; 2],
    pub heaps_received: [u64; 2],
    pub lost: [i64; 2],
    pub rejected: u64,
    pub sent_gbytes_per_s: f64,
    pub received_gbytes_per_s: f64,
    pub send_errors: u64,
    /// How late dsim was at the end of the interval (positive: behind schedule).
    pub late_s: Option<f64>,
    /// dsim's own status at the end: achieved rate error over its last 10 s (start-up included
    /// when the run is shorter).
    pub dsim_rate_error: Option<f64>,
    pub dsim_rate_window_s: f64,
    /// Kept the requested pace within 0.1% through the interval, ended it less than 1 ms
    /// behind, and lost nothing.
    pub sustained: bool,
}

/// Time to settle before measuring.
const WARMUP: Duration = Duration::from_secs(1);

pub fn run(args: &BenchArgs) -> anyhow::Result<Vec<BenchResult>> {
    let mut results = Vec::new();
    for (i, r) in args.rate.iter().enumerate() {
        let rate = match r.trim() {
            "max" => None,
            s => Some(s.parse::<f64>().map_err(|_| {
                anyhow::anyhow!("--rate '{s}' is not a number of samples/s or 'max'.")
            })?),
        };
        let res = run_one(args, rate, i)?;
        print(&res, args.json, results.is_empty());
        results.push(res);
    }
    Ok(results)
}

fn run_one(args: &BenchArgs, rate: Option<f64>, run: usize) -> anyhow::Result<BenchResult> {
    anyhow::ensure!(
        args.seconds > 0.0 && args.seconds.is_finite(),
        "--seconds must be positive."
    );
    anyhow::ensure!((1..=64).contains(&args.groups), "--groups must be 1 to 64.");
    let stop = Arc::new(AtomicBool::new(false));
    let rx_cfg = SocketConfig {
        buffer_bytes: args.socket_buffer,
        ..Default::default()
    };
    let mut endpoints = Vec::new();
    let mut sinks: Vec<(usize, Arc<SinkCounter>)> = Vec::new();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for pol in 0..2u8 {
        // 127.<run*2+pol+1>.0.x: fresh addresses per run, so stragglers of a run are not counted.
        let net = (run * 2 % 250) as u8 + pol + 1;
        let base = Ipv4Addr::new(127, net, 0, 1);
        let first = UdpSocket::bind(SocketAddrV4::new(base, 0), &rx_cfg)?;
        let port = first.local_addr()?.port();
        let mut sockets = vec![first];
        for g in 1..args.groups {
            let a = Ipv4Addr::from(u32::from(base) + g);
            sockets.push(UdpSocket::bind(SocketAddrV4::new(a, port), &rx_cfg)?);
        }
        endpoints.push(format!("{base}+{}:{port}", args.groups - 1).parse::<Endpoint>()?);
        for s in sockets {
            let counter = Arc::new(SinkCounter::default());
            sinks.push((pol as usize, counter.clone()));
            let stop = stop.clone();
            let rx = Receiver::new(s, 32);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sink-p{pol}"))
                    .spawn(move || sink(rx, stop, counter))?,
            );
        }
    }
    let mut cfg = Config::new(endpoints[0].clone(), endpoints[1].clone());
    // Unpaced: a rate far above what any host sends, stopped by time rather than heap count.
    cfg.rate = rate.unwrap_or(config::MAX_RATE);
    cfg.heap_samples = args.heap_samples;
    cfg.sample_bits = args.sample_bits;
    cfg.buffer_heaps = args.buffer_heaps;
    cfg.threads = args.threads;
    cfg.socket_buffer = args.socket_buffer;
    cfg.signal = SignalSpec {
        tones: vec![Tone {
            frequency: cfg.rate / 8.0,
            amplitude: 0.3,
        }],
        ..Default::default()
    };
    let dsim = Dsim::start(cfg)?;
    if run == 0 && !args.json {
        let s = dsim.status();
        println!(
            "dsim bench: {} cores; {}-sample heaps of {} bits ({} B packets); {} send threads and {} destinations (one receive thread each) per polarisation; {} s measured after {} s warm-up; rates in Gsample/s per polarisation",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            args.heap_samples,
            args.sample_bits,
            config::packet_bytes(args.heap_samples, args.sample_bits),
            s.threads_per_pol,
            args.groups,
            args.seconds,
            WARMUP.as_secs_f64(),
        );
    }
    std::thread::sleep(WARMUP);
    let a = snapshot(&dsim, &sinks);
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let b = snapshot(&dsim, &sinks);
    let running = dsim.status();
    let status = dsim.stop();
    // Let the sinks drain what is still queued in their sockets.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a sink thread panicked"))?;
    }

    let dt = (b.at - a.at).as_secs_f64();
    let hs = args.heap_samples as f64;
    let sent_rate = [0, 1].map(|p| b.timestamp[p].saturating_sub(a.timestamp[p]) as f64 / dt);
    let received_rate = [0, 1].map(|p| (b.received[p] - a.received[p]) as f64 * hs / dt);
    let mut heaps_received = [0; 2];
    let mut rejected = 0;
    for (p, c) in &sinks {
        heaps_received[*p] += c.datagrams.load(Ordering::Relaxed);
        rejected += c.rejected.load(Ordering::Relaxed);
    }
    let heaps_sent = [0, 1].map(|p| status.pols[p].heaps_sent);
    let lost = [0, 1].map(|p| heaps_sent[p] as i64 - heaps_received[p] as i64);
    let packet = config::packet_bytes(args.heap_samples, args.sample_bits) as f64;
    let late_s = b.late_s;
    let sustained = rate.is_some_and(|r| sent_rate.iter().all(|s| (s / r - 1.0).abs() < 1e-3))
        && late_s.is_some_and(|l| l < 1e-3)
        && lost == [0, 0];
    Ok(BenchResult {
        requested_rate: rate,
        seconds: dt,
        threads_per_pol: status.threads_per_pol,
        receive_threads: sinks.len(),
        sent_rate,
        received_rate,
        heaps_sent,
        heaps_received,
        lost,
        rejected,
        sent_gbytes_per_s: sent_rate.iter().sum::<f64>() / hs * packet / 1e9,
        received_gbytes_per_s: (0..2)
            .map(|p| (b.bytes[p] - a.bytes[p]) as f64)
            .sum::<f64>()
            / dt
            / 1e9,
        send_errors: status.pols.iter().map(|p| p.send_errors).sum(),
        late_s,
        dsim_rate_error: running.rate_error,
        dsim_rate_window_s: running.rate_window_s,
        sustained,
    })
}

fn print(r: &BenchResult, json: bool, header: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    if header {
        println!(
            "{:>10} {:>5} {:>5} | {:>15} {:>15} | {:>15} {:>15} | {:>9} {:>9} | {:>7} {:>7} | {:>8} | sustained",
            "request", "tx/p", "rx", "sent p0 Gs/s", "sent p1 Gs/s", "recv p0 Gs/s", "recv p1 Gs/s",
            "lost p0", "lost p1", "tx GB/s", "rx GB/s", "late ms"
        );
    }
    let g = 1e-9;
    println!(
        "{:>10} {:>5} {:>5} | {:>15.3} {:>15.3} | {:>15.3} {:>15.3} | {:>9} {:>9} | {:>7.2} {:>7.2} | {:>8.3} | {}",
        r.requested_rate.map_or("max".into(), |x| format!("{:.3}", x * 1e-9)),
        r.threads_per_pol,
        r.receive_threads,
        r.sent_rate[0] * g,
        r.sent_rate[1] * g,
        r.received_rate[0] * g,
        r.received_rate[1] * g,
        r.lost[0],
        r.lost[1],
        r.sent_gbytes_per_s,
        r.received_gbytes_per_s,
        r.late_s.unwrap_or(0.0) * 1e3,
        if r.sustained { "yes" } else { "no" },
    );
}

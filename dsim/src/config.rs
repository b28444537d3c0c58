//! What a dsim run is asked to do, shared by the command line, the HTTP API and in-process users,
//! with the checks that turn a bad value into a sentence saying what is wrong.

use std::net::{Ipv4Addr, SocketAddr};

use spead::packet::PACKET_HEADER_BYTES;
use spead::transport::{Endpoint, MAX_UDP_PAYLOAD};

use crate::spec::Signal;

pub use crate::spec::{
    ApplyUpdate, PolSignal, PolsRequest, SignalRules, SignalSpec, SignalUpdate, SignalsRequest,
    Tone, MAX_DELAY_SAMPLES, MAX_TONES,
};

/// A request or configuration that cannot be honoured; the text is one sentence for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

impl BadRequest {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// Why a control request was refused: the request is wrong (HTTP 422), or it cannot apply now
/// (HTTP 409, e.g. the run has ended).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
}

impl From<BadRequest> for RequestError {
    fn from(e: BadRequest) -> Self {
        Self::Invalid(e.0)
    }
}

/// Fails with `msg` unless `ok`.
pub(crate) fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<(), BadRequest> {
    if ok {
        Ok(())
    } else {
        Err(BadRequest(msg()))
    }
}

/// Everything a run needs. [`Config::validate`] is called by `Dsim::start`.
#[derive(Clone, Debug)]
pub struct Config {
    /// Destinations of polarisation 0 and 1; heap k goes to group k mod (number of groups).
    pub dests: [Endpoint; 2],
    /// ADC samples per second per polarisation.
    pub rate: f64,
    /// Unix time (s) of timestamp 0; `None`: the moment sending starts.
    pub sync_time: Option<f64>,
    pub heap_samples: usize,
    pub sample_bits: u32,
    /// The signal in the common form (today's flags): tones common to both polarisations, noise
    /// independent per polarisation.
    pub signal: SignalSpec,
    /// The per-polarisation form (`--signal`), applied over `signal` at start: each polarisation
    /// it gives replaces what `signal` describes for it.
    pub signal_pols: Option<PolsRequest>,
    /// A spec in katgpucbf's signal language (`--signals`) to start with, in place of the other
    /// forms.
    pub signals: Option<SignalsRequest>,
    /// Heaps in the repeating signal buffer (rounded up to whole send batches per thread).
    pub buffer_heaps: usize,
    /// Sender threads per polarisation; 0 picks from the rate.
    pub threads: usize,
    /// Local interface address for multicast.
    pub interface: Option<Ipv4Addr>,
    pub ttl: u32,
    /// Digitiser (antenna) index; the digitiser id item is `index * 2 + pol`.
    pub digitiser_id: u64,
    /// Stop after this many heaps per polarisation.
    pub heaps: Option<u64>,
    /// Stop after this many seconds of signal at the starting rate.
    pub duration: Option<f64>,
    /// Address for the HTTP control server (port 0: any free port).
    pub control: Option<SocketAddr>,
    /// The bearer token that changes over HTTP need, if any.
    pub control_token: Option<fgpu_serve::Token>,
    /// Send a SPEAD stream-stop heap to every destination when the run ends.
    pub send_stop: bool,
    /// Socket send buffer in bytes.
    pub socket_buffer: usize,
    /// Faults injected from the first heap (PUT /faults changes them later).
    pub faults: crate::faults::FaultsRequest,
    /// Seconds a send thread may fall behind its schedule and still catch up; beyond that the
    /// senders skip ahead to the present, as a digitiser keeps to its clock (see `sender`).
    pub max_late: f64,
    /// After a stall, late heaps leave at this multiple of the rate until back on schedule
    /// (see `catchup`).
    pub catch_up_rate: f64,
    /// Where the send threads and the rest of the process run.
    pub placement: crate::placement::PlacementRequest,
}

impl Config {
    /// A configuration with the documented defaults, sending to the given destinations.
    pub fn new(pol0: Endpoint, pol1: Endpoint) -> Self {
        Self {
            dests: [pol0, pol1],
            rate: DEFAULT_RATE,
            sync_time: None,
            heap_samples: DEFAULT_HEAP_SAMPLES,
            sample_bits: DEFAULT_SAMPLE_BITS,
            signal: SignalSpec::default(),
            signal_pols: None,
            signals: None,
            buffer_heaps: DEFAULT_BUFFER_HEAPS,
            threads: 0,
            interface: None,
            ttl: 4,
            digitiser_id: 0,
            heaps: None,
            duration: None,
            control: None,
            control_token: None,
            send_stop: false,
            socket_buffer: 16 << 20,
            faults: Default::default(),
            max_late: DEFAULT_MAX_LATE,
            catch_up_rate: DEFAULT_CATCH_UP_RATE,
            placement: Default::default(),
        }
    }

    pub fn validate(&self) -> Result<(), BadRequest> {
        validate_rate(self.rate)?;
        spead::samples::check_bits(self.sample_bits).map_err(|e| BadRequest(format!("{e}.")))?;
        ensure(
            self.heap_samples >= 8 && self.heap_samples.is_multiple_of(8),
            || {
                format!(
                    "heap-samples {} must be a positive multiple of 8 (so that heaps start on a byte).",
                    self.heap_samples
                )
            },
        )?;
        let packet = packet_bytes(self.heap_samples, self.sample_bits);
        ensure(packet <= MAX_UDP_PAYLOAD, || {
            format!(
                "a heap of {} {}-bit samples makes a {packet}-byte packet, more than the {MAX_UDP_PAYLOAD} bytes a UDP datagram can carry.",
                self.heap_samples, self.sample_bits
            )
        })?;
        ensure(self.buffer_heaps >= 1, || {
            "buffer-heaps must be at least 1.".into()
        })?;
        ensure(self.threads <= 64, || {
            format!("{} threads per polarisation is more than 64.", self.threads)
        })?;
        for (p, d) in self.dests.iter().enumerate() {
            ensure(!d.addrs.is_empty() && d.addrs.len() <= 256, || {
                format!(
                    "polarisation {p} has {} destinations; give 1 to 256 (ADDR+N:PORT).",
                    d.addrs.len()
                )
            })?;
            ensure(d.addrs.iter().all(|a| a.port() != 0), || {
                format!("polarisation {p} destination {d} has port 0; give the receiver's port.")
            })?;
        }
        if let Some(t) = self.sync_time {
            ensure(t.is_finite() && t >= 0.0, || {
                format!("sync time {t} is not a Unix time in seconds.")
            })?;
        }
        if let Some(d) = self.duration {
            ensure(d.is_finite() && d > 0.0, || {
                format!("duration {d} s is not a positive number of seconds.")
            })?;
        }
        ensure(
            self.max_late.is_finite() && (1e-3..=3600.0).contains(&self.max_late),
            || {
                format!(
                    "max-late {} s is not between 0.001 and 3600 seconds.",
                    self.max_late
                )
            },
        )?;
        ensure(
            self.catch_up_rate.is_finite()
                && self.catch_up_rate > 1.0
                && self.catch_up_rate <= 100.0,
            || {
                format!(
                    "catch-up-rate {} is not a factor above 1 and at most 100 (a backlog sent at the rate or slower is never made up).",
                    self.catch_up_rate
                )
            },
        )?;
        ensure(self.heaps != Some(0), || {
            "heaps 0 would send nothing; give 1 or more.".into()
        })?;
        crate::faults::FaultRules::validate(&self.faults)?;
        self.signal.validate(self.rate)?;
        match &self.signal_pols {
            Some(p) => p.validate(self.rate),
            None => Ok(()),
        }
    }

    /// The signal to start with: the common form, with the per-polarisation form over it.
    pub fn start_signal(&self) -> Signal {
        let common = Signal::from_common(&self.signal);
        match &self.signal_pols {
            Some(p) => common.with(p),
            None => common,
        }
    }
}

pub fn validate_rate(rate: f64) -> Result<(), BadRequest> {
    ensure((1.0..=MAX_RATE).contains(&rate), || {
        format!("rate {rate} samples/s is outside 1 to {MAX_RATE:e} samples/s.")
    })
}

/// MeerKAT L-band ADC rate.
pub const DEFAULT_RATE: f64 = 1712e6;
pub const DEFAULT_HEAP_SAMPLES: usize = 4096;
pub const DEFAULT_SAMPLE_BITS: u32 = 10;
pub const DEFAULT_BUFFER_HEAPS: usize = 8192;
/// How far (s) a send thread may fall behind and still catch up before the senders skip ahead.
/// Within the engine's receive window (about 0.5 s): when its input goes quiet the engine moves
/// its window on by its own clock, so heaps later than that are rejected there as too old
/// however they are paced (a 0.8 s stall made up at 1.1x lost 1295 heaps per polarisation so on
/// the CPU demo's settings; 0.4 s stalls lost none). Past the bound dsim skips, a loss it
/// reports as its own rather than one the harness would blame on the engine.
pub const DEFAULT_MAX_LATE: f64 = 0.4;
/// The catch-up pace, a multiple of the rate: the engine's own catch-up pace, its default
/// --send-rate-factor. Input faster than that queues in the engine, whose spare chunk buffers
/// hold 250 ms of input, so at 2x a stall over about 0.28 s can run them out (dsim/README.md has
/// the runs). A stall of L seconds takes 10 L to make up.
pub const DEFAULT_CATCH_UP_RATE: f64 = 1.1;
/// Far above anything a host can send; keeps heap arithmetic well inside f64 and u64.
pub const MAX_RATE: f64 = 1e12;

/// Bytes of one digitiser packet (one heap).
pub fn packet_bytes(heap_samples: usize, bits: u32) -> usize {
    PACKET_HEADER_BYTES + spead::samples::packed_len(heap_samples, bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::new(
            "127.0.0.1:7148".parse().unwrap(),
            "127.0.0.1:7149".parse().unwrap(),
        )
    }

    #[test]
    fn defaults_are_valid() {
        config().validate().unwrap();
    }

    #[test]
    fn bad_values_are_sentences() {
        type Change = Box<dyn Fn(&mut Config)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|c| c.rate = -1.0), "rate -1"),
            (Box::new(|c| c.sample_bits = 17), "17 bits"),
            (Box::new(|c| c.heap_samples = 100), "multiple of 8"),
            (Box::new(|c| c.heap_samples = 65536), "UDP datagram"),
            (
                Box::new(|c| {
                    c.signal.tones = vec![Tone {
                        frequency: 1e10,
                        amplitude: 0.1,
                    }]
                }),
                "tone 0 has frequency",
            ),
            (Box::new(|c| c.signal.noise = f64::NAN), "noise NaN"),
            (
                Box::new(|c| c.signal.delays[1] = f64::INFINITY),
                "polarisation 1",
            ),
            (Box::new(|c| c.heaps = Some(0)), "heaps 0"),
            (Box::new(|c| c.catch_up_rate = 1.0), "catch-up-rate 1 "),
            (
                Box::new(|c| c.catch_up_rate = f64::NAN),
                "catch-up-rate NaN",
            ),
            (Box::new(|c| c.max_late = 0.0), "max-late 0 s"),
        ];
        for (change, expect) in cases {
            let mut c = config();
            change(&mut c);
            let e = c.validate().unwrap_err().0;
            assert!(e.contains(expect), "{e:?} should mention {expect:?}");
            assert!(e.ends_with('.'), "{e:?} is not a sentence");
        }
    }

    #[test]
    fn update_keeps_what_is_left_out() {
        let cur = SignalSpec {
            noise: 0.1,
            ..Default::default()
        };
        let u: SignalUpdate = serde_json::from_str(r#"{"delays":[1.5,0]}"#).unwrap();
        let s = u.apply_to(&cur);
        assert_eq!((s.noise, s.delays), (0.1, [1.5, 0.0]));
        assert!(serde_json::from_str::<SignalUpdate>(r#"{"nosie":1}"#).is_err());
    }
}

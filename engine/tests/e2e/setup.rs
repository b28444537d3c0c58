//! A run's configuration (sizes follow the build profile and the backend), what follows from it,
//! and the lock that makes the tests take turns.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use harness::gaps::outputs_hit;

/// One test at a time: each runs two busy processes on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Waits for this test's turn; the turn ends when the guard drops (a failed test passes it on).
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The configuration of a run.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    pub channels: usize,
    pub taps: usize,
    pub spectra_per_heap: usize,
    pub heaps_per_frame: usize,
    pub heap_samples: usize,
    pub rate: f64,
    pub sample_bits: u32,
    pub backend: String,
    /// Source addresses per polarisation (127.0.0.1+N-1, one port) and engine receive threads.
    pub addresses: usize,
    pub recv_threads: usize,
}

impl Setup {
    pub(crate) fn new() -> Self {
        let backend = std::env::var("FENGINE_TEST_BACKEND").unwrap_or_else(|_| "cpu".into());
        if cfg!(debug_assertions) && backend != "cuda" {
            Self {
                channels: 256,
                taps: 4,
                spectra_per_heap: 16,
                heaps_per_frame: 2,
                heap_samples: 1024,
                rate: 0.25e6,
                sample_bits: 10,
                backend,
                addresses: 1,
                recv_threads: 1,
            }
        } else {
            Self {
                channels: 1024,
                taps: 4,
                spectra_per_heap: 64,
                heaps_per_frame: 4,
                heap_samples: 4096,
                rate: 32e6,
                sample_bits: 10,
                backend,
                addresses: 1,
                recv_threads: 1,
            }
        }
    }

    /// The same with each polarisation spread over four loopback addresses and received by two
    /// threads (two sockets each). Chunks of at least 128 heaps: dsim sends each address a run
    /// of up to 50 small heaps in one GSO send, and a thread with two addresses must find both
    /// runs inside its window of 3 chunks.
    pub(crate) fn with_lanes() -> Self {
        let base = Self::new();
        Self {
            addresses: 4,
            recv_threads: 2,
            heaps_per_frame: base.heaps_per_frame.max(16),
            ..base
        }
    }

    /// Timestamp difference between consecutive spectra (2n).
    pub(crate) fn step(&self) -> u64 {
        2 * self.channels as u64
    }

    /// Timestamp difference between consecutive output heaps.
    pub(crate) fn heap_step(&self) -> u64 {
        self.spectra_per_heap as u64 * self.step()
    }

    /// Input samples one output heap depends on (zero delay): its spectra's windows, back to
    /// back, as the harness's oracle counts them.
    pub(crate) fn heap_span(&self) -> u64 {
        harness::gaps::engine_heap_span(
            self.channels as u64,
            self.spectra_per_heap as u64,
            self.taps as u64,
        )
    }

    /// Output heaps (timestamps on the grid that starts at `base`) in [lo, hi], and those of
    /// them that need a heap of `lost` (digitiser heap indices) as the harness's oracle counts
    /// them: the test bed's own rule, independent of the engine under test.
    pub(crate) fn predicted_output(
        &self,
        base: u64,
        lo: u64,
        hi: u64,
        lost: &[u64],
    ) -> (BTreeSet<u64>, BTreeSet<u64>) {
        let (hs, step) = (self.heap_samples as u64, self.heap_step());
        // The grid starts at the first heap seen: nothing before `base` is an output heap here.
        let first = base + lo.saturating_sub(base).div_ceil(step) * step;
        let all: BTreeSet<u64> = (0..)
            .map(|j| first + j * step)
            .take_while(|&t| t <= hi)
            .collect();
        let missing = lost
            .iter()
            .flat_map(|&k| outputs_hit(k * hs, (k + 1) * hs, base % step, step, self.heap_span()))
            .filter(|t| all.contains(t))
            .collect();
        (all, missing)
    }

    /// Centre frequency of channel k.
    pub(crate) fn channel_hz(&self, k: usize) -> f64 {
        k as f64 * self.rate / self.step() as f64
    }

    /// |X_k| for a real tone of `amplitude` (fraction of full scale) at channel k's centre.
    pub(crate) fn tone_response(&self, amplitude: f64) -> f64 {
        let w = fengine::signal::weights::default_weights(self.channels, self.taps).unwrap();
        let counts = amplitude * (1u64 << (self.sample_bits - 1)) as f64;
        counts / 2.0 * fengine::signal::weights::dc_gain(&w)
    }

    /// Stream time taken by `heaps` output heaps.
    pub(crate) fn seconds(&self, heaps: u64) -> Duration {
        Duration::from_secs_f64(heaps as f64 * self.heap_step() as f64 / self.rate)
    }

    /// Tones at channel centres, as dsim arguments.
    pub(crate) fn tone_args(&self, channels: &[usize], amplitude: f64) -> Vec<String> {
        channels
            .iter()
            .flat_map(|&k| {
                [
                    "--tone".to_string(),
                    format!("{}:{amplitude}", self.channel_hz(k)),
                ]
            })
            .collect()
    }
}

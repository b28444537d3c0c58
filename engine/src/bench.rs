//! Throughput of any backend on its own: random samples in, frames submitted and waited for in a
//! pipelined loop (up to `max_in_flight` frames outstanding), no network.

use std::fmt;
use std::time::Instant;

use crate::backend::{
    Backend, BackendError, Bins, Channelisation, Ddc, Frame, InputGeometry, OutputGeometry,
    OutputKind, Result, SpectrumDelay,
};
use crate::signal::no_discard::PassBand;

/// A narrowband output a benchmark computes beside the wideband one, `CHANNELS:D[:PASS]` on the
/// command line: n channels, decimation D, and for an output without discard (katgpucbf's VLBI
/// mode) its pass band as a fraction of the band fs/(2D) (katgpucbf's qualification: 64 of
/// 107 MHz, 0.598).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BenchNarrowband {
    pub channels: usize,
    pub decimation: usize,
    /// p in (0, 1) for an output without discard; None for the kind with discard.
    pub pass_fraction: Option<f64>,
}

impl BenchNarrowband {
    /// The kind of output it is, with its DDC.
    pub fn kind(&self) -> std::result::Result<OutputKind, String> {
        let bins = match self.pass_fraction {
            None => Bins::CentreHalf,
            Some(p) => Bins::All(PassBand::new(p, 1.0).map_err(|e| e.to_string())?),
        };
        Ok(OutputKind::Narrowband(Ddc::with_bins(
            self.decimation,
            bins,
        )))
    }

    /// "1024 ch / D 8", or "1024 ch / D 8 no discard, pass 0.598".
    pub fn label(&self) -> String {
        let (n, d) = (self.channels, self.decimation);
        match self.pass_fraction {
            None => format!("{n} ch / D {d}"),
            Some(p) => format!("{n} ch / D {d} no discard, pass {p}"),
        }
    }
}

impl std::str::FromStr for BenchNarrowband {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || {
            format!(
                "{s:?} is not CHANNELS:D or CHANNELS:D:PASS (D 8, 16 or 32; PASS, for an output \
                 without discard, the pass band's fraction of the band, D 8 only: for example \
                 32768:8 or 8192:8:0.598)"
            )
        };
        let mut parts = s.split(':');
        let (Some(n), Some(d)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let (Ok(channels), Ok(decimation)) = (n.parse(), d.parse()) else {
            return Err(bad());
        };
        let pass_fraction = match parts.next() {
            None => None,
            Some(p) => Some(p.parse::<f64>().map_err(|_| bad())?),
        };
        if parts.next().is_some() || !crate::signal::ddc::DECIMATIONS.contains(&decimation) {
            return Err(bad());
        }
        let spec = Self {
            channels,
            decimation,
            pass_fraction,
        };
        spec.kind().map_err(|e| format!("{s:?}: {e}"))?;
        if pass_fraction.is_some() {
            crate::signal::no_discard::check_decimation(decimation)
                .map_err(|e| format!("{s:?}: {e}"))?;
        }
        Ok(spec)
    }
}

/// The outcome of [`run`].
#[derive(Clone, Debug)]
pub struct BenchResult {
    pub backend: &'static str,
    /// The first output's view of the input (the one every backend has today).
    pub geometry: Channelisation,
    /// Frames timed (after the warm-up).
    pub frames: usize,
    /// Wall-clock seconds for those frames.
    pub seconds: f64,
    /// CPU seconds the whole process used meanwhile (all threads), where the OS says: with
    /// `seconds` it shows how many cores the backend kept busy, and so whether other load on the
    /// host held it back.
    pub cpu_seconds: Option<f64>,
}

impl BenchResult {
    /// Mean seconds per frame.
    pub fn frame_time(&self) -> f64 {
        self.seconds / self.frames as f64
    }
    /// Input samples per second of each polarisation (both are processed), in millions: compare
    /// with the ADC rate (1712 Msample/s for MeerKAT L-band).
    pub fn msamples_per_s(&self) -> f64 {
        (self.frames * self.geometry.chunk_samples()) as f64 / self.seconds / 1e6
    }
}

impl fmt::Display for BenchResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        write!(
            f,
            "{}: {} channels, {} taps, {}-bit input, {}-bit output{}, {} spectra x {} heaps per \
             frame: {:.1} Msample/s per polarisation (dual-pol), {:.2} ms per frame ({} frames)",
            self.backend,
            g.output.channels,
            g.output.taps,
            g.input.sample_bits,
            g.output.bits,
            if g.output.dither.is_some() {
                " dithered"
            } else {
                ""
            },
            g.output.spectra_per_heap,
            g.heaps_per_frame(),
            self.msamples_per_s(),
            self.frame_time() * 1e3,
            self.frames
        )?;
        if let Some(cpu) = self.cpu_seconds {
            write!(f, ", {:.2} cores busy", cpu / self.seconds)?;
        }
        Ok(())
    }
}

/// CPU seconds (user + system) used so far by this process, all threads.
fn process_cpu_seconds() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the whole rusage it is pointed at when it returns 0.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// xorshift64*: random bytes without a dependency (any byte pattern is valid packed samples).
fn fill_random(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let v = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A frame of random samples with every output's windows at their undelayed places plus a fixed
/// fine delay and phase (so the rotation is exercised).
fn prepare(input: &InputGeometry, outputs: &[OutputGeometry], frame: &mut Frame, seed: &mut u64) {
    for chunk in &mut frame.input.chunk {
        fill_random(chunk, seed);
    }
    for (out, o) in frame.outputs.iter_mut().zip(outputs) {
        // The window less a step ((T-1) 2n for wideband), on the DDC's grid for narrowband.
        let lag = (o.window() - o.step()).next_multiple_of(o.decimation());
        let base = input.overlap_samples - lag;
        // A narrowband centre at a quarter of the sample rate: valid for every decimation.
        out.mixer = match o.kind {
            OutputKind::Wideband => 0,
            OutputKind::Narrowband(_) => 1 << 30,
        };
        for delays in &mut out.delays {
            for (m, d) in delays.iter_mut().enumerate() {
                *d = SpectrumDelay {
                    offset: (base + m * o.step()) as u32,
                    fine: 0.25,
                    phase: 0.5,
                };
            }
        }
    }
}

/// Times `frames` frames through `backend` after a warm-up, keeping up to `max_in_flight` frames
/// submitted at once.
pub fn run(backend: &mut dyn Backend, frames: usize) -> Result<BenchResult> {
    if frames == 0 {
        return Err(BackendError::Misuse(
            "a benchmark needs at least one frame".into(),
        ));
    }
    let (input, outputs) = (*backend.input(), backend.outputs().to_vec());
    let Some(&first) = outputs.first() else {
        return Err(BackendError::Misuse("a backend without outputs".into()));
    };
    let g = Channelisation::new(input, first);
    let depth = backend.max_in_flight().max(1);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut free = Vec::with_capacity(depth);
    for _ in 0..depth {
        let mut frame = backend.alloc_frame()?;
        prepare(&input, &outputs, &mut frame, &mut seed);
        free.push(frame);
    }
    let mut timestamp = 0u64;
    // Submits every free frame, then waits for one, until `count` frames are done.
    let mut pump = |backend: &mut dyn Backend, free: &mut Vec<Frame>, count: usize| -> Result<()> {
        let (mut submitted, mut done) = (0, 0);
        while done < count {
            while submitted < count {
                let Some(mut frame) = free.pop() else { break };
                frame.input.timestamp = timestamp;
                timestamp += g.chunk_samples() as u64;
                backend.submit(frame)?;
                submitted += 1;
            }
            let frame = backend
                .wait()?
                .ok_or_else(|| BackendError::Misuse("backend lost a submitted frame".into()))?;
            free.push(frame);
            done += 1;
        }
        Ok(())
    };
    pump(backend, &mut free, 2 * depth)?; // warm-up: caches, page faults, lazy initialisation
    let (start, cpu_start) = (Instant::now(), process_cpu_seconds());
    pump(backend, &mut free, frames)?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = cpu_start.zip(process_cpu_seconds()).map(|(a, b)| b - a);
    Ok(BenchResult {
        backend: backend.name(),
        geometry: g,
        frames,
        seconds,
        cpu_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu::CpuBackend, null::NullBackend, Synchronous};

    /// `CHANNELS:D` is the kind with discard, `CHANNELS:8:PASS` one without; anything else is
    /// one sentence naming the forms.
    #[test]
    fn bench_narrowband_outputs_parse_with_and_without_discard() {
        let with: BenchNarrowband = "32768:16".parse().unwrap();
        assert_eq!(
            (with.channels, with.decimation, with.pass_fraction),
            (32768, 16, None)
        );
        assert!(matches!(
            with.kind(),
            Ok(OutputKind::Narrowband(Ddc {
                bins: Bins::CentreHalf,
                ..
            }))
        ));
        let without: BenchNarrowband = "8192:8:0.598".parse().unwrap();
        assert_eq!(without.pass_fraction, Some(0.598));
        let Ok(OutputKind::Narrowband(d)) = without.kind() else {
            panic!("{without:?}");
        };
        assert_eq!((d.subsampling(), d.points(8192)), (16, 8192));
        assert_eq!(without.label(), "8192 ch / D 8 no discard, pass 0.598");
        for bad in [
            "8192",
            "8192:7",
            "8192:16:0.5",
            "8192:8:1.5",
            "8192:8:0.5:1",
            "x:8",
        ] {
            let e = bad.parse::<BenchNarrowband>().unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    fn geometry(
        channels: usize,
        taps: usize,
        s: usize,
        h: usize,
    ) -> (InputGeometry, [OutputGeometry; 1]) {
        let input = InputGeometry {
            sample_bits: 10,
            chunk_samples: s * h * 2 * channels,
            // Room for coarse delays of 2n either way beyond the taps.
            overlap_samples: (taps + 1) * 2 * channels,
        };
        let output = OutputGeometry {
            channels,
            taps,
            spectra_per_heap: s,
            bits: 8,
            filter: Default::default(),
            dither: None,
            kind: OutputKind::Wideband,
        };
        (input, [output])
    }

    #[test]
    fn runs_and_reports() {
        let (input, outputs) = geometry(64, 4, 4, 2);
        let mut b = Synchronous::new(NullBackend::new(input, &outputs).unwrap());
        let r = run(&mut b, 5).unwrap();
        assert_eq!(r.frames, 5);
        assert!(r.seconds > 0.0 && r.msamples_per_s() > 0.0);
        assert!(r.to_string().starts_with("null: 64 channels, 4 taps"));
        assert!(run(&mut b, 0).is_err());
        let mut c = Synchronous::new(CpuBackend::new(input, &outputs).unwrap());
        assert!(run(&mut c, 2).is_ok());
    }

    /// CPU throughput at MeerKAT-like sizes. Run with
    /// `cargo test -p fengine --release --lib bench::tests::cpu_throughput -- --ignored --nocapture`.
    #[test]
    #[ignore = "a benchmark: run in release"]
    fn cpu_throughput() {
        for (channels, s, h) in [(4096, 256, 8), (32768, 256, 1)] {
            let (input, outputs) = geometry(channels, 16, s, h);
            let mut b = Synchronous::new(CpuBackend::new(input, &outputs).unwrap());
            let r = run(&mut b, 10).unwrap();
            println!("{r}");
        }
    }
}

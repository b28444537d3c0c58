//! How the geometry shapes the device work: the per-frame parameter block, the kernels' launch
//! shapes, and the post-processing twiddle table.

use cudarc::driver::LaunchConfig;

use crate::backend::{BackendError, Channelisation, OutputKind, Result, POLS};

/// Where each per-frame parameter lives in a slot's parameter block (byte offsets, 256-aligned).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ParamLayout {
    /// u32 [pol][spectrum]: window offset in the span, in samples.
    pub offsets: usize,
    /// (f32 x 4) [pol][spectrum]: fine delay r (samples), dither key, cos p, sin p (phase p from f64).
    pub rotation: usize,
    /// A narrowband output's DDC taps times the mixer over them, for the frame's mixer word, in
    /// the DDC kernel's table (`kernels::Config::ddc_taps_table`; empty for wideband).
    pub ddc_taps: usize,
    /// (f32, f32) [pol][channel]: the complex gain, halved for wideband (the 1/2 of the real-FFT
    /// fix-up).
    pub gains: usize,
    /// Bytes up to the gains (what changes every frame).
    pub per_frame: usize,
    pub total: usize,
}

impl ParamLayout {
    pub(super) fn new(g: &Channelisation, cfg: &kernels::Config) -> Self {
        let align = |x: usize| x.div_ceil(256) * 256;
        let m = g.spectra_per_frame();
        let rotation = align(4 * POLS * m);
        let ddc_taps = rotation + align(16 * POLS * m);
        let taps = match g.output.kind {
            OutputKind::Wideband => 0,
            OutputKind::Narrowband(_) => cfg.ddc_taps_table_bytes(),
        };
        let gains = ddc_taps + align(taps);
        Self {
            offsets: 0,
            rotation,
            ddc_taps,
            gains,
            per_frame: gains,
            total: gains + 8 * POLS * g.output.channels,
        }
    }
}

/// Launch shapes derived once from the geometry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shapes {
    pub fir: LaunchConfig,
    pub fir_spectra_per_thread: u32,
    pub postproc: LaunchConfig,
}

impl Shapes {
    pub(super) fn new(g: &Channelisation, cfg: &kernels::Config) -> Result<Self> {
        let m = g.spectra_per_frame();
        let threads_per_spectrum_run = 2 * g.output.channels; // column pairs x pols
                                                              // Paper's heuristic: at least 8T spectra per thread (few redundant loads), unless that
                                                              // leaves fewer than 2^17 threads to fill the GPU.
                                                              // A multiple of the FIR batch, so that runs split into whole batches.
        let batch = cfg.tuning.fir_batch;
        let mut per_thread = (8 * g.output.taps).div_ceil(batch) * batch;
        while per_thread > 1 && threads_per_spectrum_run * m.div_ceil(per_thread) < (1 << 17) {
            per_thread /= 2;
        }
        let per_thread = per_thread.min(m).max(1);
        let block = cfg.fir_block();
        let fir = LaunchConfig {
            grid_dim: (
                (g.output.channels / block) as u32,
                m.div_ceil(per_thread) as u32,
                POLS as u32,
            ),
            block_dim: (block as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let pairs = g.output.channels / 8;
        let postproc = LaunchConfig {
            grid_dim: (
                pairs.div_ceil(kernels::POSTPROC_TILE) as u32,
                m.div_ceil(kernels::POSTPROC_TILE) as u32,
                1,
            ),
            block_dim: (
                kernels::POSTPROC_TILE as u32,
                cfg.tuning.postproc_rows as u32,
                1,
            ),
            shared_mem_bytes: 0,
        };
        // The narrowband kernels' grids are no taller: `nb_fir` runs of NB_FIR_RUN (64) spectra,
        // `nb_postproc` tiles of NB_POST_TILE (32), the post-processing's own.
        const _: () = assert!(
            kernels::NB_FIR_RUN >= kernels::POSTPROC_TILE
                && kernels::NB_POST_TILE >= kernels::POSTPROC_TILE
        );
        if fir.grid_dim.1 > 65535 || postproc.grid_dim.1 > 65535 {
            return Err(BackendError::Unsupported(format!(
                "{m} spectra per frame is too many for one launch: use smaller frames"
            )));
        }
        Ok(Self {
            fir,
            fir_spectra_per_thread: per_thread as u32,
            postproc,
        })
    }
}

/// The post-processing twiddles as float32 pairs, computed in float64: exp(-i pi k / n) for
/// k < n (real-FFT fix-up), then exp(-2 pi i j k1 / n) for j = 1..3, k1 < n/4 (unzipped FFT).
pub(crate) fn twiddle_table(n: usize) -> Vec<u8> {
    let a = n / kernels::UNZIP;
    let pi = std::f64::consts::PI;
    let fix = (0..n).map(|k| -pi * k as f64 / n as f64);
    let unzip = (1..4).flat_map(|j| (0..a).map(move |k1| -2.0 * pi * (j * k1) as f64 / n as f64));
    fix.chain(unzip)
        .flat_map(|x| {
            let (s, c) = x.sin_cos();
            [(c as f32).to_ne_bytes(), (s as f32).to_ne_bytes()]
        })
        .flatten()
        .collect()
}

/// W_n^t = exp(-2 pi i t / n) for t < n as float32 pairs, computed in float64: the two-pass
/// kernels' FFT twiddles (W_R, W_A and W_n^{i k2} are all its entries).
pub(crate) fn wn_table(n: usize) -> Vec<u8> {
    let pi = std::f64::consts::PI;
    (0..n)
        .flat_map(|t| {
            let (s, c) = (-2.0 * pi * t as f64 / n as f64).sin_cos();
            [(c as f32).to_ne_bytes(), (s as f32).to_ne_bytes()]
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{InputGeometry, OutputGeometry};

    fn pair(t: &[u8], i: usize) -> (f32, f32) {
        let f = |o: usize| f32::from_ne_bytes(t[o..o + 4].try_into().unwrap());
        (f(8 * i), f(8 * i + 4))
    }

    #[test]
    fn twiddles_are_where_postproc_reads_them() {
        let n = 64;
        let t = twiddle_table(n);
        assert_eq!(t.len(), 8 * (n + 3 * n / 4));
        let pi = std::f64::consts::PI;
        let close = |(c, s): (f32, f32), x: f64| {
            (c as f64 - x.cos()).abs() < 1e-7 && (s as f64 - x.sin()).abs() < 1e-7
        };
        for k in [0, 1, 17, n - 1] {
            assert!(close(pair(&t, k), -pi * k as f64 / n as f64), "fix-up {k}");
        }
        for (j, k1) in [(1, 0), (1, 5), (2, 7), (3, 15)] {
            let i = n + (j - 1) * n / 4 + k1;
            assert!(
                close(pair(&t, i), -2.0 * pi * (j * k1) as f64 / n as f64),
                "unzip {j} {k1}"
            );
        }
    }

    #[test]
    fn wn_is_the_n_th_roots_of_unity() {
        let n = 1024;
        let t = wn_table(n);
        assert_eq!(t.len(), 8 * n);
        let pi = std::f64::consts::PI;
        for i in [0, 1, 255, 256, 511, 777, n - 1] {
            let (c, s) = pair(&t, i);
            let x = -2.0 * pi * i as f64 / n as f64;
            assert!((c as f64 - x.cos()).abs() < 1e-7 && (s as f64 - x.sin()).abs() < 1e-7);
        }
    }

    #[test]
    fn shapes_split_runs_into_whole_batches_and_fit_the_grid() {
        let g = Channelisation::new(
            InputGeometry {
                sample_bits: 10,
                chunk_samples: 4 * 256 * 65536,
                overlap_samples: 15 * 65536,
            },
            OutputGeometry {
                channels: 32768,
                taps: 16,
                spectra_per_heap: 256,
                bits: 8,
                filter: Default::default(),
                dither: None,
                kind: OutputKind::Wideband,
            },
        );
        let cfg = kernels::Config {
            channels: g.output.channels,
            taps: g.output.taps,
            sample_bits: g.input.sample_bits,
            spectra_per_heap: g.output.spectra_per_heap,
            output_bits: g.output.bits,
            dither: false,
            decimation: 1,
            ddc_taps: 0,
            nb_points: 0,
            tuning: kernels::Tuning::default(),
        };
        let s = Shapes::new(&g, &cfg).unwrap();
        assert_eq!(s.fir_spectra_per_thread as usize % cfg.tuning.fir_batch, 0);
        assert_eq!(s.fir.grid_dim, (256, 1024 / s.fir_spectra_per_thread, 2));
        assert_eq!(s.postproc.grid_dim, (128, 32, 1));
        let huge = Channelisation::new(
            InputGeometry {
                chunk_samples: (1 << 22) * 32,
                overlap_samples: 0,
                ..g.input
            },
            OutputGeometry {
                channels: 16,
                spectra_per_heap: 1 << 22,
                taps: 1,
                ..g.output
            },
        );
        let cfg = kernels::Config {
            channels: 16,
            taps: 1,
            spectra_per_heap: 1 << 22,
            ..cfg
        };
        assert!(matches!(
            Shapes::new(&huge, &cfg),
            Err(BackendError::Unsupported(_))
        ));
        let l = ParamLayout::new(&g, &cfg);
        assert!(l.offsets < l.rotation && l.rotation < l.gains && l.gains < l.total);
        assert_eq!(l.total - l.gains, 8 * POLS * g.output.channels);
        assert_eq!(l.rotation % 256, 0);
        assert_eq!(l.gains % 256, 0);
    }
}

//! The null backend: no signal processing at all, so that the engine's network path can be measured
//! on its own. In output heap h of a frame, the first byte of every channel's block (spectrum 0,
//! polarisation 0, real part) is the marker `(timestamp / (2n S) + h) as u8`, so a receiver can
//! still tell heaps apart and spot reordering in every substream and packet. Nothing else is
//! written: filling every byte would be a memset of the whole output stream, a host core at a few
//! Gsample/s, where the GPU backend's output arrives by DMA at no core's cost. Every output gets
//! its own markers (from its own heap length); the input is not read, and its sensors are not
//! measured (`power` stays `None`).

use num_complex::Complex32;

use super::{
    channelisations, Channelisation, Frame, InputGeometry, OutputGeometry, Process, Result, POLS,
};

/// The null backend: a [`Process`], a backend as [`super::Synchronous`].
pub struct NullBackend {
    input: InputGeometry,
    outputs: Vec<OutputGeometry>,
    /// Each output's view of the input.
    geometry: Vec<Channelisation>,
}

impl NullBackend {
    /// A null backend for `outputs` (1 to [`super::MAX_OUTPUTS`]) of `input`.
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry]) -> Result<Self> {
        Ok(Self {
            input,
            outputs: outputs.to_vec(),
            geometry: channelisations(input, outputs)?,
        })
    }
}

impl Process for NullBackend {
    const NAME: &'static str = "null";
    fn input(&self) -> &InputGeometry {
        &self.input
    }
    fn outputs(&self) -> &[OutputGeometry] {
        &self.outputs
    }
    fn store_gains(&mut self, _output: usize, _pol: usize, _gains: &[Complex32]) {}
    fn compute(&mut self, frame: &mut Frame) -> Result<()> {
        for (g, out) in self.geometry.iter().zip(&mut frame.outputs) {
            let first = frame.input.timestamp / g.output.heap_samples() as u64;
            let block = g.heap_bytes() / g.output.channels;
            for (h, heap) in out.heaps.chunks_exact_mut(g.heap_bytes()).enumerate() {
                let marker = first.wrapping_add(h as u64) as u8;
                for channel in heap.chunks_exact_mut(block) {
                    channel[0] = marker;
                }
            }
            out.saturated = [0; POLS];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::*;
    use super::*;
    use crate::backend::{Backend, Synchronous};

    #[test]
    fn pattern_per_heap() {
        let input = InputGeometry {
            sample_bits: 10,
            chunk_samples: 3 * 2 * 32,
            overlap_samples: 96,
        };
        let output = OutputGeometry {
            channels: 16,
            taps: 4,
            spectra_per_heap: 2,
            bits: 8,
            filter: Default::default(),
            dither: None,
            kind: crate::backend::OutputKind::Wideband,
        };
        let g = Channelisation::new(input, output);
        let mut b = Synchronous::new(NullBackend::new(input, &[output]).unwrap());
        assert!(NullBackend::new(input, &[]).is_err());
        let mut f = b.alloc_frame().unwrap();
        f.outputs[0].heaps.fill(0xEE);
        f.input.timestamp = 5 * 64;
        b.submit(f).unwrap();
        assert!(b.submit(b.alloc_frame().unwrap()).is_err());
        let f = b.wait().unwrap().unwrap();
        let block = g.heap_bytes() / g.output.channels;
        assert_eq!(g.heaps_per_frame(), 3);
        for (h, heap) in f.outputs[0].heaps.chunks(g.heap_bytes()).enumerate() {
            for (c, channel) in heap.chunks(block).enumerate() {
                assert_eq!(channel[0], 5 + h as u8, "heap {h} channel {c}");
                assert!(
                    channel[1..].iter().all(|&v| v == 0xEE),
                    "heap {h} channel {c}"
                );
            }
        }
        assert_eq!(f.outputs[0].saturated, [0, 0]);
        assert!(b.wait().unwrap().is_none());
    }

    fn null_backend(input: InputGeometry, outputs: &[OutputGeometry]) -> Box<dyn Backend> {
        Box::new(Synchronous::new(NullBackend::new(input, outputs).unwrap()))
    }

    #[test]
    fn each_output_as_if_alone() {
        check_outputs_as_if_alone(&null_backend, &[(&null_backend, Agreement::Exact)], false);
    }

    #[test]
    fn serves_one_to_eight_outputs() {
        check_output_counts(&|input, outputs| {
            Ok(Box::new(Synchronous::new(NullBackend::new(
                input, outputs,
            )?)))
        });
    }

    /// Each output of a fresh frame: its own size, zeros but for its own heap markers, no
    /// saturation; the input is not measured.
    #[test]
    fn several_outputs_zeros_and_markers() {
        let (input, outputs) = three_outputs(16);
        let mut b = null_backend(input, &outputs);
        let mut f = b.alloc_frame().unwrap();
        f.input.timestamp = 7 * 4096;
        for out in &mut f.outputs {
            out.saturated = [9; POLS];
        }
        b.submit(f).unwrap();
        let f = b.wait().unwrap().unwrap();
        assert_eq!(f.input.power, None);
        assert_eq!(f.outputs.len(), 3);
        for (k, (out, o)) in f.outputs.iter().zip(&outputs).enumerate() {
            let g = Channelisation::new(input, *o);
            assert_eq!(out.heaps.len(), g.output_bytes(), "output {k}");
            assert_eq!(out.saturated, [0, 0], "output {k}");
            let block = g.heap_bytes() / o.channels;
            let first = 7 * 4096 / o.heap_samples();
            for (i, &v) in out.heaps.iter().enumerate() {
                let h = i / g.heap_bytes();
                let want = if i % block == 0 { (first + h) as u8 } else { 0 };
                assert_eq!(v, want, "output {k} byte {i}");
            }
        }
    }
}

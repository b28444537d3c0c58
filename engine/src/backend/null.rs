//! The null backend: no signal processing at all, so that the engine's network path can be measured
//! on its own. In output heap h of a frame, the first byte of every channel's block (spectrum 0,
//! polarisation 0, real part) is the marker `(timestamp / (2n S) + h) as u8`, so a receiver can
//! still tell heaps apart and spot reordering in every substream and packet. Nothing else is
//! written: filling every byte would be a memset of the whole output stream, a host core at a few
//! Gsample/s, where the GPU backend's output arrives by DMA at no core's cost.

use num_complex::Complex32;

use super::{
    single_output, Channelisation, Frame, InputGeometry, OutputGeometry, Process, Result, POLS,
};

/// The null backend: a [`Process`], a backend as [`super::Synchronous`].
pub struct NullBackend {
    geometry: Channelisation,
}

impl NullBackend {
    pub fn new(input: InputGeometry, outputs: &[OutputGeometry]) -> Result<Self> {
        Ok(Self {
            geometry: single_output(input, outputs)?,
        })
    }
}

impl Process for NullBackend {
    const NAME: &'static str = "null";
    fn geometry(&self) -> &Channelisation {
        &self.geometry
    }
    fn store_gains(&mut self, _output: usize, _pol: usize, _gains: &[Complex32]) {}
    fn compute(&mut self, frame: &mut Frame) -> Result<()> {
        let g = &self.geometry;
        let first = frame.input.timestamp / g.output.heap_samples() as u64;
        let block = g.heap_bytes() / g.output.channels;
        let out = &mut frame.outputs[0];
        for (h, heap) in out.heaps.chunks_exact_mut(g.heap_bytes()).enumerate() {
            let marker = first.wrapping_add(h as u64) as u8;
            for channel in heap.chunks_exact_mut(block) {
                channel[0] = marker;
            }
        }
        out.saturated = [0; POLS];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
        };
        let g = Channelisation::new(input, output);
        let mut b = Synchronous::new(NullBackend::new(input, &[output]).unwrap());
        assert!(NullBackend::new(input, &[output, output]).is_err());
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
}

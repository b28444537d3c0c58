//! The null backend: no signal processing at all, so that the engine's network path can be measured
//! on its own. In output heap h of a frame, the first byte of every channel's block (spectrum 0,
//! polarisation 0, real part) is the marker `(timestamp / (2n S) + h) as u8`, so a receiver can
//! still tell heaps apart and spot reordering in every substream and packet. Nothing else is
//! written: filling every byte would be a memset of the whole output stream, a host core at a few
//! Gsample/s, where the GPU backend's output arrives by DMA at no core's cost.

use std::collections::VecDeque;

use num_complex::Complex32;

use super::reference::check_gains;
use super::{Backend, BackendError, Frame, Geometry, Result};

pub struct NullBackend {
    geometry: Geometry,
    done: VecDeque<Frame>,
}

impl NullBackend {
    pub fn new(geometry: Geometry) -> Result<Self> {
        geometry.validate().map_err(BackendError::Unsupported)?;
        Ok(Self {
            geometry,
            done: VecDeque::new(),
        })
    }
}

impl Backend for NullBackend {
    fn name(&self) -> &'static str {
        "null"
    }
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    fn alloc_frame(&self) -> Result<Frame> {
        Ok(Frame::new_host(&self.geometry))
    }
    fn set_gains(&mut self, pol: usize, gains: &[Complex32]) -> Result<()> {
        check_gains(&self.geometry, pol, gains)
    }
    fn submit(&mut self, mut frame: Frame) -> Result<()> {
        if self.done.len() >= self.max_in_flight() {
            return Err(BackendError::Misuse(
                "submit with a frame already in flight: wait first".into(),
            ));
        }
        frame.check(&self.geometry)?;
        let g = &self.geometry;
        let first = frame.timestamp / (g.step() * g.spectra_per_heap) as u64;
        let block = g.heap_bytes() / g.channels;
        for (h, heap) in frame.output.chunks_exact_mut(g.heap_bytes()).enumerate() {
            let marker = first.wrapping_add(h as u64) as u8;
            for channel in heap.chunks_exact_mut(block) {
                channel[0] = marker;
            }
        }
        frame.saturated = [0; 2];
        self.done.push_back(frame);
        Ok(())
    }
    fn wait(&mut self) -> Result<Option<Frame>> {
        Ok(self.done.pop_front())
    }
    fn max_in_flight(&self) -> usize {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_per_heap() {
        let g = Geometry {
            channels: 16,
            taps: 4,
            sample_bits: 10,
            spectra_per_heap: 2,
            heaps_per_frame: 3,
            overlap_samples: 96,
        };
        let mut b = NullBackend::new(g.clone()).unwrap();
        let mut f = b.alloc_frame().unwrap();
        f.output.fill(0xEE);
        f.timestamp = 5 * 64;
        b.submit(f).unwrap();
        assert!(b.submit(b.alloc_frame().unwrap()).is_err());
        let f = b.wait().unwrap().unwrap();
        let block = g.heap_bytes() / g.channels;
        for (h, heap) in f.output.chunks(g.heap_bytes()).enumerate() {
            for (c, channel) in heap.chunks(block).enumerate() {
                assert_eq!(channel[0], 5 + h as u8, "heap {h} channel {c}");
                assert!(
                    channel[1..].iter().all(|&v| v == 0xEE),
                    "heap {h} channel {c}"
                );
            }
        }
        assert_eq!(f.saturated, [0, 0]);
        assert!(b.wait().unwrap().is_none());
    }
}

//! The protocol shared by the backends that do their work in `submit` (reference, cpu, null): one
//! frame in flight, checked before it is computed, handed back by the next `wait`.

use num_complex::Complex32;

use super::{check_gains, Backend, BackendError, Frame, InputGeometry, OutputGeometry, Result};

/// A backend that computes a frame as it is submitted. Implementing this gives [`Backend`].
pub trait Synchronous: Send {
    /// Short name for logs and metrics.
    const NAME: &'static str;
    /// The input geometry it was built for.
    fn input_geometry(&self) -> &InputGeometry;
    /// The output geometries it was built for, in order.
    fn output_geometries(&self) -> &[OutputGeometry];
    /// Takes gains already checked by [`check_gains`].
    fn store_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]);
    /// Computes every output of a frame already checked against the geometries.
    fn compute(&mut self, frame: &mut Frame) -> Result<()>;
    /// Where the computed frame waits for `wait`: `None` when nothing is in flight.
    fn finished(&mut self) -> &mut Option<Frame>;
}

impl<T: Synchronous> Backend for T {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn input(&self) -> &InputGeometry {
        self.input_geometry()
    }
    fn outputs(&self) -> &[OutputGeometry] {
        self.output_geometries()
    }
    fn alloc_frame(&self) -> Result<Frame> {
        Ok(Frame::new_host(self.input_geometry(), self.output_geometries()))
    }
    fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) -> Result<()> {
        check_gains(self.output_geometries(), output, pol, gains)?;
        self.store_gains(output, pol, gains);
        Ok(())
    }
    fn submit(&mut self, mut frame: Frame) -> Result<()> {
        if self.finished().is_some() {
            return Err(BackendError::Misuse(
                "submit with a frame already in flight: wait first".into(),
            ));
        }
        frame.check(self.input_geometry(), self.output_geometries())?;
        self.compute(&mut frame)?;
        *self.finished() = Some(frame);
        Ok(())
    }
    fn wait(&mut self) -> Result<Option<Frame>> {
        Ok(self.finished().take())
    }
    fn max_in_flight(&self) -> usize {
        1
    }
}

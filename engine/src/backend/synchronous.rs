//! The protocol shared by the backends that do their work in `submit` (reference, cpu, null): a
//! [`Process`] computes one frame at a time, and [`Synchronous`] makes it a [`Backend`] with one
//! frame in flight, checked before it is computed and handed back by the next `wait`.

use std::ops::{Deref, DerefMut};

use num_complex::Complex32;

use super::{check_gains, Backend, BackendError, Frame, InputGeometry, OutputGeometry, Result};

/// The work of a backend that computes a frame as it is submitted.
pub trait Process: Send {
    /// Short name for logs and metrics.
    const NAME: &'static str;
    /// The input it was built for.
    fn input(&self) -> &InputGeometry;
    /// The outputs it was built for (from 1 to [`super::MAX_OUTPUTS`]), in the engine's order.
    fn outputs(&self) -> &[OutputGeometry];
    /// Takes gains already checked by `check_gains`.
    fn store_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]);
    /// Computes every output of a frame already checked against the geometry.
    fn compute(&mut self, frame: &mut Frame) -> Result<()>;
}

/// A [`Process`] as a [`Backend`]: `submit` computes, `wait` hands the frame back. Derefs to the
/// process, so that tests reach its own methods (the unquantised values, for instance).
pub struct Synchronous<P> {
    process: P,
    /// The frame computed by the last `submit`, until `wait` takes it.
    done: Option<Frame>,
}

impl<P: Process> Synchronous<P> {
    pub fn new(process: P) -> Self {
        Self {
            process,
            done: None,
        }
    }
}

impl<P> Deref for Synchronous<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.process
    }
}

impl<P> DerefMut for Synchronous<P> {
    fn deref_mut(&mut self) -> &mut P {
        &mut self.process
    }
}

impl<P: Process> Backend for Synchronous<P> {
    fn name(&self) -> &'static str {
        P::NAME
    }
    fn input(&self) -> &InputGeometry {
        self.process.input()
    }
    fn outputs(&self) -> &[OutputGeometry] {
        self.process.outputs()
    }
    fn alloc_frame(&self) -> Result<Frame> {
        Ok(Frame::new_host(self.input(), self.outputs()))
    }
    fn set_gains(&mut self, output: usize, pol: usize, gains: &[Complex32]) -> Result<()> {
        check_gains(self.outputs(), output, pol, gains)?;
        self.process.store_gains(output, pol, gains);
        Ok(())
    }
    fn submit(&mut self, mut frame: Frame) -> Result<()> {
        if self.done.is_some() {
            return Err(BackendError::Misuse(
                "submit with a frame already in flight: wait first".into(),
            ));
        }
        frame.check(self.input(), self.outputs())?;
        self.process.compute(&mut frame)?;
        self.done = Some(frame);
        Ok(())
    }
    fn wait(&mut self) -> Result<Option<Frame>> {
        Ok(self.done.take())
    }
    fn max_in_flight(&self) -> usize {
        1
    }
}

//! Why the pipeline could not start, or why a stage stopped: one sentence for the user each.

use std::io;

use crate::backend::BackendError;

/// A failure of the pipeline or one of its stages. The causes are part of each sentence, so none
/// is chained as a source (a chain would print them twice).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The backend factory could not build a backend; its sentence as it gave it.
    #[error("{0}")]
    NoBackend(String),
    #[error("the backend was built for another geometry.")]
    WrongGeometry,
    #[error("cannot set the initial gains: {0}.")]
    InitialGains(BackendError),
    #[error("cannot allocate frame buffers: {0}.")]
    Allocate(BackendError),
    #[error("the compute thread stopped while starting.")]
    ComputeStopped,
    #[error("cannot start thread {name}: {error}.")]
    Thread { name: String, error: io::Error },
    #[error("the {0} stage panicked.")]
    Panicked(&'static str),
    #[error("cannot receive polarisation {pol} on {addr}: {error}.")]
    Bind {
        pol: usize,
        addr: String,
        error: io::Error,
    },
    #[error("polarisation {pol} receive failed: {error}.")]
    Receive { pol: usize, error: io::Error },
    #[error("the {backend} backend failed: {error}.")]
    Backend {
        backend: &'static str,
        error: BackendError,
    },
    #[error("the {0} backend returned no frame for one submitted.")]
    NoFrame(&'static str),
    #[error("cannot open the output socket: {0}.")]
    OutputSocket(io::Error),
    #[error("cannot start a send thread: {0}.")]
    SendThread(io::Error),
    #[error("a send thread stopped.")]
    SendThreadStopped,
    /// A stream thread could not take the cores or the scheduling its flags asked for.
    #[error("thread {thread}: {error}.")]
    Placement {
        thread: String,
        error: placement::PlacementError,
    },
}

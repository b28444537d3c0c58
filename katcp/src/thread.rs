//! A katcp front on a thread of its own, for programs whose control plane is not async: bind the
//! address, then serve on a current-thread runtime until the program ends.

use std::future::Future;
use std::net::SocketAddr;
use std::thread::JoinHandle;

/// Why a katcp front could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("cannot listen for katcp on {addr}: {source}.")]
    Listen {
        /// The address asked for (`--katcp`).
        addr: SocketAddr,
        /// Why not.
        source: std::io::Error,
    },
    /// Its socket, runtime or thread could not be set up.
    #[error("cannot start the katcp front: {0}.")]
    Setup(std::io::Error),
}

/// Binds `addr`, logs `katcp listening on ADDR:PORT`, and runs `serve` on the listener in a
/// thread named `thread`. Returns the address bound (port 0 becomes the one the kernel chose).
pub fn start_thread<F, Fut>(
    addr: SocketAddr,
    thread: &str,
    serve: F,
) -> Result<(SocketAddr, JoinHandle<()>), StartError>
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let listener =
        std::net::TcpListener::bind(addr).map_err(|source| StartError::Listen { addr, source })?;
    let local = listener.local_addr().map_err(StartError::Setup)?;
    listener.set_nonblocking(true).map_err(StartError::Setup)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Setup)?;
    tracing::info!("katcp listening on {local}");
    let handle = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => serve(l).await,
                    Err(e) => tracing::error!("katcp socket unusable: {e}"),
                }
            })
        })
        .map_err(StartError::Setup)?;
    Ok((local, handle))
}

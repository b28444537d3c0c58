//! Transport for SPEAD datagrams (opaque bytes here): the seam every transport plugs into, UDP
//! behind it, and an in-memory loopback.
//!
//! - [`seam`]: the traits the receive and send threads are generic over ([`DatagramSource`],
//!   [`DatagramSink`]); a new transport is one module implementing them.
//! - [`loopback`]: an in-memory sink and source, for tests.
//! - [`socket`]: one socket-state type: bind or join multicast, size buffers, probe GSO/GRO.
//! - [`recv`]: batched receive (`recvmmsg` via quinn-udp) with GRO and truncation counting.
//! - [`batch`]: a received batch as plain data, split into datagrams by GRO stride.
//! - [`send`]: batched send: GSO runs of up to 64 KiB, otherwise `sendmmsg`.
//! - [`pace`]: an exact-rate pacer from an absolute start.
//! - [`endpoint`]: `ADDR[+N]:PORT` lists.
//!
//! The data path runs on dedicated threads with non-blocking sockets (quinn-udp's requirement),
//! waiting in `ppoll` with a timeout so that a thread can notice a stop flag.

pub mod batch;
pub mod endpoint;
pub mod loopback;
pub mod pace;
mod poll;
pub mod recv;
pub mod seam;
pub mod send;
pub mod socket;
mod sys;

pub use batch::{Batch, Datagrams, RecvMeta};
pub use endpoint::{Endpoint, EndpointError};
pub use pace::{Pacer, Rate};
pub use recv::{Receiver, RecvConfig, RecvStats, DEFAULT_COALESCE, MAX_UDP_PAYLOAD};
pub use seam::{DatagramSink, DatagramSource, DropCounter, PollSet, SourceWaiter};
pub use send::{Datagram, SendStats, Sender};
pub use socket::{Caps, SocketConfig, UdpSocket};

//! SPEAD-64-48 for the F-engine test bed: packets, heaps, descriptors, assembly into heaps and
//! into caller-owned chunks, and UDP transport.
//!
//! - [`packet`]: decode (borrowing the datagram) and encode one packet.
//! - [`heap`]: split a heap into packets; read items back from a complete heap.
//! - [`descriptor`]: item descriptors, so generic receivers (spead2) can decode our heaps.
//! - [`stream_descriptors`]: the descriptors of the digitiser stream's and the F-engine output's
//!   items, and their descriptor heap.
//! - [`reject`]: every reason a packet or heap is dropped, with counters.
//! - [`assemble`]: heaps from packets in any order (general path).
//! - [`chunk`]: heaps written straight into caller-owned chunks (hot path).
//! - [`items`]: item ids of the wire formats.
//! - [`samples`]: packing of digitiser samples.
//! - [`transport`]: the transport seam; UDP sockets, GRO receive, GSO send, pacing; a loopback.

#![warn(missing_docs)]

pub mod assemble;
pub mod chunk;
pub mod descriptor;
pub mod heap;
pub mod items;
pub mod packet;
pub mod reject;
pub mod samples;
pub mod stream_descriptors;
pub mod transport;

pub use descriptor::Descriptor;
pub use heap::{HeapItem, HeapView, HeapWriter};
pub use packet::{ItemPointer, Limits, Packet};
pub use reject::{Reject, RejectCounters};

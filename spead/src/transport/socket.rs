//! One socket-state type: creates the UDP socket with socket2 (bind, multicast, buffer sizes),
//! hands it to quinn-udp (which makes it non-blocking and probes GSO/GRO), and records what the
//! kernel actually offers and what this socket will use.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{Domain, Protocol, Socket, Type};

use super::sys;

/// How to set a socket up.
#[derive(Clone, Debug)]
pub struct SocketConfig {
    /// Requested SO_RCVBUF (receiving sockets) or SO_SNDBUF (sending sockets), in bytes.
    pub buffer_bytes: usize,
    /// Local interface address for multicast joins and multicast sends (`None`: the kernel's
    /// choice from the routing table).
    pub interface: Option<Ipv4Addr>,
    /// Multicast TTL for senders.
    pub ttl: u32,
    /// Use UDP GSO on send when the kernel offers it.
    pub gso: bool,
    /// Use UDP GRO on receive when the kernel offers it.
    pub gro: bool,
}

impl Default for SocketConfig {
    fn default() -> Self {
        Self {
            buffer_bytes: 64 << 20,
            interface: None,
            ttl: 4,
            gso: true,
            gro: true,
        }
    }
}

/// What the kernel offers and what this socket uses, as probed when it was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Datagrams per send in use (1: no GSO); may drop to 1 if a send is refused.
    pub gso_segments: usize,
    /// UDP GRO in use on receive.
    pub gro: bool,
    /// What the kernel offers, whatever the configuration says.
    pub kernel_gso_segments: usize,
    /// The kernel offers UDP GRO, whether or not this socket uses it.
    pub kernel_gro: bool,
    /// SO_RCVBUF as the kernel reports it (Linux reports twice the payload room).
    pub recv_buffer: usize,
    /// SO_SNDBUF, likewise.
    pub send_buffer: usize,
    /// The kernel granted less than `buffer_bytes` (net.core.rmem_max / wmem_max).
    pub buffer_capped: bool,
}

/// A non-blocking UDP socket with quinn-udp's state and the probed capabilities.
#[derive(Debug)]
pub struct UdpSocket {
    socket: Socket,
    state: quinn_udp::UdpSocketState,
    caps: Caps,
}

/// Which buffer a socket sizes: receivers need SO_RCVBUF, senders SO_SNDBUF.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Recv,
    Send,
}

impl UdpSocket {
    /// A receiving socket on `addr`: for a multicast group, bound to the group's address and port
    /// (so other groups on the port stay out) and joined on the configured interface; for a
    /// unicast address, bound to it (port 0: an ephemeral port).
    pub fn bind(addr: SocketAddrV4, cfg: &SocketConfig) -> io::Result<Self> {
        let socket = new_socket()?;
        if addr.ip().is_multicast() {
            // Several receivers (processes, tests) may listen to one group.
            socket.set_reuse_address(true)?;
            socket.bind(&SocketAddr::V4(addr).into())?;
            join(&socket, *addr.ip(), cfg)?;
        } else {
            socket.bind(&SocketAddr::V4(addr).into())?;
        }
        Self::finish(socket, cfg, Role::Recv)
    }

    /// A receiving socket for several multicast groups on one port: bound to the wildcard address,
    /// joined to each group, and told to deliver only the groups it joined.
    pub fn bind_groups(groups: &[Ipv4Addr], port: u16, cfg: &SocketConfig) -> io::Result<Self> {
        if groups.is_empty() || groups.iter().any(|g| !g.is_multicast()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bind_groups needs one or more multicast groups",
            ));
        }
        let socket = new_socket()?;
        socket.set_reuse_address(true)?;
        socket.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).into())?;
        // Linux otherwise delivers every group any socket on the host joined to this port.
        socket.set_multicast_all_v4(false)?;
        for &g in groups {
            join(&socket, g, cfg)?;
        }
        Self::finish(socket, cfg, Role::Recv)
    }

    /// A sending socket on an ephemeral port, with multicast interface and TTL set and multicast
    /// loopback on (receivers on this host see what it sends; see [`Self::set_multicast_loop`]).
    pub fn sender(cfg: &SocketConfig) -> io::Result<Self> {
        let socket = new_socket()?;
        socket.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)).into())?;
        if let Some(ifaddr) = cfg.interface {
            socket.set_multicast_if_v4(&ifaddr)?;
        }
        socket.set_multicast_ttl_v4(cfg.ttl)?;
        socket.set_multicast_loop_v4(true)?;
        Self::finish(socket, cfg, Role::Send)
    }

    fn finish(socket: Socket, cfg: &SocketConfig, role: Role) -> io::Result<Self> {
        // quinn-udp makes the socket non-blocking, forbids fragmentation, turns GRO on where the
        // kernel has it and probes GSO.
        let state = quinn_udp::UdpSocketState::new((&socket).into())?;
        let fd = socket.as_raw_fd();
        // We read no receive timestamps; skip the control message per buffer.
        let _ = sys::set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 0);
        let buffer_capped = size_buffer(&socket, role, cfg.buffer_bytes)?;

        let kernel_gro = state.gro_segments() > 1;
        let gro = if kernel_gro && !cfg.gro {
            // Off by configuration: if the kernel will not turn it off, it stays in use (the
            // receiver splits by stride either way).
            sys::set_int_option(fd, libc::SOL_UDP, libc::UDP_GRO, 0).is_err()
        } else {
            kernel_gro
        };
        let kernel_gso_segments = state.max_gso_segments().max(1);
        let caps = Caps {
            gso_segments: if cfg.gso { kernel_gso_segments } else { 1 },
            gro,
            kernel_gso_segments,
            kernel_gro,
            recv_buffer: socket.recv_buffer_size()?,
            send_buffer: socket.send_buffer_size()?,
            buffer_capped,
        };
        tracing::debug!(?caps, "udp socket ready");
        Ok(Self {
            socket,
            state,
            caps,
        })
    }

    /// Whether multicast this socket sends is also delivered to receivers on this host. (When
    /// the sending interface is `lo` itself, the device delivers it regardless.)
    pub fn set_multicast_loop(&self, on: bool) -> io::Result<()> {
        self.socket.set_multicast_loop_v4(on)
    }

    /// What the kernel offers and what this socket uses.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// The address and port the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("socket has no IP address"))
    }

    /// Packets the kernel dropped on arrival because this socket's receive buffer was full (its
    /// receiver fell behind), counted since the socket opened; Linux's `SO_MEMINFO`, a 32-bit
    /// count that wraps (take differences with `wrapping_sub`). `None` where the kernel does not
    /// say. A GSO super-packet that reaches a GRO socket whole (loopback, veth) counts once
    /// however many datagrams it carries: on loopback from a GSO sender of 5192-byte datagrams,
    /// one drop is 12 datagrams lost.
    pub fn drops(&self) -> Option<u32> {
        #[cfg(target_os = "linux")]
        {
            // asm-generic/socket.h (x86, arm, riscv); the libc crate does not export it.
            const SO_MEMINFO: libc::c_int = 55;
            let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
            let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
            // SAFETY: `info` is writable for `len` bytes; the kernel writes at most `len`.
            let r = unsafe {
                libc::getsockopt(
                    self.socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    SO_MEMINFO,
                    info.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            (r == 0 && len as usize == std::mem::size_of_val(&info))
                .then(|| info[libc::SK_MEMINFO_DROPS as usize])
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    pub(crate) fn state(&self) -> &quinn_udp::UdpSocketState {
        &self.state
    }

    pub(crate) fn socket(&self) -> &Socket {
        &self.socket
    }

    /// The device refused a GSO send (some drivers do): one datagram per segment from now on.
    pub(crate) fn disable_gso(&mut self) {
        self.caps.gso_segments = 1;
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

fn new_socket() -> io::Result<Socket> {
    Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
}

fn join(socket: &Socket, group: Ipv4Addr, cfg: &SocketConfig) -> io::Result<()> {
    let iface = cfg.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
    socket.join_multicast_v4(&group, &iface).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot join multicast group {group} on interface {iface}: {e}"),
        )
    })
}

/// Asks for `bytes` of the role's buffer and checks what the kernel granted: it silently caps
/// requests at net.core.{r,w}mem_max. Returns whether it was capped, warning once per process.
fn size_buffer(socket: &Socket, role: Role, bytes: usize) -> io::Result<bool> {
    static WARNED_RECV: AtomicBool = AtomicBool::new(false);
    static WARNED_SEND: AtomicBool = AtomicBool::new(false);
    // The option is a C int that the kernel doubles; larger requests would wrap.
    let bytes = bytes.min(i32::MAX as usize / 2);
    let (granted, sysctl, warned) = match role {
        Role::Recv => {
            let _ = socket.set_recv_buffer_size(bytes);
            (socket.recv_buffer_size()?, "rmem_max", &WARNED_RECV)
        }
        Role::Send => {
            let _ = socket.set_send_buffer_size(bytes);
            (socket.send_buffer_size()?, "wmem_max", &WARNED_SEND)
        }
    };
    // Linux doubles the request (bookkeeping overhead) and reports the doubled figure.
    let capped = granted / 2 < bytes;
    if capped && !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            requested = bytes,
            granted = granted / 2,
            "UDP socket buffer capped by the kernel (expect loss at high rates); raise it with: \
             sysctl -w net.core.{sysctl}={bytes}"
        );
    }
    Ok(capped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_obeys_configuration() {
        let on = UdpSocket::bind(
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            &SocketConfig::default(),
        )
        .unwrap();
        let caps = on.caps();
        assert!(caps.gso_segments >= 1);
        assert_eq!(caps.gso_segments, caps.kernel_gso_segments);
        assert_eq!(caps.gro, caps.kernel_gro);
        assert!(caps.recv_buffer > 0 && caps.send_buffer > 0);

        let off = SocketConfig {
            gso: false,
            gro: false,
            ..Default::default()
        };
        let rx = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &off).unwrap();
        assert!(!rx.caps().gro);
        let tx = UdpSocket::sender(&off).unwrap();
        assert_eq!(tx.caps().gso_segments, 1);
        assert_eq!(tx.caps().kernel_gso_segments, caps.kernel_gso_segments);
        assert!(tx.socket.multicast_loop_v4().unwrap());
        tx.set_multicast_loop(false).unwrap();
        assert!(!tx.socket.multicast_loop_v4().unwrap());
    }

    #[test]
    fn reports_capped_buffers() {
        // Far above any default rmem_max, so capped unless the host was tuned for it.
        let cfg = SocketConfig {
            buffer_bytes: 1 << 40,
            ..Default::default()
        };
        let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg).unwrap();
        assert!(s.caps().buffer_capped);
        let cfg = SocketConfig {
            buffer_bytes: 64 << 10,
            ..Default::default()
        };
        let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg).unwrap();
        assert!(!s.caps().buffer_capped);
    }

    #[test]
    fn counts_datagrams_dropped_on_a_full_buffer() {
        let cfg = SocketConfig {
            buffer_bytes: 4096, // the kernel's minimum or near it: a few datagrams
            gro: false,
            ..Default::default()
        };
        let rx = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &cfg).unwrap();
        let Some(before) = rx.drops() else {
            eprintln!("skipped: the kernel does not report socket drops");
            return;
        };
        assert_eq!(before, 0);
        let dest = rx.local_addr().unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            tx.send_to(&[0; 1000], dest).unwrap();
        }
        // Loopback delivers (or drops) within the send call; count what is queued.
        rx.socket.set_nonblocking(true).unwrap();
        let mut queued = 0u32;
        let mut buf = [std::mem::MaybeUninit::new(0u8); 2000];
        while rx.socket.recv(&mut buf).is_ok() {
            queued += 1;
        }
        assert!(queued > 0 && queued < 200, "{queued} queued");
        assert_eq!(rx.drops(), Some(200 - queued));
        let mut counter = crate::transport::DropCounter::from_reading(Some(0));
        assert_eq!(counter.take_reading(rx.drops()), u64::from(200 - queued));
        assert_eq!(counter.take_reading(rx.drops()), 0);
    }

    #[test]
    fn bind_groups_rejects_unicast() {
        let cfg = SocketConfig::default();
        assert!(UdpSocket::bind_groups(&[], 0, &cfg).is_err());
        assert!(UdpSocket::bind_groups(&[Ipv4Addr::LOCALHOST], 0, &cfg).is_err());
    }
}

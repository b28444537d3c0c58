//! One socket-state type: creates the UDP socket with socket2, joins multicast, sizes buffers, and
//! probes GSO/GRO through quinn-udp, degrading to plain batched syscalls when they are missing.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::str::FromStr;

use socket2::{Domain, Protocol, Socket, Type};

/// How to set a socket up.
#[derive(Clone, Debug)]
pub struct SocketConfig {
    /// Requested SO_RCVBUF / SO_SNDBUF in bytes.
    pub buffer_bytes: usize,
    /// Local interface address for multicast joins and multicast sends (`None`: the kernel's choice).
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

/// What this socket can do, as probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Datagrams per GSO send (1: no GSO).
    pub gso_segments: usize,
    pub gro: bool,
    /// Buffer sizes the kernel granted (Linux reports double the usable size).
    pub recv_buffer: usize,
    pub send_buffer: usize,
}

/// An IPv4 endpoint list `ADDR[+N]:PORT`: N+1 consecutive addresses (multicast groups, usually).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub addrs: Vec<SocketAddrV4>,
}

impl FromStr for Endpoint {
    type Err = String;

    /// Parses `239.10.0.1+3:7148` (four groups), `127.0.0.1:7148`, or `host:port` (resolved).
    fn from_str(s: &str) -> Result<Self, String> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("'{s}' is not ADDR[+N]:PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{port}' in '{s}' is not a port number"))?;
        let (base, extra) = match host.split_once('+') {
            Some((b, n)) => (
                b,
                n.parse::<u32>()
                    .map_err(|_| format!("'+{n}' in '{s}' is not a count"))?,
            ),
            None => (host, 0),
        };
        let base: Ipv4Addr = match base.parse() {
            Ok(ip) => ip,
            Err(_) if extra == 0 => {
                let resolved = (base, port)
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve '{base}': {e}"))?;
                resolved
                    .filter_map(|a| match a {
                        SocketAddr::V4(v4) => Some(*v4.ip()),
                        SocketAddr::V6(_) => None,
                    })
                    .next()
                    .ok_or_else(|| format!("'{base}' has no IPv4 address"))?
            }
            Err(_) => return Err(format!("'{base}' in '{s}' is not an IPv4 address")),
        };
        let start = u32::from(base);
        let end = start
            .checked_add(extra)
            .ok_or_else(|| format!("'{s}' runs past 255.255.255.255"))?;
        Ok(Self {
            addrs: (start..=end)
                .map(|a| SocketAddrV4::new(a.into(), port))
                .collect(),
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addrs.as_slice() {
            [] => f.write_str("(none)"),
            [one] => write!(f, "{one}"),
            [first, ..] => write!(
                f,
                "{}+{}:{}",
                first.ip(),
                self.addrs.len() - 1,
                first.port()
            ),
        }
    }
}

/// A UDP socket with its probed capabilities.
pub struct UdpSocket {
    socket: Socket,
    state: quinn_udp::UdpSocketState,
    caps: Caps,
}

impl UdpSocket {
    /// A receiving socket on `addr`: for a multicast group, bound to the group's port and joined on
    /// the configured interface; for a unicast address, bound to it.
    pub fn bind(addr: SocketAddrV4, cfg: &SocketConfig) -> io::Result<Self> {
        let socket = Self::raw()?;
        if addr.ip().is_multicast() {
            socket.set_reuse_address(true)?;
            socket.bind(&SocketAddr::V4(SocketAddrV4::new(*addr.ip(), addr.port())).into())?;
            socket.join_multicast_v4(addr.ip(), &cfg.interface.unwrap_or(Ipv4Addr::UNSPECIFIED))?;
        } else {
            socket.bind(&SocketAddr::V4(addr).into())?;
        }
        Self::finish(socket, cfg)
    }

    /// A sending socket bound to an ephemeral port (on the interface, if given).
    pub fn sender(cfg: &SocketConfig) -> io::Result<Self> {
        let socket = Self::raw()?;
        let local = cfg.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
        socket.bind(&SocketAddr::V4(SocketAddrV4::new(local, 0)).into())?;
        if let Some(ifaddr) = cfg.interface {
            socket.set_multicast_if_v4(&ifaddr)?;
        }
        socket.set_multicast_ttl_v4(cfg.ttl)?;
        socket.set_multicast_loop_v4(true)?;
        Self::finish(socket, cfg)
    }

    fn raw() -> io::Result<Socket> {
        Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
    }

    fn finish(socket: Socket, cfg: &SocketConfig) -> io::Result<Self> {
        let state = quinn_udp::UdpSocketState::new((&socket).into())?;
        socket.set_nonblocking(true)?;
        // The kernel silently caps buffers at net.core.{r,w}mem_max; ask, then check what we got.
        let _ = socket.set_recv_buffer_size(cfg.buffer_bytes);
        let _ = socket.set_send_buffer_size(cfg.buffer_bytes);
        let recv_buffer = socket.recv_buffer_size()?;
        let send_buffer = socket.send_buffer_size()?;
        // Linux reports twice the usable size it granted.
        if recv_buffer / 2 < cfg.buffer_bytes || send_buffer / 2 < cfg.buffer_bytes {
            tracing::warn!(
                requested = cfg.buffer_bytes,
                recv_buffer,
                send_buffer,
                "socket buffers capped by the kernel; raise them with: sysctl -w net.core.rmem_max={0} net.core.wmem_max={0}",
                cfg.buffer_bytes
            );
        }
        let gro = cfg.gro && state.gro_segments() > 1;
        if !gro {
            set_gro(&socket, false);
        }
        let gso_segments = if cfg.gso {
            state.max_gso_segments().max(1)
        } else {
            1
        };
        let caps = Caps {
            gso_segments,
            gro,
            recv_buffer,
            send_buffer,
        };
        tracing::debug!(?caps, "udp socket ready");
        Ok(Self {
            socket,
            state,
            caps,
        })
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("socket has no IP address"))
    }

    pub(crate) fn state(&self) -> &quinn_udp::UdpSocketState {
        &self.state
    }

    pub(crate) fn socket(&self) -> &Socket {
        &self.socket
    }

    /// GSO failed at run time (some drivers refuse it): fall back to one datagram per segment.
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

/// Turns UDP_GRO on or off; quinn-udp turns it on where the kernel has it.
fn set_gro(socket: &Socket, on: bool) {
    let value: libc::c_int = on.into();
    // SAFETY: setsockopt with a valid fd and a c_int option value.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e: Endpoint = "239.10.0.1+3:7148".parse().unwrap();
        assert_eq!(e.addrs.len(), 4);
        assert_eq!(e.addrs[3], "239.10.0.4:7148".parse().unwrap());
        assert_eq!(e.to_string(), "239.10.0.1+3:7148");
        let e: Endpoint = "127.0.0.1:9".parse().unwrap();
        assert_eq!(e.addrs, vec!["127.0.0.1:9".parse().unwrap()]);
        let e: Endpoint = "localhost:9".parse().unwrap();
        assert_eq!(e.addrs.len(), 1);
        for bad in [
            "239.1.1.1",
            "239.1.1.1:x",
            "239.1.1.1+y:5",
            "255.255.255.255+1:5",
            "1.2.3.4.5:6",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn probes_capabilities() {
        let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &SocketConfig::default()).unwrap();
        let caps = s.caps();
        assert!(caps.gso_segments >= 1);
        assert!(caps.recv_buffer > 0 && caps.send_buffer > 0);
        let off = UdpSocket::sender(&SocketConfig {
            gso: false,
            gro: false,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(off.caps().gso_segments, 1);
        assert!(!off.caps().gro);
    }
}

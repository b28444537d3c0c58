//! Binding the substreams' sockets, one port for all of them.

use std::net::SocketAddrV4;

use spead::transport::{SocketConfig, UdpSocket};

use super::ReceiveError;

/// Binds every address; a port of 0 is chosen once (on the first) and reused for the rest,
/// retrying a few times if another process holds it on a later address.
pub(super) fn bind_all(
    addrs: &[SocketAddrV4],
    cfg: &SocketConfig,
) -> Result<Vec<(SocketAddrV4, UdpSocket)>, ReceiveError> {
    let mut last_err = None;
    for _attempt in 0..8 {
        let mut out = Vec::with_capacity(addrs.len());
        let mut port = addrs[0].port();
        let mut failed = false;
        for &a in addrs {
            let want = SocketAddrV4::new(*a.ip(), if a.port() == 0 { port } else { a.port() });
            match UdpSocket::bind(want, cfg) {
                Ok(s) => {
                    let bound = match s.local_addr() {
                        Ok(std::net::SocketAddr::V4(v4)) if !a.ip().is_multicast() => v4,
                        _ => want,
                    };
                    if port == 0 {
                        port = bound.port();
                    }
                    out.push((SocketAddrV4::new(*a.ip(), bound.port()), s));
                }
                Err(source) => {
                    let picked = a.port() == 0 && port != 0;
                    last_err = Some(ReceiveError::Bind { addr: want, source });
                    if !picked {
                        return Err(last_err.expect("just set"));
                    }
                    failed = true;
                    break;
                }
            }
        }
        if !failed {
            return Ok(out);
        }
    }
    Err(last_err.unwrap_or(ReceiveError::NoSubstreams))
}

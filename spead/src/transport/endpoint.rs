//! `ADDR[+N]:PORT` endpoint lists, as spead2 and the MeerKAT tools write multicast streams.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::str::FromStr;

/// More addresses than any stream uses; bounds what a typo such as `+4000000000` can allocate.
const MAX_ADDRS: u32 = 4096;

/// An IPv4 endpoint list `ADDR[+N]:PORT`: N+1 consecutive addresses (multicast groups, usually).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The addresses in order: heap k of a stream goes to `addrs[k % addrs.len()]`.
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
        if extra >= MAX_ADDRS {
            return Err(format!("'{s}' names more than {MAX_ADDRS} addresses"));
        }
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
            "10.0.0.0+4000000:5",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }
}

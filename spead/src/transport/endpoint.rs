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

/// Why text is not an endpoint list; each reads as one sentence for the user.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// No `:PORT` at the end.
    #[error("'{text}' is not ADDR[+N]:PORT")]
    Form {
        /// The text given.
        text: String,
    },
    /// What follows the last `:` is not a port number.
    #[error("'{port}' in '{text}' is not a port number")]
    Port {
        /// The part read as the port.
        port: String,
        /// The text given.
        text: String,
    },
    /// What follows `+` is not a count of extra addresses.
    #[error("'+{count}' in '{text}' is not a count")]
    Count {
        /// The part read as the count.
        count: String,
        /// The text given.
        text: String,
    },
    /// A host name the resolver could not look up.
    #[error("cannot resolve '{host}': {error}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's answer (in the sentence, so not also given as its source).
        error: std::io::Error,
    },
    /// A host name that resolves to IPv6 addresses only.
    #[error("'{host}' has no IPv4 address")]
    NoIpv4 {
        /// The host name.
        host: String,
    },
    /// A base address with `+N` that is not an IPv4 address (names are not resolved there).
    #[error("'{base}' in '{text}' is not an IPv4 address")]
    NotIpv4 {
        /// The part read as the first address.
        base: String,
        /// The text given.
        text: String,
    },
    /// More addresses than any stream uses.
    #[error("'{text}' names more than {MAX_ADDRS} addresses")]
    TooMany {
        /// The text given.
        text: String,
    },
    /// A range that runs past the last IPv4 address.
    #[error("'{text}' runs past 255.255.255.255")]
    PastEnd {
        /// The text given.
        text: String,
    },
}

/// The sentence alone, for callers that gather errors as text (the engine's `--wideband dst=`).
impl From<EndpointError> for String {
    fn from(e: EndpointError) -> Self {
        e.to_string()
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    /// Parses `239.10.0.1+3:7148` (four groups), `127.0.0.1:7148`, or `host:port` (resolved).
    fn from_str(s: &str) -> Result<Self, EndpointError> {
        let text = || s.to_string();
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| EndpointError::Form { text: text() })?;
        let port: u16 = port.parse().map_err(|_| EndpointError::Port {
            port: port.into(),
            text: text(),
        })?;
        let (base, extra) = match host.split_once('+') {
            Some((b, n)) => (
                b,
                n.parse::<u32>().map_err(|_| EndpointError::Count {
                    count: n.into(),
                    text: text(),
                })?,
            ),
            None => (host, 0),
        };
        let base: Ipv4Addr = match base.parse() {
            Ok(ip) => ip,
            Err(_) if extra == 0 => {
                let resolved =
                    (base, port)
                        .to_socket_addrs()
                        .map_err(|error| EndpointError::Resolve {
                            host: base.into(),
                            error,
                        })?;
                resolved
                    .filter_map(|a| match a {
                        SocketAddr::V4(v4) => Some(*v4.ip()),
                        SocketAddr::V6(_) => None,
                    })
                    .next()
                    .ok_or_else(|| EndpointError::NoIpv4 { host: base.into() })?
            }
            Err(_) => {
                return Err(EndpointError::NotIpv4 {
                    base: base.into(),
                    text: text(),
                })
            }
        };
        if extra >= MAX_ADDRS {
            return Err(EndpointError::TooMany { text: text() });
        }
        let start = u32::from(base);
        let end = start
            .checked_add(extra)
            .ok_or_else(|| EndpointError::PastEnd { text: text() })?;
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
        let said = |text: &str| text.parse::<Endpoint>().unwrap_err().to_string();
        assert_eq!(said("239.1.1.1"), "'239.1.1.1' is not ADDR[+N]:PORT");
        assert_eq!(
            said("239.1.1.1:x"),
            "'x' in '239.1.1.1:x' is not a port number"
        );
        assert_eq!(
            said("239.1.1.1+y:5"),
            "'+y' in '239.1.1.1+y:5' is not a count"
        );
        assert_eq!(
            said("255.255.255.255+1:5"),
            "'255.255.255.255+1:5' runs past 255.255.255.255"
        );
        assert_eq!(
            said("host+1:5"),
            "'host' in 'host+1:5' is not an IPv4 address"
        );
        assert_eq!(
            said("10.0.0.0+4000000:5"),
            "'10.0.0.0+4000000:5' names more than 4096 addresses"
        );
    }
}

//! katgpucbf names network devices (`--recv-interface ens1f0`) and katcp hosts
//! (`--katcp-host ""` for every interface); this engine takes IPv4 addresses.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};

use crate::config::error::ConfigError;

/// The IPv4 address of the network device `name` (as katgpucbf's `get_interface_address`), or
/// `name` itself where it is an IPv4 address.
pub(super) fn interface_address(flag: &str, name: &str) -> Result<Ipv4Addr, ConfigError> {
    if let Ok(ip) = name.parse() {
        return Ok(ip);
    }
    let interfaces = if_addrs::get_if_addrs()
        .map_err(|e| ConfigError(format!("{flag}: cannot list the network devices: {e}.")))?;
    interfaces
        .iter()
        .filter(|i| i.name == name)
        .find_map(|i| match i.ip() {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        })
        .ok_or_else(|| {
            let mut names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
            names.dedup();
            ConfigError(format!(
                "{flag} {name}: no network device of that name has an IPv4 address (the devices \
                 are {}).",
                names.join(", ")
            ))
        })
}

/// The address katcp listens on: `host` empty is every interface, as in katgpucbf; a name is
/// looked up, its first IPv4 address taken.
pub(super) fn katcp_address(host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    if host.is_empty() {
        return Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into());
    }
    let found = (host, port)
        .to_socket_addrs()
        .map_err(|e| ConfigError(format!("--katcp-host {host}: cannot resolve it: {e}.")))?
        .find(SocketAddr::is_ipv4);
    found.ok_or_else(|| ConfigError(format!("--katcp-host {host}: it has no IPv4 address.")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_by_name_or_address() {
        assert_eq!(
            interface_address("--recv-interface", "lo").unwrap(),
            Ipv4Addr::LOCALHOST
        );
        assert_eq!(
            interface_address("--recv-interface", "10.0.0.2").unwrap(),
            Ipv4Addr::new(10, 0, 0, 2)
        );
        let e = interface_address("--send-interface", "nosuchdev0")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--send-interface nosuchdev0: no network device"),
            "{e}"
        );
        assert!(e.contains("lo"), "{e}");
    }

    #[test]
    fn katcp_hosts() {
        assert_eq!(katcp_address("", 7147).unwrap().to_string(), "0.0.0.0:7147");
        assert_eq!(
            katcp_address("127.0.0.1", 1).unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert_eq!(
            katcp_address("localhost", 2).unwrap().to_string(),
            "127.0.0.1:2"
        );
    }
}

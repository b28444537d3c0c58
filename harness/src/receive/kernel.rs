//! Counters the kernel keeps for the whole host, read from `/proc`.

/// The kernel's count of UDP datagrams dropped for a full receive buffer, host-wide
/// (`/proc/net/snmp`). A rise during a trial says some receiver (maybe ours) fell behind.
pub fn udp_rcvbuf_errors() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let at = header.iter().position(|&h| h == "RcvbufErrors")?;
    values.get(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcvbuf_errors_are_readable() {
        // Present on Linux; the value itself is host-wide.
        assert!(udp_rcvbuf_errors().is_some());
    }
}

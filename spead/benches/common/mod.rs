//! What the benches share.

/// The environment variable `name` parsed, or `default` where it is unset or not understood.
pub(crate) fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("ignoring {name}={v}: not understood");
            default
        }),
        Err(_) => default,
    }
}

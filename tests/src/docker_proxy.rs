//! A Docker API version shim between testcontainers and an older Docker daemon.
//!
//! testcontainers 0.28 (bollard 0.21) sends every request as `/v1.53/...` and does not negotiate;
//! a daemon older than the client's API version refuses such requests ("client version 1.53 is
//! too new"). Debian 12's Docker Engine 20.10 speaks API 1.41. This shim listens on a Unix socket
//! of its own, rewrites the version in each request line down to the daemon's, and passes
//! everything else through byte for byte. It parses only request framing (Content-Length, chunked
//! bodies, and `Upgrade` hijacks, after which both directions are raw).
//!
//! Local only: a Unix socket to a Unix socket, no network traffic.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread;

use anyhow::{bail, Context, Result};

/// An API version `major.minor`.
pub type ApiVersion = (u32, u32);

/// The API version testcontainers' bollard asks for.
pub const CLIENT_API: ApiVersion = (1, 53);

fn parse_version(s: &str) -> Option<ApiVersion> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Asks the daemon at `socket` for its API version (an unversioned `GET /version`).
pub fn daemon_api_version(socket: &Path) -> Result<ApiVersion> {
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("connecting to the Docker daemon at {}", socket.display()))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .context("no HTTP body from /version")?;
    let v: serde_json::Value =
        serde_json::from_str(body.trim()).with_context(|| format!("/version answered {body:?}"))?;
    let api = v["ApiVersion"]
        .as_str()
        .context("no ApiVersion in /version")?;
    parse_version(api).with_context(|| format!("ApiVersion {api:?}"))
}

/// Rewrites `/vMAJOR.MINOR/` at the start of the request target down to `to` when it is newer.
fn rewrite_request_line(line: &str, to: ApiVersion) -> String {
    let mut parts = line.splitn(3, ' ');
    let (Some(method), Some(target), Some(rest)) = (parts.next(), parts.next(), parts.next())
    else {
        return line.to_string();
    };
    if let Some(after) = target.strip_prefix("/v") {
        if let Some((ver, tail)) = after.split_once('/') {
            if let Some(v) = parse_version(ver) {
                if v > to {
                    return format!("{method} /v{}.{}/{tail} {rest}", to.0, to.1);
                }
            }
        }
    }
    line.to_string()
}

/// Serves the shim on a new socket at `listen`, forwarding to `upstream`. Runs on background
/// threads for the life of the process.
pub fn spawn(listen: &Path, upstream: PathBuf, to: ApiVersion) -> Result<()> {
    let _ = std::fs::remove_file(listen);
    let listener =
        UnixListener::bind(listen).with_context(|| format!("binding {}", listen.display()))?;
    thread::Builder::new()
        .name("docker-api-shim".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                let upstream = upstream.clone();
                let _ = thread::Builder::new()
                    .name("docker-api-shim-conn".into())
                    .spawn(move || {
                        if let Err(e) = serve(client, &upstream, to) {
                            // Connections end in many ordinary ways; only odd ones are worth a line.
                            if e.downcast_ref::<io::Error>().is_none() {
                                eprintln!("docker API shim: {e:#}");
                            }
                        }
                    });
            }
        })?;
    Ok(())
}

fn serve(client: UnixStream, upstream: &Path, to: ApiVersion) -> Result<()> {
    let server = UnixStream::connect(upstream)?;
    // Responses go back untouched.
    let (mut s_read, mut c_write) = (server.try_clone()?, client.try_clone()?);
    let back = thread::spawn(move || {
        let _ = io::copy(&mut s_read, &mut c_write);
        let _ = c_write.shutdown(std::net::Shutdown::Both);
    });
    let mut reader = BufReader::new(client);
    let mut server_w = server;
    let result = forward_requests(&mut reader, &mut server_w, to);
    let _ = server_w.shutdown(std::net::Shutdown::Write);
    let _ = back.join();
    result
}

/// Forwards requests one after another, rewriting each request line.
fn forward_requests(
    reader: &mut BufReader<UnixStream>,
    server: &mut UnixStream,
    to: ApiVersion,
) -> Result<()> {
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(()); // the client closed the connection
        }
        let mut head = rewrite_request_line(line.trim_end_matches(['\r', '\n']), to);
        head.push_str("\r\n");
        let mut length: Option<u64> = None;
        let (mut chunked, mut upgrade) = (false, false);
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                bail!("connection closed inside a request head");
            }
            head.push_str(&h);
            let t = h.trim_end_matches(['\r', '\n']);
            if t.is_empty() {
                break;
            }
            if let Some((name, value)) = t.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                match name.as_str() {
                    "content-length" => length = value.parse().ok(),
                    "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                    "upgrade" => upgrade = true,
                    _ => {}
                }
            }
        }
        server.write_all(head.as_bytes())?;
        if chunked {
            copy_chunked(reader, server)?;
        } else if let Some(n) = length {
            let copied = io::copy(&mut reader.by_ref().take(n), server)?;
            if copied < n {
                bail!("connection closed inside a request body");
            }
        }
        if upgrade {
            // A hijacked stream (attach, exec): raw bytes from here on.
            io::copy(reader, server)?;
            return Ok(());
        }
    }
}

fn copy_chunked(reader: &mut BufReader<UnixStream>, server: &mut UnixStream) -> Result<()> {
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line)? == 0 {
            bail!("connection closed inside a chunked body");
        }
        server.write_all(size_line.as_bytes())?;
        let hex = size_line.trim().split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(hex, 16)
            .with_context(|| format!("chunk size line {size_line:?}"))?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let mut t = String::new();
                if reader.read_line(&mut t)? == 0 {
                    return Ok(());
                }
                server.write_all(t.as_bytes())?;
                if t.trim_end_matches(['\r', '\n']).is_empty() {
                    return Ok(());
                }
            }
        }
        // The chunk and its CRLF.
        let n = size + 2;
        if io::copy(&mut reader.by_ref().take(n), server)? < n {
            bail!("connection closed inside a chunk");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_newer_versions() {
        let to = (1, 41);
        assert_eq!(
            rewrite_request_line("POST /v1.53/containers/create?name=a HTTP/1.1", to),
            "POST /v1.41/containers/create?name=a HTTP/1.1"
        );
        assert_eq!(
            rewrite_request_line("GET /v1.40/version HTTP/1.1", to),
            "GET /v1.40/version HTTP/1.1"
        );
        assert_eq!(
            rewrite_request_line("GET /version HTTP/1.1", to),
            "GET /version HTTP/1.1"
        );
        assert_eq!(rewrite_request_line("garbage", to), "garbage");
    }
}

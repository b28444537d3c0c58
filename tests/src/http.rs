//! HTTP to the control APIs from the host, through ureq (the client the harness uses). The
//! engine's `GET /status` is read as `fgpu_api::engine::Status`, the type its server fills;
//! dsim's status is read as JSON.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fgpu_api::engine::{Output, Status};
use serde_json::Value;

use crate::wait_until;

/// HTTP to a control API from the host, with timeouts and without treating 4xx as an error.
pub struct Http {
    agent: ureq::Agent,
    pub base: String,
}

impl Http {
    pub fn new(port: u16) -> Http {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            // A fresh connection per request: a server may close a connection after refusing a
            // request whose body it did not read, and a pooled one would then fail the next
            // request ("peer disconnected") for a reason that is not the one under test.
            .max_idle_connections(0)
            .build()
            .into();
        Http {
            agent,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Any method, any body: (status, body text).
    pub fn send(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<(u16, String)> {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.unwrap_or_default().to_vec())?;
        let mut resp = self
            .agent
            .run(req)
            .with_context(|| format!("{method} {}{path}", self.base))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Ok((status, text))
    }

    pub fn get_json(&self, path: &str) -> Result<Value> {
        let (status, text) = self.send("GET", path, None)?;
        if status != 200 {
            bail!("GET {path}: {status} {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("GET {path}: {text}"))
    }

    pub fn get_text(&self, path: &str) -> Result<String> {
        let (status, text) = self.send("GET", path, None)?;
        if status != 200 {
            bail!("GET {path}: {status} {text}");
        }
        Ok(text)
    }

    /// The engine's `GET /status`, as the type its server fills.
    pub fn engine_status(&self) -> Result<Status> {
        let text = self.get_text("/status")?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "GET /status from {} is not the engine's status: {text}",
                self.base
            )
        })
    }

    pub fn put_json(&self, path: &str, body: &Value) -> Result<Value> {
        let (status, text) = self.send("PUT", path, Some(body.to_string().as_bytes()))?;
        if status != 200 {
            bail!("PUT {path} {body}: {status} {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("PUT {path}: {text}"))
    }

    /// Raw bytes on a new TCP connection; returns what came back (empty if it was closed).
    /// Deliberately not through the HTTP client: the garbage test sends bytes that are not HTTP,
    /// which no client would write.
    pub fn raw(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let addr = self.base.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        // The server may close as soon as it has seen enough: a failed write is an answer too.
        let _ = s.write_all(bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        Ok(out)
    }

    /// Waits until GET /health answers 200.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<()> {
        wait_until(timeout, "GET /health to answer 200", || {
            Ok(matches!(self.send("GET", "/health", None), Ok((200, _))))
        })
    }
}

/// The output the harness reads of an engine by default (its only output, else the one named
/// `wideband`: the compose engines' `--dst` output), from its status.
pub fn default_output(status: &Status) -> Result<&Output> {
    harness::control::choose_output(status, None)
        .map(|(_, o)| o)
        .context("the engine's status")
}

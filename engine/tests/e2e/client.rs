//! HTTP to the control APIs of the engine and dsim, through ureq (the client the harness uses).
//! The engine's `GET /status` is read as `fgpu_api::engine::Status`, the type its server fills:
//! a renamed or moved field fails here to compile or to parse, not as a silent zero. dsim's status
//! is read as JSON.

use std::net::SocketAddr;
use std::time::Duration;

use fgpu_api::engine::{Output, Status};
use serde_json::Value;

/// One control API (`http://ADDR`). Failures panic: this is a test's client.
pub(crate) struct Control {
    agent: ureq::Agent,
    base: String,
}

impl Control {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(10)))
            // A refusal (4xx) is an answer the tests check, not an error.
            .http_status_as_error(false)
            // A fresh connection per request, as the servers' tests expect of a simple client.
            .max_idle_connections(0)
            .build()
            .into();
        Self {
            agent,
            base: format!("http://{addr}"),
        }
    }

    /// Any method, with or without a JSON body: (status code, body text).
    pub(crate) fn send(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        self.send_with(method, path, body, &[])
    }

    /// [`send`](Self::send) with extra headers (e.g. `Authorization`).
    pub(crate) fn send_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let reply = match body {
            Some(b) => self.agent.run(request.body(b.to_string()).unwrap()),
            None => self.agent.run(request.body(()).unwrap()),
        };
        let mut reply = reply.unwrap_or_else(|e| panic!("{method} {}{path}: {e}", self.base));
        let code = reply.status().as_u16();
        let text = reply
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|e| panic!("{method} {}{path}: reading the reply: {e}", self.base));
        (code, text)
    }

    /// GET `path`, which must answer 200 with JSON.
    pub(crate) fn get_json(&self, path: &str) -> Value {
        let (code, body) = self.send("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// GET `path`, which must answer 200; the body as text.
    pub(crate) fn get_text(&self, path: &str) -> String {
        let (code, body) = self.send("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    /// PUT a JSON body, which must be accepted (200); the reply's JSON (Null if it has none).
    pub(crate) fn put_json(&self, path: &str, v: Value) -> Value {
        let (code, body) = self.send("PUT", path, Some(&v));
        assert_eq!(code, 200, "PUT {path} {v}: {body}");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// The engine's `GET /status`.
    pub(crate) fn engine_status(&self) -> Status {
        let (code, body) = self.send("GET", "/status", None);
        assert_eq!(code, 200, "GET /status: {body}");
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET /status is not the engine's status ({e}): {body}"))
    }
}

/// The engine's output named `wideband`: `--dst`'s, the only output of most tests' engines.
pub(crate) fn wideband(status: &Status) -> &Output {
    status
        .wideband()
        .unwrap_or_else(|| panic!("no wideband output in the engine's status: {status:?}"))
}

/// The engine's output `name`.
pub(crate) fn output<'a>(status: &'a Status, name: &str) -> &'a Output {
    status
        .output(name)
        .unwrap_or_else(|| panic!("no output {name:?} in the engine's status: {status:?}"))
}

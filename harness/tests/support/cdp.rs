//! Just enough of the Chrome DevTools Protocol to test a page in a real browser: headless
//! Chromium started with a debugging port, a tab opened on a URL, JavaScript evaluated in it, a
//! screenshot taken. (A full client crate generates the whole protocol at build time; four
//! calls do not need it.)

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// Chromium on PATH (or $CHROMIUM), if any.
pub(crate) fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .find_map(|name| {
        let out = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
    })
}

pub(crate) struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

/// A tab: its session on the browser's connection.
pub(crate) struct Tab(String);

impl Browser {
    /// Starts headless Chromium with its profile in `profile` and a window of `width` x `height`.
    pub(crate) fn launch(
        exe: &Path,
        profile: &Path,
        width: u32,
        height: u32,
    ) -> Result<Self, String> {
        let mut child = Command::new(exe)
            .args([
                "--headless",
                "--no-sandbox", // root in CI and in containers
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-port=0",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.display()),
                "about:blank",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        // Chromium says where its debugging endpoint is on stderr.
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                return Err("Chromium gave no DevTools endpoint within 30 s".into());
            }
        };
        let (ws, _) = tungstenite::connect(url.as_str()).map_err(|e| format!("{url}: {e}"))?;
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .map_err(|e| e.to_string())?;
        }
        Ok(Self {
            child,
            ws,
            next_id: 1,
        })
    }

    /// Sends one command and waits for its answer (events on the way are dropped).
    pub(crate) fn call(
        &mut self,
        tab: Option<&Tab>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(t) = tab {
            msg["sessionId"] = json!(t.0);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .map_err(|e| format!("{method}: {e}"))?;
        loop {
            let reply = self.ws.read().map_err(|e| format!("{method}: {e}"))?;
            let Message::Text(text) = reply else { continue };
            let v: Value = serde_json::from_str(text.as_str()).map_err(|e| e.to_string())?;
            if v["id"] != json!(id) {
                continue;
            }
            if let Some(err) = v.get("error") {
                return Err(format!("{method}: {err}"));
            }
            return Ok(v["result"].clone());
        }
    }

    /// Opens `url` in a new tab.
    pub(crate) fn open(&mut self, url: &str) -> Result<Tab, String> {
        let target = self.call(None, "Target.createTarget", json!({ "url": url }))?;
        let id = target["targetId"].clone();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": id, "flatten": true }),
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or("no session for the tab")?;
        Ok(Tab(session.to_string()))
    }

    /// Evaluates `expression` in the tab; its value as JSON.
    pub(crate) fn eval(&mut self, tab: &Tab, expression: &str) -> Result<Value, String> {
        let r = self.call(
            Some(tab),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            return Err(format!("{expression}: {e}"));
        }
        Ok(r["result"]["value"].clone())
    }

    /// The whole page as PNG.
    pub(crate) fn screenshot(&mut self, tab: &Tab) -> Result<Vec<u8>, String> {
        let r = self.call(
            Some(tab),
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        )?;
        let data = r["data"].as_str().ok_or("no screenshot data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| e.to_string())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

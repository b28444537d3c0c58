//! `harness watch` in its container: waiting for it to receive, its end, and reading its JSON
//! summary and progress lines.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fgpu_api::engine::Status;
use serde_json::Value;
use testcontainers::{Container, GenericImage};

use crate::{log_tail, wait_until, Pipeline, OUTPUT_STEP};

/// `harness watch` running in its container.
pub struct RunningWatch {
    c: Container<GenericImage>,
    deadline: Instant,
}

/// What `harness watch` ended with.
#[derive(Debug)]
pub struct Watch {
    pub exit_code: i64,
    /// The JSON summary it printed on stdout.
    pub summary: Value,
    /// Its progress lines and logs (stderr).
    pub stderr: String,
}

impl RunningWatch {
    /// A watch of `seconds` just started in container `c`. It is given two minutes beyond its
    /// duration to end and print its summary.
    pub(crate) fn new(c: Container<GenericImage>, seconds: u32) -> Self {
        Self {
            c,
            deadline: Instant::now() + Duration::from_secs(seconds as u64 + 120),
        }
    }

    /// Waits for a progress line that reports heaps arriving: the harness is receiving.
    pub fn wait_receiving(&self, timeout: Duration) -> Result<()> {
        wait_until(timeout, "the harness to report heaps arriving", || {
            let err = String::from_utf8_lossy(&self.c.stderr_to_vec()?).into_owned();
            Ok(err
                .lines()
                .any(|l| progress_heaps_per_s(l).is_some_and(|h| h > 0.0)))
        })
        .with_context(|| log_tail(&self.c, 20))
    }

    /// Waits for the watch to end and reads its summary.
    pub fn finish(self) -> Result<Watch> {
        let timeout = self.deadline.saturating_duration_since(Instant::now());
        let mut code = None;
        wait_until(timeout, "harness watch to exit", || {
            code = self.c.exit_code()?;
            Ok(code.is_some())
        })
        .with_context(|| log_tail(&self.c, 20))?;
        let stdout = String::from_utf8_lossy(&self.c.stdout_to_vec()?).into_owned();
        let stderr = String::from_utf8_lossy(&self.c.stderr_to_vec()?).into_owned();
        let summary = serde_json::from_str(stdout.trim()).with_context(|| {
            format!("harness watch printed no JSON summary:\n{stdout}\n--- stderr ---\n{stderr}")
        })?;
        Ok(Watch {
            exit_code: code.unwrap_or(-1),
            summary,
            stderr,
        })
    }
}

/// The heaps/s of a `harness watch` progress line
/// (`[   3.0 s] 0.025 Gsample/s  191 heaps/s  gaps 0 ...`).
pub fn progress_heaps_per_s(line: &str) -> Option<f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "heaps/s")?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

impl Watch {
    /// A failure's context: the summary, the last progress lines and the services' logs.
    pub fn context(&self, p: &Pipeline) -> String {
        format!(
            "{:#}\n--- progress ---\n{}\n{}",
            self.summary,
            self.progress_tail(8),
            p.logs()
        )
    }

    /// [`context`](Self::context) with the engine's own account at the end (input rejects by
    /// reason, queues, frames) and the last `lines` progress lines: for tests that disturb the
    /// stream on purpose.
    pub fn context_with_engine(&self, p: &Pipeline, end: &Status, lines: usize) -> String {
        format!(
            "{:#}\n--- engine input, queues and frames at the end ---\n{:#?}\n{:#?}\n{:#?}\n\
             --- progress ---\n{}\n{}",
            self.summary,
            end.input,
            end.queues,
            end.frames,
            self.progress_tail(lines),
            p.logs()
        )
    }

    /// Progress lines, for messages.
    pub fn progress_tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.stderr.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn u64_at(&self, pointer: &str) -> u64 {
        self.summary
            .pointer(pointer)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("no {pointer} in the summary: {:#}", self.summary))
    }

    /// Every substream's missing output timestamps, expanded from its [start, end) ranges.
    pub fn missing_per_substream(&self) -> Vec<Vec<u64>> {
        let subs = self.summary["per_substream"]
            .as_array()
            .expect("per_substream in the summary");
        subs.iter()
            .map(|s| {
                let mut out = Vec::new();
                for r in s["missing"].as_array().expect("missing ranges") {
                    let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                    let mut t = a;
                    while t < b {
                        out.push(t);
                        t += OUTPUT_STEP;
                    }
                }
                out
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line() {
        let l = "[   3.0 s] 0.025 Gsample/s  191 heaps/s  gaps 0  late 0";
        assert_eq!(progress_heaps_per_s(l), Some(191.0));
        assert_eq!(progress_heaps_per_s("demo-1  | starting"), None);
    }
}

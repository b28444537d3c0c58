//! The control servers' HTTP front, shared by `fengine` and `dsim` (both serve an axum router):
//! what one client may cost the process, and who may change things.
//!
//! - **Connections:** at most [`Limits::max_connections`] are served at once. The accept loop
//!   takes a permit before it accepts, so further connections wait in the kernel's listen backlog
//!   until one closes: a flood costs the backlog, not the process's memory, tasks or descriptors.
//! - **Head:** each request's head (request line and headers) must arrive within
//!   [`Limits::header_timeout`] of the connection's accept or of its previous reply, else the
//!   connection is closed without a reply (hyper's `header_read_timeout`). An idle keep-alive
//!   connection is closed the same way.
//! - **Body:** the body must arrive whole within [`Limits::body_timeout`] of the head and be at most
//!   [`Limits::max_body`] bytes, before any handler sees the request: else 408 or 413 with one
//!   sentence, the connection closed and nothing changed. A whole request therefore arrives
//!   within `header_timeout + body_timeout` or is cut off. A body up to 4 times the limit is
//!   read to its end and discarded before the 413, so that the client (which sends its body
//!   before it reads) sees the reply; a larger one is refused as soon as its length is known.
//! - **Token:** with [`Limits::token`] set, every request but GET and HEAD must carry
//!   `Authorization: Bearer TOKEN` (compared in constant time), else 401 with one sentence. GET
//!   (health, status, metrics and every other read) stays open.
//!
//! Handlers are not timed out: a request that passed these checks runs to its end, so that a
//! change that was made always gets its reply (dsim builds a new signal for up to seconds).
//! Refusals are `{"error": "<sentence>"}`, like the servers' own.
//!
//! [`protect`] adds the request checks to a router; [`serve`] is the accept loop. [`process`]
//! gives both servers' `GET /metrics` the standard `process_*` series (memory, descriptors,
//! threads), so that they can be read over HTTP where `/proc` cannot.

pub mod process;

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use subtle::ConstantTimeEq;
use tokio::sync::{watch, Semaphore};

/// Connections served at once by default. A control client needs one or two; 64 leaves room for
/// several harnesses, scrapers and a person with curl.
pub const MAX_CONNECTIONS: usize = 64;

/// Time a client has for a request's head by default. Longer than the 15 s for which ureq (the
/// harness's client) keeps an idle connection for reuse, so that the server never closes a
/// pooled connection under a client about to send on it.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// Time a client has for a request's body, once the head is in, by default. The largest body (the
/// engine's per-channel gains, a few MiB) takes well under a second on any link a control client
/// uses.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// A body past the limit is still read (and discarded) up to this many times the limit, so that
/// the client sees the 413 rather than a connection reset; past that it is cut off at once.
const DRAIN_FACTOR: usize = 4;

/// How long [`serve`], once told to stop, waits for the requests in flight to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A bearer token for changes. Its `Debug` never shows it, so that no log or error carries it.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl Token {
    /// Whether `headers` carry `Authorization: Bearer <this token>`. The scheme's case does not
    /// matter (RFC 9110 §11.1); the token is compared in constant time (its length may show).
    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let value = value.as_bytes();
        let scheme = b"bearer ";
        if value.len() < scheme.len() || !value[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return false;
        }
        let given = value[scheme.len()..].trim_ascii();
        given.ct_eq(self.0.as_bytes()).into()
    }
}

/// Why a control token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// An empty token would admit nobody, or be a mistake for no token.
    #[error("the control token is empty: give one, or leave it out (and its environment variable unset)")]
    Empty,
    /// A token that cannot travel in an HTTP header as given.
    #[error("the control token must be 1 to 1024 visible ASCII characters without spaces")]
    Unusable,
}

impl FromStr for Token {
    type Err = TokenError;

    /// One to 1024 visible ASCII characters: the token travels in an HTTP header.
    fn from_str(s: &str) -> Result<Self, TokenError> {
        if s.is_empty() {
            return Err(TokenError::Empty);
        }
        if s.len() > 1024 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Unusable);
        }
        Ok(Self(s.into()))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(hidden)")
    }
}

/// What a control server allows one client.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request body in bytes (413 beyond).
    pub max_body: usize,
    /// Time for a request's head, from the accept or the previous reply (the connection is
    /// closed beyond).
    pub header_timeout: Duration,
    /// Time for a request's body, once its head is in (408 beyond).
    pub body_timeout: Duration,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// The bearer token that requests other than GET and HEAD must carry, if any.
    pub token: Option<Token>,
}

impl Limits {
    /// The default timeouts and connection cap, with this body limit and token.
    pub fn new(max_body: usize, token: Option<Token>) -> Self {
        Self {
            max_body,
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            token,
        }
    }
}

/// What the request checks need of [`Limits`].
struct Checks {
    max_body: usize,
    body_timeout: Duration,
    token: Option<Token>,
}

/// `router` with the request checks in front of every route: the token for changes, then the body
/// read whole under the size limit and the body timeout. Call it once every route is in place.
pub fn protect(router: Router, limits: &Limits) -> Router {
    let checks = Arc::new(Checks {
        max_body: limits.max_body,
        body_timeout: limits.body_timeout,
        token: limits.token.clone(),
    });
    router
        .layer(axum::middleware::from_fn_with_state(checks, check))
        // The body arrives read and within the limit: axum's own 2 MiB default must not apply.
        .layer(DefaultBodyLimit::disable())
}

/// A refusal in the servers' shape, on a connection that then closes (the rest of a refused body
/// is never read).
fn refuse(code: StatusCode, sentence: String) -> Response {
    (
        code,
        [(header::CONNECTION, HeaderValue::from_static("close"))],
        Json(serde_json::json!({ "error": sentence })),
    )
        .into_response()
}

async fn check(State(c): State<Arc<Checks>>, req: Request, next: Next) -> Response {
    if let Some(token) = &c.token {
        let reads = matches!(*req.method(), Method::GET | Method::HEAD);
        if !reads && !token.admits(req.headers()) {
            let sentence = if req.headers().contains_key(header::AUTHORIZATION) {
                "the control token given is not this server's: send Authorization: Bearer TOKEN with the token it was started with."
            } else {
                "changes need the control token: send Authorization: Bearer TOKEN with the token this server was started with."
            };
            let mut r = refuse(StatusCode::UNAUTHORIZED, sentence.into());
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"control\""),
            );
            return r;
        }
    }
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than this server's limit of {} bytes.",
                c.max_body
            ),
        )
    };
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let drain = c.max_body.saturating_mul(DRAIN_FACTOR);
    if announced.is_some_and(|n| n > drain as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let read = read_body(body, c.max_body, drain);
    match tokio::time::timeout(c.body_timeout, read).await {
        Ok(Ok(Some(body))) => next.run(Request::from_parts(parts, Body::from(body))).await,
        Ok(Ok(None)) => too_large(),
        Ok(Err(e)) => refuse(
            StatusCode::BAD_REQUEST,
            format!("the request body could not be read: {e}."),
        ),
        // Announced too large and slow to drain: it is the size that is wrong.
        Err(_) if announced.is_some_and(|n| n > c.max_body as u64) => too_large(),
        Err(_) => refuse(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s of its headers.",
                c.body_timeout.as_secs_f64()
            ),
        ),
    }
}

/// `body` whole if it is at most `max` bytes, else `None`. Past `max` it reads on and discards,
/// up to `drain` bytes in all: a client sends its whole body before it reads the reply, and one
/// whose body is left unread gets a reset connection instead of the 413. Memory stays within
/// `max`.
async fn read_body(
    mut body: Body,
    max: usize,
    drain: usize,
) -> Result<Option<Vec<u8>>, axum::Error> {
    let mut kept = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        total = total.saturating_add(data.len());
        if total <= max {
            kept.extend_from_slice(&data);
        } else if total > drain {
            return Ok(None);
        }
    }
    Ok((total <= max).then_some(kept))
}

/// Serves `app` on `listener` until `shutdown` completes, at most `limits.max_connections`
/// connections at a time, each held to `limits.header_timeout` for every request's head (HTTP/1.1).
/// The router should have been through [`protect`]. Once `shutdown` completes, no connection is
/// accepted any more, idle ones close, and requests in flight get up to 5 s to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) {
    let cap = limits.max_connections.clamp(1, u32::MAX as usize);
    let permits = Arc::new(Semaphore::new(cap));
    let (closing_tx, closing) = watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let http = Arc::new(http);
    let mut shutdown = pin!(shutdown);
    loop {
        // A permit first: past the cap, connections wait unaccepted.
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before its accept: wait a little
                    // rather than spin.
                    tracing::warn!("control: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let http = http.clone();
        let service = TowerToHyperService::new(app.clone());
        let closing = closing.clone();
        tokio::spawn(async move {
            let mut conn = pin!(http.serve_connection(TokioIo::new(stream), service));
            let served = tokio::select! {
                served = conn.as_mut() => served,
                () = told_to_close(closing) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::debug!("control connection closed: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    // Every permit back: every connection closed. Those still open after the grace period go
    // with the runtime.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, permits.acquire_many(cap as u32)).await;
}

/// Completes once [`serve`] stops (or is gone).
async fn told_to_close(mut closing: watch::Receiver<bool>) {
    let _ = closing.wait_for(|c| *c).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_and_never_shown() {
        assert_eq!("".parse::<Token>().unwrap_err(), TokenError::Empty);
        assert_eq!(
            "two words".parse::<Token>().unwrap_err(),
            TokenError::Unusable
        );
        assert!("caf\u{e9}".parse::<Token>().is_err());
        let t: Token = "s3cret-T0ken_/+=".parse().unwrap();
        assert_eq!(format!("{t:?}"), "Token(hidden)");
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            t.admits(&h)
        };
        assert!(with("Bearer s3cret-T0ken_/+="));
        assert!(with("bearer  s3cret-T0ken_/+= "));
        assert!(!with("Bearer s3cret-T0ken_/+"));
        assert!(!with("Bearer s3cret-T0ken_/+=x"));
        assert!(!with("Basic s3cret-T0ken_/+="));
        assert!(!with("s3cret-T0ken_/+="));
        assert!(!t.admits(&HeaderMap::new()));
    }
}

//! Approval notifications: each new pending approval is POSTed to `approvals.notifyUrl`
//! as `{"event":"approval.pending","approval":APPROVAL}` so a chat bot or ticket system
//! can page a person (DESIGN §9, "best effort, bounded retries").
//!
//! Invariants: the call path never waits on the receiver — [`Notifier::pending`] only
//! `try_send`s into a bounded queue and, when it is full, drops the approval and counts
//! it (the approval itself stays pending and listed at `GET /approvals`; only the page is
//! lost). One background task sends in order; each approval gets at most [`ATTEMPTS`]
//! attempts of at most [`ATTEMPT_TIMEOUT`] each, so a receiver that accepts and never
//! answers holds the queue at most ~16 s per approval, and the queue bound stops that
//! from growing into an endless backlog. Logs name the URL without its userinfo or query
//! (either may hold a secret) and never an approval's arguments. Dropping the
//! [`Notifier`] closes the queue: the task sends what is already queued, then ends.

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::Rng;
use serde_json::Value;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::input::url::shown;

/// Approvals waiting to be sent; beyond this new ones are dropped (and counted).
const QUEUE: usize = 1024;
/// One attempt, from connecting to the answer's last byte.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The waits before the second and third attempts (jitter is added on top).
const BACKOFF: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];
const ATTEMPTS: usize = BACKOFF.len() + 1;
/// At most one "dropped" warning per this long: a flood of drops must not flood the log.
const DROP_WARN_EVERY: Duration = Duration::from_secs(10);
/// How much of a receiver's answer is read (to reuse the connection); the rest is ignored.
const ANSWER_LIMIT: usize = 64 * 1024;

/// The sending side: cheap to call from the call path, owns the background task's queue.
pub struct Notifier {
    queue: mpsc::Sender<Value>,
    counts: Arc<Counts>,
    target: Arc<Target>,
    born: Instant,
    /// Milliseconds since `born` before which no other "dropped" warning is logged.
    next_drop_warn_ms: AtomicU64,
}

#[derive(Default)]
struct Counts {
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

impl Notifier {
    /// Starts the background sender for `url` (http:// or https://). Err: a URL that can't
    /// be used, with why. Must run inside the tokio runtime; https loads the system's CA
    /// certificates once, here.
    pub fn start(url: &str) -> Result<Notifier, String> {
        let target = Arc::new(Target::parse(url)?);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "approvals.notifyUrl: the notifier must start inside the tokio runtime")?;
        let (queue, receiver) = mpsc::channel(QUEUE);
        let counts = Arc::new(Counts::default());

        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(ATTEMPT_TIMEOUT));
        let mut builder = Client::builder(TokioExecutor::new());
        // One task sends one approval at a time: one idle connection is all it can reuse.
        builder
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(30));
        let (task_target, task_counts) = (target.clone(), counts.clone());
        if target.tls {
            http.enforce_http(false);
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(provider)
                .map_err(|e| {
                    format!(
                        "approvals.notifyUrl: no system CA certificates to check {} with ({e}); \
                         install ca-certificates or use http:// behind a TLS-terminating proxy",
                        target.shown
                    )
                })?
                .https_only()
                .enable_http1()
                .wrap_connector(http);
            runtime.spawn(send_all(
                builder.build(https),
                task_target,
                receiver,
                task_counts,
            ));
        } else {
            runtime.spawn(send_all(
                builder.build(http),
                task_target,
                receiver,
                task_counts,
            ));
        }
        Ok(Notifier {
            queue,
            counts,
            target,
            born: Instant::now(),
            next_drop_warn_ms: AtomicU64::new(0),
        })
    }

    /// Queues one new pending approval (the APPROVAL JSON object) for delivery; never waits.
    /// When the queue is full the approval is dropped and counted (a warn log at most once
    /// per 10 s).
    pub fn pending(&self, approval: Value) {
        match self.queue.try_send(approval) {
            Ok(()) => {}
            // Closed only if the task is gone (the runtime is shutting down): also a drop.
            Err(TrySendError::Full(_) | TrySendError::Closed(_)) => self.note_drop(),
        }
    }

    /// Deliveries that failed for good.
    pub fn failed(&self) -> u64 {
        self.counts.failed.load(Relaxed)
    }

    /// Approvals dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counts.dropped.load(Relaxed)
    }

    /// Approvals a receiver accepted with a 2xx.
    pub fn delivered(&self) -> u64 {
        self.counts.delivered.load(Relaxed)
    }

    fn note_drop(&self) {
        let dropped = self.counts.dropped.fetch_add(1, Relaxed) + 1;
        let now = self.born.elapsed().as_millis() as u64;
        let next = self.next_drop_warn_ms.load(Relaxed);
        let window = DROP_WARN_EVERY.as_millis() as u64;
        // Whoever wins the exchange warns; concurrent droppers see the new window and don't.
        if now >= next
            && self
                .next_drop_warn_ms
                .compare_exchange(next, now + window, Relaxed, Relaxed)
                .is_ok()
        {
            tracing::warn!(
                url = %self.target.shown,
                dropped,
                queue = QUEUE,
                "approval notifications dropped: the receiver is slower than approvals arrive; \
                 the approvals stay pending at GET /approvals"
            );
        }
    }
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("url", &self.target.shown)
            .field("delivered", &self.delivered())
            .field("failed", &self.failed())
            .field("dropped", &self.dropped())
            .finish()
    }
}

/// Where notifications go, parsed once.
struct Target {
    /// The request URI: scheme, host, port, path and query, without userinfo.
    uri: Uri,
    tls: bool,
    /// `Basic` credentials from the URL's userinfo, if it had any.
    authorization: Option<HeaderValue>,
    /// What logs and errors show: no userinfo, no query.
    shown: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        // The URL itself may hold a password or a token: never shown whole.
        let bad = |why: &str| format!("approvals.notifyUrl: {why}, got {}", shown(url));
        let uri: Uri = url
            .parse()
            .map_err(|_| bad("not a URL (want http://host[:port]/path or https://...)"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("only http:// and https:// URLs can be notified")),
        };
        let authority = uri.authority().map(Authority::as_str).unwrap_or("");
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        if host.is_empty() || host.starts_with(':') {
            return Err(bad("the URL has no host"));
        }
        let scheme = if tls { Scheme::HTTPS } else { Scheme::HTTP };
        let path = uri.path_and_query().cloned();
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(scheme);
        parts.authority = Some(
            host.parse()
                .map_err(|_| bad("the URL's host is not valid"))?,
        );
        parts.path_and_query = Some(path.unwrap_or_else(|| PathAndQuery::from_static("/")));
        let uri = Uri::from_parts(parts).map_err(|_| bad("not a URL"))?;
        Ok(Target {
            authorization: userinfo.map(basic),
            uri,
            tls,
            shown: shown(url),
        })
    }

    fn request(&self, body: Bytes) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/json");
        if let Some(credentials) = &self.authorization {
            request = request.header(AUTHORIZATION, credentials.clone());
        }
        request.body(Full::new(body))
    }
}

/// `user:password` (percent-encoded, as in a URL) as a `Basic` Authorization value.
fn basic(userinfo: &str) -> HeaderValue {
    use base64::Engine as _;
    let decoded = percent_encoding::percent_decode_str(userinfo).decode_utf8_lossy();
    let encoded = base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes());
    // Base64 is always a valid header value; the fallback is never taken.
    let mut value = HeaderValue::try_from(format!("Basic {encoded}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

/// The background task: one approval at a time, until the [`Notifier`] is dropped and
/// the queue is empty.
async fn send_all<C>(
    client: Client<C, Full<Bytes>>,
    target: Arc<Target>,
    mut queue: mpsc::Receiver<Value>,
    counts: Arc<Counts>,
) where
    C: Connect + Clone + Send + Sync + 'static,
{
    while let Some(approval) = queue.recv().await {
        let id = approval
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let body = serde_json::json!({"event": "approval.pending", "approval": approval});
        match deliver(&client, &target, Bytes::from(body.to_string())).await {
            Ok(()) => {
                counts.delivered.fetch_add(1, Relaxed);
            }
            Err(why) => {
                counts.failed.fetch_add(1, Relaxed);
                tracing::warn!(
                    url = %target.shown,
                    approval = %id,
                    error = %why,
                    attempts = ATTEMPTS,
                    "approval notification failed for good; the approval stays pending at GET /approvals"
                );
            }
        }
    }
}

/// Up to [`ATTEMPTS`] attempts, waiting [`BACKOFF`] (plus jitter) between them.
async fn deliver<C>(
    client: &Client<C, Full<Bytes>>,
    target: &Target,
    body: Bytes,
) -> Result<(), Why>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let mut waits = BACKOFF.iter();
    loop {
        let why = match attempt(client, target, body.clone()).await {
            Outcome::Delivered => return Ok(()),
            Outcome::Final(why) => return Err(why),
            Outcome::Retry(why) => why,
        };
        let Some(wait) = waits.next() else {
            return Err(why);
        };
        tracing::debug!(url = %target.shown, error = %why, "approval notification will be retried");
        tokio::time::sleep(jittered(*wait)).await;
    }
}

/// One POST, bounded by [`ATTEMPT_TIMEOUT`] from connecting to reading the answer.
async fn attempt<C>(client: &Client<C, Full<Bytes>>, target: &Target, body: Bytes) -> Outcome
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let deadline = tokio::time::Instant::now() + ATTEMPT_TIMEOUT;
    let request = match target.request(body) {
        Ok(request) => request,
        Err(e) => return Outcome::Final(Why::Error(e.to_string())),
    };
    let response = match tokio::time::timeout_at(deadline, client.request(request)).await {
        Err(_) => return Outcome::Retry(Why::TimedOut),
        // Connect errors and connections broken mid-answer alike: the page may not have
        // arrived, and a duplicate carries the same approval id for the receiver to spot.
        Ok(Err(e)) => return Outcome::Retry(Why::Error(error_chain(&e))),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    // Read the answer so the connection can be reused; what it says doesn't matter, and a
    // receiver that stalls after its status line does not undo the status it gave.
    let answer = Limited::new(response.into_body(), ANSWER_LIMIT).collect();
    let _ = tokio::time::timeout_at(deadline, answer).await;
    judge(status)
}

/// What one attempt came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Delivered,
    /// Worth another attempt: the receiver may be back in a moment.
    Retry(Why),
    /// Not worth another attempt: the receiver refused this request as such.
    Final(Why),
}

#[derive(Debug, PartialEq, Eq)]
enum Why {
    Status(StatusCode),
    TimedOut,
    Error(String),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Status(status) => write!(f, "the receiver answered {status}"),
            Why::TimedOut => write!(f, "no answer within {ATTEMPT_TIMEOUT:?}"),
            Why::Error(e) => f.write_str(e),
        }
    }
}

/// 2xx is delivered; 429 and 5xx are the receiver's passing trouble; anything else
/// (4xx, an unfollowed redirect) would be refused again.
fn judge(status: StatusCode) -> Outcome {
    if status.is_success() {
        Outcome::Delivered
    } else if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        Outcome::Retry(Why::Status(status))
    } else {
        Outcome::Final(Why::Status(status))
    }
}

/// `wait` plus up to a quarter more, so many sidecars paging one receiver spread out.
fn jittered(wait: Duration) -> Duration {
    wait.mul_f64(1.0 + rand::rng().random_range(0.0..0.25))
}

/// An error and its causes on one line: hyper's own message ("client error (Connect)")
/// says too little to act on.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_keeps_path_and_query_but_shows_neither_userinfo_nor_query() {
        let target = Target::parse("https://bot:s%40cret@hooks.example:8443/page?token=t").unwrap();
        assert!(target.tls);
        assert_eq!(
            target.uri.to_string(),
            "https://hooks.example:8443/page?token=t"
        );
        assert_eq!(target.shown, "https://hooks.example:8443/page");
        // base64("bot:s@cret")
        assert_eq!(target.authorization.unwrap(), "Basic Ym90OnNAY3JldA==");
    }

    #[test]
    fn parse_fills_in_the_root_path() {
        let target = Target::parse("http://127.0.0.1:9000").unwrap();
        assert!(!target.tls);
        assert_eq!(target.uri.to_string(), "http://127.0.0.1:9000/");
        assert!(target.authorization.is_none());
    }

    #[test]
    fn parse_refuses_what_cannot_be_posted_to() {
        for url in [
            "",
            "not a url",
            "ftp://host/x",
            "hooks.example/x",
            "http://",
            "http://u@/x",
        ] {
            let err = Target::parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url:?} accepted"));
            assert!(err.starts_with("approvals.notifyUrl: "), "{err}");
        }
    }

    #[test]
    fn judge_retries_only_what_may_pass_later() {
        assert_eq!(judge(StatusCode::OK), Outcome::Delivered);
        assert_eq!(judge(StatusCode::NO_CONTENT), Outcome::Delivered);
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::BAD_GATEWAY,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            assert_eq!(judge(status), Outcome::Retry(Why::Status(status)));
        }
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::NOT_FOUND,
            StatusCode::FOUND,
        ] {
            assert_eq!(judge(status), Outcome::Final(Why::Status(status)));
        }
    }

    #[test]
    fn jitter_adds_at_most_a_quarter() {
        for _ in 0..100 {
            let wait = jittered(Duration::from_millis(200));
            assert!(
                wait >= Duration::from_millis(200) && wait < Duration::from_millis(250),
                "{wait:?}"
            );
        }
    }

    #[test]
    fn start_outside_the_runtime_is_an_error_not_a_panic() {
        let err = Notifier::start("http://127.0.0.1:9/").unwrap_err();
        assert!(err.contains("tokio runtime"), "{err}");
    }
}

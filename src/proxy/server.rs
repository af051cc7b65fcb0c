//! The HTTP listener: HTTP/1.1 and h2c on one port, with the connection-level limits
//! (header count backstop, header-read timeout, buffer size, connection cap, write
//! timeout) and graceful shutdown. It knows nothing about tools; it calls a handler per
//! request. The agent port, the admin port and the injector's webhook all serve through
//! it, so each gets the same protection.
//!
//! Every connection's inbound bytes are watched for ambiguous framing ([`framing`]): a
//! request whose head carries both `Content-Length` and `Transfer-Encoding` reaches the
//! handler marked [`AmbiguousFraming`] (the agent pipeline refuses it), and its response
//! closes the connection. A connection must also bring its first request within the
//! header-read timeout, HTTP/2 included.
//!
//! A client that does not read the answers it asked for is cut off after the write
//! timeout ([`stall`]), freeing its slot. A connection closed while its client may still
//! be sending (an answer given before the body was read) closes lingering ([`linger`]),
//! so the client reads the answer instead of a reset. Server-side closes are counted by
//! reason ([`close`]). Every 401 carries `WWW-Authenticate` (RFC 9110 §11.6.1): `Bearer`
//! unless the handler gave a richer challenge (the MCP endpoint's OAuth one).

mod close;
mod connection;
mod framing;
mod linger;
mod stall;
mod stream;

pub use close::{Closes, Reason as CloseReason};
pub use framing::AmbiguousFraming;
pub use linger::Linger;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::Limits;
use crate::proxy::body::Body;
use crate::tls::TlsConfig;
use connection::{Peer, Served};

/// Connection-level limits of one listener.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    /// hyper's own cap, a backstop above `limits.maxHeaders`: the pipeline counts headers
    /// itself so that a request just over the limit gets the structured 431.
    pub max_headers_backstop: usize,
    pub max_connections: usize,
    /// At most this many open connections from one client address (`None`: no cap): on
    /// the admin port, so that one client can't take every slot and starve the kubelet's
    /// probes and the approvers.
    pub per_address: Option<usize>,
    pub drain_timeout: Duration,
    /// A connection whose writes wait this long for its client to read is closed.
    pub write_timeout: Duration,
    /// How a connection closed before its request was read whole lingers.
    pub linger: Linger,
    /// Put each connection's ends in its requests' extensions ([`Connection`]): only the
    /// exported spans read them, so without an exporter no request pays for it.
    pub tag_connections: bool,
    /// Where server-side closes are counted.
    pub closes: Closes,
}

impl ConnLimits {
    pub fn from_settings(limits: &Limits) -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
            max_headers_backstop: (limits.max_headers * 2).clamp(limits.max_headers + 1, 1000),
            max_connections: limits.max_connections.max(1),
            per_address: None,
            drain_timeout: Duration::from_millis(limits.drain_timeout_ms),
            write_timeout: Duration::from_millis(limits.write_timeout_ms.max(1)),
            linger: Linger::for_body(
                limits.max_body_bytes as u64,
                Duration::from_millis(limits.body_read_timeout_ms),
            ),
            tag_connections: false,
            closes: Closes::default(),
        }
    }

    /// For the admin listener: small, fixed limits, and the agent port's write timeout.
    pub fn admin(write_timeout: Duration) -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_secs(5),
            max_headers_backstop: 100,
            max_connections: 64,
            per_address: Some(16),
            drain_timeout: Duration::from_secs(1),
            write_timeout,
            linger: Linger::for_body(64 * 1024, Duration::from_secs(5)),
            tag_connections: false,
            closes: Closes::default(),
        }
    }
}

/// The client's address, in every request's extensions: what refusals of requests
/// that name no agent are limited by (`proxy::anonymous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

/// Serves `listener` until `shutdown` resolves, then lets in-flight requests finish
/// within the drain timeout.
pub async fn serve<H, Fut>(
    listener: TcpListener,
    limits: ConnLimits,
    tls: Option<Arc<TlsConfig>>,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let builder = Arc::new(builder(&limits));
    let limits = Arc::new(limits);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let addresses = limits.per_address.map(PerAddress::new);
    tokio::pin!(shutdown);
    loop {
        // At the connection cap, stop accepting: new connections wait in the backlog.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            () = &mut shutdown => break,
        };
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Over its address's share: closed at once, its slot back.
        let Ok(share) = addresses.as_ref().map(|a| a.take(client.ip())).transpose() else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = limits
            .tag_connections
            .then(|| stream.local_addr().ok())
            .flatten()
            .map(|server| Connection {
                client,
                server,
                client_ip: Arc::from(client.ip().to_string()),
                server_ip: Arc::from(server.ip().to_string()),
                tls: tls.is_some(),
            });
        let served = Served {
            builder: builder.clone(),
            watcher: graceful.watcher(),
            limits: limits.clone(),
        };
        let handler = handler.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let peer = Peer {
                identity: None,
                client,
                connection,
            };
            match tls {
                None => served.serve(stream, handler, peer).await,
                Some(tls) => served.serve_tls(&tls, stream, handler, peer).await,
            }
            // The slot is freed only now: after a lingering close, too.
            drop(permit);
            drop(share);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain timeout passed with calls still in flight");
    }
}

/// Open connections per client address, for a listener that caps them. Holds only the
/// addresses with a connection open, so it is bounded by the listener's own cap.
#[derive(Clone)]
struct PerAddress {
    cap: usize,
    open: Arc<std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>>,
}

/// One connection's place in its address's share, given back when dropped.
struct Share {
    of: PerAddress,
    address: IpAddr,
}

impl PerAddress {
    fn new(cap: usize) -> PerAddress {
        PerAddress {
            cap: cap.max(1),
            open: Arc::default(),
        }
    }

    /// A place for one more connection from `address`, unless it has its share.
    fn take(&self, address: IpAddr) -> Result<Share, ()> {
        let mut open = self.open.lock().map_err(|_| ())?;
        let count = open.entry(address).or_insert(0);
        if *count >= self.cap {
            return Err(());
        }
        *count += 1;
        Ok(Share {
            of: self.clone(),
            address,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let Ok(mut open) = self.of.open.lock() {
            if let Some(count) = open.get_mut(&self.address) {
                *count -= 1;
                if *count == 0 {
                    open.remove(&self.address);
                }
            }
        }
    }
}

fn builder(limits: &ConnLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(limits.max_headers_backstop)
        .max_buf_size(256 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(64 * 1024)
        .max_concurrent_streams(256);
    builder
}

/// The two ends of a connection, in each request's extensions (for the span). The
/// addresses are formatted once per connection, not per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub client: std::net::SocketAddr,
    pub server: std::net::SocketAddr,
    pub client_ip: Arc<str>,
    pub server_ip: Arc<str>,
    pub tls: bool,
}

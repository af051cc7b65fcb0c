//! The HTTP listener: HTTP/1.1 and h2c on one port, with the connection-level limits
//! (header count backstop, header-read timeout, buffer size, connection cap) and
//! graceful shutdown. It knows nothing about tools; it calls a handler per request.
//!
//! Every connection's inbound bytes are watched for ambiguous framing ([`framing`]): a
//! request whose head carries both `Content-Length` and `Transfer-Encoding` reaches the
//! handler marked [`AmbiguousFraming`] (the agent pipeline refuses it), and its response
//! closes the connection. A connection must also bring its first request within the
//! header-read timeout, HTTP/2 included.

mod framing;

pub use framing::AmbiguousFraming;

use http::{header, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::Limits;
use crate::proxy::body::Body;
use crate::proxy::inline_wake::inline_wakes;
use crate::tls::{PeerIdentity, TlsConfig};
use framing::{Tally, Watched};

/// Connection-level limits of one listener.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    /// hyper's own cap, a backstop above `limits.maxHeaders`: the pipeline counts headers
    /// itself so that a request just over the limit gets the structured 431.
    pub max_headers_backstop: usize,
    pub max_connections: usize,
    pub drain_timeout: Duration,
    /// Put each connection's ends in its requests' extensions ([`Connection`]): only the
    /// exported spans read them, so without an exporter no request pays for it.
    pub tag_connections: bool,
}

impl ConnLimits {
    pub fn from_settings(limits: &Limits) -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
            max_headers_backstop: (limits.max_headers * 2).clamp(limits.max_headers + 1, 1000),
            max_connections: limits.max_connections.max(1),
            drain_timeout: Duration::from_millis(limits.drain_timeout_ms),
            tag_connections: false,
        }
    }

    /// For the admin listener: small, fixed limits.
    pub fn admin() -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_secs(5),
            max_headers_backstop: 100,
            max_connections: 64,
            drain_timeout: Duration::from_secs(1),
            tag_connections: false,
        }
    }
}

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
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let handler = handler.clone();
        let tls = tls.clone();
        let head_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let tally = Arc::new(Tally::default());
            match tls {
                None => {
                    let io = TokioIo::new(Watched::new(stream, tally.clone()));
                    let peer = Peer {
                        identity: None,
                        connection,
                    };
                    serve_io(&builder, watcher, io, handler, peer, tally, head_timeout).await
                }
                Some(tls) => {
                    // The handshake gets the same budget as a request head: a client
                    // that stalls it can't hold a connection slot.
                    let accepted =
                        tokio::time::timeout(head_timeout, tls.acceptor().accept(stream)).await;
                    let stream = match accepted {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => return tracing::debug!("TLS handshake timed out"),
                    };
                    let peer = tls.peer_identity(stream.get_ref().1);
                    if tls.requires_client_cert() && peer.is_none() {
                        return tracing::info!("client certificate names no agent; closing");
                    }
                    let io = TokioIo::new(Watched::new(stream, tally.clone()));
                    let peer = Peer {
                        identity: peer,
                        connection,
                    };
                    serve_io(&builder, watcher, io, handler, peer, tally, head_timeout).await
                }
            }
            drop(permit);
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

/// Who is on the other end of a connection.
struct Peer {
    identity: Option<PeerIdentity>,
    connection: Option<Connection>,
}

/// Serves one connection; a verified client identity, the connection's ends and the
/// [`AmbiguousFraming`] mark ride along in request extensions.
async fn serve_io<I, H, Fut>(
    builder: &auto::Builder<TokioExecutor>,
    watcher: Watcher,
    io: I,
    handler: H,
    peer: Peer,
    tally: Arc<Tally>,
    first_request: Duration,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let served = tally.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        if let Some(identity) = &peer.identity {
            request.extensions_mut().insert(identity.clone());
        }
        if let Some(connection) = &peer.connection {
            request.extensions_mut().insert(connection.clone());
        }
        let ambiguous = tally.next_is_ambiguous();
        if ambiguous {
            request.extensions_mut().insert(AmbiguousFraming);
        }
        let response = handler(request);
        async move {
            let mut response = response.await;
            if ambiguous {
                // The rest of the connection can't be trusted to be framed as it reads.
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let connection = watcher.watch(builder.serve_connection(io, service).into_owned());
    // hyper's header-read timeout starts only once hyper-util has told HTTP/1 from
    // HTTP/2, which waits for bytes: a client that connects and sends nothing (or
    // trickles the HTTP/2 preface) would hold its connection slot forever. So the first
    // request must arrive within the same budget as a request head.
    let first = async {
        tokio::time::sleep(first_request).await;
        if served.served() == 0 {
            return;
        }
        std::future::pending::<()>().await
    };
    let guarded = async {
        tokio::select! {
            biased;
            ended = connection => ended,
            () = first => {
                tracing::debug!("no request arrived in time; closing the connection");
                Ok(())
            }
        }
    };
    if let Err(e) = inline_wakes(guarded).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

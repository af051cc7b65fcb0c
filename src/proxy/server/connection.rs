//! Serving one connection: hyper's connection with the server's watches around it, and
//! what happens when it ends — the close counted by reason, and a lingering close when
//! the client may still be sending.
//!
//! Every request gets the connection's facts in its extensions ([`ClientAddress`], a
//! verified client identity, the connection's ends, the [`AmbiguousFraming`] mark);
//! every answer's body reports its delivery to the write watch ([`stall`]), and a 401
//! without a challenge gets `WWW-Authenticate: Bearer`.

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

use super::close::Reason as CloseReason;
use super::framing::{AmbiguousFraming, Tally};
use super::stall::{self, Delivered, Progress};
use super::stream::{Reclaimed, Watched};
use super::{linger, ClientAddress, ConnLimits, Connection};
use crate::proxy::body::Body;
use crate::proxy::inline_wake::inline_wakes;
use crate::tls::{PeerIdentity, TlsConfig};

/// Who is on the other end of a connection.
pub(super) struct Peer {
    pub identity: Option<PeerIdentity>,
    pub client: SocketAddr,
    pub connection: Option<Connection>,
}

/// What serving one connection needs of its listener.
pub(super) struct Served {
    pub builder: Arc<auto::Builder<TokioExecutor>>,
    pub watcher: Watcher,
    pub limits: Arc<ConnLimits>,
}

/// How a connection's serving ended.
enum Ended {
    /// hyper finished with it: `Ok`, or the error it closed on.
    Hyper(Result<(), Box<dyn std::error::Error + Send + Sync>>),
    /// No request arrived within the header-read timeout.
    NoRequest,
    /// Its client did not read its answers within the write timeout.
    Stalled,
}

impl Served {
    pub async fn serve_tls<S, H, Fut>(self, tls: &TlsConfig, stream: S, handler: H, mut peer: Peer)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        // The handshake gets the same budget as a request head: a client that stalls it
        // can't hold a connection slot.
        let budget = self.limits.header_read_timeout;
        let stream = match tokio::time::timeout(budget, tls.acceptor().accept(stream)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
            Err(_) => {
                self.limits.closes.count(CloseReason::HeaderTimeout);
                return tracing::debug!("TLS handshake timed out");
            }
        };
        peer.identity = tls.peer_identity(stream.get_ref().1);
        if tls.requires_client_cert() && peer.identity.is_none() {
            return tracing::info!("client certificate names no agent; closing");
        }
        self.serve(stream, handler, peer).await
    }

    /// Serves one connection; a verified client identity, the connection's ends and the
    /// [`AmbiguousFraming`] mark ride along in request extensions. Ends with the close
    /// counted and, when the client may still be sending, lingering.
    pub async fn serve<S, H, Fut>(self, stream: S, handler: H, peer: Peer)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let tally = Arc::new(Tally::default());
        let progress = Arc::new(Progress::default());
        let (watched, mut reclaimed) = Watched::new(stream, tally.clone(), progress.clone());
        let service = service(handler, peer, tally.clone(), progress.clone());
        let connection = self.watcher.watch(
            self.builder
                .serve_connection(TokioIo::new(watched), service)
                .into_owned(),
        );
        // hyper's header-read timeout starts only once hyper-util has told HTTP/1 from
        // HTTP/2, which waits for bytes: a client that connects and sends nothing (or
        // trickles the HTTP/2 preface) would hold its connection slot forever. So the
        // first request must arrive within the same budget as a request head.
        let first = async {
            tokio::time::sleep(self.limits.header_read_timeout).await;
            if tally.served() == 0 {
                return;
            }
            std::future::pending::<()>().await
        };
        let guarded = async {
            tokio::select! {
                biased;
                ended = connection => Ended::Hyper(ended),
                () = first => Ended::NoRequest,
                () = stall::watch(&progress, self.limits.write_timeout) => Ended::Stalled,
            }
        };
        let ended = inline_wakes(guarded).await;
        // The connection future is gone, and with it hyper's hold on the socket.
        let reclaimed = reclaimed.try_recv().ok();
        let unfinished = reclaimed.as_ref().is_some_and(|r| r.unfinished);
        let reason = close_reason(&ended, unfinished, &tally);
        if let Some(reason) = reason {
            tracing::debug!(reason = reason.as_str(), "closing the connection");
            self.limits.closes.count(reason);
        }
        match (ended, reclaimed) {
            (
                Ended::Hyper(_),
                Some(Reclaimed {
                    stream,
                    unfinished: true,
                }),
            ) => {
                linger::linger(stream, self.limits.linger).await;
            }
            (Ended::Hyper(Err(e)), _) => {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            _ => {}
        }
    }
}

/// The one reason a server-side close is counted under; `None` when the client ended it
/// (or asked for it).
fn close_reason(ended: &Ended, unfinished: bool, tally: &Tally) -> Option<CloseReason> {
    let timed_out = |unfinished: bool| match unfinished {
        true => CloseReason::HeaderTimeout,
        false => CloseReason::IdleTimeout,
    };
    match ended {
        Ended::Stalled => Some(CloseReason::WriteTimeout),
        Ended::NoRequest => Some(timed_out(unfinished)),
        Ended::Hyper(result) => {
            let hyper_error = result
                .as_ref()
                .err()
                .and_then(|e| e.downcast_ref::<hyper::Error>());
            if hyper_error.is_some_and(hyper::Error::is_timeout) {
                Some(timed_out(unfinished))
            } else if tally.saw_ambiguous() {
                Some(CloseReason::AmbiguousFraming)
            } else if hyper_error.is_some_and(hyper::Error::is_parse) {
                Some(CloseReason::MalformedRequest)
            } else if unfinished {
                Some(CloseReason::UnreadBody)
            } else {
                None
            }
        }
    }
}

/// The per-connection service: the handler, with the connection's facts put into each
/// request and each response made to report its delivery.
fn service<H, Fut>(
    handler: H,
    peer: Peer,
    tally: Arc<Tally>,
    progress: Arc<Progress>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Delivered<Body>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Delivered<Body>>, Infallible>> + Send,
> + Clone
where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let peer = Arc::new(peer);
    hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let extensions = request.extensions_mut();
        extensions.insert(ClientAddress(peer.client.ip()));
        if let Some(identity) = &peer.identity {
            extensions.insert(identity.clone());
        }
        if let Some(connection) = &peer.connection {
            extensions.insert(connection.clone());
        }
        let ambiguous = tally.next_is_ambiguous();
        if ambiguous {
            extensions.insert(AmbiguousFraming);
        }
        let response = handler(request);
        let progress = progress.clone();
        async move {
            let response = response.await;
            let (mut parts, body) = response.into_parts();
            if ambiguous {
                // The rest of the connection can't be trusted to be framed as it reads.
                parts
                    .headers
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            if parts.status == StatusCode::UNAUTHORIZED {
                parts
                    .headers
                    .entry(header::WWW_AUTHENTICATE)
                    .or_insert(HeaderValue::from_static("Bearer"));
            }
            Ok::<_, Infallible>(Response::from_parts(parts, Delivered::new(body, progress)))
        }
    })
}

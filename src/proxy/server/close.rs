//! Why the server closed a connection, for `toolgate_connections_closed_total{reason}`.
//!
//! Only closes the server decides are counted: a client that hangs up, or asks for
//! `Connection: close`, is no news. One close has one reason, the first that applies in
//! the order of [`Reason::ALL`].

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::telemetry::metrics::CloseLabels;

/// A server-side close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The client did not read the answers it asked for (`limits.writeTimeoutMs`).
    WriteTimeout,
    /// A request head (or the TLS handshake) did not arrive within
    /// `limits.headerReadTimeoutMs`.
    HeaderTimeout,
    /// A connection with no request under way sent nothing within the same budget.
    IdleTimeout,
    /// A request's framing was ambiguous (`Content-Length` with `Transfer-Encoding`).
    AmbiguousFraming,
    /// hyper could not parse a request (its own 400 / 431).
    MalformedRequest,
    /// A refusal was sent before the request's body was read (too large, not
    /// authenticated, too slow): the connection can't be reused; it closes lingering.
    UnreadBody,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::WriteTimeout,
        Reason::HeaderTimeout,
        Reason::IdleTimeout,
        Reason::AmbiguousFraming,
        Reason::MalformedRequest,
        Reason::UnreadBody,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::WriteTimeout => "write_timeout",
            Reason::HeaderTimeout => "header_timeout",
            Reason::IdleTimeout => "idle_timeout",
            Reason::AmbiguousFraming => "ambiguous_framing",
            Reason::MalformedRequest => "malformed_request",
            Reason::UnreadBody => "unread_body",
        }
    }
}

/// Where a listener counts its closes; `None` counts nothing (the injector has no
/// metrics endpoint).
#[derive(Debug, Clone, Default)]
pub struct Closes(Option<Family<CloseLabels, Counter>>);

impl Closes {
    /// Counts into `family`, each reason's series created at zero so dashboards see it
    /// before the first close.
    pub fn into_family(family: Family<CloseLabels, Counter>) -> Closes {
        for reason in Reason::ALL {
            let _ = family.get_or_create(&CloseLabels {
                reason: reason.as_str(),
            });
        }
        Closes(Some(family))
    }

    pub fn count(&self, reason: Reason) {
        if let Some(family) = &self.0 {
            family
                .get_or_create(&CloseLabels {
                    reason: reason.as_str(),
                })
                .inc();
        }
    }
}

//! What can go wrong between toolgate and the backend, and the one mapping from it to a
//! refusal and to whether the call ran.
//!
//! Every path that sends to the backend — REST and MCP, idempotent and at most once,
//! streamed, buffered or collected — names its failure with a [`Failure`] and asks
//! [`Failure::reject`] and [`Failure::ran`] what it means. Nothing else writes a
//! `BACKEND_*` refusal for a failed exchange; five copies of this mapping had drifted
//! apart on whether a connection broken mid-body ran the call, which decides whether a
//! retry is safe.
//!
//! The line between "may have run" and "ran" is the response head: once the backend
//! has sent a status line it has taken the call and started answering it, so whatever
//! breaks after that (the body, its deadline, its size, its shape) happened to a call
//! that ran. Before the head, a request that went out may or may not have reached the
//! handler; only a connection never made proves nothing ran.

use http::StatusCode;
use std::time::Duration;

use crate::limits::dedupe::{Ran, Settled};
use crate::proxy::body::ReadError;
use crate::vocab::{Code, Recovery, Reject};

/// How an exchange with the backend failed, in the order it can happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection could be made (refused, unroutable, no URI): nothing was sent.
    Unreachable,
    /// The request went out, and the connection broke — or what came back was not
    /// HTTP — before a response head arrived.
    NoHead,
    /// No response head within the time the call had.
    NoHeadInTime,
    /// A response head arrived, then the connection broke before the body's end (for
    /// an MCP call: before its JSON-RPC response).
    BodyBroke,
    /// A response head arrived, but not the rest of the answer in time.
    BodyTimedOut,
    /// The answer (or one of its events) is larger than toolgate reads, in bytes.
    TooLarge(usize),
    /// The answer is not what was asked for: not a JSON-RPC response to the call.
    NotAnAnswer,
    /// An MCP server ended the call's event stream cleanly without the response, after
    /// naming its events (SSE polling, SEP-1699): the response goes to the stream the
    /// client resumes with `Last-Event-ID`, which this request can't follow.
    Resumable,
}

/// What the failed exchange carried, which the refusal depends on.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    /// Running it again is harmless (the contract's `idempotent`; any message that is
    /// not a tool call).
    pub idempotent: bool,
    /// How long the answer was waited for, to name in a timeout.
    pub wait: Duration,
    /// A tool's result is held to its contract; another message (a listing, a passed
    /// method) is only the backend's.
    pub result: bool,
}

impl Asked {
    /// A tool call under its contract.
    pub fn call(idempotent: bool, wait: Duration) -> Asked {
        Asked {
            idempotent,
            wait,
            result: true,
        }
    }

    /// A message that is not a tool call (an MCP listing, handshake, stream).
    pub fn message(wait: Duration) -> Asked {
        Asked {
            idempotent: true,
            wait,
            result: false,
        }
    }
}

impl Failure {
    /// Whether the backend ran the call (see the module doc for where the line is).
    pub fn ran(self) -> Ran {
        match self {
            Failure::Unreachable => Ran::No,
            Failure::NoHead | Failure::NoHeadInTime => Ran::Maybe,
            Failure::BodyBroke
            | Failure::BodyTimedOut
            | Failure::TooLarge(_)
            | Failure::NotAnAnswer
            | Failure::Resumable => Ran::Yes,
        }
    }

    /// The refusal for this failure. A transient one (unavailable, timed out) is
    /// retryable only if a retry can't run the call twice: nothing ran, or the call is
    /// idempotent. An unusable answer is not retryable: the backend would give it again.
    pub fn reject(self, asked: Asked) -> Reject {
        let (code, why) = self.describe(asked);
        // A call that must not run twice says why it isn't to be retried.
        let ran = match (asked.idempotent, self.ran()) {
            (true, _) | (_, Ran::No) => "",
            (false, Ran::Maybe) => "; the call may have run",
            (false, Ran::Yes) => "; the call ran",
        };
        let reject = Reject::new(code, format!("{why}{ran}"));
        if !matches!(code, Code::BackendUnavailable | Code::BackendTimeout) {
            return reject;
        }
        let safe = asked.idempotent || self.ran() == Ran::No;
        let recovery = if safe {
            Recovery::Retry
        } else {
            Recovery::Stop
        };
        reject.with_retryable(safe).with_recovery(recovery)
    }

    /// The refusal and the "ran" answer together, as a buffered call's outcome.
    pub fn settled(self, asked: Asked) -> Settled {
        Settled::Failed {
            reject: self.reject(asked),
            ran: self.ran(),
        }
    }

    fn describe(self, asked: Asked) -> (Code, String) {
        let unusable = match asked.result {
            true => Code::OutputContractViolation,
            false => Code::BackendError,
        };
        let ms = asked.wait.as_millis();
        match self {
            Failure::Unreachable => (
                Code::BackendUnavailable,
                "the backend is not reachable".into(),
            ),
            Failure::NoHead => (
                Code::BackendUnavailable,
                "the backend connection broke before it answered".into(),
            ),
            Failure::NoHeadInTime => (
                Code::BackendTimeout,
                format!("the backend did not answer within {ms} ms"),
            ),
            Failure::BodyBroke => (
                Code::BackendUnavailable,
                "the backend connection broke mid-answer".into(),
            ),
            Failure::BodyTimedOut => (
                Code::BackendTimeout,
                format!("the backend did not finish its answer within {ms} ms"),
            ),
            Failure::TooLarge(n) => (
                unusable,
                format!("the backend's answer is larger than {n} bytes"),
            ),
            Failure::NotAnAnswer => (
                unusable,
                "the backend's answer is not a JSON-RPC response to the request".into(),
            ),
            Failure::Resumable => (
                Code::BackendUnavailable,
                "the backend ended the event stream to answer on the session's resumed \
                 stream, which this request can't follow"
                    .into(),
            ),
        }
    }
}

impl From<ReadError> for Failure {
    /// A body read after the response head: whatever fails, the call ran.
    fn from(error: ReadError) -> Failure {
        match error {
            ReadError::TooLarge(n) => Failure::TooLarge(n),
            ReadError::TimedOut => Failure::BodyTimedOut,
            ReadError::Broken(_) => Failure::BodyBroke,
        }
    }
}

/// The refusal for a backend's error status and whether the call ran, or `None` when
/// the response passes. A 503 says the backend refused the call before running it;
/// any other error status answered a call it took.
pub fn status_refusal(status: StatusCode) -> Option<(Reject, Ran)> {
    if status == StatusCode::SERVICE_UNAVAILABLE {
        let reject = Reject::new(
            Code::BackendUnavailable,
            "the backend is temporarily unavailable",
        );
        return Some((reject, Ran::No));
    }
    if status.is_server_error() {
        let why = format!(
            "the backend failed to handle the call (HTTP {})",
            status.as_u16()
        );
        return Some((Reject::new(Code::BackendError, why), Ran::Yes));
    }
    if status.is_client_error() {
        let reason = status.canonical_reason().unwrap_or("rejected");
        let why = format!(
            "the backend rejected the call: {} {reason}",
            status.as_u16()
        );
        let reject = Reject::new(Code::BackendRejected, why).with_status(status.as_u16());
        return Some((reject, Ran::Yes));
    }
    None
}

/// The refusal for a backend's error status, or `None` when the response passes.
pub fn status_reject(status: StatusCode) -> Option<Reject> {
    status_refusal(status).map(|(reject, _)| reject)
}

/// The refusal for a status that brought no answer to use, and whether the call ran:
/// an error status as [`status_refusal`] says; a 202 (a call taken, its answer never
/// sent) or any other (1xx, 3xx) as the backend's error.
pub fn unanswered_status(status: StatusCode) -> (Reject, Ran) {
    if status == StatusCode::ACCEPTED {
        let why = "the backend accepted the call without answering it";
        return (Reject::new(Code::BackendError, why), Ran::Yes);
    }
    status_refusal(status).unwrap_or_else(|| {
        let reject = Reject::new(Code::BackendError, "the backend did not answer the call");
        (reject, Ran::Yes)
    })
}

/// A buffered call's outcome for a status that brought no answer ([`unanswered_status`]).
pub fn status_settled(status: StatusCode) -> Settled {
    let (reject, ran) = unanswered_status(status);
    Settled::Failed { reject, ran }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Failure; 8] = [
        Failure::Unreachable,
        Failure::NoHead,
        Failure::NoHeadInTime,
        Failure::BodyBroke,
        Failure::BodyTimedOut,
        Failure::TooLarge(10),
        Failure::NotAnAnswer,
        Failure::Resumable,
    ];

    #[test]
    fn a_retry_is_offered_only_where_it_cannot_run_the_call_twice() {
        let wait = Duration::from_secs(1);
        for failure in ALL {
            let once = failure.reject(Asked::call(false, wait));
            let again = failure.reject(Asked::call(true, wait));
            assert_eq!(once.code, again.code, "{failure:?}: one code");
            if once.retryable() {
                assert_eq!(failure.ran(), Ran::No, "{failure:?}");
                assert_eq!(once.recovery(), Recovery::Retry);
            }
            if failure.ran() != Ran::No && once.code.retryable() {
                assert_eq!(once.recovery(), Recovery::Stop, "{failure:?}");
            }
        }
        assert!(Failure::Unreachable
            .reject(Asked::call(false, wait))
            .retryable());
        assert!(Failure::BodyBroke
            .reject(Asked::call(true, wait))
            .retryable());
        assert!(Failure::NoHeadInTime
            .reject(Asked::call(true, wait))
            .retryable());
    }

    #[test]
    fn a_response_head_means_the_call_ran() {
        assert_eq!(Failure::Unreachable.ran(), Ran::No);
        assert_eq!(Failure::NoHead.ran(), Ran::Maybe);
        assert_eq!(Failure::NoHeadInTime.ran(), Ran::Maybe);
        for after_head in [
            Failure::BodyBroke,
            Failure::BodyTimedOut,
            Failure::TooLarge(1),
        ] {
            assert_eq!(after_head.ran(), Ran::Yes, "{after_head:?}");
        }
        assert_eq!(
            Failure::from(ReadError::Broken("reset".into())),
            Failure::BodyBroke
        );
    }

    #[test]
    fn statuses_map_to_the_contract() {
        assert_eq!(status_reject(StatusCode::OK), None);
        let (reject, ran) = status_refusal(StatusCode::SERVICE_UNAVAILABLE).unwrap();
        assert_eq!((reject.code, ran), (Code::BackendUnavailable, Ran::No));
        let (reject, ran) = status_refusal(StatusCode::INTERNAL_SERVER_ERROR).unwrap();
        assert_eq!((reject.code, ran), (Code::BackendError, Ran::Yes));
        let r = status_reject(StatusCode::NOT_FOUND).unwrap();
        assert_eq!((r.code, r.status()), (Code::BackendRejected, 404));
    }

    #[test]
    fn an_unusable_answer_is_the_contract_s_for_a_result_the_backend_s_otherwise() {
        let wait = Duration::from_secs(1);
        let result = Failure::TooLarge(5).reject(Asked::call(true, wait));
        assert_eq!(result.code, Code::OutputContractViolation);
        let listing = Failure::NotAnAnswer.reject(Asked::message(wait));
        assert_eq!(listing.code, Code::BackendError);
    }
}

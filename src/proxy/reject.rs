//! The error contract (DESIGN §4): the one place a refusal becomes a response body.
//!
//! Every stage returns `Err(Reject)`; nothing else in the proxy builds an error body. The
//! table of codes (HTTP status, retryable, recovery) lives here and nowhere else, so REST
//! and MCP refusals can never disagree.

use serde::Serialize;
use serde_json::{json, Value};

/// What the agent should do next, as the `recovery` field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    FixArguments,
    AskUser,
    Retry,
    AwaitApproval,
    Stop,
}

impl Recovery {
    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::FixArguments => "fix_arguments",
            Recovery::AskUser => "ask_user",
            Recovery::Retry => "retry",
            Recovery::AwaitApproval => "await_approval",
            Recovery::Stop => "stop",
        }
    }
}

/// Every refusal code of DESIGN §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    MalformedRequest,
    PayloadTooLarge,
    HeadersTooLarge,
    Unauthenticated,
    UnknownTool,
    AgentDisabled,
    ToolNotAllowed,
    MissingArgument,
    InvalidArguments,
    PolicyDenied,
    OutOfTaskScope,
    RateLimited,
    BudgetExhausted,
    LoopDetected,
    ApprovalRequired,
    BackendTimeout,
    BackendUnavailable,
    BackendError,
    BackendRejected,
    OutputContractViolation,
    NotReady,
    AuditUnavailable,
}

impl Code {
    pub const ALL: [Code; 22] = [
        Code::MalformedRequest,
        Code::PayloadTooLarge,
        Code::HeadersTooLarge,
        Code::Unauthenticated,
        Code::UnknownTool,
        Code::AgentDisabled,
        Code::ToolNotAllowed,
        Code::MissingArgument,
        Code::InvalidArguments,
        Code::PolicyDenied,
        Code::OutOfTaskScope,
        Code::RateLimited,
        Code::BudgetExhausted,
        Code::LoopDetected,
        Code::ApprovalRequired,
        Code::BackendTimeout,
        Code::BackendUnavailable,
        Code::BackendError,
        Code::BackendRejected,
        Code::OutputContractViolation,
        Code::NotReady,
        Code::AuditUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::MalformedRequest => "MALFORMED_REQUEST",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            // Not a row of DESIGN §4's table: the 431 the issue asks for needs a code too.
            Code::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::UnknownTool => "UNKNOWN_TOOL",
            Code::AgentDisabled => "AGENT_DISABLED",
            Code::ToolNotAllowed => "TOOL_NOT_ALLOWED",
            Code::MissingArgument => "MISSING_ARGUMENT",
            Code::InvalidArguments => "INVALID_ARGUMENTS",
            Code::PolicyDenied => "POLICY_DENIED",
            Code::OutOfTaskScope => "OUT_OF_TASK_SCOPE",
            Code::RateLimited => "RATE_LIMITED",
            Code::BudgetExhausted => "BUDGET_EXHAUSTED",
            Code::LoopDetected => "LOOP_DETECTED",
            Code::ApprovalRequired => "APPROVAL_REQUIRED",
            Code::BackendTimeout => "BACKEND_TIMEOUT",
            Code::BackendUnavailable => "BACKEND_UNAVAILABLE",
            Code::BackendError => "BACKEND_ERROR",
            Code::BackendRejected => "BACKEND_REJECTED",
            Code::OutputContractViolation => "OUTPUT_CONTRACT_VIOLATION",
            Code::NotReady => "NOT_READY",
            Code::AuditUnavailable => "AUDIT_UNAVAILABLE",
        }
    }

    /// The HTTP status of the table. `BACKEND_REJECTED` carries the backend's own 4xx,
    /// which the [`Reject`] overrides.
    pub fn status(self) -> u16 {
        match self {
            Code::MalformedRequest => 400,
            Code::PayloadTooLarge => 413,
            Code::HeadersTooLarge => 431,
            Code::Unauthenticated => 401,
            Code::UnknownTool => 404,
            Code::AgentDisabled | Code::ToolNotAllowed => 403,
            Code::MissingArgument | Code::InvalidArguments => 422,
            Code::PolicyDenied | Code::OutOfTaskScope => 403,
            Code::RateLimited | Code::BudgetExhausted => 429,
            Code::LoopDetected => 409,
            Code::ApprovalRequired => 202,
            Code::BackendTimeout => 504,
            Code::BackendUnavailable => 503,
            Code::BackendError => 502,
            Code::BackendRejected => 400,
            Code::OutputContractViolation => 502,
            Code::NotReady | Code::AuditUnavailable => 503,
        }
    }

    pub fn retryable(self) -> bool {
        matches!(
            self,
            Code::RateLimited
                | Code::ApprovalRequired
                | Code::BackendUnavailable
                | Code::NotReady
                | Code::AuditUnavailable
        )
    }

    pub fn recovery(self) -> Recovery {
        match self {
            Code::MalformedRequest
            | Code::PayloadTooLarge
            | Code::HeadersTooLarge
            | Code::InvalidArguments => Recovery::FixArguments,
            Code::MissingArgument | Code::OutOfTaskScope | Code::BackendRejected => {
                Recovery::AskUser
            }
            Code::RateLimited
            | Code::BackendUnavailable
            | Code::NotReady
            | Code::AuditUnavailable => Recovery::Retry,
            Code::ApprovalRequired => Recovery::AwaitApproval,
            _ => Recovery::Stop,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `details[]`: where in the arguments, and which schema keyword.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail {
    pub pointer: String,
    pub keyword: String,
}

/// A refusal, as produced by a stage. Rendered by [`Reject::body`].
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    pub code: Code,
    pub message: String,
    pub details: Vec<Detail>,
    pub rule: Option<String>,
    pub retry_after_ms: Option<u64>,
    /// Overrides of the table, for the rows that depend on the call.
    pub status: Option<u16>,
    pub retryable: Option<bool>,
    pub recovery: Option<Recovery>,
}

impl Reject {
    pub fn new(code: Code, message: impl Into<String>) -> Reject {
        Reject {
            code,
            message: message.into(),
            details: Vec::new(),
            rule: None,
            retry_after_ms: None,
            status: None,
            retryable: None,
            recovery: None,
        }
    }

    pub fn with_details(mut self, details: Vec<Detail>) -> Reject {
        self.details = details;
        self
    }

    pub fn with_rule(mut self, rule: impl Into<String>) -> Reject {
        self.rule = Some(rule.into());
        self
    }

    pub fn with_recovery(mut self, recovery: Recovery) -> Reject {
        self.recovery = Some(recovery);
        self
    }

    pub fn with_retryable(mut self, retryable: bool) -> Reject {
        self.retryable = Some(retryable);
        self
    }

    pub fn with_status(mut self, status: u16) -> Reject {
        self.status = Some(status);
        self
    }

    pub fn with_retry_after(mut self, ms: u64) -> Reject {
        self.retry_after_ms = Some(ms);
        self
    }

    pub fn status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.code.status())
    }

    pub fn retryable(&self) -> bool {
        self.retryable.unwrap_or_else(|| self.code.retryable())
    }

    pub fn recovery(&self) -> Recovery {
        self.recovery.unwrap_or_else(|| self.code.recovery())
    }

    /// The body of DESIGN §4, the same for REST and MCP.
    pub fn body(&self, trace_id: &str) -> Value {
        json!({
            "status": "error",
            "error": {
                "code": self.code.as_str(),
                "message": self.message,
                "retryable": self.retryable(),
                "recovery": self.recovery().as_str(),
                "details": self.details,
                "rule": self.rule,
                "retryAfterMs": self.retry_after_ms,
                "traceId": trace_id,
            }
        })
    }
}

/// Renders a refusal as the REST response of DESIGN §4 (the MCP rendering lives in
/// `proxy::mcp::reply`, built from the same [`Reject::body`]).
pub fn into_response(reject: &Reject, trace_id: &str) -> http::Response<crate::proxy::body::Body> {
    let body = serde_json::to_vec(&reject.body(trace_id)).unwrap_or_default();
    let mut response = http::Response::new(crate::proxy::body::full(body));
    *response.status_mut() =
        http::StatusCode::from_u16(reject.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Some(ms) = reject.retry_after_ms {
        // Retry-After is whole seconds; round up so an agent never retries too early.
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from(ms.div_ceil(1000).max(1)),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_every_field_of_the_contract() {
        let body = Reject::new(Code::InvalidArguments, "window_minutes: bad")
            .with_details(vec![Detail {
                pointer: "/window_minutes".into(),
                keyword: "type".into(),
            }])
            .body("4bf92f3577b34da6a3ce929d0e0e4736");
        let err = &body["error"];
        assert_eq!(body["status"], "error");
        assert_eq!(err["code"], "INVALID_ARGUMENTS");
        assert_eq!(err["retryable"], false);
        assert_eq!(err["recovery"], "fix_arguments");
        assert_eq!(err["details"][0]["pointer"], "/window_minutes");
        assert!(err["rule"].is_null());
        assert!(err["retryAfterMs"].is_null());
        assert_eq!(err["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn table_rows_match_the_design() {
        assert_eq!(Code::RateLimited.status(), 429);
        assert!(Code::RateLimited.retryable());
        assert_eq!(Code::RateLimited.recovery(), Recovery::Retry);
        assert_eq!(Code::LoopDetected.status(), 409);
        assert_eq!(Code::ApprovalRequired.recovery(), Recovery::AwaitApproval);
        assert_eq!(Code::MissingArgument.recovery(), Recovery::AskUser);
        assert_eq!(Code::BackendError.status(), 502);
        assert!(!Code::BackendError.retryable());
    }

    #[test]
    fn overrides_win_over_the_table() {
        let r = Reject::new(Code::BackendRejected, "no")
            .with_status(404)
            .with_retryable(false);
        assert_eq!(r.status(), 404);
        let r = Reject::new(Code::PolicyDenied, "no").with_recovery(Recovery::AskUser);
        assert_eq!(r.body("t")["error"]["recovery"], "ask_user");
    }
}

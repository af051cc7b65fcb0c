//! The error vocabulary's table: every refusal code with its HTTP status, whether a retry
//! may succeed, and what the agent should do next. This table is the only source of
//! those facts: REST and MCP render from it, and `docs/errors.md` is generated from it
//! ([`markdown`]).

use serde::Serialize;

/// What the agent should do next, as the `recovery` field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    FixArguments,
    AskUser,
    Retry,
    AwaitApproval,
    Stop,
    /// Call the tool `details[].requires` names first (`CALL_ORDER_VIOLATION`).
    CallFirst,
}

impl Recovery {
    pub const ALL: [Recovery; 6] = [
        Recovery::FixArguments,
        Recovery::AskUser,
        Recovery::Retry,
        Recovery::AwaitApproval,
        Recovery::Stop,
        Recovery::CallFirst,
    ];

    /// The hint named `name` (as [`Recovery::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Recovery> {
        Recovery::ALL.into_iter().find(|r| r.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::FixArguments => "fix_arguments",
            Recovery::AskUser => "ask_user",
            Recovery::Retry => "retry",
            Recovery::AwaitApproval => "await_approval",
            Recovery::Stop => "stop",
            Recovery::CallFirst => "call_first",
        }
    }
}

/// Every refusal code (`docs/errors.md` is generated from this table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    MalformedRequest,
    PayloadTooLarge,
    UnsupportedMediaType,
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
    ApprovalDenied,
    BackendTimeout,
    BackendUnavailable,
    BackendError,
    BackendRejected,
    OutputContractViolation,
    NotReady,
    AuditUnavailable,
    OriginNotAllowed,
    StateUnavailable,
    DuplicateCall,
    CallOrderViolation,
}

impl Code {
    /// The code named `name` (as [`Code::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|code| code.as_str() == name)
    }

    pub const ALL: [Code; 28] = [
        Code::MalformedRequest,
        Code::PayloadTooLarge,
        Code::UnsupportedMediaType,
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
        Code::ApprovalDenied,
        Code::BackendTimeout,
        Code::BackendUnavailable,
        Code::BackendError,
        Code::BackendRejected,
        Code::OutputContractViolation,
        Code::NotReady,
        Code::AuditUnavailable,
        Code::OriginNotAllowed,
        Code::StateUnavailable,
        Code::DuplicateCall,
        Code::CallOrderViolation,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::MalformedRequest => "MALFORMED_REQUEST",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            // The 431 for too many headers needs a code of its own.
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
            Code::ApprovalDenied => "APPROVAL_DENIED",
            Code::BackendTimeout => "BACKEND_TIMEOUT",
            Code::BackendUnavailable => "BACKEND_UNAVAILABLE",
            Code::BackendError => "BACKEND_ERROR",
            Code::BackendRejected => "BACKEND_REJECTED",
            Code::OutputContractViolation => "OUTPUT_CONTRACT_VIOLATION",
            Code::NotReady => "NOT_READY",
            Code::AuditUnavailable => "AUDIT_UNAVAILABLE",
            Code::OriginNotAllowed => "ORIGIN_NOT_ALLOWED",
            Code::StateUnavailable => "STATE_UNAVAILABLE",
            Code::DuplicateCall => "DUPLICATE_CALL",
            Code::CallOrderViolation => "CALL_ORDER_VIOLATION",
        }
    }

    /// The HTTP status of the table. `BACKEND_REJECTED` carries the backend's own 4xx,
    /// which the [`Reject`] overrides.
    pub fn status(self) -> u16 {
        match self {
            Code::MalformedRequest => 400,
            Code::PayloadTooLarge => 413,
            Code::UnsupportedMediaType => 415,
            Code::HeadersTooLarge => 431,
            Code::Unauthenticated => 401,
            Code::UnknownTool => 404,
            Code::AgentDisabled | Code::ToolNotAllowed | Code::OriginNotAllowed => 403,
            Code::MissingArgument | Code::InvalidArguments => 422,
            Code::PolicyDenied | Code::OutOfTaskScope => 403,
            Code::RateLimited | Code::BudgetExhausted => 429,
            Code::LoopDetected | Code::DuplicateCall | Code::CallOrderViolation => 409,
            Code::ApprovalRequired => 202,
            Code::ApprovalDenied => 403,
            Code::BackendTimeout => 504,
            Code::BackendUnavailable => 503,
            Code::BackendError => 502,
            Code::BackendRejected => 400,
            Code::OutputContractViolation => 502,
            Code::NotReady | Code::AuditUnavailable | Code::StateUnavailable => 503,
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
                | Code::StateUnavailable
        )
    }

    pub fn recovery(self) -> Recovery {
        match self {
            Code::MalformedRequest
            | Code::PayloadTooLarge
            | Code::UnsupportedMediaType
            | Code::HeadersTooLarge
            | Code::InvalidArguments => Recovery::FixArguments,
            Code::MissingArgument
            | Code::OutOfTaskScope
            | Code::BackendRejected
            | Code::ApprovalDenied => Recovery::AskUser,
            Code::RateLimited
            | Code::BackendUnavailable
            | Code::NotReady
            | Code::AuditUnavailable
            | Code::StateUnavailable => Recovery::Retry,
            Code::ApprovalRequired => Recovery::AwaitApproval,
            Code::CallOrderViolation => Recovery::CallFirst,
            _ => Recovery::Stop,
        }
    }
}

impl Code {
    /// When a call gets this code: the table's last column.
    pub fn when(self) -> &'static str {
        match self {
            Code::MalformedRequest => {
                "the request can't be read: not JSON, bad JSON-RPC, bad UTF-8, an ambiguous \
                 path or framing, a key named twice in one object"
            }
            Code::PayloadTooLarge => "the body is larger than `limits.maxBodyBytes`",
            Code::UnsupportedMediaType => {
                "a request with a body does not declare it JSON (`Content-Type: application/json` \
                 or `application/*+json`, UTF-8), or declares a `Content-Encoding`: the body a \
                 backend would parse must be the one that was checked; nothing is forwarded"
            }
            Code::HeadersTooLarge => "more than `limits.maxHeaders` request headers",
            Code::Unauthenticated => "no credential, or one that is not valid",
            Code::UnknownTool => {
                "no contract matches the call (REST route or MCP tool name), or with \
                 `mcp.onDrift: hide` the MCP tool is withheld: its backend lists it unlike its \
                 contract"
            }
            Code::AgentDisabled => "the agent's policy has `enabled: false` (the kill switch)",
            Code::ToolNotAllowed => {
                "no policy governs the agent, or its policy grants no such tool (or MCP method)"
            }
            Code::MissingArgument => "a `required` argument is absent",
            Code::InvalidArguments => "the arguments break the contract's `input` schema",
            Code::PolicyDenied => "a CEL rule of the grant is false, or fails to evaluate",
            Code::OutOfTaskScope => {
                "a rule reading `task` is false, or the call carries no valid task token"
            }
            Code::RateLimited => "the agent's or the grant's `rateLimit` is spent",
            Code::BudgetExhausted => {
                "the task's or session's `maxCalls` is reached, or the call's `cost` would pass \
                 the day's `budget.perDay` (then with `retryAfterMs` to the next local midnight)"
            }
            Code::LoopDetected => {
                "the task or session already ran this identical call `maxRepeats` times in a \
                 row, or `maxSame` times in all"
            }
            Code::ApprovalRequired => {
                "the grant's `approval` holds the call until a person approves it; nothing was \
                 forwarded; `details` carry the approval's id, status and expiry"
            }
            Code::ApprovalDenied => {
                "a person denied this call's approval; the message carries their reason"
            }
            Code::BackendTimeout => "the backend did not answer within the contract's `timeoutMs`",
            Code::BackendUnavailable => {
                "the backend refused or dropped the connection, or answered 503"
            }
            Code::BackendError => "the backend answered 5xx; its body is never shown",
            Code::BackendRejected => "the backend answered 4xx; only a safe message passes",
            Code::OutputContractViolation => {
                "the result breaks the contract's `output` schema, is too large, or can't be \
                 checked"
            }
            Code::NotReady => "no policy snapshot is loaded yet (fail closed)",
            Code::AuditUnavailable => {
                "the audit log can't be written (`audit.onFailure: fail_closed`)"
            }
            Code::OriginNotAllowed => {
                "an MCP request's `Origin` is not in `mcp.allowedOrigins`, or its `Host` not in \
                 `mcp.allowedHosts` (DNS-rebinding protection); nothing is forwarded"
            }
            Code::StateUnavailable => {
                "`state.backend: redis` can't be reached within `timeoutMs`, and the call needs \
                 it: a non-idempotent call's claim (rate limits and budgets fail open instead)"
            }
            Code::DuplicateCall => {
                "another caller ran the same action (equal `dedupeKey`) within \
                 `dedupeWindowSeconds`; `details.traceId` names the first call"
            }
            Code::CallOrderViolation => {
                "the grant `requires` an earlier successful call in the same task (or session) \
                 that was not made; `details[].requires` names the tool to call first; nothing \
                 is forwarded"
            }
        }
    }

    /// Where a refusal of this code departs from the table's row, and why.
    pub fn varies(self) -> Option<&'static str> {
        match self {
            Code::PolicyDenied => {
                Some("recovery is the failing rule's `recovery` (default `stop`)")
            }
            Code::BackendTimeout => Some(
                "retryable with recovery `retry` for idempotent tools; a non-idempotent call \
                 may have run, so `stop`",
            ),
            Code::BackendUnavailable => Some(
                "a non-idempotent call whose connection broke, or that was interrupted, may \
                 have run: not retryable, `stop`",
            ),
            Code::BackendRejected => Some("the HTTP status is the backend's own 4xx"),
            Code::RateLimited => Some("carries `retryAfterMs` and a `Retry-After` header"),
            Code::BudgetExhausted => Some(
                "a spend budget's refusal carries `retryAfterMs` and a `Retry-After` header (the \
                 next midnight in the budget's time zone)",
            ),
            Code::MalformedRequest => Some(
                "405 for an MCP request that is not POST, GET or DELETE; 404 for an \
                 `Mcp-Session-Id` this agent was not issued",
            ),
            _ => None,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

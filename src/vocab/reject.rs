//! A refusal as the stages produce it, and its body (the same for REST and MCP; the
//! HTTP rendering is `proxy::render`, the JSON-RPC one `proxy::mcp::reply`).

use serde::Serialize;
use serde_json::{json, Value};

use super::code::{Code, Recovery};

/// One entry of `details[]`: where in the arguments, and which schema keyword; or, for
/// `DUPLICATE_CALL`, `dedupeKey` and the first call's trace id; or, for the approval
/// codes, the approval's id, status and expiry (with no pointer or keyword); or, for
/// `CALL_ORDER_VIOLATION`, the tool to call first (`requires`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Detail {
    pub pointer: String,
    pub keyword: String,
    pub trace_id: Option<String>,
    pub approval_id: Option<String>,
    pub status: Option<String>,
    pub expires_at: Option<String>,
    pub requires: Option<String>,
}

impl Serialize for Detail {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        // A schema detail always names its keyword; a pointer of "" is the arguments'
        // root and stays. An approval's detail has neither.
        if !self.keyword.is_empty() {
            map.serialize_entry("pointer", &self.pointer)?;
            map.serialize_entry("keyword", &self.keyword)?;
        }
        let optional = [
            ("traceId", &self.trace_id),
            ("approvalId", &self.approval_id),
            ("status", &self.status),
            ("expiresAt", &self.expires_at),
            ("requires", &self.requires),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
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

    /// The error body of `docs/errors.md`, the same for REST and MCP.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_every_field_of_the_contract() {
        let body = Reject::new(Code::InvalidArguments, "window_minutes: bad")
            .with_details(vec![Detail {
                pointer: "/window_minutes".into(),
                keyword: "type".into(),
                ..Detail::default()
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

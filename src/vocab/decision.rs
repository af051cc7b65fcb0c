//! What the gate decided about a call: the `X-Toolgate-Decision` header, the audit
//! record's `decision` and the span's `toolgate.decision`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// A shadow policy would have denied; the call was forwarded anyway.
    ShadowDeny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::ShadowDeny => "shadow-deny",
        }
    }
}

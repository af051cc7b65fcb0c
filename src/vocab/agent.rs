//! The authenticated caller, as every stage after `identify` and every CEL rule sees it.

use serde_json::{json, Value};
use std::sync::Arc;

/// An authenticated caller: its id, who asserted it, and the claims its credential
/// carries (`agent` in CEL).
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: Arc<str>,
    /// The source that vouched for the id: `tokens` (the static token file), `mtls` (a
    /// client certificate) or an agent JWT's `iss`. The audit record and the server span
    /// name it; rules don't read it (the id already says which source may assert it).
    pub issuer: Arc<str>,
    pub claims: Value,
}

/// The `issuer` of an agent named by the static token file (`identity.tokens`).
pub const TOKENS_ISSUER: &str = "tokens";
/// The `issuer` of an agent named by its client certificate (`tls.clientCa`).
pub const MTLS_ISSUER: &str = "mtls";

/// Characters no agent id (or `agentPrefix`) may hold: control characters (C0, DEL, C1),
/// line and paragraph separators, and the invisible marks that reorder or hide text
/// (bidirectional controls, zero-width characters, BOM). Such an id would split a log
/// line, drop out of the `X-Toolgate-Agent` header, or read as another id to a person.
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}')
}

impl Agent {
    pub fn cel_value(&self) -> Value {
        json!({"id": &*self.id, "claims": self.claims})
    }
}

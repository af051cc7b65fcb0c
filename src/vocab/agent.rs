//! The authenticated caller, as every stage after `identify` and every CEL rule sees it.

use serde_json::{json, Value};
use std::borrow::Cow;
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
/// The `issuer` of an agent named by a projected ServiceAccount token
/// (`identity.kubernetes`).
pub const KUBERNETES_ISSUER: &str = "kubernetes";

/// How a ServiceAccount's agent id starts, as the cluster spells it in a token's `sub`:
/// `system:serviceaccount:<namespace>:<name>`. Reserved for workload identity.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The short spelling a policy may use: `serviceaccount:<namespace>/<name>`.
pub const SERVICE_ACCOUNT_SHORT: &str = "serviceaccount:";

/// The one spelling of an agent id that names a ServiceAccount: both
/// `serviceaccount:<namespace>/<name>` and `system:serviceaccount:<namespace>:<name>`
/// become the latter, so a policy may use either and records show one. Any other id is
/// itself. `Err` for an id that starts like a ServiceAccount's but isn't one, saying
/// what it should look like.
pub fn canonical(id: &str) -> Result<Cow<'_, str>, String> {
    let wanted = || {
        format!("{id:?} is not a ServiceAccount: write serviceaccount:<namespace>/<name> or system:serviceaccount:<namespace>:<name>, lowercase")
    };
    if id.starts_with(SERVICE_ACCOUNT_PREFIX) {
        return service_account(id)
            .map(|_| Cow::Borrowed(id))
            .ok_or_else(wanted);
    }
    let Some(short) = id.strip_prefix(SERVICE_ACCOUNT_SHORT) else {
        return Ok(Cow::Borrowed(id));
    };
    match short.split_once('/') {
        Some((namespace, name)) if valid_namespace(namespace) && valid_name(name) => Ok(
            Cow::Owned(format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")),
        ),
        _ => Err(wanted()),
    }
}

/// The namespace and name of a canonical ServiceAccount id, if it is a well-formed one.
pub fn service_account(id: &str) -> Option<(&str, &str)> {
    let (namespace, name) = id.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':')?;
    (valid_namespace(namespace) && valid_name(name)).then_some((namespace, name))
}

/// A namespace name: a DNS-1123 label.
fn valid_namespace(text: &str) -> bool {
    dns_name(text, 63) && !text.contains('.')
}

/// A ServiceAccount name: a DNS-1123 subdomain.
fn valid_name(text: &str) -> bool {
    dns_name(text, 253)
}

fn dns_name(text: &str, max: usize) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !text.is_empty()
        && text.len() <= max
        && text.starts_with(alnum)
        && text.ends_with(alnum)
        && text.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_service_account_spellings_are_one_id() {
        let long = "system:serviceaccount:agents:ops-bot";
        assert_eq!(canonical("serviceaccount:agents/ops-bot").unwrap(), long);
        assert_eq!(canonical(long).unwrap(), long);
        assert_eq!(canonical("ops-bot").unwrap(), "ops-bot");
        assert_eq!(canonical("partner:ops-bot").unwrap(), "partner:ops-bot");
        assert_eq!(
            canonical("serviceaccount:a-1/x.y-z").unwrap(),
            "system:serviceaccount:a-1:x.y-z"
        );
        assert_eq!(service_account(long), Some(("agents", "ops-bot")));
    }

    #[test]
    fn malformed_service_accounts_are_refused() {
        for id in [
            "serviceaccount:agents:ops-bot",
            "serviceaccount:agents/",
            "serviceaccount:/ops-bot",
            "serviceaccount:Agents/ops-bot",
            "serviceaccount:a.b/ops-bot",
            "serviceaccount:agents/ops/bot",
            "serviceaccount:agents/-ops",
            "system:serviceaccount:agents",
            "system:serviceaccount:agents:ops:bot",
            "system:serviceaccount::ops-bot",
            "system:serviceaccount:agents:OPS",
        ] {
            let err = canonical(id).unwrap_err();
            assert!(
                err.contains("serviceaccount:<namespace>/<name>"),
                "{id}: {err}"
            );
        }
        assert_eq!(service_account("system:serviceaccount:a:b:c"), None);
    }
}

//! What a call record may keep of a call's secrets (DESIGN §14, "Secrets stay out of the
//! record"): the arguments' digest, and the request headers a capturing contract's rules
//! read.
//!
//! - `argsDigest` lets an auditor match a record to a call without the log holding the
//!   arguments. A plain SHA-256 of low-entropy arguments (`{"month":"2025-07"}`) is
//!   recovered by hashing a few hundred guesses, so with `audit.keyFile` it is
//!   HMAC-SHA256 under that key (in its own domain, so it is never a chain link):
//!   `hmac-sha256:<hex>`. Without a key it stays `sha256:<hex>`.
//! - Headers a rule read are captured for `toolgate replay`, but never the value of a
//!   credential: `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`,
//!   `X-Api-Key`, the task token, any header whose name says it carries one (it holds
//!   `auth`, `token`, `secret`, `password`, `passwd`, `cookie`, `session`, `csrf`,
//!   `api-key` or `apikey`), and whatever `audit.redactHeaders` names become `REDACTED`.
//!   Names are compared lowercased with `_` read as `-`, as the backends that merge the
//!   two spellings read them. Which headers are captured at all is the policy's
//!   business: only those its rules reference (`policy::field_reads`).

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;

use super::key::AuditKey;
use crate::vocab::canonical_json;

/// Headers whose values are credentials, whatever the settings say.
pub const SECRET_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    // The task token (`X-Toolgate-Task`), named here: the audit log sits below `proxy`.
    "x-toolgate-task",
];

/// Parts of a header name that say its value is a credential (`X-Auth-Token`,
/// `X-Amz-Security-Token`, `Private-Token`, `X-Goog-Api-Key`, `X-CSRF-Token`, …).
const SECRET_PARTS: [&str; 10] = [
    "auth", "token", "secret", "password", "passwd", "cookie", "session", "csrf", "api-key",
    "apikey",
];

/// A header name as compared: lowercased, `_` read as `-`.
fn normal(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

/// What a captured header's value becomes when it is a secret.
pub const REDACTED: &str = "REDACTED";

/// The audit log's rules for secrets; cheap to clone (one per call).
#[derive(Clone, Default)]
pub struct Privacy(Arc<Inner>);

#[derive(Default)]
struct Inner {
    key: Option<AuditKey>,
    headers: HashSet<String>,
}

impl Privacy {
    /// Under `key` (`audit.keyFile`), redacting `redact_headers` besides the credentials.
    pub fn new(key: Option<AuditKey>, redact_headers: &[String]) -> Privacy {
        let headers = SECRET_HEADERS
            .iter()
            .map(|h| h.to_string())
            .chain(redact_headers.iter().map(|h| normal(h)))
            .collect();
        Privacy(Arc::new(Inner { key, headers }))
    }

    /// The digest of canonical arguments (sorted keys, no whitespace): keyed when the
    /// log is.
    pub fn args_digest(&self, args: &Value) -> String {
        match &self.0.key {
            None => {
                let digest = canonical_json::with_text(args, |text| Sha256::digest(text));
                format!("sha256:{}", hex::encode(digest))
            }
            Some(key) => {
                // new_from_slice takes a key of any length; the error arm can't happen.
                let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.secret()) else {
                    return String::new();
                };
                mac.update(b"toolgate argsDigest v1\n");
                canonical_json::with_text(args, |text| mac.update(text));
                format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
            }
        }
    }

    /// Masks the secret headers of a record's `inputs` (`request.headers`).
    pub fn redact_inputs(&self, inputs: &mut Value) {
        let Some(headers) = inputs
            .pointer_mut("/request/headers")
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        for (name, value) in headers.iter_mut() {
            if self.is_secret(name) {
                *value = Value::String(REDACTED.into());
            }
        }
    }

    /// Whether a header's value is a credential the record must not keep.
    fn is_secret(&self, name: &str) -> bool {
        let name = normal(name);
        self.0.headers.contains(&name) || SECRET_PARTS.iter().any(|part| name.contains(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_keyed_digest_depends_on_the_key_and_not_on_key_order() {
        let plain = Privacy::new(None, &[]);
        let a = Privacy::new(AuditKey::from_bytes(b"0123456789abcdef0123"), &[]);
        let b = Privacy::new(AuditKey::from_bytes(b"0123456789abcdef0124"), &[]);
        let args = json!({"month": "2025-07", "n": 1});
        let reordered: Value = serde_json::from_str(r#"{"n":1,"month":"2025-07"}"#).unwrap();
        assert!(plain.args_digest(&args).starts_with("sha256:"));
        assert!(a.args_digest(&args).starts_with("hmac-sha256:"));
        assert_eq!(a.args_digest(&args), a.args_digest(&reordered));
        assert_ne!(a.args_digest(&args), b.args_digest(&args));
        // Guessing needs the key: the plain digest of the guess is not the keyed one.
        assert_ne!(
            a.args_digest(&args).trim_start_matches("hmac-"),
            plain.args_digest(&args)
        );
    }

    #[test]
    fn credentials_and_named_headers_are_masked() {
        let privacy = Privacy::new(None, &["X-Session-Token ".into()]);
        let mut inputs = json!({"request": {"method": "GET", "headers": {
            "cookie": "sid=1", "x-api-key": "k", "proxy-authorization": "Basic x",
            "x-session-token": "t", "x-env": "prod"}}});
        privacy.redact_inputs(&mut inputs);
        let headers = &inputs["request"]["headers"];
        for name in [
            "cookie",
            "x-api-key",
            "proxy-authorization",
            "x-session-token",
        ] {
            assert_eq!(headers[name], REDACTED, "{name}");
        }
        assert_eq!(headers["x-env"], "prod");
        // Named like a credential, or a credential's name spelled with `_`.
        let privacy = Privacy::new(None, &["X-My-Secret".into()]);
        let mut inputs = json!({"request": {"headers": {
            "x-auth-token": "1", "x-amz-security-token": "2", "private-token": "3",
            "x-goog-api-key": "4", "x-csrf-token": "5", "x_api_key": "6",
            "proxy_authorization": "7", "set_cookie": "8", "x_my_secret": "9",
            "x-forwarded-authorization": "10", "x-tenant": "acme"}}});
        privacy.redact_inputs(&mut inputs);
        for (name, value) in inputs["request"]["headers"].as_object().unwrap() {
            let kept = name == "x-tenant";
            assert_eq!(value == REDACTED, !kept, "{name}: {value}");
        }
        // Nothing to mask: untouched.
        let mut none = json!({"agent": {"id": "a"}});
        privacy.redact_inputs(&mut none);
        assert_eq!(none, json!({"agent": {"id": "a"}}));
    }
}

//! Agent identity sources, checked together: the token file (`identity.tokens`), client
//! certificates (`tls.clientCa`) and each JWT issuer (`identity.jwt[]`), in that order.
//!
//! With more than one source, each must speak only for its own agents (README, "Identity
//! and tasks"; DESIGN §14): every JWT issuer after the first declares an `agentPrefix`,
//! prefixes don't overlap, and no issuer is listed twice. The first issuer may keep bare
//! ids beside the token file or client certificates (the usual OAuth setup: one identity
//! provider plus a few static tokens); it still can't assert an id the token file names
//! (`proxy::stage::identify`), and the sidecar warns that a prefix would keep the two
//! apart for good. Names `tokens` and `mtls` are what audit records call the first two
//! sources, so no JWT issuer may be called that.

use super::{file, Settings, SettingsError};
use crate::vocab::agent::{unprintable, MTLS_ISSUER as MTLS, TOKENS_ISSUER as TOKENS};

/// Longest accepted `agentPrefix`.
const MAX_PREFIX: usize = 64;

/// Checks the sources of `settings` (read from `origin`). The sidecar checks again at
/// start, so settings built in code can't skip it either.
pub fn check(settings: &Settings, origin: &str) -> Result<(), SettingsError> {
    let identity = &settings.identity;
    let tokens = identity.tokens.is_some();
    let mtls = settings
        .tls
        .as_ref()
        .is_some_and(|tls| tls.client_ca.is_some());
    let field = |i: usize, key: &str| format!("identity.jwt[{i}].{key}");
    let invalid = |field: String, message: String| Err(file::invalid(origin, field, message));
    for (i, jwt) in identity.jwt.iter().enumerate() {
        if jwt.issuer == TOKENS || jwt.issuer == MTLS {
            return invalid(
                field(i, "issuer"),
                format!("{:?} names the token file or client certificates in audit records; a JWT issuer can't be called so", jwt.issuer),
            );
        }
        if identity.jwt[..i].iter().any(|j| j.issuer == jwt.issuer) {
            return invalid(
                field(i, "issuer"),
                "is listed twice: list each issuer once".into(),
            );
        }
        match &jwt.agent_prefix {
            Some(prefix) => check_prefix(prefix, i, identity)
                .or_else(|message| invalid(field(i, "agentPrefix"), message))?,
            None => {
                let sources = usize::from(tokens) + usize::from(mtls) + identity.jwt.len();
                if sources > 1 && i > 0 {
                    return invalid(
                        field(i, "agentPrefix"),
                        required(tokens, mtls, identity.jwt.len()),
                    );
                }
            }
        }
    }
    Ok(())
}

/// What a prefix must be: short, printable, and neither the start of an earlier issuer's
/// prefix nor started by one (the later of two overlapping issuers is the one blamed).
fn check_prefix(prefix: &str, i: usize, identity: &super::Identity) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX {
        return Err(format!(
            "must be 1 to {MAX_PREFIX} bytes, e.g. \"partner:\""
        ));
    }
    if prefix.chars().any(|c| unprintable(c) || c.is_whitespace()) {
        return Err("must hold no whitespace or control characters".into());
    }
    let overlapping = identity.jwt[..i].iter().enumerate().find(|(_, other)| {
        other
            .agent_prefix
            .as_deref()
            .is_some_and(|p| p.starts_with(prefix) || prefix.starts_with(p))
    });
    match overlapping {
        Some((j, _)) => Err(format!(
            "overlaps identity.jwt[{j}].agentPrefix: one issuer's agent ids would be another's; make neither prefix start the other"
        )),
        None => Ok(()),
    }
}

/// The refusal of an issuer without a prefix, saying what to do.
fn required(tokens: bool, mtls: bool, issuers: usize) -> String {
    let mut sources = Vec::new();
    if tokens {
        sources.push("the token file".to_string());
    }
    if mtls {
        sources.push("client certificates".to_string());
    }
    sources.push(format!(
        "{issuers} JWT issuer{}",
        if issuers == 1 { "" } else { "s" }
    ));
    format!(
        "required: agent ids come from more than one source ({}), so each JWT issuer after the first names its agents under its own prefix, or it could sign any other source's agent id. Set e.g. agentPrefix: \"partner:\" and list that issuer's agents as \"partner:<claim>\" in AgentPolicy agents",
        sources.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    fn parse(text: &str) -> Result<Settings, String> {
        Settings::parse("t.yaml", text, Vec::new()).map_err(|e| e.to_string())
    }

    const A: &str = "{issuer: https://a.example, audience: t, jwks: /a.json";
    const B: &str = "{issuer: https://b.example, audience: t, jwks: /b.json";

    #[test]
    fn one_source_needs_no_prefix() {
        assert!(parse(&format!("identity: {{jwt: [{A}}}]}}")).is_ok());
        assert!(parse("identity: {tokens: /t.yaml}").is_ok());
    }

    #[test]
    fn every_issuer_after_the_first_needs_a_prefix() {
        let err = parse(&format!("identity: {{jwt: [{A}}}, {B}}}]}}")).unwrap_err();
        assert!(err.contains("identity.jwt[1].agentPrefix"), "{err}");
        assert!(err.contains("2 JWT issuers"), "{err}");
        assert!(err.contains("agentPrefix: \"partner:\""), "{err}");
        assert!(parse(&format!(
            "identity: {{jwt: [{A}}}, {B}, agentPrefix: 'b:'}}]}}"
        ))
        .is_ok());
        // The first issuer may stay bare beside the token file or client certificates
        // (it can't name a token-file agent at run time); a second one may not.
        assert!(parse(&format!("identity: {{tokens: /t.yaml, jwt: [{A}}}]}}")).is_ok());
        assert!(parse(&format!(
            "identity: {{jwt: [{A}}}]}}\ntls: {{cert: c, key: k, clientCa: ca}}"
        ))
        .is_ok());
        let err = parse(&format!(
            "identity: {{tokens: /t.yaml, jwt: [{A}}}, {B}}}]}}\ntls: {{cert: c, key: k, clientCa: ca}}"
        ))
        .unwrap_err();
        assert!(err.contains("identity.jwt[1].agentPrefix"), "{err}");
        assert!(
            err.contains("the token file, client certificates, 2 JWT issuers"),
            "{err}"
        );
        assert!(parse(&format!(
            "identity: {{tokens: /t.yaml, jwt: [{A}, agentPrefix: 'a:'}}]}}\ntls: {{cert: c, key: k, clientCa: ca}}"
        ))
        .is_ok());
        // TLS without client certificates is no identity source.
        assert!(parse(&format!(
            "identity: {{jwt: [{A}}}]}}\ntls: {{cert: c, key: k}}"
        ))
        .is_ok());
    }

    #[test]
    fn prefixes_are_printable_and_never_overlap() {
        for (prefix, want) in [
            ("''", "1 to 64 bytes"),
            ("'a b:'", "whitespace"),
            ("\"a\\n:\"", "control"),
            (&format!("'{}'", "p".repeat(65)), "1 to 64 bytes"),
        ] {
            let err = parse(&format!(
                "identity: {{jwt: [{A}, agentPrefix: {prefix}}}]}}"
            ))
            .unwrap_err();
            assert!(err.contains("identity.jwt[0].agentPrefix"), "{err}");
            assert!(err.contains(want), "{prefix}: {err}");
        }
        let err = parse(&format!(
            "identity: {{jwt: [{A}, agentPrefix: 'p:'}}, {B}, agentPrefix: 'p:x'}}]}}"
        ))
        .unwrap_err();
        assert!(
            err.contains("overlaps identity.jwt[0].agentPrefix"),
            "{err}"
        );
        let err = parse(&format!(
            "identity: {{jwt: [{A}, agentPrefix: 'p'}}, {B}, agentPrefix: 'p'}}]}}"
        ))
        .unwrap_err();
        assert!(err.contains("overlaps"), "{err}");
    }

    #[test]
    fn issuers_are_listed_once_and_not_named_like_the_other_sources() {
        let err = parse(&format!(
            "identity: {{jwt: [{A}}}, {A}, agentPrefix: 'b:'}}]}}"
        ))
        .unwrap_err();
        assert!(err.contains("identity.jwt[1].issuer"), "{err}");
        assert!(err.contains("listed twice"), "{err}");
        for name in ["tokens", "mtls"] {
            let err = parse(&format!(
                "identity: {{jwt: [{{issuer: {name}, audience: t, jwks: /j.json}}]}}"
            ))
            .unwrap_err();
            assert!(err.contains("identity.jwt[0].issuer"), "{err}");
        }
    }

    #[test]
    fn the_variables_carry_the_new_fields() {
        let vars = [
            (
                "TOOLGATE_IDENTITY_JWT",
                "[{issuer: a, audience: t, jwks: /a.json}, {issuer: b, audience: t, jwks: /b.json, agentPrefix: 'b:'}]",
            ),
            (
                "TOOLGATE_IDENTITY_TASK_ISSUERS",
                "[{issuer: o, jwks: /o.json, requireAgent: false}, {issuer: p, jwks: /p.json}]",
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let s = Settings::parse("t", "", vars).unwrap();
        assert_eq!(s.identity.jwt[1].agent_prefix.as_deref(), Some("b:"));
        assert!(!s.identity.task_issuers[0].require_agent);
        assert!(s.identity.task_issuers[1].require_agent, "the default");
        let unprefixed = [(
            "TOOLGATE_IDENTITY_JWT".to_string(),
            "[{issuer: a, audience: t, jwks: /a.json}, {issuer: b, audience: t, jwks: /b.json}]"
                .to_string(),
        )];
        let err = Settings::parse("t", "", unprefixed)
            .unwrap_err()
            .to_string();
        assert!(err.contains("identity.jwt[1].agentPrefix"), "{err}");
    }
}

//! Agent identity sources, checked together: the token file (`identity.tokens`), client
//! certificates (`tls.clientCa`), workload identity (`identity.kubernetes`) and each JWT
//! issuer (`identity.jwt[]`), in that order.
//!
//! With more than one source, each must speak only for its own agents (README, "Identity
//! and tasks"; DESIGN §14): every JWT issuer after the first declares an `agentPrefix`,
//! prefixes don't overlap, and no issuer is listed twice. The first issuer may keep bare
//! ids beside the token file or client certificates (the usual OAuth setup: one identity
//! provider plus a few static tokens); it still can't assert an id the token file names
//! (`proxy::stage::identify`), and the sidecar warns that a prefix would keep the two
//! apart for good.
//!
//! Workload identity is namespaced by its own form: its ids are
//! `system:serviceaccount:<namespace>:<name>`, and with it enabled that prefix (and the
//! short spelling `serviceaccount:`) is reserved ([`reserved_prefixes`]): no other source
//! may assert an id under it, and no `agentPrefix` may overlap it. So the first JWT
//! issuer may stay bare beside it. Names `tokens`, `mtls` and `kubernetes` are what
//! audit records call the sources that are not JWT issuers, so no JWT issuer may be
//! called that.

use super::{file, Settings, SettingsError};
use crate::vocab::agent::{
    unprintable, KUBERNETES_ISSUER as KUBERNETES, MTLS_ISSUER as MTLS, SERVICE_ACCOUNT_PREFIX,
    SERVICE_ACCOUNT_SHORT, TOKENS_ISSUER as TOKENS,
};

/// Longest accepted `agentPrefix`.
const MAX_PREFIX: usize = 64;

/// Checks the sources of `settings` (read from `origin`). The sidecar checks again at
/// start, so settings built in code can't skip it either.
pub fn check(settings: &Settings, origin: &str) -> Result<(), SettingsError> {
    let identity = &settings.identity;
    let present = Present::of(settings);
    let field = |i: usize, key: &str| format!("identity.jwt[{i}].{key}");
    let invalid = |field: String, message: String| Err(file::invalid(origin, field, message));
    for (i, jwt) in identity.jwt.iter().enumerate() {
        if [TOKENS, MTLS, KUBERNETES].contains(&jwt.issuer.as_str()) {
            return invalid(
                field(i, "issuer"),
                format!("{:?} names the token file, client certificates or workload identity in audit records; a JWT issuer can't be called so", jwt.issuer),
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
                if present.count() > 1 && i > 0 {
                    return invalid(field(i, "agentPrefix"), required(&present));
                }
            }
        }
    }
    Ok(())
}

/// The sources of agent ids that are not JWT issuers, and how many issuers there are.
struct Present {
    tokens: bool,
    mtls: bool,
    kubernetes: bool,
    issuers: usize,
}

impl Present {
    fn of(settings: &Settings) -> Present {
        Present {
            tokens: settings.identity.tokens.is_some(),
            mtls: settings
                .tls
                .as_ref()
                .is_some_and(|tls| tls.client_ca.is_some()),
            kubernetes: settings.identity.kubernetes.enabled,
            issuers: settings.identity.jwt.len(),
        }
    }

    fn count(&self) -> usize {
        usize::from(self.tokens)
            + usize::from(self.mtls)
            + usize::from(self.kubernetes)
            + self.issuers
    }
}

/// The prefixes no source may assert unless it owns them: every `agentPrefix`, and with
/// workload identity both spellings of a ServiceAccount id.
pub fn reserved_prefixes(settings: &Settings) -> Vec<String> {
    let identity = &settings.identity;
    let mut prefixes: Vec<String> = identity
        .jwt
        .iter()
        .filter_map(|j| j.agent_prefix.clone())
        .collect();
    if identity.kubernetes.enabled {
        prefixes.extend(service_account_prefixes().map(String::from));
    }
    prefixes
}

fn service_account_prefixes() -> [&'static str; 2] {
    [SERVICE_ACCOUNT_PREFIX, SERVICE_ACCOUNT_SHORT]
}

/// Whether one of two prefixes starts the other: ids under one could be under both.
fn overlap(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// What a prefix must be: short, printable, and neither the start of an earlier issuer's
/// prefix nor started by one (the later of two overlapping issuers is the one blamed),
/// nor overlapping a ServiceAccount's id with workload identity on.
fn check_prefix(prefix: &str, i: usize, identity: &super::Identity) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX {
        return Err(format!(
            "must be 1 to {MAX_PREFIX} bytes, e.g. \"partner:\""
        ));
    }
    if prefix.chars().any(|c| unprintable(c) || c.is_whitespace()) {
        return Err("must hold no whitespace or control characters".into());
    }
    if identity.kubernetes.enabled {
        if let Some(reserved) = service_account_prefixes()
            .into_iter()
            .find(|p| overlap(p, prefix))
        {
            return Err(format!(
                "overlaps {reserved:?}, the agent ids of workload identity (identity.kubernetes): choose a prefix that neither starts nor is started by it"
            ));
        }
    }
    let overlapping = identity.jwt[..i].iter().enumerate().find(|(_, other)| {
        other
            .agent_prefix
            .as_deref()
            .is_some_and(|p| overlap(p, prefix))
    });
    match overlapping {
        Some((j, _)) => Err(format!(
            "overlaps identity.jwt[{j}].agentPrefix: one issuer's agent ids would be another's; make neither prefix start the other"
        )),
        None => Ok(()),
    }
}

/// The refusal of an issuer without a prefix, saying what to do.
fn required(present: &Present) -> String {
    let mut sources = Vec::new();
    if present.tokens {
        sources.push("the token file".to_string());
    }
    if present.mtls {
        sources.push("client certificates".to_string());
    }
    if present.kubernetes {
        sources.push("workload identity".to_string());
    }
    let issuers = present.issuers;
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

    const KUBE: &str = "kubernetes: {enabled: true}";

    #[test]
    fn workload_identity_is_a_source_with_its_own_namespace() {
        // The first issuer may stay bare beside it: ServiceAccount ids are reserved.
        assert!(parse(&format!("identity: {{{KUBE}, jwt: [{A}}}]}}")).is_ok());
        let err = parse(&format!("identity: {{{KUBE}, jwt: [{A}}}, {B}}}]}}")).unwrap_err();
        assert!(err.contains("identity.jwt[1].agentPrefix"), "{err}");
        assert!(err.contains("(workload identity, 2 JWT issuers)"), "{err}");
        let settings = parse(&format!(
            "identity: {{{KUBE}, jwt: [{A}}}, {B}, agentPrefix: 'b:'}}]}}"
        ))
        .unwrap();
        assert_eq!(
            super::reserved_prefixes(&settings),
            ["b:", "system:serviceaccount:", "serviceaccount:"]
        );
        let off = parse(&format!("identity: {{jwt: [{A}, agentPrefix: 'a:'}}]}}")).unwrap();
        assert_eq!(super::reserved_prefixes(&off), ["a:"]);
    }

    #[test]
    fn no_prefix_may_reach_into_service_account_ids() {
        for prefix in [
            "system:",
            "s",
            "serviceaccount:",
            "system:serviceaccount:ops:",
            "serviceaccount:ops/",
        ] {
            let err = parse(&format!(
                "identity: {{{KUBE}, jwt: [{A}, agentPrefix: '{prefix}'}}]}}"
            ))
            .unwrap_err();
            assert!(
                err.contains("identity.jwt[0].agentPrefix"),
                "{prefix}: {err}"
            );
            assert!(err.contains("workload identity"), "{prefix}: {err}");
            // Without workload identity those ids belong to no one in particular.
            assert!(parse(&format!(
                "identity: {{jwt: [{A}, agentPrefix: '{prefix}'}}]}}"
            ))
            .is_ok());
        }
        assert!(parse(&format!(
            "identity: {{{KUBE}, jwt: [{A}, agentPrefix: 'sys/'}}]}}"
        ))
        .is_ok());
        let err = parse("identity: {jwt: [{issuer: kubernetes, audience: t, jwks: /j.json}]}")
            .unwrap_err();
        assert!(err.contains("identity.jwt[0].issuer"), "{err}");
    }
}

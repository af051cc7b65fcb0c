//! `TOOLGATE_*` overrides: every settings key has one, named by its path in upper snake
//! case (`limits.maxBodyBytes` → `TOOLGATE_LIMITS_MAX_BODY_BYTES`).
//!
//! The table below is the whole list; a test checks it against the settings types so a
//! new key can't ship without its variable. Variables are passed in (not read from the
//! process) so tests can hand over a plain list.

use serde_json::{Map, Value};

#[derive(Clone, Copy)]
pub enum Kind {
    Str,
    Bool,
    Num,
    /// A decimal number (`0.25`).
    Float,
    /// Comma-separated strings.
    List,
    /// A YAML/JSON flow value, for lists of objects.
    Yaml,
}

const KEYS: &[(&str, Kind)] = &[
    ("listen", Kind::Str),
    ("admin", Kind::Str),
    ("upstream", Kind::Str),
    ("mcp.path", Kind::Str),
    ("mcp.allowedOrigins", Kind::List),
    ("mcp.allowedHosts", Kind::List),
    ("mcp.listing", Kind::Str),
    ("mcp.onDrift", Kind::Str),
    ("policies.files", Kind::List),
    ("policies.allowShadow", Kind::Bool),
    ("policies.kubernetes.enabled", Kind::Bool),
    ("policies.kubernetes.namespace", Kind::Str),
    ("policies.kubernetes.podLabelsFile", Kind::Str),
    ("policies.kubernetes.kubeconfig", Kind::Str),
    ("identity.tokens", Kind::Str),
    ("identity.jwt", Kind::Yaml),
    ("identity.taskIssuers", Kind::Yaml),
    ("identity.oauth", Kind::Yaml),
    ("identity.kubernetes.enabled", Kind::Bool),
    ("identity.kubernetes.audiences", Kind::List),
    ("identity.kubernetes.kubeconfig", Kind::Str),
    ("tls.cert", Kind::Str),
    ("tls.key", Kind::Str),
    ("tls.clientCa", Kind::Str),
    ("tls.agentSan", Kind::Str),
    ("telemetry.otlpEndpoint", Kind::Str),
    ("telemetry.otlpProtocol", Kind::Str),
    ("telemetry.serviceName", Kind::Str),
    ("telemetry.maxQueuedSpans", Kind::Num),
    ("telemetry.sampler", Kind::Str),
    ("telemetry.samplerRatio", Kind::Float),
    ("telemetry.sampleDenials", Kind::Bool),
    ("telemetry.metricsExport", Kind::Str),
    ("telemetry.metricsIntervalMs", Kind::Num),
    ("audit.path", Kind::Str),
    ("audit.onFailure", Kind::Str),
    ("audit.keyFile", Kind::Str),
    ("audit.redactHeaders", Kind::List),
    ("limits.maxBodyBytes", Kind::Num),
    ("limits.headerReadTimeoutMs", Kind::Num),
    ("limits.maxHeaders", Kind::Num),
    ("limits.bodyReadTimeoutMs", Kind::Num),
    ("limits.maxResponseBytes", Kind::Num),
    ("limits.maxConnections", Kind::Num),
    ("limits.writeTimeoutMs", Kind::Num),
    ("limits.unauthenticatedPerSecond", Kind::Num),
    ("limits.drainTimeoutMs", Kind::Num),
    ("limits.maxRateLimiters", Kind::Num),
    ("limits.maxSessions", Kind::Num),
    ("limits.sessionIdleSeconds", Kind::Num),
    ("limits.dedupeMaxBytes", Kind::Num),
    ("limits.headersWithUnderscores", Kind::Str),
    ("limits.maxPolicyFileBytes", Kind::Num),
    ("state.backend", Kind::Str),
    ("state.redis.url", Kind::Str),
    ("state.redis.passwordFile", Kind::Str),
    ("state.redis.cluster", Kind::Bool),
    ("state.redis.keyPrefix", Kind::Str),
    ("state.redis.timeoutMs", Kind::Num),
    ("approvals.approvers.tokens", Kind::Str),
    ("approvals.approvers.jwt", Kind::Yaml),
    ("approvals.notifyUrl", Kind::Str),
    ("approvals.maxPending", Kind::Num),
    ("approvals.maxPendingBytes", Kind::Num),
];

/// Variables that start with `TOOLGATE_` but are not settings keys.
const NOT_KEYS: &[&str] = &[
    "TOOLGATE_LOG",
    "TOOLGATE_LOG_FORMAT",
    "TOOLGATE_CONFIG",
    // Read by `toolgate approvals`, never by the sidecar.
    "TOOLGATE_ADMIN_URL",
    "TOOLGATE_APPROVER_TOKEN_FILE",
];

/// Every settings path that has a variable.
#[cfg(test)]
pub(super) fn keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|(path, _)| *path)
}

/// The variable name of a settings path.
pub fn var_name(path: &str) -> String {
    prefixed_name("TOOLGATE", path)
}

/// The variable name of a settings path under another prefix (`TOOLGATE_INJECT`).
pub fn prefixed_name(prefix: &str, path: &str) -> String {
    let mut name = String::from(prefix);
    for segment in path.split('.') {
        name.push('_');
        for c in segment.chars() {
            if c.is_ascii_uppercase() {
                name.push('_');
            }
            name.push(c.to_ascii_uppercase());
        }
    }
    name
}

/// Applies every `TOOLGATE_*` variable to the settings tree. An unknown `TOOLGATE_*`
/// variable is logged, not fatal: Kubernetes injects `TOOLGATE_PORT`,
/// `TOOLGATE_SERVICE_HOST`, … into every pod of a namespace with a Service named
/// `toolgate`, and the sidecar must still start there. A bad *value* is an error.
///
/// Before them, the standard `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` set
/// `telemetry.sampler` / `samplerRatio`, and `OTEL_EXPORTER_OTLP_ENDPOINT` (with
/// `OTEL_EXPORTER_OTLP_PROTOCOL`) `telemetry.otlpEndpoint` (and `otlpProtocol`), where the
/// file doesn't: so the order is `TOOLGATE_*`, then the file, then `OTEL_*`, then the
/// default.
pub fn apply(
    tree: &mut Value,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<(), (String, String)> {
    let vars: Vec<(String, String)> = vars.into_iter().collect();
    apply_otel(tree, &vars);
    apply_table(tree, vars, "TOOLGATE", KEYS, NOT_KEYS)
}

/// The samplers `OTEL_TRACES_SAMPLER` may name that toolgate runs.
const OTEL_SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

/// `OTEL_TRACES_SAMPLER` and its argument, where the file sets no sampler. The
/// specification has an SDK warn about a value it doesn't know and go on with its
/// default, so a bad one is logged, not fatal.
fn apply_otel(tree: &mut Value, vars: &[(String, String)]) {
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_ascii_lowercase())
    };
    let unset = |tree: &Value, key: &str| tree.pointer(&format!("/telemetry/{key}")).is_none();
    if let Some(sampler) = var("OTEL_TRACES_SAMPLER").filter(|_| unset(tree, "sampler")) {
        if OTEL_SAMPLERS.contains(&sampler.as_str()) {
            let _ = set(tree, "telemetry.sampler", Value::String(sampler));
        } else {
            tracing::warn!(value = %sampler, "ignoring OTEL_TRACES_SAMPLER: not a sampler toolgate runs");
        }
    }
    apply_otel_endpoint(tree, vars);
    if let Some(arg) = var("OTEL_TRACES_SAMPLER_ARG").filter(|_| unset(tree, "samplerRatio")) {
        match arg.parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => {
                let _ = set(tree, "telemetry.samplerRatio", Value::from(ratio));
            }
            _ => {
                tracing::warn!(value = %arg, "ignoring OTEL_TRACES_SAMPLER_ARG: not a ratio between 0 and 1")
            }
        }
    }
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT`, where the file names no endpoint, and with it
/// `OTEL_EXPORTER_OTLP_PROTOCOL` where the file names no protocol. The protocol is only
/// taken with the endpoint: a pod's `OTEL_*` protocol (set for the app beside it, say)
/// must not turn the file's gRPC endpoint into an HTTP one.
fn apply_otel_endpoint(tree: &mut Value, vars: &[(String, String)]) {
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let unset = |tree: &Value, key: &str| tree.pointer(&format!("/telemetry/{key}")).is_none();
    // The variable wins later anyway; its protocol must not come from the OTEL pair.
    let named = var(&var_name("telemetry.otlpEndpoint")).is_some();
    let Some(endpoint) =
        var("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|_| !named && unset(tree, "otlpEndpoint"))
    else {
        return;
    };
    let _ = set(tree, "telemetry.otlpEndpoint", Value::String(endpoint));
    let Some(protocol) = var("OTEL_EXPORTER_OTLP_PROTOCOL").filter(|_| unset(tree, "otlpProtocol"))
    else {
        return;
    };
    match protocol.to_ascii_lowercase().as_str() {
        "grpc" => {
            let _ = set(tree, "telemetry.otlpProtocol", Value::from("grpc"));
        }
        "http/protobuf" => {
            let _ = set(tree, "telemetry.otlpProtocol", Value::from("http"));
        }
        _ => {
            tracing::warn!(value = %protocol, "ignoring OTEL_EXPORTER_OTLP_PROTOCOL: toolgate sends grpc or http/protobuf")
        }
    }
}

/// [`apply`] for any settings file: `keys` are its paths, `prefix` its variables' prefix
/// (the injector's settings use `TOOLGATE_INJECT`), `not_keys` variables to leave alone.
pub fn apply_table(
    tree: &mut Value,
    vars: impl IntoIterator<Item = (String, String)>,
    prefix: &str,
    keys: &[(&str, Kind)],
    not_keys: &[&str],
) -> Result<(), (String, String)> {
    for (name, raw) in vars {
        let ours = name
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with('_'));
        if !ours || not_keys.contains(&name.as_str()) {
            continue;
        }
        let Some((path, kind)) = keys
            .iter()
            .find(|(path, _)| prefixed_name(prefix, path) == name)
        else {
            tracing::warn!(variable = %name, "ignoring a TOOLGATE_* variable that names no setting");
            continue;
        };
        let value = convert(&raw, *kind).map_err(|message| (name.clone(), message))?;
        set(tree, path, value).map_err(|message| (name.clone(), message))?;
    }
    Ok(())
}

fn convert(raw: &str, kind: Kind) -> Result<Value, String> {
    match kind {
        Kind::Str => Ok(Value::String(raw.to_string())),
        Kind::Bool => match raw {
            "true" | "1" => Ok(Value::Bool(true)),
            "false" | "0" => Ok(Value::Bool(false)),
            _ => Err(format!("expected true or false, got {raw:?}")),
        },
        Kind::Num => raw
            .parse::<u64>()
            .map(Value::from)
            .map_err(|_| format!("expected a whole number, got {raw:?}")),
        Kind::Float => raw
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Value::from)
            .ok_or_else(|| format!("expected a number, got {raw:?}")),
        Kind::List => Ok(Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        )),
        Kind::Yaml => serde_yaml::from_str(raw).map_err(|e| e.to_string()),
    }
}

fn set(tree: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let mut node = tree;
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        if node.is_null() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            return Err(format!("cannot set {path}: its parent is not a map"));
        };
        if segments.peek().is_none() {
            map.insert(segment.to_string(), value);
            return Ok(());
        }
        node = map.entry(segment.to_string()).or_insert(Value::Null);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Settings;
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_follow_the_path() {
        assert_eq!(
            var_name("limits.maxBodyBytes"),
            "TOOLGATE_LIMITS_MAX_BODY_BYTES"
        );
        assert_eq!(var_name("listen"), "TOOLGATE_LISTEN");
    }

    #[test]
    fn overrides_win_over_the_file() {
        let s = Settings::parse(
            "t",
            "upstream: http://a:1\nlimits: {maxHeaders: 5}",
            vars(&[
                ("TOOLGATE_UPSTREAM", "http://b:2"),
                ("TOOLGATE_LIMITS_MAX_HEADERS", "7"),
                ("TOOLGATE_POLICIES_FILES", "/a, /b"),
                ("TOOLGATE_TLS_CERT", "c.pem"),
                ("TOOLGATE_TLS_KEY", "k.pem"),
                ("TOOLGATE_POLICIES_ALLOW_SHADOW", "true"),
                ("PATH", "/bin"),
            ]),
        )
        .unwrap();
        assert_eq!(s.upstream, "http://b:2");
        assert_eq!(s.limits.max_headers, 7);
        assert_eq!(s.policies.files.len(), 2);
        assert_eq!(s.tls.unwrap().cert.to_str(), Some("c.pem"));
        assert!(s.policies.allow_shadow);
    }

    #[test]
    fn unknown_variables_are_ignored_but_bad_values_are_errors() {
        // What Kubernetes service links inject next to a Service named `toolgate`.
        let injected = vars(&[
            ("TOOLGATE_PORT", "tcp://10.0.0.1:15100"),
            ("TOOLGATE_SERVICE_HOST", "10.0.0.1"),
        ]);
        assert!(Settings::parse("t", "", injected).is_ok());
        let err =
            Settings::parse("t", "", vars(&[("TOOLGATE_LIMITS_MAX_HEADERS", "many")])).unwrap_err();
        assert!(err.to_string().contains("TOOLGATE_LIMITS_MAX_HEADERS"));
    }

    /// One order for the collector, as for the sampler: `TOOLGATE_*`, then the file, then
    /// the standard `OTEL_EXPORTER_OTLP_*` pair, then none.
    #[test]
    fn the_otlp_endpoint_has_one_precedence() {
        let otel = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        let telemetry = |file: &str, extra: &[(&str, &str)]| {
            let mut all = otel.to_vec();
            all.extend_from_slice(extra);
            Settings::parse("t", file, vars(&all)).unwrap().telemetry
        };
        let from_otel = telemetry("", &[]);
        assert_eq!(from_otel.otlp_endpoint.as_deref(), Some("http://otel:4318"));
        assert_eq!(from_otel.otlp_protocol, super::super::OtlpProtocol::Http);
        // The file's endpoint wins, and keeps its own (default) protocol.
        let from_file = telemetry("telemetry: {otlpEndpoint: 'http://file:4317'}", &[]);
        assert_eq!(from_file.otlp_endpoint.as_deref(), Some("http://file:4317"));
        assert_eq!(from_file.otlp_protocol, super::super::OtlpProtocol::Grpc);
        // TOOLGATE_* wins over both.
        let from_var = telemetry(
            "telemetry: {otlpEndpoint: 'http://file:4317'}",
            &[("TOOLGATE_TELEMETRY_OTLP_ENDPOINT", "http://var:4317")],
        );
        assert_eq!(from_var.otlp_endpoint.as_deref(), Some("http://var:4317"));
        let var_alone = telemetry(
            "",
            &[("TOOLGATE_TELEMETRY_OTLP_ENDPOINT", "http://var:4317")],
        );
        assert_eq!(var_alone.otlp_endpoint.as_deref(), Some("http://var:4317"));
        assert_eq!(var_alone.otlp_protocol, super::super::OtlpProtocol::Grpc);
        // An unknown protocol is ignored (logged), an empty endpoint is no endpoint.
        let odd = Settings::parse(
            "t",
            "",
            vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ]),
        )
        .unwrap()
        .telemetry;
        assert_eq!(odd.otlp_protocol, super::super::OtlpProtocol::Grpc);
        let empty = Settings::parse("t", "", vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]));
        assert_eq!(empty.unwrap().telemetry.otlp_endpoint, None);
        assert_eq!(
            Settings::parse("t", "", vars(&[]))
                .unwrap()
                .telemetry
                .otlp_endpoint,
            None
        );
    }

    /// Every leaf of a fully populated settings tree has a variable.
    #[test]
    fn every_key_has_a_variable() {
        let defaults = Settings::default();
        let s = Settings {
            tls: Some(super::super::Tls {
                cert: "c".into(),
                key: "k".into(),
                client_ca: Some("ca".into()),
                agent_san: Default::default(),
            }),
            identity: super::super::Identity {
                tokens: Some("t".into()),
                kubernetes: super::super::KubernetesIdentity {
                    kubeconfig: Some("k".into()),
                    ..defaults.identity.kubernetes.clone()
                },
                ..defaults.identity.clone()
            },
            telemetry: super::super::Telemetry {
                otlp_endpoint: Some("e".into()),
                ..defaults.telemetry.clone()
            },
            approvals: super::super::Approvals {
                approvers: super::super::Approvers {
                    tokens: Some("a".into()),
                    jwt: Vec::new(),
                },
                notify_url: Some("http://n".into()),
                ..defaults.approvals.clone()
            },
            state: super::super::State {
                redis: super::super::Redis {
                    password_file: Some("p".into()),
                    ..defaults.state.redis.clone()
                },
                ..defaults.state.clone()
            },
            ..defaults
        };
        let tree = serde_json::to_value(&s).unwrap();
        for leaf in crate::config::file::leaves(&tree) {
            assert!(
                KEYS.iter().any(|(k, _)| *k == leaf),
                "settings key {leaf} has no TOOLGATE_* variable"
            );
        }
    }
}

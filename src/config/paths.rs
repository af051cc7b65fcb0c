//! Relative paths in a settings file are relative to the file's folder, as in every tool
//! that reads one (a kubeconfig, a compose file): `toolgate run --config
//! deploy/toolgate.yaml` finds `policies/` next to it, wherever it is started from.
//!
//! Only the file's values are resolved, before the `TOOLGATE_*` variables apply: a
//! variable's relative path stays relative to the working directory, as for any
//! command-line value. Absolute paths, URLs (a `jwks` may be one) and the `audit.path`
//! words `stdout` and `off` are left as they are.

use serde_json::Value;
use std::path::Path;

/// The sidecar settings that name files or folders; `[]` marks every element of a list.
pub const PATHS: &[&str] = &[
    "policies.files[]",
    "policies.kubernetes.podLabelsFile",
    "policies.kubernetes.kubeconfig",
    "identity.tokens",
    "identity.jwt[].jwks",
    "identity.taskIssuers[].jwks",
    "identity.kubernetes.kubeconfig",
    "tls.cert",
    "tls.key",
    "tls.clientCa",
    "audit.path",
    "audit.keyFile",
    "state.redis.passwordFile",
    "approvals.approvers.tokens",
    "approvals.approvers.jwt[].jwks",
];

/// Values of path settings that are not paths.
const WORDS: &[&str] = &["stdout", "off"];

/// Rewrites every relative path of `paths` in `tree` (a settings document) as `base`
/// joined with it.
pub fn resolve(tree: &mut Value, base: &Path, paths: &[&str]) {
    for path in paths {
        let segments: Vec<&str> = path.split('.').collect();
        walk(tree, &segments, base);
    }
}

fn walk(node: &mut Value, segments: &[&str], base: &Path) {
    let Some((first, rest)) = segments.split_first() else {
        rebase(node, base);
        return;
    };
    let (key, each) = match first.strip_suffix("[]") {
        Some(key) => (key, true),
        None => (*first, false),
    };
    let Some(child) = node.get_mut(key) else {
        return;
    };
    match (each, child) {
        (true, Value::Array(items)) => {
            for item in items {
                walk(item, rest, base);
            }
        }
        (false, child) => walk(child, rest, base),
        // A list setting given as something else: deserializing says what is wrong.
        (true, _) => {}
    }
}

fn rebase(value: &mut Value, base: &Path) {
    let Value::String(text) = value else {
        return;
    };
    let keep = text.is_empty()
        || WORDS.contains(&text.as_str())
        || text.contains("://")
        || Path::new(text.as_str()).is_absolute();
    if !keep {
        *text = base.join(text.as_str()).to_string_lossy().into_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn relative_paths_move_under_the_folder_and_nothing_else_does() {
        let mut tree = json!({
            "policies": {"files": ["policies", "/etc/toolgate/more.yaml"]},
            "identity": {
                "tokens": "secrets/tokens.yaml",
                "jwt": [{"issuer": "a", "audience": "b", "jwks": "https://idp.example/jwks"},
                        {"issuer": "c", "audience": "d", "jwks": "keys/c.json"}],
            },
            "audit": {"path": "stdout", "keyFile": "../audit-key"},
            "upstream": "relative/not/a/path",
        });
        resolve(&mut tree, Path::new("/srv/gw"), PATHS);
        assert_eq!(
            tree,
            json!({
                "policies": {"files": ["/srv/gw/policies", "/etc/toolgate/more.yaml"]},
                "identity": {
                    "tokens": "/srv/gw/secrets/tokens.yaml",
                    "jwt": [{"issuer": "a", "audience": "b", "jwks": "https://idp.example/jwks"},
                            {"issuer": "c", "audience": "d", "jwks": "/srv/gw/keys/c.json"}],
                },
                "audit": {"path": "stdout", "keyFile": "/srv/gw/../audit-key"},
                "upstream": "relative/not/a/path",
            })
        );
        let mut off = json!({"audit": {"path": "off"}, "policies": {"files": "x"}});
        resolve(&mut off, Path::new("/srv"), PATHS);
        assert_eq!(
            off,
            json!({"audit": {"path": "off"}, "policies": {"files": "x"}})
        );
    }

    /// A setting named like a file (`…File`, `…files`, `jwks`, `cert`, `key`, `clientCa`,
    /// `kubeconfig`, `tokens`, `audit.path`) is resolved, unless it is listed here as
    /// not being one: a new path setting can't be forgotten.
    #[test]
    fn every_setting_named_like_a_path_is_resolved() {
        let not_paths = ["mcp.path", "state.redis.keyPrefix"];
        let looks_like_a_path = |key: &str| {
            let last = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
            [
                "file",
                "files",
                "jwks",
                "cert",
                "key",
                "clientca",
                "kubeconfig",
                "tokens",
                "path",
            ]
            .iter()
            .any(|end| last.ends_with(end))
        };
        let resolved = |key: &str| PATHS.iter().any(|p| p.replace("[]", "") == key);
        for key in super::super::env::keys() {
            if looks_like_a_path(key) && !not_paths.contains(&key) {
                assert!(
                    resolved(key),
                    "{key} names a file: list it in config::paths::PATHS"
                );
            }
        }
    }
}

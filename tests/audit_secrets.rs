//! Secrets stay out of the record (DESIGN §14): a capturing contract's record keeps only
//! the request headers its rules read, never a credential's value; with `audit.keyFile`
//! the arguments' digest is keyed, so a low-entropy argument can't be recovered by
//! hashing guesses — and `toolgate audit verify` and `toolgate replay` still read the log.

mod common;

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::process::Command;

/// `read_logs` captures its arguments; ops-bot's rule reads one header, stranger's reads
/// them all.
const POLICIES: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec:
  tool: read_logs
  http: {method: GET, path: \"/logs/{service}\"}
  captureArguments: true
  input:
    type: object
    required: [service]
    properties:
      service: {type: string}
      month: {type: string}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools:
    - name: read_logs
      rules:
        - {name: prod-only, expr: \"request.headers['x-env'] == 'prod'\"}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: stranger}
spec:
  agents: [stranger]
  tools:
    - name: read_logs
      rules:
        - {name: any-header, expr: \"size(request.headers) > 0\"}
";

const SECRETS: [(&str, &str); 6] = [
    ("cookie", "sid=s3cret-cookie"),
    ("x-auth-token", "s3cret-named-like-one"),
    ("x-api-key", "s3cret-key"),
    ("proxy-authorization", "Basic s3cret-proxy"),
    ("x-session-token", "s3cret-session"),
    ("x-env", "prod"),
];

/// What a sidecar wrote: its folder, its audit log, and the folder holding its key file.
struct Recorded {
    dir: tempfile::TempDir,
    log: String,
    key_file: std::path::PathBuf,
    _keys: tempfile::TempDir,
}

async fn recorded(key: Option<&str>) -> Recorded {
    let backend = Backend::example().await;
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("audit.key");
    if let Some(key) = key {
        std::fs::write(&key_file, key).unwrap();
    }
    let keyed = key.map(|_| key_file.clone());
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(move |s| {
                s.audit.key_file = keyed;
                s.audit.redact_headers = vec!["X-Session-Token".into()];
            }),
            ..Options::default()
        },
    )
    .await;
    for token in [OPS_TOKEN, STRANGER_TOKEN] {
        let r = h
            .call(
                "GET",
                "/logs/orders?month=2025-07",
                Some(token),
                &SECRETS,
                "",
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let dir = h.stop_keeping_files().await;
    let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    Recorded {
        dir,
        log,
        key_file,
        _keys: keys,
    }
}

/// A rule reading one header captures that one; a rule reading them all captures every
/// header but the credentials, which are masked, as is what `audit.redactHeaders` names.
#[tokio::test]
async fn captured_headers_are_the_ones_rules_read_and_never_a_secret() {
    let log = recorded(None).await.log;
    for (_, secret) in &SECRETS[..5] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    let calls = audit_calls(&log);
    let headers = |agent: &str| -> Value {
        calls.iter().find(|c| c["agent"] == agent).unwrap()["inputs"]["request"]["headers"].clone()
    };
    assert_eq!(headers("ops-bot"), serde_json::json!({"x-env": "prod"}));
    let all = headers("stranger");
    for name in [
        "cookie",
        "x-auth-token",
        "x-api-key",
        "proxy-authorization",
        "x-session-token",
    ] {
        assert_eq!(all[name], "REDACTED", "{name}: {all}");
    }
    assert_eq!(all["x-env"], "prod");
    assert!(all.get("authorization").is_none(), "{all}");
}

/// With `audit.keyFile`, `argsDigest` is HMAC-SHA256 under the key: hashing the guess
/// `{"month":"2025-07",…}` does not find it. The keyed log still verifies and replays.
#[tokio::test]
async fn the_args_digest_is_keyed_and_keyed_logs_still_verify_and_replay() {
    let key = "k3y-0f-the-audit-l0g-0123456789";
    let Recorded {
        dir,
        log,
        key_file,
        _keys: _held,
    } = recorded(Some(key)).await;
    let calls = audit_calls(&log);
    let canonical = r#"{"month":"2025-07","service":"orders"}"#;
    let guess = format!("sha256:{}", hex::encode(Sha256::digest(canonical)));
    for call in &calls {
        let digest = call["argsDigest"].as_str().unwrap();
        assert!(digest.starts_with("hmac-sha256:"), "{digest}");
        assert_ne!(
            digest.trim_start_matches("hmac-"),
            guess.trim_start_matches("sha256:")
        );
    }
    // Without a key, the same call's digest is the plain one the guess finds.
    let plain = recorded(None).await.log;
    assert_eq!(audit_calls(&plain)[0]["argsDigest"], guess.as_str());

    let path = dir.path().join("audit.log");
    let verify = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify"])
        .arg(&path)
        .arg("--key-file")
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let policies = dir.path().join("candidate.yaml");
    std::fs::write(&policies, POLICIES).unwrap();
    let replay = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("replay")
        .arg("--audit")
        .arg(&path)
        .arg("--policies")
        .arg(&policies)
        .args(["--format", "json", "--key-file"])
        .arg(&key_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["replayed"], 2, "{report}");
    assert_eq!(report["changed"], 0, "{report}");
}

/// A header a rule reads is one value: sent twice (the rule would judge one, the backend
/// take the other) or as something that isn't text, the call is refused, not forwarded.
#[tokio::test]
async fn a_header_a_rule_reads_must_be_sent_once() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            ..Options::default()
        },
    )
    .await;
    let twice = [("x-env", "dev"), ("x-env", "prod")];
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &twice, "")
        .await;
    r.assert_refused("MALFORMED_REQUEST", 400);
    assert!(r.text.contains("x-env"), "{}", r.text);
    let once = [("x-env", "prod")];
    let r = h
        .call("GET", "/logs/orders", Some(OPS_TOKEN), &once, "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(backend.seen.lock().unwrap().len(), 1);
    h.stop().await;
}

//! Fixtures shared by the micro-benchmarks: the load benchmark's own policies, body,
//! agent and task token (`bench/`), and generated policy sets of any size.
#![allow(dead_code)]

pub mod inproc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use std::sync::Arc;

use toolgate::crd::{parse_documents, Object};
use toolgate::identity::tokens::{digest_hex, TokenTable};
use toolgate::identity::Tokens;
use toolgate::policy::{BuildOptions, Snapshot};
use toolgate::proxy::stage::identify::Identity;

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const TOKEN: &str = "bench-token";
pub const AGENT: &str = "bench-bot";
const ORCHESTRATOR_KEY: &[u8] = include_bytes!("../../examples/keys/orchestrator-demo.pem");

/// `cargo bench` passes `--bench`; `cargo test --all-targets` runs each benchmark once in
/// a debug build, where the big fixtures would only cost time.
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The objects of `bench/policies/{name}.yaml`.
pub fn policy_objects(name: &str) -> Vec<Object> {
    let path = format!("{ROOT}/bench/policies/{name}.yaml");
    let text = std::fs::read_to_string(&path).expect("bench policies");
    let (objects, errors) = parse_documents(&path, &text);
    assert!(errors.is_empty(), "{errors:?}");
    objects
}

pub fn snapshot_of(objects: &[Object]) -> Snapshot {
    let (snapshot, errors) = Snapshot::build(objects, &BuildOptions::default(), 1);
    assert!(errors.is_empty(), "{errors:?}");
    snapshot
}

/// The ~1 KiB REST body of the load benchmark.
pub fn body() -> Bytes {
    Bytes::from(std::fs::read(format!("{ROOT}/bench/body.json")).expect("bench body"))
}

pub fn args() -> Value {
    serde_json::from_slice(&body()).expect("a JSON body")
}

/// Static-token identity for [`AGENT`], plus the demo orchestrator as task issuer.
pub fn identity() -> Identity {
    let table = TokenTable::parse(&format!("{AGENT}: {}", digest_hex(TOKEN))).expect("tokens");
    let tasks = toolgate::identity::task::TaskTokens::load(
        &[toolgate::config::TaskIssuer {
            issuer: "orchestrator".into(),
            audience: None,
            jwks: Some(
                std::path::PathBuf::from(format!("{ROOT}/examples/keys/task-jwks.json")).into(),
            ),
            discovery: false,
            require_agent: true,
        }],
        &toolgate::identity::remote::Fetcher::new(Default::default()),
    )
    .expect("task issuer");
    Identity {
        tokens: Some(Arc::new(Tokens::new(table))),
        jwt: None,
        tasks: Some(tasks),
        ..Identity::default()
    }
}

/// The headers the load sends: credential, task token, JSON.
pub fn headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    headers.insert("x-toolgate-task", task_token(AGENT).parse().unwrap());
    headers
}

/// A task token for `agent`, as the demo orchestrator signs it.
pub fn task_token(agent: &str) -> String {
    let key = jsonwebtoken::EncodingKey::from_ed_pem(ORCHESTRATOR_KEY).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("orchestrator-demo".into());
    let claims = serde_json::json!({
        "iss": "orchestrator",
        "exp": toolgate::identity::jwks::now_seconds() + 3600,
        "agent": agent,
        "service": "orders",
        "window_minutes": 60,
    });
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

/// `n` contracts (`tool_{i}`, `POST /t{i}/search`, a 4-property schema) and `n` policies
/// (agent `agent-{i}` may call `tool_{i}` under two rules).
pub fn scaled_objects(n: usize) -> Vec<Object> {
    let mut text = String::with_capacity(n * 900);
    for i in 0..n {
        text.push_str(&format!(
            r#"---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {{name: tool-{i}}}
spec:
  tool: tool_{i}
  http: {{method: POST, path: "/t{i}/search/{{service}}"}}
  idempotent: true
  input:
    type: object
    required: [service, query]
    properties:
      service: {{type: string, enum: [orders, payments]}}
      query: {{type: string, maxLength: 200}}
      limit: {{type: integer, minimum: 1, maximum: 1000, default: 100}}
      tags: {{type: array, items: {{type: string}}}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {{name: agent-{i}}}
spec:
  agents: [agent-{i}]
  rateLimit: {{perSecond: 1000000}}
  tools:
    - name: tool_{i}
      rules:
        - {{name: page, expr: "args.limit <= 500"}}
        - {{name: tags, expr: "size(args.tags) <= 5"}}
"#
        ));
    }
    let (objects, errors) = parse_documents("scaled", &text);
    assert!(errors.is_empty(), "{errors:?}");
    objects
}

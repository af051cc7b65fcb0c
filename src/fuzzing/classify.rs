//! The `classify` target: a REST request (method, path, query, body) → the tool and its
//! arguments, against a small fixed policy. Checking the body without parsing it must
//! give exactly what parsing gives; a refusal is one of classify's codes.

use bytes::Bytes;
use http::Method;
use serde_json::Value;
use std::sync::OnceLock;

use crate::crd::parse_documents;
use crate::policy::{BuildOptions, Snapshot};
use crate::proxy::rest::classify::classify as classify_call;
use crate::vocab::{Code, Reject};

/// The contracts REST classification is fuzzed against: every argument source (path,
/// catch-all, query, body), every typed conversion, and both body paths (checked-only
/// for an open idempotent contract, parsed for the others).
const CLASSIFY_POLICY: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: read-logs}
spec:
  tool: read_logs
  http: {method: GET, path: "/logs/{service}"}
  input:
    type: object
    properties:
      service: {type: string}
      window_minutes: {type: integer}
      ratio: {type: number}
      verbose: {type: boolean}
      cursor: {type: ["null", "integer", "string"]}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: search}
spec: {tool: search, http: {method: POST, path: /search}, input: {}, idempotent: true}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: create}
spec: {tool: create, http: {method: POST, path: /create}, input: {}, idempotent: false}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: note}
spec:
  tool: note
  http: {method: PUT, path: "/orgs/{org}/notes/{id}"}
  input: {type: object, properties: {id: {type: integer}}}
  captureArguments: true
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: files}
spec:
  tool: files
  http: {method: GET, path: "/files/{*path}"}
  input: {type: object, properties: {path: {type: string}}}
"#;

const METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
];

pub(crate) fn classify_snapshot() -> &'static Snapshot {
    static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let (objects, errors) = parse_documents("fuzz", CLASSIFY_POLICY);
        assert!(errors.is_empty(), "the fuzz policy parses: {errors:?}");
        let (snapshot, errors) = Snapshot::build(&objects, &BuildOptions::default(), 1);
        assert!(errors.is_empty(), "the fuzz policy builds: {errors:?}");
        snapshot
    })
}

/// `[method selector] path \n query \n body`: a missing or empty query segment is no
/// query at all (the same to classify as an empty one).
pub fn classify(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let method = &METHODS[usize::from(selector) % METHODS.len()];
    let mut parts = rest.splitn(3, |&b| b == b'\n');
    let path = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let query = parts
        .next()
        .filter(|q| !q.is_empty())
        .map(String::from_utf8_lossy);
    let body = Bytes::copy_from_slice(parts.next().unwrap_or_default());
    let snapshot = classify_snapshot();

    let lazy = classify_call(snapshot, method, &path, query.as_deref(), &body, false);
    let eager = classify_call(snapshot, method, &path, query.as_deref(), &body, true);
    match (lazy, eager) {
        (Ok(lazy), Ok(eager)) => {
            // The checked-only body must be exactly what the parser would have built.
            assert_eq!(lazy.tool, eager.tool);
            assert_eq!(lazy.json_body, eager.json_body);
            assert_eq!(lazy.url_keys, eager.url_keys);
            assert!(lazy.args.is_object());
            let Value::Object(args) = eager.args.value() else {
                panic!("arguments are not an object: {:?}", eager.args.value())
            };
            assert_eq!(lazy.args.value(), eager.args.value());
            for key in &eager.url_keys {
                assert!(args.contains_key(key), "url key {key} is not an argument");
            }
            if lazy.json_body {
                let parsed: Result<Value, _> = serde_json::from_slice(&body);
                assert!(matches!(parsed, Ok(Value::Object(_))), "accepted body");
            }
        }
        (Err(lazy), Err(eager)) => {
            assert_eq!(
                lazy.code, eager.code,
                "{} / {}",
                lazy.message, eager.message
            );
            check_classify_reject(&lazy);
        }
        (lazy, eager) => panic!(
            "checking and parsing the body disagree: {:?} / {:?}",
            lazy.map(|c| c.tool),
            eager.map(|c| c.tool)
        ),
    }
}

fn check_classify_reject(reject: &Reject) {
    assert!(
        matches!(
            reject.code,
            Code::UnknownTool | Code::MalformedRequest | Code::InvalidArguments
        ),
        "classify refused with {:?}",
        reject.code
    );
    let body = reject.body("00000000000000000000000000000000");
    assert_eq!(body["error"]["code"], reject.code.as_str());
    assert_eq!(body["error"]["recovery"], reject.recovery().as_str());
    assert!(serde_json::to_vec(&body).is_ok());
}

//! The `manifest` target: YAML text → parsed manifests → a compiled snapshot (schemas,
//! routes, CEL rules), with every error naming where it came from.

use crate::crd::parse_documents;
use crate::policy::{BuildOptions, Snapshot};

/// One YAML text of manifests → a compiled snapshot (schemas, routes, CEL).
pub fn manifest(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (objects, parse_errors) = parse_documents("fuzz.yaml", &text);
    for e in &parse_errors {
        assert_eq!(e.origin, "fuzz.yaml");
    }
    let options = BuildOptions {
        allow_shadow: data.len().is_multiple_of(2),
        pod_labels: None,
    };
    let (snapshot, build_errors) = Snapshot::build(&objects, &options, 7);
    assert_eq!(snapshot.version, 7);
    for e in &build_errors {
        assert_eq!(e.origin, "fuzz.yaml");
        assert!(e.object.is_some(), "a build error names its object: {e:?}");
    }
    for (i, contract) in snapshot.contracts.iter().enumerate() {
        let id = snapshot.tool(&contract.tool);
        assert_eq!(id.map(|t| t.0), Some(i), "tool {} resolves", contract.tool);
    }
}

//! The generated CRDs: `crds/` matches the types, the schemas accept the examples and
//! reject what the API server would, and the CRDs and the Role are valid Kubernetes objects.
//!
//! `TOOLGATE_BLESS=1 cargo test --test crds` rewrites `crds/` from the types.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

use toolgate::crd::definition::{self, render};
use toolgate::crd::parse_documents;
use toolgate::policy::{BuildOptions, Snapshot};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn crds_folder_matches_the_types() {
    let dir = root().join(definition::FOLDER);
    let generated = render();
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (file, yaml) in &generated {
            std::fs::write(dir.join(file), yaml).unwrap();
        }
    }
    let names: Vec<String> = generated.iter().map(|(f, _)| f.clone()).collect();
    let on_disk: Vec<String> = yaml_files(definition::FOLDER)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        on_disk, names,
        "crds/ holds other files than the generated ones"
    );
    for (file, yaml) in &generated {
        let disk = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(
            &disk == yaml,
            "crds/{file} drifted from the types: run TOOLGATE_BLESS=1 cargo test --test crds"
        );
    }
}

#[test]
fn toolgate_crds_prints_the_files() {
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(output.status.success());
    let files: String = render().into_iter().map(|(_, yaml)| yaml).collect();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), files);
}

/// The CRD's schema for `kind`, as the API server validates with it: the implicit
/// `apiVersion`/`kind`/`metadata`, and unknown fields rejected (kubectl's default
/// `--validate=strict`) except under `x-kubernetes-preserve-unknown-fields`.
fn schema_of(kind: &str) -> Value {
    let crd = definition::definitions()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .clone()
        .unwrap()
        .open_api_v3_schema;
    let mut schema = serde_json::to_value(schema.unwrap()).unwrap();
    let properties = schema["properties"].as_object_mut().unwrap();
    properties.insert("apiVersion".into(), json!({"type": "string"}));
    properties.insert("kind".into(), json!({"type": "string"}));
    properties.insert("metadata".into(), json!({"type": "object"}));
    strict(&mut schema);
    schema
}

fn strict(node: &mut Value) {
    let Some(map) = node.as_object_mut() else {
        return;
    };
    if map.contains_key("properties") && !map.contains_key("x-kubernetes-preserve-unknown-fields") {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (_, child) in map
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flatten()
    {
        strict(child);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get_mut(key) {
            strict(child);
        }
    }
}

/// Every schema violation of `object`, as text.
fn violations(object: &Value) -> Vec<String> {
    let schema = schema_of(object["kind"].as_str().unwrap());
    let validator = jsonschema::draft4::new(&schema).expect("the CRD schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

#[test]
fn cluster_examples_match_the_crd_schemas_and_build() {
    let files = yaml_files("examples/cluster");
    let kinds: Vec<String> = files
        .iter()
        .flat_map(|f| documents(f))
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    assert!(kinds.contains(&"ToolContract".into()) && kinds.contains(&"AgentPolicy".into()));
    let mut objects = Vec::new();
    for file in &files {
        for object in documents(file) {
            assert_eq!(
                violations(&object),
                Vec::<String>::new(),
                "{}",
                file.display()
            );
        }
        let (mut parsed, errors) = parse_documents(
            &file.display().to_string(),
            &std::fs::read_to_string(file).unwrap(),
        );
        assert!(errors.is_empty(), "{errors:?}");
        objects.append(&mut parsed);
    }
    let labels = [("app".to_string(), "log-service".to_string())];
    let options = BuildOptions {
        allow_shadow: false,
        pod_labels: Some(labels.into_iter().collect()),
    };
    let (snapshot, errors) = Snapshot::build(&objects, &options, 1);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(snapshot.contracts.len(), 2);
    assert_eq!(snapshot.policies.len(), 1);
}

#[test]
fn the_schemas_reject_what_the_api_server_would() {
    let policy = |spec: Value| json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "AgentPolicy", "metadata": {"name": "p"}, "spec": spec});
    let contract = |spec: Value| json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolContract", "metadata": {"name": "c"}, "spec": spec});
    let good = policy(json!({"agents": ["a"], "mode": "shadow", "tools": [{"name": "t"}]}));
    assert_eq!(violations(&good), Vec::<String>::new());
    let rejected = [
        ("mode", policy(json!({"agents": ["a"], "mode": "audit"}))),
        ("agents", policy(json!({"agents": []}))),
        (
            "rateLimit",
            policy(json!({"agents": ["a"], "rateLimit": {"perMinute": 0}})),
        ),
        (
            "maxRepeats",
            policy(json!({"agents": ["a"], "session": {"maxRepeats": 0}})),
        ),
        (
            "recovery",
            policy(
                json!({"agents": ["a"], "tools": [{"name": "t", "rules": [{"name": "r", "expr": "true", "recovery": "later"}]}]}),
            ),
        ),
        (
            "unknown field",
            policy(json!({"agents": ["a"], "tols": []})),
        ),
        ("tool", contract(json!({"description": "no tool"}))),
        ("input", contract(json!({"tool": "t", "input": "a string"}))),
        ("timeoutMs", contract(json!({"tool": "t", "timeoutMs": 0}))),
        (
            "http.path",
            contract(json!({"tool": "t", "http": {"method": "GET", "path": "logs"}})),
        ),
    ];
    for (what, object) in rejected {
        assert!(
            !violations(&object).is_empty(),
            "{what} was accepted: {object}"
        );
    }
    // Free-form JSON Schemas keep any keyword.
    let free =
        contract(json!({"tool": "t", "input": {"type": "object", "x-anything": {"$ref": "#/a"}}}));
    assert_eq!(violations(&free), Vec::<String>::new());
}

/// What `toolgate controller` writes is what the CRDs' status schema accepts, and a
/// status another writer got wrong is refused as the API server would.
#[test]
fn the_status_schema_takes_the_controller_s_conditions() {
    use toolgate::controller::reason::Reason;
    let with_status = |condition: Value| {
        json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolContract", "metadata": {"name": "c"},
               "spec": {"tool": "t"}, "status": {"conditions": [condition]}})
    };
    for reason in Reason::ALL {
        let condition = json!({"type": "Accepted", "status": if reason.accepted() { "True" } else { "False" },
            "observedGeneration": 3, "lastTransitionTime": "2025-06-01T09:30:00Z",
            "reason": reason.as_str(), "message": "spec.input: \"strng\" is not valid"});
        assert_eq!(
            violations(&with_status(condition)),
            Vec::<String>::new(),
            "{reason}"
        );
    }
    for bad in [
        json!({"type": "Accepted", "status": "Yes", "lastTransitionTime": "2025-06-01T09:30:00Z", "reason": "Valid", "message": ""}),
        json!({"type": "Accepted", "status": "True", "lastTransitionTime": "2025-06-01T09:30:00Z", "reason": "not a word", "message": ""}),
        json!({"type": "Accepted", "status": "True", "reason": "Valid", "message": ""}),
    ] {
        assert!(!violations(&with_status(bad.clone())).is_empty(), "{bad}");
    }
}

/// `kubernetes-validate` (PyPI) checks objects against Kubernetes' own OpenAPI schemas;
/// `scripts/test.sh` installs it into `.tools/venv`.
#[test]
fn crds_and_role_are_valid_kubernetes_objects() {
    let tool = std::env::var_os("TOOLGATE_TEST_KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".tools/venv/bin/kubernetes-validate"));
    assert!(
        tool.exists(),
        "{} is missing: run scripts/test.sh, or \
         `python3 -m venv .tools/venv && .tools/venv/bin/pip install kubernetes-validate`",
        tool.display()
    );
    let mut files = yaml_files(definition::FOLDER);
    files.push(root().join("deploy/rbac.yaml"));
    files.push(root().join("deploy/controller-rbac.yaml"));
    for version in ["1.30", "1.37"] {
        let output = Command::new(&tool)
            .args(["--strict", "--no-warn", "-k", version])
            .args(&files)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "kubernetes-validate {version}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn the_role_only_reads_the_two_kinds() {
    let role = &documents(&root().join("deploy/rbac.yaml"))[0];
    assert_eq!(role["kind"], "Role", "namespaced, not a ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["toolgate.dev"], "resources": ["toolcontracts", "agentpolicies"],
                "verbs": ["get", "list", "watch"]}])
    );
}

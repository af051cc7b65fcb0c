//! The real Kubernetes tools the install tests run: `helm` and `kubernetes-validate`,
//! installed into `.tools/` by `scripts/test.sh`. A missing tool fails the test (CI must
//! never pass by skipping the check).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tool(var: &str, default: &str, install: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(default));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh (it installs it), or {install}",
        path.display()
    );
    path
}

pub fn helm() -> PathBuf {
    tool(
        "TOOLGATE_TEST_HELM",
        ".tools/bin/helm",
        "see TOOLS.md's Helm recipe",
    )
}

/// `helm` with its config, cache and data folders in a scratch folder, so the tests
/// neither read nor write the user's Helm setup.
pub fn helm_command() -> Command {
    let home = std::env::temp_dir().join("toolgate-test-helm");
    let mut command = Command::new(helm());
    for (var, sub) in [
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_DATA_HOME", "data"),
    ] {
        command.env(var, home.join(sub));
    }
    command
}

pub fn kubernetes_validate() -> PathBuf {
    tool(
        "TOOLGATE_TEST_KUBERNETES_VALIDATE",
        ".tools/venv/bin/kubernetes-validate",
        "`python3 -m venv .tools/venv && .tools/venv/bin/pip install kubernetes-validate`",
    )
}

/// The Kubernetes versions objects are validated against: the oldest the chart supports
/// (native sidecars) and the newest the validator knows.
pub const VERSIONS: [&str; 2] = ["1.29", "1.37"];

/// Validates YAML documents against Kubernetes' own schemas, strictly (unknown fields are
/// errors). Panics with the validator's output on any failure.
pub fn validate(yaml: &str, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, yaml).unwrap();
    for version in VERSIONS {
        let output = Command::new(kubernetes_validate())
            .args(["--strict", "--no-warn", "-k", version])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "kubernetes-validate -k {version} rejected {what}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

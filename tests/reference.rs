//! The generated reference pages match the code: `docs/errors.md` is rendered from the
//! error table and the MCP rendering. `TOOLGATE_BLESS=1 cargo test --test reference`
//! rewrites them.

use std::path::Path;

use toolgate::reference::{errors, telemetry};
use toolgate::telemetry::attributes;
use toolgate::vocab::Code;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn errors_page_matches_the_table() {
    let path = root().join(errors::FILE);
    let generated = errors::markdown();
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        disk == generated,
        "{} drifted from the error table: run TOOLGATE_BLESS=1 cargo test --test reference",
        errors::FILE
    );
}

#[test]
fn errors_page_has_a_row_per_code() {
    let page = errors::markdown();
    for code in Code::ALL {
        let row = format!("| `{}` | {} |", code.as_str(), code.status());
        assert!(page.contains(&row), "no row for {code}");
    }
    assert!(page.contains("| `UNKNOWN_TOOL` | 404 | no | `stop` |"));
    assert!(page.contains("error `-32602`"));
}

#[test]
fn telemetry_page_matches_the_registry() {
    let registry = std::fs::read_to_string(root().join(telemetry::REGISTRY)).unwrap();
    let generated = telemetry::markdown(&registry).unwrap();
    let path = root().join(telemetry::FILE);
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        disk == generated,
        "{} drifted from the registry: run TOOLGATE_BLESS=1 cargo test --test reference",
        telemetry::FILE
    );
}

#[test]
fn the_registry_declares_what_the_code_sets() {
    let registry = std::fs::read_to_string(root().join(telemetry::REGISTRY)).unwrap();
    let (mut declared, mut events) = telemetry::declared(&registry).unwrap();
    declared.sort();
    events.sort();
    let mut set: Vec<String> = attributes::ATTRIBUTES
        .iter()
        .map(|a| a.to_string())
        .collect();
    set.sort();
    assert_eq!(
        declared, set,
        "toolgate.* attributes: registry vs src/telemetry/attributes.rs"
    );
    let mut emitted: Vec<String> = attributes::EVENTS.iter().map(|e| e.to_string()).collect();
    emitted.sort();
    assert_eq!(
        events, emitted,
        "span events: registry vs src/telemetry/attributes.rs"
    );
}

//! `docs/telemetry.md`: toolgate's own span attributes and events, rendered from the
//! Weaver registry `docs/telemetry/registry/toolgate.yaml`.

use serde_json::Value;
use std::fmt::Write;

/// Where the registry and the page live, from the repository root.
pub const REGISTRY: &str = "docs/telemetry/registry/toolgate.yaml";
pub const FILE: &str = "docs/telemetry.md";

/// The registry's attribute ids and event names, as declared.
pub fn declared(registry: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let groups = groups(registry)?;
    let mut attributes = Vec::new();
    let mut events = Vec::new();
    for group in &groups {
        match group["type"].as_str() {
            Some("attribute_group") => attributes.extend(
                group["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a["id"].as_str().map(str::to_string)),
            ),
            Some("event") => events.extend(group["name"].as_str().map(str::to_string)),
            _ => {}
        }
    }
    Ok((attributes, events))
}

/// The whole page.
pub fn markdown(registry: &str) -> Result<String, String> {
    let groups = groups(registry)?;
    let mut page = String::from(
        "<!-- Generated from docs/telemetry/registry/toolgate.yaml by \
         src/reference/telemetry.rs; do not edit. TOOLGATE_BLESS=1 cargo test --test \
         reference rewrites it. -->\n\n# toolgate's telemetry attributes\n\n\
         Besides the OpenTelemetry semantic conventions' own attributes (HTTP, MCP, GenAI; \
         see docs/observability.md), toolgate's server spans carry the attributes and \
         events below. They are declared in `docs/telemetry/registry/toolgate.yaml`, \
         OpenTelemetry Weaver's registry format, so a semantic-convention checker given \
         the conventions' registry plus this one knows every attribute toolgate sets.\n\n\
         ## Attributes\n\n| attribute | type | description | examples |\n|---|---|---|---|\n",
    );
    for group in groups.iter().filter(|g| g["type"] == "attribute_group") {
        for attribute in group["attributes"].as_array().into_iter().flatten() {
            let _ = writeln!(
                page,
                "| `{}` | {} | {} | {} |",
                text(&attribute["id"]),
                type_of(&attribute["type"]),
                describe(attribute),
                examples(&attribute["examples"]),
            );
        }
    }
    page.push_str("\n## Span events\n\n| event | description | attributes |\n|---|---|---|\n");
    for group in groups.iter().filter(|g| g["type"] == "event") {
        let attributes: Vec<String> = group["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["ref"].as_str().map(|r| format!("`{r}`")))
            .collect();
        let _ = writeln!(
            page,
            "| `{}` | {} | {} |",
            text(&group["name"]),
            text(&group["brief"]),
            if attributes.is_empty() {
                "—".to_string()
            } else {
                attributes.join(", ")
            },
        );
    }
    Ok(page)
}

fn groups(registry: &str) -> Result<Vec<Value>, String> {
    let value: Value = serde_yaml::from_str(registry).map_err(|e| format!("{REGISTRY}: {e}"))?;
    value["groups"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{REGISTRY}: no `groups` list"))
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().trim().replace('\n', " ")
}

/// A type, or an enum's values.
fn type_of(kind: &Value) -> String {
    match kind {
        Value::String(kind) => kind.clone(),
        Value::Object(_) => {
            let members: Vec<String> = kind["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| format!("`{}`", text(&m["value"])))
                .collect();
            format!("enum: {}", members.join(", "))
        }
        _ => String::new(),
    }
}

fn describe(attribute: &Value) -> String {
    match attribute["note"].as_str() {
        Some(note) => format!(
            "{} {}",
            text(&attribute["brief"]),
            note.trim().replace('\n', " ")
        ),
        None => text(&attribute["brief"]),
    }
}

fn examples(examples: &Value) -> String {
    let shown: Vec<String> = examples
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| match e {
            Value::String(s) => format!("`{s}`"),
            other => format!("`{other}`"),
        })
        .collect();
    shown.join(", ")
}

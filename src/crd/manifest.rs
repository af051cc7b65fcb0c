//! Multi-document YAML → typed objects, with errors that name the file, the object and
//! the field path, so a service owner can fix a manifest without guessing.
//!
//! Errors never echo a value ([`crate::input::quiet`]), and nothing read from a
//! document — not even its kind or name — is shown before it has proved to be a
//! toolgate manifest (its `apiVersion`): a secret named in `policies.files` by mistake
//! is reported by file and position, never quoted into `/config`.

use serde::Deserialize;
use serde_yaml::Value as Yaml;
use std::fmt;

use super::{AgentPolicySpec, ToolContractSpec, API_VERSION};
use crate::input::quiet;

/// Which object: kind + namespace + name. Two sources never share a key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Manifest {
    ToolContract(ToolContractSpec),
    AgentPolicy(AgentPolicySpec),
}

/// One parsed object and where it came from (a file path, or `cluster`).
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub key: ObjectKey,
    pub origin: String,
    pub manifest: Manifest,
}

/// A manifest that can't be used, located as precisely as the input allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub origin: String,
    /// `Kind/name` when known.
    pub object: Option<String>,
    /// A dotted field path such as `spec.tools[0].rules[1].expr`.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(object) = &self.object {
            write!(f, ": {object}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ManifestError {}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    spec: Option<Yaml>,
}

#[derive(Deserialize, Default)]
struct Metadata {
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// Parses every document of one YAML text. Empty documents are skipped; each bad document
/// yields its own error while the good ones are still returned.
pub fn parse_documents(origin: &str, text: &str) -> (Vec<Object>, Vec<ManifestError>) {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    if let Err(line) = flow_depth(text) {
        errors.push(ManifestError {
            origin: origin.to_string(),
            object: None,
            field: None,
            message: format!(
                "line {line}: brackets and braces nest more than {MAX_FLOW_DEPTH} deep; \
                 no manifest needs that, and parsing it takes time quadratic in the depth"
            ),
        });
        return (objects, errors);
    }
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let err = |object: Option<String>, field: Option<String>, message: String| ManifestError {
            origin: origin.to_string(),
            object,
            field,
            message,
        };
        let value = match Yaml::deserialize(document) {
            Ok(Yaml::Null) => continue,
            Ok(value) => value,
            Err(e) => {
                errors.push(err(
                    Some(format!("document {}", index + 1)),
                    None,
                    quiet::error(&e),
                ));
                // A syntax error leaves the stream unusable past this point.
                break;
            }
        };
        match parse_object(origin, value) {
            Ok(object) => objects.push(object),
            Err((object, field, message)) => errors.push(err(object, field, message)),
        }
    }
    (objects, errors)
}

/// Parses one object already read into a YAML value: the cluster source's entry point, so
/// an object from the API server goes through exactly the checks a file's object does.
pub fn parse_value(origin: &str, value: Yaml) -> Result<Object, ManifestError> {
    parse_object(origin, value).map_err(|(object, field, message)| ManifestError {
        origin: origin.to_string(),
        object,
        field,
        message,
    })
}

type Located = (Option<String>, Option<String>, String);

fn parse_object(origin: &str, value: Yaml) -> Result<Object, Located> {
    let envelope: Envelope = serde_yaml::from_value(value).map_err(|e| {
        let why = quiet::error(&e);
        (None, None, format!("not a toolgate manifest: {why}"))
    })?;
    // Before anything of the document is shown: is it one of ours at all?
    if envelope.api_version.as_deref() != Some(API_VERSION) {
        return Err((
            None,
            Some("apiVersion".into()),
            format!("must be {API_VERSION}: not a toolgate manifest"),
        ));
    }
    let kind = envelope
        .kind
        .ok_or((None, Some("kind".into()), "missing".into()))?;
    let name = envelope.metadata.name.ok_or((
        Some(kind.clone()),
        Some("metadata.name".into()),
        "missing".into(),
    ))?;
    let object = Some(format!("{kind}/{name}"));
    let spec = envelope
        .spec
        .ok_or((object.clone(), Some("spec".into()), "missing".into()))?;
    let (kind, manifest) = match kind.as_str() {
        "ToolContract" => (
            "ToolContract",
            Manifest::ToolContract(spec_of(spec, &object)?),
        ),
        "AgentPolicy" => (
            "AgentPolicy",
            Manifest::AgentPolicy(spec_of(spec, &object)?),
        ),
        other => {
            return Err((
                object,
                Some("kind".into()),
                format!("unknown kind {other:?} (expected ToolContract or AgentPolicy)"),
            ))
        }
    };
    Ok(Object {
        key: ObjectKey {
            kind,
            namespace: envelope.metadata.namespace.unwrap_or_default(),
            name,
        },
        origin: origin.to_string(),
        manifest,
    })
}

fn spec_of<T: serde::de::DeserializeOwned>(
    spec: Yaml,
    object: &Option<String>,
) -> Result<T, Located> {
    serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "spec".to_string()
        } else {
            format!("spec.{path}")
        };
        (object.clone(), Some(field), quiet::error(&e.into_inner()))
    })
}

/// How deep `[`/`{` may nest in a manifest. The YAML parser takes time quadratic in the
/// depth (100,000 levels, 600 KB, held a reload, and the kill switch behind it, for
/// minutes), and no manifest nests a tenth as deep.
const MAX_FLOW_DEPTH: usize = 128;

/// Checks how deep flow collections nest before the YAML parser sees the text: `Err`
/// with the line where they pass [`MAX_FLOW_DEPTH`]. A rough reading (quoted scalars and
/// comments skipped, block scalars not told apart), which can only count a real
/// document's nesting short, never long enough to refuse one that parses fast.
fn flow_depth(text: &str) -> Result<(), usize> {
    let (mut depth, mut line, mut quote, mut comment) = (0usize, 1usize, None, false);
    let mut previous = '\n';
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            comment = false;
        }
        match quote {
            _ if comment => {}
            Some('"') if c == '\\' => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '#' if previous.is_whitespace() => comment = true,
                '"' | '\'' if !previous.is_alphanumeric() => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Err(line);
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        previous = c;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::fixtures::READ_LOGS;

    #[test]
    fn parses_many_documents() {
        let (objects, errors) = parse_documents("a.yaml", READ_LOGS);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].key.to_string(), "ToolContract/read-logs");
        assert!(matches!(objects[1].manifest, Manifest::AgentPolicy(ref p) if p.enabled));
    }

    #[test]
    fn unknown_field_names_its_path() {
        let text = READ_LOGS.replace(
            "tools: [{name: read_logs}]",
            "tools: [{name: read_logs, ruls: []}]",
        );
        let (objects, errors) = parse_documents("a.yaml", &text);
        assert_eq!(objects.len(), 1);
        let e = &errors[0];
        assert_eq!(e.object.as_deref(), Some("AgentPolicy/ops-bot"));
        assert_eq!(e.field.as_deref(), Some("spec.tools[0].ruls"));
        assert!(e.message.contains("ruls"), "{}", e.message);
    }

    #[test]
    fn wrong_api_version_and_kind_are_errors() {
        let text = READ_LOGS.replace(
            "toolgate.dev/v1alpha1\nkind: ToolContract",
            "v1\nkind: ToolContract",
        );
        let (_, errors) = parse_documents("a.yaml", &text);
        assert_eq!(errors[0].field.as_deref(), Some("apiVersion"));
        let text = READ_LOGS.replace("kind: AgentPolicy", "kind: Gadget");
        let (_, errors) = parse_documents("a.yaml", &text);
        assert!(errors[0].message.contains("Gadget"));
    }

    #[test]
    fn a_file_that_is_no_manifest_is_never_quoted() {
        for (text, secret) in [
            (
                "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:hunter2:/home\n",
                "hunter2",
            ),
            ("password: hunter2\n", "hunter2"),
            (
                "{\"kind\": \"hunter2\", \"metadata\": {\"name\": \"s3cret\"}}",
                "s3cret",
            ),
            ("- hunter2\n- s3cret\n", "s3cret"),
            ("apiVersion: 5\nkind: hunter2\n", "hunter2"),
            ("token: [unclosed hunter2", "hunter2"),
        ] {
            let (objects, errors) = parse_documents("/etc/secret", text);
            assert!(objects.is_empty());
            let shown = errors[0].to_string();
            assert!(shown.starts_with("/etc/secret"), "{shown}");
            assert!(
                !shown.contains(secret) && !shown.contains("hunter2"),
                "{text}: {shown}"
            );
        }
        // A manifest's own bad value is located, not quoted.
        let text = READ_LOGS.replace("agents: [ops-bot]", "agents: [ops-bot]\n  mode: s3cret");
        let (_, errors) = parse_documents("a.yaml", &text);
        assert_eq!(errors[0].field.as_deref(), Some("spec.mode"));
        assert!(
            !errors[0].message.contains("s3cret"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn syntax_error_is_reported_not_panicked() {
        let (_, errors) = parse_documents("b.yaml", "kind: [unclosed");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().starts_with("b.yaml"));
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        let deep = format!(
            "spec: {}1{}",
            "{\"a\": ".repeat(100_000),
            "}".repeat(100_000)
        );
        let started = std::time::Instant::now();
        let (objects, errors) = parse_documents("deep.yaml", &deep);
        assert!(objects.is_empty());
        assert!(
            errors[0].message.contains("nest more than"),
            "{:?}",
            errors[0]
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // Brackets in quotes and comments, and apostrophes in words, don't count.
        let fine = format!(
            "a: \"{}\"\nb: '{}'\n# {}\nc: don't [x]\n",
            "[".repeat(500),
            "{".repeat(500),
            "[".repeat(500)
        );
        assert_eq!(flow_depth(&fine), Ok(()));
    }
}

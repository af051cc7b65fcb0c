//! Drafting from an OpenAPI 3.0 or 3.1 document (YAML or JSON): one contract per
//! operation, in path order and, within a path, in [`operation::METHODS`] order.
//!
//! [`document`] reads the file, [`refs`] resolves its `$ref`s, [`operation`] drafts each
//! operation with its [`arguments`] (path + query + [`body`]) and [`response`]; OpenAPI
//! 3.0's schema dialect is converted by [`crate::contracts::dialect`].

pub mod arguments;
pub mod body;
pub mod defs;
pub mod direction;
pub mod document;
pub mod flatten;
pub mod media;
pub mod operation;
pub mod refs;
pub mod response;
pub mod servers;

use serde_json::{Map, Value};
use std::path::Path;

use super::dialect::Dialect;
use super::{name, verify, DraftError, Drafted};
use document::Version;
use refs::Resolver;

/// Operations one run drafts at most.
pub const MAX_OPERATIONS: usize = 10_000;

/// One operation and where it sits in the document.
pub struct Operation<'a> {
    /// The lowercase method key: `get`.
    pub method: &'static str,
    /// The path template as the document writes it: `/pets/{petId}`.
    pub path: &'a str,
    pub item: &'a Value,
    pub operation: &'a Value,
    pub root: &'a Value,
}

/// Reads `file` and drafts a contract for each of its operations. `base_path`, when
/// given, replaces the `servers` path as every binding's prefix.
pub fn draft(file: &Path, base_path: Option<&str>) -> Result<Drafted, DraftError> {
    let base = base_path.map(servers::checked).transpose()?;
    let doc = document::load(file)?;
    let dialect = match doc.version {
        Version::V30 => Dialect::OpenApi30,
        Version::V31 => Dialect::JsonSchema,
    };
    let resolver = Resolver::new(&doc.root, doc.version == Version::V31);
    let broken = |reason: String| DraftError::Reference {
        path: doc.path.clone(),
        reason,
    };
    let mut drafted = Drafted {
        header: header(&doc, base.as_deref()),
        ..Drafted::default()
    };
    let paths = doc.root.get("paths").and_then(Value::as_object);
    for (path, item) in paths.into_iter().flatten() {
        if path.starts_with("x-") {
            continue;
        }
        if !path.starts_with('/') {
            drafted
                .warnings
                .push(format!("path {path:?} does not start with /: skipped"));
            continue;
        }
        let item = resolver
            .object(item)
            .map_err(|e| broken(format!("{path}: {e}")))?;
        for method in operation::METHODS {
            let Some(operation) = item.get(method).filter(|o| o.is_object()) else {
                continue;
            };
            if drafted.drafts.len() >= MAX_OPERATIONS {
                return Err(DraftError::NotOpenApi {
                    path: doc.path.clone(),
                    reason: format!("more than {MAX_OPERATIONS} operations"),
                });
            }
            let op = Operation {
                method,
                path,
                item,
                operation,
                root: &doc.root,
            };
            let (prefix, from) = match &base {
                Some(base) => (base.clone(), None),
                None => match servers::prefix(&doc.root, item, operation) {
                    Some((prefix, source)) => (prefix, Some(source)),
                    None => (String::new(), None),
                },
            };
            let mut draft = operation::draft(&resolver, dialect, &op, &prefix)
                .map_err(|e| broken(format!("{} {path}: {e}", method.to_ascii_uppercase())))?;
            if let Some(source @ ("the operation's servers" | "the path's servers")) = from {
                draft.info(format!("the path prefix {prefix:?} comes from {source}"));
            }
            if let Some(own) = operation.get("security") {
                let needed = schemes(Some(own));
                if !needed.is_empty() {
                    draft.review(credentials(&needed));
                }
            }
            drafted.drafts.push(draft);
        }
    }
    name::unique_tools(&mut drafted.drafts);
    name::assign(&mut drafted.drafts);
    verify::verify(&mut drafted.drafts);
    Ok(drafted)
}

fn header(doc: &document::Document, base: Option<&str>) -> Vec<String> {
    let mut lines = vec![format!(
        "Drafted by `toolgate contracts draft` from {} (OpenAPI {}{}).",
        doc.path,
        doc.declared,
        if doc.about.is_empty() {
            String::new()
        } else {
            format!(", {}", doc.about)
        }
    )];
    lines.push(match base {
        Some("") => "Paths are the document's own (--base-path \"\").".into(),
        Some(base) => format!("Paths are prefixed with {base} (--base-path)."),
        None => match servers::prefix(&doc.root, &Value::Null, &Value::Null) {
            Some((prefix, _)) if !prefix.is_empty() => format!(
                "Paths are prefixed with {prefix}, the path of servers[0].url; --base-path changes it."
            ),
            _ => "Paths are the document's own; --base-path adds a prefix.".into(),
        },
    });
    let needed = schemes(doc.root.get("security"));
    if !needed.is_empty() {
        lines.push(format!("review: {}.", credentials(&needed)));
    }
    lines.push(
        "Review every contract before applying it: toolgate enforces what you apply, and a \
         document can be wrong about its API."
            .into(),
    );
    lines
}

/// Schemes a `security` list requires (an empty requirement `{}` means none is needed).
fn schemes(security: Option<&Value>) -> Vec<&str> {
    let Some(Value::Array(requirements)) = security else {
        return Vec::new();
    };
    if requirements
        .iter()
        .any(|r| r.as_object().is_some_and(Map::is_empty))
    {
        return Vec::new();
    }
    let mut names: Vec<&str> = requirements
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|r| r.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn credentials(schemes: &[&str]) -> String {
    format!(
        "the API requires credentials ({}): toolgate never passes the agent's Authorization \
         on, so the backend must accept toolgate's calls another way",
        schemes.join(", ")
    )
}

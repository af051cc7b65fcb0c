//! The `$defs` one contract side (its input or its output) collects while its schemas
//! are inlined: what can't be inlined (a recursive schema, or every shared one past the
//! budget) is kept here once, under a name made from its reference, and attached to the
//! side's root schema at the end.

use percent_encoding::percent_decode_str;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The `$defs` one contract side (its input or its output) collects.
#[derive(Default)]
pub struct Defs {
    /// Reference → its name under `$defs`.
    pub(super) names: BTreeMap<String, String>,
    pub(super) bodies: BTreeMap<String, Value>,
    /// References kept under `$defs` (recursive ones, or all of them past the budget).
    pub(super) kept: BTreeSet<String>,
    pub(super) spent: usize,
    /// Past the budget: every reference below the top goes under `$defs`.
    pub shared: bool,
}

impl Defs {
    /// `shared`: every reference below the top goes under `$defs` (past the budget).
    pub fn new(shared: bool) -> Defs {
        Defs {
            shared,
            ..Defs::default()
        }
    }

    /// Adds the collected definitions to `schema`'s root; the names, for a note.
    pub fn attach(self, schema: &mut Value) -> Vec<String> {
        if self.bodies.is_empty() {
            return Vec::new();
        }
        let names = self.bodies.keys().cloned().collect();
        if let Value::Object(map) = schema {
            let defs = map.entry("$defs").or_insert_with(|| json!({}));
            if let Value::Object(defs) = defs {
                defs.extend(self.bodies);
            }
        }
        names
    }

    pub(super) fn name_for(&mut self, reference: &str) -> String {
        if let Some(name) = self.names.get(reference) {
            return name.clone();
        }
        let last = reference.rsplit('/').next().unwrap_or("schema");
        let base: String = percent_decode_str(last)
            .decode_utf8_lossy()
            .replace("~1", "_")
            .replace("~0", "_")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let base = if base.is_empty() {
            "schema".to_string()
        } else {
            base
        };
        let taken: BTreeSet<&String> = self.names.values().collect();
        let mut name = base.clone();
        let mut n = 2;
        while taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.names.insert(reference.to_string(), name.clone());
        name
    }
}

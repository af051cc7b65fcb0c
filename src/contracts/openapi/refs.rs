//! `$ref`s within one OpenAPI document, resolved.
//!
//! Objects that aren't schemas (parameters, request bodies, responses, path items) are
//! followed through their chain of `$ref`s ([`Resolver::object`]); a chain that comes
//! back to itself is a cycle and an error. Schemas are inlined ([`Inliner`]), so the
//! reviewer reads each contract whole, except where that can't end:
//!
//! - a schema that contains itself through a keyword that descends into the instance
//!   (`properties`, `items`, …) — a tree, a linked list — is recursive, not broken: it is
//!   kept once under the contract's own `$defs` and referenced as `#/$defs/Name`;
//! - a cycle that never descends (`A: {$ref: B}`, `B: {allOf: [{$ref: A}]}`) describes
//!   nothing and is reported as an error, naming the chain.
//!
//! Only references inside the document (`#/…`) are followed; the sidecar never fetches a
//! schema, and neither does drafting. Work is bounded: a schema that would grow past
//! [`BUDGET`] nodes when inlined is drafted with every shared schema under `$defs`
//! instead (linear in the document's size), and a whole document may produce at most
//! [`DOCUMENT_BUDGET`] nodes.

use percent_encoding::percent_decode_str;
use serde_json::{json, Map, Value};
use std::cell::Cell;

pub use super::defs::Defs;
use crate::contracts::dialect::{LISTS, MAPS, SINGLE};

/// Nodes one contract side may inline before it falls back to `$defs`.
pub const BUDGET: usize = 100_000;
/// Schema nodes one whole document may produce, every operation together: a hard bound
/// on a run's work however its `$ref`s are arranged (a few seconds at most).
pub const DOCUMENT_BUDGET: usize = 20_000_000;
/// The deepest an inlined schema may nest; deeper is an error, not a stack overflow.
pub const MAX_DEPTH: usize = 96;
/// The longest chain of `$ref`s to `$ref`s that is followed.
const MAX_HOPS: usize = 64;

/// Keywords that apply to a part of the instance: a cycle through one of them ends.
const DESCENDING: &[&str] = &[
    "items",
    "additionalProperties",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "prefixItems",
    "properties",
    "patternProperties",
];

/// Keywords beside a `$ref` that only annotate (3.0 ignores any others there).
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "summary",
    "example",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "nullable",
    "$comment",
];

pub struct Resolver<'a> {
    root: &'a Value,
    /// OpenAPI 3.0: keywords beside a `$ref` other than annotations are ignored.
    siblings_apply: bool,
    /// Schema nodes produced so far, against [`DOCUMENT_BUDGET`].
    spent: Cell<usize>,
}

impl<'a> Resolver<'a> {
    pub fn new(root: &'a Value, siblings_apply: bool) -> Resolver<'a> {
        Resolver {
            root,
            siblings_apply,
            spent: Cell::new(0),
        }
    }

    /// Counts one node produced; an error once the document's budget is spent.
    fn spend(&self) -> Result<(), String> {
        let spent = self.spent.get() + 1;
        self.spent.set(spent);
        if spent > DOCUMENT_BUDGET {
            return Err(format!(
                "resolving its $refs produces more than {DOCUMENT_BUDGET} schema nodes; draft \
                 a part of the document at a time"
            ));
        }
        Ok(())
    }

    /// `value` with its chain of `$ref`s followed to the object it names.
    pub fn object(&self, value: &'a Value) -> Result<&'a Value, String> {
        let mut current = value;
        let mut chain: Vec<&str> = Vec::new();
        while let Some(reference) = current.get("$ref").and_then(Value::as_str) {
            if chain.contains(&reference) || chain.len() >= MAX_HOPS {
                chain.push(reference);
                return Err(format!("$ref cycle: {}", chain.join(" -> ")));
            }
            chain.push(reference);
            current = self.target(reference)?;
        }
        Ok(current)
    }

    /// What a local reference points at.
    pub fn target(&self, reference: &str) -> Result<&'a Value, String> {
        let Some(fragment) = reference.strip_prefix('#') else {
            return Err(format!(
                "$ref {reference:?} points outside the document; only #/… references are \
                 followed: bundle the document into one file first"
            ));
        };
        let pointer = percent_decode_str(fragment).decode_utf8_lossy();
        if pointer.is_empty() {
            return Err(format!("$ref {reference:?} names the whole document"));
        }
        self.root
            .pointer(&pointer)
            .ok_or_else(|| format!("$ref {reference:?} points at nothing in the document"))
    }
}

/// Inlines one schema's references into `defs`' contract side.
pub struct Inliner<'r, 'a> {
    resolver: &'r Resolver<'a>,
    defs: &'r mut Defs,
    /// References being expanded, with the descent count when each was entered.
    stack: Vec<(String, usize)>,
    descents: usize,
}

impl<'r, 'a> Inliner<'r, 'a> {
    pub fn new(resolver: &'r Resolver<'a>, defs: &'r mut Defs) -> Inliner<'r, 'a> {
        Inliner {
            resolver,
            defs,
            stack: Vec::new(),
            descents: 0,
        }
    }

    /// `schema` with its references resolved. `Err(None)` means the budget ran out (the
    /// caller starts over with [`Defs::shared`] set); `Err(Some(why))` is a broken document.
    ///
    /// A schema that is itself a reference kept under `$defs` (a recursive one) comes
    /// back as that definition, not as a lone `$ref`, so its fields are at the top.
    pub fn schema(&mut self, schema: &Value) -> Result<Value, Option<String>> {
        let walked = self.walk(schema, 0)?;
        let own = match &walked {
            Value::Object(map) if map.len() == 1 => map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| self.definition(r))
                .cloned(),
            _ => None,
        };
        Ok(own.unwrap_or(walked))
    }

    fn walk(&mut self, schema: &Value, depth: usize) -> Result<Value, Option<String>> {
        if depth > MAX_DEPTH {
            return Err(Some(format!(
                "a schema nests more than {MAX_DEPTH} levels once its $refs are resolved"
            )));
        }
        self.resolver.spend().map_err(Some)?;
        self.defs.spent += 1;
        if !self.defs.shared && self.defs.spent > BUDGET {
            return Err(None);
        }
        let Value::Object(map) = schema else {
            return Ok(schema.clone());
        };
        if let Some(Value::String(reference)) = map.get("$ref") {
            let resolved = self.reference(reference, depth)?;
            let mut siblings = Map::new();
            for (key, value) in map.iter().filter(|(k, _)| *k != "$ref") {
                siblings.insert(key.clone(), self.keyword(key, value, depth)?);
            }
            return Ok(self.merge(resolved, siblings));
        }
        let mut out = Map::new();
        for (key, value) in map {
            if key == "$id" || key == "$schema" {
                // Either would change what `#/$defs/…` means inside the contract.
                continue;
            }
            out.insert(key.clone(), self.keyword(key, value, depth)?);
        }
        Ok(Value::Object(out))
    }

    /// One keyword's value: subschemas walked, data copied.
    fn keyword(&mut self, key: &str, value: &Value, depth: usize) -> Result<Value, Option<String>> {
        let descends = DESCENDING.contains(&key);
        self.descents += usize::from(descends);
        let walked = self.keyword_value(key, value, depth);
        self.descents -= usize::from(descends);
        walked
    }

    fn keyword_value(
        &mut self,
        key: &str,
        value: &Value,
        depth: usize,
    ) -> Result<Value, Option<String>> {
        let items_list = key == "items" && value.is_array();
        if SINGLE.contains(&key) && !items_list {
            return self.walk(value, depth + 1);
        }
        if let (true, Value::Array(list)) = (LISTS.contains(&key) || items_list, value) {
            let walked = list.iter().map(|s| self.walk(s, depth + 1));
            return Ok(Value::Array(walked.collect::<Result<_, _>>()?));
        }
        if let (true, Value::Object(named)) = (MAPS.contains(&key), value) {
            let mut out = Map::new();
            for (name, s) in named {
                out.insert(name.clone(), self.walk(s, depth + 1)?);
            }
            return Ok(Value::Object(out));
        }
        Ok(value.clone())
    }

    fn reference(&mut self, reference: &str, depth: usize) -> Result<Value, Option<String>> {
        if let Some(at) = self.stack.iter().position(|(r, _)| r == reference) {
            if self.stack[at].1 == self.descents {
                let mut chain: Vec<&str> =
                    self.stack[at..].iter().map(|(r, _)| r.as_str()).collect();
                chain.push(reference);
                return Err(Some(format!(
                    "$ref cycle that never reaches a property or item: {}",
                    chain.join(" -> ")
                )));
            }
            self.defs.kept.insert(reference.to_string());
            return Ok(self.def_ref(reference));
        }
        let share = self.defs.shared && depth > 0;
        if self.defs.kept.contains(reference) {
            let name = self.defs.name_for(reference);
            if share || self.defs.bodies.contains_key(&name) {
                return Ok(self.def_ref(reference));
            }
        }
        if share {
            self.defs.kept.insert(reference.to_string());
        }
        let target = self.resolver.target(reference).map_err(Some)?;
        self.stack.push((reference.to_string(), self.descents));
        let expanded = self.walk(target, depth + 1);
        self.stack.pop();
        let expanded = expanded?;
        if self.defs.kept.contains(reference) {
            let name = self.defs.name_for(reference);
            self.defs.bodies.insert(name, expanded);
            return Ok(self.def_ref(reference));
        }
        Ok(expanded)
    }

    /// The definition a `#/$defs/Name` reference this inliner produced names.
    pub fn definition(&self, local: &str) -> Option<&Value> {
        self.defs.bodies.get(local.strip_prefix("#/$defs/")?)
    }

    fn def_ref(&mut self, reference: &str) -> Value {
        json!({"$ref": format!("#/$defs/{}", self.defs.name_for(reference))})
    }

    /// A resolved reference with the keywords written beside it: annotations override,
    /// constraints (3.1) apply together with it through `allOf`.
    fn merge(&self, resolved: Value, siblings: Map<String, Value>) -> Value {
        let (notes, constraints): (Map<String, Value>, Map<String, Value>) = siblings
            .into_iter()
            .partition(|(k, _)| ANNOTATIONS.contains(&k.as_str()));
        let mut out = match resolved {
            Value::Object(map) => map,
            other => {
                let mut wrapped = Map::new();
                wrapped.insert("allOf".into(), json!([other]));
                wrapped
            }
        };
        out.extend(notes);
        if constraints.is_empty() || !self.resolver.siblings_apply {
            return Value::Object(out);
        }
        let mut combined = constraints;
        combined.insert("allOf".into(), json!([Value::Object(out)]));
        Value::Object(combined)
    }
}

#[cfg(test)]
mod tests;

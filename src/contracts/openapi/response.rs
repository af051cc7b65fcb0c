//! The `output` of a REST operation: the schema of its first 2xx response with JSON
//! content (`200` before `201` before `2XX`), write-only properties left out. No such
//! response, no `output` — the result then passes unshaped.

use serde_json::Value;

use super::direction::{keep, Direction};
use super::flatten::flatten;
use super::media;
use super::refs::{Defs, Inliner, Resolver};
use crate::contracts::dialect::{normalize, Dialect};
use crate::contracts::Note;

pub fn output(
    resolver: &Resolver,
    dialect: Dialect,
    operation: &Value,
) -> Result<(Option<Value>, Vec<Note>), String> {
    let mut notes = Vec::new();
    let Some(Value::Object(responses)) = operation.get("responses") else {
        return Ok((None, notes));
    };
    let mut other_2xx = Vec::new();
    for (status, response) in responses.iter().filter(|(s, _)| s.starts_with('2')) {
        let response = resolver.object(response)?;
        let offered = media::pick(response.get("content"));
        let Some((kind, Some(schema))) = offered.json else {
            other_2xx.push(status.clone());
            continue;
        };
        let mut shaped = inline(resolver, schema, false).or_else(|e| match e {
            None => inline(resolver, schema, true).map_err(|e| e.unwrap_or_default()),
            Some(broken) => Err(broken),
        })?;
        flatten(&mut shaped.0);
        let dropped = keep(&mut shaped.0, Direction::Response);
        if !dropped.is_empty() {
            notes.push(Note::Info(format!(
                "write-only properties are not part of the output: {}",
                dropped.join(", ")
            )));
        }
        if !shaped.1.is_empty() {
            notes.push(Note::Info(format!(
                "output: {} kept under $defs (recursive or shared)",
                shaped.1.join(", ")
            )));
        }
        for note in normalize(&mut shaped.0, dialect) {
            notes.push(Note::Info(format!("output: {note}")));
        }
        notes.push(Note::Review(format!(
            "output is the {status} {kind} schema and is enforced: a result that doesn't match \
             it is refused (OUTPUT_CONTRACT_VIOLATION) and fields it doesn't declare are dropped; \
             check it against what the backend really returns"
        )));
        return Ok((Some(shaped.0), notes));
    }
    if !other_2xx.is_empty() {
        notes.push(Note::Info(format!(
            "no JSON schema for {}: no output, the result passes unshaped",
            other_2xx.join(", ")
        )));
    }
    Ok((None, notes))
}

/// The schema inlined, and the names kept under `$defs`.
fn inline(
    resolver: &Resolver,
    schema: &Value,
    shared: bool,
) -> Result<(Value, Vec<String>), Option<String>> {
    let mut defs = Defs::new(shared);
    let mut out = Inliner::new(resolver, &mut defs).schema(schema)?;
    let kept = defs.attach(&mut out);
    Ok((out, kept))
}

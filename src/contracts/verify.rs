//! Drafts compiled the way `toolgate check` compiles manifests: each printed object is
//! parsed back with the file source's parser, then the set is built into a snapshot with
//! check's options. An object either step refuses (a path the router can't take, two
//! bindings on one route, a schema that still doesn't compile) is marked refused and
//! printed commented out, so the output as a whole always passes `check`.

use crate::check::OPTIONS;
use crate::crd::{parse_documents, Object};
use crate::policy::Snapshot;

use super::render::object;
use super::Draft;

/// Marks every draft the sidecar's compiler refuses, with its reason.
pub fn verify(drafts: &mut [Draft]) {
    // Each round refuses at least one more draft or ends, so this ends.
    for _ in 0..=drafts.len() {
        let mut objects: Vec<(usize, Object)> = Vec::new();
        for (i, draft) in drafts.iter_mut().enumerate() {
            if draft.refused.is_some() {
                continue;
            }
            let (mut parsed, errors) = parse_documents("draft", &object(draft));
            match (parsed.pop(), errors.first()) {
                (Some(parsed), None) => objects.push((i, parsed)),
                (_, Some(error)) => draft.refused = Some(reason(error)),
                (None, None) => draft.refused = Some("the object did not print".into()),
            }
        }
        let list: Vec<Object> = objects.iter().map(|(_, o)| o.clone()).collect();
        let (_, errors) = Snapshot::build(&list, &OPTIONS, 0);
        if errors.is_empty() {
            return;
        }
        for error in &errors {
            let by_name = objects.iter().find(|(_, o)| {
                error.object.as_deref() == Some(&format!("ToolContract/{}", o.key.name))
            });
            if let Some((i, _)) = by_name {
                drafts[*i].refused = Some(reason(error));
            }
        }
    }
}

fn reason(error: &crate::crd::ManifestError) -> String {
    match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::Binding;
    use serde_json::json;

    fn mk_rest(name: &str, method: &str, path: &str) -> Draft {
        let mut d = Draft::new(format!("{method} {path}"), name.replace('-', "_"));
        d.name = name.into();
        d.http = Some(Binding {
            method: method.into(),
            path: path.into(),
        });
        d
    }

    #[test]
    fn conflicting_and_uncompilable_drafts_are_refused_the_rest_kept() {
        let mut bad_schema = mk_rest("bad-schema", "GET", "/s");
        bad_schema.input = json!({"type": "nonsense"});
        let mut drafts = vec![
            mk_rest("a-items", "GET", "/items/{id}"),
            mk_rest("b-items", "DELETE", "/items/{name}"),
            mk_rest("c-two-params", "GET", "/x/{a}.{b}"),
            bad_schema,
            mk_rest("ok", "POST", "/items"),
        ];
        verify(&mut drafts);
        let refused: Vec<&str> = drafts
            .iter()
            .filter(|d| d.refused.is_some())
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(refused, vec!["b-items", "c-two-params", "bad-schema"]);
        assert!(drafts[1]
            .refused
            .as_deref()
            .unwrap()
            .starts_with("spec.http"));
        assert!(drafts[3]
            .refused
            .as_deref()
            .unwrap()
            .starts_with("spec.input"));
    }
}

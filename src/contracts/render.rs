//! Drafts printed as multi-document YAML with comments.
//!
//! Values are serialized by `serde_yaml` one field at a time (so quoting is always its
//! own, and a description can't break out of its scalar); comments are written around
//! them. Text from the source reaches a comment only through [`comment`], as one line.

use serde_json::{json, Map, Value};

use super::{Draft, Drafted, Note};
use crate::crd::API_VERSION;

/// The whole output: the header, then one document per draft.
pub fn render(drafted: &Drafted) -> String {
    let mut out = String::new();
    for line in &drafted.header {
        push_comment(&mut out, "", line);
    }
    for draft in &drafted.drafts {
        out.push_str("---\n");
        push_comment(&mut out, "", &draft.origin);
        for note in &draft.notes {
            match note {
                Note::Review(text) => push_comment(&mut out, "review: ", text),
                Note::Info(text) => push_comment(&mut out, "", text),
            }
        }
        match &draft.refused {
            None => out.push_str(&object(draft)),
            Some(reason) => {
                push_comment(
                    &mut out,
                    "review: ",
                    &format!(
                        "left commented out: toolgate check refuses it ({reason}); fix it, \
                         then remove the leading `# `"
                    ),
                );
                for line in object(draft).lines() {
                    out.push_str("# ");
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// One `ToolContract` object, its only comments the ones beside `idempotent` and
/// `timeoutMs`.
pub fn object(draft: &Draft) -> String {
    let mut out = format!("apiVersion: {API_VERSION}\nkind: ToolContract\nmetadata:\n");
    field(&mut out, 2, "name", &json!(draft.name), None);
    out.push_str("spec:\n");
    field(&mut out, 2, "tool", &json!(draft.tool), None);
    if let Some(description) = &draft.description {
        field(&mut out, 2, "description", &json!(description), None);
    }
    if let Some(http) = &draft.http {
        let binding = json!({"method": http.method, "path": http.path});
        field(&mut out, 2, "http", &binding, None);
    }
    let why = comment(&draft.idempotent_why);
    let why = (!why.is_empty()).then_some(why.as_str());
    field(&mut out, 2, "idempotent", &json!(draft.idempotent), why);
    field(
        &mut out,
        2,
        "timeoutMs",
        &json!(draft.timeout_ms),
        Some("review: the backend's time budget for one call"),
    );
    field(&mut out, 2, "input", &draft.input, None);
    if let Some(output) = &draft.output {
        field(&mut out, 2, "output", output, None);
    }
    out
}

/// `key: value` as serde_yaml writes a one-entry mapping, indented; a scalar may carry a
/// comment at the end of its line.
fn field(out: &mut String, indent: usize, key: &str, value: &Value, note: Option<&str>) {
    let mut entry = Map::new();
    entry.insert(key.to_string(), value.clone());
    let entry = Value::Object(entry);
    // serde_yaml can't fail on a JSON value; JSON is YAML too, should it ever.
    let text = serde_yaml::to_string(&entry).unwrap_or_else(|_| format!("{entry}\n"));
    let pad = " ".repeat(indent);
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&pad);
        out.push_str(line);
        if let (Some(note), true) = (note, lines.len() == 1 && i == 0) {
            out.push_str(" # ");
            out.push_str(note);
        }
        out.push('\n');
    }
}

fn push_comment(out: &mut String, prefix: &str, text: &str) {
    out.push_str("# ");
    out.push_str(prefix);
    out.push_str(&comment(text));
    out.push('\n');
}

/// Text safe inside a YAML comment: one line (every control character and every Unicode
/// line or paragraph separator, which YAML 1.1 readers break lines on, becomes a space).
pub fn comment(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}' | '\u{feff}') {
                ' '
            } else {
                c
            }
        })
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::Binding;
    use crate::crd::{parse_documents, Manifest};

    fn mk_draft() -> Draft {
        let mut d = Draft::new("GET /pets/{id}".into(), "get_pet".into());
        d.name = "get-pet".into();
        d.description = Some("yes\n---\napiVersion: x\nkind: AgentPolicy # not a comment".into());
        d.http = Some(Binding {
            method: "GET".into(),
            path: "/v1/pets/{id}".into(),
        });
        d.idempotent = true;
        d.idempotent_why = "GET\ris safe\u{2028}to retry".into();
        d.input = json!({"type": "object", "properties": {"id": {"type": "string", "enum": ["on", "null", "1"]}}});
        d.output = Some(json!({"type": "object"}));
        d.review("check\nthis");
        d
    }

    #[test]
    fn what_is_printed_parses_back_to_the_same_spec() {
        let drafted = Drafted {
            header: vec!["from x\n---".into()],
            drafts: vec![mk_draft()],
            warnings: vec![],
        };
        let text = render(&drafted);
        let (objects, errors) = parse_documents("t", &text);
        assert!(errors.is_empty(), "{errors:?}\n{text}");
        assert_eq!(objects.len(), 1, "{text}");
        let Manifest::ToolContract(spec) = &objects[0].manifest else {
            panic!("{text}");
        };
        assert_eq!(objects[0].key.name, "get-pet");
        assert_eq!(spec.description, mk_draft().description);
        assert_eq!(spec.input, mk_draft().input);
        assert_eq!(spec.http.as_ref().unwrap().path, "/v1/pets/{id}");
        assert_eq!(spec.idempotent, Some(true));
        assert_eq!(spec.timeout_ms, Some(10_000));
        assert!(text.contains("# review: check this\n"), "{text}");
        assert!(
            text.contains("idempotent: true # GET is safe to retry\n"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_draft_is_all_comment() {
        let mut d = mk_draft();
        d.refused = Some("spec.http: conflicts".into());
        let text = render(&Drafted {
            header: vec![],
            drafts: vec![d],
            warnings: vec![],
        });
        let (objects, errors) = parse_documents("t", &text);
        assert!(objects.is_empty() && errors.is_empty(), "{text}");
        assert!(text.contains("# review: left commented out"), "{text}");
        assert!(text.contains("# kind: ToolContract\n"), "{text}");
    }
}

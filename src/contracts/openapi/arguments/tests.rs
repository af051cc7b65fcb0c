use super::*;
use crate::policy::schema::Schema;

fn mk_input(path: &str, item: Value, operation: Value) -> (Value, Vec<Note>) {
    let root = json!({});
    let resolver = Resolver::new(&root, true);
    let op = Operation {
        method: "post",
        path,
        item: &item,
        operation: &operation,
        root: &root,
    };
    let (schema, notes) = input(&resolver, Dialect::JsonSchema, &op).unwrap();
    Schema::compile(&schema).unwrap();
    (schema, notes)
}

fn reviews(notes: &[Note]) -> Vec<&str> {
    notes
        .iter()
        .filter_map(|n| match n {
            Note::Review(text) => Some(text.as_str()),
            Note::Info(_) => None,
        })
        .collect()
}

fn body(schema: Value) -> Value {
    json!({"requestBody": {"required": true, "content": {"application/json": {"schema": schema}}}})
}

#[test]
fn operation_parameters_replace_path_level_ones_and_undeclared_path_params_are_strings() {
    let item = json!({"parameters": [
        {"name": "limit", "in": "query", "schema": {"type": "string"}},
        {"name": "org", "in": "path", "required": true, "schema": {"type": "integer"}}
    ]});
    let op = json!({"parameters": [{"name": "limit", "in": "query", "required": true, "schema": {"type": "integer"}}]});
    let (schema, notes) = mk_input("/orgs/{org}/repos/{repo}", item, op);
    assert_eq!(schema["properties"]["limit"], json!({"type": "integer"}));
    assert_eq!(schema["properties"]["repo"], json!({"type": "string"}));
    assert_eq!(schema["required"], json!(["org", "limit", "repo"]));
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(
        reviews(&notes),
        vec!["path parameter repo is not declared: taken as a string"]
    );
}

#[test]
fn a_body_that_allows_more_leaves_the_input_open_with_a_note() {
    for additional in [json!(true), json!({"type": "string"})] {
        let op = body(
            json!({"type": "object", "properties": {"a": {}}, "additionalProperties": additional}),
        );
        let (schema, notes) = mk_input("/x", json!({}), op);
        assert_eq!(schema["additionalProperties"], additional);
        assert!(reviews(&notes)[0].starts_with("input accepts properties it doesn't declare"));
    }
    let op =
        body(json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false}));
    let (schema, notes) = mk_input("/x", json!({}), op);
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(reviews(&notes).is_empty(), "{notes:?}");
}

#[test]
fn a_key_in_the_url_and_the_body_is_kept_once_from_the_url() {
    let op = json!({
        "parameters": [{"name": "id", "in": "query", "schema": {"type": "integer"}}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": false, "required": ["id", "name"],
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}}
        }}}}
    });
    let (schema, notes) = mk_input("/x", json!({}), op);
    assert_eq!(schema["properties"]["id"], json!({"type": "integer"}));
    assert_eq!(schema["required"], json!(["name"]));
    assert!(reviews(&notes)[0].starts_with("id is both a query parameter and a body property"));
    // The same name twice among the parameters: the path's wins.
    let op = json!({"parameters": [
        {"name": "id", "in": "query", "schema": {"type": "string"}},
        {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}
    ]});
    let (schema, notes) = mk_input("/x/{id}", json!({}), op);
    assert_eq!(schema["properties"]["id"], json!({"type": "integer"}));
    assert!(reviews(&notes)[0].starts_with("id is both a path and a query parameter"));
}

#[test]
fn bodies_toolgate_cannot_merge_leave_the_parameters_closed() {
    for (schema, says) in [
        (
            json!({"type": "array", "items": {}}),
            "the request body is \"array\" (not an object)",
        ),
        (
            json!({"type": "string"}),
            "the request body is \"string\" (not an object)",
        ),
    ] {
        let (input, notes) = mk_input("/x", json!({}), body(schema));
        assert_eq!(
            input,
            json!({"type": "object", "additionalProperties": false})
        );
        assert!(reviews(&notes)[0].starts_with(says), "{notes:?}");
    }
    let form = json!({"requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": {"type": "object"}}}}});
    let (input, notes) = mk_input("/x", json!({}), form);
    assert_eq!(
        input,
        json!({"type": "object", "additionalProperties": false})
    );
    assert!(reviews(&notes)[0].contains("application/x-www-form-urlencoded"));
}

#[test]
fn a_composed_body_applies_to_the_whole_object_and_an_empty_one_is_any_object() {
    let op = body(
        json!({"properties": {"q": {"type": "string"}}, "anyOf": [{"required": ["q"]}, {"required": ["tag"]}]}),
    );
    let (schema, notes) = mk_input("/x", json!({}), op);
    assert_eq!(schema["allOf"][0]["anyOf"][1], json!({"required": ["tag"]}));
    assert!(reviews(&notes)[0].starts_with("the body schema's anyOf apply"));
    let (schema, notes) = mk_input("/x", json!({}), body(json!({})));
    assert!(schema.get("additionalProperties").is_none());
    assert!(
        reviews(&notes)[0].starts_with("the body is any JSON object"),
        "{notes:?}"
    );
}

#[test]
fn parameters_described_by_content_header_and_cookie_ones_are_said() {
    let op = json!({"parameters": [
        {"name": "filter", "in": "query", "content": {"application/json": {"schema": {"type": "object"}}}},
        {"name": "session", "in": "cookie", "schema": {"type": "string"}},
        {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}
    ]});
    let (schema, notes) = mk_input("/x", json!({}), op);
    assert_eq!(schema["properties"]["filter"], json!({"type": "object"}));
    let reviews = reviews(&notes);
    assert!(
        reviews[0].contains("filter is described as application/json content"),
        "{reviews:?}"
    );
    assert!(
        reviews[1].starts_with("query parameter filter is an array or object"),
        "{reviews:?}"
    );
    assert!(notes
        .iter()
        .any(|n| matches!(n, Note::Info(t) if t.contains("session (cookie), X-Trace (header)"))));
}

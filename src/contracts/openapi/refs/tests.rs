use super::*;
use crate::policy::schema::Schema;

fn inline(doc: &Value, schema: Value) -> Result<Value, Option<String>> {
    let resolver = Resolver::new(doc, true);
    let mut defs = Defs::default();
    let mut out = Inliner::new(&resolver, &mut defs).schema(&schema)?;
    defs.attach(&mut out);
    Ok(out)
}

#[test]
fn component_refs_are_inlined_with_their_annotations() {
    let doc = json!({"components": {"schemas": {
        "Id": {"type": "string", "description": "an id"},
        "Pet": {"type": "object", "properties": {"id": {"$ref": "#/components/schemas/Id", "description": "the pet's"}}}
    }}});
    let out = inline(&doc, json!({"$ref": "#/components/schemas/Pet"})).unwrap();
    assert_eq!(
        out,
        json!({"type": "object", "properties": {"id": {"type": "string", "description": "the pet's"}}})
    );
}

#[test]
fn constraints_beside_a_ref_apply_in_31_and_not_in_30() {
    let doc = json!({"components": {"schemas": {"S": {"type": "string"}}}});
    let schema = json!({"$ref": "#/components/schemas/S", "maxLength": 3});
    let out = inline(&doc, schema.clone()).unwrap();
    assert_eq!(out, json!({"maxLength": 3, "allOf": [{"type": "string"}]}));
    let resolver = Resolver::new(&doc, false);
    let mut defs = Defs::default();
    let out = Inliner::new(&resolver, &mut defs).schema(&schema).unwrap();
    assert_eq!(out, json!({"type": "string"}));
}

#[test]
fn a_recursive_schema_is_kept_once_under_defs() {
    let doc = json!({"components": {"schemas": {
        "Node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}
        }}
    }}});
    let out = inline(
        &doc,
        json!({"type": "object", "properties": {
            "root": {"$ref": "#/components/schemas/Node"},
            "other": {"$ref": "#/components/schemas/Node"}
        }}),
    )
    .unwrap();
    assert_eq!(out["properties"]["root"], json!({"$ref": "#/$defs/Node"}));
    assert_eq!(out["properties"]["other"], json!({"$ref": "#/$defs/Node"}));
    assert_eq!(
        out["$defs"]["Node"]["properties"]["children"]["items"],
        json!({"$ref": "#/$defs/Node"})
    );
    let compiled = Schema::compile(&out).unwrap();
    assert!(compiled.is_valid(&json!({"root": {"children": [{"name": "a", "children": []}]}})));
    assert!(!compiled.is_valid(&json!({"root": {"children": [{"name": 5}]}})));
}

#[test]
fn mutual_recursion_is_kept_under_defs() {
    let doc = json!({"components": {"schemas": {
        "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
        "B": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}}
    }}});
    let out = inline(&doc, json!({"$ref": "#/components/schemas/B"})).unwrap();
    // The top is B itself, its inner references kept under $defs.
    assert_eq!(
        out["properties"]["a"]["properties"]["b"],
        json!({"$ref": "#/$defs/B"})
    );
    assert_eq!(
        out["$defs"]["B"]["properties"]["a"]["properties"]["b"],
        json!({"$ref": "#/$defs/B"})
    );
    Schema::compile(&out).unwrap();
}

#[test]
fn a_cycle_that_never_descends_is_an_error_naming_the_chain() {
    let doc = json!({"components": {"schemas": {
        "A": {"$ref": "#/components/schemas/B"},
        "B": {"allOf": [{"$ref": "#/components/schemas/A"}]}
    }}});
    let err = inline(&doc, json!({"$ref": "#/components/schemas/A"}))
        .unwrap_err()
        .unwrap();
    assert_eq!(
        err,
        "$ref cycle that never reaches a property or item: #/components/schemas/A -> \
         #/components/schemas/B -> #/components/schemas/A"
    );
}

#[test]
fn broken_references_are_errors() {
    let doc = json!({"components": {"schemas": {}}});
    for (reference, says) in [
        ("common.yaml#/Pet", "points outside the document"),
        ("https://example.com/s.json", "points outside the document"),
        ("#/components/schemas/Nope", "points at nothing"),
        ("#", "whole document"),
    ] {
        let err = inline(&doc, json!({"$ref": reference}))
            .unwrap_err()
            .unwrap();
        assert!(err.contains(says), "{reference}: {err}");
    }
}

#[test]
fn escaped_pointers_resolve() {
    let doc = json!({"paths": {"/pets/{id}": {"get": {"x": {"type": "integer"}}}}});
    let out = inline(&doc, json!({"$ref": "#/paths/~1pets~1%7Bid%7D/get/x"})).unwrap();
    assert_eq!(out, json!({"type": "integer"}));
}

#[test]
fn object_chains_are_followed_and_their_cycles_reported() {
    let doc = json!({"components": {"parameters": {
        "A": {"$ref": "#/components/parameters/B"},
        "B": {"name": "limit", "in": "query"},
        "X": {"$ref": "#/components/parameters/Y"},
        "Y": {"$ref": "#/components/parameters/X"}
    }}});
    let resolver = Resolver::new(&doc, true);
    let a = json!({"$ref": "#/components/parameters/A"});
    assert_eq!(resolver.object(&a).unwrap()["name"], "limit");
    let x = json!({"$ref": "#/components/parameters/X"});
    let err = resolver.object(&x).unwrap_err();
    assert!(
        err.starts_with("$ref cycle: #/components/parameters/X -> "),
        "{err}"
    );
}

#[test]
fn a_schema_too_large_to_inline_is_shared_under_defs() {
    // Each level refers to the next twice: 2^20 nodes inlined, 20 shared.
    let mut schemas = Map::new();
    for i in 0..20 {
        let next = format!("#/components/schemas/L{}", i + 1);
        schemas.insert(
            format!("L{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
        );
    }
    schemas.insert("L20".into(), json!({"type": "string"}));
    let doc = json!({"components": {"schemas": schemas}});
    let top = json!({"$ref": "#/components/schemas/L0"});
    assert_eq!(inline(&doc, top.clone()), Err(None));
    let resolver = Resolver::new(&doc, true);
    let mut defs = Defs::new(true);
    let mut out = Inliner::new(&resolver, &mut defs).schema(&top).unwrap();
    let names = defs.attach(&mut out);
    assert_eq!(names.len(), 20);
    assert_eq!(out["properties"]["a"], json!({"$ref": "#/$defs/L1"}));
    Schema::compile(&out).unwrap();
}

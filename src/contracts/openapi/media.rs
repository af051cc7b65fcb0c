//! The JSON entry of an OpenAPI `content` map: toolgate reads REST bodies and shapes
//! results as JSON, so that is the schema a contract can use.

use serde_json::Value;

/// What a `content` map offers.
pub struct Media<'a> {
    /// The JSON media type chosen, and its schema when it has one.
    pub json: Option<(String, Option<&'a Value>)>,
    /// Every other media type, sorted.
    pub others: Vec<String>,
}

/// `application/json` first, then a `+json` type, then a wildcard (`*/*`,
/// `application/*`): the first that is present wins.
pub fn pick(content: Option<&Value>) -> Media<'_> {
    let Some(Value::Object(types)) = content else {
        return Media {
            json: None,
            others: Vec::new(),
        };
    };
    let essence = |t: &str| {
        t.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let rank = |t: &str| match essence(t).as_str() {
        "application/json" => Some(0),
        e if e.ends_with("+json") => Some(1),
        "*/*" | "application/*" => Some(2),
        _ => None,
    };
    let chosen = types
        .keys()
        .filter_map(|t| rank(t).map(|r| (r, t)))
        .min()
        .map(|(_, t)| t.clone());
    let others = types
        .keys()
        .filter(|t| Some(*t) != chosen.as_ref())
        .cloned()
        .collect();
    Media {
        json: chosen.map(|t| {
            let schema = types.get(&t).and_then(|m| m.get("schema"));
            (t, schema)
        }),
        others,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_preferred_and_the_rest_listed() {
        let content = json!({
            "application/xml": {"schema": {"type": "string"}},
            "application/problem+json": {"schema": {"type": "integer"}},
            "application/json; charset=utf-8": {"schema": {"type": "object"}}
        });
        let m = pick(Some(&content));
        let (t, s) = m.json.unwrap();
        assert_eq!(t, "application/json; charset=utf-8");
        assert_eq!(s.unwrap()["type"], "object");
        assert_eq!(
            m.others,
            vec!["application/problem+json", "application/xml"]
        );
        let form = json!({"multipart/form-data": {}});
        let m = pick(Some(&form));
        assert!(m.json.is_none());
        assert_eq!(m.others, vec!["multipart/form-data"]);
    }
}

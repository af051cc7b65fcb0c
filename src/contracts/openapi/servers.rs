//! The path prefix of every binding: `--base-path` when given, else the path of the
//! first `servers[].url` (the operation's, its path item's, or the document's), with its
//! variables at their defaults. `https://api.example.com/v1/` → `/v1`; `/` → nothing.

use serde_json::Value;

use crate::contracts::DraftError;

/// `--base-path` checked: empty or `/…`, no template braces, query or fragment; no
/// trailing slash.
pub fn checked(given: &str) -> Result<String, DraftError> {
    let bad = |reason: &str| DraftError::BasePath {
        given: given.to_string(),
        reason: reason.to_string(),
    };
    if !given.is_empty() && !given.starts_with('/') {
        return Err(bad("must start with /"));
    }
    if given.contains(['{', '}', '?', '#']) || given.chars().any(char::is_whitespace) {
        return Err(bad("must be a plain path: no {…}, ?, # or spaces"));
    }
    Ok(given.trim_end_matches('/').to_string())
}

/// The prefix an operation's servers give, and where it came from; `None` when no
/// `servers` applies.
pub fn prefix(root: &Value, item: &Value, operation: &Value) -> Option<(String, &'static str)> {
    [
        (operation, "the operation's servers"),
        (item, "the path's servers"),
        (root, "servers"),
    ]
    .into_iter()
    .find_map(|(holder, source)| {
        let first = holder.get("servers")?.as_array()?.first()?;
        Some((path_of(first), source))
    })
}

/// The path part of one server object's URL, variables replaced by their defaults.
fn path_of(server: &Value) -> String {
    let mut url = server
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(Value::Object(variables)) = server.get("variables") {
        for (name, variable) in variables {
            let value = variable
                .get("default")
                .and_then(Value::as_str)
                .unwrap_or("");
            url = url.replace(&format!("{{{name}}}"), value);
        }
    }
    let url = url.split(['?', '#']).next().unwrap_or("");
    let path = match url.split_once("//") {
        Some((scheme, rest)) if scheme.is_empty() || scheme.ends_with(':') => {
            rest.find('/').map_or("", |i| &rest[i..])
        }
        _ => url,
    };
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        String::new()
    } else if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(url: &str) -> String {
        path_of(&json!({"url": url}))
    }

    #[test]
    fn server_urls_give_their_path() {
        assert_eq!(of("https://api.example.com/v1/"), "/v1");
        assert_eq!(of("https://api.example.com"), "");
        assert_eq!(of("//api.example.com/v2?x=1"), "/v2");
        assert_eq!(of("/"), "");
        assert_eq!(of("v3/base"), "/v3/base");
        let templated = json!({"url": "{scheme}://h/{base}", "variables": {"scheme": {"default": "https"}, "base": {"default": "api/v4"}}});
        assert_eq!(path_of(&templated), "/api/v4");
    }

    #[test]
    fn the_operation_s_servers_win() {
        let root = json!({"servers": [{"url": "/root"}]});
        let item = json!({});
        let op = json!({"servers": [{"url": "https://x/op"}]});
        assert_eq!(prefix(&root, &item, &op).unwrap().0, "/op");
        assert_eq!(prefix(&root, &item, &json!({})).unwrap().0, "/root");
        assert!(prefix(&json!({}), &item, &json!({})).is_none());
    }

    #[test]
    fn base_paths_are_checked() {
        assert_eq!(checked("/api/").unwrap(), "/api");
        assert_eq!(checked("").unwrap(), "");
        assert!(checked("api").is_err());
        assert!(checked("/{x}").is_err());
        assert!(checked("/a b").is_err());
    }
}

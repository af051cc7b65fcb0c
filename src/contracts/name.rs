//! Names for drafted objects and tools.
//!
//! `metadata.name` must be a Kubernetes name (RFC 1123 label: lowercase letters, digits
//! and `-`, starting and ending with a letter or digit, at most 63 characters) and unique
//! in the output. It is derived from the tool name alone: lowercased, every other
//! character turned into `-`. Where that loses information — two tools fold into one name,
//! or the name is cut to fit — a short hash of the tool name is appended, so a name never
//! depends on the order tools were listed in.
//!
//! Tool names drafted from OpenAPI are `snake_case` of ASCII letters, digits and `_`, at
//! most 64 characters (what model APIs accept for a function name).

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};

use super::Draft;

const MAX_NAME: usize = 63;
const MAX_TOOL: usize = 64;

/// Fills in every draft's `metadata.name`, unique across `drafts`.
pub fn assign(drafts: &mut [Draft]) {
    let mut by_base: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, draft) in drafts.iter().enumerate() {
        by_base.entry(fold(&draft.tool)).or_default().push(i);
    }
    let mut taken = HashSet::new();
    for (i, draft) in drafts.iter_mut().enumerate() {
        let base = fold(&draft.tool);
        let shared = by_base.get(&base).is_some_and(|v| v.len() > 1);
        let mut name = if shared || base.len() > MAX_NAME || base.is_empty() {
            with_hash(&base, &draft.tool, MAX_NAME)
        } else {
            base
        };
        // Identical tool names (a server listing one twice) share even the hash.
        let mut n = 2;
        while !taken.insert(name.clone()) {
            name = with_suffix(&with_hash("", &format!("{}#{i}", draft.tool), MAX_NAME), n);
            n += 1;
        }
        draft.name = name;
    }
}

/// The tool name folded into a Kubernetes name, not yet cut or made unique.
fn fold(tool: &str) -> String {
    let mut out = String::with_capacity(tool.len());
    for c in tool.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `base` cut so that `-` and eight hex digits of `source`'s SHA-256 fit in `max`.
fn with_hash(base: &str, source: &str, max: usize) -> String {
    let digest = hex::encode(&Sha256::digest(source.as_bytes())[..4]);
    let keep = max - digest.len() - 1;
    let mut cut: String = base.chars().take(keep).collect();
    while cut.ends_with(['-', '_']) {
        cut.pop();
    }
    if cut.is_empty() {
        cut.push_str("tool");
    }
    format!("{cut}-{digest}")
}

fn with_suffix(name: &str, n: usize) -> String {
    let suffix = format!("-{n}");
    let keep = MAX_NAME - suffix.len();
    format!("{}{suffix}", &name[..name.len().min(keep)])
}

/// `operationId` or path words as a tool name: `getPetById` → `get_pet_by_id`,
/// `HTTPServer` → `http_server`, `list-pets` → `list_pets`.
pub fn snake_case(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if !out.ends_with('_') {
                out.push('_');
            }
            continue;
        }
        if c.is_ascii_uppercase() && i > 0 && !out.ends_with('_') {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            // A new word starts at `aB`, at `1B`, and at the last capital of `HTTPServer`.
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    let out = out.trim_matches('_').to_string();
    if out.len() > MAX_TOOL {
        return with_hash(&out, text, MAX_TOOL).replace('-', "_");
    }
    out
}

/// Makes tool names unique in order: a later draft whose name is taken gets `_2`, `_3`, …
/// and a review note naming the draft it collided with.
pub fn unique_tools(drafts: &mut [Draft]) {
    let mut first: BTreeMap<String, String> = BTreeMap::new();
    let mut taken: HashSet<String> = drafts.iter().map(|d| d.tool.clone()).collect();
    for draft in drafts.iter_mut() {
        match first.get(&draft.tool) {
            None => {
                first.insert(draft.tool.clone(), draft.origin.clone());
            }
            Some(owner) => {
                let owner = owner.clone();
                let mut n = 2;
                let mut candidate = format!("{}_{n}", draft.tool);
                while taken.contains(&candidate) {
                    n += 1;
                    candidate = format!("{}_{n}", draft.tool);
                }
                draft.review(format!(
                    "tool {} is also the name drafted for {owner}: this one is {candidate}; \
                     pick a name the model will understand",
                    draft.tool
                ));
                taken.insert(candidate.clone());
                first.insert(candidate.clone(), draft.origin.clone());
                draft.tool = candidate;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tools: &[&str]) -> Vec<String> {
        let mut drafts: Vec<Draft> = tools
            .iter()
            .map(|t| Draft::new(String::new(), t.to_string()))
            .collect();
        assign(&mut drafts);
        drafts.into_iter().map(|d| d.name).collect()
    }

    fn is_kube_name(n: &str) -> bool {
        !n.is_empty()
            && n.len() <= 63
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !n.starts_with('-')
            && !n.ends_with('-')
    }

    #[test]
    fn names_fold_to_kubernetes_labels() {
        assert_eq!(names(&["read_logs"]), vec!["read-logs"]);
        assert_eq!(names(&["Billing.Refund_v2"]), vec!["billing-refund-v2"]);
        let long = "x".repeat(80);
        for name in names(&[&long, "___", "工具", "-a-"]) {
            assert!(is_kube_name(&name), "{name}");
        }
        assert_eq!(names(&["-a-"]), vec!["a"]);
    }

    #[test]
    fn folded_twins_get_hashes_that_do_not_depend_on_order() {
        let a = names(&["get_user", "get-user", "other"]);
        let b = names(&["get-user", "get_user", "other"]);
        assert_ne!(a[0], a[1]);
        assert_eq!(
            (a[0].as_str(), a[1].as_str()),
            (b[1].as_str(), b[0].as_str())
        );
        assert_eq!(a[2], "other");
        assert!(
            a[0].starts_with("get-user-") && is_kube_name(&a[0]),
            "{a:?}"
        );
    }

    #[test]
    fn duplicate_tools_still_get_distinct_names() {
        let n = names(&["dup", "dup"]);
        assert_ne!(n[0], n[1]);
        assert!(n.iter().all(|n| is_kube_name(n)), "{n:?}");
    }

    #[test]
    fn snake_case_splits_words() {
        assert_eq!(snake_case("getPetById"), "get_pet_by_id");
        assert_eq!(snake_case("HTTPServerStatus"), "http_server_status");
        assert_eq!(snake_case("list-pets"), "list_pets");
        assert_eq!(snake_case("getV2Users"), "get_v2_users");
        assert_eq!(snake_case("already_snake"), "already_snake");
        assert_eq!(snake_case("Ünïcode op"), "n_code_op");
        assert!(snake_case(&"a".repeat(100)).len() <= 64);
    }

    #[test]
    fn clashing_tools_are_renumbered_with_a_note() {
        let mut drafts = vec![
            Draft::new("GET /a".into(), "get_a".into()),
            Draft::new("GET /b".into(), "get_a".into()),
        ];
        unique_tools(&mut drafts);
        assert_eq!(drafts[1].tool, "get_a_2");
        assert_eq!(drafts[1].reviews(), 1);
        assert_eq!(drafts[0].reviews(), 0);
    }
}

//! A parser's message without the values it quotes.
//!
//! serde's messages quote the value they could not use (`invalid type: string
//! "root:x:0:0:…", expected struct Envelope`), and serde_yaml folds a whole file that
//! isn't YAML mappings into one such string: a secret named as a policy file would be
//! served back by `/config`. [`message`] keeps what locates and explains the error (the
//! kind of value, what was expected, the line and column, field names) and drops the
//! value itself. Field names stay: they are the position, as in a field path.

/// Where a quoted value starts, and the word that replaces the whole token.
const MARKERS: [(&str, Quote); 6] = [
    ("string \"", Quote::Debug),
    ("integer `", Quote::Backtick),
    ("floating point `", Quote::Backtick),
    ("boolean `", Quote::Backtick),
    ("character `", Quote::Char),
    ("unknown variant `", Quote::Backtick),
];

#[derive(Clone, Copy)]
enum Quote {
    /// Rust's `{:?}` of a string: ends at the first `"` not escaped by `\`.
    Debug,
    /// Ends at the next backtick.
    Backtick,
    /// One character, then a backtick (the character may itself be a backtick).
    Char,
}

/// `text` (a serde, serde_json or serde_yaml message) with quoted values removed:
/// `invalid type: string "x", expected a map at line 3 column 1` becomes
/// `invalid type: string, expected a map at line 3 column 1`.
pub fn message(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(512));
    let mut rest = text;
    while let Some((at, marker, quote)) = next_marker(rest) {
        // The marker without its opening quote: `string`, `unknown variant`, ….
        out.push_str(&rest[..at + marker.len() - 2]);
        let value = &rest[at + marker.len()..];
        // An unterminated quote: nothing after it can be told from the value.
        rest = skip(value, quote).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// Any error's message, quieted.
pub fn error(error: &dyn std::fmt::Display) -> String {
    message(&error.to_string())
}

fn next_marker(text: &str) -> Option<(usize, &'static str, Quote)> {
    MARKERS
        .iter()
        .filter_map(|(marker, quote)| text.find(marker).map(|at| (at, *marker, *quote)))
        .min_by_key(|(at, _, _)| *at)
}

/// What follows the quoted value that starts `value` (just past its opening quote).
fn skip(value: &str, quote: Quote) -> Option<&str> {
    match quote {
        Quote::Backtick => value.find('`').map(|end| &value[end + 1..]),
        Quote::Char => {
            let mut chars = value.chars();
            chars.next()?;
            chars.as_str().strip_prefix('`')
        }
        Quote::Debug => {
            let mut escaped = false;
            for (i, c) in value.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => return Some(&value[i + 1..]),
                    _ => {}
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        name: String,
        count: u8,
        mode: Mode,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Enforce,
    }

    fn yaml_error(text: &str) -> String {
        message(&serde_yaml::from_str::<Shape>(text).unwrap_err().to_string())
    }

    #[test]
    fn values_go_kinds_and_positions_stay() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:hunter2:/usr/sbin\n";
        let err = yaml_error(passwd);
        assert!(!err.contains("root") && !err.contains("hunter2"), "{err}");
        assert!(err.contains("invalid type: string"), "{err}");
        for (text, secret) in [
            ("name: a\ncount: 999999\nmode: enforce\n", "999999"),
            ("name: a\ncount: -3\nmode: enforce\n", "-3"),
            ("name: a\ncount: 1.5e9\nmode: enforce\n", "1.5e9"),
            ("name: a\ncount: 1\nmode: s3cr3t\n", "s3cr3t"),
            ("name: a\ncount: true\nmode: enforce\n", "true"),
            ("name: [\"p\\\"w\"]\ncount: 1\nmode: enforce\n", "p\\\"w"),
        ] {
            let err = yaml_error(text);
            assert!(!err.contains(secret), "{text}: {err}");
            assert!(err.contains("line"), "{text}: the position stays: {err}");
        }
        let err = yaml_error("name: a\ncount: 1\nmode: enforce\nextra: 1\n");
        assert!(err.contains("unknown field `extra`"), "{err}");
        let json = serde_json::from_str::<Shape>(r#"{"name": 5, "count": 1}"#).unwrap_err();
        let err = message(&json.to_string());
        assert!(
            err.contains("invalid type: integer, expected a string at line 1"),
            "{err}"
        );
    }

    #[test]
    fn odd_quotes_never_leak_what_follows() {
        assert_eq!(
            message("invalid type: string \"abc"),
            "invalid type: string"
        );
        assert_eq!(
            message("invalid type: character ```, expected x"),
            "invalid type: character, expected x"
        );
        assert_eq!(message("no values here"), "no values here");
        assert_eq!(
            message("a: string \"x\\\\\" b: string \"y\" c"),
            "a: string b: string c"
        );
    }
}

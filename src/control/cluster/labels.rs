//! The pod's labels, from the downward-API file Kubernetes writes (`key="value"` lines,
//! values quoted Go-style). They decide which objects' `workloadSelector` picks this pod.

use std::collections::BTreeMap;
use std::path::Path;

use crate::input::file::{read_text, Bound, ReadError};

#[derive(Debug, thiserror::Error)]
pub enum LabelsError {
    #[error(
        "cannot read pod labels: {0}; mount the downward API `metadata.labels` \
         there, or point policies.kubernetes.podLabelsFile at a file of key=\"value\" lines"
    )]
    Unreadable(#[from] ReadError),
    #[error("pod labels {path}, line {line}: {message}")]
    Malformed {
        path: String,
        line: usize,
        message: String,
    },
}

pub fn load(path: &Path) -> Result<BTreeMap<String, String>, LabelsError> {
    let text = read_text(path, Bound::SMALL)?;
    parse(&text).map_err(|(line, message)| LabelsError::Malformed {
        path: path.display().to_string(),
        line,
        message,
    })
}

/// Parses the file's text; an error is `(1-based line, message)`.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, (usize, String)> {
    let mut labels = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (key, raw) = line
            .split_once('=')
            .ok_or((i + 1, "expected key=\"value\"".to_string()))?;
        let value = unquote(raw).map_err(|message| (i + 1, message))?;
        labels.insert(key.to_string(), value);
    }
    Ok(labels)
}

/// Reverses Go's `strconv.Quote`, which the kubelet uses; a bare value is taken as is.
fn unquote(raw: &str) -> Result<String, String> {
    let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return Ok(raw.to_string());
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = chars.next().ok_or("dangling backslash")?;
        out.push(match escaped {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '\\' | '"' | '\'' => escaped,
            'x' | 'u' | 'U' => {
                let digits = match escaped {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(digits).collect();
                u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == digits)
                    .and_then(char::from_u32)
                    // Without the digits: the error names the line, not the label's value.
                    .ok_or(format!("bad escape \\{escaped}"))?
            }
            other => return Err(format!("unknown escape \\{other}")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_kubelet_writes() {
        let text =
            "app=\"log-service\"\npod-template-hash=\"5d8f\"\n\nnote=\"a \\\"b\\\" \\u00e9\"\n";
        let labels = parse(text).unwrap();
        assert_eq!(labels["app"], "log-service");
        assert_eq!(labels["pod-template-hash"], "5d8f");
        assert_eq!(labels["note"], "a \"b\" é");
    }

    #[test]
    fn malformed_lines_name_their_number() {
        assert_eq!(parse("app=\"x\"\nnonsense").unwrap_err().0, 2);
        assert!(parse("a=\"\\q\"").is_err());
    }

    #[test]
    fn missing_file_says_what_to_do() {
        let err = load(Path::new("/nonexistent/labels")).unwrap_err();
        assert!(err.to_string().contains("podLabelsFile"), "{err}");
    }
}

//! `toolgate audit verify`: walks a log and reports the first line that breaks the chain.

use serde::Deserialize;

use super::record::{link_hash, GENESIS};

#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// 1-based line number in the file.
    pub line: usize,
    pub reason: String,
}

#[derive(Deserialize)]
struct Links {
    seq: u64,
    prev: String,
    hash: String,
}

/// Verifies every line; `Ok(n)` is the number of intact records.
pub fn verify(text: &str) -> Result<usize, Broken> {
    let mut prev: Option<(u64, String)> = None;
    let mut count = 0;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let broken = |reason: String| Broken {
            line: line_no,
            reason,
        };
        let links: Links =
            serde_json::from_str(line).map_err(|e| broken(format!("not an audit record: {e}")))?;
        let suffix = format!(",\"hash\":\"{}\"}}", links.hash);
        let body = line
            .strip_suffix(&suffix)
            .ok_or_else(|| broken("the hash is not the record's last field".into()))?;
        if link_hash(&links.prev, body) != links.hash {
            return Err(broken(
                "the record was edited (its hash does not match its content)".into(),
            ));
        }
        match &prev {
            None if links.prev != GENESIS || links.seq != 1 => {
                return Err(broken("the first record does not start the chain (seq 1 after the genesis hash): records before it were deleted".into()));
            }
            None => {}
            Some((seq, hash)) => {
                if links.prev != *hash {
                    return Err(broken(format!(
                        "the chain breaks here: prev does not match line {}'s hash (a record was deleted, inserted or moved)",
                        line_no - 1
                    )));
                }
                if links.seq != seq + 1 {
                    return Err(broken(format!("seq {} follows seq {seq}", links.seq)));
                }
            }
        }
        prev = Some((links.seq, links.hash));
        count += 1;
    }
    Ok(count)
}

//! `toolgate audit verify`: walks a log, line by line in constant memory, and reports
//! the first line that breaks the chain.
//!
//! Two kinds of break are told apart, because they call for different responses:
//! - **tampered**: a line was edited, inserted, deleted or moved (its hash, `prev` or
//!   `seq` disagree), or a keyed chain doesn't verify with the key given;
//! - **truncated**: the log ends early — its last line has no newline (cut mid-record,
//!   as by a crash or a full disk outside toolgate), or it ends before a record the
//!   writer acknowledged (`--expect-seq`, from `/config`'s `audit.lastSeq` or the
//!   sidecar's shutdown log line), which is the only way a cut at a line boundary can be
//!   known.

use serde::Deserialize;
use std::io::{BufRead, Read};

use super::key::{link_hash, scheme, AuditKey};
use super::record::GENESIS;

/// Longest line read; a record is far smaller (captured arguments are bounded by
/// `limits.maxBodyBytes`), so anything longer is not a record.
pub const MAX_LINE: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breach {
    Tampered,
    Truncated,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// 1-based line number in the file.
    pub line: usize,
    pub breach: Breach,
    pub reason: String,
}

/// What an intact log holds. The counts by kind add up to `records`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Every record, of every kind.
    pub records: u64,
    /// Decisions (`kind: call`, or no kind).
    pub calls: u64,
    pub starts: u64,
    pub policies: u64,
    /// Approval transitions (`kind: approval`: requested, approved, denied, expired, used).
    pub approvals: u64,
    /// Records of a kind this version doesn't know (written by a newer one).
    pub other: u64,
    /// The last record's `seq` (0 for an empty log).
    pub last_seq: u64,
}

impl Summary {
    /// The records by kind, as `audit verify` prints them: every record in one count.
    pub fn by_kind(&self) -> String {
        let mut text = format!(
            "{} decisions, {} starts, {} policy versions, {} approval records",
            self.calls, self.starts, self.policies, self.approvals
        );
        if self.other > 0 {
            text.push_str(&format!(", {} of other kinds", self.other));
        }
        text
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Links {
    seq: u64,
    prev: String,
    hash: String,
    #[serde(default)]
    kind: Option<String>,
    /// On `start` records: how the lines after it are sealed, and with which key.
    #[serde(default)]
    chain: Option<String>,
    #[serde(default)]
    key_id: Option<String>,
}

/// A chain being walked one line at a time.
pub struct Verifier<'k> {
    key: Option<&'k AuditKey>,
    prev: Option<(u64, String)>,
    line: usize,
    summary: Summary,
}

impl<'k> Verifier<'k> {
    pub fn new(key: Option<&'k AuditKey>) -> Verifier<'k> {
        Verifier {
            key,
            prev: None,
            line: 0,
            summary: Summary::default(),
        }
    }

    /// Checks the next line (without its newline); `complete` is whether a newline
    /// ended it.
    pub fn line(&mut self, bytes: &[u8], complete: bool) -> Result<(), Broken> {
        self.line += 1;
        let tampered = |reason: String| Broken {
            line: self.line,
            breach: Breach::Tampered,
            reason,
        };
        if !complete {
            return Err(Broken {
                line: self.line,
                breach: Breach::Truncated,
                reason: "the log was cut mid-record: its last line has no newline (a crash, or a truncation); every line before it is intact".into(),
            });
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| tampered("not an audit record: not UTF-8".into()))?;
        let links: Links = serde_json::from_str(text)
            .map_err(|e| tampered(format!("not an audit record: {e}")))?;
        let suffix = format!(",\"hash\":\"{}\"}}", links.hash);
        let body = text
            .strip_suffix(&suffix)
            .ok_or_else(|| tampered("the hash is not the record's last field".into()))?;
        if link_hash(self.key, &links.prev, body) != links.hash {
            return Err(tampered(self.mismatch(&links)));
        }
        match &self.prev {
            None if links.prev != GENESIS || links.seq != 1 => {
                return Err(tampered("the first record does not start the chain (seq 1 after the genesis hash): records before it were deleted".into()));
            }
            None => {}
            Some((seq, hash)) => {
                if links.prev != *hash {
                    return Err(tampered(format!(
                        "the chain breaks here: prev does not match the previous record's hash (a record was deleted, inserted or moved), after seq {seq}"
                    )));
                }
                if links.seq != seq + 1 {
                    return Err(tampered(format!("seq {} follows seq {seq}", links.seq)));
                }
            }
        }
        self.summary.records += 1;
        self.summary.last_seq = links.seq;
        match links.kind.as_deref() {
            None | Some("call") => self.summary.calls += 1,
            Some("start") => self.summary.starts += 1,
            Some("policy") => self.summary.policies += 1,
            Some("approval") => self.summary.approvals += 1,
            Some(_) => self.summary.other += 1,
        }
        self.prev = Some((links.seq, links.hash));
        Ok(())
    }

    /// Why a line's hash doesn't match: a start record says when the wrong key (or no
    /// key) was given, which is not the same news as an edit.
    fn mismatch(&self, links: &Links) -> String {
        let given = scheme(self.key);
        if links.kind.as_deref() == Some("start") {
            if let Some(chain) = links.chain.as_deref().filter(|c| *c != given) {
                return match chain {
                    "hmac-sha256" => format!(
                        "the log is keyed (HMAC-SHA256, key id {}): pass --key-file with its key",
                        links.key_id.as_deref().unwrap_or("unknown")
                    ),
                    _ => format!("the log is sealed with {chain}, not with the key given"),
                };
            }
            if let (Some(theirs), Some(ours)) = (links.key_id.as_deref(), self.key) {
                if theirs != ours.id() {
                    return format!(
                        "the log is keyed with key id {theirs}, not with the given key (id {})",
                        ours.id()
                    );
                }
            }
        }
        match self.key {
            Some(_) => "the record was edited, or not sealed with this key (its HMAC does not match its content)".into(),
            None => "the record was edited (its hash does not match its content)".into(),
        }
    }

    /// Ends the walk; `expect_seq` is the last record the writer acknowledged, if known.
    pub fn finish(self, expect_seq: Option<u64>) -> Result<Summary, Broken> {
        if let Some(expected) = expect_seq.filter(|&e| e > self.summary.last_seq) {
            return Err(Broken {
                line: self.line + 1,
                breach: Breach::Truncated,
                reason: format!(
                    "the log ends at seq {} but the writer acknowledged seq {expected}: {} records were cut from its end",
                    self.summary.last_seq,
                    expected - self.summary.last_seq
                ),
            });
        }
        Ok(self.summary)
    }
}

/// An audit log's lines, read with memory bounded by [`MAX_LINE`]: what `audit verify`
/// and `toolgate replay` read a log with.
pub struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
}

/// Why the next line couldn't be read.
pub enum LineError {
    Read(std::io::Error),
    /// Longer than [`MAX_LINE`]: no audit record is.
    TooLong,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R) -> Lines<R> {
        Lines {
            reader,
            buf: Vec::new(),
        }
    }

    /// The next line without its newline, and whether it had one (a last line that
    /// doesn't was cut off); `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(&[u8], bool)>, LineError> {
        self.buf.clear();
        let read = (&mut self.reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(LineError::Read)?;
        if read == 0 {
            return Ok(None);
        }
        let complete = self.buf.last() == Some(&b'\n');
        if !complete && self.buf.len() > MAX_LINE {
            return Err(LineError::TooLong);
        }
        let line = match complete {
            true => &self.buf[..self.buf.len() - 1],
            false => &self.buf[..],
        };
        Ok(Some((line, complete)))
    }
}

/// Verifies a whole log held in memory.
pub fn verify(text: &str, key: Option<&AuditKey>) -> Result<Summary, Broken> {
    verify_reader(text.as_bytes(), key, None)
}

/// Verifies a log read as a stream: memory stays bounded by the longest line.
pub fn verify_reader(
    reader: impl BufRead,
    key: Option<&AuditKey>,
    expect_seq: Option<u64>,
) -> Result<Summary, Broken> {
    let mut verifier = Verifier::new(key);
    let mut lines = Lines::new(reader);
    loop {
        let (line, complete) = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => return verifier.finish(expect_seq),
            Err(LineError::Read(e)) => {
                return Err(Broken {
                    line: verifier.line + 1,
                    breach: Breach::Truncated,
                    reason: format!("the log could not be read past here: {e}"),
                })
            }
            Err(LineError::TooLong) => {
                return Err(Broken {
                    line: verifier.line + 1,
                    breach: Breach::Tampered,
                    reason: format!("not an audit record: a line longer than {MAX_LINE} bytes"),
                })
            }
        };
        verifier.line(line, complete)?;
    }
}

//! Why a draft could not be made at all. Each message names the file or URL and says what
//! to do; none repeats a token or a URL's userinfo or query. `main` prints it and exits 2.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DraftError {
    #[error("reading {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} is larger than {limit} bytes, the most a draft reads")]
    TooLarge { path: String, limit: u64 },
    #[error("{path} is neither JSON nor YAML: {reason}")]
    Syntax { path: String, reason: String },
    #[error("{path}: {reason}")]
    NotOpenApi { path: String, reason: String },
    #[error("{path}: {reason}")]
    Reference { path: String, reason: String },
    #[error("--base-path {given:?}: {reason}")]
    BasePath { given: String, reason: String },
    #[error("the MCP URL {given:?}: {reason}")]
    Url { given: String, reason: String },
    #[error("the token file {path}: {reason}")]
    TokenFile { path: String, reason: String },
    #[error("{url}: unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url}: no answer to {method} within {}s (--timeout-seconds)", .after.as_secs())]
    Timeout {
        url: String,
        method: &'static str,
        after: Duration,
    },
    #[error("{url}: the listing took more than {}s (ten times --timeout-seconds)", .after.as_secs())]
    Slow { url: String, after: Duration },
    #[error("{url}: {method} was answered with HTTP {status}{hint}")]
    Status {
        url: String,
        method: &'static str,
        status: u16,
        hint: String,
    },
    #[error("{url}: {method}: {reason}")]
    Protocol {
        url: String,
        method: &'static str,
        reason: String,
    },
    #[error("{url}: {method} failed with JSON-RPC error {code}: {message}")]
    Rpc {
        url: String,
        method: &'static str,
        code: i64,
        message: String,
    },
}

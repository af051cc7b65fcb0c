//! Drafting from an MCP server over Streamable HTTP: [`session`] lists the tools through
//! [`transport`] (answers read by [`answer`]), [`tool`] turns each into a draft.

pub mod answer;
pub mod session;
pub mod tool;
pub mod transport;

use std::path::Path;
use std::time::Duration;

use super::{name, verify, DraftError, Drafted};
use transport::Endpoint;

/// The most a token file may hold: a JWT with many claims fits well within it.
const MAX_TOKEN: u64 = 64 * 1024;

/// Lists `url`'s tools and drafts a contract for each.
pub async fn draft(
    url: &str,
    token_file: Option<&Path>,
    timeout: Duration,
) -> Result<Drafted, DraftError> {
    let token = token_file.map(read_token).transpose()?;
    let endpoint = Endpoint::open(url, token.as_deref(), timeout)?;
    let mut drafted = Drafted::default();
    if endpoint.token_in_the_clear() {
        drafted.warnings.push(format!(
            "the token is sent over plain http to {}: anyone on the path can read it",
            endpoint.shown
        ));
    }
    // Each request has the timeout; the whole conversation, pages included, ten of them.
    let listing = tokio::time::timeout(timeout * 10, session::list(&endpoint))
        .await
        .map_err(|_| DraftError::Slow {
            url: endpoint.shown.clone(),
            after: timeout * 10,
        })??;
    drafted.header = vec![
        format!(
            "Drafted by `toolgate contracts draft` from the MCP server {} ({}, protocol {}).",
            endpoint.shown, listing.server, listing.protocol
        ),
        "Review every contract before applying it: the schemas, descriptions and hints are \
         the server's own, and toolgate enforces what you apply."
            .into(),
        "No `http` binding: these tools are called over MCP (tools/call).".into(),
    ];
    for listed in &listing.tools {
        match tool::draft(listed) {
            Ok(draft) => drafted.drafts.push(draft),
            Err(skipped) => drafted.warnings.push(skipped),
        }
    }
    name::assign(&mut drafted.drafts);
    verify::verify(&mut drafted.drafts);
    Ok(drafted)
}

/// The bearer token: the file's content, trimmed. Its value appears in no message.
fn read_token(path: &Path) -> Result<String, DraftError> {
    let shown = path.display().to_string();
    let fail = |reason: String| DraftError::TokenFile {
        path: shown.clone(),
        reason,
    };
    // Any readable file: a pipe too, so `--token-file <(vault read …)` works.
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_TOKEN + 1), &mut text)
        .map_err(|_| fail("not readable text".into()))?;
    if text.len() as u64 > MAX_TOKEN {
        return Err(fail(format!("larger than {MAX_TOKEN} bytes")));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(fail("empty".into()));
    }
    Ok(token.to_string())
}

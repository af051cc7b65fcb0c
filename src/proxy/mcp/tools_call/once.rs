//! At most once for MCP tools that are not idempotent (`idempotent: false`, the default
//! for MCP-served tools): the forward path (`proxy::forward`) sends the first call once,
//! detached, the backend keeping its JSON-RPC answer (`Keep::Answer`,
//! `backend::collect`), and every duplicate gets that answer under its own request id
//! ([`answer`]), marked `X-Toolgate-Replayed: true`.
//!
//! A buffered answer is the unshaped JSON-RPC response (SSE collected to its one
//! response); shaping runs per delivery, so a policy reload between two duplicates is
//! honoured.

use http::StatusCode;
use serde_json::Value;

use super::result::shape_answer;
use crate::limits::dedupe::Settled;
use crate::policy::contract::Contract;
use crate::proxy::backend::collect::with_id;
use crate::proxy::mcp::reply::Refusal;

/// The JSON-RPC answer for request `id`, shaped, from a shared outcome; the HTTP status
/// rides along for JSON-RPC errors an upstream sent with a 4xx.
pub fn answer(
    settled: &Settled,
    contract: &Contract,
    id: &Value,
) -> Result<(StatusCode, Value), Refusal> {
    match settled {
        Settled::Failed { reject, .. } => Err(Refusal::of_call(reject.clone())),
        Settled::Answered(buffered) if !buffered.status.is_success() => {
            Ok((buffered.status, with_id(&buffered.body, id)))
        }
        Settled::Answered(buffered) => {
            let message = with_id(&buffered.body, id);
            let shaped = shape_answer(contract, message).map_err(Refusal::of_call)?;
            Ok((StatusCode::OK, shaped))
        }
    }
}

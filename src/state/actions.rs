//! Business-key dedupe across pods: the owner of each `dedupeKey` action in Redis, so
//! another agent's call of the same action is refused whichever replica it reaches
//! (`limits::actions` is the in-memory twin and says what owning means).
//!
//! An action's key names its tool, not its agent, so it has a Redis Cluster slot of its
//! own: a contract with a `dedupeKey` costs one more round trip before its calls run.
//! Claiming is one `SET NX GET`; giving back is a compare-and-delete. Unreachable, the
//! claim fails closed (`STATE_UNAVAILABLE`), like every never-twice claim.

use std::time::Duration;

use super::link::{Op, Unavailable};
use super::Shared;
use crate::limits::actions::{Claimed, Owner};
use crate::limits::canonical::KeyBuilder;

const VERSION: &str = "tg1|";

impl Shared {
    /// Claims `action` of `tool` for `owner`, for `window`, or finds who has it.
    pub async fn claim_action(
        &self,
        tool: &str,
        action: &str,
        owner: &Owner,
        window: Duration,
    ) -> Result<Claimed, Unavailable> {
        let key = self.action_key(tool, action);
        let value = encode(owner);
        let held: Option<Vec<u8>> = self
            .link()
            .call(Op::Admit, |mut conn| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(window.as_millis().max(1) as u64)
                    .arg("GET")
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let Some(held) = held else {
            return Ok(Claimed::First);
        };
        match decode(&held) {
            Some(held) if held.same_caller(owner) => Ok(Claimed::Again),
            Some(held) => Ok(Claimed::Taken(held)),
            None => Err(Unavailable(
                "an action's owner in the shared state can't be read by this version".into(),
            )),
        }
    }

    /// Gives `action` back, if `owner` still has it.
    pub async fn release_action(&self, tool: &str, action: &str, owner: &Owner) {
        let key = self.action_key(tool, action);
        self.release_value(key, encode(owner).into_bytes()).await;
    }

    fn action_key(&self, tool: &str, action: &str) -> String {
        let digest = KeyBuilder::new("action").text(action).finish();
        self.keys().action(tool, &digest)
    }
}

fn encode(owner: &Owner) -> String {
    let session = match &owner.session {
        Some(session) => format!("s{session}"),
        None => "n".into(),
    };
    format!("{VERSION}{}\n{session}\n{}", owner.agent, owner.trace_id)
}

fn decode(value: &[u8]) -> Option<Owner> {
    let text = std::str::from_utf8(value).ok()?.strip_prefix(VERSION)?;
    let mut parts = text.splitn(3, '\n');
    let agent = parts.next()?.to_string();
    let session = parts.next()?;
    let session = match session.split_at_checked(1)? {
        ("s", id) => Some(id.to_string()),
        ("n", "") => None,
        _ => return None,
    };
    let trace_id = parts.next()?.to_string();
    Some(Owner {
        agent,
        session,
        trace_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_round_trip_and_garbage_does_not() {
        for session in [None, Some(""), Some("s-1\n")] {
            let owner = Owner {
                agent: "ops-bot".into(),
                session: session.map(String::from),
                trace_id: "4bf9".into(),
            };
            // A session id with a newline can't be told apart: it reads as someone else.
            let back = decode(encode(&owner).as_bytes());
            if session.is_some_and(|s| s.contains('\n')) {
                assert_ne!(back, Some(owner));
            } else {
                assert_eq!(back, Some(owner));
            }
        }
        for bad in [&b""[..], b"tg2|a\nn\nt", b"tg1|a\nx\nt", b"tg1|a", b"\xff"] {
            assert_eq!(decode(bad), None);
        }
    }
}

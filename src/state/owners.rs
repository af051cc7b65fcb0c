//! MCP session ownership across pods: the agent an `Mcp-Session-Id` was issued to, so a
//! session initialized through one replica is honoured, and protected, on the others.
//!
//! Each sidecar keeps its own table (`proxy::mcp::session`) in front of this one: a
//! session is asked of Redis only on a pod that hasn't seen it yet, then remembered
//! there. When Redis can't be asked, an unknown session is refused like any unknown
//! session (`404`, which tells the client to initialize again): ownership fails closed.

use std::time::Duration;

use super::link::{Op, Unavailable};
use super::Shared;

impl Shared {
    /// Records that `session` was issued to `agent`, for `idle` (refreshed on each read).
    pub async fn bind_owner(&self, session: &str, agent: &str, idle: Duration) {
        let key = self.keys().mcp_session(session);
        let agent = agent.to_string();
        let stored: Result<(), _> = self
            .link()
            .call(Op::Owner, |mut conn| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(agent)
                    .arg("PX")
                    .arg(idle.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
            })
            .await;
        if let Err(e) = stored {
            tracing::warn!(error = %e, "an MCP session's owner was not shared; other replicas will answer 404 for it");
        }
    }

    /// The agent `session` was issued to, if any pod issued it.
    pub async fn owner(
        &self,
        session: &str,
        idle: Duration,
    ) -> Result<Option<String>, Unavailable> {
        let key = self.keys().mcp_session(session);
        self.link()
            .call(Op::Owner, |mut conn| async move {
                redis::cmd("GETEX")
                    .arg(key)
                    .arg("PX")
                    .arg(idle.as_millis() as u64)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await
    }

    /// Forgets a session its agent ended.
    pub async fn end_owner(&self, session: &str) {
        let key = self.keys().mcp_session(session);
        let _ = self
            .link()
            .call(Op::Owner, |mut conn| async move {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await;
    }
}

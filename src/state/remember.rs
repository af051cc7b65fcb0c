//! A successful call remembered for `requires` (DESIGN §16): what the gate decides to
//! remember of a call (only calls of a tool some grant of the agent's policy requires),
//! held by the call's outcome and committed only once the call is known to have been
//! allowed and answered successfully — in this sidecar's history or in Redis.

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use super::history::Writer;
use crate::limits::history::History;

/// Where the history lives.
#[derive(Clone)]
pub enum Sink {
    Memory(History),
    Shared { writer: Writer, idle: Duration },
}

/// One call to remember if it succeeds.
#[derive(Clone)]
pub struct Remember {
    pub sink: Sink,
    pub agent: Arc<str>,
    /// The task or session (`limits::scope`).
    pub scope: String,
    pub tool: String,
    /// Validated, defaults filled.
    pub args: Arc<Value>,
}

impl Remember {
    /// Writes the call into the history; a Redis failure is logged (and counted by the
    /// link), never the call's.
    pub async fn commit(self) {
        match self.sink {
            Sink::Memory(history) => {
                history.remember(&self.agent, &self.scope, &self.tool, &self.args)
            }
            Sink::Shared { writer, idle } => {
                let written = writer
                    .remember(&self.agent, &self.scope, &self.tool, &self.args, idle)
                    .await;
                if let Err(e) = written {
                    tracing::warn!(error = %e, tool = %self.tool, "a successful call was not remembered in the shared state; calls that require it will be refused until it is made again");
                }
            }
        }
    }
}

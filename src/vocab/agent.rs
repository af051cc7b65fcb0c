//! The authenticated caller, as every stage after `identify` and every CEL rule sees it.

use serde_json::{json, Value};
use std::sync::Arc;

/// An authenticated caller: its id and the claims its credential carries (`agent` in CEL).
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: Arc<str>,
    pub claims: Value,
}

impl Agent {
    pub fn cel_value(&self) -> Value {
        json!({"id": &*self.id, "claims": self.claims})
    }
}

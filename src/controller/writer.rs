//! One reconcile pass: judge every dirty namespace, and write each object's conditions
//! through the status subresource where they differ from what it already says.
//!
//! Invariants: nothing is written unless this replica leads at the moment of the write;
//! nothing is written that the object already says ([`condition::update`]); a failed
//! write leaves its namespace dirty for the next pass.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tokio::sync::watch;

use super::condition;
use super::store::Store;
use super::verdict::judge;
use crate::control::cluster::Kind;
use crate::crd::{Condition, ObjectKey};

/// The field manager the API server records for our writes.
pub const FIELD_MANAGER: &str = "toolgate-controller";

pub struct Writer {
    client: Client,
}

/// How a pass ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Pass {
    /// Every dirty namespace is as its verdicts say.
    Done,
    /// Some writes failed; their namespaces stay dirty.
    Retry,
    /// Leadership was lost mid-pass; the next leader checks everything anyway.
    Stepped,
}

impl Writer {
    pub fn new(client: Client) -> Writer {
        Writer { client }
    }

    pub async fn pass(&self, store: &mut Store, leader: &watch::Receiver<bool>) -> Pass {
        let mut outcome = Pass::Done;
        let dirty = store.take_dirty();
        for namespace in &dirty {
            let verdicts = judge(store.namespace(namespace).map(|(k, e)| (k, &e.read)));
            let now = condition::now();
            for (key, verdict) in verdicts {
                let Some(entry) = store.get(&key) else {
                    continue;
                };
                let Some(conditions) =
                    condition::update(&verdict, entry.generation, &entry.conditions, &now)
                else {
                    continue;
                };
                if !*leader.borrow() {
                    store.mark_dirty(namespace);
                    return Pass::Stepped;
                }
                match self.write(&key, &conditions).await {
                    Ok(()) => {
                        tracing::info!(object = %key, reason = %verdict.reason, "status written");
                        store.record_status(&key, conditions);
                    }
                    // Deleted since: its Delete event is on the way.
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => {
                        tracing::warn!(object = %key, %error, "could not write status; retrying");
                        store.mark_dirty(namespace);
                        outcome = Pass::Retry;
                    }
                }
            }
        }
        outcome
    }

    /// A JSON merge patch of `status.conditions` (the list is ours, written whole).
    async fn write(&self, key: &ObjectKey, conditions: &[Condition]) -> Result<(), kube::Error> {
        let kind = if key.kind == Kind::ToolContract.name() {
            Kind::ToolContract
        } else {
            Kind::AgentPolicy
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.namespace, &kind.api_resource());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(json!({"status": {"conditions": conditions}}));
        api.patch_status(&key.name, &params, &patch).await.map(drop)
    }
}

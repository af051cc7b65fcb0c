//! The controller's mirror of both kinds, fed by the watchers' events, and the set of
//! namespaces whose verdicts may have changed. No I/O: tests feed it events.
//!
//! Invariants:
//! - nothing is judged until *both* kinds completed a first list (a policy judged before
//!   the contracts are listed would be `UnknownTool` for a moment, and say so in status);
//! - a relist replaces the kind's objects at `InitDone`, and every namespace it touched
//!   (before or after) is judged again, so an object deleted while the watch was down
//!   still changes its neighbours' verdicts;
//! - any change in a namespace makes the whole namespace dirty: one object's edit can
//!   change another's verdict (a route freed, a tool defined).

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use std::collections::{BTreeMap, BTreeSet};

use super::verdict::Read;
use crate::control::cluster::convert::{convert, key};
use crate::control::cluster::sync::{Item, Lost};
use crate::control::cluster::Kind;
use crate::crd::{Condition, ObjectKey};

/// One watched object, as far as the controller cares.
#[derive(Debug, Clone)]
pub struct Entry {
    pub read: Read,
    /// `metadata.generation`: what `observedGeneration` reports.
    pub generation: Option<i64>,
    /// The object's current `status.conditions` (unreadable ones dropped).
    pub conditions: Vec<Condition>,
}

impl Entry {
    pub fn of(kind: Kind, object: &DynamicObject) -> Entry {
        let conditions = object
            .data
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(|c| c.as_array())
            .map(|list| {
                list.iter()
                    .filter_map(|c| serde_json::from_value(c.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        Entry {
            read: convert(kind, object),
            generation: object.metadata.generation,
            conditions,
        }
    }
}

#[derive(Default)]
pub struct Store {
    entries: BTreeMap<ObjectKey, Entry>,
    /// Objects of a relist in progress, per kind.
    buffers: BTreeMap<Kind, Vec<DynamicObject>>,
    listed: BTreeSet<Kind>,
    dirty: BTreeSet<String>,
}

impl Store {
    pub fn handle(&mut self, kind: Kind, item: Item) {
        match item {
            // The watcher starts over by itself; until it relists, what we hold stands.
            Err(Lost::Expired) => {
                tracing::info!(kind = kind.name(), "watch expired (410 Gone); relisting");
            }
            Err(Lost::Failed(error)) => {
                tracing::warn!(kind = kind.name(), %error, "lost the watch; status waits for the next list");
            }
            Ok(Event::Init) => {
                self.buffers.insert(kind, Vec::new());
            }
            Ok(Event::InitApply(object)) => self.buffers.entry(kind).or_default().push(object),
            Ok(Event::InitDone) => {
                let listed = self.buffers.remove(&kind).unwrap_or_default();
                let before: Vec<ObjectKey> = self.keys_of(kind).cloned().collect();
                for key in before {
                    self.dirty.insert(key.namespace.clone());
                    self.entries.remove(&key);
                }
                for object in &listed {
                    self.insert(kind, object);
                }
                self.listed.insert(kind);
            }
            Ok(Event::Apply(object)) => self.insert(kind, &object),
            Ok(Event::Delete(object)) => {
                let key = key(kind, &object);
                self.dirty.insert(key.namespace.clone());
                self.entries.remove(&key);
            }
        }
    }

    fn insert(&mut self, kind: Kind, object: &DynamicObject) {
        let key = key(kind, object);
        self.dirty.insert(key.namespace.clone());
        self.entries.insert(key, Entry::of(kind, object));
    }

    fn keys_of(&self, kind: Kind) -> impl Iterator<Item = &ObjectKey> {
        self.entries.keys().filter(move |k| k.kind == kind.name())
    }

    /// Both kinds have been listed once.
    pub fn ready(&self) -> bool {
        Kind::ALL.iter().all(|k| self.listed.contains(k))
    }

    /// The namespaces to judge again, emptied.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.dirty)
    }

    pub fn mark_dirty(&mut self, namespace: &str) {
        self.dirty.insert(namespace.to_string());
    }

    /// Every namespace holding an object: after becoming the leader, everything is
    /// checked against what the previous leader wrote.
    pub fn mark_all_dirty(&mut self) {
        let namespaces: BTreeSet<String> =
            self.entries.keys().map(|k| k.namespace.clone()).collect();
        self.dirty.extend(namespaces);
    }

    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The objects of one namespace, in key order.
    pub fn namespace<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Entry)> {
        self.entries
            .iter()
            .filter(move |(k, _)| k.namespace == namespace)
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// What a status write returned, so a second look before the watch event arrives
    /// doesn't write the same again.
    pub fn record_status(&mut self, key: &ObjectKey, conditions: Vec<Condition>) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.conditions = conditions;
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;

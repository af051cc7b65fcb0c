//! Watch events of both kinds → [`Control`] updates, with the consistency rules of the
//! cluster source. No I/O: tests feed it events directly.
//!
//! - Nothing reaches `Control` until *both* kinds completed an initial list (`Init` …
//!   `InitDone`), so a half-listed cluster never serves; then contracts are replaced before
//!   policies, since policies name contracts' tools.
//! - A relist (after `410 Gone` or any reconnect) replaces the kind's objects atomically at
//!   `InitDone`; until then the last good snapshot keeps serving.
//! - A watcher error marks the policy unsynchronized until that kind lists again.
//! - Each object is converted on its own: one that can't be read is reported by name and
//!   dropped (a changed object that turned invalid stops applying: fail closed), the rest
//!   apply.

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::convert::{convert, key};
use super::Kind;
use crate::control::{Control, Strictness, Update};
use crate::crd::{ManifestError, Object, ObjectKey};

/// What one watcher produced: an event, or why its events stopped.
pub type Item = Result<Event<DynamicObject>, Lost>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// `410 Gone`: the resume point is older than the API server's history; the watcher
    /// relists at once.
    Expired,
    /// Anything else (API server unreachable, stream cut, server error): the watcher
    /// starts over after a backoff.
    Failed(String),
}

/// The name a lost watch is held under in `Control` (both kinds share it).
const WATCH: &str = "cluster";

type Mirror = BTreeMap<ObjectKey, Result<Object, ManifestError>>;

pub struct Sync {
    control: Arc<Control>,
    kinds: BTreeMap<Kind, KindState>,
    published: bool,
}

#[derive(Default)]
struct KindState {
    /// `InitApply` objects between `Init` and `InitDone`.
    buffer: Option<Vec<DynamicObject>>,
    /// The kind as the cluster has it, invalid objects included; `None` before its first list.
    mirror: Option<Mirror>,
    /// The watcher failed and the kind has not listed again since.
    lost: bool,
}

impl Sync {
    pub fn new(control: Arc<Control>) -> Sync {
        let kinds = Kind::ALL
            .iter()
            .map(|k| (*k, KindState::default()))
            .collect();
        Sync {
            control,
            kinds,
            published: false,
        }
    }

    pub fn handle(&mut self, kind: Kind, item: Item) {
        let state = self.kinds.entry(kind).or_default();
        match item {
            Err(lost) => {
                state.lost = true;
                state.buffer = None;
                match lost {
                    Lost::Expired => tracing::info!(
                        kind = kind.name(),
                        "policy watch expired (410 Gone); relisting"
                    ),
                    Lost::Failed(error) => {
                        tracing::warn!(kind = kind.name(), %error, "lost the policy watch; the last good snapshot keeps serving")
                    }
                }
            }
            Ok(Event::Init) => state.buffer = Some(Vec::new()),
            Ok(Event::InitApply(object)) => state.buffer.get_or_insert_with(Vec::new).push(object),
            Ok(Event::InitDone) => {
                let listed = state.buffer.take().unwrap_or_default();
                let mirror: Mirror = listed
                    .iter()
                    .map(|o| (key(kind, o), convert(kind, o)))
                    .collect();
                let was_lost = std::mem::replace(&mut state.lost, false);
                tracing::info!(
                    kind = kind.name(),
                    objects = mirror.len(),
                    "listed policy objects"
                );
                state.mirror = Some(mirror);
                if self.published {
                    self.replace(kind);
                } else if self.kinds.values().all(|s| s.mirror.is_some()) {
                    self.published = true;
                    for kind in Kind::ALL {
                        self.replace(kind);
                    }
                }
                if was_lost && !self.any_lost() {
                    tracing::info!("policy watch recovered; synchronized again");
                    self.control.mark_resumed(WATCH);
                }
            }
            Ok(Event::Apply(object)) => {
                let key = key(kind, &object);
                let converted = convert(kind, &object);
                let update = match &converted {
                    Ok(object) => Update::Apply(Box::new(object.clone())),
                    Err(_) => Update::Delete(key.clone()),
                };
                state
                    .mirror
                    .get_or_insert_with(Mirror::new)
                    .insert(key, converted);
                self.send(kind, update);
            }
            Ok(Event::Delete(object)) => {
                let key = key(kind, &object);
                if let Some(mirror) = state.mirror.as_mut() {
                    mirror.remove(&key);
                }
                self.send(kind, Update::Delete(key));
            }
        }
        self.report_sync();
    }

    fn replace(&mut self, kind: Kind) {
        let objects = self.kinds[&kind]
            .mirror
            .iter()
            .flat_map(|m| m.values())
            .filter_map(|o| o.as_ref().ok().cloned())
            .collect();
        self.send(kind, Update::Replace(objects));
    }

    /// Hands a change to `Control` once both kinds are listed; before that the mirrors
    /// collect it and the first publish includes it.
    fn send(&self, kind: Kind, update: Update) {
        if !self.published {
            return;
        }
        // Every unreadable object of both kinds, so `/config` always lists them all.
        let invalid = self
            .kinds
            .values()
            .flat_map(|s| s.mirror.iter().flat_map(|m| m.values()))
            .filter_map(|o| o.as_ref().err().cloned())
            .collect();
        self.control
            .update(kind.source(), update, invalid, Strictness::PerObject);
    }

    fn any_lost(&self) -> bool {
        self.kinds.values().any(|s| s.lost)
    }

    /// The gauge says 0 while any kind's watch is lost, whatever an update just set it to.
    fn report_sync(&self) {
        if self.any_lost() {
            self.control.mark_stalled(
                WATCH,
                "the watch of the API server was lost; the last good snapshot keeps serving until it lists again".into(),
            );
        }
    }
}

#[cfg(test)]
mod tests;

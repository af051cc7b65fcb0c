//! Turns source updates into published snapshots.
//!
//! Sources report into one [`Control`]; each update rebuilds the snapshot from the whole
//! index and swaps it in atomically (`ArcSwap`), so a request holds exactly one version
//! for its whole life. A strict source (files) keeps the last good snapshot when anything
//! fails; a lenient one (the cluster) drops only the bad objects. Nothing is published
//! until every expected source has reported once, so a half-loaded policy never serves.

use arc_swap::ArcSwapOption;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::index::Index;
use crate::crd::{ManifestError, Object, ObjectKey};
use crate::policy::reader::Slot;
use crate::policy::{BuildOptions, Snapshot, SnapshotReader};
use crate::telemetry::metrics::Metrics;

pub struct Control {
    current: Slot,
    state: Mutex<State>,
    versions: AtomicU64,
    options: BuildOptions,
    metrics: Arc<Metrics>,
    on_publish: OnceLock<PublishHook>,
}

/// Told of each snapshot just before it is published (the audit log's `policy` record),
/// so a record of the version is queued before any call can be decided by it.
pub type PublishHook = Box<dyn Fn(&Snapshot) + Send + Sync>;

struct State {
    index: Index,
    expected: BTreeSet<String>,
    /// Errors of the latest update, for `/config`.
    errors: Vec<String>,
}

/// How a source's errors are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Any error rejects the whole update (files: an edit is one change).
    AllOrNothing,
    /// Invalid objects are skipped, the rest apply (the cluster: objects are independent).
    PerObject,
}

/// A change to one source.
// Updates are transient and handled one at a time: boxing the object would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Update {
    Replace(Vec<Object>),
    Apply(Box<Object>),
    Delete(ObjectKey),
}

impl Control {
    pub fn new(expected_sources: &[&str], options: BuildOptions, metrics: Arc<Metrics>) -> Control {
        Control {
            current: Arc::new(ArcSwapOption::empty()),
            state: Mutex::new(State {
                index: Index::default(),
                expected: expected_sources.iter().map(|s| s.to_string()).collect(),
                errors: Vec::new(),
            }),
            versions: AtomicU64::new(0),
            options,
            metrics,
            on_publish: OnceLock::new(),
        }
    }

    /// Sets the hook told of every published snapshot; set before sources start (a
    /// second hook is ignored).
    pub fn on_publish(&self, hook: PublishHook) {
        let _ = self.on_publish.set(hook);
    }

    /// The snapshot published last, or `None` before the first one.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.current.load_full()
    }

    /// A read-only handle on the published snapshot, for the data plane.
    pub fn reader(&self) -> SnapshotReader {
        SnapshotReader::new(self.current.clone())
    }

    pub fn errors(&self) -> Vec<String> {
        self.lock().errors.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies a source's change; returns the errors that were found (already logged and
    /// counted). Parse errors from the source count like build errors.
    pub fn update(
        &self,
        source: &str,
        update: Update,
        parse_errors: Vec<ManifestError>,
        strictness: Strictness,
    ) -> Vec<ManifestError> {
        let mut state = self.lock();
        let mut index = state.index.clone();
        match update {
            Update::Replace(objects) => index.replace(source, objects),
            Update::Apply(object) => index.apply(source, *object),
            Update::Delete(key) => index.delete(source, &key),
        }
        let version = self.versions.load(Ordering::Relaxed) + 1;
        let (snapshot, build_errors) = Snapshot::build(&index.objects(), &self.options, version);
        let mut errors = parse_errors;
        errors.extend(build_errors);
        for e in &errors {
            tracing::error!(source, error = %e, "policy object rejected");
        }
        for grant in &snapshot.unserved {
            tracing::debug!(source, grant = %grant, "grant not applied: this pod serves no such tool");
        }
        state.errors = errors.iter().map(ToString::to_string).collect();
        if !errors.is_empty() {
            self.metrics.policy_reload_errors.inc();
        }
        if strictness == Strictness::AllOrNothing && !errors.is_empty() {
            self.metrics.policy_synchronized.set(0);
            match self.current.load().as_ref() {
                Some(serving) => tracing::warn!(
                    source,
                    version = serving.version,
                    "policy change rejected; the last good snapshot keeps serving"
                ),
                None => tracing::warn!(
                    source,
                    "policy rejected and none has loaded yet: every call is refused (NOT_READY) until a valid policy loads"
                ),
            }
            return errors;
        }
        state.index = index;
        let ready = state.expected.iter().all(|s| state.index.has_source(s));
        if ready {
            self.versions.store(version, Ordering::Relaxed);
            self.metrics.policy_version.set(version as i64);
            self.metrics.policy_synchronized.set(1);
            tracing::info!(version, digest = %snapshot.digest, objects = snapshot.object_names().len(), "policy snapshot published");
            if let Some(hook) = self.on_publish.get() {
                hook(&snapshot);
            }
            self.current.store(Some(Arc::new(snapshot)));
        }
        errors
    }

    /// A source lost contact with its origin: keep serving, say we may be stale.
    pub fn mark_unsynchronized(&self) {
        self.metrics.policy_synchronized.set(0);
    }

    pub fn mark_synchronized(&self) {
        if self.current.load().is_some() {
            self.metrics.policy_synchronized.set(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_documents;

    fn mk_objects(text: &str) -> Vec<Object> {
        parse_documents("t", text).0
    }

    const GOOD: &str = "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {name: a}\nspec: {tool: a}\n";
    const BAD: &str = "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {name: a}\nspec: {tool: a, input: {type: 3}}\n";

    #[test]
    fn strict_source_keeps_the_last_good_snapshot() {
        let metrics = Arc::new(Metrics::new());
        let control = Control::new(&["files"], BuildOptions::default(), metrics.clone());
        assert!(control.snapshot().is_none());
        control.update(
            "files",
            Update::Replace(mk_objects(GOOD)),
            vec![],
            Strictness::AllOrNothing,
        );
        let first = control.snapshot().unwrap();
        let errors = control.update(
            "files",
            Update::Replace(mk_objects(BAD)),
            vec![],
            Strictness::AllOrNothing,
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(control.snapshot().unwrap().version, first.version);
        assert_eq!(metrics.policy_synchronized.get(), 0);
        assert_eq!(metrics.policy_reload_errors.get(), 1);
    }

    #[test]
    fn nothing_is_published_until_every_source_reported() {
        let control = Control::new(
            &["files", "cluster"],
            BuildOptions::default(),
            Arc::new(Metrics::new()),
        );
        control.update(
            "files",
            Update::Replace(mk_objects(GOOD)),
            vec![],
            Strictness::AllOrNothing,
        );
        assert!(control.snapshot().is_none());
        control.update(
            "cluster",
            Update::Replace(vec![]),
            vec![],
            Strictness::PerObject,
        );
        assert!(control.snapshot().is_some());
    }

    #[test]
    fn lenient_source_drops_only_the_bad_object() {
        let control = Control::new(
            &["cluster"],
            BuildOptions::default(),
            Arc::new(Metrics::new()),
        );
        let mut objects = mk_objects(
            &BAD.replace("name: a", "name: bad")
                .replace("tool: a", "tool: b"),
        );
        objects.extend(mk_objects(GOOD));
        let errors = control.update(
            "cluster",
            Update::Replace(objects),
            vec![],
            Strictness::PerObject,
        );
        assert_eq!(errors.len(), 1);
        let s = control.snapshot().unwrap();
        assert!(s.tool("a").is_some());
        assert!(s.tool("b").is_none());
    }
}

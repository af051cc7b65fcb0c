//! Turns source updates into published snapshots.
//!
//! Sources report into one [`Control`]; each update rebuilds the snapshot from the whole
//! index and swaps it in atomically (`ArcSwap`), so a request holds exactly one version
//! for its whole life. A strict source (files) keeps the last good snapshot when anything
//! fails; a lenient one (the cluster) drops only the bad objects. Nothing is published
//! until every expected source has reported once, so a half-loaded policy never serves.
//!
//! `toolgate_policy_synchronized` is 1 only while the published snapshot is what every
//! source says: it is 0 while any source *holds* it back — a strict source's change was
//! rejected, a reload has not finished ([`Control::mark_stalled`]), a watch was lost —
//! and each hold says why in [`Control::errors`] (`/config`). Updates are serialized by
//! a lock of their own, so `/config` and the holds never wait on a snapshot build.

use arc_swap::ArcSwapOption;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::index::Index;
use crate::crd::{ManifestError, Object, ObjectKey};
use crate::policy::reader::Slot;
use crate::policy::{BuildOptions, Snapshot, SnapshotReader};
use crate::telemetry::metrics::Metrics;

pub struct Control {
    current: Slot,
    /// Held for a whole update (index → build → publish), one update at a time.
    updating: Mutex<()>,
    /// Held only to read or write the plain data below, never across a build.
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
    /// Strict sources whose latest change was rejected, with its errors: kept until the
    /// source applies a change, whatever other sources do meanwhile.
    rejected: BTreeMap<String, Vec<String>>,
    /// Sources that can't say what they hold now (a reload that has not finished, a lost
    /// watch), with why.
    stalled: BTreeMap<String, String>,
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
            updating: Mutex::new(()),
            state: Mutex::new(State {
                index: Index::default(),
                expected: expected_sources.iter().map(|s| s.to_string()).collect(),
                errors: Vec::new(),
                rejected: BTreeMap::new(),
                stalled: BTreeMap::new(),
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

    /// What `/config` shows: the latest update's errors, then what holds a source back
    /// (a rejected change's errors, a stalled reload), each once.
    pub fn errors(&self) -> Vec<String> {
        let state = self.lock();
        let mut errors = state.errors.clone();
        for error in state.rejected.values().flatten() {
            if !errors.contains(error) {
                errors.push(error.clone());
            }
        }
        errors.extend(
            state
                .stalled
                .iter()
                .map(|(source, why)| format!("{source}: {why}")),
        );
        errors
    }

    /// Whether the published snapshot is what every source says (the gauge's value).
    pub fn synchronized(&self) -> bool {
        self.synchronized_in(&self.lock())
    }

    fn synchronized_in(&self, state: &State) -> bool {
        self.current.load().is_some() && state.rejected.is_empty() && state.stalled.is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the gauge from the holds. Under the state lock, so that of two concurrent
    /// changes the later one's value is the one that stays.
    fn report(&self) {
        let state = self.lock();
        let synchronized = self.synchronized_in(&state);
        self.metrics
            .policy_synchronized
            .set(i64::from(synchronized));
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
        let _one_at_a_time = self.updating.lock().unwrap_or_else(|p| p.into_inner());
        let mut index = self.lock().index.clone();
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
        if !errors.is_empty() {
            self.metrics.policy_reload_errors.inc();
        }
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let rejected = strictness == Strictness::AllOrNothing && !errors.is_empty();
        let ready = {
            let mut state = self.lock();
            state.errors = shown.clone();
            if rejected {
                state.rejected.insert(source.to_string(), shown);
            } else {
                state.rejected.remove(source);
                state.index = index;
            }
            state.expected.iter().all(|s| state.index.has_source(s))
        };
        if rejected {
            self.report();
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
        if ready {
            self.versions.store(version, Ordering::Relaxed);
            self.metrics.policy_version.set(version as i64);
            tracing::info!(version, digest = %snapshot.digest, objects = snapshot.object_names().len(), "policy snapshot published");
            if let Some(hook) = self.on_publish.get() {
                hook(&snapshot);
            }
            self.current.store(Some(Arc::new(snapshot)));
        }
        self.report();
        errors
    }

    /// `source` can't currently say what it holds (a reload that has not finished, a
    /// lost watch): the last good snapshot keeps serving, unsynchronized, and `/config`
    /// says `why`.
    pub fn mark_stalled(&self, source: &str, why: String) {
        let mut state = self.lock();
        state.stalled.insert(source.to_string(), why);
        let synchronized = self.synchronized_in(&state);
        self.metrics
            .policy_synchronized
            .set(i64::from(synchronized));
    }

    /// `source` is back: what it holds is what its last update said.
    pub fn mark_resumed(&self, source: &str) {
        let mut state = self.lock();
        state.stalled.remove(source);
        let synchronized = self.synchronized_in(&state);
        self.metrics
            .policy_synchronized
            .set(i64::from(synchronized));
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
    #[test]
    fn a_rejected_strict_change_holds_sync_off_until_its_source_applies_one() {
        let metrics = Arc::new(Metrics::new());
        let control = Control::new(
            &["files", "cluster"],
            BuildOptions::default(),
            metrics.clone(),
        );
        let good = || Update::Replace(mk_objects(GOOD));
        control.update("files", good(), vec![], Strictness::AllOrNothing);
        control.update(
            "cluster",
            Update::Replace(vec![]),
            vec![],
            Strictness::PerObject,
        );
        assert_eq!(metrics.policy_synchronized.get(), 1);
        control.update(
            "files",
            Update::Replace(mk_objects(BAD)),
            vec![],
            Strictness::AllOrNothing,
        );
        assert_eq!(metrics.policy_synchronized.get(), 0);
        // Another source's clean update doesn't make the rejected change applied.
        control.update(
            "cluster",
            Update::Replace(vec![]),
            vec![],
            Strictness::PerObject,
        );
        assert_eq!(metrics.policy_synchronized.get(), 0);
        assert!(!control.synchronized());
        assert_eq!(control.errors().len(), 1, "{:?}", control.errors());
        control.update("files", good(), vec![], Strictness::AllOrNothing);
        assert_eq!(metrics.policy_synchronized.get(), 1);
        assert!(control.errors().is_empty());
    }

    #[test]
    fn a_stalled_source_holds_sync_off_and_says_why() {
        let metrics = Arc::new(Metrics::new());
        let control = Control::new(&["files"], BuildOptions::default(), metrics.clone());
        control.update(
            "files",
            Update::Replace(mk_objects(GOOD)),
            vec![],
            Strictness::AllOrNothing,
        );
        control.mark_stalled("files", "the reload has not finished".into());
        assert_eq!(metrics.policy_synchronized.get(), 0);
        assert_eq!(control.errors(), ["files: the reload has not finished"]);
        // An update while stalled publishes but stays unsynchronized.
        control.update(
            "files",
            Update::Replace(mk_objects(GOOD)),
            vec![],
            Strictness::AllOrNothing,
        );
        assert_eq!(metrics.policy_synchronized.get(), 0);
        control.mark_resumed("files");
        assert_eq!(metrics.policy_synchronized.get(), 1);
        assert!(control.errors().is_empty());
    }
}

//! The data plane's view of the published policy: a cheap handle that loads the current
//! snapshot and can do nothing else. The control plane (`control::Control`) owns the
//! publishing side; the proxy holds only this reader.

use arc_swap::ArcSwapOption;
use std::sync::Arc;

use super::Snapshot;

/// Where the current snapshot is published; shared by the publisher and its readers.
pub(crate) type Slot = Arc<ArcSwapOption<Snapshot>>;

#[derive(Clone)]
pub struct SnapshotReader {
    slot: Slot,
}

impl SnapshotReader {
    pub(crate) fn new(slot: Slot) -> SnapshotReader {
        SnapshotReader { slot }
    }

    /// The snapshot to serve this request, or `None` before the first one (`NOT_READY`).
    /// A request loads it once and uses that version throughout.
    pub fn load(&self) -> Option<Arc<Snapshot>> {
        self.slot.load_full()
    }
}

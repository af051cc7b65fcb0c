//! One kind's kube-rs watcher, restarted with backoff whenever it fails.
//!
//! Within one watcher, kube-rs resumes a closed watch from the last resourceVersion (or
//! bookmark) and relists on `410 Gone`. Any *error* ends that watcher: after a backoff
//! (kube's `DefaultBackoff`: 0.8 s doubling to 30 s, with jitter) a fresh one lists from
//! scratch. The fresh list is what proves the source is back in sync — a resumed watch
//! says nothing until an object changes — and it repairs anything missed meanwhile.

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, DefaultBackoff};
use std::time::Duration;
use tokio::sync::mpsc;

use super::sync::Item;
use super::Kind;

pub async fn watch(kind: Kind, api: Api<DynamicObject>, events: mpsc::Sender<(Kind, Item)>) {
    let mut backoff = DefaultBackoff::default();
    loop {
        let mut stream = Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if events
                .send((kind, item.map_err(|e| e.to_string())))
                .await
                .is_err()
            {
                return; // The sidecar is stopping.
            }
            if failed {
                break;
            }
        }
        let delay = backoff.next().unwrap_or(Duration::from_secs(30));
        tracing::debug!(kind = kind.name(), ?delay, "restarting the policy watch");
        tokio::time::sleep(delay).await;
    }
}

//! One kind's kube-rs watcher, restarted with backoff whenever it fails.
//!
//! Within one watcher, kube-rs resumes a closed watch from the last resourceVersion (or
//! bookmark) and relists at once on `410 Gone`. Any other error ends that watcher: after a
//! backoff (kube's `DefaultBackoff`: 0.8 s doubling to 30 s, with jitter) a fresh one
//! lists from scratch. The fresh list is what proves the source is back in sync — a
//! resumed watch says nothing until an object changes — and it repairs anything missed.

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, DefaultBackoff};
use std::time::Duration;
use tokio::sync::mpsc;

use super::sync::{Item, Lost};
use super::Kind;

pub async fn watch(kind: Kind, api: Api<DynamicObject>, events: mpsc::Sender<(Kind, Item)>) {
    let mut backoff = DefaultBackoff::default();
    loop {
        let mut stream = Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
        while let Some(item) = stream.next().await {
            let item = item.map_err(interruption);
            let failed = matches!(item, Err(Lost::Failed(_)));
            if events.send((kind, item)).await.is_err() {
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

/// Names an error and, where the user can fix it, says how.
fn interruption(error: watcher::Error) -> Lost {
    let refused = match &error {
        watcher::Error::WatchError(status) if status.code == 410 => return Lost::Expired,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    };
    let hint = match refused {
        Some(404) => " (are the CRDs installed? `toolgate crds | kubectl apply -f -`)",
        Some(401 | 403) => " (bind the Role of deploy/rbac.yaml to the pod's ServiceAccount)",
        _ => "",
    };
    Lost::Failed(format!("{error}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn mk_list_error(code: u16) -> watcher::Error {
        let status = Status::failure("refused", "Refused").with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
    }

    #[test]
    fn errors_a_user_can_fix_say_how() {
        let Lost::Failed(text) = interruption(mk_list_error(404)) else {
            panic!("404 is a failure");
        };
        assert!(text.contains("toolgate crds"), "{text}");
        let Lost::Failed(text) = interruption(mk_list_error(403)) else {
            panic!("403 is a failure");
        };
        assert!(text.contains("deploy/rbac.yaml"), "{text}");
        let gone = Status::failure("too old", "Expired").with_code(410).boxed();
        assert_eq!(
            interruption(watcher::Error::WatchError(gone)),
            Lost::Expired
        );
    }
}

//! `toolgate controller`: status on the objects. It watches every `ToolContract` and
//! `AgentPolicy` (of `kubernetes.namespace`, or of all namespaces), compiles each
//! namespace as `toolgate check --strict` compiles a folder, and writes an `Accepted`
//! condition on every object through the status subresource. Several replicas run (the
//! injector's Deployment); a Lease makes one of them the writer.
//!
//! Layout — pure parts first, tested without a cluster:
//! - [`verdict`] judges a namespace's objects ([`reason`] names the outcome);
//! - [`condition`] turns a verdict and the current status into conditions, or nothing;
//! - [`store`] mirrors the watched objects and tracks which namespaces to judge again;
//! - [`election`] decides one leader-election round;
//!
//! and the glue: [`lease`] runs the election against the API server, [`writer`] writes
//! status, [`health`] answers probes, and [`Controller`] wires them together.
//!
//! Invariants: only the leader writes, and only what changes an object's status (so
//! its own writes, which come back as watch events, cause no further writes); nothing
//! is judged until both kinds are listed.

pub mod condition;
pub mod election;
pub mod health;
pub mod lease;
pub mod reason;
pub mod settings;
pub mod store;
pub mod verdict;
pub mod writer;

use anyhow::Context as _;
use kube::api::{Api, DynamicObject};
use kube::Client;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::control::cluster::sync::Item;
use crate::control::cluster::{watch as watcher, Kind};
use crate::proxy::server::{serve, ConnLimits};
use health::Health;
use lease::Elector;
use settings::{ControllerSettings, Scope};
use store::Store;
use writer::{Pass, Writer};

/// How long shutdown waits for a status write in flight before dropping it.
const WRITE_GRACE: Duration = Duration::from_secs(2);
/// Bounds of the wait before writes that failed are tried again.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

pub struct Controller {
    /// Where `/healthz` and `/readyz` listen.
    pub addr: SocketAddr,
    health: Arc<Health>,
    stop_writing: watch::Sender<bool>,
    stop_electing: watch::Sender<bool>,
    stop_serving: watch::Sender<bool>,
    writer: Option<JoinHandle<()>>,
    elector: Option<JoinHandle<()>>,
    others: Vec<JoinHandle<()>>,
}

impl Controller {
    /// Connects, binds the health listener, and starts watching and electing.
    pub async fn start(settings: ControllerSettings) -> anyhow::Result<Controller> {
        let client = connect(&settings.kubernetes).await?;
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let addr = listener.local_addr()?;
        let health = Arc::new(Health::default());
        let (stop_serving, serving) = watch::channel(false);
        let mut others = vec![tokio::spawn(probes(listener, health.clone(), serving))];
        let (events, received) = mpsc::channel(256);
        let namespace = settings.kubernetes.namespace.clone();
        others.extend(watch_both(&client, &namespace, &events));

        let election = settings.leader_election.clone();
        let lease_namespace = match election.namespace.as_str() {
            "" => client.default_namespace().to_string(),
            set => set.to_string(),
        };
        let (leader, leading) = watch::channel(false);
        let (stop_electing, electing) = watch::channel(false);
        let elector = Elector::new(
            Api::namespaced(client.clone(), &lease_namespace),
            election.clone(),
        );
        let elector = tokio::spawn(elector.run(leader, electing));

        let (stop_writing, writing) = watch::channel(false);
        let looped = Loop {
            store: Store::default(),
            writer: Writer::new(client),
            health: health.clone(),
        };
        let writer = tokio::spawn(looped.run(received, leading, writing));
        let scope = if namespace.is_empty() {
            "all namespaces"
        } else {
            namespace.as_str()
        };
        tracing::info!(%addr, scope, lease = %format!("{lease_namespace}/{}", election.lease_name), identity = %election.identity, "toolgate controller started");
        Ok(Controller {
            addr,
            health,
            stop_writing,
            stop_electing,
            stop_serving,
            writer: Some(writer),
            elector: Some(elector),
            others,
        })
    }

    /// Whether this replica currently writes status.
    pub fn is_leader(&self) -> bool {
        self.health.leader.load(Ordering::Relaxed)
    }

    /// Stops writing, then releases the Lease (so a standby takes over at once), then
    /// stops watching and serving probes.
    pub async fn shutdown(mut self) {
        let _ = self.stop_writing.send(true);
        if let Some(mut writer) = self.writer.take() {
            if tokio::time::timeout(WRITE_GRACE, &mut writer)
                .await
                .is_err()
            {
                writer.abort();
            }
        }
        let _ = self.stop_electing.send(true);
        if let Some(elector) = self.elector.take() {
            let _ = elector.await;
        }
        let _ = self.stop_serving.send(true);
        for task in self.others.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Controller {
    /// Dropped without [`Controller::shutdown`] (a crash, in tests): everything stops at
    /// once and the Lease is left to lapse.
    fn drop(&mut self) {
        let tasks = self.writer.iter().chain(&self.elector).chain(&self.others);
        for task in tasks {
            task.abort();
        }
    }
}

/// The reconcile loop's state: the mirror, the writer, and what the probes report.
struct Loop {
    store: Store,
    writer: Writer,
    health: Arc<Health>,
}

impl Loop {
    async fn run(
        mut self,
        mut events: mpsc::Receiver<(Kind, Item)>,
        mut leader: watch::Receiver<bool>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut backoff = RETRY_FIRST;
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                item = events.recv() => {
                    let Some((kind, item)) = item else { return };
                    self.store.handle(kind, item);
                    // Take every queued event before judging: one pass per burst.
                    while let Ok((kind, item)) = events.try_recv() {
                        self.store.handle(kind, item);
                    }
                }
                changed = leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let leading = *leader.borrow_and_update();
                    self.health.leader.store(leading, Ordering::Relaxed);
                    if leading {
                        // Whatever the previous leader wrote (or didn't) is checked.
                        self.store.mark_all_dirty();
                        retry_at = None;
                    }
                }
                () = sleep_until(retry_at) => retry_at = None,
                _ = stop.wait_for(|stop| *stop) => return,
            }
            self.health
                .listed
                .store(self.store.ready(), Ordering::Relaxed);
            let due = retry_at.is_none() && self.store.ready() && self.store.has_dirty();
            if !(due && *leader.borrow()) {
                continue;
            }
            match self.writer.pass(&mut self.store, &leader).await {
                Pass::Retry => {
                    retry_at = Some(tokio::time::Instant::now() + backoff);
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
                Pass::Done | Pass::Stepped => backoff = RETRY_FIRST,
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Serves `/healthz` and `/readyz` until `stop` turns true.
async fn probes(listener: TcpListener, health: Arc<Health>, mut stop: watch::Receiver<bool>) {
    let handler = move |request| health::handle(request, health.clone());
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    serve(
        listener,
        ConnLimits::admin(std::time::Duration::from_millis(
            crate::config::Limits::default().write_timeout_ms,
        )),
        None,
        handler,
        stopped,
    )
    .await;
}

/// One watcher per kind, over `namespace` or (empty) all namespaces.
fn watch_both(
    client: &Client,
    namespace: &str,
    events: &mpsc::Sender<(Kind, Item)>,
) -> Vec<JoinHandle<()>> {
    Kind::ALL
        .into_iter()
        .map(|kind| {
            let resource = kind.api_resource();
            let api: Api<DynamicObject> = if namespace.is_empty() {
                Api::all_with(client.clone(), &resource)
            } else {
                Api::namespaced_with(client.clone(), namespace, &resource)
            };
            tokio::spawn(watcher::watch(kind, api, events.clone()))
        })
        .collect()
}

/// In a pod: the service account (`Config::infer`); outside: `kubernetes.kubeconfig`
/// when set, else `KUBECONFIG` or `~/.kube/config`.
async fn connect(scope: &Scope) -> anyhow::Result<Client> {
    crate::input::kube_client::client(scope.kubeconfig.as_deref(), "kubernetes.kubeconfig").await
}

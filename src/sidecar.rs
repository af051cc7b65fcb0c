//! Assembles a running sidecar from settings: control plane sources, the gate, the agent
//! and admin listeners. `toolgate run`, `toolgate demo` and the integration tests all
//! start the sidecar through [`Sidecar::start`].

use anyhow::Context as _;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::Admin;
use crate::approvals::service::Approvals;
use crate::audit::AuditLog;
use crate::config::{Settings, StateBackend};
use crate::control::cluster::{self, Cluster};
use crate::control::{files, Control};
use crate::identity::jwks::Issuer;
use crate::identity::jwt::AgentJwt;
use crate::identity::kubernetes::Workload;
use crate::identity::namespace::Namespaces;
use crate::identity::remote::Fetcher;
use crate::identity::task::TaskTokens;
use crate::identity::Tokens;
use crate::limits::{Capacity, Clock, Ledger};
use crate::policy::BuildOptions;
use crate::proxy::anonymous::Anonymous;
use crate::proxy::backend::upstream::Upstream;
use crate::proxy::mcp::oauth::ResourceServer;
use crate::proxy::mcp::origin::Guard;
use crate::proxy::mcp::tools_list::tool_drift::ToolDrift;
use crate::proxy::server::{serve, Closes, ConnLimits};
use crate::proxy::stage::identify::Identity;
use crate::proxy::{pipeline, Gate};
use crate::state::Shared;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::spans::Tracing;
use crate::tls::TlsConfig;

/// How long startup waits for the audit sink to take the `start` record.
const START_RECORD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long startup waits for fetched keys (JWKS URLs, discovery, the API server): the
/// first calls then find them, and a provider that is down delays the start this long
/// at most (its issuer's tokens are refused until its keys arrive).
const FIRST_KEYS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Sidecar {
    pub agent_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub gate: Arc<Gate>,
    /// The control plane publishing the gate's snapshots.
    pub control: Arc<Control>,
    stop: watch::Sender<bool>,
    drain_timeout: std::time::Duration,
    listeners: Vec<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
}

impl Sidecar {
    pub async fn start(settings: Settings) -> anyhow::Result<Sidecar> {
        Sidecar::start_with_clock(settings, Clock::real()).await
    }

    /// [`Sidecar::start`] with the clock rate limits and dedupe windows run on; tests pass
    /// a fake one to move time instead of sleeping.
    pub async fn start_with_clock(settings: Settings, clock: Clock) -> anyhow::Result<Sidecar> {
        let metrics = Arc::new(Metrics::new());
        let mut sources = Vec::new();
        if !settings.policies.files.is_empty() {
            sources.push(files::SOURCE);
        }
        // --- kube (issue 6): the cluster source, one index source per watched kind ---
        let cluster = if settings.policies.kubernetes.enabled {
            Some(Cluster::connect(&settings.policies.kubernetes).await?)
        } else {
            None
        };
        if cluster.is_some() {
            sources.extend(cluster::Kind::ALL.map(cluster::Kind::source));
        }
        // --- end kube ---
        anyhow::ensure!(
            !sources.is_empty(),
            "no policy source: set policies.files (or enable policies.kubernetes)"
        );
        let options = BuildOptions {
            allow_shadow: settings.policies.allow_shadow,
            pod_labels: cluster.as_ref().map(|c| c.pod_labels.clone()),
        };
        let control = Arc::new(Control::new(&sources, options, metrics.clone()));
        // The audit log starts before any policy source, so its `start` record comes
        // first and every published version gets its `policy` record.
        let audit = AuditLog::start(&settings.audit, settings_digest(&settings), metrics.clone())
            .context("audit.keyFile")?;
        let policy_log = audit.clone();
        control.on_publish(Box::new(move |snapshot| {
            policy_log.record_policy(snapshot.version, &snapshot.digest)
        }));
        // Calls wait for nothing: this only lets a healthy sink take its `start` record
        // before the first call, so a fresh sidecar doesn't refuse calls for a moment.
        let _ = tokio::time::timeout(START_RECORD_WAIT, audit.flush()).await;
        let mut background = Vec::new();
        if !settings.policies.files.is_empty() {
            background.push(tokio::spawn(files::watch(
                settings.policies.files.clone(),
                control.clone(),
                settings.limits.max_policy_file_bytes,
            )));
        }
        if let Some(cluster) = cluster {
            background.push(tokio::spawn(cluster.run(control.clone())));
        }
        let identity = load_identity(&settings, &metrics, &mut background).await?;
        let tls = match &settings.tls {
            Some(tls) => {
                let tls = Arc::new(
                    TlsConfig::load(tls)
                        .map_err(anyhow::Error::msg)
                        .context("tls")?,
                );
                background.push(tokio::spawn(tls.clone().watch()));
                Some(tls)
            }
            None => None,
        };
        let upstream = Upstream::new(&settings.upstream).context("upstream")?;
        metrics
            .conventions
            .set_backend(upstream.host(), upstream.port());
        let shared = match settings.state.backend {
            StateBackend::Memory => None,
            StateBackend::Redis => Some(
                Shared::start(&settings.state.redis, metrics.clone())
                    .map(Arc::new)
                    .context("state.redis")?,
            ),
        };
        let approvals = Arc::new(
            Approvals::new(
                &settings.approvals,
                shared.clone(),
                crate::approvals::approvers::Agents {
                    tokens: identity.tokens.clone(),
                    audiences: (settings.identity.jwt.iter())
                        .map(|j| (j.issuer.clone(), j.audience.clone()))
                        .collect(),
                },
                audit.clone(),
                metrics.clone(),
            )
            .context("approvals")?,
        );
        let anonymous = Arc::new(Anonymous::new(
            settings.limits.unauthenticated_per_second,
            clock.clone(),
            audit.clone(),
        ));
        background.push(tokio::spawn(anonymous.clone().run()));
        background.push(tokio::spawn(crate::approvals::backlog::watch(
            approvals.clone(),
            metrics.clone(),
        )));
        let gate = Arc::new(Gate {
            snapshots: control.reader(),
            identity,
            upstream,
            audit,
            metrics: metrics.clone(),
            tracing: Tracing::start(&settings.telemetry, metrics.clone())
                .map_err(anyhow::Error::msg)
                .context("telemetry")?,
            limits: settings.limits.clone(),
            mcp_path: settings.mcp.path.clone(),
            mcp_origins: Guard::new(&settings.mcp.allowed_origins, &settings.mcp.allowed_hosts)
                .map_err(anyhow::Error::msg)
                .context("mcp")?,
            ledger: Ledger::new(Capacity::from_settings(&settings.limits), clock.clone()),
            shared,
            approvals,
            mcp_sessions: Default::default(),
            mcp_pending: Default::default(),
            stragglers: Default::default(),
            anonymous,
            tool_drift: Arc::new(ToolDrift::new(&settings.mcp, metrics.tool_drift.clone())),
        });

        let agent_listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let admin_listener = TcpListener::bind(settings.admin)
            .await
            .with_context(|| format!("cannot listen on {} (admin)", settings.admin))?;
        let agent_addr = agent_listener.local_addr()?;
        let admin_addr = admin_listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let until_stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let agent_gate = gate.clone();
        let closes = Closes::into_family(metrics.connections_closed.clone());
        let agent_limits = ConnLimits {
            tag_connections: settings.telemetry.otlp_endpoint.is_some(),
            closes: closes.clone(),
            ..ConnLimits::from_settings(&settings.limits)
        };
        let admin_limits = ConnLimits {
            closes,
            ..ConnLimits::admin(agent_limits.write_timeout)
        };
        let agent = tokio::spawn(serve(
            agent_listener,
            agent_limits,
            tls,
            move |request| pipeline::serve(agent_gate.clone(), request),
            until_stopped(stopped.clone()),
        ));
        let admin = Arc::new(Admin {
            control: control.clone(),
            metrics,
            audit: gate.audit.clone(),
            state: gate.shared.clone(),
            approvals: gate.approvals.clone(),
            tool_drift: gate.tool_drift.clone(),
            tokens: gate.identity.tokens.clone(),
        });
        let admin = tokio::spawn(serve(
            admin_listener,
            admin_limits,
            None,
            move |request| {
                let admin = admin.clone();
                async move { admin.handle(request).await }
            },
            until_stopped(stopped),
        ));
        tracing::info!(%agent_addr, %admin_addr, upstream = %crate::input::url::shown(&settings.upstream), audit = %gate.audit.target(), "toolgate listening");
        Ok(Sidecar {
            agent_addr,
            admin_addr,
            gate,
            control,
            stop,
            drain_timeout: std::time::Duration::from_millis(settings.limits.drain_timeout_ms),
            listeners: vec![agent, admin],
            background,
        })
    }

    /// Stops accepting, lets in-flight calls finish (bounded by `limits.drainTimeoutMs`),
    /// then flushes the audit log.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for listener in self.listeners {
            let _ = listener.await;
        }
        // Calls whose agent left still run; the backend may have them. They get the
        // drain timeout again (the listeners' drain may have used it up on others).
        let stragglers = &self.gate.stragglers;
        if stragglers.running() > 0 {
            tracing::info!(
                calls = stragglers.running(),
                "waiting for calls whose agent left"
            );
            if tokio::time::timeout(self.drain_timeout, stragglers.wait())
                .await
                .is_err()
            {
                tracing::warn!(calls = stragglers.running(), "drain timeout passed with calls whose agent left still running; they are not recorded");
            }
        }
        for task in self.background {
            task.abort();
        }
        // The last second's suppressed answers, counted but not yet recorded.
        self.gate.anonymous.flush().await;
        self.gate.audit.flush().await;
        let audit = self.gate.audit.status();
        tracing::info!(
            last_seq = audit.last_seq,
            "audit log flushed (verify with `toolgate audit verify --expect-seq`)"
        );
        self.gate.tracing.shutdown().await;
        tracing::info!("toolgate stopped");
    }
}

/// `sha256:` over the settings as loaded, for the audit log's `start` record: which
/// configuration decided the calls that follow. Settings hold paths, never secrets.
fn settings_digest(settings: &Settings) -> String {
    use sha2::{Digest, Sha256};
    let mut value = serde_json::to_value(settings).unwrap_or_default();
    without_url_secrets(&mut value);
    let json = serde_json::to_vec(&value).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(json)))
}

/// Settings hold paths, never secrets, except where a URL carries one (a Redis password
/// in `state.redis.url`, a token in `approvals.notifyUrl`'s query): the digest is taken
/// of those URLs as logs show them, so it can't be used to test guesses of the secret.
fn without_url_secrets(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) if text.contains("://") => {
            *text = crate::vocab::shown_url::scrub_urls(text);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(without_url_secrets),
        serde_json::Value::Object(map) => map.values_mut().for_each(without_url_secrets),
        _ => {}
    }
}

/// Static tokens, agent JWT issuers, workload identity and task issuers, each watched or
/// refreshed; the OAuth resource server and the agent id namespaces, fixed at start.
async fn load_identity(
    settings: &Settings,
    metrics: &Metrics,
    background: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<Identity> {
    // Settings built in code (not parsed) are held to the same rules: each issuer's keys
    // come from one place, and no issuer may assert another source's agents.
    crate::config::jwks::check(settings, "settings")?;
    crate::config::sources::check(settings, "settings")?;
    warn_bare_first_issuer(settings);
    let fetcher = Fetcher::new(metrics.jwks_refreshes.clone());
    let mut identity = Identity {
        oauth: settings.identity.oauth.as_ref().map(ResourceServer::new),
        namespaces: Namespaces::new(crate::config::sources::reserved_prefixes(settings)),
        ..Identity::default()
    };
    if let Some(path) = &settings.identity.tokens {
        let tokens = Arc::new(
            Tokens::load(path)
                .map_err(anyhow::Error::msg)
                .context("identity.tokens")?,
        );
        background.push(tokio::spawn(tokens.clone().watch(path.clone())));
        warn_reserved_token_ids(&tokens, &identity.namespaces);
        identity.tokens = Some(tokens);
    }
    let mut issuers: Vec<Arc<Issuer>> = Vec::new();
    if !settings.identity.jwt.is_empty() {
        let jwt = AgentJwt::load(&settings.identity.jwt, &fetcher)
            .map_err(anyhow::Error::msg)
            .context("identity.jwt")?;
        issuers.extend(jwt.issuers().cloned());
        identity.jwt = Some(jwt);
    }
    if settings.identity.kubernetes.enabled {
        let workload = Workload::connect(&settings.identity.kubernetes, &fetcher)
            .await
            .context("identity.kubernetes")?;
        issuers.push(workload.issuer().clone());
        identity.workload = Some(workload);
    }
    if !settings.identity.task_issuers.is_empty() {
        let tasks = TaskTokens::load(&settings.identity.task_issuers, &fetcher)
            .map_err(anyhow::Error::msg)
            .context("identity.taskIssuers")?;
        issuers.extend(tasks.issuers().cloned());
        identity.tasks = Some(tasks);
    }
    for issuer in &issuers {
        background.push(tokio::spawn(issuer.clone().watch()));
    }
    first_keys(&issuers).await;
    Ok(identity)
}

/// Waits (together, at most [`FIRST_KEYS_WAIT`]) for every fetched key set's first
/// answer, and says which issuers start without keys.
async fn first_keys(issuers: &[Arc<Issuer>]) {
    let waits = issuers
        .iter()
        .filter(|i| i.is_fetched())
        .map(|issuer| async move { (issuer, issuer.first_fetch(FIRST_KEYS_WAIT).await) });
    for (issuer, loaded) in futures_util::future::join_all(waits).await {
        if !loaded {
            tracing::warn!(issuer = %issuer.issuer, "starting without this issuer's keys: its tokens are refused until a fetch succeeds (see toolgate_jwks_refresh_total)");
        }
    }
}

/// The first JWT issuer may keep bare ids beside the token file or client certificates;
/// say at start that a prefix would keep it apart from them.
/// A token-file id under another source's prefix (`agentPrefix: ops` and `ops-bot`, or
/// a `system:serviceaccount:` id) is that source's, never the token file's: its token is
/// refused. Said at start, so the operator learns it before an agent does.
fn warn_reserved_token_ids(tokens: &Tokens, namespaces: &Namespaces) {
    for id in tokens.agents() {
        if let Err(reason) = namespaces.admit(&id, false) {
            tracing::warn!(agent = %id.escape_debug(), %reason, "identity.tokens names an agent id it can't have: its token is refused; rename the agent or the prefix");
        }
    }
}

fn warn_bare_first_issuer(settings: &Settings) {
    let other_sources = settings.identity.tokens.is_some()
        || settings.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    if let Some(first) = settings
        .identity
        .jwt
        .first()
        .filter(|j| other_sources && j.agent_prefix.is_none())
    {
        tracing::warn!(issuer = %first.issuer, "identity.jwt[0] has no agentPrefix beside the token file or client certificates: it can't name a token-file agent, but could name a client certificate's id; set agentPrefix to keep the sources apart");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_digest_does_not_depend_on_a_url_secret() {
        let mut settings = Settings::default();
        settings.state.redis.url = "redis://:hunter1@redis:6379/0".into();
        let one = settings_digest(&settings);
        settings.state.redis.url = "redis://:hunter2@redis:6379/0".into();
        assert_eq!(settings_digest(&settings), one);
        settings.state.redis.url = "redis://:hunter2@redis-2:6379/0".into();
        assert_ne!(settings_digest(&settings), one);
    }
}

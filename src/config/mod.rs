//! The sidecar's settings (`toolgate.yaml`; README "Running the sidecar").
//!
//! camelCase keys, unknown keys rejected with their path, and every key overridable by a
//! `TOOLGATE_*` variable (see [`env`]). Settings are read once at start; policies, tokens
//! and certificates are the parts that reload.

pub mod env;
pub mod file;
pub mod jwks;
pub mod paths;
pub mod sources;

pub use jwks::{Jwks, KeySource};

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub upstream: String,
    pub mcp: Mcp,
    pub policies: Policies,
    pub identity: Identity,
    pub tls: Option<Tls>,
    pub telemetry: Telemetry,
    pub audit: Audit,
    pub limits: Limits,
    pub state: State,
    pub approvals: Approvals,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: SocketAddr::from(([0, 0, 0, 0], 15100)),
            admin: SocketAddr::from(([0, 0, 0, 0], 15101)),
            upstream: "http://127.0.0.1:8080".into(),
            mcp: Mcp::default(),
            policies: Policies::default(),
            identity: Identity::default(),
            tls: None,
            telemetry: Telemetry::default(),
            audit: Audit::default(),
            limits: Limits::default(),
            state: State::default(),
            approvals: Approvals::default(),
        }
    }
}

/// Human approval (`approvals`; docs/approvals.md): who may decide, whom to tell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Approvals {
    pub approvers: Approvers,
    /// Each new pending approval is POSTed here as JSON (best effort).
    pub notify_url: Option<String>,
    /// The most approvals kept at once (each pod's with `state.backend: memory`, the
    /// Deployment's with `redis`).
    pub max_pending: u64,
    /// The most bytes of arguments (as stored: JSON, redacted) the kept approvals may
    /// hold together; past it, or past `maxPending`, a new approval is refused.
    pub max_pending_bytes: u64,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            approvers: Approvers::default(),
            notify_url: None,
            max_pending: 10_000,
            max_pending_bytes: 64 << 20,
        }
    }
}

/// Approver credentials: never an agent's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Approvers {
    /// A YAML map of approver name → `{sha256: <hex of their token>, groups: [...]}`.
    pub tokens: Option<PathBuf>,
    pub jwt: Vec<ApproverJwt>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApproverJwt {
    pub issuer: String,
    pub audience: String,
    /// A JWKS file or URL (`config::jwks`); or `discovery: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks: Option<Jwks>,
    /// Read `jwks_uri` from `<issuer>/.well-known/openid-configuration` instead.
    #[serde(default, skip_serializing_if = "is_false")]
    pub discovery: bool,
    /// The claim naming the approver.
    #[serde(default = "sub")]
    pub name_claim: String,
    /// The claim listing the approver's groups.
    #[serde(default = "groups")]
    pub groups_claim: String,
}

fn groups() -> String {
    "groups".into()
}

/// Where state that must hold across calls lives (`state`; docs/state.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct State {
    pub backend: StateBackend,
    pub redis: Redis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    /// In the sidecar's own memory: every limit holds per pod.
    #[default]
    Memory,
    /// In Redis (standalone, Redis Cluster or Valkey): limits hold across replicas.
    Redis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Redis {
    /// `redis://[user:password@]host:port/db`, or `rediss://` for TLS.
    pub url: String,
    /// A file holding the password (a mounted Secret); wins over one in the URL.
    pub password_file: Option<PathBuf>,
    /// Redis Cluster: `url` is one seed node; every call's keys share a hash tag.
    pub cluster: bool,
    pub key_prefix: String,
    /// How long one round trip may take before the state counts as unavailable.
    pub timeout_ms: u64,
}

impl Default for Redis {
    fn default() -> Self {
        Redis {
            url: "redis://127.0.0.1:6379/0".into(),
            password_file: None,
            cluster: false,
            key_prefix: "toolgate:".into(),
            timeout_ms: 50,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Mcp {
    pub path: String,
    /// Origins a browser-borne request may come from (DNS-rebinding protection); a
    /// request without `Origin` is unaffected. `scheme://host[:port]`, `*` for any port.
    pub allowed_origins: Vec<String>,
    /// When set, the only `Host` values accepted (`host[:port]`); empty: any.
    pub allowed_hosts: Vec<String>,
    /// What `tools/list` shows of a granted tool: its contract's description and schemas
    /// (the default), or the backend's own.
    pub listing: Listing,
    /// What happens to a tool whose backend listing drifted from its contract.
    pub on_drift: OnDrift,
}

/// `mcp.listing`: whose description and input schema a listed tool carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Listing {
    /// The contract's, so what the model reads is what was reviewed.
    #[default]
    Contract,
    /// The backend's own, as it listed them.
    Backend,
}

/// `mcp.onDrift`: a tool whose backend listing differs from its contract (description or
/// input schema) is reported either way; `hide` also withholds it, and refuses its calls,
/// until the contract and the listing agree again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDrift {
    /// Keep listing the tool (as `mcp.listing` says).
    #[default]
    List,
    Hide,
}

/// `mcp.allowedOrigins` when unset: local pages only.
pub fn default_allowed_origins() -> Vec<String> {
    ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
        .map(String::from)
        .to_vec()
}

impl Default for Mcp {
    fn default() -> Self {
        Mcp {
            path: "/mcp".into(),
            allowed_origins: default_allowed_origins(),
            allowed_hosts: Vec::new(),
            listing: Listing::default(),
            on_drift: OnDrift::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Policies {
    /// Files or folders of manifests, watched for changes.
    pub files: Vec<PathBuf>,
    /// A policy's `mode: shadow` is honoured only when this is true.
    pub allow_shadow: bool,
    pub kubernetes: Kubernetes,
}

impl Default for Policies {
    fn default() -> Self {
        Policies {
            files: vec![PathBuf::from("/etc/toolgate/policies")],
            allow_shadow: false,
            kubernetes: Kubernetes::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Kubernetes {
    pub enabled: bool,
    pub namespace: String,
    pub pod_labels_file: PathBuf,
    /// A kubeconfig to reach the API server with; unset: the pod's service account.
    pub kubeconfig: Option<PathBuf>,
}

impl Default for Kubernetes {
    fn default() -> Self {
        Kubernetes {
            enabled: false,
            namespace: "default".into(),
            pod_labels_file: PathBuf::from("/etc/podinfo/labels"),
            kubeconfig: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Identity {
    /// A YAML map of agent id → hex SHA-256 of its bearer token.
    pub tokens: Option<PathBuf>,
    pub jwt: Vec<JwtIssuer>,
    pub task_issuers: Vec<TaskIssuer>,
    /// The MCP endpoint as an OAuth 2.1 resource server (RFC 9728 metadata, bearer
    /// challenges, scopes); its tokens come from the `jwt` issuers.
    pub oauth: Option<OAuth>,
    /// Workload identity: projected ServiceAccount tokens, verified with the cluster's
    /// service-account issuer keys.
    pub kubernetes: KubernetesIdentity,
}

/// `identity.kubernetes` (DESIGN §15): an agent in the cluster sends a projected
/// ServiceAccount token for one of `audiences`; its agent id is
/// `system:serviceaccount:<namespace>:<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubernetesIdentity {
    pub enabled: bool,
    /// A token is accepted only if its `aud` holds one of these: never the API server's
    /// own audience, so the pod's API token is not an agent credential.
    pub audiences: Vec<String>,
    /// A kubeconfig to reach the API server with outside a cluster; unset: the pod's
    /// service account (in a cluster) or the usual kubeconfig lookup.
    pub kubeconfig: Option<PathBuf>,
}

impl Default for KubernetesIdentity {
    fn default() -> Self {
        KubernetesIdentity {
            enabled: false,
            audiences: vec!["toolgate".into()],
            kubeconfig: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuth {
    /// The MCP endpoint's canonical URI (RFC 8707), e.g. `https://orders.example.com/mcp`:
    /// every `identity.jwt` issuer's audience.
    pub resource: String,
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry (`scope` claim) to use the MCP endpoint.
    #[serde(default)]
    pub required_scopes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtIssuer {
    pub issuer: String,
    pub audience: String,
    /// A JWKS file or URL (`config::jwks`); or `discovery: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks: Option<Jwks>,
    /// Read `jwks_uri` from `<issuer>/.well-known/openid-configuration` instead.
    #[serde(default, skip_serializing_if = "is_false")]
    pub discovery: bool,
    /// The claim that names the agent.
    #[serde(default = "sub")]
    pub agent_claim: String,
    /// Put in front of the claim to make the agent id (`partner:` + `ops-bot`), so this
    /// issuer speaks only for its own agents. Required for every issuer after the first
    /// agent identity source (`config::sources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_prefix: Option<String>,
}

fn sub() -> String {
    "sub".into()
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskIssuer {
    pub issuer: String,
    /// A JWKS file or URL (`config::jwks`); or `discovery: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks: Option<Jwks>,
    /// Read `jwks_uri` from `<issuer>/.well-known/openid-configuration` instead.
    #[serde(default, skip_serializing_if = "is_false")]
    pub discovery: bool,
    #[serde(default)]
    pub audience: Option<String>,
    /// A token without an `agent` claim is no task (`OUT_OF_TASK_SCOPE` for rules that
    /// read `task`). `false` lets such a token serve any agent that presents it.
    #[serde(default = "yes")]
    pub require_agent: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Turns on mTLS: a client certificate signed by this CA is required and names the agent.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Which SAN of the client certificate is the agent id.
    #[serde(default)]
    pub agent_san: AgentSan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AgentSan {
    /// The first `spiffe://` URI SAN.
    #[default]
    Spiffe,
    /// The first URI SAN.
    Uri,
    /// The first DNS SAN.
    Dns,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OtlpProtocol {
    #[default]
    Grpc,
    Http,
}

/// Which calls' spans are exported (`telemetry.sampler`): the names and meanings of the
/// standard `OTEL_TRACES_SAMPLER` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceSampler {
    /// Every call.
    #[default]
    AlwaysOn,
    /// None (refusals still, with `sampleDenials`).
    AlwaysOff,
    /// `samplerRatio` of the traces, chosen by trace id.
    Traceidratio,
    /// The agent's sampled flag when it sent a `traceparent`, else every call.
    ParentbasedAlwaysOn,
    /// The agent's sampled flag when it sent a `traceparent`, else none.
    ParentbasedAlwaysOff,
    /// The agent's sampled flag when it sent a `traceparent`, else `samplerRatio`.
    ParentbasedTraceidratio,
}

/// Whether the conventions' metrics are also pushed over OTLP (`telemetry.metricsExport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricsExport {
    /// `/metrics` only.
    #[default]
    None,
    /// `/metrics`, and pushed to `otlpEndpoint` every `metricsIntervalMs`.
    Otlp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Telemetry {
    /// No endpoint: no spans are exported.
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    pub service_name: String,
    /// Spans queued or in flight to the collector at most; more are dropped and counted.
    pub max_queued_spans: usize,
    pub sampler: TraceSampler,
    /// The share of traces sampled by the `*traceidratio` samplers, 0 to 1.
    pub sampler_ratio: f64,
    /// Export the span of every refusal, whether its trace was sampled or not.
    pub sample_denials: bool,
    pub metrics_export: MetricsExport,
    /// How often metrics are pushed with `metricsExport: otlp`.
    pub metrics_interval_ms: u64,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::Grpc,
            service_name: "toolgate".into(),
            max_queued_spans: 4096,
            sampler: TraceSampler::AlwaysOn,
            sampler_ratio: 1.0,
            sample_denials: true,
            metrics_export: MetricsExport::None,
            metrics_interval_ms: 60_000,
        }
    }
}

impl Telemetry {
    fn check(&self, origin: &str) -> Result<(), SettingsError> {
        if !(0.0..=1.0).contains(&self.sampler_ratio) {
            return Err(file::invalid(
                origin,
                "telemetry.samplerRatio".into(),
                format!("must be between 0 and 1, got {}", self.sampler_ratio),
            ));
        }
        if self.metrics_export == MetricsExport::Otlp && self.otlp_endpoint.is_none() {
            return Err(file::invalid(
                origin,
                "telemetry.metricsExport".into(),
                "otlp needs telemetry.otlpEndpoint, where the metrics are pushed".into(),
            ));
        }
        if self.metrics_interval_ms == 0 {
            return Err(file::invalid(
                origin,
                "telemetry.metricsIntervalMs".into(),
                "must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    #[default]
    FailClosed,
    FailOpen,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Audit {
    /// `stdout`, a file path, or `off`.
    pub path: String,
    pub on_failure: OnFailure,
    /// A secret (a mounted Secret's file) that turns the chain's SHA-256 into
    /// HMAC-SHA256, so whoever can write the log without the key can't rebuild it.
    pub key_file: Option<PathBuf>,
    /// Request headers whose values a record never keeps, besides the credentials
    /// toolgate always masks (`audit::privacy`).
    pub redact_headers: Vec<String>,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            path: "stdout".into(),
            on_failure: OnFailure::FailClosed,
            key_file: None,
            redact_headers: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub header_read_timeout_ms: u64,
    pub max_headers: usize,
    /// Time a client has to send its whole body once the headers are in.
    pub body_read_timeout_ms: u64,
    /// Largest backend response toolgate buffers to shape (`output`/`redact`).
    pub max_response_bytes: usize,
    /// Open agent connections at most; further connections wait in the accept backlog.
    pub max_connections: usize,
    /// A connection whose writes wait this long for its client to read (the client does
    /// not read the answers it asked for) is closed and its slot freed.
    pub write_timeout_ms: u64,
    /// Requests answered before any agent is identified (`UNAUTHENTICATED`, malformed
    /// framing, bad paths, …) allowed per second per client address (burst: twice
    /// this); past it they get `RATE_LIMITED` and one `suppressed` audit record per
    /// address per second instead of one record each.
    pub unauthenticated_per_second: u32,
    /// How long shutdown waits for in-flight calls.
    pub drain_timeout_ms: u64,
    /// Rate limiters kept (one per agent, and per agent and tool, with a quota).
    pub max_rate_limiters: u64,
    /// Sessions whose budget and repeat streak are kept.
    pub max_sessions: u64,
    /// A session unused this long is forgotten: its budget starts over.
    pub session_idle_seconds: u64,
    /// Bytes of in-flight and recent non-idempotent calls kept to answer duplicates.
    pub dedupe_max_bytes: u64,
    /// What happens to a header whose name holds `_` (`X_Foo`), which some backend
    /// stacks read as `X-Foo` and others don't.
    pub headers_with_underscores: Underscores,
    /// Largest policy manifest file read (a larger one is an error, not a load).
    pub max_policy_file_bytes: u64,
}

/// `limits.headersWithUnderscores`: a header name with `_` is dropped (the default),
/// refused (`MALFORMED_REQUEST`) or passed on. Whatever the setting, a name that reads as
/// `X-Toolgate-*` once `_` is taken for `-` is always dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Underscores {
    #[default]
    Drop,
    Reject,
    Allow,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1 << 20,
            header_read_timeout_ms: 5000,
            max_headers: 100,
            body_read_timeout_ms: 10_000,
            max_response_bytes: 8 << 20,
            max_connections: 4096,
            write_timeout_ms: 10_000,
            unauthenticated_per_second: 20,
            drain_timeout_ms: 15_000,
            // Worst case ~3.5 MB, ~13 MB and ~5 MB resident (examples/limits_memory.rs: one
            // thread, the system allocator; the dedupe table's ~12 MB in a loaded sidecar).
            max_rate_limiters: 10_000,
            max_sessions: 50_000,
            session_idle_seconds: 3600,
            // Room for one result of `max_response_bytes` (8 MiB) and ~4,000 small ones, or
            // ~13,000 small ones, within the sidecar's 60 MB under load (docs/bench-history.md, item 16).
            dedupe_max_bytes: 12 << 20,
            headers_with_underscores: Underscores::Drop,
            max_policy_file_bytes: crate::input::file::DEFAULT_MAX_POLICY_FILE_BYTES,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read settings file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}: {field}: {message}")]
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
}

impl Settings {
    /// Reads `file` (when given) and applies the `TOOLGATE_*` variables of `vars`. The
    /// file's relative paths are relative to its folder ([`paths`]).
    pub fn load(
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        let (origin, text) = file::read(file)?;
        // Absolute, so `/config` and the logs show where each file really is.
        let folder = file.map(|f| {
            let folder = match f.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf())
        });
        Settings::parse_in(&origin, &text, folder.as_deref(), vars)
    }

    /// A settings document whose relative paths are the working directory's.
    pub fn parse(
        origin: &str,
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        Settings::parse_in(origin, text, None, vars)
    }

    /// A settings document whose relative paths are relative to `folder` (when given).
    pub fn parse_in(
        origin: &str,
        text: &str,
        folder: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        let settings: Settings = file::parse(origin, text, vars, |tree, vars| {
            if let Some(folder) = folder {
                paths::resolve(tree, folder, paths::PATHS);
            }
            env::apply(tree, vars)
        })?;
        settings.limits.check(origin)?;
        settings.identity.check(origin)?;
        jwks::check(&settings, origin)?;
        settings.identity.kubernetes.check(origin)?;
        sources::check(&settings, origin)?;
        settings.state.redis.check(origin)?;
        settings.telemetry.check(origin)?;
        settings.check_approvers(origin)?;
        Ok(settings)
    }
}

impl Identity {
    /// With `oauth`, a token is valid for the MCP endpoint only if it was issued for it
    /// (RFC 8707): every agent-token issuer must name the resource as its audience.
    fn check(&self, origin: &str) -> Result<(), SettingsError> {
        let Some(oauth) = &self.oauth else {
            return Ok(());
        };
        let absolute = oauth
            .resource
            .parse::<http::Uri>()
            .is_ok_and(|u| u.scheme().is_some() && u.authority().is_some());
        if !absolute {
            return Err(file::invalid(
                origin,
                "identity.oauth.resource".into(),
                "must be an absolute URL, the MCP endpoint's canonical URI".into(),
            ));
        }
        if oauth.authorization_servers.is_empty() {
            return Err(file::invalid(
                origin,
                "identity.oauth.authorizationServers".into(),
                "must name at least one authorization server".into(),
            ));
        }
        match self.jwt.iter().position(|j| j.audience != oauth.resource) {
            Some(i) => Err(file::invalid(
                origin,
                format!("identity.jwt[{i}].audience"),
                format!(
                    "must be identity.oauth.resource ({}): tokens are accepted only for this resource",
                    oauth.resource
                ),
            )),
            None => Ok(()),
        }
    }
}

impl KubernetesIdentity {
    /// Workload identity with no audience would accept any token the cluster signs,
    /// the pod's own API token included: refused.
    fn check(&self, origin: &str) -> Result<(), SettingsError> {
        if !self.enabled {
            return Ok(());
        }
        if self.audiences.is_empty() || self.audiences.iter().any(|a| a.trim().is_empty()) {
            return Err(file::invalid(
                origin,
                "identity.kubernetes.audiences".into(),
                "must name at least one audience, none empty (e.g. [toolgate]): the audience agents request in their serviceAccountToken volume".into(),
            ));
        }
        Ok(())
    }
}

impl Settings {
    /// An issuer trusted for both agents and approvers with one audience would make an
    /// agent's token an approver's: refused.
    fn check_approvers(&self, origin: &str) -> Result<(), SettingsError> {
        for (i, approver) in self.approvals.approvers.jwt.iter().enumerate() {
            let shared = self
                .identity
                .jwt
                .iter()
                .any(|a| a.issuer == approver.issuer && a.audience == approver.audience);
            if shared {
                return Err(file::invalid(
                    origin,
                    format!("approvals.approvers.jwt[{i}].audience"),
                    "must differ from the agent issuer's audience for the same issuer: an agent's token must never be an approver's".into(),
                ));
            }
        }
        let bounds = [
            ("approvals.maxPending", self.approvals.max_pending),
            (
                "approvals.maxPendingBytes",
                self.approvals.max_pending_bytes,
            ),
        ];
        if let Some((field, _)) = bounds.into_iter().find(|(_, bound)| *bound == 0) {
            return Err(file::invalid(
                origin,
                field.into(),
                "must be positive".into(),
            ));
        }
        Ok(())
    }
}

impl Redis {
    /// What would make every call's keys land in different Redis Cluster slots, or make
    /// every round trip time out, is refused at start rather than found under load.
    fn check(&self, origin: &str) -> Result<(), SettingsError> {
        let invalid = |field: &str, message: &str| {
            Err(file::invalid(
                origin,
                format!("state.redis.{field}"),
                message.into(),
            ))
        };
        if !(self.url.starts_with("redis://") || self.url.starts_with("rediss://")) {
            return invalid("url", "must start with redis:// or rediss://");
        }
        if self.key_prefix.contains(['{', '}']) {
            return invalid(
                "keyPrefix",
                "must not contain { or }: keys are hash-tagged after it",
            );
        }
        if self.timeout_ms == 0 {
            return invalid("timeoutMs", "must be positive");
        }
        Ok(())
    }
}

impl Limits {
    /// A table of state with no room would silently turn its limit off: every call would
    /// find a fresh rate limiter, an empty session, no earlier identical call.
    fn check(&self, origin: &str) -> Result<(), SettingsError> {
        let tables = [
            (
                "limits.maxRateLimiters",
                self.max_rate_limiters,
                "rate limits",
            ),
            (
                "limits.maxSessions",
                self.max_sessions,
                "session budgets and loop detection",
            ),
            (
                "limits.dedupeMaxBytes",
                self.dedupe_max_bytes,
                "duplicate suppression",
            ),
            (
                "limits.maxPolicyFileBytes",
                self.max_policy_file_bytes,
                "policy files",
            ),
        ];
        if let Some((field, _, what)) = tables.into_iter().find(|(_, room, _)| *room == 0) {
            return Err(file::invalid(
                origin,
                field.to_string(),
                format!("must be at least 1: with no room, {what} would never apply"),
            ));
        }
        // A call's audit record may hold its arguments (`captureArguments`): a body past
        // half the longest line `audit verify` and `replay` read (64 MiB) could write a
        // record that breaks the log's own chain.
        if self.max_body_bytes > MAX_BODY_BYTES {
            return Err(file::invalid(
                origin,
                "limits.maxBodyBytes".into(),
                format!(
                    "must be at most {MAX_BODY_BYTES} (32 MiB): a call's audit record, which \
                     may hold its arguments, must stay a line audit verify can read"
                ),
            ));
        }
        self.check_connection_limits(origin)
    }
}

/// The largest `limits.maxBodyBytes`: half of `audit::verify::MAX_LINE`, leaving room
/// for the record's other fields and JSON's escapes of the arguments.
pub const MAX_BODY_BYTES: usize = 32 << 20;

impl Limits {
    /// A zero write timeout would cut every connection off; a zero anonymous rate would
    /// answer every unidentified request with `RATE_LIMITED`, a 401 included.
    fn check_connection_limits(&self, origin: &str) -> Result<(), SettingsError> {
        let positive = [
            ("limits.writeTimeoutMs", self.write_timeout_ms),
            (
                "limits.unauthenticatedPerSecond",
                u64::from(self.unauthenticated_per_second),
            ),
        ];
        match positive.into_iter().find(|(_, value)| *value == 0) {
            Some((field, _)) => Err(file::invalid(
                origin,
                field.to_string(),
                "must be at least 1".into(),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn defaults_match_the_design() {
        let s = Settings::parse("t", "", none()).unwrap();
        assert_eq!(s.listen.port(), 15100);
        assert_eq!(s.admin.port(), 15101);
        assert_eq!(s.mcp.path, "/mcp");
        assert_eq!(s.limits.max_body_bytes, 1_048_576);
        assert_eq!(s.audit.on_failure, OnFailure::FailClosed);
    }

    /// The error `text` is refused with.
    fn refusal(text: &str) -> String {
        Settings::parse("t.yaml", text, none())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_body_limit_past_what_the_audit_log_reads_is_refused() {
        let text = refusal("limits: {maxBodyBytes: 40000000}");
        assert!(text.contains("limits.maxBodyBytes"), "{text}");
        assert!(Settings::parse("t", "limits: {maxBodyBytes: 33554432}", none()).is_ok());
    }

    #[test]
    fn an_issuer_listed_twice_is_refused() {
        let text = refusal(
            "identity:\n  taskIssuers:\n    - {issuer: o, jwks: 'http://127.0.0.1:9/a'}\n    - {issuer: o, jwks: 'http://127.0.0.1:9/b', requireAgent: false}\n",
        );
        assert!(text.contains("identity.taskIssuers[1].issuer"), "{text}");
    }

    #[test]
    fn a_state_table_with_no_room_is_refused() {
        let text = refusal("limits: {maxSessions: 0}");
        assert!(text.contains("limits.maxSessions"), "{text}");
        assert!(text.contains("at least 1"), "{text}");
    }

    #[test]
    fn connection_and_approval_bounds_must_be_positive() {
        let s = Settings::parse("t", "", none()).unwrap();
        assert_eq!(s.limits.write_timeout_ms, 10_000);
        assert_eq!(s.limits.unauthenticated_per_second, 20);
        assert_eq!(s.approvals.max_pending_bytes, 64 << 20);
        for (text, field) in [
            ("limits: {writeTimeoutMs: 0}", "limits.writeTimeoutMs"),
            (
                "limits: {unauthenticatedPerSecond: 0}",
                "limits.unauthenticatedPerSecond",
            ),
            (
                "approvals: {maxPendingBytes: 0}",
                "approvals.maxPendingBytes",
            ),
        ] {
            let refused = refusal(text);
            assert!(refused.contains(field), "{refused}");
        }
    }

    #[test]
    fn oauth_tokens_must_be_issued_for_the_resource() {
        let oauth = "identity:\n  oauth: {resource: https://o.example/mcp, authorizationServers: [https://as.example]}\n";
        let text = refusal(&format!(
            "{oauth}  jwt: [{{issuer: https://as.example, audience: toolgate, jwks: /j.json}}]\n"
        ));
        assert!(text.contains("identity.jwt[0].audience"), "{text}");
        let ok = format!(
            "{oauth}  jwt: [{{issuer: https://as.example, audience: https://o.example/mcp, jwks: /j.json}}]\n"
        );
        assert!(Settings::parse("t.yaml", &ok, none()).is_ok());
        let text = refusal("identity: {oauth: {resource: /mcp, authorizationServers: [x]}}");
        assert!(text.contains("identity.oauth.resource"), "{text}");
    }

    #[test]
    fn unknown_key_is_rejected_with_its_path() {
        let text = refusal("limits: {maxBodyByte: 3}");
        assert!(text.contains("limits"), "{text}");
        assert!(text.contains("maxBodyByte"), "{text}");
    }

    #[test]
    fn full_design_example_parses() {
        let text = r#"
listen: 0.0.0.0:15100
admin: 0.0.0.0:15101
upstream: http://127.0.0.1:8080
mcp: {path: /mcp}
policies:
  files: [/etc/toolgate/policies]
  allowShadow: false
  kubernetes: {enabled: false, namespace: default, podLabelsFile: /etc/podinfo/labels}
identity:
  tokens: /etc/toolgate/tokens.yaml
  jwt: [{issuer: a, audience: b, jwks: /etc/toolgate/jwks.json, agentPrefix: "a:"}]
  taskIssuers: [{issuer: orchestrator, jwks: /etc/toolgate/task-jwks.json}]
tls: {cert: c, key: k, clientCa: ca}
telemetry: {otlpEndpoint: "http://jaeger-collector:4317", otlpProtocol: grpc, serviceName: orders}
audit: {path: stdout, onFailure: fail_closed}
limits: {maxBodyBytes: 1048576, headerReadTimeoutMs: 5000, maxHeaders: 100}
"#;
        let s = Settings::parse("t", text, none()).unwrap();
        assert_eq!(s.telemetry.service_name, "orders");
        assert_eq!(s.identity.jwt[0].agent_claim, "sub");
        assert_eq!(s.identity.jwt[0].agent_prefix.as_deref(), Some("a:"));
        assert!(s.identity.task_issuers[0].require_agent);
    }

    #[test]
    fn workload_identity_needs_an_audience_and_has_variables() {
        let text = refusal("identity: {kubernetes: {enabled: true, audiences: []}}");
        assert!(text.contains("identity.kubernetes.audiences"), "{text}");
        let text = refusal("identity: {kubernetes: {enabled: true, audiences: ['']}}");
        assert!(text.contains("identity.kubernetes.audiences"), "{text}");
        assert!(Settings::parse("t", "identity: {kubernetes: {audiences: []}}", none()).is_ok());
        let vars = [
            ("TOOLGATE_IDENTITY_KUBERNETES_ENABLED", "true"),
            (
                "TOOLGATE_IDENTITY_KUBERNETES_AUDIENCES",
                "toolgate, orders.toolgate",
            ),
            ("TOOLGATE_IDENTITY_KUBERNETES_KUBECONFIG", "/k"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let s = Settings::parse("t", "", vars).unwrap();
        assert!(s.identity.kubernetes.enabled);
        assert_eq!(
            s.identity.kubernetes.audiences,
            ["toolgate", "orders.toolgate"]
        );
        assert_eq!(s.identity.kubernetes.kubeconfig, Some("/k".into()));
        let default = Settings::parse("t", "", none()).unwrap();
        assert!(!default.identity.kubernetes.enabled);
        assert_eq!(default.identity.kubernetes.audiences, ["toolgate"]);
    }

    #[test]
    fn every_issuer_kind_takes_a_url_or_discovery() {
        let ok = "identity:\n  jwt: [{issuer: 'https://idp.example', audience: t, discovery: true}]\n  taskIssuers: [{issuer: o, jwks: 'https://o.example/jwks'}]\napprovals:\n  approvers:\n    jwt: [{issuer: a, audience: ops, jwks: 'http://127.0.0.1:9/jwks'}]\n";
        let s = Settings::parse("t", ok, none()).unwrap();
        assert!(s.identity.jwt[0].discovery);
        assert_eq!(
            s.identity.task_issuers[0].jwks,
            Some(Jwks::Url("https://o.example/jwks".into()))
        );
        for (text, field) in [
            ("identity: {jwt: [{issuer: a, audience: t, jwks: 'http://idp.example/jwks'}]}", "identity.jwt[0].jwks"),
            ("identity: {taskIssuers: [{issuer: o, jwks: 'http://10.1.2.3/jwks'}]}", "identity.taskIssuers[0].jwks"),
            ("approvals: {approvers: {jwt: [{issuer: a, audience: t, jwks: 'http://a.example/k'}]}}", "approvals.approvers.jwt[0].jwks"),
            ("identity: {jwt: [{issuer: a, audience: t}]}", "identity.jwt[0].jwks"),
            ("identity: {jwt: [{issuer: a, audience: t, discovery: true}]}", "identity.jwt[0].discovery"),
            ("identity: {taskIssuers: [{issuer: 'http://o.example', discovery: true}]}", "identity.taskIssuers[0].discovery"),
            ("identity: {jwt: [{issuer: 'https://a', audience: t, jwks: /j.json, discovery: true}]}", "identity.jwt[0].discovery"),
        ] {
            let err = refusal(text);
            assert!(err.contains(field), "{text}: {err}");
        }
        let err =
            refusal("identity: {jwt: [{issuer: a, audience: t, jwks: 'http://idp.example/jwks'}]}");
        assert!(err.contains("loopback"), "{err}");
    }
}

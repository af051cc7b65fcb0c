//! The tour's folder, one per process under the temp folder: the policies, token
//! digests and keys the sidecar reads, and the audit log it writes; and the example
//! backend with a sidecar in front of it, started from them. `--serve` starts a second
//! sidecar on the same folder, so its audit chain continues the tour's.

use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::script::{APPROVER_TOKEN, TOKEN};
use super::{backend, AGENTS, CONTRACTS, MCP_POLICIES, SUPPORT_TOKEN};
use crate::config::{
    Approvals, Approvers, Audit, Identity, Policies, Settings, TaskIssuer, Telemetry,
};
use crate::identity::tokens::digest_hex;
use crate::sidecar::Sidecar;

const ORCHESTRATOR_JWKS: &str = include_str!("../../examples/keys/task-jwks.json");

/// The tour's folder: the policies, token digests and keys the sidecar reads, and the
/// audit log it writes.
pub struct Home {
    pub dir: PathBuf,
    pub policies: PathBuf,
    tokens: PathBuf,
    approvers: PathBuf,
    task_jwks: PathBuf,
    pub audit: PathBuf,
}

impl Home {
    /// Writes the folder's files (the audit log is left as it is).
    pub fn prepare() -> anyhow::Result<Home> {
        let dir = std::env::temp_dir().join(format!("toolgate-demo-{}", std::process::id()));
        let policies = dir.join("policies");
        std::fs::create_dir_all(&policies)
            .with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(policies.join("contracts.yaml"), CONTRACTS)?;
        std::fs::write(policies.join("agents.yaml"), AGENTS)?;
        std::fs::write(policies.join("mcp.yaml"), MCP_POLICIES)?;
        let tokens = dir.join("tokens.yaml");
        std::fs::write(
            &tokens,
            format!(
                "ops-bot: {}\nsupport-bot: {}\n",
                digest_hex(TOKEN),
                digest_hex(SUPPORT_TOKEN)
            ),
        )?;
        let approvers = dir.join("approvers.yaml");
        std::fs::write(
            &approvers,
            format!(
                "alice: {{sha256: {}, groups: [finance-leads]}}\n",
                digest_hex(APPROVER_TOKEN)
            ),
        )?;
        let task_jwks = dir.join("task-jwks.json");
        std::fs::write(&task_jwks, ORCHESTRATOR_JWKS)?;
        let audit = dir.join("audit.log");
        Ok(Home {
            dir,
            policies,
            tokens,
            approvers,
            task_jwks,
            audit,
        })
    }

    /// The sidecar's settings in front of `backend`, on loopback ports of the system's
    /// choosing.
    fn settings(&self, backend: SocketAddr, otlp_endpoint: Option<String>) -> Settings {
        let defaults = Settings::default();
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream: format!("http://{backend}"),
            policies: Policies {
                files: vec![self.policies.clone()],
                ..defaults.policies.clone()
            },
            identity: Identity {
                tokens: Some(self.tokens.clone()),
                task_issuers: vec![TaskIssuer {
                    issuer: "orchestrator".into(),
                    jwks: Some(self.task_jwks.clone().into()),
                    discovery: false,
                    audience: None,
                    require_agent: true,
                }],
                ..defaults.identity.clone()
            },
            audit: Audit {
                path: self.audit.to_string_lossy().into_owned(),
                ..defaults.audit.clone()
            },
            telemetry: Telemetry {
                otlp_endpoint,
                service_name: "toolgate-demo".into(),
                ..defaults.telemetry.clone()
            },
            approvals: Approvals {
                approvers: Approvers {
                    tokens: Some(self.approvers.clone()),
                    jwt: Vec::new(),
                },
                ..defaults.approvals.clone()
            },
            ..defaults
        }
    }

    /// The example backend and a sidecar in front of it, its policies loaded.
    pub async fn start(
        &self,
        otlp_endpoint: Option<String>,
    ) -> anyhow::Result<(SocketAddr, Sidecar)> {
        let backend = backend::start().await?;
        let sidecar = Sidecar::start(self.settings(backend, otlp_endpoint)).await?;
        for _ in 0..200 {
            if sidecar.control.snapshot().is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        anyhow::ensure!(
            sidecar.control.snapshot().is_some(),
            "the example policies did not load: {:?}",
            sidecar.control.errors()
        );
        Ok((backend, sidecar))
    }
}

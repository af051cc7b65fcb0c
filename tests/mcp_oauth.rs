//! OAuth 2.1 end to end with the official MCP Python SDK: a client that knows only
//! toolgate's MCP URL authorizes itself and calls a tool.
//!
//! Three processes and toolgate: the SDK's server (`tests/mcp/server.py`) upstream, a
//! small local authorization server (`tests/mcp/auth_server.py`: RFC 8414 metadata,
//! RFC 7591 registration, an auto-approving `/authorize`, a `/token` that checks PKCE
//! and signs an RS256 JWT whose `aud` is the RFC 8707 `resource` the client asked for),
//! and the SDK's client (`tests/mcp/client.py --oauth`: `OAuthClientProvider` as the
//! transport's httpx auth). toolgate has `identity.oauth` naming that authorization
//! server and `identity.jwt` trusting its JWKS for the audience `<toolgate>/mcp`.
//!
//! Given only `http://127.0.0.1:<toolgate>/mcp`, the client gets toolgate's 401, follows
//! `resource_metadata` in its `WWW-Authenticate` to toolgate's RFC 9728 metadata (whose
//! `resource` the SDK checks against the URL it was given), finds the authorization
//! server there, fetches its metadata, registers, is redirected back with a code,
//! exchanges it for a token for toolgate's resource, and retries: the call runs as the
//! token's `sub` (ops-bot) under ops-bot's policy. Without a token: 401.
//! (That the token never goes upstream is asserted in `tests/mcp_protocol.rs`:
//! `server.py` does not record headers.)

mod common;
#[path = "common/mcp.rs"]
mod peers;

use common::*;
use peers::{client, python, Peer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The tools of the Python SDK's server and ops-bot's grants (read_logs, create_issue).
const POLICIES: &str = include_str!("fixtures/policies/python-mcp-server.yaml");

/// `tests/mcp/auth_server.py`, killed (by its own pid) when dropped.
struct AuthServer {
    child: Child,
    issuer: String,
    jwks: PathBuf,
    log: PathBuf,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AuthServer {
    /// Started; its JWKS is written before it announces its port.
    fn start(dir: &Path) -> AuthServer {
        let jwks = dir.join("as-jwks.json");
        let log = dir.join("as-requests.jsonl");
        let mut child = Command::new(python())
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/auth_server.py"))
            .args(["--port", "0", "--subject", "ops-bot", "--jwks"])
            .arg(&jwks)
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("auth_server.py starts");
        let stdout = child.stdout.take().unwrap();
        let mut server = AuthServer {
            child,
            issuer: String::new(),
            jwks,
            log,
        };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port: u16 = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("auth_server.py did not announce a port: {line:?}"));
        server.issuer = format!("http://127.0.0.1:{port}");
        server
    }

    /// The requests it served, in order (`{method, path, query, form?}`).
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A free loopback port for toolgate's agent listener: the OAuth `resource` (and so the
/// metadata URL in the challenge) is toolgate's own URL, needed before it starts. Bound
/// and released at once; another process taking it in between would fail the start.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_client_given_only_the_url_authorizes_and_calls_a_tool() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::python_server(&[], dir.path());
    let auth = AuthServer::start(dir.path());
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let (issuer, jwks, res) = (auth.issuer.clone(), auth.jwks.clone(), resource.clone());
    let h = Harness::start(
        peer.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(move |s| {
                s.listen = format!("127.0.0.1:{port}").parse().unwrap();
                // The authorization server is the only source of agent ids.
                s.identity.tokens = None;
                s.identity.jwt = vec![toolgate::config::JwtIssuer {
                    issuer: issuer.clone(),
                    audience: res.clone(),
                    jwks: Some(jwks.into()),
                    discovery: false,
                    agent_claim: "sub".into(),
                    agent_prefix: None,
                }];
                s.identity.oauth = Some(toolgate::config::OAuth {
                    resource: res,
                    authorization_servers: vec![issuer],
                    scopes_supported: vec!["tools".into()],
                    required_scopes: vec!["tools".into()],
                });
            }),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(h.base, base);

    let (out, anonymous) = tokio::join!(
        client(
            &resource,
            None,
            "legacy",
            &["--oauth", "call", "read_logs", r#"{"service":"api"}"#],
        ),
        client(&resource, None, "legacy", &["list"]),
    );

    // The call ran, as ops-bot (the only agent granted read_logs), shaped by its contract.
    assert_eq!(out["isError"], false, "{out:#}");
    assert_eq!(
        out["structuredContent"],
        json!({"service": "api", "lines": [
            {"msg": "api: GET /health 200", "client_ip": "[REDACTED]"},
            {"msg": "api: login failed for user alice", "client_ip": "[REDACTED]"}
        ]}),
        "{out:#}"
    );
    assert_eq!(out["protocolVersion"], "2025-11-25");

    // Everything was discovered from toolgate's 401.
    let oauth = &out["oauth"];
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        oauth["www_authenticate"],
        format!(r#"Bearer resource_metadata="{metadata_url}""#),
        "{oauth:#}"
    );
    assert_eq!(oauth["resource_metadata"], metadata_url.as_str());
    assert_eq!(oauth["protected_resource"]["resource"], resource.as_str());
    assert_eq!(
        oauth["protected_resource"]["authorization_servers"],
        json!([auth.issuer])
    );
    assert_eq!(oauth["authorization_server"], auth.issuer.as_str());
    assert_eq!(oauth["token_endpoint"], format!("{}/token", auth.issuer));
    assert_eq!(oauth["resource"], resource.as_str());
    assert_eq!(oauth["scope"], "tools");
    // The exchanges, in order: toolgate's challenge, its metadata, the authorization
    // server's metadata, registration, authorization, token, the retried request.
    let requests: Vec<String> = oauth["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r[0].as_str().unwrap(),
                r[1].as_str().unwrap(),
                r[2]
            )
        })
        .collect();
    let i = &auth.issuer;
    assert_eq!(
        requests[..7],
        [
            format!("POST {resource} 401"),
            format!("GET {metadata_url} 200"),
            format!("GET {i}/.well-known/oauth-authorization-server 200"),
            format!("POST {i}/register 201"),
            format!("GET {i}/authorize 302"),
            format!("POST {i}/token 200"),
            format!("POST {resource} 200"),
        ],
        "{requests:#?}"
    );
    // Only toolgate's URL and URLs it (or the authorization server it named) gave out.
    assert!(
        requests
            .iter()
            .all(|r| r.contains(&base) || r.contains(&auth.issuer)),
        "{requests:#?}"
    );
    // What the authorization server was asked for: a token for toolgate's resource
    // (RFC 8707), with the scope toolgate's metadata lists, PKCE S256.
    let served = auth.requests();
    let authorize = served
        .iter()
        .find(|r| r["path"] == "/authorize")
        .expect("an authorization request");
    assert_eq!(
        authorize["query"]["resource"],
        resource.as_str(),
        "{authorize}"
    );
    assert_eq!(authorize["query"]["scope"], "tools");
    assert_eq!(authorize["query"]["code_challenge_method"], "S256");
    let token = served
        .iter()
        .find(|r| r["path"] == "/token")
        .expect("a token request");
    assert_eq!(token["form"]["grant_type"], "authorization_code", "{token}");
    assert_eq!(token["form"]["resource"], resource.as_str());

    // Without OAuth: toolgate's 401, nothing ran but the authorized call.
    assert_eq!(anonymous["http_status"], 401, "{anonymous}");
    assert_eq!(peer.counts(), json!({"read_logs": 1}));
    h.stop().await;
}

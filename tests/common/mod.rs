//! Shared test harness: a real HTTP backend, a real sidecar on loopback, a real client.
#![allow(dead_code)]

pub mod fake_apiserver; // kube (issue 6)
pub mod fault_backend; // faults (issue 19)
pub mod kube_tools; // inject (issue 8)
pub mod pod_security; // inject (issue 8)
pub mod raw_http; // faults (issue 19)
pub mod tmpfs; // faults (issue 19)

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

use toolgate::config::Settings;
use toolgate::identity::tokens::digest_hex;
use toolgate::limits::Clock;
use toolgate::sidecar::Sidecar;

/// One request as the backend saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub type Handler =
    Arc<dyn Fn(&Seen) -> (u16, Vec<(&'static str, String)>, String, Duration) + Send + Sync>;

/// A real HTTP/1.1 backend that records what it receives.
pub struct Backend {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Backend {
    pub async fn start(handler: Handler) -> Backend {
        Backend::start_on("127.0.0.1:0".parse().unwrap(), handler).await
    }

    /// A backend on `addr` (one a sidecar was pointed at before anything listened).
    pub async fn start_on(addr: SocketAddr, handler: Handler) -> Backend {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                let record = record.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let handler = handler.clone();
                        let record = record.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let seen = Seen {
                                method: parts.method,
                                uri: parts.uri.to_string(),
                                headers: parts.headers,
                                body,
                            };
                            let (status, headers, body, delay) = handler(&seen);
                            record.lock().unwrap().push(seen);
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            let mut response = Response::new(Full::new(Bytes::from(body)));
                            *response.status_mut() = StatusCode::from_u16(status).unwrap();
                            for (k, v) in headers {
                                response.headers_mut().insert(k, v.parse().unwrap());
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Backend { addr, seen }
    }

    /// The example backend: logs, issues, a failing report, a slow export.
    pub async fn example() -> Backend {
        Backend::start(Arc::new(|seen: &Seen| {
            let json = ("content-type", "application/json".to_string());
            let path = seen.uri.split('?').next().unwrap_or("");
            match (seen.method.as_str(), path) {
                ("GET", p) if p.starts_with("/logs/") => (
                    200,
                    vec![json],
                    r#"{"lines":[{"msg":"order 17 shipped","client_ip":"10.1.2.3"}],"host":"db-7.internal"}"#.into(),
                    Duration::ZERO,
                ),
                ("POST", "/issues") => (201, vec![json], format!(r#"{{"id":"OPS-1","echo":{}}}"#, String::from_utf8_lossy(&seen.body)), Duration::ZERO),
                ("GET", p) if p.starts_with("/reports/") => (
                    500,
                    vec![],
                    "Traceback: psycopg2.OperationalError at db-7.internal:5432 SELECT * FROM secrets".into(),
                    Duration::ZERO,
                ),
                ("GET", p) if p.starts_with("/missing/") => (404, vec![], "no row id=7 in table users at db-7".into(), Duration::ZERO),
                ("GET", "/slow") => (200, vec![json], "{}".into(), Duration::from_millis(1500)),
                ("GET", "/broken-output") => (200, vec![json], r#"{"lines":"not a list"}"#.into(), Duration::ZERO),
                _ => (200, vec![json], "{}".into(), Duration::ZERO),
            }
        }))
        .await
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("the backend saw no request")
    }
}

/// The log service's ToolContracts, what [`Backend::example`] serves
/// (`tests/fixtures/policies/log-service.yaml`).
pub const CONTRACTS: &str = include_str!("../fixtures/policies/log-service.yaml");

/// ops-bot's and retired-bot's grants on [`CONTRACTS`]
/// (`tests/fixtures/policies/log-service-agents.yaml`).
pub const POLICIES: &str = include_str!("../fixtures/policies/log-service-agents.yaml");

/// [`CONTRACTS`] and [`POLICIES`] as one file: what [`Options::default`] serves.
pub fn log_service_policies() -> String {
    format!("{CONTRACTS}---\n{POLICIES}")
}

/// ops-bot may read logs and open issues (`tests/fixtures/policies/ops-bot.yaml`): the
/// cluster tests' policy beside [`CONTRACTS`].
pub const OPS_POLICY: &str = include_str!("../fixtures/policies/ops-bot.yaml");

/// stranger may read logs (`tests/fixtures/policies/stranger.yaml`): the policy the
/// cluster tests add, change and delete.
pub const STRANGER_POLICY: &str = include_str!("../fixtures/policies/stranger.yaml");

/// Verifies an audit log's chain (no key), panicking with the break if there is one.
pub fn audit_verify(text: &str) -> toolgate::audit::verify::Summary {
    toolgate::audit::verify::verify(text, None)
        .unwrap_or_else(|broken| panic!("audit chain broken: {broken:?}\n{text}"))
}

/// The decision records of an audit log, in order (its `start` and `policy` records,
/// which say what the sidecar ran with, left out).
pub fn audit_calls(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("kind").is_none_or(|k| k == "call"))
        .collect()
}

pub const OPS_TOKEN: &str = "ops-token-123";
pub const RETIRED_TOKEN: &str = "retired-token-456";
pub const STRANGER_TOKEN: &str = "stranger-token-789";

/// A sidecar in front of a backend, with its files in a temp folder.
pub struct Harness {
    pub sidecar: Option<Sidecar>,
    pub dir: tempfile::TempDir,
    pub client: Client<HttpConnector, Full<Bytes>>,
    pub base: String,
    /// The sidecar's limits clock: fake, so tests move time instead of sleeping.
    pub clock: Clock,
}

pub struct Options {
    pub policies: String,
    pub tweak: Box<dyn FnOnce(&mut Settings)>,
    pub wait_ready: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            policies: log_service_policies(),
            tweak: Box::new(|_| {}),
            wait_ready: true,
        }
    }
}

impl Harness {
    pub async fn start(upstream: SocketAddr, options: Options) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let policy_dir = dir.path().join("policies");
        std::fs::create_dir(&policy_dir).unwrap();
        std::fs::write(policy_dir.join("policies.yaml"), &options.policies).unwrap();
        let tokens = dir.path().join("tokens.yaml");
        std::fs::write(
            &tokens,
            format!(
                "ops-bot: {}\nretired-bot: {}\nstranger: {}\n",
                digest_hex(OPS_TOKEN),
                digest_hex(RETIRED_TOKEN),
                digest_hex(STRANGER_TOKEN)
            ),
        )
        .unwrap();
        let mut settings = Settings {
            listen: "127.0.0.1:0".parse().unwrap(),
            admin: "127.0.0.1:0".parse().unwrap(),
            upstream: format!("http://{upstream}"),
            ..Settings::default()
        };
        settings.policies.files = vec![policy_dir];
        settings.identity.tokens = Some(tokens);
        settings.audit.path = dir.path().join("audit.log").to_string_lossy().into_owned();
        (options.tweak)(&mut settings);
        let clock = Clock::fake();
        let sidecar = Sidecar::start_with_clock(settings, clock.clone())
            .await
            .expect("sidecar starts");
        let base = format!("http://{}", sidecar.agent_addr);
        let harness = Harness {
            sidecar: Some(sidecar),
            dir,
            client: Client::builder(TokioExecutor::new()).build_http(),
            base,
            clock,
        };
        if options.wait_ready {
            harness.wait_ready().await;
        }
        harness
    }

    pub fn policy_file(&self) -> PathBuf {
        self.dir.path().join("policies").join("policies.yaml")
    }

    pub fn audit_file(&self) -> PathBuf {
        self.dir.path().join("audit.log")
    }

    pub fn admin(&self) -> String {
        format!("http://{}", self.sidecar.as_ref().unwrap().admin_addr)
    }

    pub async fn wait_ready(&self) {
        for _ in 0..100 {
            if self.sidecar.as_ref().unwrap().control.snapshot().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "sidecar never became ready: {:?}",
            self.sidecar.as_ref().unwrap().control.errors()
        );
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        if !body.is_empty() {
            request = request.header("content-type", "application/json");
        }
        let response = self
            .client
            .request(
                request
                    .body(Full::new(Bytes::from(body.to_string())))
                    .unwrap(),
            )
            .await
            .unwrap();
        Reply::read(response).await
    }

    pub async fn get_admin(&self, path: &str) -> (u16, String) {
        let uri = format!("{}{}", self.admin(), path);
        let response = self.client.get(uri.parse().unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Stops the sidecar and hands back its folder (audit log included).
    pub async fn stop_keeping_files(mut self) -> tempfile::TempDir {
        if let Some(sidecar) = self.sidecar.take() {
            sidecar.shutdown().await;
        }
        self.dir
    }

    pub async fn stop(mut self) {
        if let Some(sidecar) = self.sidecar.take() {
            sidecar.shutdown().await;
        }
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Reply {
    pub async fn read(response: Response<Incoming>) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Asserts a refusal with the contract's body and headers.
    pub fn assert_refused(&self, code: &str, status: u16) {
        assert_eq!(self.status, status, "status for {code}: {}", self.text);
        assert_eq!(self.code(), code, "{}", self.text);
        assert_eq!(self.json["status"], "error");
        let error = &self.json["error"];
        for field in [
            "message",
            "retryable",
            "recovery",
            "details",
            "rule",
            "retryAfterMs",
            "traceId",
        ] {
            assert!(
                error.get(field).is_some(),
                "missing {field} in {}",
                self.text
            );
        }
        assert_eq!(self.header("x-toolgate-code"), code);
    }
}

/// A port nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

pub mod auth_relay;
pub mod collector;
pub mod key_server; // JWKS by URL (issue 48)
pub mod keys;
pub mod raw; // hostile inputs (issue 19)
pub mod redis; // shared state (issue 21)
pub mod scrape; // the monitoring pack (issue 48)

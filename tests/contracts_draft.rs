//! `toolgate contracts draft` as a user runs it: from a real MCP server (the official
//! Python SDK's low-level server, tests/mcp/draft_server.py, and the TypeScript reference
//! server) and from OpenAPI fixtures (tests/fixtures/openapi/); every output is fed to
//! `toolgate check`, literally, and must pass.

#[path = "common/mcp.rs"]
mod peers;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use toolgate::crd::{parse_documents, Manifest, ToolContractSpec};

const TOKEN: &str = "tok-3f9c2b7e-never-printed";

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openapi")
        .join(name)
}

struct Drafted {
    code: Option<i32>,
    yaml: String,
    stderr: String,
}

fn draft(args: &[&str]) -> Drafted {
    let Output {
        status,
        stdout,
        stderr,
    } = toolgate()
        .args(["contracts", "draft"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8(stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    Drafted {
        code: status.code(),
        yaml: String::from_utf8(stdout).unwrap(),
        stderr,
    }
}

/// The drafted objects, by tool name, parsed with toolgate's own manifest parser.
fn contracts(yaml: &str) -> Vec<(String, ToolContractSpec)> {
    let (objects, errors) = parse_documents("draft", yaml);
    assert!(errors.is_empty(), "{errors:?}\n{yaml}");
    objects
        .into_iter()
        .map(|o| match o.manifest {
            Manifest::ToolContract(spec) => (o.key.name, spec),
            other => panic!("a drafted object is not a ToolContract: {other:?}\n{yaml}"),
        })
        .collect()
}

fn spec<'a>(all: &'a [(String, ToolContractSpec)], tool: &str) -> &'a ToolContractSpec {
    &all.iter()
        .find(|(_, s)| s.tool == tool)
        .unwrap_or_else(|| panic!("no contract for {tool}"))
        .1
}

/// Writes the output to a file and runs `toolgate check` on it; its summary line.
fn check(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("drafted.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = toolgate().arg("check").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "toolgate check refused the draft:\n{text}\n{yaml}"
    );
    text
}

/// The comment block above the object drafted for `origin` (its first comment line).
fn notes_of<'a>(yaml: &'a str, origin: &str) -> &'a str {
    let start = yaml
        .find(&format!("# {origin}\n"))
        .unwrap_or_else(|| panic!("no draft for {origin}:\n{yaml}"));
    let end = yaml[start..]
        .find("apiVersion:")
        .map_or(yaml.len(), |i| start + i);
    &yaml[start..end]
}

fn is_kube_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !n.starts_with('-')
        && !n.ends_with('-')
}

// --- MCP ---

/// tests/mcp/draft_server.py on a free port, killed (by its own pid) when dropped.
struct DraftServer {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for DraftServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DraftServer {
    fn start(flags: &[&str]) -> DraftServer {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let mut child = Command::new(peers::python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/draft_server.py"))
            .args(["--port", "0", "--log"])
            .arg(&log)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("draft_server.py starts");
        let stdout = child.stdout.take().unwrap();
        let mut server = DraftServer {
            child,
            url: String::new(),
            log,
            _dir: dir,
        };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port: u16 = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("draft_server.py did not announce a port: {line:?}"));
        server.url = format!("http://127.0.0.1:{port}/mcp");
        server
    }

    /// Each HTTP request the server saw: `(http, rpc, protocol, session, auth)`.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

/// The documents without the header, whose first line names the server's URL.
fn body_of(yaml: &str) -> &str {
    &yaml[yaml.find("---\n").unwrap()..]
}

#[test]
fn mcp_tools_are_drafted_with_a_token_over_sse_and_pass_check() {
    let server = DraftServer::start(&["--token", TOKEN, "--page-size", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), TOKEN);
    let out = draft(&[
        "--from-mcp",
        &server.url,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.yaml.contains(TOKEN) && !out.stderr.contains(TOKEN));
    assert!(
        check(&out.yaml).contains("ok: 9 objects in 1 files"),
        "{}",
        out.yaml
    );

    let all = contracts(&out.yaml);
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.iter().all(|n| is_kube_name(n)), "{names:?}");
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 9, "{names:?}");
    assert!(all
        .iter()
        .all(|(_, s)| s.http.is_none() && s.timeout_ms == Some(10_000)));

    let weather = spec(&all, "get_weather");
    assert_eq!(
        weather.description.as_deref(),
        Some("Current weather for a city.")
    );
    assert_eq!(weather.idempotent, Some(true));
    assert_eq!(weather.input["required"], json!(["city"]));
    assert_eq!(
        weather.output.as_ref().unwrap()["properties"]["temp_c"],
        json!({"type": "number"})
    );
    assert!(out
        .yaml
        .contains("idempotent: true # the server's readOnlyHint: true"));
    assert_eq!(spec(&all, "set_flag").idempotent, Some(true));
    let ticket = spec(&all, "create_ticket");
    assert_eq!(ticket.idempotent, Some(false));
    assert!(ticket.output.is_none());
    let ticket_notes = notes_of(&out.yaml, "MCP tool create_ticket");
    assert!(
        ticket_notes.contains("# review: the server marks it destructive"),
        "{ticket_notes}"
    );
    assert!(out.yaml.contains(
        "idempotent: false # review: no readOnlyHint or idempotentHint, so never retried"
    ));
    assert!(notes_of(&out.yaml, "MCP tool undescribed")
        .contains("# review: the server gives no description"));

    // Names Kubernetes can't take as they are, and two that fold into one.
    let name_of = |tool: &str| all.iter().find(|(_, s)| s.tool == tool).unwrap().0.clone();
    assert_eq!(name_of("Billing.Refund_v2"), "billing-refund-v2");
    assert_ne!(name_of("get-user"), name_of("get_user"));
    assert!(name_of("get_user").starts_with("get-user-"));
    assert_eq!(name_of("get_weather"), "get-weather");
    // The refund's $defs/$ref input is kept as the server wrote it.
    assert_eq!(
        spec(&all, "Billing.Refund_v2").input["properties"]["order"],
        json!({"$ref": "#/$defs/Order"})
    );

    // A draft-07 schema is brought to 2020-12, and a description that tries to start a
    // document of its own stays inside its scalar.
    let legacy = spec(&all, "legacy_search");
    assert!(legacy.input.get("$schema").is_none());
    assert_eq!(
        legacy.input["properties"]["range"]["prefixItems"][0],
        json!({"type": "integer"})
    );
    assert_eq!(legacy.input["dependentRequired"], json!({"field": ["q"]}));
    assert!(legacy
        .description
        .as_deref()
        .unwrap()
        .contains("kind: AgentPolicy"));
    assert!(!out
        .yaml
        .lines()
        .any(|l| l == "kind: AgentPolicy" || l == "# review: nothing to see"));

    // The conversation: initialize, initialized, tools/list per page, the session's DELETE;
    // the negotiated revision on every request after initialize; the token on all.
    let requests = server.requests();
    let rpc: Vec<&str> = requests
        .iter()
        .map(|r| r["rpc"].as_str().unwrap_or(r["http"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rpc,
        vec![
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list",
            "tools/list",
            "DELETE"
        ]
    );
    assert!(requests.iter().all(|r| r["auth"] == true));
    assert!(requests[1..]
        .iter()
        .all(|r| r["protocol"] == "2025-11-25" && r["session"] == true));
}

#[test]
fn json_answers_and_page_sizes_draft_the_same_bytes() {
    let sse = DraftServer::start(&["--page-size", "2"]);
    let json_server = DraftServer::start(&["--json-response", "--page-size", "50"]);
    let a = draft(&["--from-mcp", &sse.url]);
    let b = draft(&["--from-mcp", &json_server.url]);
    assert_eq!(
        (a.code, b.code),
        (Some(0), Some(0)),
        "{} {}",
        a.stderr,
        b.stderr
    );
    assert_eq!(body_of(&a.yaml), body_of(&b.yaml));
    let pages = json_server
        .requests()
        .iter()
        .filter(|r| r["rpc"] == "tools/list")
        .count();
    assert_eq!(pages, 1);
    assert_eq!(
        sse.requests()
            .iter()
            .filter(|r| r["rpc"] == "tools/list")
            .count(),
        5
    );
    check(&b.yaml);
}

#[test]
fn a_server_that_wants_a_token_refuses_none_and_a_wrong_one() {
    let server = DraftServer::start(&["--token", TOKEN]);
    let none = draft(&["--from-mcp", &server.url]);
    assert_eq!(none.code, Some(2));
    assert!(none.yaml.is_empty());
    assert!(
        none.stderr.contains("initialize was answered with HTTP 401; the server wants a credential: pass --token-file FILE"),
        "{}",
        none.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let wrong = token_file(dir.path(), "wrong-token-value-123");
    let refused = draft(&[
        "--from-mcp",
        &server.url,
        "--token-file",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(refused.code, Some(2));
    assert!(
        refused
            .stderr
            .contains("HTTP 401; the server refused the token in --token-file"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stderr.contains("wrong-token-value-123"));
    // A token from a pipe (`--token-file <(vault read …)`) works as a file does.
    let mut piped = toolgate()
        .args([
            "contracts",
            "draft",
            "--from-mcp",
            &server.url,
            "--token-file",
            "/dev/stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    piped
        .stdin
        .take()
        .unwrap()
        .write_all(TOKEN.as_bytes())
        .unwrap();
    let piped = piped.wait_with_output().unwrap();
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert_eq!(
        contracts(&String::from_utf8(piped.stdout).unwrap()).len(),
        9
    );
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let out = draft(&[
        "--from-mcp",
        &server.url,
        "--token-file",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("the token file") && out.stderr.contains("empty"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_cursor_that_repeats_ends_the_listing_with_an_error() {
    let server = DraftServer::start(&["--loop-cursor"]);
    let started = Instant::now();
    let out = draft(&["--from-mcp", &server.url]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("tools/list: the server repeated a nextCursor"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    // The session still ends.
    assert_eq!(server.requests().last().unwrap()["http"], "DELETE");
}

/// A loopback listener that answers every connection with `answer` and closes it, or
/// (`None`) holds it open and never answers.
fn raw_server(answer: Option<&'static str>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            match answer {
                // Answer, then close: the body ends where the answer does.
                Some(answer) => {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf);
                    let _ = stream.write_all(answer.as_bytes());
                }
                None => held.push(stream),
            }
        }
    });
    addr
}

#[test]
fn unreachable_silent_and_foreign_servers_exit_2() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = draft(&["--from-mcp", &format!("http://{closed}/mcp?api_key=s3cret")]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains(&format!("http://{closed}/mcp: unreachable")),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("s3cret"));

    let silent = raw_server(None);
    let started = Instant::now();
    let out = draft(&[
        "--from-mcp",
        &format!("http://{silent}/mcp"),
        "--timeout-seconds",
        "1",
    ]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("no answer to initialize within 1s"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    let html = raw_server(Some(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    ));
    let out = draft(&["--from-mcp", &format!("http://{html}/")]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("initialize: the answer is text/html"),
        "{}",
        out.stderr
    );

    let missing = raw_server(Some(
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ));
    let out = draft(&["--from-mcp", &format!("http://{missing}/")]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("HTTP 404; is this the server's MCP endpoint"),
        "{}",
        out.stderr
    );

    for (args, says) in [
        (
            vec!["--from-mcp", "ftp://h/mcp"],
            "must be an http:// or https:// URL",
        ),
        (
            vec!["--from-mcp", "http://user:pw@127.0.0.1:1/mcp"],
            "credentials in the URL are never sent",
        ),
    ] {
        let out = draft(&args);
        assert_eq!(out.code, Some(2), "{args:?}");
        assert!(
            out.stderr.contains(says) && !out.stderr.contains("pw@"),
            "{}",
            out.stderr
        );
    }
}

/// An https server whose self-signed certificate no system root trusts; it counts the
/// plaintext bytes it ever receives.
fn untrusted_tls_server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let config = std::sync::Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = received.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = tls.read(&mut buf) {
                counter.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    (addr, received)
}

#[test]
fn an_untrusted_certificate_is_refused_before_the_token_is_sent() {
    let (addr, received) = untrusted_tls_server();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), TOKEN);
    let url = format!("https://localhost:{}/mcp", addr.port());
    let out = draft(&["--from-mcp", &url, "--token-file", token.to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains(&format!("{url}: unreachable")) && out.stderr.contains("certificate"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(TOKEN));
    assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn answers_a_client_cant_trust_are_errors_not_guesses() {
    let cases = [
        (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n\
             event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n\
             data: {\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n\n",
            "initialize: the stream ended without a response to it",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n\
             {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"1999-01-01\\n# review: x\"}}",
            "initialize: the server chose protocol revision \"1999-01-01 # review: x\"",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n\
             {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32600,\"message\":\"no\"}}",
            "initialize failed with JSON-RPC error -32600: no",
        ),
        (
            "HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example/mcp\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "HTTP 302; redirects are not followed",
        ),
    ];
    for (answer, says) in cases {
        let addr = raw_server(Some(answer));
        let out = draft(&["--from-mcp", &format!("http://{addr}/mcp")]);
        assert_eq!(out.code, Some(2), "{says}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{says}: {}", out.stderr);
        assert!(out.yaml.is_empty());
    }
}

#[test]
fn the_typescript_reference_server_drafts_and_passes_check() {
    let peer = peers::Peer::everything_server();
    let out = draft(&["--from-mcp", &format!("http://{}/mcp", peer.addr)]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let all = contracts(&out.yaml);
    assert!(all.len() >= 5, "{}", out.yaml);
    let echo = spec(&all, "echo");
    assert!(
        echo.input["properties"].get("message").is_some(),
        "{:?}",
        echo.input
    );
    check(&out.yaml);
}

#[test]
fn usage_mistakes_are_refused_by_the_command_line() {
    for args in [
        vec![],
        vec!["--from-mcp", "http://h/mcp", "--from-openapi", "x.yaml"],
        vec!["--from-openapi", "x.yaml", "--token-file", "t"],
        vec!["--from-mcp", "http://h/mcp", "--base-path", "/v1"],
    ] {
        let out = draft(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.yaml.is_empty());
    }
}

// --- OpenAPI ---

#[test]
fn openapi_30_yaml_with_refs_nullable_and_merged_arguments() {
    let path = fixture("petstore-3.0.yaml");
    let out = draft(&["--from-openapi", path.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(check(&out.yaml).contains("ok: 7 objects in 1 files"));
    // Deterministic: the same document drafts the same bytes.
    assert_eq!(
        draft(&["--from-openapi", path.to_str().unwrap()]).yaml,
        out.yaml
    );
    assert!(out
        .yaml
        .contains("# Paths are prefixed with /v1, the path of servers[0].url"));
    assert!(out
        .yaml
        .contains("# review: the API requires credentials (bearerAuth)"));
    let all = contracts(&out.yaml);
    let tools: Vec<&str> = all.iter().map(|(_, s)| s.tool.as_str()).collect();
    assert_eq!(
        tools,
        vec![
            "list_pets",
            "create_pet",
            "bulk_create_pets",
            "show_pet_by_id",
            "delete_pets_pet_id",
            "update_pet",
            "upload_photo"
        ]
    );
    let binding = |tool: &str| {
        let h = spec(&all, tool).http.clone().unwrap();
        (h.method, h.path)
    };
    assert_eq!(binding("list_pets"), ("GET".into(), "/v1/pets".into()));
    assert_eq!(
        binding("show_pet_by_id"),
        ("GET".into(), "/v1/pets/{petId}".into())
    );
    let idempotent: Vec<Option<bool>> = all.iter().map(|(_, s)| s.idempotent).collect();
    assert_eq!(
        idempotent,
        [true, false, false, true, true, false, false].map(Some)
    );

    // Query parameters (a $ref'd one with its default), not the header parameter.
    let list = spec(&all, "list_pets");
    assert_eq!(
        list.input["properties"]["limit"],
        json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 20, "description": "How many pets to return."})
    );
    assert!(list.input["properties"].get("X-Request-Id").is_none());
    assert_eq!(list.input["additionalProperties"], json!(false));
    let list_notes = notes_of(&out.yaml, "GET /pets (operationId listPets)");
    assert!(
        list_notes.contains("# review: header and cookie parameters are not arguments"),
        "{list_notes}"
    );
    assert!(
        list_notes.contains("# review: query parameter tags is an array"),
        "{list_notes}"
    );
    // The response: Pet's allOf flattened, 3.0's nullable a null type, writeOnly gone.
    let pet = &list.output.as_ref().unwrap()["items"];
    assert_eq!(pet["properties"]["tag"]["type"], json!(["string", "null"]));
    assert_eq!(pet["required"], json!(["name", "id"]));
    assert!(pet["properties"].get("secret").is_none());

    // A path parameter from the path item: boolean exclusiveMinimum became the bound.
    let show = spec(&all, "show_pet_by_id");
    assert_eq!(show.input["required"], json!(["petId"]));
    assert_eq!(
        show.input["properties"]["petId"]["exclusiveMinimum"],
        json!(0)
    );
    assert!(show.input["properties"]["petId"].get("minimum").is_none());

    // The body's properties (through a $ref'd requestBody and an allOf) are arguments;
    // readOnly id is not; `example` became `examples`.
    let create = spec(&all, "create_pet");
    let props = create.input["properties"].as_object().unwrap();
    assert_eq!(props.keys().collect::<Vec<_>>(), vec!["age", "name", "tag"]);
    assert_eq!(props["age"]["examples"], json!([3]));
    assert_eq!(create.input["required"], json!(["name"]));

    // Path + query + body merged; the body's petId can't be sent beside the path's.
    let update = spec(&all, "update_pet");
    assert_eq!(update.input["properties"]["petId"]["format"], "int64");
    assert_eq!(
        update.input["properties"]["dryRun"],
        json!({"type": "boolean", "default": false})
    );
    assert_eq!(
        update.input["properties"]["name"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(update.input["required"], json!(["petId"]));
    let update_notes = notes_of(&out.yaml, "PATCH /pets/{petId} (operationId updatePet)");
    assert!(
        update_notes.contains("# review: petId is both a path parameter and a body property"),
        "{update_notes}"
    );
    assert!(
        update_notes.contains("# review: the body is optional, so its required properties (name)"),
        "{update_notes}"
    );

    // Bodies toolgate can't merge are said, not guessed.
    assert!(
        notes_of(&out.yaml, "POST /pets/bulk (operationId bulkCreatePets)")
            .contains("# review: the request body is \"array\" (not an object)")
    );
    assert!(notes_of(
        &out.yaml,
        "POST /pets/{petId}/photo (operationId uploadPhoto)"
    )
    .contains("# review: the request body is multipart/form-data"));
    assert_eq!(
        spec(&all, "bulk_create_pets").input,
        json!({"type": "object", "additionalProperties": false})
    );
    assert!(notes_of(&out.yaml, "DELETE /pets/{petId}").contains("# review: no operationId"));
    assert!(
        out.stderr
            .contains("drafted 7 contracts (0 left commented out)"),
        "{}",
        out.stderr
    );
}

#[test]
fn base_path_replaces_the_servers_prefix() {
    let path = fixture("petstore-3.0.yaml");
    let out = draft(&[
        "--from-openapi",
        path.to_str().unwrap(),
        "--base-path",
        "/petstore/",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let all = contracts(&out.yaml);
    assert_eq!(
        spec(&all, "list_pets").http.as_ref().unwrap().path,
        "/petstore/pets"
    );
    check(&out.yaml);
    let bare = draft(&["--from-openapi", path.to_str().unwrap(), "--base-path", ""]);
    assert_eq!(
        spec(&contracts(&bare.yaml), "show_pet_by_id")
            .http
            .as_ref()
            .unwrap()
            .path,
        "/pets/{petId}"
    );
    let bad = draft(&[
        "--from-openapi",
        path.to_str().unwrap(),
        "--base-path",
        "v1",
    ]);
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.contains("--base-path \"v1\": must start with /"),
        "{}",
        bad.stderr
    );
}

#[test]
fn openapi_31_json_keeps_a_recursive_schema_under_defs() {
    let out = draft(&[
        "--from-openapi",
        fixture("catalog-3.1.json").to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(check(&out.yaml).contains("ok: 3 objects"));
    let all = contracts(&out.yaml);
    let tree = spec(&all, "get_category_tree");
    assert_eq!(tree.http.as_ref().unwrap().path, "/api/categories/{id}");
    assert_eq!(
        tree.input["properties"]["depth"]["type"],
        json!(["integer", "null"])
    );
    assert_eq!(
        tree.input["properties"]["depth"]["exclusiveMinimum"],
        json!(0)
    );
    let output = tree.output.as_ref().unwrap();
    // The tree's own fields at the top; its recursion through $defs.
    assert_eq!(output["required"], json!(["id", "name"]));
    assert_eq!(
        output["properties"]["children"]["items"],
        json!({"$ref": "#/$defs/Category"})
    );
    assert_eq!(
        output["$defs"]["Category"]["properties"]["children"]["items"],
        json!({"$ref": "#/$defs/Category"})
    );
    // A $ref with a sibling description: the referenced schema, described.
    let replace = spec(&all, "replace_category");
    assert_eq!(
        replace.input["properties"]["name"],
        json!({"type": "string", "minLength": 1, "maxLength": 80, "description": "The new name."})
    );
    assert_eq!(replace.input["required"], json!(["id", "name"]));
    assert_eq!(replace.input["additionalProperties"], json!(false));
    assert_eq!(replace.idempotent, Some(true));
    // A +json body; its oneOf must still hold for the whole arguments object.
    let search = spec(&all, "search_catalog");
    assert_eq!(
        search.input["allOf"][0]["oneOf"][0],
        json!({"required": ["q"]})
    );
    assert!(
        notes_of(&out.yaml, "POST /search (operationId search-catalog)")
            .contains("# review: the body schema's oneOf apply to the whole argument object")
    );
}

#[test]
fn a_ref_cycle_is_reported_not_looped() {
    let started = Instant::now();
    let out = draft(&["--from-openapi", fixture("cycle.yaml").to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    assert!(out.yaml.is_empty());
    assert!(
        out.stderr.contains(
            "cycle.yaml: POST /things: $ref cycle that never reaches a property or item: \
             #/components/schemas/Thing -> #/components/schemas/Alias -> #/components/schemas/Thing"
        ),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn malformed_documents_exit_2_with_the_reason() {
    let out = draft(&[
        "--from-openapi",
        fixture("malformed.yaml").to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("malformed.yaml is neither JSON nor YAML: YAML:"),
        "{}",
        out.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("swagger: '2.0'\npaths: {}\n", "a Swagger 2.0 document: convert it to OpenAPI 3 first"),
        ("info: {title: x}\n", "no `openapi` field"),
        ("openapi: 2.5.0\n", "OpenAPI 2.5.0: only 3.0 and 3.1 are supported"),
        ("openapi: 3.0.0\npaths: [a]\n", "`paths` must be a mapping"),
        ("[1, 2]\n", "the document is not a mapping"),
        ("{\"openapi\": \"3.1.0\", ", "neither JSON nor YAML: JSON:"),
        (
            "openapi: 3.1.0\npaths:\n  /a:\n    get:\n      responses:\n        '200':\n          content:\n            application/json:\n              schema: {$ref: 'common.yaml#/Pet'}\n",
            "GET /a: $ref \"common.yaml#/Pet\" points outside the document",
        ),
        (
            "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      parameters: [{$ref: '#/components/parameters/Nope'}]\n",
            "GET /a: $ref \"#/components/parameters/Nope\" points at nothing in the document",
        ),
    ];
    for (i, (text, says)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("doc{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let out = draft(&["--from-openapi", file.to_str().unwrap()]);
        assert_eq!(out.code, Some(2), "{text}");
        assert!(out.stderr.contains(says), "{text}: {}", out.stderr);
        assert!(out.yaml.is_empty());
    }
    let out = draft(&[
        "--from-openapi",
        dir.path().join("absent.yaml").to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("absent.yaml"), "{}", out.stderr);
}

#[test]
fn what_check_would_refuse_is_left_commented_out() {
    // Two templates one router can't tell apart (OpenAPI forbids them; documents have them
    // anyway), a segment with two parameters, and tool names that snake_case together.
    let doc = r#"
openapi: 3.0.3
info: {title: Clash, version: '1'}
paths:
  /items/{id}:
    get: {operationId: getItem, responses: {'200': {description: ok}}}
  /items/{name}:
    get: {operationId: get_item, responses: {'200': {description: ok}}}
  /files/{stem}.{ext}:
    get: {operationId: getFile, responses: {'200': {description: ok}}}
"#;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clash.yaml");
    std::fs::write(&file, doc).unwrap();
    let out = draft(&["--from-openapi", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(check(&out.yaml).contains("ok: 1 objects"), "{}", out.yaml);
    assert!(out.yaml.contains("# review: left commented out: toolgate check refuses it (spec.http: route /items/{name} conflicts"), "{}", out.yaml);
    assert!(out.yaml.contains("#   tool: get_item_2\n"), "{}", out.yaml);
    assert!(
        out.yaml
            .contains("# review: tool get_item is also the name drafted for GET /items/{id}"),
        "{}",
        out.yaml
    );
    assert!(
        out.yaml.contains("#     path: /files/{stem}.{ext}\n"),
        "{}",
        out.yaml
    );
    assert!(
        out.stderr
            .contains("drafted 1 contracts (2 left commented out)"),
        "{}",
        out.stderr
    );
}

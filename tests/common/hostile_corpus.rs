//! The rows of the hostile-input corpus (tests/hostile.rs): grouped by where the
//! hostility is (HTTP framing, paths, headers, bodies, JSON-RPC, the backend, identity,
//! CEL), each with the bytes to send and the answer a hostile client must get.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::time::Duration;

use crate::common::keys::{hs256_with, now, unsigned, SigningKey};
use crate::common::raw::{request, RawReply, Step};
use crate::common::OPS_TOKEN;

pub struct Keys {
    /// Signs agent JWTs (issuer `https://idp.example`).
    pub idp: SigningKey,
    /// Signs task tokens (issuer `orchestrator`).
    pub orchestrator: SigningKey,
}

/// What a row must get back.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// The REST error body: HTTP status and code.
    Refused(u16, &'static str),
    /// As `Refused`, with `Connection: close` and the connection closed.
    RefusedAndClosed(u16, &'static str),
    /// A JSON-RPC error (HTTP status, JSON-RPC code) whose `data` is the error body.
    RpcError(u16, i64, &'static str),
    /// A tool result with `isError: true` whose `structuredContent` is the error body.
    ToolError(&'static str),
    /// HTTP itself is broken: the connection ends, with at most hyper's bare status.
    Closed,
    /// Served as the plain HTTP/1.1 call it also is (the hostile part ignored), with
    /// this status.
    Served(u16),
}

impl Expect {
    pub fn code(&self) -> &'static str {
        match *self {
            Expect::Refused(_, c) | Expect::RefusedAndClosed(_, c) => c,
            Expect::RpcError(_, _, c) | Expect::ToolError(c) => c,
            Expect::Closed | Expect::Served(_) => "",
        }
    }
}

pub type Extra = fn(&RawReply) -> Result<(), String>;

pub struct Case {
    pub group: &'static str,
    pub name: &'static str,
    pub steps: Vec<Step>,
    pub expect: Expect,
    /// Requests the backend sees for this row: 0 unless the backend is the hostile side.
    pub forwarded: usize,
    pub deadline: Duration,
    pub extra: Option<Extra>,
    /// Which answer on the connection is this row's (1-based; pipelined requests).
    pub answer: usize,
}

fn row(group: &'static str, name: &'static str, bytes: Vec<u8>, expect: Expect) -> Case {
    steps(group, name, vec![Step::Send(bytes)], expect)
}

fn steps(group: &'static str, name: &'static str, steps: Vec<Step>, expect: Expect) -> Case {
    Case {
        group,
        name,
        steps,
        expect,
        forwarded: 0,
        deadline: Duration::from_secs(5),
        extra: None,
        answer: 1,
    }
}

/// A row whose bytes are made when it runs (large rows).
fn lazy(group: &'static str, name: &'static str, make: fn() -> Vec<u8>, expect: Expect) -> Case {
    steps(group, name, vec![Step::Make(make)], expect)
}

impl Case {
    fn forwarded(mut self, n: usize) -> Case {
        self.forwarded = n;
        self
    }

    fn with(mut self, extra: Extra) -> Case {
        self.extra = Some(extra);
        self
    }
}

const MALFORMED: &str = "MALFORMED_REQUEST";
const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
const OUT_OF_SCOPE: &str = "OUT_OF_TASK_SCOPE";
const DENIED: &str = "POLICY_DENIED";

fn bearer() -> String {
    format!("Bearer {OPS_TOKEN}")
}

/// An authenticated GET.
fn get(path: &str) -> Vec<u8> {
    request("GET", path, &[("Authorization", &bearer())], b"")
}

/// An authenticated GET with a credential of its own.
fn get_as(path: &str, token: &str) -> Vec<u8> {
    request(
        "GET",
        path,
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    )
}

/// An authenticated JSON POST.
fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let auth = bearer();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    request("POST", path, &headers, body)
}

/// An authenticated MCP POST, with the headers a Streamable HTTP client sends.
pub fn mcp_request(body: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let auth = bearer();
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    request("POST", "/mcp", &headers, body.as_bytes())
}

fn tool_call(name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
           "params": {"name": name, "arguments": {}}})
    .to_string()
}

/// The JSON-RPC response in a reply: the JSON body, or the last response event of SSE.
pub fn rpc_answer(reply: &RawReply) -> Value {
    let sse = reply
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !sse {
        return reply.json();
    }
    String::from_utf8_lossy(&reply.body)
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or(Value::Null)
}

/// `body` in the chunked encoding, `piece` bytes a chunk.
fn chunked(body: &[u8], piece: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / piece * 8 + 8);
    for chunk in body.chunks(piece) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A head with the given extra header lines, written as is.
fn head_with(first: &str, lines: &[String]) -> Vec<u8> {
    let mut out = format!(
        "{first}\r\nHost: toolgate.test\r\nAuthorization: {}\r\n",
        bearer()
    );
    for line in lines {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

pub fn all_cases(keys: &Keys) -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(framing());
    cases.extend(paths());
    cases.extend(headers());
    cases.extend(bodies());
    cases.extend(json_rpc());
    cases.extend(backend());
    cases.extend(identity(keys));
    cases.extend(cel());
    cases
}

fn framing() -> Vec<Case> {
    let g = "http framing";
    let issue = br#"{"project_key":"OPS","title":"x"}"#;
    let cl_te = {
        let mut head = head_with(
            "POST /issues HTTP/1.1",
            &[
                "Content-Length: 5".into(),
                "Transfer-Encoding: chunked".into(),
            ],
        );
        head.extend_from_slice(&chunked(issue, 64));
        head
    };
    let te_cl = {
        let mut head = head_with(
            "POST /issues HTTP/1.1",
            &[
                "Transfer-Encoding: chunked".into(),
                "Content-Length: 40".into(),
            ],
        );
        head.extend_from_slice(&chunked(issue, 64));
        head
    };
    let mut pipelined = get("/logs/orders");
    pipelined.extend_from_slice(&cl_te);
    let h2c = [
        ("Connection", "Upgrade, HTTP2-Settings"),
        ("Upgrade", "h2c"),
        ("HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
    ];
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0xff; 64]);
    vec![
        row(
            g,
            "content-length then transfer-encoding",
            cl_te,
            Expect::RefusedAndClosed(400, MALFORMED),
        ),
        row(
            g,
            "transfer-encoding then content-length",
            te_cl,
            Expect::RefusedAndClosed(400, MALFORMED),
        ),
        // The second request of a kept-alive connection: the first is served (forwarded).
        Case {
            answer: 2,
            ..row(
                g,
                "smuggling shape after a good request",
                pipelined,
                Expect::RefusedAndClosed(400, MALFORMED),
            )
        }
        .forwarded(1),
        row(
            g,
            "two different content-lengths",
            head_with(
                "POST /issues HTTP/1.1",
                &["Content-Length: 5".into(), "Content-Length: 6".into()],
            ),
            Expect::Closed,
        ),
        row(
            g,
            "transfer-encoding not ending in chunked",
            head_with(
                "POST /issues HTTP/1.1",
                &["Transfer-Encoding: chunked, gzip".into()],
            ),
            Expect::Closed,
        ),
        row(
            g,
            "transfer-encoding on HTTP/1.0",
            head_with(
                "POST /issues HTTP/1.0",
                &["Transfer-Encoding: chunked".into()],
            ),
            Expect::Closed,
        ),
        row(
            g,
            "bad chunk size",
            {
                let mut head = head_with(
                    "POST /issues HTTP/1.1",
                    &[
                        "Transfer-Encoding: chunked".into(),
                        "Content-Type: application/json".into(),
                    ],
                );
                head.extend_from_slice(b"zz\r\n{}\r\n0\r\n\r\n");
                head
            },
            Expect::Refused(400, MALFORMED),
        ),
        row(
            g,
            "h2c upgrade without a credential",
            request("GET", "/logs/orders", &h2c, b""),
            Expect::Refused(401, UNAUTHENTICATED),
        ),
        // Upgrades are never honoured: the call is governed as HTTP/1.1 and the backend
        // gets no Upgrade header.
        row(
            g,
            "h2c upgrade of a good call",
            {
                let mut headers = h2c.to_vec();
                let auth = bearer();
                headers.push(("Authorization", auth.as_str()));
                request("GET", "/logs/orders", &headers, b"")
            },
            Expect::Served(200),
        )
        .forwarded(1),
        row(
            g,
            "tab before transfer-encoding's value, with content-length",
            head_with(
                "POST /issues HTTP/1.1",
                &[
                    "Transfer-Encoding:\tchunked".into(),
                    "Content-Length: 5".into(),
                ],
            ),
            Expect::RefusedAndClosed(400, MALFORMED),
        ),
        row(
            g,
            "content-length padded to 10 KiB with zeros",
            {
                let length = format!("Content-Length: {}34", "0".repeat(10 * 1024));
                let mut head = head_with("POST /issues HTTP/1.1", &[length]);
                head.extend_from_slice(issue);
                head
            },
            Expect::RefusedAndClosed(400, MALFORMED),
        ),
        row(g, "http/2 preface then garbage", preface, Expect::Closed),
        row(
            g,
            "websocket upgrade of the MCP stream without a credential",
            request(
                "GET",
                "/mcp",
                &[
                    ("Connection", "Upgrade"),
                    ("Upgrade", "websocket"),
                    ("Sec-WebSocket-Version", "13"),
                    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ],
                b"",
            ),
            Expect::RpcError(401, -32010, UNAUTHENTICATED),
        ),
        row(
            g,
            "unknown HTTP version",
            b"GET /logs/orders HTTP/9.9\r\nHost: x\r\n\r\n".to_vec(),
            Expect::Closed,
        ),
        row(
            g,
            "absolute-form target naming another host (the port is no forward proxy)",
            get("http://169.254.169.254/latest/meta-data"),
            Expect::Refused(400, MALFORMED),
        ),
        row(
            g,
            "asterisk-form target",
            request("OPTIONS", "*", &[("Authorization", &bearer())], b""),
            Expect::Refused(400, MALFORMED),
        ),
        row(
            g,
            "CONNECT to an internal port",
            request(
                "CONNECT",
                "127.0.0.1:22",
                &[("Authorization", &bearer())],
                b"",
            ),
            Expect::Refused(400, MALFORMED),
        ),
    ]
}

fn paths() -> Vec<Case> {
    let g = "paths";
    let refused = Expect::Refused(400, MALFORMED);
    let raw = |path: &[u8]| {
        let mut out = b"GET ".to_vec();
        out.extend_from_slice(path);
        out.extend_from_slice(
            format!(
                " HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
                bearer()
            )
            .as_bytes(),
        );
        out
    };
    let long = format!("/logs/{}", "a".repeat(300 * 1024));
    vec![
        row(g, "dot-dot segment", get("/logs/../admin/reset"), refused),
        row(
            g,
            "percent-encoded dot-dot",
            get("/logs/%2e%2e/admin/reset"),
            refused,
        ),
        row(
            g,
            "half-encoded dot-dot in upper case",
            get("/logs/.%2E/admin/reset"),
            refused,
        ),
        row(g, "single-dot segment", get("/logs/./orders"), refused),
        row(
            g,
            "encoded slash",
            get("/logs/orders%2F..%2Fadmin"),
            refused,
        ),
        row(
            g,
            "encoded slash in lower case",
            get("/logs/orders%2f..%2fadmin"),
            refused,
        ),
        row(
            g,
            "encoded backslash",
            get("/logs/orders%5C..%5Cadmin"),
            refused,
        ),
        row(g, "raw backslash", raw(b"/logs/..\\admin"), refused),
        row(g, "encoded NUL", get("/logs/orders%00.json"), refused),
        row(g, "raw NUL", raw(b"/logs/orders\0.json"), Expect::Closed),
        row(
            g,
            "encoded CR LF",
            get("/logs/orders%0d%0aX-Injected:%201"),
            refused,
        ),
        row(
            g,
            "raw control byte",
            raw(b"/logs/ord\x01ers"),
            Expect::Closed,
        ),
        row(
            g,
            "double-encoded dot-dot",
            get("/logs/%252e%252e/admin"),
            refused,
        ),
        row(
            g,
            "servlet path parameter dot-dot",
            get("/logs/..;/admin/reset"),
            refused,
        ),
        row(
            g,
            "invalid UTF-8 when decoded",
            get("/logs/%ff%fe"),
            refused,
        ),
        row(g, "broken percent escape", get("/logs/%zz"), refused),
        row(g, "raw non-ASCII bytes", raw(b"/logs/\xc3\xa9"), refused),
        row(
            g,
            "traversal out of the MCP path",
            post("/mcp/../logs/orders", b"{}"),
            refused,
        ),
        row(
            g,
            "encoded traversal into the MCP path",
            post("/logs%2f..%2fmcp", b"{}"),
            refused,
        ),
        row(g, "request target of 300 KiB", get(&long), Expect::Closed),
    ]
}

fn headers() -> Vec<Case> {
    let g = "headers";
    let many = |n: usize| {
        (0..n)
            .map(|i| format!("X-Pad-{i}: {i}"))
            .collect::<Vec<_>>()
    };
    let auth = bearer();
    vec![
        row(g, "one header over maxHeaders", head_with("GET /logs/orders HTTP/1.1", &many(99)), Expect::Refused(431, "HEADERS_TOO_LARGE")),
        row(g, "a thousand headers", head_with("GET /logs/orders HTTP/1.1", &many(1000)), Expect::Closed),
        row(
            g,
            "one header of 300 KiB",
            head_with("GET /logs/orders HTTP/1.1", &[format!("X-Big: {}", "b".repeat(300 * 1024))]),
            Expect::Closed,
        ),
        row(
            g,
            "obsolete line folding",
            head_with("GET /logs/orders HTTP/1.1", &["X-Folded: a".into(), " continued".into()]),
            Expect::Closed,
        ),
        row(
            g,
            "session id of 300 characters",
            request("GET", "/logs/orders", &[("Authorization", &auth), ("X-Toolgate-Session", &"s".repeat(300))], b""),
            Expect::Refused(400, MALFORMED),
        ),
        row(
            g,
            "two MCP session ids",
            head_with("GET /logs/orders HTTP/1.1", &["Mcp-Session-Id: mine".into(), "Mcp-Session-Id: theirs".into()]),
            Expect::Refused(400, MALFORMED),
        ),
        row(
            g,
            "two idempotency keys",
            head_with("GET /logs/orders HTTP/1.1", &["Idempotency-Key: k1".into(), "Idempotency-Key: k2".into()]),
            Expect::Refused(400, MALFORMED),
        ),
        row(
            g,
            "two credentials",
            request("GET", "/logs/orders", &[("Authorization", "Bearer stranger-token-789"), ("Authorization", &auth)], b""),
            Expect::Refused(401, UNAUTHENTICATED),
        ),
        row(
            g,
            "spoofed X-Toolgate-Agent without a credential",
            request("GET", "/logs/orders", &[("X-Toolgate-Agent", "ops-bot"), ("X-Toolgate-Decision", "allow")], b""),
            Expect::Refused(401, UNAUTHENTICATED),
        ),
        row(
            g,
            "credential with non-ASCII bytes",
            b"GET /logs/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ops-token-123\xff\xfe\r\n\r\n".to_vec(),
            Expect::Refused(401, UNAUTHENTICATED),
        ),
        row(g, "opaque bearer of 60 KiB", get_as("/logs/orders", &"t".repeat(60 * 1024)), Expect::Refused(401, UNAUTHENTICATED)),
        row(g, "basic scheme", request("GET", "/logs/orders", &[("Authorization", "Basic b3BzLWJvdDpwdw==")], b""), Expect::Refused(401, UNAUTHENTICATED)),
    ]
}

fn bodies() -> Vec<Case> {
    let g = "bodies and JSON";
    let refused = Expect::Refused(400, MALFORMED);
    let too_large = Expect::Refused(413, "PAYLOAD_TOO_LARGE");
    let slow_head = format!("POST /issues HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", bearer());
    vec![
        lazy(g, "declared body over maxBodyBytes", big_declared, too_large),
        lazy(g, "chunked body over maxBodyBytes", big_chunked, too_large),
        lazy(g, "arrays nested 200,000 deep", deep_arrays, refused),
        lazy(g, "objects nested 100,000 deep", deep_objects, refused),
        // The rule reads the last `project_key`; a first-wins backend would create in SEC.
        row(g, "duplicate keys", post("/issues", br#"{"project_key":"SEC","title":"x","project_key":"OPS"}"#), refused),
        row(g, "invalid UTF-8 in a JSON string", post("/issues", b"{\"project_key\":\"\xff\xfe\",\"title\":\"x\"}"), refused),
        row(g, "a JSON array, not an object", post("/issues", b"[1,2,3]"), refused),
        row(g, "a number past f64", post("/issues", br#"{"project_key":"OPS","title":"x","n":1e999}"#), refused),
        steps(g, "slowloris head", vec![Step::Trickle(b"GET /logs/orders HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_vec(), Duration::from_millis(100))], Expect::Closed),
        steps(g, "connection that never sends", vec![Step::Pause(Duration::from_secs(3))], Expect::Closed),
        steps(g, "slowloris body that stops", vec![Step::Send(slow_head.clone().into_bytes()), Step::Send(b"{\"project_key\"".to_vec()), Step::Pause(Duration::from_secs(3))], refused),
        steps(g, "slowloris body trickled", vec![Step::Send(slow_head.into_bytes()), Step::Trickle(vec![b' '; 100], Duration::from_millis(100))], refused),
    ]
}

fn json_rpc() -> Vec<Case> {
    let g = "JSON-RPC and MCP";
    let parse = Expect::RpcError(400, -32700, MALFORMED);
    let invalid = Expect::RpcError(400, -32600, MALFORMED);
    let with_id = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"mcp_logs","arguments":{{}}}}}}"#
        )
    };
    vec![
        row(g, "not JSON", mcp_request("{nope", &[]), parse),
        lazy(g, "nested 100,000 deep", deep_rpc, parse),
        // Judged as ping (last), a first-wins upstream would run the tool ungoverned.
        row(
            g,
            "method given twice",
            mcp_request(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"secret_tool"},"method":"ping"}"#,
                &[],
            ),
            parse,
        ),
        row(
            g,
            "invalid UTF-8",
            {
                let mut body =
                    br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":""#.to_vec();
                body.extend_from_slice(b"\xc0\xaf\"}}");
                let auth = bearer();
                request(
                    "POST",
                    "/mcp",
                    &[
                        ("Authorization", &auth),
                        ("Content-Type", "application/json"),
                    ],
                    &body,
                )
            },
            parse,
        ),
        row(g, "id null", mcp_request(&with_id("null"), &[]), invalid),
        row(g, "id true", mcp_request(&with_id("true"), &[]), invalid),
        row(
            g,
            "id object",
            mcp_request(&with_id(r#"{"a":1}"#), &[]),
            invalid,
        ),
        row(g, "id array", mcp_request(&with_id("[1,2]"), &[]), invalid),
        row(g, "id fraction", mcp_request(&with_id("1.5"), &[]), invalid),
        row(
            g,
            "id integer past 64 bits",
            mcp_request(&with_id("1180591620717411303424"), &[]),
            // Refused as it is read: no number a double would round is read at all.
            parse,
        ),
        row(
            g,
            "id number past f64",
            mcp_request(&with_id("1e400"), &[]),
            parse,
        ),
        row(
            g,
            "id string of 400 KiB, echoed whole",
            huge_string_id(),
            Expect::RpcError(200, -32602, "UNKNOWN_TOOL"),
        )
        .with(
            |reply| match rpc_answer(reply)["id"].as_str().map(str::len) {
                Some(n) if n == 400 * 1024 => Ok(()),
                other => Err(format!("the id came back as {other:?} characters")),
            },
        ),
        lazy(g, "batch of 10,000 pings", small_batch, invalid),
        lazy(
            g,
            "batch of 10,000 in 10 MB, chunked",
            big_batch,
            Expect::RpcError(413, -32600, "PAYLOAD_TOO_LARGE"),
        ),
        row(g, "empty batch", mcp_request("[]", &[]), invalid),
        row(
            g,
            "jsonrpc 1.0",
            mcp_request(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, &[]),
            invalid,
        ),
        row(
            g,
            "method not a string",
            mcp_request(r#"{"jsonrpc":"2.0","id":1,"method":["tools/call"]}"#, &[]),
            invalid,
        ),
        row(
            g,
            "params not a structure",
            mcp_request(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"mcp_logs"}"#,
                &[],
            ),
            invalid,
        ),
        row(
            g,
            "session id never issued",
            mcp_request(
                &tool_call("mcp_logs"),
                &[("Mcp-Session-Id", "forged-session")],
            ),
            Expect::RpcError(404, -32600, MALFORMED),
        ),
        row(
            g,
            "no credential",
            request(
                "POST",
                "/mcp",
                &[("Content-Type", "application/json")],
                tool_call("mcp_logs").as_bytes(),
            ),
            Expect::RpcError(401, -32010, UNAUTHENTICATED),
        ),
        row(
            g,
            "HTTP method MCP has no use for",
            request("PUT", "/mcp", &[("Authorization", &bearer())], b"{}"),
            Expect::Refused(405, MALFORMED),
        ),
        row(
            g,
            "routing headers that disagree with the body",
            mcp_request(
                &tool_call("mcp_logs"),
                &[
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", "ping"),
                ],
            ),
            Expect::RpcError(400, -32020, MALFORMED),
        ),
    ]
}

fn backend() -> Vec<Case> {
    let g = "backend hostility";
    let long = Duration::from_secs(20);
    let mut cases = vec![
        row(
            g,
            "SSE that never ends",
            mcp_request(&tool_call("endless_sse"), &[]),
            Expect::ToolError("BACKEND_TIMEOUT"),
        ),
        row(
            g,
            "SSE event of 100 MB, streamed call",
            mcp_request(&tool_call("huge_event"), &[]),
            Expect::ToolError("OUTPUT_CONTRACT_VIOLATION"),
        ),
        row(
            g,
            "SSE event of 100 MB, buffered call",
            mcp_request(&tool_call("huge_event_once"), &[]),
            Expect::ToolError("OUTPUT_CONTRACT_VIOLATION"),
        ),
        row(
            g,
            "JSON-RPC answer of 100 MB",
            mcp_request(&tool_call("huge_json"), &[]),
            Expect::ToolError("OUTPUT_CONTRACT_VIOLATION"),
        ),
        row(
            g,
            "REST answer of 100 MB",
            get("/huge"),
            Expect::Refused(502, "OUTPUT_CONTRACT_VIOLATION"),
        ),
        row(
            g,
            "REST answer that never ends",
            get("/endless"),
            Expect::Refused(504, "BACKEND_TIMEOUT"),
        ),
        // Answered once only because the contract is not idempotent: a response hyper
        // can't parse counts as a broken connection upstream, so an idempotent call
        // would be retried (see upstream.rs).
        row(
            g,
            "400 response headers",
            get("/flood"),
            Expect::Refused(503, "BACKEND_UNAVAILABLE"),
        ),
    ];
    for case in &mut cases {
        case.forwarded = 1;
        case.deadline = long;
    }
    cases
}

/// A JWT with a header of our own choosing (alg ES256, signed by `key`).
fn jwt_with_header(key: &SigningKey, kid: String, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid);
    encode(
        &header,
        claims,
        &EncodingKey::from_ec_pem(key.pem.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn identity(keys: &Keys) -> Vec<Case> {
    let g = "identity";
    let refused = Expect::Refused(401, UNAUTHENTICATED);
    let claims = |extra: Value| {
        let mut c = json!({"iss": "https://idp.example", "aud": "toolgate", "sub": "ops-bot", "exp": now() + 300});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let good = claims(json!({}));
    let stranger = SigningKey::ec("nope");
    let impostor = SigningKey::ec("idp-1");
    let no_exp = {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove("exp");
        c
    };
    let garbage = format!(
        "{}.{}.{}",
        B64.encode("{not json"),
        B64.encode("[]"),
        B64.encode("sig")
    );
    let task = |claims: Value| {
        let auth = bearer();
        let token = keys.orchestrator.sign(&claims);
        request(
            "GET",
            "/task/orders",
            &[("Authorization", &auth), ("X-Toolgate-Task", &token)],
            b"",
        )
    };
    let task_claims = |extra: Value| {
        let mut c = json!({"iss": "orchestrator", "exp": now() + 300, "agent": "ops-bot", "service": "orders"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let scope = Expect::Refused(403, OUT_OF_SCOPE);
    let huge_task = jwt_with_header(
        &keys.orchestrator,
        "k".repeat(48 * 1024),
        &task_claims(json!({})),
    );
    let unsigned_task = unsigned(&task_claims(json!({})));
    vec![
        row(
            g,
            "JWT with alg none",
            get_as("/logs/orders", &unsigned(&good)),
            refused,
        ),
        row(
            g,
            "JWT HS256 keyed with the public JWK",
            get_as(
                "/logs/orders",
                &hs256_with(keys.idp.jwk.to_string().as_bytes(), &good),
            ),
            refused,
        ),
        row(
            g,
            "JWT with an unknown kid",
            get_as("/logs/orders", &stranger.sign(&good)),
            refused,
        ),
        row(
            g,
            "JWT with a known kid but another key",
            get_as("/logs/orders", &impostor.sign(&good)),
            refused,
        ),
        row(
            g,
            "JWT expired",
            get_as(
                "/logs/orders",
                &keys.idp.sign(&claims(json!({"exp": now() - 600}))),
            ),
            refused,
        ),
        row(
            g,
            "JWT not yet valid",
            get_as(
                "/logs/orders",
                &keys.idp.sign(&claims(json!({"nbf": now() + 3600}))),
            ),
            refused,
        ),
        row(
            g,
            "JWT without exp",
            get_as("/logs/orders", &keys.idp.sign(&no_exp)),
            refused,
        ),
        row(
            g,
            "JWT for another audience",
            get_as(
                "/logs/orders",
                &keys.idp.sign(&claims(json!({"aud": "elsewhere"}))),
            ),
            refused,
        ),
        row(
            g,
            "JWT with a 48 KiB header",
            get_as(
                "/logs/orders",
                &jwt_with_header(&keys.idp, "k".repeat(48 * 1024), &good),
            ),
            refused,
        ),
        row(
            g,
            "JWT of garbage segments",
            get_as("/logs/orders", &garbage),
            refused,
        ),
        row(
            g,
            "task token for another agent",
            task(task_claims(json!({"agent": "other-bot"}))),
            scope,
        ),
        row(
            g,
            "task token expired",
            task(task_claims(json!({"exp": now() - 600}))),
            scope,
        ),
        row(
            g,
            "task token not yet valid",
            task(task_claims(json!({"nbf": now() + 3600}))),
            scope,
        ),
        row(
            g,
            "task token with alg none",
            request(
                "GET",
                "/task/orders",
                &[
                    ("Authorization", &bearer()),
                    ("X-Toolgate-Task", &unsigned_task),
                ],
                b"",
            ),
            scope,
        ),
        row(
            g,
            "task token with a 48 KiB header",
            request(
                "GET",
                "/task/orders",
                &[
                    ("Authorization", &bearer()),
                    ("X-Toolgate-Task", &huge_task),
                ],
                b"",
            ),
            scope,
        ),
    ]
}

fn cel() -> Vec<Case> {
    let g = "CEL";
    let denied = Expect::Refused(403, DENIED);
    vec![
        lazy(g, "a list of 140,000 items through all()", items, denied)
            .with(|r| rule_is(r, "short-items")),
        row(
            g,
            "an integer that overflows when doubled",
            post("/cel", br#"{"n":9223372036854775807}"#),
            denied,
        )
        .with(|r| rule_is(r, "doubled-positive")),
        row(
            g,
            "a string where a number is expected",
            post("/cel", br#"{"n":"many"}"#),
            denied,
        )
        .with(|r| rule_is(r, "doubled-positive")),
        lazy(g, "a 900 KiB string through matches()", query, denied)
            .with(|r| rule_is(r, "lowercase-query")),
    ]
}

/// The refusal names this rule.
fn rule_is(reply: &RawReply, name: &str) -> Result<(), String> {
    match reply.json()["error"]["rule"].as_str() {
        Some(r) if r == name => Ok(()),
        other => Err(format!("expected rule {name}, got {other:?}")),
    }
}

// The large rows' bytes, made when they run.

/// A declared body of 2 MiB, over maxBodyBytes (1 MiB).
fn big_declared() -> Vec<u8> {
    post("/issues", big_issue().as_bytes())
}

fn big_issue() -> String {
    format!(
        r#"{{"project_key":"OPS","title":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    )
}

/// The same 2 MiB, chunked, so only reading tells its size.
fn big_chunked() -> Vec<u8> {
    let mut head = head_with(
        "POST /issues HTTP/1.1",
        &[
            "Transfer-Encoding: chunked".into(),
            "Content-Type: application/json".into(),
        ],
    );
    head.extend_from_slice(&chunked(big_issue().as_bytes(), 16 * 1024));
    head
}

fn deep_arrays() -> Vec<u8> {
    let (open, close) = ("[".repeat(200_000), "]".repeat(200_000));
    post(
        "/issues",
        format!(r#"{{"project_key":"OPS","title":{open}1{close}}}"#).as_bytes(),
    )
}

fn deep_objects() -> Vec<u8> {
    let body = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
    post("/issues", body.as_bytes())
}

fn deep_rpc() -> Vec<u8> {
    mcp_request(
        &format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        &[],
    )
}

fn huge_string_id() -> Vec<u8> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"tools/call","params":{{"name":"no_such_tool","arguments":{{}}}}}}"#,
        "i".repeat(400 * 1024)
    );
    mcp_request(&body, &[])
}

/// 10,000 pings: about 400 KB, under maxBodyBytes.
fn small_batch() -> Vec<u8> {
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    mcp_request(&format!("[{}]", vec![ping; 10_000].join(",")), &[])
}

/// 10,000 pings of 1 KB each, chunked: about 10 MB, one element a chunk.
fn big_batch() -> Vec<u8> {
    let auth = bearer();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Transfer-Encoding", "chunked"),
    ];
    let mut out = request("POST", "/mcp", &headers, b"");
    out.reserve(10_000 * 1100);
    let pad = "p".repeat(1000);
    for i in 0..10_000 {
        let open = if i == 0 { "[" } else { "," };
        let close = if i == 9_999 { "]" } else { "" };
        let ping = format!(
            r#"{open}{{"jsonrpc":"2.0","id":{i},"method":"ping","params":{{"pad":"{pad}"}}}}{close}"#
        );
        out.extend_from_slice(format!("{:x}\r\n{ping}\r\n", ping.len()).as_bytes());
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// 140,000 strings of 4 characters: just under maxBodyBytes.
fn items() -> Vec<u8> {
    let items = vec![r#""aaaa""#; 140_000].join(",");
    post("/cel", format!(r#"{{"items":[{items}]}}"#).as_bytes())
}

/// 900 KiB of lowercase letters and one character the pattern refuses, at the end.
fn query() -> Vec<u8> {
    post(
        "/cel",
        format!(r#"{{"q":"{}!"}}"#, "a".repeat(900 * 1024)).as_bytes(),
    )
}

//! The official MCP SDK peers (tests/mcp): the Python server and client, and the
//! TypeScript reference server `@modelcontextprotocol/server-everything`.
//!
//! The SDKs are required: a missing interpreter or package fails the test with the
//! command that installs it (scripts/test.sh does), it never skips.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python with the `mcp` SDK: `TOOLGATE_TEST_PYTHON`, else `.tools/venv/bin/python`.
pub fn python() -> PathBuf {
    let path = std::env::var_os("TOOLGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".tools/venv/bin/python"));
    assert!(
        path.exists(),
        "the MCP Python SDK is missing ({}): run scripts/test.sh, or \
         python3 -m venv .tools/venv && .tools/venv/bin/pip install 'mcp>=2.3,<3'",
        path.display()
    );
    path
}

/// server-everything's entry point: `TOOLGATE_TEST_EVERYTHING`, else under `.tools/node`.
pub fn everything() -> PathBuf {
    let path = std::env::var_os("TOOLGATE_TEST_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            root().join(
                ".tools/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    assert!(
        path.exists(),
        "@modelcontextprotocol/server-everything is missing ({}): run scripts/test.sh, or \
         npm install --prefix .tools/node @modelcontextprotocol/server-everything",
        path.display()
    );
    path
}

/// The MCP conformance suite's CLI and the Node.js 22 it needs: `TOOLGATE_TEST_NODE22`
/// and `TOOLGATE_TEST_CONFORMANCE`, else under `.tools/`.
pub fn conformance() -> (PathBuf, PathBuf) {
    let node = std::env::var_os("TOOLGATE_TEST_NODE22")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".tools/node22/package/bin/node"));
    let suite = std::env::var_os("TOOLGATE_TEST_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            root().join(
                ".tools/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js",
            )
        });
    assert!(
        node.exists() && suite.exists(),
        "Node.js 22 or the MCP conformance suite is missing ({}, {}): run scripts/test.sh",
        node.display(),
        suite.display()
    );
    (node, suite)
}

/// A peer process, killed (by its own pid) when dropped.
pub struct Peer {
    child: Child,
    pub addr: SocketAddr,
    pub count_file: Option<PathBuf>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    /// `tests/mcp/server.py` with `flags` (`--json-response`, `--stateless`, …).
    pub fn python_server(flags: &[&str], dir: &Path) -> Peer {
        let count_file = dir.join(format!("counts-{}.json", rand_suffix()));
        let mut child = Command::new(python())
            .arg(root().join("tests/mcp/server.py"))
            .args(["--port", "0", "--count-file"])
            .arg(&count_file)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("server.py starts");
        let stdout = child.stdout.take().unwrap();
        // Owned by the Peer at once, so every path kills and reaps it.
        let mut peer = Peer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            count_file: Some(count_file),
        };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port: u16 = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("server.py did not announce a port: {line:?}"));
        peer.addr.set_port(port);
        peer
    }

    /// `tests/mcp/polling_server.mjs`: the TypeScript SDK's server, polling over SSE
    /// (SEP-1699), with the SDK that server-everything installed.
    pub fn polling_server(dir: &Path) -> Peer {
        let count_file = dir.join(format!("counts-{}.json", rand_suffix()));
        let sdk = everything()
            .ancestors()
            .nth(3)
            .expect("server-everything sits under node_modules/@modelcontextprotocol")
            .join("sdk");
        let mut child = Command::new("node")
            .arg(root().join("tests/mcp/polling_server.mjs"))
            .arg(&sdk)
            .arg(&count_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs polling_server.mjs");
        let stdout = child.stdout.take().unwrap();
        let mut peer = Peer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            count_file: Some(count_file),
        };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port: u16 = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("polling_server.mjs did not announce a port: {line:?}"));
        peer.addr.set_port(port);
        peer
    }

    /// server-everything over Streamable HTTP on a free port.
    pub fn everything_server() -> Peer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("node")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts server-everything");
        // Owned by the Peer at once, so every path kills and reaps it.
        let peer = Peer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            count_file: None,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(peer.addr).is_ok() {
                return peer;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server-everything did not listen on {}", peer.addr);
    }

    /// How many times each tool really ran upstream.
    pub fn counts(&self) -> Value {
        let path = self.count_file.as_ref().expect("a python server");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        ^ u64::from(std::process::id())
}

/// Client runs at once across the test binary: each is a Python process importing the
/// SDK, and a few at a time finish sooner than all at once on a small machine.
static RUNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// Runs `tests/mcp/client.py` once; its one line of JSON output.
pub async fn client(url: &str, token: Option<&str>, mode: &str, scenario: &[&str]) -> Value {
    client_within(url, token, mode, "30", scenario).await
}

/// [`client`] with the client's own overall timeout, in seconds.
pub async fn client_within(
    url: &str,
    token: Option<&str>,
    mode: &str,
    timeout: &str,
    scenario: &[&str],
) -> Value {
    let _slot = RUNS.acquire().await.unwrap();
    let mut command = Command::new(python());
    command.arg(root().join("tests/mcp/client.py")).args([
        "--url",
        url,
        "--mode",
        mode,
        "--timeout",
        timeout,
    ]);
    if let Some(token) = token {
        command.args(["--token", token]);
    }
    command.args(scenario);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("client.py runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client.py failed: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("client.py printed no JSON ({e}): {stdout}"))
}

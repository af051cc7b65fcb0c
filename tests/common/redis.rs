//! Real `redis-server` processes for the shared-state tests: a standalone server or a
//! three-master Redis Cluster on loopback, each in its own folder, killed on drop.
//!
//! `scripts/test.sh` installs Redis when it is missing; where it can't be installed the
//! tests that need it say so loudly and pass without running.

#![allow(dead_code)]

use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Whether `redis-server` can be run here; prints why not when it can't.
pub fn available() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!(
            "\n!!! SKIPPED: redis-server is not installed (scripts/test.sh installs it); \
             the shared-state tests did not run !!!\n"
        );
    }
    found
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `redis-server`.
pub struct Server {
    pub port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Server {
    /// A standalone server with persistence off; `extra` adds arguments.
    pub async fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Server {
            port: free_port(),
            args: extra.iter().map(|s| s.to_string()).collect(),
            dir,
            child: None,
        };
        server.launch().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    async fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        wait_for_pong(self.port, self.args.iter().any(|a| a == "--requirepass")).await;
    }

    /// Kills the server (as a crash would): its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub async fn restart(&mut self) {
        self.kill();
        self.launch().await;
    }

    /// Runs `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the server answers (a password-protected one answers NOAUTH: up too).
async fn wait_for_pong(port: u16, password: bool) {
    for _ in 0..200 {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await {
            let mut buf = [0u8; 64];
            if stream.write_all(b"PING\r\n").await.is_ok() {
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await
                {
                    let answer = &buf[..n];
                    if answer.starts_with(b"+PONG") || (password && answer.starts_with(b"-NOAUTH"))
                    {
                        return;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("redis-server on port {port} never answered");
}

/// A Redis Cluster of three masters on loopback.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(
                Server::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
                .await,
            );
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for _ in 0..200 {
            if nodes
                .iter()
                .all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"))
            {
                return Cluster { nodes };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the Redis Cluster never formed");
    }

    /// The seed node's URL.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }
}

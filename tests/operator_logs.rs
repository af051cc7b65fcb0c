//! What an operator sees of a running `toolgate run`, the real binary with its stderr
//! piped (not a terminal, as in a pod): the log formats, a collector that is gone, a
//! policy that never loaded, and a settings file whose paths are relative to it.

mod common;

use common::{closed_port, Backend, OPS_TOKEN};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use toolgate::identity::tokens::digest_hex;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Two free ports, held together so they can't be the same one.
fn two_ports() -> (u16, u16) {
    let (a, b) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// A settings folder, `conf/`, whose file names everything relative to itself: the log
/// service's policies and ops-bot's token beside it, the audit log in it.
fn relative_settings(dir: &Path, port: u16, admin: u16, upstream: &str) -> std::path::PathBuf {
    let conf = dir.join("conf");
    std::fs::create_dir_all(conf.join("policies")).unwrap();
    std::fs::write(
        conf.join("policies/log-service.yaml"),
        common::log_service_policies(),
    )
    .unwrap();
    std::fs::write(
        conf.join("tokens.yaml"),
        format!("ops-bot: {}\n", digest_hex(OPS_TOKEN)),
    )
    .unwrap();
    let settings = conf.join("toolgate.yaml");
    std::fs::write(
        &settings,
        format!(
            "listen: 127.0.0.1:{port}\nadmin: 127.0.0.1:{admin}\nupstream: http://{upstream}\n\
             policies: {{files: [policies]}}\nidentity: {{tokens: tokens.yaml}}\naudit: {{path: audit.log}}\n"
        ),
    )
    .unwrap();
    settings
}

/// A running `toolgate run`, killed if the test fails before stopping it.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `toolgate run --config settings`, started in `cwd`, stderr piped.
fn run(settings: &Path, cwd: &Path, env: &[(&str, &str)]) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--config"])
        .arg(settings)
        .current_dir(cwd)
        .env_remove("TOOLGATE_LOG")
        .env_remove("TOOLGATE_LOG_FORMAT")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Running(Some(child))
}

/// Stops the child with SIGTERM and returns its stderr.
async fn stop(mut running: Running) -> String {
    let child = running.0.take().expect("running");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&output.stderr).into_owned()
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

async fn get(client: &Client, url: &str, token: Option<&str>) -> Option<(u16, String)> {
    use http_body_util::BodyExt as _;
    let mut request = http::Request::get(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .request(request.body(Default::default()).unwrap())
        .await
        .ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Polls `/metrics` until a line starts with `prefix` and its value reaches `at_least`.
async fn wait_for_metric(client: &Client, admin: u16, prefix: &str, at_least: f64) -> f64 {
    let url = format!("http://127.0.0.1:{admin}/metrics");
    let mut last = -1.0;
    for _ in 0..200 {
        if let Some((_, text)) = get(client, &url, None).await {
            last = text
                .lines()
                .find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
                .unwrap_or(-1.0);
            if last >= at_least {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    last
}

/// The walk, with the binary: the collector's port closed, 6 calls. The failed
/// exports are counted and warned about in JSON lines; the settings' relative paths are
/// found beside the file, though the process runs elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_warn_once_about_a_closed_collector_and_relative_paths_resolve() {
    let backend = Backend::example().await;
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let (port, admin) = two_ports();
    let settings = relative_settings(dir.path(), port, admin, &backend.addr.to_string());
    let collector = format!("http://{}", closed_port().await);
    let child = run(
        &settings,
        elsewhere.path(),
        &[
            ("TOOLGATE_LOG_FORMAT", "json"),
            ("TOOLGATE_TELEMETRY_OTLP_ENDPOINT", &collector),
        ],
    );
    let client = client();
    let ready = wait_for_metric(&client, admin, "toolgate_policy_synchronized ", 1.0).await;
    assert_eq!(ready, 1.0, "the policies beside the settings file loaded");
    for _ in 0..6 {
        let url = format!("http://127.0.0.1:{port}/logs/orders");
        let (status, body) = get(&client, &url, Some(OPS_TOKEN)).await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let dropped = wait_for_metric(&client, admin, "toolgate_spans_dropped_total ", 12.0).await;
    assert_eq!(dropped, 12.0, "the 6 calls' server and client spans");
    let logs = stop(child).await;

    assert!(!logs.contains('\u{1b}'), "no escape codes: {logs:?}");
    let lines: Vec<Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let warnings: Vec<&Value> = lines
        .iter()
        .filter(|l| l["level"] == "warn" && l["signal"] == "traces")
        .collect();
    assert_eq!(warnings.len(), 1, "one warning in 30 s: {logs}");
    let warning = warnings[0];
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("OTLP export failed"),
        "{warning}"
    );
    assert!(
        warning["error"].as_str().unwrap().contains(&collector),
        "the error names the endpoint: {warning}"
    );
    assert!(
        warning["ts"].is_string() && warning["failures"].is_u64(),
        "{warning}"
    );
    let listening = lines
        .iter()
        .find(|l| l["message"] == "toolgate listening")
        .expect("the start line");
    let audit = dir.path().join("conf/audit.log");
    assert_eq!(listening["audit"], audit.to_str().unwrap(), "{listening}");
    assert!(!elsewhere.path().join("audit.log").exists());

    // The audit log beside the settings holds the six calls, and verify's counts add up.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "ok: 8 records (6 decisions, 1 starts, 1 policy versions, 0 approval records)"
        ),
        "{text}"
    );
}

/// Text logs carry no colour codes when stderr is not a terminal, and a policy that
/// fails at start says what is true: nothing is served until one loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_are_plain_and_a_bad_first_policy_says_nothing_is_served() {
    let backend = Backend::example().await;
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = two_ports();
    let settings = relative_settings(dir.path(), port, admin, &backend.addr.to_string());
    let policies = dir.path().join("conf/policies");
    for entry in std::fs::read_dir(&policies).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    std::fs::write(
        policies.join("broken.yaml"),
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {name: x}\nspec: {tool: x, http: {method: GET, path: /x}, input: {type: nonsense}}\n",
    )
    .unwrap();
    let child = run(&settings, dir.path(), &[]);
    let client = client();
    // Up (metrics answer) and unsynchronized: the policy was read and refused.
    let synchronized =
        wait_for_metric(&client, admin, "toolgate_policy_reload_errors_total ", 1.0).await;
    assert_eq!(synchronized, 1.0);
    let url = format!("http://127.0.0.1:{port}/logs/orders");
    let (status, body) = get(&client, &url, Some(OPS_TOKEN)).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("NOT_READY"), "{body}");
    let logs = stop(child).await;
    assert!(!logs.contains('\u{1b}'), "no escape codes: {logs:?}");
    assert!(logs.contains(" WARN "), "{logs}");
    assert!(
        logs.contains("none has loaded yet: every call is refused (NOT_READY)"),
        "{logs}"
    );
    assert!(!logs.contains("last good snapshot"), "{logs}");
}

#[test]
fn an_unknown_log_format_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("toolgate.yaml");
    std::fs::write(
        &settings,
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npolicies: {files: [.]}\naudit: {path: 'off'}\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--config"])
        .arg(&settings)
        .env("TOOLGATE_LOG_FORMAT", "logfmt")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Refused at once; a sidecar that started anyway is stopped and the test fails.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{stderr}");
    assert!(
        stderr.contains("TOOLGATE_LOG_FORMAT") && stderr.contains("logfmt"),
        "{stderr}"
    );
}

/// `examples/toolgate.yaml`, as the README runs it: its files are found beside it from
/// the repository root, from its own folder, or from anywhere else.
#[test]
fn the_example_settings_find_their_files_from_anywhere() {
    let file = Path::new(ROOT).join("examples/toolgate.yaml");
    let settings = toolgate::config::Settings::load(Some(&file), Vec::new()).unwrap();
    let mut paths = settings.policies.files.clone();
    paths.extend(settings.identity.tokens.clone());
    paths.extend(
        settings
            .identity
            .task_issuers
            .iter()
            .filter_map(|t| match &t.jwks {
                Some(toolgate::config::Jwks::File(path)) => Some(path.clone()),
                _ => None,
            }),
    );
    assert_eq!(paths.len(), 3);
    for path in paths {
        assert!(path.is_absolute() && path.exists(), "{}", path.display());
    }
}

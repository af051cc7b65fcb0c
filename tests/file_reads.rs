//! Files that aren't files (DESIGN §14, "Files are read as files, boundedly"): a FIFO
//! named like a manifest, symlinks that loop, `/proc`, a FIFO where a token or key file
//! should be. Each is an error said plainly and at once — never a hang, a silent
//! freeze of reloads, or a walk of the whole filesystem — and a ConfigMap volume (built
//! from symlinks) still loads and reloads.

mod common;

use common::*;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Runs `command` for at most `limit`; `None` if it had to be killed.
fn run_bounded(mut command: Command, limit: Duration) -> Option<(i32, String)> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            return Some((status.code().unwrap_or(-1), text));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

async fn metric(h: &Harness, name: &str) -> f64 {
    let (_, text) = h.get_admin("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

async fn within<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn policy_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policies.yaml"), log_service_policies()).unwrap();
    dir
}

#[test]
fn check_names_a_fifo_instead_of_hanging_on_it() {
    let dir = policy_folder();
    mkfifo(&dir.path().join("evil.yaml"));
    let mut command = toolgate();
    command.arg("check").arg(dir.path());
    let (code, text) = run_bounded(command, Duration::from_secs(10)).expect("check hung on a FIFO");
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("evil.yaml") && text.contains("not a regular file but a FIFO"),
        "{text}"
    );
}

#[test]
fn check_reads_a_folder_that_links_to_itself_once() {
    let dir = policy_folder();
    for name in ["again", "more", "self.yaml", "up"] {
        std::os::unix::fs::symlink(dir.path(), dir.path().join(name)).unwrap();
    }
    let mut command = toolgate();
    command.arg("check").arg(dir.path());
    let (code, text) = run_bounded(command, Duration::from_secs(10)).expect("check never finished");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("in 1 files"), "{text}");
}

#[test]
fn check_of_proc_ends_with_an_error_instead_of_walking_every_process() {
    let mut command = toolgate();
    command.args(["check", "/proc"]);
    let started = Instant::now();
    let (code, text) =
        run_bounded(command, Duration::from_secs(20)).expect("check /proc never finished");
    assert!(started.elapsed() < Duration::from_secs(10));
    // However many processes the machine runs: either the walk passed its entries bound
    // (an error), or /proc was small enough to read whole — and then it found no
    // manifest. Never a path outside /proc: `/proc/N/root` and `cwd` are not followed.
    let bounded = code == 1 && text.contains("more than 10000 entries");
    let whole = code == 0 && text.contains("ok: 0 objects in 0 files");
    assert!(bounded || whole, "{text}");
    for line in text.lines().filter(|l| l.starts_with("error: ")) {
        assert!(line.starts_with("error: /proc"), "{line}");
    }
}

#[tokio::test]
async fn a_sidecar_starting_beside_a_fifo_says_why_it_is_not_ready() {
    let backend = Backend::example().await;
    let h = Harness::start(
        backend.addr,
        Options {
            wait_ready: false,
            tweak: Box::new(|s| {
                let folder = s.policies.files[0].clone();
                mkfifo(&folder.join("evil.yaml"));
            }),
            ..Options::default()
        },
    )
    .await;
    within(Duration::from_secs(3), "the FIFO reported", || async {
        h.get_admin("/config")
            .await
            .1
            .contains("not a regular file but a FIFO")
    })
    .await;
    let (status, _) = h.get_admin("/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(metric(&h, "toolgate_policy_synchronized").await, 0.0);
    // Removing it is all it takes.
    std::fs::remove_file(h.policy_file().with_file_name("evil.yaml")).unwrap();
    h.wait_ready().await;
    assert_eq!(metric(&h, "toolgate_policy_synchronized").await, 1.0);
    h.stop().await;
}

#[tokio::test]
async fn a_fifo_appearing_later_is_reported_and_never_freezes_reloads() {
    let backend = Backend::example().await;
    let h = Harness::start(backend.addr, Options::default()).await;
    let ops = || async {
        let r = h
            .call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await;
        format!("{} {}", r.status, r.code())
    };
    assert_eq!(ops().await, "200 ");
    let fifo = h.policy_file().with_file_name("late.yaml");
    mkfifo(&fifo);
    within(Duration::from_secs(3), "unsynchronized", || async {
        metric(&h, "toolgate_policy_synchronized").await == 0.0
    })
    .await;
    let (_, config) = h.get_admin("/config").await;
    assert!(
        config.contains("late.yaml") && config.contains("FIFO"),
        "/config says why: {config}"
    );
    // A kill switch written meanwhile: the folder is still broken, so the gauge stays 0
    // (the last good snapshot decides) — and once the FIFO goes, it is enforced.
    let killed = log_service_policies().replacen(
        "  agents: [ops-bot]\n",
        "  agents: [ops-bot]\n  enabled: false\n",
        1,
    );
    std::fs::write(h.policy_file(), killed).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(metric(&h, "toolgate_policy_synchronized").await, 0.0);
    std::fs::remove_file(&fifo).unwrap();
    within(
        Duration::from_secs(2),
        "the kill switch enforced",
        || async { ops().await == "403 AGENT_DISABLED" },
    )
    .await;
    assert_eq!(metric(&h, "toolgate_policy_synchronized").await, 1.0);
    h.stop().await;
}

/// A ConfigMap volume: `policies.yaml -> ..data/policies.yaml`, `..data -> ..<stamp>`.
#[tokio::test]
async fn a_config_map_volume_loads_and_follows_its_atomic_swap() {
    let backend = Backend::example().await;
    let volume = tempfile::tempdir().unwrap();
    let root = volume.path().to_path_buf();
    let publish = |stamp: &str, text: &str| {
        let folder = root.join(stamp);
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("policies.yaml"), text).unwrap();
        let tmp = root.join("..data_tmp");
        std::os::unix::fs::symlink(stamp, &tmp).unwrap();
        // The kubelet's update: one rename, so a reader sees the old set or the new one.
        std::fs::rename(&tmp, root.join("..data")).unwrap();
    };
    publish("..2026_12_04_10_00_00.000000001", &log_service_policies());
    std::os::unix::fs::symlink("..data/policies.yaml", root.join("policies.yaml")).unwrap();
    let mounted = root.clone();
    let h = Harness::start(
        backend.addr,
        Options {
            tweak: Box::new(move |s| s.policies.files = vec![mounted]),
            ..Options::default()
        },
    )
    .await;
    let ops = || async {
        h.call("GET", "/logs/orders", Some(OPS_TOKEN), &[], "")
            .await
            .status
    };
    assert_eq!(ops().await, 200);
    let revoked = log_service_policies().replacen("    - name: read_logs\n", "", 1);
    publish("..2026_12_04_10_05_00.000000002", &revoked);
    std::fs::remove_dir_all(root.join("..2026_12_04_10_00_00.000000001")).unwrap();
    within(
        Duration::from_secs(1),
        "the swapped ConfigMap enforced",
        || async { ops().await == 403 },
    )
    .await;
    assert_eq!(metric(&h, "toolgate_policy_synchronized").await, 1.0);
    h.stop().await;
}

/// Starts a sidecar on another thread; `Err` names what failed, `None` if it hung.
fn start_bounded(
    tweak: impl FnOnce(&mut toolgate::config::Settings, &Path) + Send + 'static,
) -> Option<Result<(), String>> {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dir = policy_folder();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = runtime.block_on(async {
            let mut settings = toolgate::config::Settings {
                listen: "127.0.0.1:0".parse().unwrap(),
                admin: "127.0.0.1:0".parse().unwrap(),
                ..Default::default()
            };
            settings.policies.files = vec![dir.path().join("policies.yaml")];
            settings.audit.path = dir.path().join("audit.log").display().to_string();
            tweak(&mut settings, dir.path());
            match toolgate::sidecar::Sidecar::start(settings).await {
                Ok(sidecar) => {
                    sidecar.shutdown().await;
                    Ok(())
                }
                Err(e) => Err(format!("{e:#}")),
            }
        });
        let _ = done.send(outcome);
    });
    result.recv_timeout(Duration::from_secs(10)).ok()
}

#[test]
fn a_fifo_where_a_token_key_or_certificate_file_should_be_fails_the_start_at_once() {
    type Point = fn(&mut toolgate::config::Settings, PathBuf);
    let cases: [(&str, Point); 8] = [
        ("identity.tokens", |s, p| s.identity.tokens = Some(p)),
        ("audit.keyFile", |s, p| s.audit.key_file = Some(p)),
        ("approvals.approvers.tokens", |s, p| {
            s.approvals.approvers.tokens = Some(p)
        }),
        ("tls.cert", |s, p| {
            s.tls = serde_json::from_value(serde_json::json!({"cert": p, "key": p})).unwrap()
        }),
        ("identity.jwt", |s, p| {
            s.identity.jwt = serde_json::from_value(serde_json::json!([{
                "issuer": "https://idp.example", "audience": "toolgate", "jwks": p
            }]))
            .unwrap()
        }),
        ("identity.taskIssuers", |s, p| {
            s.identity.task_issuers = serde_json::from_value(serde_json::json!([{
                "issuer": "orchestrator", "jwks": p
            }]))
            .unwrap()
        }),
        ("approvals.approvers.jwt", |s, p| {
            s.approvals.approvers.jwt = serde_json::from_value(serde_json::json!([{
                "issuer": "https://idp.example", "audience": "approvals", "jwks": p
            }]))
            .unwrap()
        }),
        ("state.redis.passwordFile", |s, p| {
            s.state.backend = toolgate::config::StateBackend::Redis;
            s.state.redis.password_file = Some(p);
        }),
    ];
    for (what, point) in cases {
        let outcome = start_bounded(move |settings, dir| {
            let fifo = dir.join("fifo");
            mkfifo(&fifo);
            point(settings, fifo);
        })
        .unwrap_or_else(|| panic!("{what}: the start hung on a FIFO"));
        let error = outcome.expect_err(what);
        assert!(error.contains("FIFO"), "{what}: {error}");
    }
}

#[test]
fn a_fifo_as_the_settings_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("toolgate.yaml");
    mkfifo(&fifo);
    let mut command = toolgate();
    command.args(["run", "--config"]).arg(&fifo);
    let (code, text) =
        run_bounded(command, Duration::from_secs(10)).expect("run hung on its settings FIFO");
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("FIFO"), "{text}");
}

#[tokio::test]
async fn sigterm_ends_the_sidecar_whatever_its_policy_folder_holds() {
    let backend = Backend::example().await;
    let dir = policy_folder();
    let root = env!("CARGO_MANIFEST_DIR");
    let (a, b) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (port, admin) = (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    );
    drop((a, b));
    let settings = dir.path().join("toolgate.yaml");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::rename(
        dir.path().join("policies.yaml"),
        policies.join("policies.yaml"),
    )
    .unwrap();
    std::fs::write(
        &settings,
        format!(
            "listen: 127.0.0.1:{port}\nadmin: 127.0.0.1:{admin}\nupstream: http://{}\npolicies: {{files: [{}]}}\nidentity: {{tokens: {root}/examples/tokens.yaml}}\naudit: {{path: {}}}\nlimits: {{drainTimeoutMs: 2000}}\n",
            backend.addr,
            policies.display(),
            dir.path().join("audit.log").display()
        ),
    )
    .unwrap();
    let mut child = toolgate()
        .args(["run", "--config"])
        .arg(&settings)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let ready = format!("http://127.0.0.1:{admin}/readyz");
    let mut up = false;
    for _ in 0..200 {
        if let Ok(r) = client.get(ready.parse().unwrap()).await {
            if r.status() == 200 {
                up = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !up {
        let _ = child.kill();
        let _ = child.wait();
        panic!("toolgate run never became ready");
    }
    mkfifo(&policies.join("late.yaml"));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let started = Instant::now();
    let mut exited = None;
    while started.elapsed() < Duration::from_secs(8) {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if exited.is_none() {
        let _ = child.kill();
    }
    let reaped = child.wait().unwrap();
    let status =
        exited.unwrap_or_else(|| panic!("toolgate run did not exit after SIGTERM ({reaped})"));
    assert!(status.success(), "exit status {status}");
}

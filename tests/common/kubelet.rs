//! A kubelet for one container, on this machine: it lays out a pod's volumes in a temp
//! folder the way the kubelet does (Secrets, ConfigMaps, projected and downward-API
//! volumes written atomically behind `..data`; `emptyDir` and claims as empty writable
//! folders), resolves the container's environment (the downward API, `$(VAR)`), maps its
//! mount paths, ports and Service names to what stands in for them here, and runs its
//! command as a local process — as the container's user when the test runs as root, so
//! read-only mounts and a read-only root filesystem hold.
//!
//! What a container reads must come from its mounts: a volume whose Secret or ConfigMap
//! the cluster lacks is an error (the kubelet would not start the pod), and so is an
//! environment source the kubelet here doesn't know.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What the API server holds that a pod's volumes read, in the pod's namespace.
#[derive(Default)]
pub struct Cluster {
    /// Secret name → item → bytes.
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// ConfigMap name → item → text.
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// What the kubelet projects as the pod's ServiceAccount token.
    pub service_account_token: String,
}

/// How the pod's network maps onto loopback: container ports, and Services by
/// `host:port`.
#[derive(Default)]
pub struct Network {
    /// Port in the pod → port on 127.0.0.1.
    pub ports: BTreeMap<u16, u16>,
    /// `name.namespace:port` → `127.0.0.1:port`.
    pub services: BTreeMap<String, String>,
}

/// One mount: where the container sees it, where it is here.
#[derive(Debug, Clone)]
pub struct Mount {
    pub volume: String,
    pub path: String,
    pub host: PathBuf,
    pub read_only: bool,
}

/// A container ready to run.
pub struct Container {
    pub dir: tempfile::TempDir,
    pub args: Vec<String>,
    /// Resolved and mapped, in the container's order.
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// The container's user, when set.
    pub uid: Option<u32>,
}

/// The kubelet's name for the current version of an atomically written volume.
const VERSION_DIR: &str = "..2026_01_01_00_00_00.000000001";

impl Container {
    /// Prepares the container `name` of `pod` (a Pod as JSON, its init containers
    /// included): volumes written, environment resolved and mapped.
    pub fn prepare(
        pod: &Value,
        name: &str,
        cluster: &Cluster,
        network: &Network,
    ) -> Result<Container, String> {
        let spec = &pod["spec"];
        let container = ["initContainers", "containers"]
            .iter()
            .flat_map(|list| spec[*list].as_array().into_iter().flatten())
            .find(|c| c["name"] == name)
            .ok_or_else(|| format!("the pod has no container {name:?}"))?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // The root filesystem: empty and read-only, the working folder.
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o555)).unwrap();
        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let volume_name = mount["name"].as_str().unwrap().to_string();
            let volume = spec["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == volume_name.as_str())
                .ok_or_else(|| format!("no volume {volume_name:?} for a mount"))?;
            let host = dir.path().join("volumes").join(&volume_name);
            let read_only = mount["readOnly"] == true;
            write_volume(volume, pod, cluster, &host, read_only)?;
            mounts.push(Mount {
                volume: volume_name,
                path: mount["mountPath"].as_str().unwrap().to_string(),
                host,
                read_only,
            });
        }
        // Longest first, so a mount inside another maps to its own folder.
        mounts.sort_by_key(|m| std::cmp::Reverse(m.path.len()));
        let env = resolve_env(container, pod)?
            .into_iter()
            .map(|(k, v)| {
                let v = map_value(&v, &mounts, network);
                (k, v)
            })
            .collect();
        let args = container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let uid = container["securityContext"]["runAsUser"]
            .as_u64()
            .map(|u| u as u32);
        Ok(Container {
            dir,
            args,
            env,
            mounts,
            uid,
        })
    }

    /// Where the container's `path` is here, if a mount holds it.
    pub fn host_path(&self, path: &str) -> Option<PathBuf> {
        self.mounts.iter().find_map(|m| {
            let rest = path.strip_prefix(&m.path)?;
            let rest = rest.strip_prefix('/').or(rest.is_empty().then_some(""))?;
            Some(m.host.join(rest))
        })
    }

    /// The mount holding the host path `path`, if any.
    pub fn mount_of(&self, path: &Path) -> Option<&Mount> {
        self.mounts.iter().find(|m| path.starts_with(&m.host))
    }

    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Starts `binary` with the container's args and environment plus `extra`, nothing
    /// else of the test's environment; stdout and stderr go to files in the pod's folder.
    pub fn spawn(&self, binary: &str, extra: &[(&str, String)]) -> Child {
        let mut command = Command::new(binary);
        command
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(extra.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path().join("root"))
            .stdin(Stdio::null())
            .stdout(File::create(self.stdout()).unwrap())
            .stderr(File::create(self.stderr()).unwrap());
        // Root may become the container's user; anyone else runs as themselves.
        if let (Some(uid), true) = (self.uid, is_root()) {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        command.spawn().unwrap()
    }

    pub fn stdout(&self) -> PathBuf {
        self.dir.path().join("stdout")
    }

    pub fn stderr(&self) -> PathBuf {
        self.dir.path().join("stderr")
    }

    /// Writes a file only the container's user can read (e.g. a kubeconfig).
    pub fn write_private(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    }
}

/// Whether this process runs as root (read from /proc, without `unsafe`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Writes `volume` at `host`.
fn write_volume(
    volume: &Value,
    pod: &Value,
    cluster: &Cluster,
    host: &Path,
    read_only: bool,
) -> Result<(), String> {
    let name = volume["name"].as_str().unwrap_or("?");
    let failed = |why: String| {
        format!("the pod would not start: MountVolume.SetUp failed for volume {name:?} : {why}")
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(secret) = volume.get("secret") {
        let secret_name = secret["secretName"].as_str().unwrap_or("");
        files.extend(secret_items(secret, secret_name, cluster).map_err(failed)?);
    } else if let Some(config_map) = volume.get("configMap") {
        let map_name = config_map["name"].as_str().unwrap_or("");
        files.extend(config_map_items(config_map, map_name, cluster).map_err(failed)?);
    } else if let Some(projected) = volume.get("projected") {
        for source in projected["sources"].as_array().into_iter().flatten() {
            files.extend(projected_source(source, pod, cluster).map_err(failed)?);
        }
    } else if let Some(downward) = volume.get("downwardAPI") {
        files.extend(downward_items(&downward["items"], pod).map_err(failed)?);
    } else if volume.get("emptyDir").is_some() || volume.get("persistentVolumeClaim").is_some() {
        std::fs::create_dir_all(host).unwrap();
        std::fs::set_permissions(host, std::fs::Permissions::from_mode(0o777)).unwrap();
        return Ok(());
    } else {
        return Err(failed(format!("the kubelet here can't mount {volume}")));
    }
    write_atomic(host, &files);
    if read_only {
        seal(host);
    }
    Ok(())
}

/// The kubelet's atomic writer: the files under a version folder, `..data` pointing at
/// it, and each top-level entry a link through `..data`.
fn write_atomic(host: &Path, files: &[(String, Vec<u8>)]) {
    let version = host.join(VERSION_DIR);
    std::fs::create_dir_all(&version).unwrap();
    let mut tops = std::collections::BTreeSet::new();
    for (path, bytes) in files {
        let file = version.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, bytes).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        tops.insert(path.split('/').next().unwrap().to_string());
    }
    std::os::unix::fs::symlink(VERSION_DIR, host.join("..data")).unwrap();
    for top in tops {
        std::os::unix::fs::symlink(format!("..data/{top}"), host.join(&top)).unwrap();
    }
}

/// Read-only for everyone: what a `readOnly` mount is to the container's user.
fn seal(path: &Path) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    if meta.file_type().is_symlink() {
        return;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            seal(&entry.unwrap().path());
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555)).unwrap();
    } else {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
}

fn items_of(
    source: &Value,
    data: &BTreeMap<String, Vec<u8>>,
    what: &str,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    match source["items"].as_array() {
        None => Ok(data.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        Some(items) => items
            .iter()
            .map(|item| {
                let key = item["key"].as_str().unwrap();
                let bytes = data
                    .get(key)
                    .ok_or_else(|| format!("{what} has no item {key:?}"))?;
                Ok((item["path"].as_str().unwrap().to_string(), bytes.clone()))
            })
            .collect(),
    }
}

fn secret_items(
    source: &Value,
    name: &str,
    cluster: &Cluster,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let data = cluster
        .secrets
        .get(name)
        .ok_or_else(|| format!("secret {name:?} not found"))?;
    items_of(source, data, &format!("secret {name:?}"))
}

fn config_map_items(
    source: &Value,
    name: &str,
    cluster: &Cluster,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let data: BTreeMap<String, Vec<u8>> = cluster
        .config_maps
        .get(name)
        .ok_or_else(|| format!("configmap {name:?} not found"))?
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    items_of(source, &data, &format!("configmap {name:?}"))
}

fn projected_source(
    source: &Value,
    pod: &Value,
    cluster: &Cluster,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    if let Some(token) = source.get("serviceAccountToken") {
        let path = token["path"].as_str().unwrap().to_string();
        return Ok(vec![(
            path,
            cluster.service_account_token.clone().into_bytes(),
        )]);
    }
    if let Some(secret) = source.get("secret") {
        return secret_items(secret, secret["name"].as_str().unwrap_or(""), cluster);
    }
    if let Some(config_map) = source.get("configMap") {
        return config_map_items(
            config_map,
            config_map["name"].as_str().unwrap_or(""),
            cluster,
        );
    }
    if let Some(downward) = source.get("downwardAPI") {
        return downward_items(&downward["items"], pod);
    }
    Err(format!("the kubelet here can't project {source}"))
}

fn downward_items(items: &Value, pod: &Value) -> Result<Vec<(String, Vec<u8>)>, String> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| {
            let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or("");
            let text = match field {
                // The kubelet's format: one `key="value"` per line, in key order.
                "metadata.labels" | "metadata.annotations" => {
                    let key = field.trim_start_matches("metadata.");
                    pod["metadata"][key]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| {
                            format!("{k}={}\n", Value::String(v.as_str().unwrap_or("").into()))
                        })
                        .collect::<String>()
                }
                other => field_value(pod, other)?,
            };
            Ok((
                item["path"].as_str().unwrap().to_string(),
                text.into_bytes(),
            ))
        })
        .collect()
}

fn field_value(pod: &Value, field: &str) -> Result<String, String> {
    match field {
        "metadata.name" | "metadata.namespace" | "spec.serviceAccountName" => {
            let mut value = pod;
            for part in field.split('.') {
                value = &value[part];
            }
            Ok(value.as_str().unwrap_or("").to_string())
        }
        other => Err(format!("the kubelet here doesn't know the field {other}")),
    }
}

/// The container's variables, in order, with `$(VAR)` expanded as the kubelet does:
/// from variables defined before, `$$` for a literal `$`, anything else left as written.
fn resolve_env(container: &Value, pod: &Value) -> Result<Vec<(String, String)>, String> {
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap().to_string();
        let value = if let Some(value) = var["value"].as_str() {
            expand(value, &env)
        } else if let Some(field) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field_value(pod, field)?
        } else if var.get("valueFrom").is_some() {
            return Err(format!("the kubelet here can't resolve {var}"));
        } else {
            String::new()
        };
        env.retain(|(k, _)| k != &name);
        env.push((name, value));
    }
    Ok(env)
}

fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after
            .strip_prefix('(')
            .and_then(|inner| inner.split_once(')'))
        {
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A value as this machine must see it: mount paths become their folders, the pod's
/// ports and Services their stand-ins on loopback.
fn map_value(value: &str, mounts: &[Mount], network: &Network) -> String {
    let mut out = value.to_string();
    for mount in mounts {
        let host = mount.host.to_string_lossy();
        if out == mount.path {
            out = host.to_string();
        }
        out = out.replace(&format!("{}/", mount.path), &format!("{host}/"));
    }
    for (service, local) in &network.services {
        out = out.replace(service, local);
    }
    for (port, local) in &network.ports {
        for any in ["0.0.0.0", "127.0.0.1", "localhost"] {
            out = out.replace(&format!("{any}:{port}"), &format!("127.0.0.1:{local}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_the_kubelet() {
        let env = vec![("POD_NAME".to_string(), "orders-1".to_string())];
        assert_eq!(expand("/logs/$(POD_NAME).log", &env), "/logs/orders-1.log");
        assert_eq!(expand("$$(POD_NAME) $(NOPE)", &env), "$(POD_NAME) $(NOPE)");
    }
}

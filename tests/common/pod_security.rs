//! The Pod Security Standards' "restricted" profile (which includes "baseline"), checked
//! on a pod spec as JSON, the way the API server's PodSecurity admission would.
//! <https://kubernetes.io/docs/concepts/security/pod-security-standards/>
#![allow(dead_code)]

use serde_json::Value;

const VOLUME_TYPES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Every way `spec` (a PodSpec) breaks the restricted profile; empty when it passes.
pub fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let pod = &spec["securityContext"];
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[key] == true {
            out.push(format!("{key} is true"));
        }
    }
    if pod["windowsOptions"]["hostProcess"] == true {
        out.push("pod hostProcess".into());
    }
    for sysctl in pod["sysctls"].as_array().into_iter().flatten() {
        let name = sysctl["name"].as_str().unwrap_or("");
        if !SAFE_SYSCTLS.contains(&name) {
            out.push(format!("unsafe sysctl {name}"));
        }
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or("?");
        let kinds: Vec<&String> = volume
            .as_object()
            .map(|o| o.keys().filter(|k| *k != "name").collect())
            .unwrap_or_default();
        for kind in kinds {
            if !VOLUME_TYPES.contains(&kind.as_str()) {
                out.push(format!("volume {name} is of type {kind}"));
            }
        }
    }
    check_selinux(pod, "pod", &mut out);
    if pod["runAsUser"] == 0 {
        out.push("pod runAsUser is 0".into());
    }
    let pod_seccomp = pod["seccompProfile"]["type"].as_str();
    if matches!(pod_seccomp, Some("Unconfined")) {
        out.push("pod seccompProfile is Unconfined".into());
    }
    let apparmor = pod["appArmorProfile"]["type"].as_str();
    if matches!(apparmor, Some("Unconfined")) {
        out.push("pod appArmorProfile is Unconfined".into());
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in spec[list].as_array().into_iter().flatten() {
            let name = container["name"].as_str().unwrap_or("?");
            check_container(container, pod, &format!("{list}/{name}"), &mut out);
        }
    }
    out
}

fn check_container(container: &Value, pod: &Value, at: &str, out: &mut Vec<String>) {
    let sc = &container["securityContext"];
    if sc["privileged"] == true {
        out.push(format!("{at}: privileged"));
    }
    if sc["windowsOptions"]["hostProcess"] == true {
        out.push(format!("{at}: hostProcess"));
    }
    for port in container["ports"].as_array().into_iter().flatten() {
        if port["hostPort"].as_i64().unwrap_or(0) != 0 {
            out.push(format!("{at}: hostPort"));
        }
    }
    if sc["procMount"].as_str().is_some_and(|m| m != "Default") {
        out.push(format!("{at}: procMount"));
    }
    if sc["appArmorProfile"]["type"] == "Unconfined" {
        out.push(format!("{at}: appArmorProfile Unconfined"));
    }
    check_selinux(sc, at, out);
    if sc["allowPrivilegeEscalation"] != false {
        out.push(format!("{at}: allowPrivilegeEscalation is not false"));
    }
    let non_root = match sc["runAsNonRoot"].as_bool() {
        Some(v) => v,
        None => pod["runAsNonRoot"] == true,
    };
    if !non_root {
        out.push(format!("{at}: runAsNonRoot is not true (container or pod)"));
    }
    if sc["runAsUser"] == 0 {
        out.push(format!("{at}: runAsUser is 0"));
    }
    let seccomp = sc["seccompProfile"]["type"]
        .as_str()
        .or(pod["seccompProfile"]["type"].as_str());
    if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
        out.push(format!(
            "{at}: seccompProfile is {seccomp:?}, not RuntimeDefault or Localhost"
        ));
    }
    let caps = &sc["capabilities"];
    let drops_all = caps["drop"]
        .as_array()
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    if !drops_all {
        out.push(format!("{at}: capabilities do not drop ALL"));
    }
    for cap in caps["add"].as_array().into_iter().flatten() {
        if cap != "NET_BIND_SERVICE" {
            out.push(format!("{at}: adds capability {cap}"));
        }
    }
}

fn check_selinux(sc: &Value, at: &str, out: &mut Vec<String>) {
    let se = &sc["seLinuxOptions"];
    if let Some(t) = se["type"].as_str() {
        if ![
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ]
        .contains(&t)
        {
            out.push(format!("{at}: seLinuxOptions.type {t}"));
        }
    }
    if se["user"].as_str().is_some_and(|s| !s.is_empty())
        || se["role"].as_str().is_some_and(|s| !s.is_empty())
    {
        out.push(format!("{at}: seLinuxOptions user/role set"));
    }
}

/// The stricter fields toolgate's own containers set themselves, whatever the pod says.
pub fn toolgate_container_violations(container: &Value, uid: i64) -> Vec<String> {
    let sc = &container["securityContext"];
    let mut out = Vec::new();
    let expect = [
        ("runAsNonRoot", Value::Bool(true)),
        ("runAsUser", Value::from(uid)),
        ("readOnlyRootFilesystem", Value::Bool(true)),
        ("allowPrivilegeEscalation", Value::Bool(false)),
    ];
    for (key, value) in expect {
        if sc[key] != value {
            out.push(format!(
                "securityContext.{key} is {}, want {value}",
                sc[key]
            ));
        }
    }
    if sc["capabilities"]["drop"] != serde_json::json!(["ALL"]) {
        out.push("securityContext.capabilities.drop is not [ALL]".into());
    }
    if sc["seccompProfile"]["type"] != "RuntimeDefault" {
        out.push("securityContext.seccompProfile.type is not RuntimeDefault".into());
    }
    out
}

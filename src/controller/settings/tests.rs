use super::*;

fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_read_every_namespace_and_name_the_pod() {
    let s = ControllerSettings::parse(
        "t",
        "",
        vars(&[("HOSTNAME", "toolgate-injector-7c9-abcde")]),
    )
    .unwrap();
    assert_eq!(s.kubernetes.namespace, "", "all namespaces");
    assert_eq!(s.leader_election.lease_name, "toolgate-controller");
    assert_eq!(s.leader_election.identity, "toolgate-injector-7c9-abcde");
    assert_eq!(s.listen.port(), HEALTH_PORT);
}

#[test]
fn variables_override_the_file() {
    let text = "kubernetes: {namespace: team-a}\nleaderElection: {leaseDurationSeconds: 30}\n";
    let s = ControllerSettings::parse(
        "t",
        text,
        vars(&[
            ("TOOLGATE_CONTROLLER_KUBERNETES_NAMESPACE", "team-b"),
            ("TOOLGATE_CONTROLLER_LEADER_ELECTION_IDENTITY", "pod-1"),
            (
                "TOOLGATE_CONTROLLER_LEADER_ELECTION_NAMESPACE",
                "toolgate-system",
            ),
            ("TOOLGATE_CONTROLLER_LEADER_ELECTION_RETRY_PERIOD_MS", "500"),
            ("TOOLGATE_CONTROLLER_LISTEN", "127.0.0.1:9102"),
            ("HOSTNAME", "ignored-when-identity-is-set"),
            ("TOOLGATE_INJECT_LISTEN", "not ours"),
        ]),
    )
    .unwrap();
    assert_eq!(s.kubernetes.namespace, "team-b");
    assert_eq!(s.leader_election.identity, "pod-1");
    assert_eq!(s.leader_election.namespace, "toolgate-system");
    assert_eq!(s.leader_election.lease_duration_seconds, 30);
    assert_eq!(s.leader_election.retry_period_ms, 500);
    assert_eq!(s.listen.port(), 9102);
}

#[test]
fn unknown_keys_and_bad_values_name_their_field() {
    let named = [("HOSTNAME", "p")];
    for (text, field) in [
        ("kubernetes: {namespaces: [a]}", "namespaces"),
        ("kubernetes: {namespace: Team_A}", "kubernetes.namespace"),
        (
            "leaderElection: {leaseName: ''}",
            "leaderElection.leaseName",
        ),
        (
            "leaderElection: {leaseDurationSeconds: 0}",
            "leaderElection.leaseDurationSeconds",
        ),
        // A renew deadline as long as the lease would let two leaders overlap.
        (
            "leaderElection: {leaseDurationSeconds: 10, renewDeadlineMs: 10000}",
            "renewDeadlineMs",
        ),
        ("leaderElection: {retryPeriodMs: 10000}", "retryPeriodMs"),
        ("leaderElection: {retryPeriodMs: 0}", "retryPeriodMs"),
    ] {
        let err = ControllerSettings::parse("c.yaml", text, vars(&named)).unwrap_err();
        assert!(err.to_string().contains(field), "{text}: {err}");
    }
    let err = ControllerSettings::parse("c.yaml", "", vars(&[])).unwrap_err();
    assert!(err.to_string().contains("leaderElection.identity"), "{err}");
}

/// Every leaf of the settings tree has a `TOOLGATE_CONTROLLER_*` variable.
#[test]
fn every_key_has_a_variable() {
    let mut settings = ControllerSettings::default();
    settings.kubernetes.kubeconfig = Some("/k".into());
    let tree = serde_json::to_value(&settings).unwrap();
    for leaf in crate::config::file::leaves(&tree) {
        let covered = KEYS.iter().any(|(key, _)| leaf == *key);
        assert!(
            covered,
            "setting {leaf} has no TOOLGATE_CONTROLLER_* variable"
        );
    }
}

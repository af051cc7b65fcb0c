use super::*;
use crate::crd::parse_documents;

/// Reads `text` as objects of namespace `team-a`; unreadable documents become `Err`s
/// keyed by the name their error gives.
fn mk_reads(text: &str) -> Vec<(ObjectKey, Read)> {
    let (objects, errors) = parse_documents("cluster", text);
    let mut reads: Vec<(ObjectKey, Read)> = objects
        .into_iter()
        .map(|mut o| {
            o.key.namespace = "team-a".into();
            (o.key.clone(), Ok(o))
        })
        .collect();
    for e in errors {
        let object = e.object.clone().unwrap();
        let (kind, name) = object.split_once('/').unwrap();
        let kind = if kind == "ToolContract" {
            "ToolContract"
        } else {
            "AgentPolicy"
        };
        let key = ObjectKey {
            kind,
            namespace: "team-a".into(),
            name: name.into(),
        };
        reads.push((key, Err(e)));
    }
    reads
}

fn verdicts(text: &str) -> BTreeMap<String, Verdict> {
    let reads = mk_reads(text);
    judge(reads.iter().map(|(k, r)| (k, r)))
        .into_iter()
        .map(|(k, v)| (format!("{}/{}", k.kind, k.name), v))
        .collect()
}

fn contract(name: &str, tool: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {{name: {name}}}\nspec:\n  tool: {tool}\n{extra}"
    )
}

fn policy(name: &str, agent: &str, tools: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: toolgate.dev/v1alpha1\nkind: AgentPolicy\nmetadata: {{name: {name}}}\nspec:\n  agents: [{agent}]\n  tools: {tools}\n{extra}"
    )
}

fn assert_verdict(all: &BTreeMap<String, Verdict>, object: &str, reason: Reason, field: &str) {
    let v = &all[object];
    assert_eq!(v.reason, reason, "{object}: {v:?}");
    assert!(
        v.message.starts_with(&format!("{field}: ")),
        "{object}: {}",
        v.message
    );
}

#[test]
fn a_valid_pair_is_valid() {
    let text = contract(
        "read-logs",
        "read_logs",
        "  http: {method: GET, path: /logs}\n",
    ) + &policy("ops-bot", "ops-bot", "[{name: read_logs}]", "");
    let all = verdicts(&text);
    assert_eq!(all.len(), 2);
    for v in all.values() {
        assert_eq!(v.reason, Reason::Valid, "{v:?}");
        assert!(v.message.contains("check --strict"));
    }
}

#[test]
fn each_broken_kind_has_its_reason_and_field() {
    let text = [
        contract("ok", "ok", "  http: {method: GET, path: /ok}\n"),
        contract("bad-schema", "bad_schema", "  input: {type: 7}\n"),
        contract("same-route", "other", "  http: {method: get, path: /ok}\n"),
        contract("same-tool", "ok", ""),
        contract("zero-timeout", "slow", "  timeoutMs: 0\n"),
        contract(
            "bad-key",
            "pay",
            "  idempotent: false\n  dedupeKey: 'args.id +'\n",
        ),
        contract("typo", "typo", "  inptu: {}\n"),
        policy("alpha", "bot", "[{name: ok}]", ""),
        policy("zeta", "bot", "[{name: ok}]", ""),
        policy(
            "bad-rule",
            "r",
            "[{name: ok, rules: [{name: r, expr: 'argz.x == 1'}]}]",
            "",
        ),
        policy("unknown", "u", "[{name: ok}, {name: wipe}]", ""),
    ]
    .concat();
    let all = verdicts(&text);
    assert_eq!(all["ToolContract/ok"].reason, Reason::Valid);
    assert_verdict(
        &all,
        "ToolContract/bad-schema",
        Reason::InvalidSchema,
        "spec.input",
    );
    assert_verdict(
        &all,
        "ToolContract/same-route",
        Reason::RouteConflict,
        "spec.http",
    );
    assert_verdict(
        &all,
        "ToolContract/same-tool",
        Reason::ToolConflict,
        "spec.tool",
    );
    assert!(all["ToolContract/same-tool"]
        .message
        .contains("ToolContract/ok"));
    assert_verdict(
        &all,
        "ToolContract/zero-timeout",
        Reason::InvalidSpec,
        "spec.timeoutMs",
    );
    assert_verdict(
        &all,
        "ToolContract/bad-key",
        Reason::InvalidRule,
        "spec.dedupeKey",
    );
    assert_verdict(
        &all,
        "ToolContract/typo",
        Reason::InvalidManifest,
        "spec.inptu",
    );
    assert_eq!(
        all["AgentPolicy/alpha"].reason,
        Reason::Valid,
        "first in name order wins"
    );
    assert_verdict(
        &all,
        "AgentPolicy/zeta",
        Reason::AgentConflict,
        "spec.agents[0]",
    );
    assert_verdict(
        &all,
        "AgentPolicy/bad-rule",
        Reason::InvalidRule,
        "spec.tools[0].rules[0].expr",
    );
    assert_verdict(
        &all,
        "AgentPolicy/unknown",
        Reason::UnknownTool,
        "spec.tools[1].name",
    );
    assert!(all["AgentPolicy/unknown"].message.contains("wipe"));
}

/// Sidecars apply `workloadSelector` before their checks: objects for workloads that
/// never share a pod may reuse a tool, a route or an agent.
#[test]
fn selectors_that_never_meet_do_not_conflict() {
    let orders = "  workloadSelector: {matchLabels: {app: orders}}\n";
    let billing = "  workloadSelector: {matchLabels: {app: billing}}\n";
    let web = "  workloadSelector: {matchLabels: {tier: web}}\n";
    let text = [
        contract(
            "status-orders",
            "status",
            &format!("  http: {{method: GET, path: /status}}\n{orders}"),
        ),
        contract(
            "status-billing",
            "status",
            &format!("  http: {{method: GET, path: /status}}\n{billing}"),
        ),
        // tier=web can share a pod with app=orders: a real conflict.
        contract("status-web", "status", web),
        policy("bot-orders", "bot", "[{name: status}]", orders),
        policy("bot-billing", "bot", "[{name: status}]", billing),
        // app=billing policy granting a tool only app=orders pods serve.
        policy("refunds", "refunder", "[{name: refund}]", billing),
        contract("refund", "refund", orders),
    ]
    .concat();
    let all = verdicts(&text);
    assert_eq!(
        all["ToolContract/status-billing"].reason,
        Reason::Valid,
        "{all:?}"
    );
    assert_eq!(
        all["ToolContract/status-orders"].reason,
        Reason::Valid,
        "{all:?}"
    );
    assert_verdict(
        &all,
        "ToolContract/status-web",
        Reason::ToolConflict,
        "spec.tool",
    );
    assert_eq!(all["AgentPolicy/bot-orders"].reason, Reason::Valid);
    assert_eq!(all["AgentPolicy/bot-billing"].reason, Reason::Valid);
    assert_verdict(
        &all,
        "AgentPolicy/refunds",
        Reason::UnknownTool,
        "spec.tools[0].name",
    );
}

#[test]
fn alone_reports_only_what_needs_no_other_object() {
    let (objects, _) = parse_documents("t", &policy("p", "bot", "[{name: nowhere}]", ""));
    assert!(
        alone(&objects[0]).is_empty(),
        "an unknown tool needs the other objects"
    );
    let (objects, _) = parse_documents("t", &contract("c", "c", "  output: {type: nope}\n"));
    let findings = alone(&objects[0]);
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].error.field.as_deref(), Some("spec.output"));
}

#[test]
fn long_messages_are_bounded() {
    let tools: Vec<String> = (0..400)
        .map(|i| format!("{{name: missing_tool_{i}}}"))
        .collect();
    let text = policy("many", "m", &format!("[{}]", tools.join(", ")), "");
    let v = &verdicts(&text)["AgentPolicy/many"];
    assert_eq!(v.reason, Reason::UnknownTool);
    assert!(v.message.len() <= MAX_MESSAGE, "{}", v.message.len());
    assert!(v.message.ends_with('…'));
}

//! The immutable, compiled policy state a request reads: contracts, routes, policies.
//!
//! `Snapshot::build` is pure (no I/O) and deterministic: objects are taken in key order,
//! every schema, rule and route compiled here, and each object that can't be used comes
//! back as an error naming it. The caller decides whether errors block the whole change
//! (files) or only the bad object (cluster).

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};

use super::agent_policy::Policy;
use super::contract::Contract;
use super::fault::{Fault, FieldError, Finding};
use super::routes::Routes;
pub use super::tool_id::ToolId;
use crate::crd::{LabelSelector, Manifest, ManifestError, Object};

#[derive(Debug)]
pub struct Snapshot {
    pub version: u64,
    /// SHA-256 of the objects it was built from, so two sidecars can compare what they enforce.
    pub digest: String,
    pub contracts: Vec<Contract>,
    pub policies: Vec<Policy>,
    pub routes: Routes,
    /// Grants for tools no contract of this snapshot defines. They don't apply in this
    /// pod: in a namespace of several workloads, one policy grants an agent the tools
    /// of all of them, and each sidecar serves only the contracts selected for it.
    pub unserved: Vec<ManifestError>,
    by_tool: HashMap<String, ToolId>,
    by_agent: HashMap<String, usize>,
}

/// What the build needs from the sidecar's settings and environment.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    pub allow_shadow: bool,
    /// The pod's labels; `None` outside a cluster, where `workloadSelector` is ignored.
    pub pod_labels: Option<BTreeMap<String, String>>,
}

impl Snapshot {
    pub fn build(
        objects: &[Object],
        opts: &BuildOptions,
        version: u64,
    ) -> (Snapshot, Vec<ManifestError>) {
        let (snapshot, findings) = Snapshot::compile(objects, opts, version);
        (snapshot, findings.into_iter().map(|f| f.error).collect())
    }

    /// [`Snapshot::build`], with each error's [`Fault`]: what the controller's condition
    /// reasons are made of.
    pub fn compile(
        objects: &[Object],
        opts: &BuildOptions,
        version: u64,
    ) -> (Snapshot, Vec<Finding>) {
        // One large-stack thread parses every rule, not a thread per rule.
        super::parser::with_parser_stack(|| Snapshot::build_here(objects, opts, version))
    }

    fn build_here(
        objects: &[Object],
        opts: &BuildOptions,
        version: u64,
    ) -> (Snapshot, Vec<Finding>) {
        let mut sorted: Vec<&Object> = objects
            .iter()
            .filter(|o| selected(o, opts.pod_labels.as_ref()))
            .collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));

        let mut errors = Vec::new();
        let fail = |o: &Object, e: FieldError| Finding {
            error: ManifestError {
                origin: o.origin.clone(),
                object: Some(format!("{}/{}", o.key.kind, o.key.name)),
                field: Some(e.field),
                message: e.message,
            },
            fault: e.fault,
        };
        let mut digest = Sha256::new();
        let mut contracts = Vec::new();
        let mut by_tool = HashMap::new();
        let mut routes = Routes::default();
        for o in &sorted {
            let Manifest::ToolContract(spec) = &o.manifest else {
                continue;
            };
            digest.update(o.key.to_string());
            digest.update(serde_json::to_vec(spec).unwrap_or_default());
            let contract = match Contract::compile(format!("ToolContract/{}", o.key.name), spec) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(fail(o, e));
                    continue;
                }
            };
            if let Some(&ToolId(other)) = by_tool.get(&contract.tool) {
                let other: &Contract = &contracts[other];
                let message = format!(
                    "tool {} is already defined by {}",
                    contract.tool, other.object
                );
                errors.push(fail(
                    o,
                    FieldError::new(Fault::ToolConflict, "spec.tool", message),
                ));
                continue;
            }
            let id = ToolId(contracts.len());
            if let Some((method, path)) = &contract.http {
                if let Err(message) = routes.insert(method, path, id) {
                    let conflict = FieldError::new(Fault::RouteConflict, "spec.http", message);
                    errors.push(fail(o, conflict));
                    continue;
                }
            }
            by_tool.insert(contract.tool.clone(), id);
            contracts.push(contract);
        }

        let mut policies = Vec::new();
        let mut unserved = Vec::new();
        let mut by_agent = HashMap::new();
        for o in &sorted {
            let Manifest::AgentPolicy(spec) = &o.manifest else {
                continue;
            };
            digest.update(o.key.to_string());
            digest.update(serde_json::to_vec(spec).unwrap_or_default());
            let mut policy = match Policy::compile(
                format!("AgentPolicy/{}", o.key.name),
                spec,
                opts.allow_shadow,
            ) {
                Ok(p) => p,
                Err(e) => {
                    errors.push(fail(o, e));
                    continue;
                }
            };
            for (i, tool) in spec.tools.iter().enumerate() {
                if !by_tool.contains_key(&tool.name) {
                    policy.grants.remove(&tool.name);
                    let field = format!("spec.tools[{i}].name");
                    let message = format!("no ToolContract defines tool {}", tool.name);
                    unserved.push(fail(o, FieldError::spec(field, message)).error);
                }
                // A requirement on a tool this policy can't call can never be met.
                for (j, requirement) in tool.requires.iter().enumerate() {
                    let message = if !by_tool.contains_key(&requirement.tool) {
                        format!("no ToolContract defines tool {}", requirement.tool)
                    } else if !spec.tools.iter().any(|t| t.name == requirement.tool) {
                        format!(
                            "this policy does not grant tool {}, so the requirement can never be met",
                            requirement.tool
                        )
                    } else {
                        continue;
                    };
                    let field = format!("spec.tools[{i}].requires[{j}].tool");
                    unserved.push(fail(o, FieldError::spec(field, message)).error);
                }
            }
            // The compiled agents are in their one spelling, so a ServiceAccount named
            // both ways by two policies is one agent governed twice.
            if let Some((i, agent)) = policy
                .agents
                .iter()
                .enumerate()
                .find(|(_, a)| by_agent.contains_key(*a))
            {
                let other: &Policy = &policies[by_agent[agent]];
                let message = format!("agent {agent} is already governed by {}", other.object);
                let conflict =
                    FieldError::new(Fault::AgentConflict, format!("spec.agents[{i}]"), message);
                errors.push(fail(o, conflict));
                continue;
            }
            for agent in &policy.agents {
                by_agent.insert(agent.clone(), policies.len());
            }
            policies.push(policy);
        }

        let snapshot = Snapshot {
            version,
            digest: hex::encode(digest.finalize()),
            contracts,
            policies,
            routes,
            unserved,
            by_tool,
            by_agent,
        };
        (snapshot, errors)
    }

    pub fn tool(&self, name: &str) -> Option<ToolId> {
        self.by_tool.get(name).copied()
    }

    pub fn contract(&self, id: ToolId) -> &Contract {
        &self.contracts[id.0]
    }

    pub fn policy_for(&self, agent: &str) -> Option<&Policy> {
        self.by_agent.get(agent).map(|&i| &self.policies[i])
    }

    /// Object names, for `/config`.
    pub fn object_names(&self) -> Vec<String> {
        self.contracts
            .iter()
            .map(|c| c.object.clone())
            .chain(self.policies.iter().map(|p| p.object.clone()))
            .collect()
    }
}

fn selected(o: &Object, labels: Option<&BTreeMap<String, String>>) -> bool {
    let selector: Option<&LabelSelector> = match &o.manifest {
        Manifest::ToolContract(spec) => spec.workload_selector.as_ref(),
        Manifest::AgentPolicy(spec) => spec.workload_selector.as_ref(),
    };
    match (selector, labels) {
        (Some(selector), Some(labels)) => selector.matches(labels),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::fixtures::READ_LOGS;
    use crate::crd::parse_documents;

    fn mk_objects(text: &str) -> Vec<Object> {
        let (objects, errors) = parse_documents("t.yaml", text);
        assert!(errors.is_empty(), "{errors:?}");
        objects
    }

    #[test]
    fn builds_routes_and_policies() {
        let (s, errors) = Snapshot::build(&mk_objects(READ_LOGS), &BuildOptions::default(), 1);
        assert!(errors.is_empty(), "{errors:?}");
        let id = s.tool("read_logs").unwrap();
        assert_eq!(
            s.routes
                .find(&http::Method::GET, "/logs/orders")
                .unwrap()
                .tool,
            id
        );
        assert!(s
            .policy_for("ops-bot")
            .unwrap()
            .grants
            .contains_key("read_logs"));
        assert_eq!(
            s.object_names(),
            vec!["ToolContract/read-logs", "AgentPolicy/ops-bot"]
        );
    }

    #[test]
    fn a_grant_for_a_tool_this_pod_does_not_serve_does_not_apply() {
        let text = READ_LOGS.replace(
            "tools: [{name: read_logs}]",
            "tools: [{name: read_logs}, {name: wipe, rules: [{name: r, expr: 'args.x == 1'}]}]",
        );
        let (s, errors) = Snapshot::build(&mk_objects(&text), &BuildOptions::default(), 1);
        assert!(errors.is_empty(), "{errors:?}");
        let policy = s
            .policy_for("ops-bot")
            .expect("the rest of the policy applies");
        assert!(policy.grants.contains_key("read_logs"));
        assert!(!policy.grants.contains_key("wipe"));
        assert_eq!(s.unserved.len(), 1);
        assert_eq!(s.unserved[0].field.as_deref(), Some("spec.tools[1].name"));
        assert_eq!(s.unserved[0].message, "no ToolContract defines tool wipe");
    }

    /// Defect of issue 19: two workloads in one namespace, one policy granting both.
    #[test]
    fn a_namespace_wide_policy_applies_in_each_workload_s_pod() {
        let text = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: get-order}
spec:
  tool: get_order
  workloadSelector: {matchLabels: {app: orders}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: wipe}
spec:
  tool: wipe
  workloadSelector: {matchLabels: {app: billing}}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: ops-bot}
spec:
  agents: [ops-bot]
  tools: [{name: get_order}, {name: wipe}]
"#;
        for (app, served, unserved) in [
            ("orders", "get_order", "wipe"),
            ("billing", "wipe", "get_order"),
        ] {
            let opts = BuildOptions {
                allow_shadow: false,
                pod_labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
            };
            let (s, errors) = Snapshot::build(&mk_objects(text), &opts, 1);
            assert!(errors.is_empty(), "{app}: {errors:?}");
            let policy = s.policy_for("ops-bot").unwrap();
            assert!(policy.grants.contains_key(served), "{app}");
            assert!(!policy.grants.contains_key(unserved), "{app}");
        }
    }

    #[test]
    fn bad_schema_and_bad_rule_name_their_field() {
        let text = READ_LOGS.replace("input: {type: object}", "input: {type: 7}");
        let (_, errors) = Snapshot::build(&mk_objects(&text), &BuildOptions::default(), 1);
        assert_eq!(errors[0].field.as_deref(), Some("spec.input"));
        let text = READ_LOGS.replace(
            "{name: read_logs}",
            "{name: read_logs, rules: [{name: r, expr: 'args.x >'}]}",
        );
        let (_, errors) = Snapshot::build(&mk_objects(&text), &BuildOptions::default(), 1);
        assert_eq!(
            errors[0].field.as_deref(),
            Some("spec.tools[0].rules[0].expr")
        );
        assert_eq!(errors[0].object.as_deref(), Some("AgentPolicy/ops-bot"));
    }

    /// Each error says what kind of problem it is, for the controller's reasons.
    #[test]
    fn findings_carry_their_fault() {
        let faults = |text: &str| -> Vec<(Fault, String)> {
            let (_, findings) = Snapshot::compile(&mk_objects(text), &BuildOptions::default(), 1);
            findings
                .into_iter()
                .map(|f| (f.fault, f.error.field.unwrap_or_default()))
                .collect()
        };
        let schema = READ_LOGS.replace("input: {type: object}", "input: {type: 7}");
        assert_eq!(
            faults(&schema)[0],
            (Fault::InvalidSchema, "spec.input".into())
        );
        let rule = READ_LOGS.replace(
            "{name: read_logs}",
            "{name: read_logs, approval: {approvers: [a], when: 'args.x >'}}",
        );
        let expected = (Fault::InvalidRule, "spec.tools[0].approval.when".into());
        assert_eq!(faults(&rule), [expected]);
        let twice = format!(
            "{READ_LOGS}---{}",
            READ_LOGS.replace("read-logs}", "again}")
        );
        let found = faults(&twice);
        assert!(
            found.contains(&(Fault::ToolConflict, "spec.tool".into())),
            "{found:?}"
        );
        assert!(
            found.contains(&(Fault::AgentConflict, "spec.agents[0]".into())),
            "{found:?}"
        );
        let route = format!(
            "{READ_LOGS}---\n{}",
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {name: b}\nspec: {tool: b, http: {method: GET, path: '/logs/{name}'}}\n"
        );
        assert_eq!(faults(&route), [(Fault::RouteConflict, "spec.http".into())]);
        let quota = READ_LOGS.replace(
            "agents: [ops-bot]",
            "agents: [ops-bot]\n  rateLimit: {burst: 2}",
        );
        assert_eq!(
            faults(&quota),
            [(Fault::InvalidSpec, "spec.rateLimit".into())]
        );
    }

    #[test]
    fn hostile_rules_fail_alone_on_the_shared_parser_thread() {
        let deep = format!("{}1{}", "(".repeat(2000), ")".repeat(2000));
        let text = READ_LOGS.replace(
            "{name: read_logs}",
            &format!("{{name: read_logs, rules: [{{name: ok, expr: 'args.n > 1'}}, {{name: deep, expr: '{deep}'}}]}}"),
        );
        let (s, errors) = Snapshot::build(&mk_objects(&text), &BuildOptions::default(), 1);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].field.as_deref(),
            Some("spec.tools[0].rules[1].expr")
        );
        assert!(s.policy_for("ops-bot").is_none());
        // The next build still parses on a healthy thread.
        let (_, errors) = Snapshot::build(&mk_objects(READ_LOGS), &BuildOptions::default(), 2);
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn same_objects_same_digest() {
        let (a, _) = Snapshot::build(&mk_objects(READ_LOGS), &BuildOptions::default(), 1);
        let mut reversed = mk_objects(READ_LOGS);
        reversed.reverse();
        let (b, _) = Snapshot::build(&reversed, &BuildOptions::default(), 2);
        assert_eq!(a.digest, b.digest);
    }

    #[test]
    fn workload_selector_filters_in_cluster() {
        let text = READ_LOGS
            .replace(
                "  tool: read_logs\n",
                "  tool: read_logs\n  workloadSelector: {matchLabels: {app: logs}}\n",
            )
            .replace("tools: [{name: read_logs}]", "tools: []");
        let labels = BTreeMap::from([("app".to_string(), "orders".to_string())]);
        let opts = BuildOptions {
            allow_shadow: false,
            pod_labels: Some(labels),
        };
        let (s, _) = Snapshot::build(&mk_objects(&text), &opts, 1);
        assert!(s.tool("read_logs").is_none());
        let (s, _) = Snapshot::build(&mk_objects(&text), &BuildOptions::default(), 1);
        assert!(s.tool("read_logs").is_some());
    }
}

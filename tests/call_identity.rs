//! One identity of a call (DESIGN §14, "A call has one identity"): the binding that
//! approvals, never-twice and dedupe key on is built once per call (`Verdict::call`) and
//! means one thing. Two properties, over generated variants of one refund:
//!
//! - decided through the sidecar's own classify and govern, two variants share an
//!   approval binding exactly when they are the same call (agent, session, tool,
//!   arguments with defaults filled, round fields), and one joins the other's dedupe
//!   entry exactly when duplicate suppression says it should — whatever the key order,
//!   whitespace, or default spelled out;
//! - over real sockets, once an approved variant has run, no other variant runs without
//!   an approval of its own, the identical ones replay, and every request the backend
//!   received has the audit record of the decision that let it.

mod common;

use bytes::Bytes;
use common::*;
use http::Method;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::Arc;
use toolgate::crd::parse_documents;
use toolgate::limits::dedupe;
use toolgate::limits::{Capacity, Clock, Ledger};
use toolgate::policy::{BuildOptions, Snapshot};
use toolgate::proxy::govern::{govern, Governor, Proposal};
use toolgate::proxy::rest::classify::classify;
use toolgate::vocab::Agent;

const POLICIES: &str = "apiVersion: toolgate.dev/v1alpha1
kind: ToolContract
metadata: {name: refund}
spec:
  tool: refund
  http: {method: POST, path: /refunds}
  idempotent: false
  input:
    type: object
    required: [order_id, amount]
    properties:
      order_id: {type: string}
      amount: {type: integer}
      currency: {type: string, default: EUR}
---
apiVersion: toolgate.dev/v1alpha1
kind: AgentPolicy
metadata: {name: agents}
spec:
  agents: [ops-bot, stranger]
  tools:
    - name: refund
      approval: {approvers: [finance-leads]}
";

/// One generated variant: what it means, and how it is spelled.
#[derive(Debug, Clone)]
struct Variant {
    agent: &'static str,
    session: Option<&'static str>,
    key: Option<&'static str>,
    order: &'static str,
    amount: i64,
    /// `None`: left to the default (EUR).
    currency: Option<&'static str>,
    round: Option<Value>,
    /// The body as sent: keys in any order, any whitespace.
    body: String,
}

impl Variant {
    fn currency(&self) -> &str {
        self.currency.unwrap_or("EUR")
    }

    /// The same call, as approvals see it.
    fn same_call(&self, other: &Variant) -> bool {
        self.agent == other.agent && self.session == other.session && self.same_arguments(other)
    }

    fn same_arguments(&self, other: &Variant) -> bool {
        self.order == other.order
            && self.amount == other.amount
            && self.currency() == other.currency()
            && self.round == other.round
    }

    /// One is a duplicate of the other, as never-twice sees it: the same agent, and the
    /// same `Idempotency-Key` or, without one, the same session; and the same call.
    fn duplicate_of(&self, other: &Variant) -> bool {
        let scope = match (self.key, other.key) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.session == other.session,
            _ => false,
        };
        self.agent == other.agent && scope && self.same_arguments(other)
    }
}

fn generate(rng: &mut StdRng) -> Variant {
    let pick = |rng: &mut StdRng, n: usize| rng.random_range(0..n);
    let agent = ["ops-bot", "stranger"][pick(rng, 2)];
    let session = [None, Some("s1"), Some("s2")][pick(rng, 3)];
    let key = [None, None, Some("k1"), Some("k2")][pick(rng, 4)];
    let order = ["A-1", "A-2"][pick(rng, 2)];
    let amount = [5, 500][pick(rng, 2)];
    let currency = [None, Some("EUR"), Some("USD")][pick(rng, 3)];
    let round = [
        None,
        Some(json!({"inputResponses": {}})),
        Some(json!({"requestState": "r1"})),
        Some(json!({"inputResponses": {"confirm": {"action": "accept"}}, "requestState": "r1"})),
    ][pick(rng, 4)]
    .clone();
    let mut fields = vec![
        format!("\"order_id\":\"{order}\""),
        format!("\"amount\":{amount}"),
    ];
    fields.extend(currency.map(|c| format!("\"currency\":\"{c}\"")));
    fields.shuffle(rng);
    let space = [" ", "", "\n  "][pick(rng, 3)];
    let body = format!("{{{space}{}{space}}}", fields.join(&format!(",{space}")));
    Variant {
        agent,
        session,
        key,
        order,
        amount,
        currency,
        round,
        body,
    }
}

/// The identities the sidecar computes for a variant: approval binding, dedupe key, and
/// what a joined flight must share.
fn identities(snapshot: &Snapshot, ledger: &Ledger, v: &Variant) -> ([u8; 16], [u8; 16], [u8; 16]) {
    let body = Bytes::from(v.body.clone());
    let call = classify(snapshot, &Method::POST, "/refunds", None, &body, true)
        .expect("a refund classifies");
    let agent = Agent {
        id: Arc::from(v.agent),
        issuer: Arc::from("tokens"),
        claims: json!({}),
    };
    let headers = http::HeaderMap::new();
    let governor = Governor {
        ledger,
        shared: None,
        tasks: None,
        audit_refuses: false,
        approvals: None,
    };
    let proposal = Proposal {
        tool: call.tool,
        args: call.args,
        round: v.round.clone(),
        idempotency_key: v.key,
        agent: &agent,
        method: "POST",
        path: "/refunds",
        headers: &headers,
        session: v.session,
        trace_id: "0af7651916cd43dd8448eb211c80319c",
    };
    let mut captured = Default::default();
    // Without an approvals store, a call needing one is refused: decide it as a grant
    // with no approval would, through the same core, by asking for the identity only.
    let verdict = futures_executor::block_on(govern(&governor, snapshot, proposal, &mut captured));
    let verdict = match verdict {
        Ok(verdict) => verdict,
        Err(reject) => panic!("{v:?}: {reject:?}"),
    };
    let call = verdict.call();
    (call.binding(), dedupe::key(&call), call.identity())
}

#[test]
fn an_identity_is_shared_only_by_the_same_call() {
    // The grant's approval is dropped here: `govern` without an approvals store would
    // refuse the call; the identity is what is under test.
    let policies = POLICIES.replace("      approval: {approvers: [finance-leads]}\n", "");
    let (snapshot, errors) = Snapshot::build(
        &parse_documents("t.yaml", &policies).0,
        &BuildOptions::default(),
        1,
    );
    assert!(errors.is_empty(), "{errors:?}");
    let ledger = Ledger::new(
        Capacity::from_settings(&toolgate::config::Limits::default()),
        Clock::fake(),
    );
    let mut rng = StdRng::seed_from_u64(0x005e_ed1d);
    let variants: Vec<Variant> = (0..240).map(|_| generate(&mut rng)).collect();
    let ids: Vec<_> = variants
        .iter()
        .map(|v| identities(&snapshot, &ledger, v))
        .collect();
    let (mut same, mut joined) = (0, 0);
    for (i, a) in variants.iter().enumerate() {
        for (j, b) in variants.iter().enumerate().skip(i + 1) {
            let (ia, ib) = (ids[i], ids[j]);
            assert_eq!(
                ia.0 == ib.0,
                a.same_call(b),
                "approval binding of\n{a:?}\nand\n{b:?}"
            );
            let joins = ia.1 == ib.1 && ia.2 == ib.2;
            assert_eq!(joins, a.duplicate_of(b), "dedupe of\n{a:?}\nand\n{b:?}");
            same += usize::from(a.same_call(b));
            joined += usize::from(joins);
        }
    }
    // The generator reaches both sides of each property.
    assert!(same > 50 && joined > 50, "same {same}, joined {joined}");
}

/// An approved refund runs once; afterwards generated variants of it either replay it
/// (the same call) or are held for their own approval, never run; every request the
/// backend received has an allowed record naming the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_variant_runs_on_another_calls_approval() {
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ran.clone();
    let backend = Backend::start(Arc::new(move |_: &Seen| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (
            201,
            vec![("content-type", "application/json".to_string())],
            r#"{"refund":"R-1"}"#.into(),
            std::time::Duration::ZERO,
        )
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let approvers = dir.path().join("approvers.yaml");
    std::fs::write(
        &approvers,
        format!(
            "alice: {{sha256: {}, groups: [finance-leads]}}\n",
            toolgate::identity::tokens::digest_hex("alice-token")
        ),
    )
    .unwrap();
    let h = Harness::start(
        backend.addr,
        Options {
            policies: POLICIES.into(),
            tweak: Box::new(move |s| s.approvals.approvers.tokens = Some(approvers)),
            ..Options::default()
        },
    )
    .await;
    let send = |v: Variant| {
        let h = &h;
        async move {
            let token = if v.agent == "ops-bot" {
                OPS_TOKEN
            } else {
                STRANGER_TOKEN
            };
            let mut headers = vec![];
            if let Some(session) = v.session {
                headers.push(("x-toolgate-session", session));
            }
            if let Some(key) = v.key {
                headers.push(("idempotency-key", key));
            }
            h.call("POST", "/refunds", Some(token), &headers, &v.body)
                .await
        }
    };
    let approve = |id: String| {
        let h = &h;
        async move {
            let request = http::Request::post(format!("{}/approvals/{id}/approve", h.admin()))
                .header("authorization", "Bearer alice-token")
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap();
            let r = Reply::read(h.client.request(request).await.unwrap()).await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    let held = |r: &Reply| -> String {
        r.assert_refused("APPROVAL_REQUIRED", 202);
        r.json["error"]["details"][0]["approvalId"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut rng = StdRng::seed_from_u64(0xa11ce);
    // REST carries no round fields: those variants are MCP's (tests/approvals.rs).
    let mut variant = || Variant {
        round: None,
        ..generate(&mut rng)
    };
    let base = variant();
    let first = held(&send(base.clone()).await);
    approve(first.clone()).await;
    let r = send(base.clone()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut approvals = vec![first];
    for _ in 0..60 {
        let v = variant();
        let r = send(v.clone()).await;
        if v.duplicate_of(&base) {
            assert_eq!(r.status, 201, "{v:?}: {}", r.text);
            assert_eq!(r.header("x-toolgate-replayed"), "true", "{v:?}");
        } else {
            let id = held(&r);
            // Held again while pending: the same approval; a fresh one otherwise.
            if !approvals.contains(&id) {
                approvals.push(id);
            }
        }
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{v:?} ran"
        );
    }
    let file = h.audit_file();
    let _kept = h.stop_keeping_files().await;
    let log = std::fs::read_to_string(file).unwrap();
    let calls = audit_calls(&log);
    let ran_under: Vec<_> = calls
        .iter()
        .filter(|c| c["decision"] == "allow" && c.get("replayed").is_none())
        .collect();
    assert_eq!(ran_under.len(), 1, "{log}");
    assert_eq!(ran_under[0]["approval"]["id"], approvals[0].as_str());
    // The one request the backend received came under that record's trace.
    let seen = backend.last();
    let traceparent = seen.headers["traceparent"].to_str().unwrap();
    assert_eq!(
        traceparent.split('-').nth(1),
        ran_under[0]["traceId"].as_str()
    );
}

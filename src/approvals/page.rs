//! Listing approvals a page at a time (`GET /approvals?limit=&cursor=&status=`).
//!
//! The order is newest first: creation time, then id, both descending — the order of
//! the shared state's index, so both stores page the same way. A cursor names the last
//! approval a page looked at; the next page starts after it, so approvals created or
//! dropped meanwhile never shift a page. A page holds at most `limit` approvals, those
//! the approver may decide (and of the status asked for); it may hold fewer — even none
//! — and still name a next cursor, when the store stopped looking (the shared state
//! looks at a bounded number of approvals per request). Items are summaries: the
//! `APPROVAL` object without its arguments, so a page costs kilobytes whatever the
//! approvals hold.

use serde_json::{json, Value};

use super::{Approval, Status};

/// Approvals per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest `limit` accepted.
pub const MAX_LIMIT: usize = 1000;

/// A position in the listing order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_ms: u64,
    pub id: String,
}

impl Cursor {
    pub fn of(approval: &Approval) -> Cursor {
        Cursor {
            created_ms: approval.created_ms,
            id: approval.id.clone(),
        }
    }

    /// `<createdMs>_<id>`, as the API hands it out; `None` if `text` isn't one.
    pub fn parse(text: &str) -> Option<Cursor> {
        let (created, id) = text.split_once('_')?;
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '-';
        if id.is_empty() || id.len() > 128 || !id.chars().all(plain) {
            return None;
        }
        Some(Cursor {
            created_ms: created.parse().ok()?,
            id: id.to_string(),
        })
    }

    pub fn text(&self) -> String {
        format!("{}_{}", self.created_ms, self.id)
    }

    /// Whether an approval created at `created_ms` with `id` comes after this position
    /// in the listing order (older, or as old with a smaller id).
    pub fn is_before(&self, created_ms: u64, id: &str) -> bool {
        (created_ms, id) < (self.created_ms, self.id.as_str())
    }
}

/// What one page asks for.
#[derive(Debug, Clone)]
pub struct Query {
    /// Only approvals in this state (as of now).
    pub status: Option<Status>,
    /// The approver's groups: only approvals they may decide are listed.
    pub groups: Vec<String>,
    pub after: Option<Cursor>,
    /// At most this many approvals (1 ..= [`MAX_LIMIT`]).
    pub limit: usize,
}

impl Query {
    pub fn matches(&self, approval: &Approval, now_ms: u64) -> bool {
        approval.decidable_by(&self.groups)
            && self.status.is_none_or(|s| approval.status_at(now_ms) == s)
    }
}

/// One page: summaries, and where the next page starts (`None`: this was the last).
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub approvals: Vec<Value>,
    pub next: Option<Cursor>,
}

impl Page {
    /// The API's answer: `{"approvals": [...], "nextCursor": "…" | null}`.
    pub fn body(&self) -> Value {
        json!({
            "approvals": self.approvals,
            "nextCursor": self.next.as_ref().map(Cursor::text),
        })
    }
}

/// A page of `kept` (any order) for `query`: newest first after the cursor, matching
/// ones summarized until `limit`.
pub fn page_of<'a>(kept: impl Iterator<Item = &'a Approval>, query: &Query, now_ms: u64) -> Page {
    let mut order: Vec<&Approval> = kept
        .filter(|a| {
            let after = query.after.as_ref();
            after.is_none_or(|c| c.is_before(a.created_ms, &a.id))
        })
        .collect();
    order.sort_unstable_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
    let mut page = Page::default();
    for (i, approval) in order.iter().enumerate() {
        if page.approvals.len() == query.limit {
            page.next = i.checked_sub(1).map(|last| Cursor::of(order[last]));
            break;
        }
        if query.matches(approval, now_ms) {
            page.approvals.push(approval.summary(now_ms));
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk(id: &str, created_ms: u64, group: &str) -> Approval {
        Approval {
            id: id.into(),
            status: Status::Pending,
            tool: "refund".into(),
            agent: "ops-bot".into(),
            session: None,
            arguments: r#"{"amount":500}"#.into(),
            condition: "always".into(),
            approvers: vec![group.into()],
            created_ms,
            expires_ms: 1_000_000,
            decided_by: None,
            reason: None,
            binding: id.into(),
        }
    }

    fn mk_query(limit: usize, after: Option<Cursor>) -> Query {
        Query {
            status: None,
            groups: vec!["finance".into()],
            after,
            limit,
        }
    }

    #[test]
    fn pages_walk_newest_first_without_arguments_and_end() {
        let kept = [
            mk("apr-a", 10, "finance"),
            mk("apr-b", 30, "finance"),
            mk("apr-c", 20, "support"),
            mk("apr-e", 20, "finance"),
            mk("apr-d", 20, "finance"),
        ];
        let ids = |p: &Page| -> Vec<String> {
            p.approvals
                .iter()
                .map(|a| a["id"].as_str().unwrap().to_string())
                .collect()
        };
        let first = page_of(kept.iter(), &mk_query(2, None), 0);
        assert_eq!(ids(&first), ["apr-b", "apr-e"]);
        assert!(first.approvals[0].get("arguments").is_none());
        let next = first.next.clone().unwrap();
        assert_eq!(Cursor::parse(&next.text()), Some(next.clone()));
        let second = page_of(kept.iter(), &mk_query(2, Some(next)), 0);
        // apr-c is support's: skipped, not listed.
        assert_eq!(ids(&second), ["apr-d", "apr-a"]);
        assert!(second.next.is_none(), "nothing after the oldest");
        assert_eq!(second.body()["nextCursor"], Value::Null);
    }

    #[test]
    fn cursors_that_are_not_cursors_are_refused() {
        for text in [
            "",
            "12",
            "x_apr-1",
            "12_",
            "12_apr 1",
            "-1_apr-1",
            "12_apr/../x",
        ] {
            assert_eq!(Cursor::parse(text), None, "{text:?}");
        }
    }
}

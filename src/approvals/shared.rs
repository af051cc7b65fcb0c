//! Approvals in the shared state (`state.backend: redis`), on its connection and keys:
//! any pod can decide an approval, and any pod runs the approved call, once.
//!
//! Every approval key shares the hash tag `{approvals}`, so in a Redis Cluster the
//! scripts below, which read and write several of them, stay in one slot:
//!
//! ```text
//! toolgate:{approvals}:a:<id>        hash: json (the approval as requested), status,
//!                                    decidedBy, reason, expiresMs
//! toolgate:{approvals}:b:<binding>   the live approval's id for a call's binding
//! toolgate:{approvals}:index         sorted set of ids by creation, for listings
//! ```
//!
//! Each transition is one script, so two pods can't both take an approval, nor decide
//! one twice. Keys live until the approval's expiry plus an hour (for listings).

use redis::Script;
use std::sync::LazyLock;

use super::backlog::Backlog;
use super::memory::KEEP_AFTER_MS;
use super::{Approval, DecideError, Decision, Requested, Status};
use crate::state::link::{Op, Unavailable};
use crate::state::Shared;

const TAG: &str = "{approvals}";

static REQUEST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = redis.call('GET', KEYS[1])
local expired = {}
if id then
  local h = redis.call('HMGET', ARGV[5] .. id, 'json', 'status', 'decidedBy', 'reason', 'expiresMs')
  local live = h[2] == 'pending' or h[2] == 'approved' or h[2] == 'denied'
  local before = tonumber(h[5]) and now < tonumber(h[5])
  if h[1] and live and before then return h end
  -- Pending or approved and out of time: the new approval replaces an expired one.
  if h[1] and (h[2] == 'pending' or h[2] == 'approved') then expired = h end
end
redis.call('HSET', KEYS[2], 'json', ARGV[2], 'status', 'pending', 'expiresMs', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[4]))
local out = {ARGV[2], 'pending', '', '', ARGV[3]}
if expired[1] then
  for i = 1, 5 do out[5 + i] = expired[i] or '' end
end
return out",
    )
});

static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'status', 'expiresMs')
if h[1] == 'approved' and tonumber(h[2]) and now < tonumber(h[2]) then
  redis.call('HSET', KEYS[1], 'status', 'used')
  return 1
end
return 0",
    )
});

static DECIDE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'json', 'status', 'decidedBy', 'reason', 'expiresMs')
if not h[1] then return {0} end
if h[2] ~= 'pending' or not tonumber(h[5]) or now >= tonumber(h[5]) then
  return {2, h[1], h[2], h[3], h[4], h[5]}
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'decidedBy', ARGV[2], 'reason', ARGV[3])
return {1, h[1], ARGV[1], ARGV[2], ARGV[3], h[5]}",
    )
});

static LIST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local h = redis.call('HMGET', ARGV[1] .. id, 'json', 'status', 'decidedBy', 'reason', 'expiresMs')
  if h[1] then
    for i = 1, 5 do out[#out + 1] = h[i] end
  end
end
return out",
    )
});

/// The pending approvals among the oldest `ARGV[2]` of the index: their count and the
/// index score (creation time) of the oldest.
static BACKLOG: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
local pending, oldest = 0, 0
for i = 1, #ids, 2 do
  local h = redis.call('HMGET', ARGV[1] .. ids[i], 'status', 'expiresMs')
  if h[1] == 'pending' and tonumber(h[2]) and now < tonumber(h[2]) then
    pending = pending + 1
    if oldest == 0 then oldest = tonumber(ids[i + 1]) end
  end
end
return {pending, oldest}",
    )
});

/// The approval store on a sidecar's shared state.
pub struct SharedApprovals(pub std::sync::Arc<Shared>);

impl SharedApprovals {
    fn approval_key(&self, part: &str) -> String {
        format!("{}{TAG}:{part}", self.0.keys().prefix())
    }

    fn link(&self) -> &crate::state::link::Link {
        self.0.link()
    }

    /// The live approval of `fresh`'s binding, or `fresh` itself, now stored (with the
    /// expired one it replaces).
    pub async fn request_approval(&self, fresh: &Approval) -> Result<Requested, Unavailable> {
        let json = serde_json::to_string(fresh).map_err(|e| Unavailable(e.to_string()))?;
        let keep = fresh
            .expires_ms
            .saturating_sub(fresh.created_ms)
            .saturating_add(KEEP_AFTER_MS);
        let mut invocation = REQUEST.prepare_invoke();
        invocation
            .key(self.approval_key(&format!("b:{}", fresh.binding)))
            .key(self.approval_key(&format!("a:{}", fresh.id)))
            .key(self.approval_key("index"))
            .arg(&fresh.id)
            .arg(json)
            .arg(fresh.expires_ms)
            .arg(keep)
            .arg(self.approval_key("a:"))
            .arg(fresh.created_ms);
        let reply: redis::Value = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        let fields = strings(reply);
        let current = read(&fields)
            .ok_or_else(|| Unavailable("an approval in Redis can't be read".into()))?;
        let expired = fields.get(5..).and_then(read);
        Ok(Requested { current, expired })
    }

    /// Marks an approved, unexpired approval used; `false` if it is not (any more).
    pub async fn take_approval(&self, id: &str) -> Result<bool, Unavailable> {
        let key = self.approval_key(&format!("a:{id}"));
        let taken: i64 = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                TAKE.key(key).invoke_async(&mut conn).await
            })
            .await?;
        Ok(taken == 1)
    }

    pub async fn get_approval(&self, id: &str) -> Result<Option<Approval>, Unavailable> {
        let key = self.approval_key(&format!("a:{id}"));
        let reply: redis::Value = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg(&["json", "status", "decidedBy", "reason", "expiresMs"][..])
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let fields = strings(reply);
        Ok(fields.first().and_then(Option::as_ref).and(read(&fields)))
    }

    /// Approvals, newest first, at most `limit`.
    pub async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, Unavailable> {
        let index = self.approval_key("index");
        let prefix = self.approval_key("a:");
        let reply: redis::Value = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                LIST.key(index)
                    .arg(prefix)
                    .arg(limit)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        let fields = strings(reply);
        Ok(fields.chunks(5).filter_map(read).collect())
    }

    /// The pending approvals among the oldest `limit`, in one script.
    pub async fn backlog(&self, limit: usize) -> Result<Backlog, Unavailable> {
        let index = self.approval_key("index");
        let prefix = self.approval_key("a:");
        let (pending, oldest): (u64, u64) = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                BACKLOG
                    .key(index)
                    .arg(prefix)
                    .arg(limit)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(Backlog {
            pending,
            oldest_created_ms: (oldest > 0).then_some(oldest),
        })
    }

    pub async fn decide_approval(
        &self,
        id: &str,
        decision: &Decision,
    ) -> Result<Approval, DecideError> {
        let key = self.approval_key(&format!("a:{id}"));
        let status = if decision.approve {
            Status::Approved
        } else {
            Status::Denied
        };
        let (by, reason) = (
            decision.by.clone(),
            decision.reason.clone().unwrap_or_default(),
        );
        let reply: redis::Value = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                DECIDE
                    .key(key)
                    .arg(status.as_str())
                    .arg(by)
                    .arg(reason)
                    .invoke_async(&mut conn)
                    .await
            })
            .await
            .map_err(|e| DecideError::Unavailable(e.0))?;
        let fields = strings(reply);
        let unreadable = || DecideError::Unavailable("an approval in Redis can't be read".into());
        match fields.first().and_then(|f| f.as_deref()) {
            Some("0") => Err(DecideError::NotFound),
            Some("1") => read(&fields[1..]).ok_or_else(unreadable),
            Some("2") => {
                let mut current = read(&fields[1..]).ok_or_else(unreadable)?;
                current.status = current.status_at(crate::approvals::now_ms());
                Err(DecideError::NotPending(Box::new(current)))
            }
            _ => Err(unreadable()),
        }
    }
}

/// A script's flat reply as optional strings (integers as their digits).
fn strings(reply: redis::Value) -> Vec<Option<String>> {
    let items = match reply {
        redis::Value::Array(items) => items,
        other => vec![other],
    };
    items
        .into_iter()
        .map(|item| match item {
            redis::Value::BulkString(b) => String::from_utf8(b).ok(),
            redis::Value::SimpleString(s) => Some(s),
            redis::Value::Int(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

/// An approval from its five fields: json, status, decidedBy, reason, expiresMs.
fn read(fields: &[Option<String>]) -> Option<Approval> {
    let mut approval: Approval = serde_json::from_str(fields.first()?.as_deref()?).ok()?;
    approval.status = Status::parse(fields.get(1)?.as_deref()?)?;
    approval.decided_by = fields.get(2).cloned().flatten().filter(|s| !s.is_empty());
    approval.reason = fields.get(3).cloned().flatten().filter(|s| !s.is_empty());
    approval.expires_ms = fields.get(4)?.as_deref()?.parse().ok()?;
    Some(approval)
}

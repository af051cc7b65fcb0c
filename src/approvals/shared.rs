//! Approvals in the shared state (`state.backend: redis`), on its connection and keys:
//! any pod can decide an approval, and any pod runs the approved call, once.
//!
//! Every approval key shares the hash tag `{approvals}`, so in a Redis Cluster the
//! scripts below, which read and write several of them, stay in one slot:
//!
//! ```text
//! toolgate:{approvals}:a:<id>        hash: json (the approval as requested), head (the
//!                                    same without its arguments, for listings),
//!                                    approvers, status, decidedBy, reason, expiresMs
//! toolgate:{approvals}:b:<binding>   the live approval's id for a call's binding
//! toolgate:{approvals}:index         sorted set of ids by creation, for listings
//! toolgate:{approvals}:drop          sorted set of ids by when they are dropped
//! toolgate:{approvals}:sizes         hash: id → bytes of its arguments
//! toolgate:{approvals}:bytes         the bytes of arguments held, all approvals
//! ```
//!
//! Each transition is one script, so two pods can't both take an approval, nor decide
//! one twice. Keys live until the approval's expiry plus an hour (for listings). The
//! bounds (`approvals.maxPending`, `approvals.maxPendingBytes`) hold for the whole
//! Deployment: a request drops what is past its keep, and when full what is no longer
//! live (used, expired), then refuses rather than drop a live approval. A listing is a
//! page of heads, never arguments, and looks at a bounded number of approvals.

use redis::Script;
use std::sync::{Arc, LazyLock};

use super::backlog::Backlog;
use super::memory::{Bounds, Full, KEEP_AFTER_MS};
use super::page::{Cursor, Page, Query};
use super::{now_ms, Approval, DecideError, Decision, Requested, Status};
use crate::state::link::{Op, Unavailable};
use crate::state::Shared;

const TAG: &str = "{approvals}";
/// Approvals one listing request looks at, at most: a page may end early (with a
/// cursor) rather than hold Redis for a long scan.
const SCAN_BUDGET: usize = 2000;

/// Why an approval was not stored.
#[derive(Debug)]
pub enum Refused {
    /// A bound is reached and nothing could be dropped to make room.
    Full(Full),
    Unavailable(Unavailable),
}

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
local function drop(old)
  local size = tonumber(redis.call('HGET', KEYS[5], old)) or 0
  redis.call('HDEL', KEYS[5], old)
  redis.call('ZREM', KEYS[4], old)
  redis.call('ZREM', KEYS[3], old)
  if size > 0 then redis.call('DECRBY', KEYS[6], size) end
end
local function full()
  if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[10]) then return 'count' end
  local held = tonumber(redis.call('GET', KEYS[6])) or 0
  if held + tonumber(ARGV[9]) > tonumber(ARGV[11]) then return 'bytes' end
  return nil
end
-- Past their keep: gone.
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 256)) do
  drop(old)
end
if full() then
  -- Kept only to be looked at (used, expired): make room before refusing a live call.
  for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, 255)) do
    local h = redis.call('HMGET', ARGV[5] .. old, 'status', 'expiresMs')
    local live = h[1] and h[1] ~= 'used' and tonumber(h[2]) and now < tonumber(h[2])
    if not live then
      drop(old)
      redis.call('DEL', ARGV[5] .. old)
      if not full() then break end
    end
  end
end
local why = full()
if why then return {'full', why} end
redis.call('HSET', KEYS[2], 'json', ARGV[2], 'head', ARGV[7], 'approvers', ARGV[8], 'status', 'pending', 'expiresMs', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[4]))
redis.call('ZADD', KEYS[4], ARGV[12], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[9])
redis.call('INCRBY', KEYS[6], ARGV[9])
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

/// A page: KEYS[1] the index; ARGV: approval key prefix, the cursor's creation time
/// (`+inf` for the first page), the cursor's id (or ''), limit, status (or ''), the
/// approver's groups (JSON), scan budget. Returns `more`, the last id looked at and its
/// score, then five fields per approval: head (json for approvals stored before heads
/// were), status, decidedBy, reason, expiresMs.
static PAGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, budget = tonumber(ARGV[4]), tonumber(ARGV[7])
local groups = {}
for _, g in ipairs(cjson.decode(ARGV[6])) do groups[g] = true end
local function decidable(approvers)
  for _, g in ipairs(cjson.decode(approvers)) do
    if groups[g] then return true end
  end
  return false
end
local out = {'0', '', ''}
local found, looked, offset, done = 0, 0, 0, false
while not done do
  local batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[2], '-inf', 'WITHSCORES', 'LIMIT', offset, 100)
  if #batch == 0 then break end
  offset = offset + #batch / 2
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    local seen = ARGV[3] ~= '' and tonumber(score) == tonumber(ARGV[2]) and id >= ARGV[3]
    if not seen then
      if found >= limit or looked >= budget then
        out[1] = '1'
        done = true
        break
      end
      looked = looked + 1
      out[2], out[3] = id, score
      local h = redis.call('HMGET', ARGV[1] .. id, 'head', 'status', 'decidedBy', 'reason', 'expiresMs', 'approvers', 'json')
      if h[2] and (h[1] or h[7]) then
        local status = h[2]
        if (status == 'pending' or status == 'approved') and tonumber(h[5]) and now >= tonumber(h[5]) then
          status = 'expired'
        end
        local approvers = h[6] or cjson.encode(cjson.decode(h[7]).approvers)
        if (ARGV[5] == '' or ARGV[5] == status) and decidable(approvers) then
          found = found + 1
          local fields = {h[1] or h[7], h[2], h[3] or '', h[4] or '', h[5]}
          for j = 1, 5 do out[#out + 1] = fields[j] end
        end
      end
    end
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
pub struct SharedApprovals {
    shared: Arc<Shared>,
    bounds: Bounds,
}

impl SharedApprovals {
    pub fn new(shared: Arc<Shared>, bounds: Bounds) -> SharedApprovals {
        SharedApprovals { shared, bounds }
    }

    fn approval_key(&self, part: &str) -> String {
        format!("{}{TAG}:{part}", self.shared.keys().prefix())
    }

    fn link(&self) -> &crate::state::link::Link {
        self.shared.link()
    }

    /// The live approval of `fresh`'s binding, or `fresh` itself, now stored (with the
    /// expired one it replaces), or why it can't be.
    pub async fn request_approval(&self, fresh: &Approval) -> Result<Requested, Refused> {
        let unreadable = |e: serde_json::Error| Refused::Unavailable(Unavailable(e.to_string()));
        let json = serde_json::to_string(fresh).map_err(unreadable)?;
        let head = serde_json::to_string(&fresh.head()).map_err(unreadable)?;
        let approvers = serde_json::to_string(&fresh.approvers).map_err(unreadable)?;
        let keep = fresh
            .expires_ms
            .saturating_sub(fresh.created_ms)
            .saturating_add(KEEP_AFTER_MS);
        let mut invocation = REQUEST.prepare_invoke();
        invocation
            .key(self.approval_key(&format!("b:{}", fresh.binding)))
            .key(self.approval_key(&format!("a:{}", fresh.id)))
            .key(self.approval_key("index"))
            .key(self.approval_key("drop"))
            .key(self.approval_key("sizes"))
            .key(self.approval_key("bytes"))
            .arg(&fresh.id)
            .arg(json)
            .arg(fresh.expires_ms)
            .arg(keep)
            .arg(self.approval_key("a:"))
            .arg(fresh.created_ms)
            .arg(head)
            .arg(approvers)
            .arg(fresh.weight())
            .arg(self.bounds.count)
            .arg(self.bounds.bytes)
            .arg(fresh.expires_ms.saturating_add(KEEP_AFTER_MS));
        let reply: redis::Value = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await
            .map_err(Refused::Unavailable)?;
        let fields = strings(reply);
        if fields.first().and_then(Option::as_deref) == Some("full") {
            let why = match fields.get(1).and_then(Option::as_deref) {
                Some("bytes") => Full::Bytes,
                _ => Full::Count,
            };
            return Err(Refused::Full(why));
        }
        let current = read(&fields).ok_or_else(|| {
            Refused::Unavailable(Unavailable("an approval in Redis can't be read".into()))
        })?;
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

    /// One page of approvals, newest first, as summaries.
    pub async fn page_approvals(&self, query: &Query) -> Result<Page, Unavailable> {
        let index = self.approval_key("index");
        let prefix = self.approval_key("a:");
        let (max, after) = match &query.after {
            Some(cursor) => (cursor.created_ms.to_string(), cursor.id.clone()),
            None => ("+inf".to_string(), String::new()),
        };
        let status = query.status.map_or("", Status::as_str);
        let groups =
            serde_json::to_string(&query.groups).map_err(|e| Unavailable(e.to_string()))?;
        let limit = query.limit;
        let reply: redis::Value = self
            .link()
            .call(Op::Approval, |mut conn| async move {
                PAGE.key(index)
                    .arg(prefix)
                    .arg(max)
                    .arg(after)
                    .arg(limit)
                    .arg(status)
                    .arg(groups)
                    .arg(SCAN_BUDGET)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        let fields = strings(reply);
        let now = now_ms();
        let approvals = fields
            .get(3..)
            .unwrap_or_default()
            .chunks(5)
            .filter_map(read)
            .map(|a| a.summary(now))
            .collect();
        let field = |i: usize| fields.get(i).cloned().flatten();
        let next = match field(0).as_deref() {
            Some("1") => Some(Cursor {
                id: field(1).unwrap_or_default(),
                created_ms: field(2)
                    .and_then(|s| s.parse::<f64>().ok())
                    .map_or(0, |score| score as u64),
            }),
            _ => None,
        };
        Ok(Page { approvals, next })
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

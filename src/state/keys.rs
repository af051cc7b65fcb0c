//! Key names in Redis, all under `state.redis.keyPrefix`.
//!
//! Every key a call's admission touches (its rate limiters, its session, its claim) is
//! tagged with its agent, `{agent}`, so in a Redis Cluster they share a slot and one
//! script can read and write them all atomically. A `{` or `}` in an agent id is escaped
//! (`%7B`, `%7D`, and `%` as `%25`) so the tag always ends where the agent id does.
//!
//! ```text
//! toolgate:{ops-bot}:rate:t:<tool>:<perSecond>/<perMinute>/<burst>   GCRA TAT (µs)
//! toolgate:{ops-bot}:rate:a:<perSecond>/<perMinute>/<burst>          GCRA TAT (µs)
//! toolgate:{ops-bot}:session:<session id>                            hash c, l, s
//! toolgate:{ops-bot}:once:<32 hex>                                   claim, then result
//! toolgate:{ops-bot}:budget:<p:policy | g:policy:tool>:<local date>  spent today
//! toolgate:{ops-bot}:history:<session id | NUL task:<id>>           list of successful calls
//! toolgate:action:<tool>:<32 hex>                                     dedupeKey owner
//! toolgate:mcp-session:<Mcp-Session-Id>                              owning agent
//! ```
//!
//! A quota is part of a limiter's key, as in memory: a changed quota starts afresh.

use crate::limits::canonical::Key;
use crate::policy::quota::Quota;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn agent(&self, agent: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + agent.len() + 16);
        key.push_str(&self.prefix);
        key.push('{');
        for c in agent.chars() {
            match c {
                '%' => key.push_str("%25"),
                '{' => key.push_str("%7B"),
                '}' => key.push_str("%7D"),
                c => key.push(c),
            }
        }
        key.push('}');
        key
    }

    /// The limiter of `quota` for the agent (`tool: None`) or the agent and one tool.
    pub fn rate(&self, agent: &str, tool: Option<&str>, quota: &Quota) -> String {
        let spec = quota.spec;
        let n = |v: Option<u32>| v.map_or(0, u64::from);
        let scope = match tool {
            Some(tool) => format!("t:{tool}"),
            None => "a".to_string(),
        };
        format!(
            "{}:rate:{scope}:{}/{}/{}",
            self.agent(agent),
            n(spec.per_second),
            n(spec.per_minute),
            n(spec.burst)
        )
    }

    pub fn session(&self, agent: &str, session: &str) -> String {
        format!("{}:session:{session}", self.agent(agent))
    }

    /// What the agent spent on `budget` (`p:<policy>` or `g:<policy>:<tool>`) on `day`.
    pub fn budget(&self, agent: &str, budget: &str, day: &str) -> String {
        format!("{}:budget:{budget}:{day}", self.agent(agent))
    }

    /// The successful calls `requires` reads, per agent and task or session.
    pub fn history(&self, agent: &str, scope: &str) -> String {
        format!("{}:history:{scope}", self.agent(agent))
    }

    /// The never-twice claim of a call (its dedupe key already names the agent).
    pub fn claim(&self, agent: &str, key: &Key) -> String {
        format!("{}:once:{}", self.agent(agent), hex::encode(key))
    }

    /// The owner of a `dedupeKey` action (`digest`: of the key's value).
    pub fn action(&self, tool: &str, digest: &Key) -> String {
        format!("{}action:{tool}:{}", self.prefix, hex::encode(digest))
    }

    pub fn mcp_session(&self, session: &str) -> String {
        format!("{}mcp-session:{session}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot-deciding part of a key, as Redis Cluster reads it.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = open + key[open..].find('}').unwrap();
        &key[open + 1..close]
    }

    #[test]
    fn one_calls_keys_share_a_hash_tag_whatever_the_agent_id() {
        let keys = Keys::new("toolgate:");
        let quota = Quota::compile(
            "r",
            &crate::crd::RateLimit {
                per_second: Some(5),
                per_minute: None,
                burst: Some(2),
            },
        )
        .unwrap();
        for agent in ["ops-bot", "}weird{", "%7D", "a}b"] {
            let all = [
                keys.rate(agent, Some("refund"), &quota),
                keys.rate(agent, None, &quota),
                keys.session(agent, "s{1}"),
                keys.claim(agent, &[7; 16]),
            ];
            let tag = hash_tag(&all[0]);
            assert!(!tag.is_empty());
            assert!(all.iter().all(|k| hash_tag(k) == tag), "{all:?}");
        }
        assert_ne!(
            hash_tag(&keys.session("}a", "s")),
            hash_tag(&keys.session("%7Da", "s"))
        );
        assert_eq!(
            keys.rate("ops-bot", Some("refund"), &quota),
            "toolgate:{ops-bot}:rate:t:refund:5/0/2"
        );
    }
}

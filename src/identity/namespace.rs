//! Which agent ids a source may assert.
//!
//! A sidecar can trust several sources of agent identity at once: the static token file,
//! client certificates, and any number of JWT issuers. Each must speak only for its own
//! agents, or a second issuer signing `sub: ops-bot` would *be* ops-bot. So:
//!
//! - with more than one source, every JWT issuer but the first source declares an
//!   `agentPrefix` (the settings refuse to start otherwise, `config::sources`), and its
//!   agent ids are that prefix plus the claim;
//! - prefixes never overlap (no prefix starts another), so a prefixed id belongs to exactly
//!   one issuer, whatever its claim says;
//! - a source without a prefix (token file, client certificate, the first issuer) may not
//!   assert an id that starts with a declared prefix: that id is another source's.
//!
//! Independently of the source, an id holding a control character (or an invisible
//! bidirectional or line-separator one) is refused: it would split a log line, drop out
//! of the `X-Toolgate-Agent` header the backend reads, or show as another id to a person.

use std::sync::Arc;

use crate::vocab::agent::unprintable;

/// Why an asserted id is not admitted. For the log; the agent learns only that its
/// credential is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForeignId {
    #[error("the agent id holds a control or invisible formatting character")]
    Unprintable,
    #[error("the agent id starts with {prefix:?}, another issuer's agentPrefix")]
    Reserved { prefix: Arc<str> },
}

/// Every declared `agentPrefix`, checked against ids from sources without one.
#[derive(Debug, Default, Clone)]
pub struct Namespaces {
    prefixes: Vec<Arc<str>>,
}

impl Namespaces {
    pub fn new<S: AsRef<str>>(prefixes: impl IntoIterator<Item = S>) -> Namespaces {
        Namespaces {
            prefixes: prefixes
                .into_iter()
                .map(|p| Arc::from(p.as_ref()))
                .collect(),
        }
    }

    /// Admits `id`, asserted by a source that put its own prefix in front (`prefixed`)
    /// or by one that has none.
    pub fn admit(&self, id: &str, prefixed: bool) -> Result<(), ForeignId> {
        if id.chars().any(unprintable) {
            return Err(ForeignId::Unprintable);
        }
        if prefixed {
            // Its own prefix, and (prefixes never overlapping) no other.
            return Ok(());
        }
        match self.prefixes.iter().find(|p| id.starts_with(&***p)) {
            Some(prefix) => Err(ForeignId::Reserved {
                prefix: prefix.clone(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_with_control_characters_are_refused_from_any_source() {
        let ns = Namespaces::default();
        for id in [
            "ops-bot\n",
            "ops\r\nbot",
            "ops\tbot",
            "ops\u{0}bot",
            "ops\u{7f}",
            "ops\u{85}bot",
            "ops\u{202e}tob",
            "ops\u{200b}-bot",
            "ops\u{2028}bot",
            "\u{feff}ops-bot",
        ] {
            assert_eq!(ns.admit(id, false), Err(ForeignId::Unprintable), "{id:?}");
            assert_eq!(ns.admit(id, true), Err(ForeignId::Unprintable), "{id:?}");
        }
        for id in [
            "ops-bot",
            "spiffe://example.org/agent/ops-bot",
            "bötchen",
            "a b",
        ] {
            assert_eq!(ns.admit(id, false), Ok(()), "{id:?}");
        }
    }

    #[test]
    fn an_unprefixed_source_cannot_assert_a_prefixed_id() {
        let ns = Namespaces::new(["partner:", "idp/"]);
        assert_eq!(ns.admit("ops-bot", false), Ok(()));
        assert_eq!(
            ns.admit("partner:ops-bot", false),
            Err(ForeignId::Reserved {
                prefix: Arc::from("partner:")
            })
        );
        assert!(ns.admit("idp/x", false).is_err());
        assert_eq!(ns.admit("partner:ops-bot", true), Ok(()));
        // Prefixes compare exactly: case is part of an id.
        assert_eq!(ns.admit("Partner:ops-bot", false), Ok(()));
    }
}

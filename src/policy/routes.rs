//! The REST route table: method + path template → tool, built with `matchit` once per
//! snapshot. Conflicting bindings are build errors, never a runtime tie-break.

use http::Method;
use std::collections::HashMap;

use super::tool_id::ToolId;

#[derive(Default)]
pub struct Routes {
    router: matchit::Router<usize>,
    /// Per path template: the tools bound to it, by method.
    methods: Vec<Vec<(Method, ToolId)>>,
    templates: HashMap<String, usize>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("templates", &self.templates)
            .finish()
    }
}

/// A matched REST call: the tool and the raw (still percent-encoded) path parameters.
pub struct RouteMatch<'a> {
    pub tool: ToolId,
    pub params: Vec<(&'a str, &'a str)>,
}

impl Routes {
    /// Adds a binding; the error says which binding it collides with.
    pub fn insert(&mut self, method: &Method, template: &str, tool: ToolId) -> Result<(), String> {
        let slot = match self.templates.get(template) {
            Some(&slot) => slot,
            None => {
                let slot = self.methods.len();
                self.router
                    .insert(template, slot)
                    .map_err(|e| format!("route {template} conflicts: {e}"))?;
                self.templates.insert(template.to_string(), slot);
                self.methods.push(Vec::new());
                slot
            }
        };
        if self.methods[slot].iter().any(|(m, _)| m == method) {
            return Err(format!("{method} {template} is bound by another contract"));
        }
        self.methods[slot].push((method.clone(), tool));
        Ok(())
    }

    pub fn find<'a>(&'a self, method: &Method, path: &'a str) -> Option<RouteMatch<'a>> {
        let matched = self.router.at(path).ok()?;
        let tool = self.methods[*matched.value]
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, t)| *t)?;
        Some(RouteMatch {
            tool,
            params: matched.params.iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_method_and_template() {
        let mut r = Routes::default();
        r.insert(&Method::GET, "/logs/{service}", ToolId(0))
            .unwrap();
        r.insert(&Method::POST, "/logs/{service}", ToolId(1))
            .unwrap();
        let m = r.find(&Method::GET, "/logs/orders").unwrap();
        assert_eq!(m.tool, ToolId(0));
        assert_eq!(m.params, vec![("service", "orders")]);
        assert_eq!(r.find(&Method::POST, "/logs/x").unwrap().tool, ToolId(1));
        assert!(r.find(&Method::DELETE, "/logs/x").is_none());
        assert!(r.find(&Method::GET, "/other").is_none());
    }

    #[test]
    fn conflicts_are_errors() {
        let mut r = Routes::default();
        r.insert(&Method::GET, "/logs/{service}", ToolId(0))
            .unwrap();
        assert!(r
            .insert(&Method::GET, "/logs/{service}", ToolId(1))
            .is_err());
        assert!(r.insert(&Method::GET, "/logs/{name}", ToolId(1)).is_err());
    }
}

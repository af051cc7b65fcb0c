//! The server span as the OpenTelemetry semantic conventions (HTTP, MCP, GenAI) name it:
//! its name and the attributes dashboards built on them query.
//!
//! - MCP: `{mcp.method.name} {target}` (`tools/call get_order`, `prompts/get greet`) or
//!   `{mcp.method.name}` (`initialize`); a request that carries no single message (a GET
//!   stream, a DELETE, a batch) is named as HTTP names it.
//! - REST: `{method} {http.route}`, or `{method}` when no route matched.
//! - GenAI attributes only where a tool is called: `gen_ai.operation.name =
//!   execute_tool`, `gen_ai.tool.name`, `.description`, `.type`.
//! - `error.type` on a failed span: the refusal's code, or `tool_error` when an MCP tool
//!   answered `isError: true`.
//!
//! The facts of the request are kept only while its span is exported.

use http::request::Parts;
use http::{Method, Version};
use opentelemetry::KeyValue;

use crate::proxy::backend::upstream::Upstream;
use crate::proxy::server::Connection;

/// What the request itself tells the span.
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    version: Version,
    connection: Option<Connection>,
    /// `Mcp-Protocol-Version`, when the request names one.
    protocol_version: Option<String>,
}

impl Request {
    pub fn of(parts: &Parts) -> Request {
        Request {
            method: parts.method.clone(),
            version: parts.version,
            connection: parts.extensions.get::<Connection>().cloned(),
            protocol_version: parts
                .headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        }
    }
}

/// The span's view of one call as it ends.
pub struct Ending<'a> {
    pub request: &'a Request,
    /// MCP: the message's method, and what it names (a tool, a prompt).
    pub mcp_method: Option<&'a str>,
    pub target: Option<&'a str>,
    pub jsonrpc_id: Option<&'a str>,
    pub session: Option<&'a str>,
    /// REST: the matched route (the contract's path template).
    pub route: Option<&'a str>,
    /// The tool called, and its contract's description.
    pub tool: Option<&'a str>,
    pub tool_description: Option<&'a str>,
    pub status: Option<u16>,
    pub error_type: Option<&'a str>,
}

impl Ending<'_> {
    pub fn name(&self) -> String {
        match (self.mcp_method.map(bounded), self.target) {
            (Some(method), Some(target)) => format!("{method} {target}"),
            (Some(method), None) => method.to_string(),
            (None, _) => match self.route {
                Some(route) => format!("{} {route}", self.request.method),
                None => self.request.method.to_string(),
            },
        }
    }

    pub fn attributes(&self, out: &mut Vec<KeyValue>) {
        let request = self.request;
        out.push(KeyValue::new("network.transport", "tcp"));
        out.push(KeyValue::new("network.protocol.name", "http"));
        out.push(KeyValue::new(
            "network.protocol.version",
            match request.version {
                Version::HTTP_2 => "2",
                Version::HTTP_10 => "1.0",
                _ => "1.1",
            },
        ));
        if let Some(connection) = &request.connection {
            out.push(KeyValue::new(
                "client.address",
                connection.client_ip.clone(),
            ));
            out.push(KeyValue::new(
                "client.port",
                i64::from(connection.client.port()),
            ));
            out.push(KeyValue::new(
                "server.address",
                connection.server_ip.clone(),
            ));
            out.push(KeyValue::new(
                "server.port",
                i64::from(connection.server.port()),
            ));
            out.push(KeyValue::new(
                "url.scheme",
                if connection.tls { "https" } else { "http" },
            ));
        }
        match self.mcp_method {
            Some(method) => {
                out.push(KeyValue::new("mcp.method.name", bounded(method)));
                let optional = [
                    ("mcp.session.id", self.session),
                    ("mcp.protocol.version", request.protocol_version.as_deref()),
                    ("jsonrpc.request.id", self.jsonrpc_id),
                ];
                for (key, value) in optional {
                    if let Some(value) = value {
                        out.push(KeyValue::new(key, value.to_string()));
                    }
                }
            }
            None => {
                out.push(KeyValue::new(
                    "http.request.method",
                    static_method(&request.method),
                ));
                if let Some(route) = self.route {
                    out.push(KeyValue::new("http.route", route.to_string()));
                    // Path parameters are arguments, and argument values never become
                    // attributes: they are redacted, as the conventions redact secrets.
                    out.push(KeyValue::new("url.path", redacted_path(route)));
                }
            }
        }
        if let Some(status) = self.status {
            out.push(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        if let Some(tool) = self.tool {
            out.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            out.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
            // The backend's API, called on the agent's behalf.
            out.push(KeyValue::new("gen_ai.tool.type", "extension"));
            if let Some(description) = self.tool_description {
                out.push(KeyValue::new(
                    "gen_ai.tool.description",
                    description.to_string(),
                ));
            }
        }
        if let Some(error_type) = self.error_type {
            out.push(KeyValue::new("error.type", error_type.to_string()));
        }
    }
}

/// The client span of a request sent to the backend: its name and the conventions'
/// attributes. `url.full` names no argument: a REST call's path is its route with each
/// parameter `REDACTED`, and every query value is `REDACTED`.
pub struct Outbound<'a> {
    pub method: &'a Method,
    pub path_and_query: &'a str,
    /// REST: the contract's route (`url.template`).
    pub route: Option<&'a str>,
    /// MCP: the tool of the `tools/call`.
    pub mcp_tool: Option<&'a str>,
    /// MCP: the forwarded request's JSON-RPC id (`jsonrpc.request.id`, conditionally
    /// required on MCP client spans).
    pub rpc_id: Option<&'a serde_json::Value>,
}

impl Outbound<'_> {
    pub fn span(&self, upstream: &Upstream) -> (String, Vec<KeyValue>) {
        let method = static_method(self.method);
        let name = match (self.mcp_tool, self.route) {
            (Some(tool), _) => format!("tools/call {tool}"),
            (None, Some(route)) => format!("{method} {route}"),
            (None, None) => method.to_string(),
        };
        let (path, query) = match self.path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (self.path_and_query, None),
        };
        let mut url = upstream.base();
        match self.route {
            Some(route) => url.push_str(&redacted_path(route)),
            None => url.push_str(path),
        }
        if let Some(query) = query {
            url.push('?');
            url.push_str(&redacted_query(query));
        }
        let mut out = vec![
            KeyValue::new("http.request.method", method),
            KeyValue::new("server.address", upstream.host().to_string()),
            KeyValue::new("server.port", i64::from(upstream.port())),
            KeyValue::new("url.full", url),
        ];
        if let Some(route) = self.route {
            out.push(KeyValue::new("url.template", route.to_string()));
        }
        if let Some(tool) = self.mcp_tool {
            out.push(KeyValue::new("mcp.method.name", "tools/call"));
            out.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            out.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
        }
        if let Some(id) = self.rpc_id.filter(|id| !id.is_null()) {
            let id = match id {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push(KeyValue::new("jsonrpc.request.id", id));
        }
        (name, out)
    }
}

/// A query with each value `REDACTED`, its keys as they were (a part with no `=` is a
/// value of sorts too, and is redacted whole).
fn redacted_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) => format!("{key}=REDACTED"),
            None if pair.is_empty() => String::new(),
            None => "REDACTED".to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// An HTTP method as a static string (no allocation per span); others `_OTHER`, as the
/// conventions name a method they don't know.
pub fn static_method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "_OTHER",
    }
}

/// `https` when the request came over TLS.
pub fn scheme(parts: &Parts) -> &'static str {
    match parts.extensions.get::<Connection>() {
        Some(connection) if connection.tls => "https",
        _ => "http",
    }
}

/// The methods of the MCP specification, as span names and attributes may carry them.
const MCP_METHODS: [&str; 24] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "roots/list",
    "sampling/createMessage",
    "elicitation/create",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/message",
    "notifications/roots/list_changed",
    "notifications/resources/updated",
    "notifications/tools/list_changed",
];

/// A method the specification names, or `_OTHER`: a method name is the client's to
/// choose, and every distinct one would be a new span name and series.
pub fn bounded(method: &str) -> &'static str {
    MCP_METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("_OTHER")
}

/// The request path as the route gives it, each parameter's value `REDACTED`.
fn redacted_path(route: &str) -> String {
    route
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') && segment.ends_with('}') {
                "REDACTED"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_parameters_are_redacted() {
        assert_eq!(redacted_path("/logs/{service}"), "/logs/REDACTED");
        assert_eq!(redacted_path("/a/{x}/b/{y}"), "/a/REDACTED/b/REDACTED");
        assert_eq!(redacted_path("/issues"), "/issues");
    }
}

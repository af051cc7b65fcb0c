//! The HTTP side of `toolgate approvals`: one request to the admin listener's approval
//! API, bounded in time and size, its answer read as the API's JSON or error body.

use bytes::Bytes;
use http::{header, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use std::collections::HashMap;
use std::path::PathBuf;

use super::{AdminArgs, Failure, ADMIN_VAR, DEFAULT_ADMIN, MAX_ANSWER, TIMEOUT, TOKEN_VAR};
use crate::input::url::shown;

/// The admin listener with the approver's credential, ready to send.
pub(super) struct Admin {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The URL without a trailing slash; request paths are appended to it.
    pub(super) base: String,
    pub(super) authorization: header::HeaderValue,
}

impl Admin {
    /// Flags first, then the variables, then the default. Checks the URL and reads the
    /// token before anything is sent, so a usage problem never looks like a refusal.
    pub(super) fn open(args: &AdminArgs, vars: &HashMap<String, String>) -> Result<Admin, Failure> {
        let url = args
            .admin
            .clone()
            .or_else(|| vars.get(ADMIN_VAR).cloned())
            .unwrap_or_else(|| DEFAULT_ADMIN.to_string());
        let base = check_url(&url)?;
        let path = args
            .token_file
            .clone()
            .or_else(|| vars.get(TOKEN_VAR).map(PathBuf::from))
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "no approver token: pass --token-file FILE (or set {TOKEN_VAR})"
                ))
            })?;
        let shown = path.display().to_string();
        let text = crate::input::file::read_text(&path, crate::input::file::Bound::SMALL).map_err(
            |e| Failure::TokenFile {
                path: shown.clone(),
                error: std::io::Error::other(e.reason()),
            },
        )?;
        let token = text.trim();
        if token.is_empty() {
            return Err(Failure::Usage(format!("the token file {shown} is empty")));
        }
        let mut authorization =
            header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                Failure::Usage(format!(
                    "the token file {shown} holds characters no bearer token has"
                ))
            })?;
        authorization.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(TIMEOUT));
        Ok(Admin {
            client: Client::builder(TokioExecutor::new()).build(connector),
            base,
            authorization,
        })
    }

    /// One request; `Ok` is the API's 200 answer, anything else a [`Failure`].
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let usage =
            |_| Failure::Usage(format!("{} is not a URL toolgate can request", shown(&url)));
        let mut request = Request::builder()
            .method(method)
            .uri(url.parse::<Uri>().map_err(usage)?)
            .header(header::AUTHORIZATION, self.authorization.clone());
        let bytes = match body {
            Some(body) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(bytes)).map_err(|_| {
            Failure::Usage(format!("{} is not a URL toolgate can request", shown(&url)))
        })?;
        let unreachable = |error: String| Failure::Unreachable {
            url: shown(&self.base),
            error,
        };
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                // The legacy client's own text ("client error (Connect)") hides the
                // cause: show the chain below it ("tcp connect error: Connection refused").
                let mut causes = Vec::new();
                let mut next = std::error::Error::source(&e);
                while let Some(cause) = next {
                    causes.push(cause.to_string());
                    next = cause.source();
                }
                unreachable(if causes.is_empty() {
                    e.to_string()
                } else {
                    causes.join(": ")
                })
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unreachable(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, Failure>((status, body))
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {}s", TIMEOUT.as_secs())))??;
        answer(status, &body)
    }
}

/// The base URL of `url`, or why it can't be used.
fn check_url(url: &str) -> Result<String, Failure> {
    let given = url;
    let url = shown(given);
    let uri: Uri = given
        .parse()
        .map_err(|_| Failure::Usage(format!("the admin URL {url} is not a URL")))?;
    match uri.scheme_str() {
        Some("http") if uri.authority().is_some() => Ok(given.trim_end_matches('/').to_string()),
        Some("https") => Err(Failure::Usage(format!(
            "the admin URL {url}: the admin listener serves plain HTTP on the pod's loopback; \
             use http:// (through kubectl port-forward from outside the pod)"
        ))),
        _ => Err(Failure::Usage(format!(
            "the admin URL {url} must be an http:// URL like {DEFAULT_ADMIN}"
        ))),
    }
}

/// The API's answer as a value or a refusal. An answer that isn't toolgate's (another
/// server behind `--admin`) is a refusal with its status, so the exit code still follows it.
pub(super) fn answer(status: StatusCode, body: &[u8]) -> Result<Value, Failure> {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    if status == StatusCode::OK {
        if let Some(value) = parsed {
            return Ok(value);
        }
    }
    let error = parsed.as_ref().map(|v| &v["error"]);
    match error.and_then(|e| e["code"].as_str()) {
        Some(code) => Err(Failure::Refused {
            status: status.as_u16(),
            code: code.to_string(),
            message: error.and_then(|e| e["message"].as_str()).unwrap_or("").to_string(),
        }),
        None => Err(Failure::Refused {
            status: status.as_u16(),
            code: "UNEXPECTED_ANSWER".to_string(),
            message: format!(
                "not the approval API's answer ({} bytes); is --admin the sidecar's admin listener?",
                body.len()
            ),
        }),
    }
}

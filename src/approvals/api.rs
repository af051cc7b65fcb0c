//! The approval API on the admin listener. Every request carries an approver's
//! credential (`Authorization: Bearer …`); none, or an agent's, is `401`.
//!
//! ```text
//! GET  /approvals[?status=pending][&limit=100][&cursor=…]
//!                                      {"approvals": [APPROVAL without arguments, …],
//!                                       "nextCursor": "…" | null}  (those the approver may decide)
//! GET  /approvals/{id}                 APPROVAL (arguments included)
//! POST /approvals/{id}/approve         {"reason": "…"} (optional) → the updated APPROVAL
//! POST /approvals/{id}/deny            {"reason": "…"} → the updated APPROVAL
//! ```
//!
//! Errors use the error body of docs/errors.md: unknown id `404`, an approver outside
//! the approval's groups `403`, an approval no longer pending `409`, a bad body `400`.

use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::approvers::Approver;
use super::page::{Cursor, Query, DEFAULT_LIMIT, MAX_LIMIT};
use super::service::Approvals;
use super::{now_ms, DecideError, Decision, Status, MAX_REASON};
use crate::identity::credential::{self, Presented};
use crate::vocab::{Code, Reject};

/// The largest request body the API reads.
const MAX_BODY: usize = 16 * 1024;

/// Answers one request: the HTTP status and the JSON body (the admin listener writes
/// them out).
pub async fn serve(approvals: &Approvals, request: Request<Incoming>) -> (StatusCode, Value) {
    let trace_id = format!("{:032x}", rand::random::<u128>());
    match route(approvals, request).await {
        Ok(value) => (StatusCode::OK, value),
        Err(reject) => {
            let status = StatusCode::from_u16(reject.status()).unwrap_or(StatusCode::BAD_REQUEST);
            (status, reject.body(&trace_id))
        }
    }
}

async fn route(approvals: &Approvals, request: Request<Incoming>) -> Result<Value, Reject> {
    let approver = authenticate(approvals, &request).await?;
    let path = request.uri().path().trim_end_matches('/').to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let parts: Vec<&str> = path.split('/').skip(2).collect();
    match (request.method().clone(), parts.as_slice()) {
        (Method::GET, []) => list(approvals, &approver, &query).await,
        (Method::GET, [id]) => {
            let approval = find(approvals, id).await?;
            allowed(&approver, &approval)?;
            Ok(approval.view(now_ms()))
        }
        (Method::POST, [id, verb @ ("approve" | "deny")]) => {
            let approve = *verb == "approve";
            let id = id.to_string();
            let reason = read_reason(request).await?;
            let approval = find(approvals, &id).await?;
            allowed(&approver, &approval)?;
            let decision = Decision {
                approve,
                by: approver.name.clone(),
                reason,
            };
            match approvals.decide(&id, &decision).await {
                Ok(decided) => Ok(decided.view(now_ms())),
                Err(DecideError::NotFound) => Err(not_found(&id)),
                Err(DecideError::NotPending(current)) => Err(Reject::new(
                    Code::MalformedRequest,
                    format!(
                        "approval {id} is {}, not pending: it can't be decided again",
                        current.status_at(now_ms()).as_str()
                    ),
                )
                .with_status(409)),
                Err(DecideError::Unavailable(e)) => Err(unavailable(&e)),
            }
        }
        _ => Err(Reject::new(
            Code::MalformedRequest,
            "the approval API has GET /approvals, GET /approvals/{id}, POST /approvals/{id}/approve and POST /approvals/{id}/deny",
        )
        .with_status(404)),
    }
}

async fn authenticate(
    approvals: &Approvals,
    request: &Request<Incoming>,
) -> Result<Approver, Reject> {
    // One reading of the credential for every listener (a repeated header is none).
    let approver = match credential::presented(request.headers()) {
        Presented::Bearer(token) => approvals.approvers.verify(token).await,
        _ => None,
    };
    approver.ok_or_else(|| {
            Reject::new(
                Code::Unauthenticated,
                "the approval API needs an approver's credential (approvals.approvers); an agent's is not one",
            )
        })
}

async fn list(approvals: &Approvals, approver: &Approver, query: &str) -> Result<Value, Reject> {
    let mut page = Query {
        status: None,
        groups: approver.groups.clone(),
        after: None,
        limit: DEFAULT_LIMIT,
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "status" => {
                page.status = Some(Status::parse(&value).ok_or_else(|| {
                    malformed(format!(
                        "status must be pending, approved, denied, expired or used, not {value:?}"
                    ))
                })?)
            }
            "limit" => {
                page.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        malformed(format!(
                            "limit must be a whole number from 1 to {MAX_LIMIT}"
                        ))
                    })?
            }
            "cursor" => {
                page.after = Some(Cursor::parse(&value).ok_or_else(|| {
                    malformed("cursor must be a nextCursor this API handed out".into())
                })?)
            }
            _ => {}
        }
    }
    let page = approvals
        .store
        .page(&page)
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(page.body())
}

fn malformed(message: String) -> Reject {
    Reject::new(Code::MalformedRequest, message)
}

async fn find(approvals: &Approvals, id: &str) -> Result<super::Approval, Reject> {
    approvals
        .store
        .get(id)
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(|| not_found(id))
}

fn allowed(approver: &Approver, approval: &super::Approval) -> Result<(), Reject> {
    if approval.decidable_by(&approver.groups) {
        return Ok(());
    }
    Err(Reject::new(
        Code::ToolNotAllowed,
        format!(
            "approver {} is in none of the groups that decide this approval ({})",
            approver.name,
            approval.approvers.join(", ")
        ),
    ))
}

/// How long a decision's body may take to arrive: an approver's client sends a few bytes
/// at once; one that drips them would hold an admin connection (64 in all) for good.
const BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn read_reason(request: Request<Incoming>) -> Result<Option<String>, Reject> {
    let read = Limited::new(request.into_body(), MAX_BODY).collect();
    let body = tokio::time::timeout(BODY_WAIT, read)
        .await
        .map_err(|_| {
            Reject::new(
                Code::MalformedRequest,
                format!("the body did not arrive within {} s", BODY_WAIT.as_secs()),
            )
        })?
        .map_err(|_| {
            Reject::new(
                Code::PayloadTooLarge,
                format!("the body is larger than {MAX_BODY} bytes"),
            )
        })?
        .to_bytes();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(&body).map_err(|e| {
        Reject::new(
            Code::MalformedRequest,
            format!("the body must be JSON like {{\"reason\": \"…\"}}: {e}"),
        )
    })?;
    let reason = match value.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(reason)) => Some(reason.clone()),
        Some(_) => {
            return Err(Reject::new(
                Code::MalformedRequest,
                "reason must be a string",
            ))
        }
    };
    if reason.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
        return Err(Reject::new(
            Code::MalformedRequest,
            format!("reason is longer than {MAX_REASON} bytes"),
        ));
    }
    Ok(reason)
}

fn not_found(id: &str) -> Reject {
    Reject::new(
        Code::MalformedRequest,
        format!("no approval {id} (unknown, or expired long ago)"),
    )
    .with_status(404)
}

fn unavailable(error: &str) -> Reject {
    Reject::new(
        Code::StateUnavailable,
        format!("the approvals can't be read now: {error}"),
    )
}

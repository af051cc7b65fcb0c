//! A `ToolContract` compiled for the hot path: schemas built, the binding parsed, the
//! defaults of the spec resolved. Built once per snapshot, shared by every request.

use http::Method;
use std::time::Duration;

use super::action::ActionKey;
use super::redact::Redaction;
use super::schema::Schema;
use super::spend::CallCost;
use crate::crd::ToolContractSpec;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_DEDUPE_WINDOW: Duration = Duration::from_secs(600);

#[derive(Debug)]
pub struct Contract {
    /// `ToolContract/name`, for errors and `/config`.
    pub object: String,
    pub tool: String,
    pub description: Option<String>,
    pub http: Option<(Method, String)>,
    pub input: Schema,
    pub output: Option<Schema>,
    pub redact: Vec<Redaction>,
    pub idempotent: bool,
    pub dedupe_window: Duration,
    pub timeout: Duration,
    pub capture_arguments: bool,
    /// `dedupeKey`: what makes two calls one action, whoever sends them.
    pub dedupe_key: Option<ActionKey>,
    /// What one call costs against a spend budget (default 1).
    pub cost: CallCost,
}

pub use super::fault::FieldError;

impl Contract {
    pub fn compile(object: String, spec: &ToolContractSpec) -> Result<Contract, FieldError> {
        if spec.tool.is_empty() {
            return Err(FieldError::spec("spec.tool", "must not be empty"));
        }
        let http = match &spec.http {
            Some(binding) => {
                let method = Method::from_bytes(binding.method.to_ascii_uppercase().as_bytes())
                    .map_err(|_| FieldError::spec("spec.http.method", "not an HTTP method"))?;
                if !binding.path.starts_with('/') {
                    return Err(FieldError::spec("spec.http.path", "must start with /"));
                }
                Some((method, binding.path.clone()))
            }
            None => None,
        };
        let input =
            Schema::compile(&spec.input).map_err(|e| FieldError::schema("spec.input", e))?;
        let output = match &spec.output {
            Some(raw) => {
                Some(Schema::compile(raw).map_err(|e| FieldError::schema("spec.output", e))?)
            }
            None => None,
        };
        let redact = spec
            .redact
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Redaction::compile(p).map_err(|e| FieldError::spec(format!("spec.redact[{i}]"), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let idempotent = spec.idempotent.unwrap_or(match &http {
            Some((method, _)) => !matches!(*method, Method::POST | Method::PATCH),
            None => false,
        });
        let timeout = match spec.timeout_ms {
            Some(0) => return Err(FieldError::spec("spec.timeoutMs", "must be positive")),
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_TIMEOUT,
        };
        let dedupe_key = match &spec.dedupe_key {
            Some(_) if idempotent => {
                return Err(FieldError::spec(
                    "spec.dedupeKey",
                    "applies to non-idempotent tools only: set idempotent: false",
                ))
            }
            Some(source) => Some(
                ActionKey::compile(source).map_err(|e| FieldError::rule("spec.dedupeKey", e))?,
            ),
            None => None,
        };
        Ok(Contract {
            object,
            tool: spec.tool.clone(),
            description: spec.description.clone(),
            http,
            input,
            output,
            redact,
            idempotent,
            dedupe_window: spec
                .dedupe_window_seconds
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_DEDUPE_WINDOW),
            timeout,
            capture_arguments: spec.capture_arguments,
            dedupe_key,
            cost: CallCost::compile(spec.cost.as_ref())?,
        })
    }
}

//! The sidecar injector (`toolgate inject`): a mutating admission webhook that adds the
//! toolgate sidecar to pods annotated `toolgate.dev/inject: "true"`.
//!
//! - [`patch`] is the whole decision, a pure function from a pod (and the injector's
//!   settings) to a JSON Patch; [`sidecar`] builds the container and volumes it adds.
//! - [`review`] turns an `AdmissionReview` body into a response body, still without I/O,
//!   so the golden tests and the server run exactly the same code.
//! - [`validate`] is the validating webhook for `ToolContract` and `AgentPolicy`
//!   objects, as pure as [`review`] and served beside it.
//! - [`files`] says where the sidecar's token Secrets, issuer keys and audit volume are
//!   mounted and which variables point it there.
//! - [`server`] is the HTTPS listener; [`settings`] the injector's own settings file.
//! - [`borrow`] refuses a pod whose own containers could reach the sidecar's volumes or
//!   Secrets (a mount declared before injection, a `kubectl debug` container after).
//!
//! Invariants: injecting an injected pod changes nothing (the sidecar's container name is
//! the marker); a pod without the annotation, or with `"false"`, is never touched; no
//! input makes the webhook panic — malformed input is answered, not crashed on.

pub mod borrow;
pub mod files;
pub mod patch;
pub mod review;
pub mod scrape;
pub mod server;
pub mod settings;
pub mod sidecar;
pub mod validate;

/// The annotation a pod opts in with (`"true"`); `"false"` or absent leaves it alone.
pub const INJECT_ANNOTATION: &str = "toolgate.dev/inject";
/// The annotation naming the app's port the sidecar forwards to (default: the first
/// declared container port).
pub const UPSTREAM_PORT_ANNOTATION: &str = "toolgate.dev/upstream-port";
/// Set on injected pods to the sidecar image, so `kubectl get pods -o yaml` shows what ran.
pub const INJECTED_ANNOTATION: &str = "toolgate.dev/injected";

/// The injected container's name, and the marker of an injected pod.
pub const CONTAINER_NAME: &str = "toolgate";
/// Agent traffic and admin (probes, metrics) ports, the sidecar's defaults.
pub const AGENT_PORT: i32 = 15100;
pub const ADMIN_PORT: i32 = 15101;
/// The webhook's default port.
pub const WEBHOOK_PORT: u16 = 15443;

/// The numeric user (and group) toolgate runs as: the sidecar the injector adds, the
/// injector's own pods in the Helm chart, and the `Dockerfile`'s `USER`. 65532 is the
/// distroless `nonroot` user, so the runtime image needs no user of its own; tests check
/// that the three places agree.
pub const UID: i64 = 65532;

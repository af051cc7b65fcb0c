//! A Kubernetes API server for `toolgate.dev/v1alpha1` objects, on the wire: what the real
//! `kube::Client` and kube-rs watcher talk to in the tests (no cluster is available).
//!
//! - `GET /apis/toolgate.dev/v1alpha1/namespaces/{ns}/{plural}`: a `…List` with
//!   `metadata.resourceVersion`.
//! - the same with `?watch=true&resourceVersion=N`: a chunked stream of JSON lines
//!   `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …}` — every event after `N`
//!   from the history, then live events; from a compacted `N`, one `ERROR` event carrying a
//!   `410 Expired` Status (what the API server sends for a too-old resourceVersion).
//! - the same for every namespace at once: `GET /apis/toolgate.dev/v1alpha1/{plural}`.
//! - the status subresource, `…/{plural}/{name}/status`: `PATCH` with a JSON merge patch
//!   and `PUT` of the object with its `resourceVersion` (`409 Conflict` when stale). Like
//!   the API server, a status write changes only `status`, and an apply only `spec` and
//!   `metadata`; `metadata.generation` moves with the spec alone.
//! - `coordination.k8s.io/v1` Leases: `GET`, `POST` (`409 AlreadyExists`) and `PUT` with
//!   the `resourceVersion` read (`409 Conflict` when another writer came first).
//! - the service-account issuer (ServiceAccountIssuerDiscovery), once
//!   [`FakeApiServer::serve_issuer`] is called: `GET /.well-known/openid-configuration`
//!   (`issuer`, `jwks_uri`) and `GET /openid/v1/jwks`, each `401` without the bearer token
//!   given there (what the API server answers a client with no credentials, since the
//!   endpoints need `system:service-account-issuer-discovery`); the keys can be rotated.
//! - faults: hold lists or watches (the request waits), end open watches cleanly, cut every
//!   connection, go down (every connection is reset on accept), compact the history.
//! - every request is recorded with the bearer token it carried, to check a client needs
//!   no more than its Role and to tell two clients apart.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

const GROUP_PREFIX: &str = "/apis/toolgate.dev/v1alpha1/";
const LEASES_PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";
pub const ISSUER_CONFIGURATION: &str = "/.well-known/openid-configuration";
pub const ISSUER_KEYS: &str = "/openid/v1/jwks";

type Body = BoxBody<Bytes, Infallible>;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    /// The bearer token of `Authorization`, if any: which client sent it.
    pub token: Option<String>,
}

impl Seen {
    pub fn is_watch(&self) -> bool {
        matches!(
            self.query.get("watch").map(String::as_str),
            Some("true" | "1")
        )
    }
}

#[derive(Default)]
struct State {
    rv: u64,
    /// (namespace, plural, name) → object.
    objects: BTreeMap<(String, String, String), Value>,
    history: Vec<Event>,
    /// Watches from a resourceVersion below this get `410 Gone`.
    compacted: u64,
    watches: Vec<Watch>,
    connections: Vec<AbortHandle>,
    down: bool,
    held_lists: BTreeSet<String>,
    watches_held: bool,
    seen: Vec<Seen>,
    /// (namespace, name) → Lease.
    leases: BTreeMap<(String, String), Value>,
    /// What the issuer discovery endpoints serve, once set.
    issuer: Option<Issuer>,
}

/// The service-account issuer: its `iss`, its JWKS, and the token a reader must send.
#[derive(Clone)]
struct Issuer {
    iss: String,
    jwks: String,
    token: String,
}

#[derive(Clone)]
struct Event {
    rv: u64,
    namespace: String,
    plural: String,
    line: Bytes,
}

struct Watch {
    /// Empty: every namespace.
    namespace: String,
    plural: String,
    lines: mpsc::UnboundedSender<Bytes>,
}

pub struct FakeApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    dir: tempfile::TempDir,
}

pub fn plural_of(kind: &str) -> &'static str {
    match kind {
        "ToolContract" => "toolcontracts",
        "AgentPolicy" => "agentpolicies",
        other => panic!("the fake API server does not serve {other}"),
    }
}

fn kind_of(plural: &str) -> Option<&'static str> {
    match plural {
        "toolcontracts" => Some("ToolContract"),
        "agentpolicies" => Some("AgentPolicy"),
        _ => None,
    }
}

impl FakeApiServer {
    pub async fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            rv: 100,
            ..State::default()
        }));
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                if accept_state.lock().unwrap().down {
                    drop(stream); // Unreachable: the connection is closed at once.
                    continue;
                }
                let conn_state = accept_state.clone();
                let task = tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = conn_state.clone();
                        async move { Ok::<_, Infallible>(handle(state, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                accept_state
                    .lock()
                    .unwrap()
                    .connections
                    .push(task.abort_handle());
            }
        });
        FakeApiServer {
            addr,
            state,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A kubeconfig for `http://ADDR` (no TLS, no credentials) with `namespace` as default.
    pub fn kubeconfig(&self, namespace: &str) -> PathBuf {
        self.write_kubeconfig("kubeconfig", namespace, "{}")
    }

    /// A kubeconfig like [`FakeApiServer::kubeconfig`] whose requests carry the bearer
    /// `token`, so [`Seen::token`] tells this client's requests from others'.
    pub fn kubeconfig_as(&self, namespace: &str, token: &str) -> PathBuf {
        let user = format!("{{token: {token}}}");
        self.write_kubeconfig(&format!("kubeconfig-{token}"), namespace, &user)
    }

    fn write_kubeconfig(&self, file: &str, namespace: &str, user: &str) -> PathBuf {
        let path = self.dir.path().join(file);
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: 'http://{}'}}}}]\n\
             users: [{{name: fake, user: {user}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake, namespace: {namespace}}}}}]\n",
            self.addr
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Creates or replaces every object of a multi-document manifest (like `kubectl apply`),
    /// in `namespace`; watchers see ADDED or MODIFIED.
    pub fn apply(&self, namespace: &str, manifests: &str) {
        for doc in serde_yaml::Deserializer::from_str(manifests) {
            let value: Value = serde::Deserialize::deserialize(doc).unwrap();
            if value.is_null() {
                continue;
            }
            self.apply_one(namespace, value);
        }
    }

    fn apply_one(&self, namespace: &str, mut object: Value) {
        let plural = plural_of(object["kind"].as_str().unwrap()).to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let mut state = self.state.lock().unwrap();
        state.rv += 1;
        let rv = state.rv;
        let key = (namespace.to_string(), plural.clone(), name.clone());
        let previous = state.objects.get(&key).cloned();
        // With the status subresource, writes to the object leave status alone, and only
        // a spec change moves the generation.
        match previous.as_ref().and_then(|p| p.get("status")) {
            Some(status) => object["status"] = status.clone(),
            None => drop(object.as_object_mut().unwrap().remove("status")),
        }
        let generation = previous.as_ref().map_or(1, |p| {
            let before = p["metadata"]["generation"].as_u64().unwrap_or(1);
            before + u64::from(p["spec"] != object["spec"])
        });
        let meta = &mut object["metadata"];
        meta["namespace"] = json!(namespace);
        meta["resourceVersion"] = json!(rv.to_string());
        meta["uid"] = json!(format!("uid-{namespace}-{plural}-{name}"));
        meta["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        meta["generation"] = json!(generation);
        let kind = if previous.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        state.objects.insert(key, object.clone());
        state.record(rv, namespace, &plural, kind, object);
    }

    pub fn delete(&self, namespace: &str, kind: &str, name: &str) {
        let plural = plural_of(kind).to_string();
        let mut state = self.state.lock().unwrap();
        let key = (namespace.to_string(), plural.clone(), name.to_string());
        let mut object = state
            .objects
            .remove(&key)
            .expect("deleting an object that exists");
        state.rv += 1;
        let rv = state.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        state.record(rv, namespace, &plural, "DELETED", object);
    }

    /// Moves the resourceVersion on (as changes elsewhere in the cluster do) and sends every
    /// open watch a BOOKMARK carrying it. Returns that resourceVersion.
    pub fn bookmark(&self) -> u64 {
        let mut state = self.state.lock().unwrap();
        state.rv += 10;
        let rv = state.rv;
        for watch in &state.watches {
            let kind = kind_of(&watch.plural).unwrap();
            let line = line(
                "BOOKMARK",
                json!({
                    "apiVersion": "toolgate.dev/v1alpha1", "kind": kind,
                    "metadata": {"resourceVersion": rv.to_string()}
                }),
            );
            let _ = watch.lines.send(line);
        }
        rv
    }

    /// Forgets the history: a watch from a resourceVersion below the current one gets 410.
    pub fn compact(&self) {
        let mut state = self.state.lock().unwrap();
        state.compacted = state.rv;
        state.history.clear();
    }

    /// Ends every open watch cleanly (as the API server does at its watch timeout).
    pub fn end_watches(&self) {
        self.state.lock().unwrap().watches.clear();
    }

    /// Cuts every connection mid-stream (a network failure or an API server restart).
    pub fn cut_connections(&self) {
        let mut state = self.state.lock().unwrap();
        state.watches.clear();
        for connection in state.connections.drain(..) {
            connection.abort();
        }
    }

    /// Down: every connection is cut and new ones are reset on accept. Up: serves again.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
        if down {
            self.cut_connections();
        }
    }

    /// While held, list requests of `kind` wait.
    pub fn hold_list(&self, kind: &str, held: bool) {
        let plural = plural_of(kind).to_string();
        let mut state = self.state.lock().unwrap();
        if held {
            state.held_lists.insert(plural);
        } else {
            state.held_lists.remove(&plural);
        }
    }

    /// While held, watch requests wait.
    pub fn hold_watches(&self, held: bool) {
        self.state.lock().unwrap().watches_held = held;
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Serves the service-account issuer `iss` with the keys of `jwks` (a JWKS document)
    /// to clients that send the bearer `token`.
    pub fn serve_issuer(&self, iss: &str, jwks: &str, token: &str) {
        self.state.lock().unwrap().issuer = Some(Issuer {
            iss: iss.into(),
            jwks: jwks.into(),
            token: token.into(),
        });
    }

    /// Rotates the issuer's keys (after [`FakeApiServer::serve_issuer`]).
    pub fn rotate_issuer_keys(&self, jwks: &str) {
        let mut state = self.state.lock().unwrap();
        state.issuer.as_mut().expect("serve_issuer first").jwks = jwks.into();
    }

    /// The requests to `path` (e.g. [`ISSUER_KEYS`]), in order.
    pub fn requests_to(&self, path: &str) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Writes `status` over the object's, as another client with access to the status
    /// subresource could; watchers see MODIFIED.
    pub fn write_status(&self, namespace: &str, kind: &str, name: &str, status: Value) {
        let key = (namespace.into(), plural_of(kind).into(), name.into());
        let mut object = self.object(namespace, kind, name);
        object["status"] = status;
        let response = write_status(&self.state, key, true, object);
        assert_eq!(response.status(), StatusCode::OK);
    }

    /// The object as stored (`Value::Null` when absent).
    pub fn object(&self, namespace: &str, kind: &str, name: &str) -> Value {
        let key = (namespace.into(), plural_of(kind).into(), name.into());
        let state = self.state.lock().unwrap();
        state.objects.get(&key).cloned().unwrap_or(Value::Null)
    }

    /// The Lease as stored, if any.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        let state = self.state.lock().unwrap();
        state.leases.get(&(namespace.into(), name.into())).cloned()
    }

    /// Every status write that was applied (PATCH or PUT answered 200), in order.
    pub fn status_writes(&self) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/status") && matches!(r.method.as_str(), "PATCH" | "PUT"))
            .collect()
    }

    /// How many list requests `kind` received.
    pub fn lists(&self, kind: &str) -> usize {
        let plural = plural_of(kind);
        self.requests()
            .iter()
            .filter(|r| !r.is_watch() && r.path.ends_with(plural))
            .count()
    }

    /// The requests to watch `kind`, in order.
    pub fn watches(&self, kind: &str) -> Vec<Seen> {
        let plural = plural_of(kind);
        self.requests()
            .into_iter()
            .filter(|r| r.is_watch() && r.path.ends_with(plural))
            .collect()
    }
}

impl State {
    fn record(&mut self, rv: u64, namespace: &str, plural: &str, kind: &str, object: Value) {
        let event = Event {
            rv,
            namespace: namespace.to_string(),
            plural: plural.to_string(),
            line: line(kind, object),
        };
        self.watches.retain(|w| {
            !w.sees(&event.namespace, &event.plural) || w.lines.send(event.line.clone()).is_ok()
        });
        self.history.push(event);
    }
}

impl Watch {
    fn sees(&self, namespace: &str, plural: &str) -> bool {
        (self.namespace.is_empty() || self.namespace == namespace) && self.plural == plural
    }
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut text = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
    text.push(b'\n');
    Bytes::from(text)
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

/// What a request asks for, by its path.
enum Target {
    /// `namespace` empty: every namespace.
    Collection {
        namespace: String,
        plural: String,
    },
    Status {
        namespace: String,
        plural: String,
        name: String,
    },
    Leases {
        namespace: String,
    },
    Lease {
        namespace: String,
        name: String,
    },
}

fn target(path: &str) -> Option<Target> {
    if let Some(rest) = path.strip_prefix(LEASES_PREFIX) {
        let parts: Vec<&str> = rest.split('/').collect();
        return match parts[..] {
            [ns, "leases"] => Some(Target::Leases {
                namespace: ns.into(),
            }),
            [ns, "leases", name] => Some(Target::Lease {
                namespace: ns.into(),
                name: name.into(),
            }),
            _ => None,
        };
    }
    let parts: Vec<&str> = path.strip_prefix(GROUP_PREFIX)?.split('/').collect();
    let (namespace, plural, status) = match parts[..] {
        [plural] => ("", plural, None),
        ["namespaces", ns, plural] => (ns, plural, None),
        ["namespaces", ns, plural, name, "status"] => (ns, plural, Some(name)),
        _ => return None,
    };
    kind_of(plural)?;
    let (namespace, plural) = (namespace.to_string(), plural.to_string());
    Some(match status {
        None => Target::Collection { namespace, plural },
        Some(name) => Target::Status {
            namespace,
            plural,
            name: name.into(),
        },
    })
}

async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(String::from);
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let seen = Seen {
        method: req.method().to_string(),
        path: path.clone(),
        query: query.clone(),
        token,
    };
    state.lock().unwrap().seen.push(seen.clone());
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return json_response(StatusCode::BAD_REQUEST, &status(400, "BadRequest", "body"))
        }
    };
    let not_found = || {
        json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", "not served"),
        )
    };
    let method = seen.method.as_str();
    if method == "GET" && (path == ISSUER_CONFIGURATION || path == ISSUER_KEYS) {
        return issuer(&state, &path, seen.token.as_deref());
    }
    match (target(&path), method) {
        (Some(Target::Collection { namespace, plural }), "GET") => {
            if seen.is_watch() {
                let from = query
                    .get("resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                wait_while(&state, |s| s.watches_held).await;
                watch(&state, namespace, plural, from)
            } else {
                wait_while(&state, |s| s.held_lists.contains(&plural)).await;
                list(&state, &namespace, &plural)
            }
        }
        (
            Some(Target::Status {
                namespace,
                plural,
                name,
            }),
            "PATCH" | "PUT",
        ) => {
            let key = (namespace, plural, name);
            let Ok(sent) = serde_json::from_slice::<Value>(&body) else {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &status(400, "BadRequest", "not JSON"),
                );
            };
            if method == "PATCH" && content_type != "application/merge-patch+json" {
                let message = format!("only merge patches are served, not {content_type}");
                return json_response(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    &status(415, "UnsupportedMediaType", &message),
                );
            }
            write_status(&state, key, method == "PUT", sent)
        }
        (Some(Target::Lease { namespace, name }), "GET") => {
            match state.lock().unwrap().leases.get(&(namespace, name)) {
                Some(lease) => json_response(StatusCode::OK, lease),
                None => json_response(
                    StatusCode::NOT_FOUND,
                    &status(404, "NotFound", "leases not found"),
                ),
            }
        }
        (Some(Target::Leases { namespace }), "POST") => match serde_json::from_slice(&body) {
            Ok(lease) => write_lease(&state, namespace, None, lease),
            Err(_) => json_response(
                StatusCode::BAD_REQUEST,
                &status(400, "BadRequest", "not JSON"),
            ),
        },
        (Some(Target::Lease { namespace, name }), "PUT") => match serde_json::from_slice(&body) {
            Ok(lease) => write_lease(&state, namespace, Some(name), lease),
            Err(_) => json_response(
                StatusCode::BAD_REQUEST,
                &status(400, "BadRequest", "not JSON"),
            ),
        },
        _ => not_found(),
    }
}

/// The issuer discovery document or keys, for the issuer's reader only; with the API
/// server's `Cache-Control`.
fn issuer(state: &Mutex<State>, path: &str, token: Option<&str>) -> Response<Body> {
    let Some(issuer) = state.lock().unwrap().issuer.clone() else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", "not served"),
        );
    };
    if token != Some(issuer.token.as_str()) {
        return json_response(
            StatusCode::UNAUTHORIZED,
            &status(401, "Unauthorized", "Unauthorized"),
        );
    }
    let body = if path == ISSUER_KEYS {
        serde_json::from_str(&issuer.jwks).unwrap()
    } else {
        json!({
            "issuer": issuer.iss,
            "jwks_uri": format!("{}{ISSUER_KEYS}", issuer.iss),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        })
    };
    let mut response = json_response(StatusCode::OK, &body);
    response
        .headers_mut()
        .insert("cache-control", "public, max-age=3600".parse().unwrap());
    response
}

/// RFC 7386: `patch` merged into `target`; `null` removes a key.
fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let map = target.as_object_mut().unwrap();
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A status PATCH (`sent` is the merge patch) or PUT (`sent` is the object): only
/// `status` changes, the resourceVersion moves, watchers see MODIFIED.
fn write_status(
    state: &Mutex<State>,
    key: (String, String, String),
    put: bool,
    sent: Value,
) -> Response<Body> {
    let mut state = state.lock().unwrap();
    let Some(mut object) = state.objects.get(&key).cloned() else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", "object not found"),
        );
    };
    if put {
        if sent["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"] {
            let message = "the object has been modified; please apply your changes to the latest version and try again";
            return json_response(StatusCode::CONFLICT, &status(409, "Conflict", message));
        }
        object["status"] = sent["status"].clone();
    } else if let Some(patch) = sent.get("status") {
        merge(&mut object["status"], patch);
    }
    state.rv += 1;
    let rv = state.rv;
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    state.objects.insert(key.clone(), object.clone());
    let (namespace, plural, _) = key;
    state.record(rv, &namespace, &plural, "MODIFIED", object.clone());
    json_response(StatusCode::OK, &object)
}

/// Creates (`name` None) or replaces a Lease, with the API server's optimistic
/// concurrency: a replace must carry the resourceVersion it read.
fn write_lease(
    state: &Mutex<State>,
    namespace: String,
    name: Option<String>,
    mut lease: Value,
) -> Response<Body> {
    let mut state = state.lock().unwrap();
    let Some(lease_name) = name
        .clone()
        .or_else(|| lease["metadata"]["name"].as_str().map(String::from))
    else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &status(400, "BadRequest", "no name"),
        );
    };
    let key = (namespace.clone(), lease_name.clone());
    match (name.is_some(), state.leases.get(&key)) {
        (false, Some(_)) => {
            let message = format!("leases.coordination.k8s.io \"{lease_name}\" already exists");
            return json_response(
                StatusCode::CONFLICT,
                &status(409, "AlreadyExists", &message),
            );
        }
        (true, None) => {
            return json_response(
                StatusCode::NOT_FOUND,
                &status(404, "NotFound", "lease not found"),
            )
        }
        (true, Some(stored))
            if stored["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"] =>
        {
            let message = format!("Operation cannot be fulfilled on leases.coordination.k8s.io \"{lease_name}\": the object has been modified; please apply your changes to the latest version and try again");
            return json_response(StatusCode::CONFLICT, &status(409, "Conflict", &message));
        }
        _ => {}
    }
    state.rv += 1;
    let meta = &mut lease["metadata"];
    meta["name"] = json!(lease_name);
    meta["namespace"] = json!(namespace);
    meta["resourceVersion"] = json!(state.rv.to_string());
    meta["uid"] = json!(format!("uid-lease-{lease_name}"));
    lease["apiVersion"] = json!("coordination.k8s.io/v1");
    lease["kind"] = json!("Lease");
    state.leases.insert(key, lease.clone());
    let code = if name.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    json_response(code, &lease)
}

async fn wait_while(state: &Mutex<State>, held: impl Fn(&State) -> bool) {
    while held(&state.lock().unwrap()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn list(state: &Mutex<State>, namespace: &str, plural: &str) -> Response<Body> {
    let state = state.lock().unwrap();
    let items: Vec<Value> = state
        .objects
        .iter()
        .filter(|((ns, p, _), _)| (namespace.is_empty() || ns == namespace) && p == plural)
        .map(|(_, o)| o.clone())
        .collect();
    let body = json!({
        "apiVersion": "toolgate.dev/v1alpha1",
        "kind": format!("{}List", kind_of(plural).unwrap()),
        "metadata": {"resourceVersion": state.rv.to_string()},
        "items": items,
    });
    json_response(StatusCode::OK, &body)
}

fn watch(state: &Mutex<State>, namespace: String, plural: String, from: u64) -> Response<Body> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut state = state.lock().unwrap();
    if from < state.compacted {
        let message = format!("too old resource version: {from} ({})", state.compacted);
        let _ = tx.send(line("ERROR", status(410, "Expired", &message)));
    } else {
        let watch = Watch {
            namespace,
            plural,
            lines: tx,
        };
        for event in &state.history {
            if event.rv > from && watch.sees(&event.namespace, &event.plural) {
                let _ = watch.lines.send(event.line.clone());
            }
        }
        state.watches.push(watch);
    }
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let line = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(line)), rx))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

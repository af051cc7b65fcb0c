//! A Kubernetes API server for `toolgate.dev/v1alpha1` objects, on the wire: what the real
//! `kube::Client` and kube-rs watcher talk to in the tests (no cluster is available).
//!
//! - `GET /apis/toolgate.dev/v1alpha1/namespaces/{ns}/{plural}`: a `…List` with
//!   `metadata.resourceVersion`.
//! - the same with `?watch=true&resourceVersion=N`: a chunked stream of JSON lines
//!   `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …}` — every event after `N`
//!   from the history, then live events; from a compacted `N`, one `ERROR` event carrying a
//!   `410 Expired` Status (what the API server sends for a too-old resourceVersion).
//! - faults: hold lists or watches (the request waits), end open watches cleanly, cut every
//!   connection, go down (every connection is reset on accept), compact the history.
//! - every request is recorded, to check the sidecar needs no more than its Role.

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

const PREFIX: &str = "/apis/toolgate.dev/v1alpha1/namespaces/";

type Body = BoxBody<Bytes, Infallible>;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
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
}

#[derive(Clone)]
struct Event {
    rv: u64,
    namespace: String,
    plural: String,
    line: Bytes,
}

struct Watch {
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
        let path = self.dir.path().join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: 'http://{}'}}}}]\n\
             users: [{{name: fake, user: {{}}}}]\n\
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
        let meta = &mut object["metadata"];
        meta["namespace"] = json!(namespace);
        meta["resourceVersion"] = json!(rv.to_string());
        meta["uid"] = json!(format!("uid-{namespace}-{plural}-{name}"));
        meta["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        meta["generation"] = json!(previous.as_ref().map_or(1, |p| {
            p["metadata"]["generation"].as_u64().unwrap_or(1) + 1
        }));
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
            w.namespace != event.namespace
                || w.plural != event.plural
                || w.lines.send(event.line.clone()).is_ok()
        });
        self.history.push(event);
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

async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let seen = Seen {
        method: req.method().to_string(),
        path: path.clone(),
        query: query.clone(),
    };
    state.lock().unwrap().seen.push(seen.clone());
    let target = path
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('/'))
        .filter(|(_, plural)| kind_of(plural).is_some() && seen.method == "GET");
    let Some((namespace, plural)) = target else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", "not served"),
        );
    };
    let (namespace, plural) = (namespace.to_string(), plural.to_string());
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
        .filter(|((ns, p, _), _)| ns == namespace && p == plural)
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
        for event in &state.history {
            if event.rv > from && event.namespace == namespace && event.plural == plural {
                let _ = tx.send(event.line.clone());
            }
        }
        state.watches.push(Watch {
            namespace,
            plural,
            lines: tx,
        });
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

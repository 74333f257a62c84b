//! A fake Kubernetes API server for the tests, following the documented API for what the host's
//! Kubernetes adapter and the official clients (the `kubernetes` Python client, `kubectl`, kube-rs)
//! use: plain HTTP/1.1 on 127.0.0.1 with a bearer token, discovery, a generic object store with
//! watches ([`store`]), Pods backed by real Docker containers ([`pods`]) and `exec` over the
//! websocket channel protocols ([`exec`]).
//!
//! ## Layout
//! - [`resource`]: resource types as discovery lists them, their keys, validation's field errors.
//! - [`store`]: the objects (create/get/list/replace/status/merge patch/delete, finalizers,
//!   ownerReferences cascade), the event history, [`store::Subscription`]s.
//! - [`status`]: the apiserver's `Status` errors, worded as the real server words them.
//! - [`selector`]: label and field selectors.
//! - `api`: the HTTP routes (auth, request log, discovery, REST verbs, watch streams); `call`:
//!   what a verb is handed and how it answers (JSON, `Status` errors).
//! - [`pods`]: the one node's kubelet: a Docker container per Pod container, init containers,
//!   `emptyDir` volumes as Docker volumes, the Pod's status; `log`.
//! - [`exec`]: `pods/exec` over `v5.channel.k8s.io`, `v4.channel.k8s.io`, `channel.k8s.io`.
//! - [`kubeconfig`]: the kubeconfig file a client loads.
//! - [`table`]: the `Table` answers `kubectl get` prints.
//! - [`tls`]: HTTPS with a fresh CA, for clients that send a token only over TLS (`kubectl`).
//! - [`agent_sandbox`]: kubernetes-sigs/agent-sandbox's custom resources and their controller, an
//!   add-on as in a real cluster: [`agent_sandbox::install`].
//!
//! What it does not do (a real cluster does): `Table` rows in watches (`kubectl get -w`), OpenAPI documents (`kubectl apply` needs `--validate=false`), JSON patch (415),
//! server-side apply's field ownership (an apply creates a missing object, else merges), strategic
//! merge (applied as a JSON merge patch: lists are replaced, not merged by key), `limit`/`continue` paging (a list is whole), periodic watch bookmarks (only the
//! `initial-events-end` one of `sendInitialEvents`), SPDY (exec is websockets only), `attach`,
//! `portforward`, Events, namespace deletion of its contents, readiness probes, Services' networking,
//! `configMap`/`secret`/`hostPath` volumes.
//!
//! Every container and volume carries [`CONTAINER_LABEL`]` = <instance>`; the [`FakeKube`] removes
//! them all when dropped, after the `docker run`s and `volume create`s in flight have finished
//! ([`crate::containers::docker_making`]). Custom resources (agent-sandbox's) register their types with
//! [`store::Store::register`] and run their controllers with [`FakeKube::spawn`].

pub mod agent_sandbox;
mod api;
mod call;
pub mod exec;
pub mod kubeconfig;
pub mod pods;
pub mod resource;
pub mod selector;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

pub use resource::{ResourceKey, ResourceType};
pub use status::ApiError;
pub use store::{Event, EventType, Store, Subscription};

/// Label on every container and volume a fake creates; the value is the fake's instance id.
pub const CONTAINER_LABEL: &str = "dev.agentd.fake-kube";
/// The fake's one node.
pub const NODE_NAME: &str = "fake-kube";
/// The namespace of the kubeconfig's context.
pub const NAMESPACE: &str = "default";

/// What the handlers and controllers share.
pub struct Shared {
    pub store: Arc<Store>,
    pub token: String,
    pub instance: String,
    /// `127.0.0.1:PORT`.
    pub address: String,
    requests: Mutex<Vec<String>>,
    pub(crate) exec_streams: exec::Streams,
    pub(crate) kubelet: pods::Kubelet,
}

impl Shared {
    fn log_request(&self, line: String) {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).push(line);
    }
}

/// A running fake API server on 127.0.0.1 (its own thread and runtime), with a kubeconfig file
/// that points at it.
pub struct FakeKube {
    addr: SocketAddr,
    /// The CA (PEM) of a fake started with [`FakeKube::start_tls`].
    ca_pem: Option<String>,
    shared: Arc<Shared>,
    server: crate::ServerThread,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl FakeKube {
    /// Starts a fake on a random port with a random token, plain HTTP.
    pub fn start() -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap_or_else(|e| panic!("fake kube: {e}"))
    }

    /// Starts a fake on `addr` (plain HTTP) with a random token, and writes its kubeconfig.
    pub fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        Self::launch(addr, false)
    }

    /// Starts a fake on a random port serving HTTPS (a fresh CA, in the kubeconfig): what
    /// `kubectl` needs to send its token ([`tls`]).
    pub fn start_tls() -> Self {
        Self::launch(SocketAddr::from(([127, 0, 0, 1], 0)), true).unwrap_or_else(|e| panic!("fake kube: {e}"))
    }

    /// Starts a fake on `addr`, over HTTPS when `tls`, and writes its kubeconfig.
    pub fn launch(addr: SocketAddr, tls: bool) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let instance = format!("fk{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let store = Arc::new(Store::new());
        register_core(&store).map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            store,
            token: format!("fake-kube-token-{}", crate::random_hex(16)),
            instance,
            address: addr.to_string(),
            requests: Mutex::new(Vec::new()),
            exec_streams: exec::Streams::default(),
            kubelet: pods::Kubelet::default(),
        });
        let tls = if tls { Some(tls::make()?) } else { None };
        let ca_pem = tls.as_ref().map(|t| t.ca_pem.clone());
        let dir = tempfile::Builder::new().prefix("fake-kube-").tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        let scheme = if tls.is_some() { "https" } else { "http" };
        kubeconfig::write(
            &kubeconfig,
            &format!("{scheme}://{addr}"),
            &shared.token,
            NAMESPACE,
            ca_pem.as_deref(),
        )?;
        let app = api::router(shared.clone());
        let kubelet = shared.clone();
        let server = crate::ServerThread::spawn("fake-kube", move || async move {
            tokio::spawn(pods::run(kubelet));
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            match tls {
                Some(tls) => {
                    if let Ok(listener) = tls::TlsListener::new(listener, tls.acceptor) {
                        let _ = axum::serve(listener, app).await;
                    }
                }
                None => {
                    // As the real API server (Go sets TCP_NODELAY): an exec stream's small frames
                    // must not wait for the peer's delayed ACK.
                    use axum::serve::ListenerExt as _;
                    let listener = listener.tap_io(|tcp| {
                        let _ = tcp.set_nodelay(true);
                    });
                    let _ = axum::serve(listener, app).await;
                }
            }
        })?;
        Ok(Self { addr, ca_pem, shared, server, _dir: dir, kubeconfig })
    }

    /// The CA certificate (PEM) of a fake serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The kubeconfig file (one cluster, user and context; namespace `default`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS), the kubeconfig's `server`.
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The kubeconfig context's namespace, `default`.
    pub fn namespace(&self) -> &str {
        NAMESPACE
    }

    /// The bearer token the fake accepts.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The value of [`CONTAINER_LABEL`] on this fake's containers and volumes.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// The object store, for tests and controllers that work in Rust.
    pub fn store(&self) -> &Arc<Store> {
        &self.shared.store
    }

    /// Runs `future` to completion on the fake's runtime, from a thread outside any runtime.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.server.block_on(future)
    }

    /// Runs `task` on the fake's runtime until the fake stops (a controller's loop).
    pub fn spawn<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.server.handle().spawn(task);
    }

    /// Creates a Pod in `namespace` as a POST would (the pod controller starts it).
    pub fn create_pod(&self, namespace: &str, pod: Value) -> Result<Value, ApiError> {
        self.shared.store.create(&ResourceKey::core("pods"), namespace, pod)
    }

    /// The Docker container of a Pod's container, once it exists.
    pub fn container_of(&self, namespace: &str, pod: &str, container: &str) -> Option<String> {
        self.shared.kubelet.container_of(namespace, pod, container)
    }

    /// Closes every open exec websocket abruptly (no close frame, no status: an apiserver
    /// hiccup); how many there were. The processes behind them are not killed (see [`exec`]).
    pub fn drop_exec_streams(&self) -> usize {
        self.shared.exec_streams.cut()
    }

    /// Exec websockets open now.
    pub fn exec_streams_open(&self) -> usize {
        self.shared.exec_streams.open()
    }

    /// Every request seen so far, as `METHOD /path?query` (refused ones included).
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.server.stop();
        pods::remove_all_blocking(&self.shared.instance);
    }
}

/// The core types and the objects every cluster has: the `default` (and `kube-system`,
/// `kube-public`, `kube-node-lease`) namespaces and the one node.
fn register_core(store: &Store) -> Result<(), ApiError> {
    let mut namespaces = ResourceType::new("", "v1", "namespaces", "Namespace", false).with_status();
    namespaces.short_names = vec!["ns".into()];
    namespaces.defaulter = Some(namespace_defaults);
    store.register(namespaces);
    let mut pods_type = ResourceType::new("", "v1", "pods", "Pod", true)
        .with_status()
        .with_short_names(&["po"])
        .with_categories(&["all"]);
    pods_type.other_subresources = vec!["exec".into(), "log".into()];
    pods_type.graceful_deletion = true;
    pods_type.defaulter = Some(pods::defaults);
    pods_type.validator = Some(pods::validate);
    store.register(pods_type);
    store.register(
        ResourceType::new("", "v1", "nodes", "Node", false).with_status().with_short_names(&["no"]),
    );
    store.register(
        ResourceType::new("", "v1", "services", "Service", true)
            .with_status()
            .with_short_names(&["svc"])
            .with_categories(&["all"]),
    );
    store.register(ResourceType::new("", "v1", "configmaps", "ConfigMap", true).with_short_names(&["cm"]));
    store.register(ResourceType::new("", "v1", "secrets", "Secret", true));
    for name in [NAMESPACE, "kube-system", "kube-public", "kube-node-lease"] {
        store.create(&ResourceKey::core("namespaces"), "", json!({"metadata": {"name": name}}))?;
    }
    let node = pods::node_object();
    store.create(&ResourceKey::core("nodes"), "", node.clone())?;
    store.update(&ResourceKey::core("nodes"), "", NODE_NAME, |object| {
        object["status"] = node["status"].clone();
        Ok(())
    })?;
    Ok(())
}

fn namespace_defaults(namespace: &mut Value) {
    let name = namespace.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let meta = store::metadata_mut(namespace);
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    labels["kubernetes.io/metadata.name"] = json!(name);
    namespace["spec"] = json!({"finalizers": ["kubernetes"]});
    namespace["status"] = json!({"phase": "Active"});
}

//! A fake Modal for the tests: the control plane (`modal.client.ModalClient`) and the command
//! router (`modal.task_command_router.TaskCommandRouter`) as separate tonic listeners (h2c) on
//! loopback, following Modal's documented API (its published `.proto` files) and the adapter's contract. It also serves the `*V2`
//! sandbox RPCs that the official Python client uses by default (same behaviour; they also want an
//! `x-modal-auth-token` from `AuthTokenGet`).
//!
//! Its sandboxes are real: each is a Docker container ([`crate::containers`]) from the local image
//! that an image's `FROM <image>` names (e.g. `agentd-base-debian:latest`), running `sleep
//! infinity` under `docker-init` (or the definition's `entrypoint_args`), with every open port
//! published on 127.0.0.1 (the tunnels point there). Router execs are `docker exec -i` processes
//! whose stdout and stderr are kept whole, so a read can start late or resume at any offset.
//! Containers carry [`CONTAINER_LABEL`]` = <instance>` and are removed on terminate and when the
//! [`FakeModal`] is dropped.
//!
//! Auth: control-plane calls need `x-modal-token-id` / `x-modal-token-secret`; router calls need
//! `authorization: Bearer <jwt>` with a JWT the fake minted (three base64url parts, `exp` in the
//! payload), not expired and not revoked ([`FakeModal::expire_router_jwts`]). Otherwise
//! `UNAUTHENTICATED`.
//!
//! Not modelled: `idle_timeout_secs`, resources, network access, secrets, image build steps other
//! than `FROM` (ignored); an exec killed by a signal other than the fake's own SIGKILL reports
//! `docker exec`'s `128 + n` as its code.
//!
//! Knobs: [`FakeModal::no_tunnels`], [`FakeModal::cut_stdio_after`],
//! [`FakeModal::expire_router_jwts`], [`FakeModal::unavailable_once`], [`FakeModal::mount`]; every
//! call is recorded ([`FakeModal::calls`]) with its idempotency key and retry attempt.
//!
//! Modules: `control` (the control plane's RPCs), `router` (the command router's), `proto` (the
//! `.proto` subset, compiled).
//!
//! Hostile switches (a provider that is not to be trusted): [`FakeModal::add_listed`] lists a
//! sandbox with any id and source tag, with no container behind it; the id of every terminate
//! request is recorded ([`FakeModal::terminated`]); [`FakeModal::endless_stdout`] makes every exec
//! of a sandbox without a container print without end (generated as it is sent).

mod control;
pub mod proto;
mod router;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

/// Label on every container a fake Modal creates; the value is the fake's instance id.
pub const CONTAINER_LABEL: &str = "dev.agentd.fake-modal";
/// How long a router JWT lives.
pub const JWT_LIFETIME: Duration = Duration::from_secs(1200);

/// One call the fake received: the RPC's name (`SandboxCreate`, `TaskExecWait`, …), the
/// `x-idempotency-key` and `x-retry-attempt` it carried, and the status it ended with (`Ok` once
/// answered; a stream's status is the one it opened with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub rpc: String,
    pub idempotency_key: Option<String>,
    pub attempt: Option<u32>,
    pub code: Code,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Seconds since the Unix epoch.
fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A JWT the router accepts until `exp` or until revoked.
struct Jwt {
    exp: u64,
    revoked: bool,
    /// A router JWT (else an `AuthTokenGet` token, which the JWT knob leaves alone).
    router: bool,
}

/// What both servers share.
pub(crate) struct Shared {
    pub token_id: String,
    pub token_secret: String,
    pub instance: String,
    pub router_url: String,
    pub mounts: Mutex<Vec<PathBuf>>,
    pub no_tunnels: Mutex<bool>,
    /// [`FakeModal::cut_stdio_after`]: taken by the first stdio stream that goes past it.
    pub cut_stdio: Mutex<Option<u64>>,
    unavailable: Mutex<HashSet<String>>,
    jwts: Mutex<HashMap<String, Jwt>>,
    calls: Mutex<Vec<Call>>,
    pub state: Mutex<control::State>,
    pub execs: Mutex<HashMap<String, Arc<router::Exec>>>,
    /// `docker run`s in flight: a stop kills their CLI, but the engine may still make the container.
    pub creating: std::sync::atomic::AtomicUsize,
    /// The `sandbox_id` of every `SandboxTerminate` (V1 and V2), in arrival order.
    pub terminated: Mutex<Vec<String>>,
    /// [`FakeModal::endless_stdout`].
    pub endless_stdout: Mutex<bool>,
}

/// A call in progress: [`Recorded::end`] writes its status into the record.
pub(crate) struct Recorded<'a> {
    shared: &'a Shared,
    index: usize,
}

impl Recorded<'_> {
    pub fn end<T>(self, result: Result<T, Status>) -> Result<T, Status> {
        let code = result.as_ref().err().map_or(Code::Ok, Status::code);
        if let Some(call) = lock(&self.shared.calls).get_mut(self.index) {
            call.code = code;
        }
        result
    }
}

impl Shared {
    /// Records a call, then refuses it when the knob or the credentials say so.
    fn begin(
        &self,
        rpc: &str,
        metadata: &MetadataMap,
        check: impl FnOnce() -> Result<(), Status>,
    ) -> Result<Recorded<'_>, Status> {
        let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let index = {
            let mut calls = lock(&self.calls);
            calls.push(Call {
                rpc: rpc.to_owned(),
                idempotency_key: text("x-idempotency-key"),
                attempt: text("x-retry-attempt").and_then(|a| a.parse().ok()),
                code: Code::Ok,
            });
            calls.len() - 1
        };
        let recorded = Recorded { shared: self, index };
        let refused = if lock(&self.unavailable).remove(rpc) {
            Err(Status::unavailable(format!("fake-modal: injected UNAVAILABLE for {rpc}")))
        } else {
            check()
        };
        match refused {
            Ok(()) => Ok(recorded),
            Err(status) => recorded.end(Err(status)),
        }
    }

    /// A control-plane call: the token pair must match.
    pub fn begin_control(&self, rpc: &str, metadata: &MetadataMap) -> Result<Recorded<'_>, Status> {
        self.begin(rpc, metadata, || {
            let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok());
            match (text("x-modal-token-id"), text("x-modal-token-secret")) {
                (Some(id), Some(secret)) if id == self.token_id && secret == self.token_secret => Ok(()),
                (None, _) | (_, None) => {
                    Err(Status::unauthenticated("missing x-modal-token-id / x-modal-token-secret"))
                }
                _ => Err(Status::unauthenticated("invalid token id or secret")),
            }
        })
    }

    /// A `*V2` control-plane call: the token pair, and an `x-modal-auth-token` from `AuthTokenGet`
    /// (the Python client sends it on these RPCs only).
    pub fn begin_v2(&self, rpc: &str, metadata: &MetadataMap) -> Result<Recorded<'_>, Status> {
        let recorded = self.begin_control(rpc, metadata)?;
        let token = metadata.get("x-modal-auth-token").and_then(|v| v.to_str().ok());
        match token.map(|token| self.jwt_live(token)) {
            Some(Ok(())) => Ok(recorded),
            Some(Err(status)) => recorded.end(Err(status)),
            None => recorded.end(Err(Status::unauthenticated("missing x-modal-auth-token"))),
        }
    }

    /// Whether `jwt` is one this fake minted, not expired and not revoked.
    fn jwt_live(&self, jwt: &str) -> Result<(), Status> {
        match lock(&self.jwts).get(jwt) {
            None => Err(Status::unauthenticated("unknown JWT")),
            Some(jwt) if jwt.revoked || (jwt.exp as f64) <= now_secs() => {
                Err(Status::unauthenticated("JWT expired"))
            }
            Some(_) => Ok(()),
        }
    }

    /// A router call: `authorization: Bearer <jwt>` with a live JWT this fake minted.
    pub fn begin_router(&self, rpc: &str, metadata: &MetadataMap) -> Result<Recorded<'_>, Status> {
        self.begin(rpc, metadata, || {
            let bearer = metadata
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| Status::unauthenticated("missing authorization: Bearer <jwt>"))?;
            self.jwt_live(bearer)
        })
    }

    /// A JWT-shaped token: `b64url(header).b64url({"exp":…,…}).b64url(signature)`.
    pub fn mint_jwt(&self, subject: &str, router: bool) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let exp = now + JWT_LIFETIME.as_secs();
        let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
        let payload =
            serde_json::json!({"exp": exp, "sub": subject, "jti": crate::random_hex(8)}).to_string();
        let jwt = format!("{header}.{}.{}", b64(payload.as_bytes()), b64(crate::random_hex(16).as_bytes()));
        lock(&self.jwts).insert(jwt.clone(), Jwt { exp, revoked: false, router });
        jwt
    }

    pub fn mounts(&self) -> Vec<PathBuf> {
        lock(&self.mounts).clone()
    }
}

/// A running fake Modal on 127.0.0.1: control plane and router on two ports, served from its own
/// thread and runtime (so it serves whether or not the caller's runtime is busy or blocked).
pub struct FakeModal {
    control: SocketAddr,
    router: SocketAddr,
    shared: Arc<Shared>,
    server: crate::ServerThread,
}

impl FakeModal {
    /// Starts a fake on two free ports with a random token pair.
    pub fn start() -> Self {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::start_on(any, any).unwrap_or_else(|e| panic!("fake modal: {e}"))
    }

    /// Starts a fake with the control plane on `control` and the router on `router`.
    pub fn start_on(control: SocketAddr, router: SocketAddr) -> std::io::Result<Self> {
        let bind = |addr: SocketAddr| -> std::io::Result<std::net::TcpListener> {
            let listener = std::net::TcpListener::bind(addr)?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        };
        let (control_listener, router_listener) = (bind(control)?, bind(router)?);
        let (control, router) = (control_listener.local_addr()?, router_listener.local_addr()?);
        let shared = Arc::new(Shared {
            token_id: format!("ak-fake{}", crate::random_hex(8)),
            token_secret: format!("as-fake{}", crate::random_hex(16)),
            instance: format!("fm{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            router_url: format!("http://{router}"),
            mounts: Mutex::new(Vec::new()),
            no_tunnels: Mutex::new(false),
            cut_stdio: Mutex::new(None),
            unavailable: Mutex::new(HashSet::new()),
            jwts: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            state: Mutex::new(control::State::default()),
            execs: Mutex::new(HashMap::new()),
            creating: std::sync::atomic::AtomicUsize::new(0),
            terminated: Mutex::new(Vec::new()),
            endless_stdout: Mutex::new(false),
        });
        let control_service = control::service(shared.clone());
        let router_service = router::service(shared.clone());
        // The exec pumps and their `docker exec` processes end when the server stops (its runtime
        // is dropped).
        let server = crate::ServerThread::spawn("fake-modal", move || async move {
            let (Ok(control_listener), Ok(router_listener)) = (
                tokio::net::TcpListener::from_std(control_listener),
                tokio::net::TcpListener::from_std(router_listener),
            ) else {
                return;
            };
            let builder = || {
                tonic::transport::Server::builder()
                    .initial_stream_window_size(64 << 20)
                    .initial_connection_window_size(64 << 20)
            };
            let control_server = builder()
                .add_service(control_service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(control_listener));
            let router_server = builder()
                .add_service(router_service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(router_listener));
            tokio::select! {
                _ = control_server => {}
                _ = router_server => {}
            }
        })?;
        Ok(Self { control, router, shared, server })
    }

    /// `http://127.0.0.1:<port>`, the value for `MODAL_SERVER_URL`.
    pub fn server_url(&self) -> String {
        format!("http://{}", self.control)
    }

    /// `http://127.0.0.1:<port>`, the router's URL that `TaskGetCommandRouterAccess` hands out.
    pub fn router_url(&self) -> String {
        format!("http://{}", self.router)
    }

    /// The token id the control plane accepts (`MODAL_TOKEN_ID`).
    pub fn token_id(&self) -> &str {
        &self.shared.token_id
    }

    /// The token secret the control plane accepts (`MODAL_TOKEN_SECRET`).
    pub fn token_secret(&self) -> &str {
        &self.shared.token_secret
    }

    /// `MODAL_SERVER_URL`, `MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET` for a client of this fake.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MODAL_SERVER_URL", self.server_url()),
            ("MODAL_TOKEN_ID", self.token_id().to_owned()),
            ("MODAL_TOKEN_SECRET", self.token_secret().to_owned()),
        ]
    }

    /// The value of [`CONTAINER_LABEL`] on this fake's containers.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// Runs `future` to completion on the fake's runtime, from a thread outside any runtime (the
    /// binary waits for its signals there: one runtime, one signal driver).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.server.block_on(future)
    }

    /// Bind-mounts `dir` at the same path into the containers created from now on, and makes it
    /// their working directory unless the definition names one.
    pub fn mount(&self, dir: &std::path::Path) {
        lock(&self.shared.mounts).push(dir.to_owned());
    }

    /// Whether `SandboxGetTunnels` answers with no tunnels (the adapter must fall back to the
    /// router).
    pub fn no_tunnels(&self, none: bool) {
        *lock(&self.shared.no_tunnels) = none;
    }

    /// Once: the first `TaskExecStdioRead` stream that has more than `bytes` bytes to send (counted
    /// from its `offset`) sends exactly `bytes` bytes, then fails `UNAVAILABLE`.
    pub fn cut_stdio_after(&self, bytes: u64) {
        *lock(&self.shared.cut_stdio) = Some(bytes);
    }

    /// Every router JWT minted so far is refused from now on (`UNAUTHENTICATED`); new ones from
    /// `TaskGetCommandRouterAccess` work.
    pub fn expire_router_jwts(&self) {
        for jwt in lock(&self.shared.jwts).values_mut().filter(|jwt| jwt.router) {
            jwt.revoked = true;
        }
    }

    /// The next call of `rpc` (e.g. `SandboxCreate`, `TaskExecStart`) fails `UNAVAILABLE`.
    pub fn unavailable_once(&self, rpc: &str) {
        lock(&self.shared.unavailable).insert(rpc.to_owned());
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.shared.calls).clone()
    }

    /// Lists a running sandbox `id` carrying the tags agentd puts (`source` as its source tag) that
    /// has no container: what a hostile or broken control plane may list.
    pub fn add_listed(&self, id: &str, source: &str) {
        use proto::client::SandboxTag;
        let tag =
            |name: &str, value: &str| SandboxTag { tag_name: name.to_owned(), tag_value: value.to_owned() };
        let sandbox = control::Sandbox {
            id: id.to_owned(),
            app_id: String::new(),
            task_id: format!("ta-{}", crate::random_hex(8)),
            image_id: String::new(),
            name: None,
            tags: vec![
                tag(agentd_host::adapters::modal::TAG, "1"),
                tag(agentd_host::adapters::modal::SOURCE_TAG, source),
            ],
            created_at: now_secs(),
            timeout_secs: 3600,
            container: None,
            tunnels: Vec::new(),
            result: None,
            task_id_polls: 0,
        };
        lock(&self.shared.state).sandboxes.insert(id.to_owned(), sandbox);
    }

    /// Whether an exec started in a sandbox without a container (see [`FakeModal::add_listed`])
    /// is accepted, prints zeros on stdout without end (made as they are read, never held) and
    /// never exits: a hostile sandbox.
    pub fn endless_stdout(&self, endless: bool) {
        *lock(&self.shared.endless_stdout) = endless;
    }

    /// The `sandbox_id` of every terminate request so far (V1 and V2), in arrival order.
    pub fn terminated(&self) -> Vec<String> {
        lock(&self.shared.terminated).clone()
    }

    /// The ids of the sandboxes made so far (terminated ones included).
    pub fn sandbox_ids(&self) -> Vec<String> {
        lock(&self.shared.state).sandboxes.keys().cloned().collect()
    }

    /// The container behind a sandbox (None once terminated, or for an unknown id).
    pub fn container_of(&self, sandbox_id: &str) -> Option<String> {
        lock(&self.shared.state).sandboxes.get(sandbox_id).and_then(|s| s.container.clone())
    }
}

impl Drop for FakeModal {
    fn drop(&mut self) {
        let racing = self.shared.creating.load(std::sync::atomic::Ordering::SeqCst) > 0;
        self.server.stop();
        crate::containers::remove_all_blocking(CONTAINER_LABEL, &self.shared.instance);
        if racing {
            // A create cut short may still land a container: give the engine time, then sweep again.
            std::thread::sleep(std::time::Duration::from_secs(2));
            crate::containers::remove_all_blocking(CONTAINER_LABEL, &self.shared.instance);
        }
    }
}

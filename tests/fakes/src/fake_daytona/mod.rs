//! A fake Daytona for the tests: the API under `/api`, the toolbox under `/toolbox/<sandboxId>`, and
//! a preview proxy per (sandbox, port), following Daytona's documented API.
//!
//! Its sandboxes are real: each is a Docker container from a local image (`FROM <image>` of a
//! `buildInfo`, a snapshot that names a local image, else [`DEFAULT_IMAGE`]), kept alive by
//! `sleep infinity` under `docker-init`. Files and exec go through the `docker` CLI (`docker exec`,
//! bytes on stdin/stdout, never through a terminal). Containers carry [`CONTAINER_LABEL`]` =
//! <instance>` and are removed on delete and when the [`FakeDaytona`] is dropped.
//!
//! Knobs: an image (or snapshot) named [`IMAGE_BUILD_FAILED`] / [`IMAGE_ERROR`], or the label
//! [`OUTCOME_LABEL`] = `build_failed` | `error`, makes the sandbox end in that state with an
//! `errorReason`; [`FakeDaytona::inject_fault`] answers the next N matching requests with a status;
//! [`FakeDaytona::drop_preview_connections`] cuts the proxied connections of a sandbox;
//! [`FakeDaytona::mount`] bind-mounts a host directory at the same path into the containers made
//! afterwards and starts them there (the real Daytona's volumes, reduced to what tests need: the
//! host and the sandbox seeing the same files at the same paths).
//!
//! Hostile switches (a provider that is not to be trusted): [`FakeDaytona::add_listed`] lists a
//! record with any id and source (`../../../../evil/delete-me`, `a%2Fb`, escape sequences), with
//! no container behind it; [`FakeDaytona::huge_answers`] answers matching requests with a body of
//! any size, generated as it is sent; [`FakeDaytona::generated_file`] answers a bulk download with a
//! generated part of any size, its `Content-Length` true or a lie. Every request's method and raw path is recorded
//! ([`FakeDaytona::requests`]), so a test can check that nothing went outside `/sandbox/<id>`.
//!
//! Modules: `api` (the REST API's routes), `toolbox` (files and exec in a sandbox), `preview` (the
//! per-port proxy), `state` (the sandboxes' records), `docker` (the containers behind them).

mod api;
mod docker;
mod preview;
mod state;
mod toolbox;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

pub use state::Sandbox;
pub use toolbox::generated_bytes;

/// Label on every container a fake creates; the value is the fake's instance id.
pub const CONTAINER_LABEL: &str = "dev.agentd.fake-daytona";
/// The image behind a create without `buildInfo` whose snapshot is not a local image.
pub const DEFAULT_IMAGE: &str = "agentd-base-debian:latest";
/// A `FROM` image or snapshot name that makes the build fail (`build_failed`).
pub const IMAGE_BUILD_FAILED: &str = "fake:build-failed";
/// A `FROM` image or snapshot name that makes the sandbox end in `error`.
pub const IMAGE_ERROR: &str = "fake:error";
/// A label whose value (`build_failed` or `error`) picks the failed end state.
pub const OUTCOME_LABEL: &str = "fake-daytona/outcome";

/// One injected failure: the next `remaining` requests whose path starts with `path_prefix` (and
/// method matches, when given) get `status` with a JSON error body.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    method: Option<String>,
    path_prefix: String,
    status: u16,
    remaining: usize,
}

/// [`FakeDaytona::huge_answers`]: requests whose path contains `path_part` get `bytes` bytes.
#[derive(Debug, Clone)]
pub(crate) struct Huge {
    pub path_part: String,
    pub bytes: u64,
}

/// [`FakeDaytona::generated_file`]: a bulk download of `path` answers a part of `bytes` generated
/// bytes whose `Content-Length` says `announced` (none when `None`).
#[derive(Debug, Clone)]
pub(crate) struct Generated {
    pub path: String,
    pub bytes: u64,
    pub announced: Option<u64>,
}

/// What the handlers share.
pub(crate) struct Shared {
    pub key: String,
    pub instance: String,
    pub port: u16,
    pub default_image: Mutex<String>,
    /// Host directories bind-mounted at the same path into new containers; the last one is their
    /// working directory.
    pub mounts: Mutex<Vec<std::path::PathBuf>>,
    pub sandboxes: Mutex<HashMap<String, Sandbox>>,
    pub requests: Mutex<Vec<String>>,
    pub faults: Mutex<Vec<Fault>>,
    pub huge: Mutex<Vec<Huge>>,
    pub generated: Mutex<Vec<Generated>>,
    /// Bytes of generated parts handed to the connection so far.
    pub generated_sent: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn lock_sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sandbox>> {
        self.sandboxes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mounts(&self) -> Vec<std::path::PathBuf> {
        self.mounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// A running fake Daytona on 127.0.0.1 (its own thread and runtime, so it serves whether or not the
/// caller's runtime is busy or blocked).
pub struct FakeDaytona {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: crate::ServerThread,
}

impl FakeDaytona {
    /// Starts a fake on a random port with a random API key.
    pub fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))))
            .unwrap_or_else(|e| panic!("fake daytona: {e}"))
    }

    /// Starts a fake on `addr` with a random API key.
    pub fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let instance = format!("fd{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let shared = Arc::new(Shared {
            key: format!("fake-key-{}", state::random_hex(16)),
            instance,
            port: addr.port(),
            default_image: Mutex::new(DEFAULT_IMAGE.to_owned()),
            mounts: Mutex::new(Vec::new()),
            sandboxes: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            huge: Mutex::new(Vec::new()),
            generated: Mutex::new(Vec::new()),
            generated_sent: std::sync::atomic::AtomicU64::new(0),
        });
        let app = api::router(shared.clone());
        let server = crate::ServerThread::spawn("fake-daytona", move || async move {
            if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                let _ = axum::serve(listener, app).await;
            }
            // Stopping drops the runtime: that ends the preview listeners and proxied connections.
        })?;
        Ok(Self { addr, shared, server })
    }

    /// `http://127.0.0.1:<port>/api`, the value for `DAYTONA_API_URL`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    /// The API key the fake accepts (`DAYTONA_API_KEY`).
    pub fn api_key(&self) -> &str {
        &self.shared.key
    }

    /// Runs `future` to completion on the fake's runtime, from a thread outside any runtime (the
    /// binary waits for its signals there: one runtime, one signal driver).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.server.block_on(future)
    }

    /// The value of [`CONTAINER_LABEL`] on this fake's containers.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// The image used when a create names no local image (default [`DEFAULT_IMAGE`]).
    pub fn set_default_image(&self, image: &str) {
        *self.shared.default_image.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            image.to_owned();
    }

    /// Bind-mounts `dir` at the same path into the containers created from now on, and makes it
    /// their working directory (the toolbox exec's default `cwd`, hence an injected agentd's).
    pub fn mount(&self, dir: &std::path::Path) {
        self.shared.mounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(dir.to_owned());
    }

    /// Answers the next `count` requests whose path starts with `path_prefix` (e.g. `/api/sandbox`,
    /// `/toolbox/`) and whose method is `method` (any when `None`) with `status` and a JSON error.
    pub fn inject_fault(&self, method: Option<&str>, path_prefix: &str, status: u16, count: usize) {
        self.shared.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Fault {
            method: method.map(str::to_ascii_uppercase),
            path_prefix: path_prefix.to_owned(),
            status,
            remaining: count,
        });
    }

    /// Lists a sandbox record `id` (state `started`, [`agentd_host::adapters::daytona::LABEL`] set,
    /// `source` as its source label) that has no container: what a hostile or broken provider
    /// may list. Deleting it works like any other.
    pub fn add_listed(&self, id: &str, source: &str) {
        let body = serde_json::json!({
            "labels": {
                agentd_host::adapters::daytona::LABEL: "1",
                agentd_host::adapters::daytona::SOURCE_LABEL: source,
            },
        });
        let sandbox = Sandbox::new(id.to_owned(), &body, String::new(), "started", &[]);
        self.shared.lock_sandboxes().insert(id.to_owned(), sandbox);
    }

    /// From now on, every authorised request whose path contains `path_part` (e.g. `/api/sandbox`,
    /// `/process/execute`) is answered 200 with a JSON document of `bytes` bytes that never
    /// closes, produced as it is sent (never held in memory) and without a `Content-Length`, so
    /// a client must count what it reads.
    pub fn huge_answers(&self, path_part: &str, bytes: u64) {
        self.shared
            .huge
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Huge { path_part: path_part.to_owned(), bytes });
    }

    /// From now on, a bulk download (of any sandbox, one with no container too) that asks only for
    /// paths given here answers each with a part of `bytes` bytes ([`generated_bytes`]), produced
    /// as it is sent (never held in memory), whose `Content-Length` header says `announced` (left
    /// out when `None`; a number other than `bytes` is a lie).
    pub fn generated_file(&self, path: &str, bytes: u64, announced: Option<u64>) {
        self.shared.generated.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Generated {
            path: path.to_owned(),
            bytes,
            announced,
        });
    }

    /// How many bytes of generated parts ([`FakeDaytona::generated_file`]) the fake has handed to
    /// its connections so far.
    pub fn generated_sent(&self) -> u64 {
        self.shared.generated_sent.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request seen so far, as `METHOD /path?query` (auth failures included).
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The container behind a sandbox (None once deleted or when it never had one).
    pub fn container_of(&self, sandbox_id: &str) -> Option<String> {
        self.shared.lock_sandboxes().get(sandbox_id).and_then(|s| s.container.clone())
    }

    /// The ids of the sandboxes the fake knows (deleted ones drop out once reported `destroyed`).
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.shared.lock_sandboxes().keys().cloned().collect()
    }

    /// Cuts every proxied preview connection of a sandbox (a link dropping mid-session).
    pub fn drop_preview_connections(&self, sandbox_id: &str) {
        if let Some(sandbox) = self.shared.lock_sandboxes().get(sandbox_id) {
            sandbox.cut_previews();
        }
    }
}

impl Drop for FakeDaytona {
    fn drop(&mut self) {
        self.server.stop();
        crate::containers::remove_all_blocking(CONTAINER_LABEL, &self.shared.instance);
    }
}

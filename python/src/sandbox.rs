//! [`Sandbox`]: one Python class over any `agentd_host::BaseSandbox`.
//!
//! Every call runs on this process's tokio runtime ([`crate::runtime`]): the blocking form releases
//! the GIL and waits for it (still answering Ctrl-C); the `a`-prefixed form returns an asyncio
//! awaitable driven by that runtime (no thread per call). Giving up on a call (Ctrl-C, a cancelled
//! task) drops it, which cancels it in agentd. `close()` waits for calls in flight, then ends the
//! sandbox; later calls raise `SandboxClosedError`.
//!
//! A sandbox belongs to the process that made it. A copy inherited by `fork` shares its link's
//! socket and names its agentd and workspace, but none of the threads that drive them: in that
//! child every call raises `InheritedSandboxError` before touching anything, `close()` does nothing,
//! and garbage collection leaves the whole state alone, so the parent's sandbox goes on as before.

use std::path::PathBuf;
use std::str::FromStr as _;
use std::sync::Arc;

use agentd_host::provider::{self, Opened};
use agentd_host::{AgentdSandbox, BaseSandbox, LocalOptions, LocalSandbox, OffloadRequest, SandboxSpec};
use pyo3::prelude::*;
use tokio::sync::RwLock;

use crate::calls::{self, Answer, Call};
use crate::{errors, runtime};

/// How often a blocking call looks for a Python signal (Ctrl-C).
const SIGNAL_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// What a [`Sandbox`] holds until it is closed.
enum Held {
    /// Made or attached through a provider: closing removes what it created.
    Opened(Opened),
    /// A link or a local agentd: dropping it is closing it.
    Own(Box<dyn BaseSandbox>),
}

impl Held {
    fn sandbox(&self) -> &dyn BaseSandbox {
        match self {
            Held::Opened(opened) => opened.sandbox.as_ref(),
            Held::Own(sandbox) => sandbox.as_ref(),
        }
    }

    async fn close(self) -> agentd_host::Result<()> {
        match self {
            Held::Opened(opened) => opened.close().await,
            Held::Own(sandbox) => {
                drop(sandbox);
                Ok(())
            }
        }
    }
}

type State = Arc<RwLock<Option<Held>>>;

/// Why a call did not answer.
enum Failure {
    Closed,
    Sandbox(agentd_host::SandboxError),
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Closed => errors::closed(),
            Failure::Sandbox(error) => errors::to_py(error),
        }
    }
}

async fn run(state: State, call: Call) -> Result<Answer, Failure> {
    let held = state.read_owned().await;
    let sandbox = held.as_ref().ok_or(Failure::Closed)?.sandbox();
    call.run(sandbox).await.map_err(Failure::Sandbox)
}

/// A sandbox: the embedded default, a running agentd, or one a provider made or attached to.
#[pyclass(module = "agentd._agentd", frozen)]
pub struct Sandbox {
    state: State,
    /// The process that made it, the only one that may use or end it.
    owner: u32,
    id: String,
    /// The local agentd's process id and workspace (embedded default only).
    local: Option<(u32, PathBuf)>,
    /// How agentd got into a provider's sandbox (`baked`, `injected`).
    agentd_source: Option<&'static str>,
}

impl Sandbox {
    fn new(held: Held, local: Option<(u32, PathBuf)>) -> Self {
        let id = held.sandbox().id().to_owned();
        let agentd_source = held.sandbox().agentd_source().map(|source| source.name());
        Self { state: Arc::new(RwLock::new(Some(held))), owner: std::process::id(), id, local, agentd_source }
    }

    /// Whether this is a copy a forked child inherited (see the module's doc).
    fn inherited(&self) -> bool {
        std::process::id() != self.owner
    }

    /// Refuses a call in a forked child at once: the runtime threads that would answer it exist
    /// only in the owner, so it would wait forever.
    fn mine(&self) -> PyResult<()> {
        if self.inherited() { Err(errors::inherited(self.owner)) } else { Ok(()) }
    }

    /// Runs `call` to its end with the GIL released, looking up every [`SIGNAL_CHECK`] for a
    /// Python signal: Ctrl-C raises `KeyboardInterrupt` in the caller, and dropping the call
    /// cancels it in agentd (a command is killed with its tree).
    fn blocking(&self, py: Python<'_>, call: Call) -> PyResult<Py<PyAny>> {
        self.mine()?;
        let runtime = runtime::current()?;
        let mut call = Box::pin(run(Arc::clone(&self.state), call));
        loop {
            // The timer is made inside the runtime, which owns it.
            let step =
                py.detach(|| runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut call).await }));
            match step {
                Ok(answer) => return answer?.into_py(py),
                Err(_) => py.check_signals()?,
            }
        }
    }

    /// An awaitable that runs `call` on the runtime.
    fn spawn<'py>(&self, py: Python<'py>, call: Call) -> PyResult<Bound<'py, PyAny>> {
        self.mine()?;
        let state = Arc::clone(&self.state);
        let start = if call.starts_light() { runtime::Start::Here } else { runtime::Start::OnRuntime };
        runtime::awaitable(py, start, run(state, call), |py, answer| answer?.into_py(py))
    }
}

/// A value made while the GIL was released.
fn made<T>(
    py: Python<'_>,
    make: impl std::future::Future<Output = agentd_host::Result<T>> + Send,
) -> PyResult<T>
where
    T: Send,
{
    let runtime = runtime::current()?;
    py.detach(|| runtime.block_on(make)).map_err(errors::to_py)
}

#[pymethods]
impl Sandbox {
    /// Starts the embedded default: a private agentd on a Unix socket with a temporary workspace,
    /// confined by the default profile (`confined=False`: by the machine only) with
    /// `writable_roots` also writable (created when missing) and `permissions` (a list of
    /// `{"operations", "paths", "mode"}` dicts, first match wins) in its profile. Commands get the
    /// minimal environment (`PATH`, `HOME`, `LANG`, …) and the variables `env_allowlist` names
    /// (names, or prefixes ending in `*`; a secret-looking name only when named exactly).
    #[staticmethod]
    #[pyo3(signature = (writable_roots = None, confined = true, connect_deadline = None, exec_margin = None, silence_deadline = None, permissions = None, env_allowlist = None))]
    #[expect(clippy::too_many_arguments, reason = "Python keyword arguments, one per option")]
    fn local(
        py: Python<'_>,
        writable_roots: Option<Vec<PathBuf>>,
        confined: bool,
        connect_deadline: Option<f64>,
        exec_margin: Option<f64>,
        silence_deadline: Option<f64>,
        permissions: Option<&Bound<'_, PyAny>>,
        env_allowlist: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let deadlines = calls::deadlines(connect_deadline, exec_margin, silence_deadline)?;
        let permissions = permissions.map(crate::permissions::rules).transpose()?.unwrap_or_default();
        let env_allowlist = env_allowlist.unwrap_or_default();
        for entry in &env_allowlist {
            agentd_protocol::profile::env::check_named(entry)
                .map_err(|why| pyo3::exceptions::PyValueError::new_err(format!("env_allowlist: {why}")))?;
        }
        let options = LocalOptions {
            confined,
            writable_roots: writable_roots.unwrap_or_default(),
            deadlines: Some(deadlines),
            permissions,
            env_allowlist,
        };
        // Started on a runtime worker, not on the calling thread: agentd gets SIGTERM when the thread
        // that forked it ends (`PR_SET_PDEATHSIG` follows the thread), and a Python thread (a thread
        // pool's, a `threading.Thread`) may end long before the sandbox. The workers live as long as
        // the process's runtime, which is the process.
        let starting = runtime::current()?.spawn(async move { LocalSandbox::start_with(&options).await });
        let local = made(py, async move {
            starting
                .await
                .map_err(|e| agentd_host::SandboxError::Start(format!("the start was lost: {e}")))?
        })?;
        let about = (local.pid(), local.workspace().to_owned());
        Ok(Self::new(Held::Own(Box::new(local)), Some(about)))
    }

    /// Links to a running agentd: `ws://HOST:PORT`, `wss://…` or `unix:PATH`, with its token.
    #[staticmethod]
    #[pyo3(signature = (url, token = None, connect_deadline = None, exec_margin = None, silence_deadline = None))]
    fn connect(
        py: Python<'_>,
        url: String,
        token: Option<String>,
        connect_deadline: Option<f64>,
        exec_margin: Option<f64>,
        silence_deadline: Option<f64>,
    ) -> PyResult<Self> {
        let deadlines = calls::deadlines(connect_deadline, exec_margin, silence_deadline)?;
        let sandbox =
            made(py, async { AgentdSandbox::connect_within(&url, token.as_deref(), deadlines).await })?;
        Ok(Self::new(Held::Own(Box::new(sandbox)), None))
    }

    /// Creates or attaches the sandbox a `KIND:SPEC` names (`docker:IMAGE`, `docker-attach:ID`,
    /// `daytona:SNAPSHOT`, `modal:IMAGE`, …); `close()` removes it if it was created here.
    #[staticmethod]
    fn open(py: Python<'_>, spec: &str) -> PyResult<Self> {
        let spec = SandboxSpec::from_str(spec).map_err(errors::to_py)?;
        let opened = made(py, async { provider::open(&spec).await })?;
        Ok(Self::new(Held::Opened(opened), None))
    }

    /// The sandbox's stable identifier.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// How agentd got into a sandbox a provider made or attached to: `"baked"` (the image had it)
    /// or `"injected"` (the wheel's agentd was copied in); `None` for other kinds.
    #[getter]
    fn agentd_source(&self) -> Option<&'static str> {
        self.agentd_source
    }

    /// Process id of the embedded default's agentd (`None` for other kinds).
    #[getter]
    fn pid(&self) -> Option<u32> {
        self.local.as_ref().map(|(pid, _)| *pid)
    }

    /// The embedded default's workspace directory (`None` for other kinds).
    #[getter]
    fn workspace(&self) -> Option<PathBuf> {
        self.local.as_ref().map(|(_, dir)| dir.clone())
    }

    /// `(output, exit_code, truncated)` of `command` run by `sh -c`.
    #[pyo3(signature = (command, timeout = None))]
    fn execute(&self, py: Python<'_>, command: String, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::Execute { command, timeout: calls::timeout(timeout)? })
    }

    #[pyo3(signature = (command, timeout = None))]
    fn aexecute<'py>(
        &self,
        py: Python<'py>,
        command: String,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::Execute { command, timeout: calls::timeout(timeout)? })
    }

    /// `(offloaded, (output, exit_code, truncated), preview_has_truncation_marker)`.
    #[pyo3(signature = (command, capture_path, max_inline_bytes, max_capture_bytes = None, timeout = None))]
    fn execute_with_offload(
        &self,
        py: Python<'_>,
        command: String,
        capture_path: String,
        max_inline_bytes: u64,
        max_capture_bytes: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let timeout = calls::timeout(timeout)?;
        let request = OffloadRequest {
            command,
            capture_path,
            inline_budget: max_inline_bytes,
            max_capture_bytes,
            timeout,
        };
        self.blocking(py, Call::Offload(request))
    }

    #[pyo3(signature = (command, capture_path, max_inline_bytes, max_capture_bytes = None, timeout = None))]
    fn aexecute_with_offload<'py>(
        &self,
        py: Python<'py>,
        command: String,
        capture_path: String,
        max_inline_bytes: u64,
        max_capture_bytes: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = calls::timeout(timeout)?;
        let request = OffloadRequest {
            command,
            capture_path,
            inline_budget: max_inline_bytes,
            max_capture_bytes,
            timeout,
        };
        self.spawn(py, Call::Offload(request))
    }

    /// `[(path, error)]` for `[(path, bytes)]`, in order.
    fn upload_files(&self, py: Python<'_>, files: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::Upload(calls::uploads(files)?))
    }

    fn aupload_files<'py>(&self, py: Python<'py>, files: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::Upload(calls::uploads(files)?))
    }

    /// `[(path, content, error)]` for `[path]`, in order.
    fn download_files(&self, py: Python<'_>, paths: Vec<String>) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::Download(paths))
    }

    fn adownload_files<'py>(&self, py: Python<'py>, paths: Vec<String>) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::Download(paths))
    }

    /// Saves the file at `path` as `local_path`, streamed (any size); the per-file error or `None`.
    fn download_file(&self, py: Python<'_>, path: String, local_path: PathBuf) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::DownloadTo { path, local: local_path })
    }

    fn adownload_file<'py>(
        &self,
        py: Python<'py>,
        path: String,
        local_path: PathBuf,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::DownloadTo { path, local: local_path })
    }

    /// One file verb: `request` is `{"verb": "ls" | "read" | …, …arguments}`; the answer is the dict
    /// of the verb's result type.
    fn fs(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::Fs(calls::fs_request(request)?))
    }

    fn afs<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::Fs(calls::fs_request(request)?))
    }

    /// One process verb: `request` is `{"verb": "spawn" | "result" | "output" | "wait" | "kill" |
    /// "write_stdin" | "close_stdin" | "resize" | "list", …arguments}`.
    fn process(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::Process(calls::process_call(request)?))
    }

    fn aprocess<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::Process(calls::process_call(request)?))
    }

    /// Ends the sandbox (stops the local agentd; removes what a provider created here). Waits for
    /// calls in flight. Closing twice is allowed. In a forked child, closing an inherited copy does
    /// nothing: the sandbox is the parent's to end (a `with` block unwinding in the child must not
    /// end it, nor raise).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.inherited() {
            return Ok(());
        }
        let state = Arc::clone(&self.state);
        made(py, close(state))
    }

    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = (!self.inherited()).then(|| Arc::clone(&self.state));
        let closing = async move {
            match state {
                Some(state) => close(state).await,
                None => Ok(()),
            }
        };
        runtime::awaitable(py, runtime::Start::OnRuntime, closing, |py, closed| {
            closed.map_err(errors::to_py)?;
            Ok(py.None())
        })
    }

    /// What the sandbox's agentd said in its hello about its profile and what this kernel enforces
    /// of it (a dict: `level`, `filesystem`, `permissions` rule by rule, `notes`, …); `None` when it
    /// runs without a profile.
    fn enforcement(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.blocking(py, Call::Enforcement)
    }

    fn aenforcement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.spawn(py, Call::Enforcement)
    }

    /// Whether `close()` has run.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        self.mine()?;
        let runtime = runtime::current()?;
        let state = Arc::clone(&self.state);
        Ok(py.detach(|| runtime.block_on(async move { state.read().await.is_none() })))
    }
}

async fn close(state: State) -> agentd_host::Result<()> {
    let held = state.write().await.take();
    match held {
        Some(held) => held.close().await,
        None => Ok(()),
    }
}

impl Drop for Sandbox {
    /// Garbage collected without `close()`: the link's tasks live on the runtime, so let go of it
    /// there. A local agentd stops; a provider's sandbox is left as it is.
    fn drop(&mut self) {
        if self.inherited() {
            // A forked child's copy: leaked whole. Dropping it would abort the link's tasks on the
            // parent's threadless runtime and stop the parent's agentd (LocalSandbox's own owner
            // check would spare that one, not a provider's link); the child's exit frees the memory.
            std::mem::forget(Arc::clone(&self.state));
            return;
        }
        let _entered = runtime::current().ok().map(|runtime| runtime.enter());
        if let Ok(mut held) = self.state.try_write() {
            drop(held.take());
        }
    }
}

//! The tokio runtime every call runs on, one per process.
//!
//! A runtime's worker threads do not survive `fork` (`os.fork`, multiprocessing's `fork` start
//! method): in the child the parent's runtime is memory without threads, where a spawned task
//! never runs and a lock one of its workers held at the fork is held forever. So the runtime is
//! keyed by process id: a child that calls into the module gets a fresh one of its own, and the
//! parent's copy is never touched (nor dropped: that would wait for threads that are not there).
//! pyo3-async-runtimes' own runtime is one per address space for good, hence [`ProcessTokio`].

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{self, ContextExt};
use tokio::runtime::Runtime;

/// A runtime and the process that made it.
struct ProcessRuntime {
    pid: u32,
    runtime: Runtime,
}

/// The newest [`ProcessRuntime`], leaked: never freed once published. A lock-free pointer rather
/// than a mutex, because a mutex some thread held at a fork stays locked in the child.
static CURRENT: AtomicPtr<ProcessRuntime> = AtomicPtr::new(ptr::null_mut());

/// This process's runtime, made on first use here (in a forked child: its first call).
pub fn current() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    loop {
        let seen = CURRENT.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in CURRENT came from `Box::into_raw` below and is never freed,
        // so it is valid for 'static.
        if let Some(found) = unsafe { seen.as_ref() }
            && found.pid == pid
        {
            return Ok(&found.runtime);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("agentd-python")
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start the tokio runtime: {e}")))?;
        let made = Box::into_raw(Box::new(ProcessRuntime { pid, runtime }));
        // What `seen` pointed to (if anything) was the parent's: it stays leaked.
        match CURRENT.compare_exchange(seen, made, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `made` is now published, hence never freed.
            Ok(_) => return Ok(unsafe { &(*made).runtime }),
            Err(_) => {
                // Another thread of this process published its runtime first: use that one.
                // SAFETY: `made` was never published, so this is its only owner.
                let unused = unsafe { Box::from_raw(made) };
                // Without waiting: this may run where blocking is not allowed.
                unused.runtime.shutdown_background();
            }
        }
    }
}

/// pyo3-async-runtimes' glue (awaitables, task-local event loops) over [`current`].
pub struct ProcessTokio;

tokio::task_local! {
    /// The Python event loop and context of the awaitable a task serves.
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

impl generic::Runtime for ProcessTokio {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    /// Spawns on the runtime of the context: [`future_into_py`] enters [`current`] for the first
    /// spawn, and the others happen inside that runtime's tasks.
    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        tokio::task::spawn_blocking(f)
    }
}

impl ContextExt for ProcessTokio {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        // A new cell: setting it cannot fail.
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS.try_with(|cell| cell.get().cloned()).unwrap_or_default()
    }
}

/// An asyncio awaitable of `fut`, run on this process's runtime.
pub fn future_into_py<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let _entered = current()?.enter();
    generic::future_into_py::<ProcessTokio, F, T>(py, fut)
}

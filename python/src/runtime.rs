//! The tokio runtime every call runs on, one per process.
//!
//! A runtime's worker threads do not survive `fork` (`os.fork`, multiprocessing's `fork` start
//! method): in the child the parent's runtime is memory without threads, where a spawned task
//! never runs and a lock one of its workers held at the fork is held forever. So the runtime is
//! keyed by process id: a child that calls into the module gets a fresh one of its own, and the
//! parent's copy is never touched (nor dropped: that would wait for threads that are not there).
//! The coroutines' awaitables ([`awaitable`]) are asyncio futures settled from tasks on it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use futures_util::FutureExt as _;
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

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

/// An asyncio future of the running event loop, settled with `convert` of `fut`'s output.
///
/// One tokio task per call, settled straight from it: the task converts the output with the GIL
/// and hands it to the loop with one `call_soon_threadsafe`. pyo3-async-runtimes' `future_into_py`
/// spent three tasks and a hop through the blocking pool on each call: `aexecute("true")` measured
/// 1.35x `subprocess.run` with it and 1.25x with this (python/benches/bench.py, same machine).
/// Taking the GIL on a worker holds that worker until the GIL is free; the loop's own thread waits
/// in its selector without it, so only another busy Python thread makes this wait.
///
/// Cancelling the asyncio future (`Task.cancel`, `asyncio.timeout`) aborts the task, which drops
/// `fut` on the runtime: a call in flight is cancelled in agentd. A panic in `fut` settles the
/// future with `RuntimeError` rather than leaving it pending for good.
pub fn awaitable<'py, F, R, C>(py: Python<'py>, fut: F, convert: C) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
    C: FnOnce(Python<'_>, R) -> PyResult<Py<PyAny>> + Send + 'static,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let runtime = current()?;
    let event_loop = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?.call0()?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let settle = Settle { future: future.clone().unbind(), result: None };
    let event_loop = event_loop.unbind();
    let task = runtime.spawn(async move {
        let output = AssertUnwindSafe(fut).catch_unwind().await;
        Python::attach(|py| {
            let result = match output {
                Ok(output) => convert(py, output),
                Err(panic) => {
                    Err(PyRuntimeError::new_err(format!("the call panicked: {}", panic_text(&*panic))))
                }
            };
            // Fails only when the loop is closed: nobody is left to await the result.
            let _ = event_loop.call_method1(
                py,
                intern!(py, "call_soon_threadsafe"),
                (Settle { result: Some(result), ..settle },),
            );
        });
    });
    future.call_method1(intern!(py, "add_done_callback"), (Abort(task.abort_handle()),))?;
    Ok(future)
}

/// Sets an asyncio future's result or exception, on the loop's thread; a future cancelled in the
/// meantime is left as it is.
#[pyclass]
struct Settle {
    future: Py<PyAny>,
    result: Option<PyResult<Py<PyAny>>>,
}

#[pymethods]
impl Settle {
    fn __call__(&mut self, py: Python<'_>) -> PyResult<()> {
        let future = self.future.bind(py);
        if future.call_method0(intern!(py, "done"))?.is_truthy()? {
            return Ok(());
        }
        match self.result.take() {
            Some(Ok(value)) => future.call_method1(intern!(py, "set_result"), (value,))?,
            Some(Err(error)) => future.call_method1(intern!(py, "set_exception"), (error.into_value(py),))?,
            None => return Ok(()),
        };
        Ok(())
    }
}

/// The asyncio future's done callback: aborts its task (a no-op once the task has finished, so
/// only a cancellation does anything).
#[pyclass(frozen)]
struct Abort(AbortHandle);

#[pymethods]
impl Abort {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

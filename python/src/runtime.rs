//! The tokio runtime every call runs on, one per process.
//!
//! A runtime's worker threads do not survive `fork` (`os.fork`, multiprocessing's `fork` start
//! method): in the child the parent's runtime is memory without threads, where a spawned task
//! never runs and a lock one of its workers held at the fork is held forever. So the runtime is
//! keyed by process id: a child that calls into the module gets a fresh one of its own, and the
//! parent's copy is never touched (nor dropped: that would wait for threads that are not there).
//! The coroutines' awaitables ([`awaitable`]) are asyncio futures of calls run on it, polled and
//! settled on their loop's thread when an eventfd the loop watches says so.

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::AsRawFd as _;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_util::FutureExt as _;
use nix::sys::eventfd::{EfdFlags, EventFd};
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

/// Where a call runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Polled on the event loop's own thread: at once (the request is on the socket before the
    /// awaitable is returned) and again whenever its waker signals the loop's eventfd. No worker
    /// is woken for it: on 2 cores that measured 20-40 µs per call (python/benches/bench.py). For
    /// calls whose every step is light.
    Here,
    /// A task on the runtime: for calls with heavy steps (an upload's chunks, a large `write`),
    /// which must not hold up the loop.
    OnRuntime,
}

/// An asyncio future of the running event loop, settled with `convert` of `fut`'s output.
///
/// Nothing on a worker touches Python: a task leaves its output with the loop's [`Hub`], a polled
/// call's waker leaves its id, and either signals the hub's eventfd, which the loop watches
/// (`add_reader`); the loop's own thread polls, converts and settles. Taking the GIL on a worker
/// and calling `call_soon_threadsafe` instead cost a GIL hand-over per call: `aexecute("true")`
/// measured 1.33-1.39x `subprocess.run` that way (python/benches/bench.py).
///
/// Cancelling the asyncio future (`Task.cancel`, `asyncio.timeout`) drops `fut` (a task is
/// aborted, a polled call dropped in the runtime's context): a call in flight is cancelled in
/// agentd. A panic in `fut` settles the future with `RuntimeError` rather than leaving it pending
/// for good.
pub fn awaitable<'py, F, R, C>(
    py: Python<'py>,
    start: Start,
    fut: F,
    convert: C,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
    C: FnOnce(Python<'_>, R) -> PyResult<Py<PyAny>> + Send + 'static,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let runtime = current()?;
    let event_loop = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?.call0()?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let fut = AssertUnwindSafe(fut).catch_unwind();
    let hub = Hub::of(&event_loop)?;
    let id = hub.get().next.fetch_add(1, Ordering::Relaxed);
    let finished = Arc::clone(&hub.get().finished);
    let work = match start {
        Start::Here => {
            let waker = Waker::from(Arc::new(Woken { id, finished }));
            let mut polled: Polled = Box::pin(async move { settlement(fut.await, convert) });
            let first = {
                let _entered = runtime.enter();
                polled.as_mut().poll(&mut Context::from_waker(&waker))
            };
            if let Poll::Ready(settlement) = first {
                settle(py, &future, settlement(py))?;
                return Ok(future);
            }
            Work::Polled(polled, waker)
        }
        Start::OnRuntime => Work::Task(
            runtime
                .spawn(async move {
                    let output = fut.await;
                    finished.push(id, Some(settlement(output, convert)));
                })
                .abort_handle(),
        ),
    };
    let forget = Py::new(py, Forget { hub: hub.clone().unbind(), id })?.into_any();
    hub.get()
        .lock_calls()
        .insert(id, InFlight { future: future.clone().unbind(), forget: forget.clone_ref(py), work });
    future.call_method1(intern!(py, "add_done_callback"), (forget,))?;
    Ok(future)
}

/// How `output` (or the panic instead of it) becomes a result, with the GIL.
fn settlement<R, C>(output: std::thread::Result<R>, convert: C) -> Settlement
where
    R: Send + 'static,
    C: FnOnce(Python<'_>, R) -> PyResult<Py<PyAny>> + Send + 'static,
{
    Box::new(move |py| match output {
        Ok(output) => convert(py, output),
        Err(panic) => Err(PyRuntimeError::new_err(format!("the call panicked: {}", panic_text(&*panic)))),
    })
}

/// Sets an asyncio future's result or exception, unless it is done already (cancelled meanwhile).
fn settle(py: Python<'_>, future: &Bound<'_, PyAny>, result: PyResult<Py<PyAny>>) -> PyResult<()> {
    if future.call_method0(intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    match result {
        Ok(value) => future.call_method1(intern!(py, "set_result"), (value,))?,
        Err(error) => future.call_method1(intern!(py, "set_exception"), (error.into_value(py),))?,
    };
    Ok(())
}

/// How a finished task's output becomes the future's result, on the loop's thread.
type Settlement = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A call whose asyncio future is not settled yet.
struct InFlight {
    future: Py<PyAny>,
    /// Its done callback, taken off before a normal settling: only a cancellation needs it.
    forget: Py<PyAny>,
    work: Work,
}

type Polled = Pin<Box<dyn Future<Output = Settlement> + Send>>;

/// Where a call in flight runs.
enum Work {
    Task(AbortHandle),
    /// Polled on the loop's thread whenever its waker says.
    Polled(Polled, Waker),
}

impl Work {
    /// Stops it: a task is aborted; a polled future is dropped here, in the runtime's context.
    fn stop(self) {
        match self {
            Work::Task(task) => task.abort(),
            Work::Polled(polled, _) => {
                let _entered = current().ok().map(|runtime| runtime.enter());
                drop(polled);
            }
        }
    }
}

/// The waker of a polled call: asks its loop to poll it again.
struct Woken {
    id: u64,
    finished: Arc<Finished>,
}

impl std::task::Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.finished.push(self.id, None);
    }
}

/// Outputs of finished tasks waiting for their loop, and the eventfd that wakes it.
struct Finished {
    fd: EventFd,
    queue: Mutex<Vec<(u64, Option<Settlement>)>>,
}

impl Finished {
    /// Called by a task on a worker: no GIL, one write.
    fn push(&self, id: u64, settlement: Option<Settlement>) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push((id, settlement));
        // Fails only if the counter would overflow, in which case the loop is being woken anyway.
        let _ = self.fd.write(1);
    }

    /// Everything finished so far. The eventfd is read first: a push after the read either lands
    /// in this take or writes again, so the loop is woken for it.
    fn take(&self) -> Vec<(u64, Option<Settlement>)> {
        // EAGAIN: nothing was written since the last read (a push this take already covers).
        let _ = self.fd.read();
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// One event loop's calls in flight: its reader callback settles the futures of finished tasks.
/// Made on a loop's first call, kept for as long as the loop (a weak-keyed map holds it).
#[pyclass(frozen)]
struct Hub {
    /// The process that made it: a forked child leaves an inherited hub alone.
    owner: u32,
    next: AtomicU64,
    finished: Arc<Finished>,
    calls: Mutex<HashMap<u64, InFlight>>,
}

impl Hub {
    /// The hub of `event_loop`, made and registered with it on its first call.
    fn of<'py>(event_loop: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Hub>> {
        static HUBS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = event_loop.py();
        let hubs = HUBS
            .get_or_try_init(py, || -> PyResult<_> {
                Ok(py.import("weakref")?.getattr("WeakKeyDictionary")?.call0()?.unbind())
            })?
            .bind(py);
        if let Some(hub) = hubs.call_method1(intern!(py, "get"), (event_loop,))?.cast_into::<Hub>().ok()
            && hub.get().owner == std::process::id()
        {
            return Ok(hub);
        }
        let fd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
            PyRuntimeError::new_err(format!("cannot make an eventfd for the event loop: {e}"))
        })?;
        let raw = fd.as_raw_fd();
        let hub = Bound::new(
            py,
            Hub {
                owner: std::process::id(),
                next: AtomicU64::new(0),
                finished: Arc::new(Finished { fd, queue: Mutex::new(Vec::new()) }),
                calls: Mutex::new(HashMap::new()),
            },
        )?;
        event_loop.call_method1(intern!(py, "add_reader"), (raw, &hub))?;
        hubs.set_item(event_loop, &hub)?;
        Ok(hub)
    }

    fn lock_calls(&self) -> std::sync::MutexGuard<'_, HashMap<u64, InFlight>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl Hub {
    /// The loop's reader callback: settles the future of every finished task. A future cancelled
    /// meanwhile is left as it is (its task was aborted; an output it still left is dropped).
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        // Every entry taken is seen to, whatever fails: one left out would never settle.
        let mut first_error = None;
        for (id, settlement) in self.finished.take() {
            if let Err(error) = self.advance(py, id, settlement) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Hub {
    /// Settles call `id` with a task's output, or polls it (a polled call's waker said so) and
    /// settles it if it is done.
    fn advance(&self, py: Python<'_>, id: u64, settlement: Option<Settlement>) -> PyResult<()> {
        let Some(mut call) = self.lock_calls().remove(&id) else { return Ok(()) };
        let settlement = match (settlement, &mut call.work) {
            (Some(settlement), _) => settlement,
            (None, Work::Polled(polled, waker)) => {
                let polled = match current() {
                    Ok(runtime) => {
                        let _entered = runtime.enter();
                        polled.as_mut().poll(&mut Context::from_waker(waker))
                    }
                    Err(error) => Poll::Ready(Box::new(move |_: Python<'_>| Err(error)) as Settlement),
                };
                match polled {
                    Poll::Ready(settlement) => settlement,
                    Poll::Pending => {
                        self.lock_calls().insert(id, call);
                        return Ok(());
                    }
                }
            }
            (None, Work::Task(_)) => {
                self.lock_calls().insert(id, call);
                return Ok(());
            }
        };
        let future = call.future.bind(py);
        if future.call_method0(intern!(py, "done"))?.is_truthy()? {
            return Ok(());
        }
        // Its cancellation callback is not needed any more: one scheduled callback fewer.
        future.call_method1(intern!(py, "remove_done_callback"), (call.forget.bind(py),))?;
        settle(py, future, settlement(py))
    }
}

impl Drop for Hub {
    /// The loop is gone: its calls still in flight have nobody to answer.
    fn drop(&mut self) {
        let calls = std::mem::take(&mut *self.lock_calls());
        if self.owner != std::process::id() {
            // The parent's tasks on the parent's threadless runtime: not to be touched.
            std::mem::forget(calls);
            return;
        }
        for call in calls.into_values() {
            call.work.stop();
        }
    }
}

/// The asyncio future's done callback: a future done before its task finished was cancelled, so
/// the task is aborted.
#[pyclass(frozen)]
struct Forget {
    hub: Py<Hub>,
    id: u64,
}

#[pymethods]
impl Forget {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        let call = self.hub.get().lock_calls().remove(&self.id);
        if let Some(call) = call {
            call.work.stop();
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

//! A fake server's own thread and runtime ([`ServerThread`]), and the signals a fake's binary
//! serves until ([`until_terminated`]).

/// A fake server's own thread and runtime (two workers), so it serves whether or not the caller's
/// runtime is busy or blocked. Stopping it (or dropping it) ends the server without waiting for
/// calls in flight, then joins the thread; dropping the runtime ends the tasks the server spawned.
pub struct ServerThread {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::runtime::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Runs the future `serve` makes (inside the runtime, so it can register listeners there) on
    /// a thread named `name`, until it ends or the server is stopped.
    pub fn spawn<F>(name: &str, serve: impl FnOnce() -> F + Send + 'static) -> std::io::Result<Self>
    where
        F: std::future::Future<Output = ()>,
    {
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let handle = runtime.handle().clone();
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            runtime.block_on(async move {
                // No graceful shutdown: a call in flight must not hold up the drop.
                tokio::select! {
                    _ = serve() => {}
                    _ = stop => {}
                }
            });
        })?;
        Ok(Self { shutdown: Some(shutdown), handle, thread: Some(thread) })
    }

    /// Runs `future` to completion on the server's runtime, from a thread outside any runtime (a
    /// fake's binary waits for its signals there: one runtime, one signal driver).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// The server's runtime, to spawn tasks (controllers) on it.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Ends the server and joins its thread (idempotent).
    pub fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Returns on SIGINT or SIGTERM (what a fake's binary serves until).
pub async fn until_terminated() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

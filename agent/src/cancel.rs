//! Cancellation: one [`Cancel`] type for everything agentd stops early — an exec (its kill
//! ladder), a file verb's walk, a download, a kept process left past its grace, and agentd itself
//! at SIGTERM (the shutdown token that [`crate::server::Shared`] holds) — set once, polled by
//! blocking work, awaited by async work.
//!
//! Blocking verbs run on the blocking pool with their token entered for their thread
//! ([`Cancel::enter`]); their loops ask [`is_cancelled`] at each step, so a cancelled or orphaned
//! walk ends within one directory entry or one read. At shutdown every session cancels what it
//! started.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A cancellation flag: set once, polled by the work, awaitable by async code.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<CancelInner>);

#[derive(Debug, Default)]
struct CancelInner {
    flag: AtomicBool,
    notify: Notify,
}

thread_local! {
    /// The token of the blocking work this thread is doing, if any.
    static CURRENT: RefCell<Option<Cancel>> = const { RefCell::new(None) };
}

impl Cancel {
    pub fn cancel(&self) {
        self.0.flag.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.flag.load(Ordering::SeqCst)
    }

    /// Resolves once [`Cancel::cancel`] was called (at once if it already was).
    pub async fn cancelled(&self) {
        let notified = self.0.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a cancel between the two is not missed.
        notified.as_mut().enable();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }

    /// Runs `work` with this token as the thread's current one, so [`is_cancelled`] sees it.
    pub fn enter<R>(&self, work: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|current| current.replace(Some(self.clone())));
        let result = work();
        CURRENT.with(|current| *current.borrow_mut() = previous);
        result
    }
}

/// Whether the blocking work on this thread was cancelled (its request cancelled, or its connection
/// gone, or agentd shutting down). False outside [`Cancel::enter`] (e.g. in the one-shot CLI).
/// Cheap: a thread-local and an atomic load, meant for the head of every loop of a walk or a read.
pub fn is_cancelled() -> bool {
    CURRENT.with(|current| current.borrow().as_ref().is_some_and(Cancel::is_cancelled))
}

/// The current thread's token, to [`Cancel::enter`] in threads a verb spawns for itself.
pub fn current() -> Cancel {
    CURRENT.with(|current| current.borrow().clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_sees_its_token() {
        assert!(!is_cancelled());
        let token = Cancel::default();
        token.enter(|| {
            assert!(!is_cancelled());
            token.cancel();
            assert!(is_cancelled());
            let inner = current();
            std::thread::spawn(move || inner.enter(is_cancelled)).join().unwrap()
        });
        assert!(!is_cancelled());
    }

    #[tokio::test]
    async fn awaiting_a_cancelled_token_returns_at_once() {
        let token = Cancel::default();
        let waiter = tokio::spawn({
            let token = token.clone();
            async move { token.cancelled().await }
        });
        tokio::task::yield_now().await;
        token.cancel();
        waiter.await.unwrap();
        token.cancelled().await;
    }
}

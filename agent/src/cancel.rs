//! Cancellation: one [`Cancel`] type for everything agentd stops early — an exec (its kill
//! ladder), a file verb's walk, a download, a kept process left past its grace, and agentd itself
//! at SIGTERM (the shutdown token that [`crate::server::Shared`] holds) — set once, polled by
//! blocking work, awaited by async work.
//!
//! The file verbs take their token as a parameter (`&Cancel`) and their loops ask
//! [`Cancel::is_cancelled`] at each step, so a cancelled or orphaned walk ends within one directory
//! entry or one read; threads a verb starts share it. At shutdown every session cancels what it
//! started.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// The `error` of a cancelled verb's or download's result.
pub const CANCELLED: &str = "cancelled";

/// A cancellation flag: set once, polled by the work, awaitable by async code.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<CancelInner>);

#[derive(Debug, Default)]
struct CancelInner {
    flag: AtomicBool,
    notify: Notify,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_on_another_thread_sees_the_cancel() {
        let token = Cancel::default();
        let clone = token.clone();
        assert!(!clone.is_cancelled());
        token.cancel();
        assert!(std::thread::spawn(move || clone.is_cancelled()).join().unwrap());
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

//! [`Swapper`]: a thread that exchanges two names in a directory in a tight loop, as a racing
//! command would.

/// A thread that exchanges two names in a directory (`renameat2(RENAME_EXCHANGE)`, atomic) in a tight
/// loop, as a racing command would: e.g. a real directory and a symlink leading out. Stops when
/// dropped.
pub struct Swapper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    swaps: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    /// Starts exchanging `a` and `b` in `dir`.
    pub fn start(dir: &std::path::Path, a: &'static str, b: &'static str) -> Self {
        use nix::fcntl::{OFlag, RenameFlags, open, renameat2};
        use std::sync::atomic::Ordering;
        let fd =
            open(dir, OFlag::O_PATH | OFlag::O_DIRECTORY, nix::sys::stat::Mode::empty()).expect("open dir");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swaps = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let thread = {
            let (stop, swaps) = (std::sync::Arc::clone(&stop), std::sync::Arc::clone(&swaps));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    renameat2(&fd, a, &fd, b, RenameFlags::RENAME_EXCHANGE).expect("exchange");
                    swaps.fetch_add(1, Ordering::Relaxed);
                    // Two cores: leave agentd and the client room to run between swaps.
                    std::thread::yield_now();
                }
            })
        };
        Self { stop, swaps, thread: Some(thread) }
    }

    /// Exchanges made so far.
    pub fn swaps(&self) -> u64 {
        self.swaps.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

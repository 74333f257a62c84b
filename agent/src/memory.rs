//! Giving memory back when the work is done. Busy moments (many execs at once, large transfers)
//! grow the allocator's per-thread arenas; glibc keeps the freed pages mapped, so an idle agentd
//! would go on holding the peak of its busiest moment. Once every request has ended, agentd asks
//! the allocator to return its free pages, so its resident size follows what it holds, not its
//! history. Only memory that is free is returned: a leak stays visible. What else a busy moment left
//! to give back (the idle cgroups kept for its commands) goes at the same time.

use std::sync::Arc;
use std::time::Duration;

use crate::registry::Global;

/// How often agentd looks whether work happened and has ended since it last gave memory back.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Runs for the daemon's life: after each busy period, once no request is in flight, returns the
/// allocator's free pages to the system, and runs `also` (both off the runtime: it walks every
/// arena).
pub async fn release_when_idle(global: Arc<Global>, also: impl Fn() + Send + Sync + 'static) {
    let also = Arc::new(also);
    let mut seen = global.taken();
    let mut ticks = tokio::time::interval(CHECK_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let taken = global.taken();
        if taken != seen && global.in_flight() == 0 {
            seen = taken;
            let also = Arc::clone(&also);
            let _ = tokio::task::spawn_blocking(move || {
                also();
                release();
            })
            .await;
        }
    }
}

/// Returns the free pages of every arena to the system.
fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator holds as free; it takes the arenas'
    // own locks and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

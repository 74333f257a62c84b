//! Giving memory back when the work is done. Busy moments (many execs at once, large transfers)
//! grow the allocator's per-thread arenas; glibc keeps the freed pages mapped, so an idle agentd
//! would go on holding the peak of its busiest moment. Once every request has ended, agentd asks
//! the allocator to return its free pages, so its resident size follows what it holds, not its
//! history. Only memory that is free is returned: a leak stays visible. What else a busy moment left
//! to give back (the idle cgroups kept for its commands) goes once no request came for a whole
//! interval.

use std::sync::Arc;
use std::time::Duration;

use crate::registry::Global;

/// How often agentd looks whether work happened and has ended since it last gave memory back.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Runs for the daemon's life: after each busy period, once no request is in flight, returns the
/// allocator's free pages to the system (off the runtime: it walks every arena). `also` (giving
/// back the idle cgroups) waits for a whole interval in which no request came: between a burst's
/// waves (a harness running 64 commands, reading, running 64 more) the cgroups are wanted again.
pub async fn release_when_idle(global: Arc<Global>, also: impl Fn() + Send + Sync + 'static) {
    let also = Arc::new(also);
    let mut seen = global.taken();
    // Requests taken when memory was last given back, and when `also` last ran.
    let (mut released, mut also_ran) = (seen, seen);
    let mut ticks = tokio::time::interval(CHECK_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let taken = global.taken();
        let quiet = taken == seen;
        seen = taken;
        if global.in_flight() != 0 {
            continue;
        }
        let release_now = taken != released;
        let also_now = quiet && taken != also_ran;
        if !release_now && !also_now {
            continue;
        }
        released = taken;
        if also_now {
            also_ran = taken;
        }
        let also = Arc::clone(&also);
        let _ = tokio::task::spawn_blocking(move || {
            if also_now {
                also();
            }
            if release_now {
                release();
            }
        })
        .await;
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

//! What agentd holds for its clients, and the budgets that bound it: the requests in flight (every
//! kind — exec, fs, upload, download — in one [`Requests`] per connection, counted against a
//! [`Global`] cap across connections) and the connections themselves ([`Connections`]).
//!
//! A request is registered before any work starts and removed just before its terminal reply, so
//! duplicate ids are refused across kinds and cancel and disconnect reach every kind. Its global
//! [`Slot`] is held by the work itself and released only when that work has really ended (a
//! cancelled verb still walking holds it), so the global cap bounds work, not bookkeeping.
//!
//! Each request reaches its work through a [`Handle`]: a [`Cancel`] token for everything but an
//! upload, whose chunks go through its queue.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agentd_protocol::ErrorCode;
use agentd_protocol::limits::{MAX_IN_FLIGHT, MAX_IN_FLIGHT_GLOBAL};
use tokio::sync::{Notify, mpsc};

use crate::cancel::Cancel;
use crate::transfer::UploadEvent;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Requests in flight across all connections.
#[derive(Debug, Default)]
pub struct Global {
    count: AtomicUsize,
    /// Slots ever taken: tells [`crate::memory`] whether work happened since it last looked.
    taken: AtomicU64,
}

impl Global {
    /// Takes a slot, or `None` when [`MAX_IN_FLIGHT_GLOBAL`] are taken.
    fn take(self: &Arc<Self>) -> Option<Slot> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_IN_FLIGHT_GLOBAL).then_some(n + 1)
            })
            .ok()
            .map(|_| {
                self.taken.fetch_add(1, Ordering::Relaxed);
                Slot(Arc::clone(self))
            })
    }

    /// Requests whose work has not ended yet, across connections.
    pub fn in_flight(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// How many requests were ever admitted.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

/// One request's share of the global cap; released when dropped (by the request's work, when it ends).
#[derive(Debug)]
pub struct Slot(Arc<Global>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How the connection reaches a request again (cancel, disconnect, upload chunks).
pub enum Handle {
    /// An exec, a download, a file verb: stopped through its token.
    Work(Cancel),
    /// A kept exec, or an attachment to a kept process: a `cancel` stops it, but the connection's
    /// end only detaches it (the process runs on).
    Kept {
        cancel: Cancel,
        detach: Cancel,
    },
    Upload(mpsc::Sender<UploadEvent>),
}

impl Handle {
    /// Stops the request; its work answers with its own terminal reply (or nothing, when the
    /// connection is gone).
    fn stop(&self) {
        match self {
            Handle::Work(cancel) | Handle::Kept { cancel, .. } => cancel.cancel(),
            Handle::Upload(events) => {
                // Queued behind chunks if need be; the connection's reader must not wait for the disk.
                let events = events.clone();
                tokio::spawn(async move { events.send(UploadEvent::Abort("cancelled".to_owned())).await });
            }
        }
    }
}

/// Why a request was not registered: the `error` reply it gets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("request id {0} is already in flight")]
    Duplicate(u64),
    #[error("at most {MAX_IN_FLIGHT} requests may be in flight per connection")]
    Connection,
    #[error("agentd has {MAX_IN_FLIGHT_GLOBAL} requests in flight across all connections; retry later")]
    Global,
}

impl Refusal {
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::Duplicate(_) => ErrorCode::DuplicateId,
            Refusal::Connection | Refusal::Global => ErrorCode::TooManyRequests,
        }
    }
}

/// One connection's requests in flight, by id.
pub struct Requests {
    global: Arc<Global>,
    map: Mutex<HashMap<u64, Handle>>,
    /// Tells the connection budget when the connection is idle (nothing in flight).
    activity: Option<Activity>,
}

impl Requests {
    pub fn new(global: Arc<Global>, activity: Option<Activity>) -> Self {
        Self { global, map: Mutex::default(), activity }
    }

    /// Records a new request of any kind. The returned slot must live as long as its work.
    pub fn register(&self, id: u64, handle: Handle) -> Result<Slot, Refusal> {
        let mut map = lock(&self.map);
        if map.contains_key(&id) {
            return Err(Refusal::Duplicate(id));
        }
        if map.len() >= MAX_IN_FLIGHT {
            return Err(Refusal::Connection);
        }
        let slot = self.global.take().ok_or(Refusal::Global)?;
        map.insert(id, handle);
        if map.len() == 1
            && let Some(activity) = &self.activity
        {
            activity.set_idle(false);
        }
        Ok(slot)
    }

    /// Removes a finished request before its terminal reply goes out, so the client may reuse the id.
    pub fn finish(&self, id: u64) {
        let mut map = lock(&self.map);
        if map.remove(&id).is_some()
            && map.is_empty()
            && let Some(activity) = &self.activity
        {
            activity.set_idle(true);
        }
    }

    /// Stops the request `id`; false when none is in flight.
    pub fn cancel(&self, id: u64) -> bool {
        let map = lock(&self.map);
        match map.get(&id) {
            Some(handle) => {
                handle.stop();
                true
            }
            None => false,
        }
    }

    /// The chunk queue of the upload `id`, if one is in flight.
    pub fn upload(&self, id: u64) -> Option<mpsc::Sender<UploadEvent>> {
        match lock(&self.map).get(&id) {
            Some(Handle::Upload(events)) => Some(events.clone()),
            _ => None,
        }
    }

    /// The connection is gone: stop everything it started but kept processes, which are only
    /// detached from it. Dropping an upload's sender ends it without a result, which removes its
    /// temporary file.
    pub fn close(&self) {
        let entries: Vec<Handle> = lock(&self.map).drain().map(|(_, handle)| handle).collect();
        for handle in entries {
            match handle {
                Handle::Upload(events) => drop(events),
                Handle::Kept { detach, .. } => detach.cancel(),
                other => other.stop(),
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.map).len()
    }
}

/// The connection budget: at most `max` connections open (authenticated or not), of which at most
/// `max_pending` still in their upgrade. A new connection over either budget evicts the oldest one
/// still in its upgrade (a client with the right token completes its upgrade in milliseconds, a
/// flood of half-sent upgrades cannot keep it out); with none in its upgrade, the session idle the
/// longest (nothing in flight: closing it loses nothing) is closed instead. Only when every session
/// has work in flight is the new connection refused.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    max_pending: usize,
    state: Mutex<ConnectionState>,
}

#[derive(Debug, Default)]
struct ConnectionState {
    next: u64,
    /// Connections still in their upgrade, oldest first, each with its eviction signal.
    pending: BTreeMap<u64, Arc<Notify>>,
    /// Authenticated connections.
    sessions: BTreeMap<u64, SessionState>,
    /// Orders the moments sessions became idle.
    tick: u64,
}

#[derive(Debug)]
struct SessionState {
    /// When it last had nothing in flight (a [`ConnectionState::tick`]); `None` while busy.
    idle_since: Option<u64>,
    evict: Arc<Notify>,
}

impl Connections {
    pub fn new(max: usize, max_pending: usize) -> Self {
        Self { max: max.max(1), max_pending: max_pending.clamp(1, max.max(1)), state: Mutex::default() }
    }

    /// Admits a new connection in its upgrade, evicting the oldest pending one if need be; `None`
    /// when every admitted connection is authenticated and the budget is full.
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut state = lock(&self.state);
        let full =
            state.pending.len() + state.sessions.len() >= self.max || state.pending.len() >= self.max_pending;
        if full {
            let evict = match state.pending.pop_first() {
                Some((_, evict)) => evict,
                None => {
                    let (&idlest, _) = state
                        .sessions
                        .iter()
                        .filter_map(|(seq, s)| Some((seq, s.idle_since?)))
                        .min_by_key(|(_, since)| *since)?;
                    state.sessions.remove(&idlest)?.evict
                }
            };
            // A stored permit: the evicted connection sees it even if it is not waiting yet.
            evict.notify_one();
        }
        let seq = state.next;
        state.next += 1;
        let evicted = Arc::new(Notify::new());
        state.pending.insert(seq, Arc::clone(&evicted));
        Some(Admitted { connections: Arc::clone(self), seq, evicted, authenticated: false })
    }

    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.pending.len(), state.sessions.len())
    }
}

/// Reports a session's idleness to the connection budget.
#[derive(Debug)]
pub struct Activity {
    connections: Arc<Connections>,
    seq: u64,
}

impl Activity {
    fn set_idle(&self, idle: bool) {
        let mut state = lock(&self.connections.state);
        state.tick += 1;
        let tick = state.tick;
        if let Some(session) = state.sessions.get_mut(&self.seq) {
            session.idle_since = idle.then_some(tick);
        }
    }
}

/// A connection's place in the budget; released when dropped.
#[derive(Debug)]
pub struct Admitted {
    connections: Arc<Connections>,
    seq: u64,
    evicted: Arc<Notify>,
    authenticated: bool,
}

impl Admitted {
    /// Resolves when a newer connection took this one's place: during its upgrade, or as the
    /// session idle the longest.
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }

    /// The upgrade succeeded: the connection becomes a session, idle until its first request.
    /// False when it was evicted meanwhile.
    pub fn authenticate(&mut self) -> bool {
        let mut state = lock(&self.connections.state);
        if state.pending.remove(&self.seq).is_none() {
            return false;
        }
        state.tick += 1;
        let session = SessionState { idle_since: Some(state.tick), evict: Arc::clone(&self.evicted) };
        state.sessions.insert(self.seq, session);
        self.authenticated = true;
        true
    }

    /// What the session's requests report their idleness through.
    pub fn activity(&self) -> Activity {
        Activity { connections: Arc::clone(&self.connections), seq: self.seq }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = lock(&self.connections.state);
        if self.authenticated {
            state.sessions.remove(&self.seq);
        } else {
            state.pending.remove(&self.seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_are_unique_across_kinds_and_slots_bound_the_work() {
        let global = Arc::new(Global::default());
        let requests = Requests::new(Arc::clone(&global), None);
        let fs = Cancel::default();
        let slot = requests.register(7, Handle::Work(fs.clone())).unwrap();
        assert_eq!(requests.register(7, Handle::Work(Cancel::default())).unwrap_err(), Refusal::Duplicate(7));
        assert_eq!(Refusal::Duplicate(7).code(), ErrorCode::DuplicateId);
        assert!(requests.cancel(7));
        assert!(fs.is_cancelled());
        requests.finish(7);
        assert!(!requests.cancel(7));
        // The work still runs: its slot counts until it is dropped.
        assert_eq!(global.in_flight(), 1);
        drop(slot);
        assert_eq!(global.in_flight(), 0);
    }

    #[tokio::test]
    async fn caps_per_connection_and_global() {
        let global = Arc::new(Global::default());
        let a = Requests::new(Arc::clone(&global), None);
        let mut slots = Vec::new();
        for id in 0..MAX_IN_FLIGHT as u64 {
            slots.push(a.register(id, Handle::Work(Cancel::default())).unwrap());
        }
        assert_eq!(a.register(u64::MAX, Handle::Work(Cancel::default())).unwrap_err(), Refusal::Connection);
        let mut others = Vec::new();
        while global.in_flight() < MAX_IN_FLIGHT_GLOBAL {
            let b = Requests::new(Arc::clone(&global), None);
            for id in 0..MAX_IN_FLIGHT as u64 {
                match b.register(id, Handle::Work(Cancel::default())) {
                    Ok(slot) => slots.push(slot),
                    Err(err) => assert_eq!(err, Refusal::Global),
                }
            }
            others.push(b);
        }
        let c = Requests::new(Arc::clone(&global), None);
        assert_eq!(c.register(1, Handle::Work(Cancel::default())).unwrap_err(), Refusal::Global);
        assert_eq!(c.len(), 0);
        slots.pop();
        assert!(c.register(1, Handle::Work(Cancel::default())).is_ok());
    }

    #[tokio::test]
    async fn close_cancels_everything() {
        let requests = Requests::new(Arc::default(), None);
        let tokens: Vec<Cancel> = (0..10).map(|_| Cancel::default()).collect();
        let _slots: Vec<Slot> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| requests.register(i as u64, Handle::Work(t.clone())).unwrap())
            .collect();
        requests.close();
        assert!(tokens.iter().all(Cancel::is_cancelled));
        assert_eq!(requests.len(), 0);
        // Awaiting a cancelled token returns at once.
        tokens[0].cancelled().await;
    }

    #[test]
    fn the_oldest_pending_connection_makes_room() {
        let connections = Arc::new(Connections::new(4, 2));
        let mut first = connections.admit().unwrap();
        let second = connections.admit().unwrap();
        // Over the pending budget: the oldest pending one is evicted, not the newcomer.
        let third = connections.admit().unwrap();
        assert!(!first.authenticate());
        drop(first);
        let mut second = second;
        assert!(second.authenticate());
        let mut third = third;
        assert!(third.authenticate());
        let mut fourth = connections.admit().unwrap();
        assert!(fourth.authenticate());
        let mut fifth = connections.admit().unwrap();
        assert!(fifth.authenticate());
        assert_eq!(connections.counts(), (0, 4));
        // Everyone authenticated and busy: the newcomer is refused.
        let global = Arc::new(Global::default());
        let busy: Vec<Requests> = [&second, &third, &fourth, &fifth]
            .iter()
            .map(|a| Requests::new(Arc::clone(&global), Some(a.activity())))
            .collect();
        let slots: Vec<Slot> =
            busy.iter().map(|r| r.register(1, Handle::Work(Cancel::default())).unwrap()).collect();
        assert!(connections.admit().is_none());
        // Idle sessions make room, the one idle the longest first.
        busy[2].finish(1);
        busy[0].finish(1);
        let sixth = connections.admit().unwrap();
        tokio_test_evicted(&fourth);
        assert_eq!(connections.counts(), (1, 3));
        drop((sixth, slots));
        drop(fifth);
        assert!(connections.admit().is_some());
    }

    /// The eviction signal of `admitted` was given (a stored permit).
    fn tokio_test_evicted(admitted: &Admitted) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let signalled = runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(100), admitted.evicted()).await.is_ok()
        });
        assert!(signalled, "the session idle the longest is evicted");
    }
}

//! The processes agentd holds for its clients, across connections: every exec while it runs, and a
//! kept exec's (`keep`) result and journal after it ended, for a bounded time and count.
//!
//! A process is named by an id unique to this agentd's life (its start's random prefix, then a
//! count): a client that reconnects to a restarted agentd finds none of its old ids, never another
//! process under one of them. A kept process counts its attachments (the exec's own connection,
//! every `attach` in flight); when the last goes, its `keep` grace starts, and past it the kill
//! ladder ends it (`abandoned`). What the bounds of `protocol/src/limits.rs` allow is decided here,
//! over plain counts, before anything starts ([`admit`]).
//!
//! Kept processes are counted per client and in all, on two budgets ([`Budget`]): a process kept
//! with a grace of at most `MAX_HEALING_GRACE_SECS` is an execute a host keeps only to heal a
//! dropped link (every `execute` over TCP), counted apart from the processes kept for longer, so
//! that neither kind takes the other's room and no client takes all of either. A client is one
//! connection: every client presents the same token and `hello` names none, so a connection is
//! the finest identity the wire has (a client that opens more connections gets more budgets, up
//! to the totals).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentd_protocol::limits::{
    MAX_ATTACHMENTS, MAX_HEALING_GRACE_SECS, MAX_HEALING_PROCESSES, MAX_HEALING_PROCESSES_TOTAL,
    MAX_JOURNAL_BYTES_TOTAL, MAX_KEPT_PROCESSES, MAX_KEPT_PROCESSES_TOTAL, MAX_RETAINED_RESULTS,
    MAX_STDIN_WAITING, PROCESSES_PAGE, RESULT_RETENTION_SECS,
};
use agentd_protocol::{ErrorCode, ExecResult, ProcessInfo, ProcessState, StdinMode, TerminalSize};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::watch;

use crate::cancel::Cancel;
use crate::exec::capture::{Journal, Progress};
use crate::exec::tree::Target;
use crate::exec::{Spawned, resize_terminal};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a process verb could not be done: the `error` reply it gets.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProcessError {
    #[error("no process `{0}`: it never existed here, was forgotten, or its result expired")]
    Unknown(String),
    #[error("process `{0}` was not started with `keep`: only a kept process can be attached")]
    NotKept(String),
    #[error("process `{0}` is still running: `kill` it or `wait` for it first")]
    Running(String),
    #[error("process `{0}` has no stdin pipe or terminal (start it with `stdin: \"pipe\"` or `pty`)")]
    NoInput(String),
    #[error("the stdin of process `{0}` is closed")]
    InputClosed(String),
    #[error("process `{0}` closed its stdin: {1}")]
    InputBroken(String, String),
    #[error("process `{0}` has no terminal (start it with `pty`)")]
    NoTerminal(String),
    #[error("process `{0}` has ended")]
    Ended(String),
    #[error("process `{0}` is starting: attach again in a moment")]
    Starting(String),
    #[error("process `{0}` exists already: nothing was started; attach to it")]
    Exists(String),
    #[error(
        "{MAX_KEPT_PROCESSES} kept processes of this client (its connection) are running: one must end \
         before it keeps another"
    )]
    TooManyKept,
    #[error(
        "{MAX_KEPT_PROCESSES_TOTAL} kept processes are running in all: one must end before another is kept"
    )]
    TooManyKeptInAll,
    #[error(
        "{MAX_HEALING_PROCESSES} executes kept to heal (a `keep` of at most {MAX_HEALING_GRACE_SECS} s) of \
         this client (its connection) are running: one must end before it starts another"
    )]
    TooManyHealing,
    #[error(
        "{MAX_HEALING_PROCESSES_TOTAL} executes kept to heal (a `keep` of at most {MAX_HEALING_GRACE_SECS} s) \
         are running in all: one must end before another starts"
    )]
    TooManyHealingInAll,
    #[error(
        "the journals of kept processes would take more than {MAX_JOURNAL_BYTES_TOTAL} bytes: `forget` \
         finished ones, or ask for a smaller `max_capture_bytes`"
    )]
    JournalsFull,
    #[error("{MAX_ATTACHMENTS} clients are attached to process `{0}` already")]
    TooManyAttached(String),
    #[error("{MAX_STDIN_WAITING} writes are already waiting for the stdin of process `{0}`")]
    TooManyWrites(String),
    #[error("the terminal of process `{0}` cannot be resized: {1}")]
    Resize(String, String),
}

impl ProcessError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Unknown(_) => ErrorCode::UnknownProcess,
            Self::Exists(_) => ErrorCode::ProcessExists,
            Self::TooManyKept
            | Self::TooManyKeptInAll
            | Self::TooManyHealing
            | Self::TooManyHealingInAll
            | Self::JournalsFull
            | Self::TooManyAttached(_) => ErrorCode::LimitReached,
            Self::TooManyWrites(_) => ErrorCode::TooManyRequests,
            Self::Resize(..) => ErrorCode::Internal,
            _ => ErrorCode::ProcessState,
        }
    }
}

/// What a new process asks for.
pub struct Wanted {
    pub command: String,
    /// Kept, with its grace (`Some(None)`: no limit).
    pub keep: Option<Option<Duration>>,
    pub pty: Option<TerminalSize>,
    /// Journal bytes it may fill (its capture cap), reserved while it runs.
    pub journal_cap: u64,
    /// The client's name for it (a kept one's); `None`: agentd names it.
    pub name: Option<String>,
    /// The client that starts it ([`Processes::client`]).
    pub client: u64,
}

/// Which budget a process is counted on while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Not kept: it ends with its connection, bounded as every request is (in flight).
    Unkept,
    /// Kept for at most [`MAX_HEALING_GRACE_SECS`] with no client attached: an execute kept only
    /// so that a dropped link can attach again. Its capture is a plain exec's (`MAX_INLINE_CAPTURE`)
    /// and it reserves nothing of the journals' budget.
    Healing,
    /// Kept for longer, or with no grace limit.
    Kept,
}

impl Budget {
    /// The budget of a process with this `keep` (`Some(None)`: kept with no grace limit).
    pub fn of(keep: Option<Option<Duration>>) -> Self {
        match keep {
            None => Self::Unkept,
            Some(Some(grace)) if grace.as_secs_f64() <= MAX_HEALING_GRACE_SECS => Self::Healing,
            Some(_) => Self::Kept,
        }
    }
}

/// Running kept processes, by budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub kept: usize,
    pub healing: usize,
}

impl Counts {
    fn of(&mut self, budget: Budget) -> Option<&mut usize> {
        match budget {
            Budget::Unkept => None,
            Budget::Healing => Some(&mut self.healing),
            Budget::Kept => Some(&mut self.kept),
        }
    }
}

/// Whether one more process on `budget` may start, with `own` running of its client's and `all`
/// of every client's. Pure.
pub fn admit(budget: Budget, own: Counts, all: Counts) -> Result<(), ProcessError> {
    match budget {
        Budget::Unkept => Ok(()),
        Budget::Kept if own.kept >= MAX_KEPT_PROCESSES => Err(ProcessError::TooManyKept),
        Budget::Kept if all.kept >= MAX_KEPT_PROCESSES_TOTAL => Err(ProcessError::TooManyKeptInAll),
        Budget::Kept => Ok(()),
        Budget::Healing if own.healing >= MAX_HEALING_PROCESSES => Err(ProcessError::TooManyHealing),
        Budget::Healing if all.healing >= MAX_HEALING_PROCESSES_TOTAL => {
            Err(ProcessError::TooManyHealingInAll)
        }
        Budget::Healing => Ok(()),
    }
}

/// Every process of this agentd.
pub struct Processes {
    /// Random, per agentd start: the prefix of every id.
    instance: String,
    next: AtomicU64,
    /// The order of the next process's start (from 1): the `from` of a `processes` page.
    order: AtomicU64,
    /// The next client's number ([`Processes::client`]).
    clients: AtomicU64,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_id: HashMap<String, Arc<Process>>,
    /// Kept processes running now, in all.
    running: Counts,
    /// Kept processes running now, by client (clients with none are not listed).
    by_client: HashMap<u64, Counts>,
    /// Finished kept processes with when they ended, oldest end first.
    retained: VecDeque<(String, Instant)>,
    /// Journal bytes: a running kept process's cap, a retained one's stored bytes.
    journal_bytes: u64,
}

impl Default for Processes {
    fn default() -> Self {
        Self::new()
    }
}

impl Processes {
    pub fn new() -> Self {
        let mut random = [0u8; 4];
        // Uniqueness across restarts, not secrecy: the time is a fallback as good.
        if getrandom(&mut random).is_err() {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
            random = (nanos ^ std::process::id()).to_le_bytes();
        }
        let instance = random.iter().map(|b| format!("{b:02x}")).collect();
        Self {
            instance,
            next: AtomicU64::new(1),
            order: AtomicU64::new(1),
            clients: AtomicU64::new(1),
            table: Mutex::default(),
        }
    }

    /// Admits a new process: a kept one within the bounds (the oldest retained results make room
    /// for its journal first), any other always.
    pub fn start(self: &Arc<Self>, wanted: Wanted) -> Result<Arc<Process>, ProcessError> {
        let mut table = self.table();
        // A name is held while the process is (running, or its result retained): the same
        // request sent again, after a connection dropped before `exec_started`, starts nothing.
        if let Some(name) = &wanted.name
            && table.by_id.contains_key(name)
        {
            return Err(ProcessError::Exists(name.clone()));
        }
        let budget = Budget::of(wanted.keep);
        let own = table.by_client.get(&wanted.client).copied().unwrap_or_default();
        admit(budget, own, table.running)?;
        if budget == Budget::Kept {
            let gone = make_room(&mut table, wanted.journal_cap);
            if table.journal_bytes.saturating_add(wanted.journal_cap) > MAX_JOURNAL_BYTES_TOTAL {
                drop(table);
                remove_journals(gone);
                return Err(ProcessError::JournalsFull);
            }
            table.journal_bytes += wanted.journal_cap;
            remove_journals(gone);
        }
        table.count(budget, wanted.client, true);
        let id = match wanted.name {
            Some(name) => name,
            // A client's name may look like one of these: the next count then.
            None => loop {
                let id = format!("{}-{}", self.instance, self.next.fetch_add(1, Ordering::Relaxed));
                if !table.by_id.contains_key(&id) {
                    break id;
                }
            },
        };
        let process = Arc::new(Process {
            id: id.clone(),
            order: self.order.fetch_add(1, Ordering::Relaxed),
            command: wanted.command,
            started: SystemTime::now(),
            keep: wanted.keep,
            budget,
            client: wanted.client,
            pty: wanted.pty,
            journal_cap: wanted.journal_cap,
            cancel: Cancel::default(),
            abandoned: AtomicBool::new(false),
            ended: Cancel::default(),
            state: Mutex::default(),
            processes: Arc::downgrade(self),
        });
        table.by_id.insert(id, Arc::clone(&process));
        Ok(process)
    }

    /// The table, its retained results past [`RESULT_RETENTION_SECS`] taken out first (so they go
    /// at the next request that looks at the table, with no timer per process).
    fn table(&self) -> MutexGuard<'_, Table> {
        let mut table = lock(&self.table);
        let retention = Duration::from_secs(RESULT_RETENTION_SECS);
        let mut gone = Vec::new();
        while let Some((oldest, ended)) = table.retained.front().cloned() {
            if ended.elapsed() < retention {
                break;
            }
            gone.extend(forget_in(&mut table, &oldest));
        }
        if !gone.is_empty() {
            // Unlinking is quick; a journal's bytes go with its last reader.
            remove_journals(gone);
        }
        table
    }

    /// A new client's number: what its processes are counted under.
    pub fn client(&self) -> u64 {
        self.clients.fetch_add(1, Ordering::Relaxed)
    }

    pub fn get(&self, id: &str) -> Result<Arc<Process>, ProcessError> {
        self.table().by_id.get(id).cloned().ok_or_else(|| ProcessError::Unknown(id.to_owned()))
    }

    /// A page of the processes that started at or after `from` (their order of start), oldest
    /// first, each command cut to what a listing shows; and where the next page starts, if one
    /// does. A page of the longest entries fits one reply (`limits::PROCESSES_PAGE`).
    pub fn list(&self, from: u64) -> (Vec<ProcessInfo>, Option<u64>) {
        let mut page: Vec<Arc<Process>> =
            self.table().by_id.values().filter(|p| p.order >= from).cloned().collect();
        page.sort_by_key(|p| p.order);
        let next = page.get(PROCESSES_PAGE).map(|p| p.order);
        page.truncate(PROCESSES_PAGE);
        let infos = page
            .iter()
            .map(|p| {
                let mut info = p.info();
                info.cut_command();
                info
            })
            .collect();
        (infos, next)
    }

    /// Drops a finished process's result and journal.
    pub fn forget(&self, id: &str) -> Result<(), ProcessError> {
        let process = self.get(id)?;
        if !process.ended.is_cancelled() {
            return Err(ProcessError::Running(id.to_owned()));
        }
        let gone = {
            let mut table = lock(&self.table);
            forget_in(&mut table, id)
        };
        remove_journals(gone);
        Ok(())
    }

    /// `process` did not start or lost its result: it leaves the table, its reservations with it.
    fn failed(&self, process: &Arc<Process>) {
        let mut table = lock(&self.table);
        if table.by_id.remove(&process.id).is_some() {
            table.count(process.budget, process.client, false);
            if process.budget == Budget::Kept {
                table.journal_bytes = table.journal_bytes.saturating_sub(process.journal_cap);
            }
        }
    }

    /// `process` ended with `result`: an unkept one leaves the table, a kept one is retained.
    fn ended(&self, process: &Arc<Process>, stored: u64) {
        let gone = {
            let mut table = lock(&self.table);
            if process.keep.is_none() {
                table.by_id.remove(&process.id);
                return;
            }
            table.count(process.budget, process.client, false);
            if process.budget == Budget::Kept {
                table.journal_bytes = table.journal_bytes.saturating_sub(process.journal_cap);
            }
            // A retained result's journal counts what it stored, whichever its budget was.
            table.journal_bytes = table.journal_bytes.saturating_add(stored);
            table.retained.push_back((process.id.clone(), Instant::now()));
            let mut gone = Vec::new();
            while table.retained.len() > MAX_RETAINED_RESULTS {
                let Some((oldest, _)) = table.retained.pop_front() else { break };
                gone.extend(forget_in(&mut table, &oldest));
            }
            gone
        };
        remove_journals(gone);
    }
}

impl Table {
    /// One more (`start`) or one fewer process running on `budget` for `client`.
    fn count(&mut self, budget: Budget, client: u64, start: bool) {
        let step = |count: &mut usize| {
            *count = if start { count.saturating_add(1) } else { count.saturating_sub(1) };
        };
        if let Some(count) = self.running.of(budget) {
            step(count);
        }
        let own = self.by_client.entry(client).or_default();
        if let Some(count) = own.of(budget) {
            step(count);
        }
        if *own == Counts::default() {
            self.by_client.remove(&client);
        }
    }
}

/// Makes room for `wanted` journal bytes by taking out the oldest retained results, as far as
/// needed and possible; returns their journals, to be removed off the lock.
fn make_room(table: &mut Table, wanted: u64) -> Vec<Arc<Journal>> {
    let mut gone = Vec::new();
    while table.journal_bytes.saturating_add(wanted) > MAX_JOURNAL_BYTES_TOTAL {
        let Some((oldest, _)) = table.retained.pop_front() else { break };
        gone.extend(forget_in(table, &oldest));
    }
    gone
}

/// Takes the finished process `id` out of the table; its journal comes back to be removed.
fn forget_in(table: &mut Table, id: &str) -> Option<Arc<Journal>> {
    let process = table.by_id.remove(id)?;
    table.retained.retain(|(retained, _)| retained != id);
    let state = lock(&process.state);
    let stored = state.journal.as_ref().map_or(0, |journal| journal.progress().stored);
    table.journal_bytes = table.journal_bytes.saturating_sub(stored);
    state.journal.clone()
}

fn remove_journals(journals: impl IntoIterator<Item = Arc<Journal>>) {
    for journal in journals {
        journal.remove();
    }
}

fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// One exec, named across connections.
pub struct Process {
    pub id: String,
    /// Its place in the order of starts.
    order: u64,
    pub command: String,
    started: SystemTime,
    pub keep: Option<Option<Duration>>,
    budget: Budget,
    client: u64,
    pub pty: Option<TerminalSize>,
    journal_cap: u64,
    /// Ends the exec with the kill ladder (`cancel`, `kill`, a grace that ran out).
    pub cancel: Cancel,
    /// The grace ran out: the ladder's end is `abandoned`, not `cancelled`.
    abandoned: AtomicBool,
    /// Set once the process's result is in.
    ended: Cancel,
    state: Mutex<State>,
    processes: std::sync::Weak<Processes>,
}

#[derive(Default)]
struct State {
    /// The shell's pid, once spawned.
    pid: Option<Pid>,
    target: Option<Target>,
    input: Option<Arc<Input>>,
    /// It had an input once (so a missing one was closed).
    had_input: bool,
    terminal: Option<Arc<OwnedFd>>,
    journal: Option<Arc<Journal>>,
    progress: Option<watch::Receiver<Progress>>,
    attached: u32,
    /// Bumped at every attach, so a grace timer started before it does nothing.
    generation: u64,
    /// The result (its output fields empty), once ended.
    result: Option<ExecResult>,
    ended_at: Option<SystemTime>,
    /// Members left after the shell ended, counted then.
    stray: Option<u32>,
    /// It did not start, or its result was lost: ended with no result.
    failed: bool,
}

impl Process {
    /// The exec started: what it runs as and how it is reached.
    pub fn spawned(&self, spawned: Spawned) {
        let mut state = lock(&self.state);
        state.pid = Some(spawned.pid);
        state.target = Some(spawned.target);
        state.progress = Some(spawned.progress);
        state.journal = spawned.journal.map(Arc::new);
        if let Some(fd) = spawned.input {
            let terminal = spawned.terminal.then(|| fd.try_clone().ok().map(Arc::new)).flatten();
            state.input = Input::new(fd).ok().map(Arc::new);
            state.had_input = true;
            state.terminal = terminal;
        }
    }

    /// The exec ended with `result` (its own reply's): kept as the process's result, for `wait`,
    /// `processes` and every attacher. Adjusts `result` for a grace that ran out.
    pub fn ended(self: &Arc<Self>, result: &mut ExecResult) {
        result.process = self.id.clone();
        if self.abandoned.load(Ordering::SeqCst) {
            result.ending.abandoned = true;
            result.ending.cancelled = false;
        }
        let stored = {
            let mut state = lock(&self.state);
            let mut kept = result.clone();
            kept.output = None;
            kept.output_base64 = None;
            kept.id = 0;
            state.stray = kept.stray_processes;
            state.result = Some(kept);
            state.ended_at = Some(SystemTime::now());
            // The pipe goes with the process: a write waiting on it ends.
            state.input = None;
            state.terminal = None;
            state.journal.as_ref().map_or(0, |journal| journal.progress().stored)
        };
        self.ended.cancel();
        if let Some(processes) = self.processes.upgrade() {
            processes.ended(self, stored);
        }
    }

    /// The exec did not start, or its result was lost (its reply says which): it leaves the table
    /// with no result, kept or not. A result is never made up for it.
    pub fn failed(self: &Arc<Self>) {
        {
            let mut state = lock(&self.state);
            state.failed = true;
            state.ended_at = Some(SystemTime::now());
            state.input = None;
            state.terminal = None;
        }
        self.ended.cancel();
        if let Some(processes) = self.processes.upgrade() {
            processes.failed(self);
        }
    }

    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves once the process's result is in.
    pub async fn wait(&self) {
        self.ended.cancelled().await;
    }

    /// The result (output fields empty), once ended.
    pub fn result(&self) -> Option<ExecResult> {
        lock(&self.state).result.clone()
    }

    /// The journal to attach to: `Starting` before the spawn, `Ended` for one that never started.
    pub fn attachable(&self) -> Result<Arc<Journal>, ProcessError> {
        let state = lock(&self.state);
        match (&state.journal, &state.result) {
            (Some(journal), _) if !state.failed => Ok(Arc::clone(journal)),
            (None, None) if !state.failed => Err(ProcessError::Starting(self.id.clone())),
            _ => Err(ProcessError::Ended(self.id.clone())),
        }
    }

    pub fn target(&self) -> Option<Target> {
        lock(&self.state).target.clone()
    }

    /// A new client follows the process (an `attach`, or the exec's own connection): it holds the
    /// returned guard while it does. Only kept processes take attachers beside their own exec.
    pub fn attach(self: &Arc<Self>, own: bool) -> Result<Attachment, ProcessError> {
        if !own && self.keep.is_none() {
            return Err(ProcessError::NotKept(self.id.clone()));
        }
        let mut state = lock(&self.state);
        if state.attached as usize >= MAX_ATTACHMENTS {
            return Err(ProcessError::TooManyAttached(self.id.clone()));
        }
        state.attached += 1;
        state.generation += 1;
        Ok(Attachment(Arc::clone(self)))
    }

    /// The input pipe (or terminal), while it is open.
    pub fn input(&self) -> Result<Arc<Input>, ProcessError> {
        let state = lock(&self.state);
        match &state.input {
            Some(input) => Ok(Arc::clone(input)),
            None if state.ended_at.is_some() => Err(ProcessError::Ended(self.id.clone())),
            None if state.had_input => Err(ProcessError::InputClosed(self.id.clone())),
            None => Err(ProcessError::NoInput(self.id.clone())),
        }
    }

    /// Closes the stdin pipe once the writes already waiting are done (a terminal gets its EOF
    /// character instead: closing it would hang it up).
    pub async fn close_input(&self) -> Result<(), ProcessError> {
        let input = self.input()?;
        if self.pty.is_some() {
            return input.write(&self.id, &[4]).await.map(drop);
        }
        input.close().await;
        let mut state = lock(&self.state);
        if state.input.as_ref().is_some_and(|current| Arc::ptr_eq(current, &input)) {
            state.input = None;
        }
        Ok(())
    }

    pub fn resize(&self, size: TerminalSize) -> Result<(), ProcessError> {
        let state = lock(&self.state);
        let Some(terminal) = &state.terminal else {
            if self.pty.is_some() {
                return Err(ProcessError::Ended(self.id.clone()));
            }
            return Err(ProcessError::NoTerminal(self.id.clone()));
        };
        resize_terminal(terminal.as_fd(), size)
            .map_err(|e| ProcessError::Resize(self.id.clone(), e.to_string()))
    }

    /// The process as `processes` and `wait` tell it.
    pub fn info(&self) -> ProcessInfo {
        let state = lock(&self.state);
        let progress = state.progress.as_ref().map(|p| *p.borrow()).unwrap_or_default();
        let mut info = ProcessInfo {
            process: self.id.clone(),
            command: self.command.clone(),
            state: ProcessState::Running,
            pid: state.pid.map_or(0, crate::pid::to_wire),
            started: unix_seconds(self.started),
            total_bytes: progress.total,
            stored_bytes: progress.stored,
            kept: self.keep.is_some(),
            keep: self.keep.map(|grace| grace.map_or(0.0, |g| g.as_secs_f64())),
            attached: state.attached,
            stdin: state.input.as_ref().map(|_| StdinMode::Pipe),
            pty: self.pty,
            ..ProcessInfo::default()
        };
        if state.failed {
            info.state = ProcessState::Exited;
            info.ended = state.ended_at.map(unix_seconds);
        }
        if let Some(result) = &state.result {
            info.state = ProcessState::Exited;
            info.ended = state.ended_at.map(unix_seconds);
            info.exit_code = Some(result.exit_code);
            info.ending = result.ending.clone();
            info.total_bytes = result.total_bytes;
            info.stray_processes = state.stray;
        }
        info
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// A client following a process; when the last one of a kept process goes, its grace starts.
pub struct Attachment(Arc<Process>);

impl Drop for Attachment {
    fn drop(&mut self) {
        let process = &self.0;
        let generation = {
            let mut state = lock(&process.state);
            state.attached = state.attached.saturating_sub(1);
            if state.attached > 0 || state.result.is_some() {
                return;
            }
            state.generation
        };
        let Some(Some(grace)) = process.keep else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let process = Arc::clone(process);
        runtime.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = process.wait() => return,
            }
            let state = lock(&process.state);
            if state.attached == 0 && state.generation == generation && state.result.is_none() {
                drop(state);
                tracing::info!(process = %process.id, "no client attached for its keep grace: ended");
                process.abandoned.store(true, Ordering::SeqCst);
                process.cancel.cancel();
            }
        });
    }
}

/// A process's stdin: a pipe's write end or a terminal's master side, written in order, one write
/// at a time; each write is answered once the pipe took every byte.
pub struct Input {
    pipe: tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>,
    waiting: std::sync::atomic::AtomicUsize,
}

impl Input {
    fn new(fd: OwnedFd) -> io::Result<Self> {
        // A pipe or a terminal, non-blocking already.
        let pipe = tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(fd)?;
        Ok(Self { pipe: tokio::sync::Mutex::new(Some(pipe)), waiting: Default::default() })
    }

    /// Writes all of `data`, after the writes already waiting; at most [`MAX_STDIN_WAITING`] wait.
    pub async fn write(&self, process: &str, data: &[u8]) -> Result<u64, ProcessError> {
        let waiting = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _count = Waiting(&self.waiting);
        if waiting >= MAX_STDIN_WAITING {
            return Err(ProcessError::TooManyWrites(process.to_owned()));
        }
        let mut pipe = self.pipe.lock().await;
        let Some(sender) = pipe.as_mut() else {
            return Err(ProcessError::InputClosed(process.to_owned()));
        };
        match sender.write_all(data).await {
            Ok(()) => Ok(data.len() as u64),
            Err(err) => {
                // The reader is gone: nothing more can be written.
                *pipe = None;
                Err(ProcessError::InputBroken(process.to_owned(), err.to_string()))
            }
        }
    }

    /// Closes the pipe after the writes already waiting.
    async fn close(&self) {
        self.pipe.lock().await.take();
    }
}

struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use agentd_protocol::Ending;
    use agentd_protocol::limits::MAX_LISTED_COMMAND_BYTES;

    use super::*;

    fn wanted(keep: bool, cap: u64) -> Wanted {
        Wanted {
            command: "true".into(),
            keep: keep.then_some(None),
            pty: None,
            journal_cap: cap,
            name: None,
            client: 1,
        }
    }

    #[tokio::test]
    async fn ids_are_unique_and_unkept_processes_leave_when_they_end() {
        let processes = Arc::new(Processes::new());
        let a = processes.start(wanted(false, 1)).unwrap();
        let b = processes.start(wanted(true, 1)).unwrap();
        assert_ne!(a.id, b.id);
        assert!(a.id.starts_with(&processes.instance));
        assert_eq!(processes.list(0).0.len(), 2);
        a.ended(&mut ExecResult::default());
        b.ended(&mut ExecResult::default());
        assert_eq!(processes.get(&a.id).err(), Some(ProcessError::Unknown(a.id.clone())));
        assert_eq!(processes.get(&b.id).map(|p| p.info().state).ok(), Some(ProcessState::Exited));
        assert!(matches!(a.attach(false), Err(ProcessError::NotKept(_))));
        processes.forget(&b.id).unwrap();
        assert_eq!(processes.list(0).0.len(), 0);
    }

    #[tokio::test]
    async fn a_name_is_held_while_its_process_is() {
        let processes = Arc::new(Processes::new());
        let named = |name: &str| Wanted { name: Some(name.to_owned()), ..wanted(true, 1) };
        let first = processes.start(named("job")).unwrap();
        assert_eq!(first.id, "job");
        // Refused before anything is reserved: the kept bound still admits the rest.
        for _ in 0..3 {
            assert_eq!(processes.start(named("job")).err(), Some(ProcessError::Exists("job".to_owned())));
        }
        let rest: Vec<_> =
            (1..MAX_KEPT_PROCESSES).map(|_| processes.start(wanted(true, 1)).unwrap()).collect();
        // Held while its result is retained, free once forgotten.
        first.ended(&mut ExecResult::default());
        assert!(matches!(processes.start(named("job")), Err(ProcessError::Exists(_))));
        processes.forget("job").unwrap();
        rest[0].ended(&mut ExecResult::default());
        assert_eq!(processes.start(named("job")).map(|p| p.id.clone()).ok().as_deref(), Some("job"));
        // A name shaped like agentd's own ids: agentd's next count skips it.
        let next = format!("{}-{}", processes.instance, processes.next.load(Ordering::Relaxed));
        let taken = processes.start(named(&next)).unwrap();
        assert_ne!(processes.start(wanted(false, 1)).unwrap().id, taken.id);
        assert_eq!(ProcessError::Exists("job".to_owned()).code(), ErrorCode::ProcessExists);
    }

    #[tokio::test]
    async fn kept_processes_and_journals_are_bounded() {
        let processes = Arc::new(Processes::new());
        let running: Vec<_> =
            (0..MAX_KEPT_PROCESSES).map(|_| processes.start(wanted(true, 1)).unwrap()).collect();
        assert_eq!(processes.start(wanted(true, 1)).err(), Some(ProcessError::TooManyKept));
        // Unkept execs are not bounded here.
        assert!(processes.start(wanted(false, 1)).is_ok());
        assert_eq!(processes.forget(&running[0].id), Err(ProcessError::Running(running[0].id.clone())));
        for process in &running {
            process.ended(&mut ExecResult::default());
        }
        // Over the journal budget: refused, nothing else changed.
        assert_eq!(
            processes.start(wanted(true, MAX_JOURNAL_BYTES_TOTAL + 1)).err(),
            Some(ProcessError::JournalsFull)
        );
        let big = processes.start(wanted(true, MAX_JOURNAL_BYTES_TOTAL)).unwrap();
        assert_eq!(processes.start(wanted(true, 1)).err(), Some(ProcessError::JournalsFull));
        big.ended(&mut ExecResult::default());
        assert!(processes.start(wanted(true, 1)).is_ok(), "a finished one stored nothing");
    }

    #[test]
    fn budgets_are_per_client_and_in_all_and_healing_executes_have_their_own() {
        let grace = |secs: f64| Some(Some(Duration::from_secs_f64(secs)));
        assert_eq!(Budget::of(None), Budget::Unkept);
        assert_eq!(Budget::of(grace(MAX_HEALING_GRACE_SECS)), Budget::Healing);
        assert_eq!(Budget::of(grace(0.2)), Budget::Healing);
        assert_eq!(Budget::of(grace(MAX_HEALING_GRACE_SECS + 0.001)), Budget::Kept);
        assert_eq!(Budget::of(Some(None)), Budget::Kept, "no grace limit");
        let counts = |kept, healing| Counts { kept, healing };
        let none = Counts::default();
        // A client with its whole kept budget: it is refused, another client is not.
        let full = counts(MAX_KEPT_PROCESSES, 0);
        assert_eq!(admit(Budget::Kept, full, full), Err(ProcessError::TooManyKept));
        assert_eq!(admit(Budget::Kept, none, full), Ok(()));
        assert_eq!(admit(Budget::Healing, full, full), Ok(()), "its executes still heal");
        assert_eq!(admit(Budget::Unkept, full, full), Ok(()));
        // The totals.
        let all_kept = counts(MAX_KEPT_PROCESSES_TOTAL, 0);
        assert_eq!(admit(Budget::Kept, none, all_kept), Err(ProcessError::TooManyKeptInAll));
        assert_eq!(admit(Budget::Healing, none, all_kept), Ok(()));
        let healing = counts(0, MAX_HEALING_PROCESSES);
        assert_eq!(admit(Budget::Healing, healing, healing), Err(ProcessError::TooManyHealing));
        assert_eq!(admit(Budget::Healing, none, healing), Ok(()));
        assert_eq!(admit(Budget::Kept, healing, healing), Ok(()));
        let all_healing = counts(0, MAX_HEALING_PROCESSES_TOTAL);
        assert_eq!(admit(Budget::Healing, none, all_healing), Err(ProcessError::TooManyHealingInAll));
    }

    #[tokio::test]
    async fn one_client_filling_its_budget_leaves_room_for_others() {
        let processes = Arc::new(Processes::new());
        let (greedy, other) = (processes.client(), processes.client());
        let kept = |client| Wanted { client, ..wanted(true, 1) };
        let healing =
            |client| Wanted { client, keep: Some(Some(Duration::from_secs(30))), ..wanted(true, 1) };
        let running: Vec<_> =
            (0..MAX_KEPT_PROCESSES).map(|_| processes.start(kept(greedy)).unwrap()).collect();
        assert_eq!(processes.start(kept(greedy)).err(), Some(ProcessError::TooManyKept));
        assert!(processes.start(healing(greedy)).is_ok());
        assert!(processes.start(kept(other)).is_ok());
        assert!(processes.start(healing(other)).is_ok());
        // One ends: the greedy client may keep one more.
        running[0].ended(&mut ExecResult::default());
        assert!(processes.start(kept(greedy)).is_ok());
        assert_eq!(processes.start(kept(greedy)).err(), Some(ProcessError::TooManyKept));
    }

    #[tokio::test]
    async fn listings_come_in_pages_with_long_commands_cut() {
        let processes = Arc::new(Processes::new());
        let long = "x".repeat(MAX_LISTED_COMMAND_BYTES * 2);
        let all: Vec<_> = (0..PROCESSES_PAGE + 2)
            .map(|_| processes.start(Wanted { command: long.clone(), ..wanted(false, 1) }).unwrap())
            .collect();
        let (first, next) = processes.list(0);
        assert_eq!(first.len(), PROCESSES_PAGE);
        assert_eq!(first[0].process, all[0].id);
        assert!(first.iter().all(|p| p.command_truncated && p.command.len() == MAX_LISTED_COMMAND_BYTES));
        // A process that ends between pages moves nothing: the next page starts where it said.
        all[1].ended(&mut ExecResult::default());
        let (second, last) = processes.list(next.unwrap());
        assert_eq!(
            second.iter().map(|p| p.process.clone()).collect::<Vec<_>>(),
            [all[PROCESSES_PAGE].id.clone(), all[PROCESSES_PAGE + 1].id.clone()]
        );
        assert_eq!(last, None);
        assert_eq!(processes.get(&all[0].id).unwrap().command, long, "only the listing is cut");
    }

    #[tokio::test]
    async fn a_kept_process_that_never_started_leaves_no_made_up_result() {
        let processes = Arc::new(Processes::new());
        let process = processes.start(wanted(true, MAX_JOURNAL_BYTES_TOTAL)).unwrap();
        process.failed();
        assert!(process.is_ended() && process.result().is_none());
        assert_eq!(process.info().exit_code, None);
        assert!(processes.get(&process.id).is_err(), "not retained");
        assert_eq!(process.attachable().err(), Some(ProcessError::Ended(process.id.clone())));
        // Its journal reservation went with it.
        assert!(processes.start(wanted(true, MAX_JOURNAL_BYTES_TOTAL)).is_ok());
    }

    #[tokio::test]
    async fn retained_results_are_bounded_in_count_oldest_first() {
        let processes = Arc::new(Processes::new());
        let all: Vec<_> = (0..=MAX_RETAINED_RESULTS)
            .map(|_| {
                let process = processes.start(wanted(true, 1)).unwrap();
                process.ended(&mut ExecResult::default());
                process
            })
            .collect();
        assert!(processes.get(&all[0].id).is_err(), "the oldest went");
        assert!(processes.get(&all[1].id).is_ok());
        assert_eq!(processes.list(0).0.len(), MAX_RETAINED_RESULTS);
    }

    #[tokio::test]
    async fn a_kept_process_left_alone_past_its_grace_is_ended() {
        let processes = Arc::new(Processes::new());
        let grace = Duration::from_millis(100);
        let process = processes
            .start(Wanted {
                command: "x".into(),
                keep: Some(Some(grace)),
                pty: None,
                journal_cap: 1,
                name: None,
                client: 1,
            })
            .unwrap();
        let own = process.attach(true).unwrap();
        drop(own);
        tokio::time::sleep(grace / 2).await;
        // Attached again within the grace: the timer does nothing.
        let again = process.attach(false).unwrap();
        tokio::time::sleep(grace * 2).await;
        assert!(!process.cancel.is_cancelled());
        drop(again);
        tokio::time::sleep(grace * 3).await;
        assert!(process.cancel.is_cancelled());
        let ending = Ending { cancelled: true, ..Ending::default() };
        let mut result = ExecResult { ending, ..ExecResult::default() };
        process.ended(&mut result);
        assert!(result.ending.abandoned && !result.ending.cancelled);
    }
}

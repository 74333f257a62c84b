//! [`Process`]: a kept process in a sandbox with an agentd link, followed across link drops.
//!
//! Its output comes as [`ProcessEvent`]s; when the link drops, the next call reconnects (as
//! [`AgentdSandbox::link`] does) and attaches again from the last byte it gave, within
//! [`HEAL_GRACE_SECS`] of the drop, so the caller sees every byte once and the true result. Its
//! other verbs go over whichever link is current.
//!
//! ```no_run
//! # async fn demo(sandbox: &agentd_host::AgentdSandbox) -> agentd_host::Result<()> {
//! use agentd_host::contract::link::ProcessEvent;
//! use agentd_protocol::{ExecRequest, StdinMode};
//!
//! let request = ExecRequest { command: "cat".into(), stdin: Some(StdinMode::Pipe), ..ExecRequest::default() };
//! let mut cat = sandbox.spawn(request).await?;
//! cat.write_stdin(b"hello\n").await?;
//! cat.close_stdin().await?;
//! while let Some(event) = cat.next().await? {
//!     match event {
//!         ProcessEvent::Output(bytes) => print!("{}", String::from_utf8_lossy(&bytes)),
//!         ProcessEvent::Gap(offset) => eprintln!("output past byte {offset} was not kept"),
//!         ProcessEvent::Ended(result) => println!("exit {}", result.exit_code),
//!     }
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use agentd_protocol::{ExecRequest, ProcessInfo};

use crate::contract::agentd::{AgentdSandbox, HEAL_GRACE_SECS, is_link_failure};
use crate::contract::error::Result;
use crate::contract::link::{Link, ProcessEvent, SpawnedProcess};

/// Longest pause between two attempts to reconnect while following.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A kept process, followed from byte [`Process::delivered`] on.
pub struct Process<'a> {
    sandbox: &'a AgentdSandbox,
    id: String,
    /// Output bytes given to the caller so far: where following resumes.
    delivered: u64,
    /// The attachment in use, with the link it is on.
    current: Option<(Arc<Link>, SpawnedProcess)>,
    done: bool,
}

impl AgentdSandbox {
    /// Starts `request` as a kept process (`keep: 0` unless it says otherwise) and follows it.
    pub async fn spawn(&self, mut request: ExecRequest) -> Result<Process<'_>> {
        request.stream = true;
        let link = self.link().await?;
        let spawned = link.spawn(request).await?;
        let id = spawned.process.clone();
        Ok(Process { sandbox: self, id, delivered: 0, current: Some((link, spawned)), done: false })
    }

    /// The kept process `id`, to be followed from byte `from` (its output before it is skipped).
    pub fn process(&self, id: &str, from: u64) -> Process<'_> {
        Process { sandbox: self, id: id.to_owned(), delivered: from, current: None, done: false }
    }

    /// Every process its agentd holds.
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.link().await?.processes().await
    }
}

impl Process<'_> {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Output bytes given so far (with the offset it was followed from).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// The next piece of output, the gap past the journal's cap, or the result (then `None`). A
    /// dropped link is healed on the way.
    pub async fn next(&mut self) -> Result<Option<ProcessEvent>> {
        if self.done {
            return Ok(None);
        }
        let mut give_up = None;
        let mut pause = Duration::from_millis(20);
        loop {
            let event = match self.current.as_mut() {
                Some((_, following)) => following.next().await,
                None => match self.reattach().await {
                    Ok(()) => continue,
                    Err(err) => Err(err),
                },
            };
            match event {
                Ok(Some(event)) => {
                    match &event {
                        ProcessEvent::Output(bytes) => self.delivered += bytes.len() as u64,
                        ProcessEvent::Ended(_) => self.done = true,
                        ProcessEvent::Gap(_) => {}
                    }
                    return Ok(Some(event));
                }
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(err) if is_link_failure(&err) => {
                    self.current = None;
                    let deadline = *give_up.get_or_insert_with(|| {
                        tokio::time::Instant::now() + Duration::from_secs_f64(HEAL_GRACE_SECS)
                    });
                    if tokio::time::Instant::now() >= deadline {
                        return Err(err);
                    }
                    tracing::debug!(process = %self.id, "the link dropped; following again: {err}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(BACKOFF_MAX);
                }
                Err(err) => return Err(err),
            }
        }
    }

    async fn reattach(&mut self) -> Result<()> {
        let link = self.sandbox.link().await?;
        let following = link.follow(&self.id, self.delivered).await?;
        self.current = Some((link, following));
        Ok(())
    }

    /// Writes `data` to its stdin; returns once the pipe took it all.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<()> {
        self.sandbox.link().await?.write_stdin(&self.id, data).await
    }

    /// Closes its stdin (under a terminal: types `^D`).
    pub async fn close_stdin(&self) -> Result<()> {
        self.sandbox.link().await?.close_stdin(&self.id).await
    }

    /// Sets the size of its terminal.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.sandbox.link().await?.resize(&self.id, rows, cols).await
    }

    /// Ends it with the kill ladder, or sends it one `signal`; returns how many were signalled.
    pub async fn kill(&self, signal: Option<&str>) -> Result<u32> {
        self.sandbox.link().await?.kill(&self.id, signal).await
    }

    /// Waits at most `timeout` for its end; it as it is then.
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<ProcessInfo> {
        self.sandbox.link().await?.wait(&self.id, timeout).await
    }
}

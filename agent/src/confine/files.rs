//! File work done for the sandbox under a server profile (the file verbs, uploads and downloads,
//! offload capture files) runs on threads that carry the profile's walls: who commands become (the
//! sandbox user, no capabilities: [`super::identity`]) and the landlock domain of the profile's roots
//! and withheld paths. So a `write` reaches exactly what a command's `echo > f` reaches, and what it
//! makes belongs to the sandbox user, as a command's file would.
//!
//! Credentials, capabilities, `no_new_privs` and a landlock domain belong to a thread when they are
//! set by raw system calls (libc's wrappers would change every thread of agentd). The threads are
//! made at start, [`FILE_WORKERS`] of them, none on demand: a fork bomb beside agentd cannot keep one
//! from being made. Each applies its steps once, then takes jobs from one queue. Without a server
//! profile the work runs on tokio's blocking pool, as agentd's own user ([`FileWork::Open`]).

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError, mpsc};

use super::identity::Identity;
use crate::syscall;

/// Threads of [`FileWorkers`]: as many file verbs and transfers of the sandbox run at once.
pub const FILE_WORKERS: usize = 8;

/// What each worker thread applies to itself before its first job.
pub struct ThreadSteps {
    /// Who the thread becomes (`None`: `user = "agentd"`).
    pub(super) identity: Option<Identity>,
    /// The landlock ruleset's descriptor (`Some(None)`: asked, but landlock is not there).
    pub(super) ruleset: Option<Option<OwnedFd>>,
    /// A profile that is strict: a thread that got less than asked takes no job, and every job is
    /// then refused with what was missing, rather than run with less.
    pub(super) strict: bool,
}

impl ThreadSteps {
    /// Applies the steps to the calling thread: raw system calls only. `Err`: what it did not get.
    fn apply(&self) -> Result<(), String> {
        let mut short = Vec::new();
        if let Some(identity) = &self.identity
            && !(identity.apply().is_ok() && identity.holds())
        {
            short.push("the sandbox user");
        }
        if syscall::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).is_err() {
            short.push("no_new_privs");
        }
        let landlock = match &self.ruleset {
            None => true,
            Some(None) => false,
            Some(Some(ruleset)) => syscall::landlock_restrict_self(ruleset.as_raw_fd()).is_ok(),
        };
        if !landlock {
            short.push("landlock");
        }
        if short.is_empty() { Ok(()) } else { Err(short.join(", ")) }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The confined worker threads and their queue.
pub struct FileWorkers {
    jobs: mpsc::Sender<Job>,
    /// Why no job runs: the threads did not get what a strict profile asks.
    refused: Option<String>,
}

impl FileWorkers {
    /// Makes the threads; each applies `steps` first and says what it got. Fails only when not one
    /// thread could be made.
    pub fn start(steps: ThreadSteps) -> io::Result<Self> {
        let (send, receive) = mpsc::channel::<Job>();
        let receive = Arc::new(Mutex::new(receive));
        let (report, reports) = mpsc::channel();
        let steps = Arc::new(steps);
        let mut made = 0;
        let mut last = None;
        for n in 0..FILE_WORKERS {
            let (receive, steps, report) = (Arc::clone(&receive), Arc::clone(&steps), report.clone());
            let spawned = std::thread::Builder::new().name(format!("agentd-files-{n}")).spawn(move || {
                crate::reaper::keep_signals_off_this_thread();
                let got = steps.apply();
                let usable = got.is_ok() || !steps.strict;
                let _ = report.send(got);
                if usable {
                    work(&receive);
                }
            });
            match spawned {
                Ok(_) => made += 1,
                Err(err) => last = Some(err),
            }
        }
        if let (0, Some(err)) = (made, last) {
            return Err(err);
        }
        let short = reports.iter().take(made).find_map(Result::err);
        if let Some(short) = &short {
            tracing::warn!("file workers did not get {short}");
        }
        let refused = short.filter(|_| steps.strict).map(|short| {
            format!("file work cannot be confined here ({short} not enforced) and the profile is strict")
        });
        Ok(Self { jobs: send, refused })
    }

    async fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
        if let Some(refused) = &self.refused {
            return Err(refused.clone());
        }
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(job());
        });
        self.jobs.send(job).map_err(|_| "no file worker is left".to_owned())?;
        result.await.map_err(|_| "the file work failed".to_owned())
    }
}

/// A worker thread's jobs, until the queue closes.
fn work(jobs: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        // A panicking job loses its answer (the caller gets an error), not the worker.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// Where blocking file work for the sandbox runs.
#[derive(Clone)]
pub enum FileWork {
    /// On [`FileWorkers`]: a server profile is in force.
    Confined(Arc<FileWorkers>),
    /// On tokio's blocking pool, as agentd's own user: no profile.
    Open,
}

impl FileWork {
    /// Runs `job` where this file work runs; `Err`: it could not run or did not finish.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        match self {
            FileWork::Confined(workers) => workers.run(job).await,
            FileWork::Open => tokio::task::spawn_blocking(job).await.map_err(|e| e.to_string()),
        }
    }
}

//! An exec request made ready for [`Executor::run`](super::Executor::run), in named steps: admit it
//! ([`admission::admit`]: every value validated, the profile tightened), [`plan`] its confinement (or an unconfined
//! command's cgroup), and [`place_offload`] its capture file where the sandbox's file work runs. The
//! server calls [`prepare`] and hands the [`Prepared`] spec to the executor.

use std::sync::Arc;
use std::time::Duration;

use agentd_protocol::profile::SandboxProfile;
use agentd_protocol::{ErrorCode, ExecRequest};
use thiserror::Error;

use super::{CaptureMode, CaptureTarget, Confined, ExecError, ExecSpec, offload_target};
use crate::admission::{self, Refusal, ServerPolicy};
use crate::confine::{ConfineError, Confiner, FileWork, Plan};
use crate::root::Workspace;

/// What preparing an exec needs of the server.
pub struct Context<'a> {
    /// The server's profile and default timeout.
    pub policy: &'a ServerPolicy,
    /// Plans confinement; shared with the blocking pool, where plans that do file work are made.
    pub confiner: &'a Arc<Confiner>,
    /// Where the sandbox's file work runs (an offload's capture file is made there).
    pub files: &'a FileWork,
    /// Where an offload's capture path resolves.
    pub workspace: &'a Workspace,
}

/// An exec ready to run.
pub struct Prepared {
    pub spec: ExecSpec,
    /// Kept (`keep`), and how long after its connection's end.
    pub keep: Option<Option<Duration>>,
    /// The process name the client asked for.
    pub name: Option<String>,
}

/// Why an exec request did not get ready: each answers its own code, with its own message.
#[derive(Debug, Error)]
pub enum PrepareError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Confine(#[from] ConfineError),
    #[error(transparent)]
    Offload(#[from] ExecError),
    /// The blocking work did not finish (a panic, or the file workers are gone).
    #[error("{0}")]
    Internal(String),
}

impl PrepareError {
    /// The protocol's code for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Refused(refusal) => refusal.code(),
            Self::Confine(ConfineError::NotEnforceable { .. }) => ErrorCode::NotEnforceable,
            Self::Confine(_) | Self::Internal(_) => ErrorCode::Internal,
            Self::Offload(err) => err.code(),
        }
    }
}

/// Admits `request`, plans its confinement and places its offload's capture file.
pub async fn prepare(context: &Context<'_>, request: ExecRequest) -> Result<Prepared, PrepareError> {
    let mut admitted = admission::admit(context.policy, request)?;
    let keep = admitted.keep;
    let name = admitted.process.take();
    let (confined, plan) = plan(context.confiner, admitted.profile.take()).await?;
    let mut spec = ExecSpec::new(admitted, confined, plan);
    spec.offload = place_offload(context.files, context.workspace, &spec.mode).await?;
    Ok(Prepared { spec, keep, name })
}

/// The confinement of a command under `profile` (`None`: unconfined, its cgroup only). What earlier
/// commands prepared is taken at once; building the landlock ruleset, making the command's cgroup
/// (and the first time, finding agentd's own in /proc) is file system work: off the runtime thread.
pub async fn plan(
    confiner: &Arc<Confiner>,
    profile: Option<SandboxProfile>,
) -> Result<(Option<Confined>, Option<Plan>), PrepareError> {
    let Some(profile) = profile else {
        // Its cgroup: an idle one at once, else made off the runtime.
        let plan = match confiner.unconfined_plan(false) {
            Some(plan) => plan,
            None => {
                let confiner = Arc::clone(confiner);
                tokio::task::spawn_blocking(move || confiner.unconfined_plan(true).flatten())
                    .await
                    .map_err(|e| PrepareError::Internal(e.to_string()))?
            }
        };
        return Ok((None, plan));
    };
    let (plan, profile) = match confiner.plan_ready(&profile) {
        Some(plan) => (plan, profile),
        None => {
            let confiner = Arc::clone(confiner);
            tokio::task::spawn_blocking(move || (confiner.plan(&profile), profile))
                .await
                .map_err(|e| PrepareError::Internal(e.to_string()))?
        }
    };
    let plan = plan?;
    let mut fixed_env = profile.env;
    if let Some(path) = confiner.sandbox_path()
        && profile.env_allowlist.as_ref().is_none_or(|names| names.iter().any(|n| n == "PATH"))
    {
        fixed_env.entry("PATH".to_owned()).or_insert_with(|| path.to_owned());
    }
    let confined = Confined { env_allowlist: profile.env_allowlist, fixed_env, limits: profile.limits };
    Ok((Some(confined), Some(plan)))
}

/// Under a server profile, an offload's capture file, made where the sandbox's file work runs:
/// agentd never makes it as itself outside what the sandbox may write. `None`: the executor makes
/// it when needed (no profile, or no offload).
pub async fn place_offload(
    files: &FileWork,
    workspace: &Workspace,
    mode: &CaptureMode,
) -> Result<Option<CaptureTarget>, PrepareError> {
    let (FileWork::Confined(_), CaptureMode::Offload { path, .. }) = (files, mode) else {
        return Ok(None);
    };
    let (workspace, path) = (workspace.clone(), path.clone());
    let made = files.run(move || offload_target(&workspace, &path)).await;
    Ok(Some(made.map_err(PrepareError::Internal)??))
}

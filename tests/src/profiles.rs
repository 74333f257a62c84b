//! A daemon serving a profile over a fresh workspace ([`profiled`], skipped where landlock is too
//! old), and [`run`], a command on it.

use crate::daemon::Daemon;
use crate::skip::{Need, skip};

/// A daemon in a new workspace holding `files` (path → content), serving `profile` (TOML, `{W}`
/// replaced by the workspace's real path), a link to it, and the directory holding the profile file.
/// `None` (after [`skip`]) when the kernel's landlock is older than ABI 4, which profiles need.
pub async fn profiled(
    profile: &str,
    files: &[(&str, &str)],
) -> Option<(Daemon, agentd_host::AgentdSandbox, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    for (path, content) in files {
        let path = w.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, profile.replace("{W}", w.to_str().unwrap())).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", path.to_str().unwrap()]);
    let sandbox = agentd_host::AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let abi = sandbox.link().await.unwrap().hello().landlock_abi;
    if abi < 4 {
        skip(Need::Landlock, format!("this kernel's landlock ABI is {abi}; profiles need 4"));
        return None;
    }
    Some((daemon, sandbox, dir))
}

/// Runs `command` on `sandbox` (20 s at most); the exec must be answered.
pub async fn run(sandbox: &agentd_host::AgentdSandbox, command: &str) -> agentd_protocol::ExecResult {
    let request = agentd_protocol::ExecRequest {
        command: command.to_owned(),
        timeout: Some(20.0),
        ..agentd_protocol::ExecRequest::default()
    };
    sandbox.exec(request, None).await.unwrap()
}

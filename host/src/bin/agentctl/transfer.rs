//! `upload` and `download`: streamed over the agentd link with a progress bar for large files,
//! else through the contract's batch calls; REMOTE relative to the workspace unless absolute.

use std::path::Path;
use std::process::ExitCode;

use agentd_host::contract::download::download_to_path;
use agentd_host::{BaseSandbox, SandboxError};
use indicatif::{ProgressBar, ProgressStyle};

use crate::target::Target;
use crate::{Cli, say};

/// Files above this size get a progress bar (on a terminal).
const PROGRESS_BYTES: u64 = 8 << 20;

/// REMOTE relative to the workspace unless absolute: agentd's workspace, or the directory the
/// sandbox's commands start in.
async fn remote_path(sandbox: &dyn BaseSandbox, remote: &str) -> Result<String, SandboxError> {
    if remote.starts_with('/') {
        return Ok(remote.to_owned());
    }
    let workspace = match sandbox.agentd() {
        Some(agentd) => agentd.workspace().await?,
        None => sandbox.execute("pwd", None).await?.output.trim_end().to_owned(),
    };
    Ok(format!("{}/{remote}", workspace.trim_end_matches('/')))
}

fn progress_bar(len: u64) -> ProgressBar {
    if len < PROGRESS_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

pub async fn upload(
    cli: &Cli,
    local: &Path,
    remote: &str,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sandbox = target.sandbox();
    let file = tokio::fs::File::open(local).await.map_err(|e| format!("{}: {e}", local.display()))?;
    let remote = remote_path(sandbox, remote).await?;
    let error = match sandbox.agentd() {
        Some(agentd) => {
            let bar = progress_bar(file.metadata().await?.len());
            let error = agentd.link().await?.upload(&remote, file, |n| bar.inc(n)).await?;
            bar.finish_and_clear();
            error
        }
        // The contract's batch call, whole file in memory: the provider's own channel.
        None => {
            drop(file);
            let bytes = tokio::fs::read(local).await.map_err(|e| format!("{}: {e}", local.display()))?;
            let mut responses = sandbox.upload_files(&[(remote.clone(), bytes)]).await?;
            responses.pop().ok_or("the sandbox answered an upload with nothing")?.error
        }
    };
    if cli.json {
        println!(
            "{}",
            serde_json::to_string(&agentd_protocol::FileUploadResponse {
                path: remote.clone(),
                error: error.clone()
            })?
        );
    }
    match error {
        None => Ok(ExitCode::SUCCESS),
        Some(error) => {
            if !cli.json {
                say(format!("upload to {remote} failed: {error}"));
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

pub async fn download(
    cli: &Cli,
    remote: &str,
    local: &Path,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sandbox = target.sandbox();
    let remote = remote_path(sandbox, remote).await?;
    let bar = ProgressBar::hidden();
    let outcome = download_to_path(sandbox, &remote, local, |done, total| {
        if bar.is_hidden() && total >= PROGRESS_BYTES {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.set_length(total);
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            {
                bar.set_style(style);
            }
        }
        bar.set_position(done);
    })
    .await?;
    bar.finish_and_clear();
    match outcome {
        Ok(done) => {
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"path": remote, "size": done.size, "sha256": done.sha256, "error": null})
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            if cli.json {
                println!("{}", serde_json::json!({"path": remote, "error": error}));
            } else {
                say(format!("download of {remote} failed: {error}"));
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

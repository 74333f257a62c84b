//! Sandboxes that exist only for the tests: [`ShellSandbox`] (a local shell as a provider's exec
//! channel) and [`ExecOnly`] (any sandbox seen through its four required members), so the verbs and
//! the offload take the derived path.

use std::path::PathBuf;
use std::time::Duration;

use crate::binaries::binary;

/// A sandbox whose only powers are the four required members: `execute` through a local
/// `/bin/sh -c` (stdout and stderr merged) in `cwd`, and uploads/downloads as local file IO with the
/// contract's codes. It stands in for a provider's exec channel, so the seven verbs and the offload
/// run through the derived path (`agentd fs request`, `agentd exec`).
pub struct ShellSandbox {
    pub cwd: PathBuf,
    agentd: String,
}

impl ShellSandbox {
    pub fn new(cwd: &std::path::Path) -> Self {
        Self { cwd: cwd.to_owned(), agentd: binary("agentd").to_string_lossy().into_owned() }
    }
}

#[agentd_host::async_trait]
impl agentd_host::BaseSandbox for ShellSandbox {
    fn id(&self) -> &str {
        "shell"
    }

    fn agentd_command(&self) -> &str {
        &self.agentd
    }

    async fn execute(
        &self,
        command: &str,
        timeout: Option<Duration>,
    ) -> agentd_host::Result<agentd_protocol::ExecuteResponse> {
        let mut child = tokio::process::Command::new("/bin/sh");
        // `exec 2>&1` first: one stream, in emission order, as a provider's channel gives.
        child.arg("-c").arg(format!("exec 2>&1\n{command}")).current_dir(&self.cwd).kill_on_drop(true);
        let run = child.output();
        let output = match timeout.filter(|t| !t.is_zero()) {
            Some(t) => match tokio::time::timeout(t, run).await {
                Ok(output) => output?,
                Err(_) => {
                    return Ok(agentd_protocol::ExecuteResponse {
                        output: String::new(),
                        exit_code: Some(124),
                        truncated: false,
                    });
                }
            },
            None => run.await?,
        };
        Ok(agentd_protocol::ExecuteResponse {
            output: String::from_utf8_lossy(&output.stdout).into_owned(),
            exit_code: output.status.code(),
            truncated: false,
        })
    }

    async fn upload_files(
        &self,
        files: &[(String, Vec<u8>)],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileUploadResponse>> {
        use agentd_protocol::TransferError;
        Ok(files
            .iter()
            .map(|(path, bytes)| {
                let error = TransferError::check_path(path).err().map(|e| e.to_string()).or_else(|| {
                    let target = std::path::Path::new(path);
                    let written = match std::fs::metadata(target) {
                        Ok(meta) if meta.is_dir() => return Some(TransferError::IsDirectory.to_string()),
                        _ => target
                            .parent()
                            .map_or(Ok(()), std::fs::create_dir_all)
                            .and_then(|()| std::fs::write(target, bytes)),
                    };
                    written.err().map(|e| transfer_code(&e))
                });
                agentd_protocol::FileUploadResponse { path: path.clone(), error }
            })
            .collect())
    }

    async fn download_files(
        &self,
        paths: &[String],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileDownloadResponse>> {
        use agentd_protocol::TransferError;
        Ok(paths
            .iter()
            .map(|path| {
                let read = TransferError::check_path(path).map_err(|e| e.to_string()).and_then(|()| {
                    match std::fs::metadata(path) {
                        Ok(meta) if meta.is_dir() => Err(TransferError::IsDirectory.to_string()),
                        _ => std::fs::read(path).map_err(|e| transfer_code(&e)),
                    }
                });
                match read {
                    Ok(content) => agentd_protocol::FileDownloadResponse {
                        path: path.clone(),
                        content: Some(content),
                        error: None,
                    },
                    Err(error) => agentd_protocol::FileDownloadResponse {
                        path: path.clone(),
                        content: None,
                        error: Some(error),
                    },
                }
            })
            .collect())
    }
}

fn transfer_code(err: &std::io::Error) -> String {
    match err.raw_os_error().and_then(agentd_protocol::TransferError::from_errno) {
        Some(code) => code.to_string(),
        None => err.to_string(),
    }
}

/// A sandbox seen only through its four required members (and where agentd lives): the verbs and
/// the offload take the derived path through `execute`, whatever the sandbox could do natively.
pub struct ExecOnly(pub std::sync::Arc<dyn agentd_host::BaseSandbox>);

#[agentd_host::async_trait]
impl agentd_host::BaseSandbox for ExecOnly {
    fn id(&self) -> &str {
        self.0.id()
    }

    fn agentd_command(&self) -> &str {
        self.0.agentd_command()
    }

    async fn execute(
        &self,
        command: &str,
        timeout: Option<Duration>,
    ) -> agentd_host::Result<agentd_protocol::ExecuteResponse> {
        self.0.execute(command, timeout).await
    }

    async fn upload_files(
        &self,
        files: &[(String, Vec<u8>)],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileUploadResponse>> {
        self.0.upload_files(files).await
    }

    async fn download_files(
        &self,
        paths: &[String],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileDownloadResponse>> {
        self.0.download_files(paths).await
    }
}

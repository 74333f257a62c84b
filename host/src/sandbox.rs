//! The `BaseSandbox` contract (`shared/spec/backend-contract.md`): four required members, plus
//! `execute_with_offload`. Result types come from `agentd_protocol::contract`.

use std::time::Duration;

use agentd_protocol::{ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;

use crate::error::Result;

/// A place where commands run and files live. Failures the model should see are values inside the
/// results; `Err` is reserved for a sandbox that cannot be reached.
#[async_trait]
pub trait BaseSandbox: Send + Sync {
    /// A stable identifier, unique per sandbox instance.
    fn id(&self) -> &str;

    /// Runs POSIX `sh` text; stdout and stderr merged. `timeout`: `None` is the backend's default,
    /// `Some(Duration::ZERO)` no limit.
    async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse>;

    /// Writes each file (parents created, existing files replaced); one response per input, in order.
    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>>;

    /// Reads each file; one response per input, in order.
    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>>;

    /// Runs `command` keeping output above `inline_budget` bytes in the file at `capture_path` and
    /// answering with a preview (contract §4). The capture stops at `max_capture_bytes` (default
    /// 10 MiB). Without native support this is plain `execute`, reported as not offloaded.
    async fn execute_with_offload(
        &self,
        command: &str,
        capture_path: &str,
        inline_budget: u64,
        max_capture_bytes: Option<u64>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOffloadResult> {
        let _ = (capture_path, inline_budget, max_capture_bytes);
        let response = self.execute(command, timeout).await?;
        Ok(ExecuteOffloadResult { offloaded: false, response, preview_has_truncation_marker: false })
    }
}

//! Model-facing result types of the `BaseSandbox` contract (`agentd_host::BaseSandbox`; deepagents'
//! `BaseSandbox`, 0.7.32).
//! Failures are values: an `error` string the model reads, never a Rust `Err`.

use serde::{Deserialize, Serialize};

/// Result of `execute`: stdout and stderr merged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecuteResponse {
    pub output: String,
    /// `None` when the exit code cannot be known.
    pub exit_code: Option<i32>,
    /// The backend itself dropped output.
    pub truncated: bool,
}

/// Result of `execute_with_offload`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecuteOffloadResult {
    /// The output stayed in the capture file and `response.output` is a preview.
    pub offloaded: bool,
    pub response: ExecuteResponse,
    /// The preview holds a `... [N lines truncated] ...` marker (only ever with `offloaded`).
    pub preview_has_truncation_marker: bool,
}

/// One upload's outcome; `path` echoes the input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileUploadResponse {
    pub path: String,
    pub error: Option<String>,
}

/// One download's outcome: exactly one of `content` and `error` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDownloadResponse {
    pub path: String,
    pub content: Option<Vec<u8>>,
    pub error: Option<String>,
}

/// The contract's per-file transfer error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferError {
    /// The path is relative, holds a NUL byte, crosses a regular file or loops.
    InvalidPath,
    /// The target is missing (or a dangling link).
    FileNotFound,
    /// Downloading a directory, or uploading onto one.
    IsDirectory,
    /// EACCES or EPERM.
    PermissionDenied,
    /// A client's own refusal, not agentd's: the file is larger than the client takes into memory
    /// (a `download_files` returns whole files; streamed downloads have no such cap).
    FileTooLarge,
}

impl TransferError {
    /// The exact string of the contract.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidPath => "invalid_path",
            Self::FileNotFound => "file_not_found",
            Self::IsDirectory => "is_directory",
            Self::PermissionDenied => "permission_denied",
            Self::FileTooLarge => "file_too_large",
        }
    }

    /// The contract's errno mapping; `None` for errors that travel as free text.
    pub fn from_errno(errno: i32) -> Option<Self> {
        // Numbers are Linux's (asm-generic/errno-base.h, errno.h); this crate stays free of libc.
        const EPERM: i32 = 1;
        const ENOENT: i32 = 2;
        const EACCES: i32 = 13;
        const EEXIST: i32 = 17;
        const ENOTDIR: i32 = 20;
        const EISDIR: i32 = 21;
        const ELOOP: i32 = 40;
        match errno {
            ENOENT => Some(Self::FileNotFound),
            EISDIR => Some(Self::IsDirectory),
            EACCES | EPERM => Some(Self::PermissionDenied),
            ENOTDIR | EEXIST | ELOOP => Some(Self::InvalidPath),
            _ => None,
        }
    }

    /// The first check of every transfer, made without IO: an absolute path without NUL.
    pub fn check_path(path: &str) -> Result<(), Self> {
        if path.starts_with('/') && !path.contains('\0') { Ok(()) } else { Err(Self::InvalidPath) }
    }
}

impl std::fmt::Display for TransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_contract_strings() {
        assert_eq!(TransferError::from_errno(2).map(TransferError::as_str), Some("file_not_found"));
        assert_eq!(TransferError::from_errno(21).map(TransferError::as_str), Some("is_directory"));
        assert_eq!(TransferError::from_errno(13).map(TransferError::as_str), Some("permission_denied"));
        assert_eq!(TransferError::from_errno(20).map(TransferError::as_str), Some("invalid_path"));
        assert_eq!(TransferError::from_errno(28), None);
        assert_eq!(
            serde_json::to_string(&TransferError::IsDirectory).ok().as_deref(),
            Some("\"is_directory\"")
        );
    }

    #[test]
    fn relative_and_nul_paths_are_invalid() {
        assert_eq!(TransferError::check_path("rel.txt"), Err(TransferError::InvalidPath));
        assert_eq!(TransferError::check_path("/a\0b"), Err(TransferError::InvalidPath));
        assert_eq!(TransferError::check_path(""), Err(TransferError::InvalidPath));
        assert_eq!(TransferError::check_path("/ok"), Ok(()));
    }
}

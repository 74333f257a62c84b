//! Transport failures. Model-facing failures (a missing file, a failing command) are values in the
//! result types instead; an `Err` means the sandbox could not be asked at all.

use agentd_protocol::ErrorCode;
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error("cannot connect to agentd at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("agentd refused the token (HTTP 401) at {url}")]
    Unauthorized { url: String },
    #[error("the link to agentd closed before the answer came")]
    LinkClosed,
    #[error("agentd sent something this client does not understand: {0}")]
    Protocol(String),
    #[error("agentd refused the request ({code:?}): {message}")]
    Refused { code: ErrorCode, message: String },
    #[error("sha256 mismatch on download of {path}: agentd sent {expected}, received {actual}")]
    DigestMismatch { path: String, expected: String, actual: String },
    #[error("cannot start agentd: {0}")]
    Start(String),
    #[error("sandbox spec `{spec}`: {why}")]
    InvalidSpec { spec: String, why: String },
    #[error("{kind} sandboxes need agentd-host built with the `{feature}` feature")]
    Unsupported { kind: &'static str, feature: &'static str },
    /// An operation this kind of sandbox does not have (`pause` of a Docker container, say).
    #[error("{kind} sandboxes cannot {operation}")]
    NotSupported { kind: &'static str, operation: &'static str },
    #[error("{0} is not set")]
    MissingEnv(&'static str),
    #[error("{provider} refused the credentials: check {variable}")]
    Auth { provider: &'static str, variable: &'static str },
    #[error("{provider}: {what} not found")]
    NotFound { provider: &'static str, what: String },
    /// The provider refused or failed a request (quota, state, a failed build); `message` is its own.
    #[error("{provider}: {message}")]
    Provider { provider: &'static str, status: Option<u16>, message: String },
    #[error("{what}: no answer within {after:?}")]
    Timeout { what: String, after: std::time::Duration },
    /// An id (listed by a provider, or typed) that is not of the shape the provider's ids have;
    /// nothing was sent for it. Shown escaped: it may hold anything.
    #[error("{provider}: `{}` is not a well-formed sandbox id; nothing was sent for it", crate::contract::escape::escape_controls(.id))]
    BadId { provider: &'static str, id: String },
    /// A body from a provider passed its cap; the rest was not read.
    #[error("{what}: the answer passed the limit of {limit} bytes; refused")]
    TooLarge { what: String, limit: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

//! Transport failures as Python exceptions. The classes live in `agentd/errors.py` (so they can
//! also be the builtin `ConnectionError`, `TimeoutError`, `ValueError`); this file only says which
//! `SandboxError` is which. Model-facing failures are never exceptions: they are `error` fields.

use agentd_host::SandboxError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The exception class `name` of `agentd.errors`.
fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("agentd.errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// The class of `agentd.errors` that stands for `error`.
fn class_name(error: &SandboxError) -> &'static str {
    match error {
        SandboxError::Connect { .. } | SandboxError::LinkClosed => "ConnectionError",
        SandboxError::Unauthorized { .. } | SandboxError::Auth { .. } => "AuthenticationError",
        SandboxError::Timeout { .. } => "TimeoutError",
        SandboxError::Protocol(_) | SandboxError::DigestMismatch { .. } => "ProtocolError",
        SandboxError::Refused { .. } => "RefusedError",
        SandboxError::Start(_) => "StartError",
        SandboxError::InvalidSpec { .. } => "InvalidSpecError",
        SandboxError::Provider { .. }
        | SandboxError::NotFound { .. }
        | SandboxError::Unsupported { .. }
        | SandboxError::MissingEnv(_)
        | SandboxError::BadId { .. }
        | SandboxError::TooLarge { .. } => "ProviderError",
        _ => "AgentdError",
    }
}

/// The Python exception for a failed call: the class for its kind, the Rust message as text.
pub fn to_py(error: SandboxError) -> PyErr {
    Python::attach(|py| named(py, class_name(&error), error.to_string()))
}

/// An exception of class `name` of `agentd.errors` with `message`.
pub fn named(py: Python<'_>, name: &str, message: String) -> PyErr {
    match class(py, name).and_then(|cls| cls.call1((message.clone(),))) {
        Ok(value) => PyErr::from_value(value),
        // agentd.errors missing means the package is broken; still say what failed.
        Err(_) => PyRuntimeError::new_err(message),
    }
}

/// A call on a sandbox that `close()` already ended.
pub fn closed() -> PyErr {
    Python::attach(|py| named(py, "SandboxClosedError", "the sandbox is closed".to_owned()))
}

/// A call, in a process made by `fork`, on a sandbox that process `owner` made.
pub fn inherited(owner: u32) -> PyErr {
    let message = format!(
        "this sandbox belongs to process {owner}; process {} inherited it by fork and cannot use \
         it (its link is driven by threads that exist only in process {owner}): make a new sandbox \
         in this process",
        std::process::id()
    );
    Python::attach(|py| named(py, "InheritedSandboxError", message))
}

//! # agentd-python
//!
//! The native module `agentd._agentd` of the `agentd` Python package: `agentd-host` for Python, so
//! Python gets the same link, the same embedded default and the same providers as Rust, with one
//! implementation of the protocol. The package's Python layer (`python/agentd/`) turns what this
//! module returns into deepagents' result types and is what users import.
//!
//! ## Layout
//! - [`sandbox`]: [`sandbox::Sandbox`], one class over any `agentd_host::BaseSandbox`: how it is
//!   made (the embedded default, a running agentd by URL, a provider spec), every verb as a
//!   blocking call that releases the GIL and as a coroutine on the process's tokio runtime,
//!   `close`; a copy a forked child inherited refuses every call.
//! - [`calls`]: the verbs as values ([`calls::Call`]), run against a sandbox, and their answers
//!   turned into plain Python values (tuples, bytes, dicts with the contract's field names).
//! - [`permissions`]: path permission rules in wire form (dicts, `MODE:OPERATIONS:PATH`), read
//!   and checked by `agentd_protocol::permission`; `permission_rule` is the Python layer's parser.
//! - [`errors`]: `SandboxError` to the exceptions of `agentd.errors`.
//! - [`runtime`]: the tokio runtime every call runs on, one per process (a forked child gets its
//!   own), and the asyncio futures the coroutines await, settled on their loop's thread.
//!
//! Build it with maturin (`python/install.sh`, docs/python.md); `cargo build` builds the same
//! shared object (never linked to libpython: the interpreter that imports it provides the symbols).

#![expect(
    rustdoc::private_intra_doc_links,
    reason = "its Rust API is the Python module, not these items: this map is for the crate's \
              maintainers and names the private modules it is made of"
)]

mod calls;
mod errors;
mod permissions;
mod runtime;
mod sandbox;

use pyo3::prelude::*;

/// The module: the sandbox class, where the bundled agentd is, and the permission rules' parser.
#[pymodule]
fn _agentd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<sandbox::Sandbox>()?;
    m.add_function(wrap_pyfunction!(set_bundled_agentd, m)?)?;
    m.add_function(wrap_pyfunction!(permissions::permission_rule, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Names the static agentd shipped in the wheel: the embedded default runs it and providers inject
/// it, unless `AGENTD_BIN` / `AGENTD_STATIC_BIN` say otherwise. The first call wins.
#[pyfunction]
fn set_bundled_agentd(path: std::path::PathBuf) -> bool {
    agentd_host::adapters::local::set_bundled_agentd(path)
}

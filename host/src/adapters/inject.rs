//! What every adapter that injects agentd into a sandbox needs: the static binary to copy in. The
//! word for how agentd got in is the contract's
//! ([`AgentdSource`](crate::contract::AgentdSource)).

use crate::contract::error::{Result, SandboxError};

/// The static agentd to inject: `$AGENTD_STATIC_BIN`, the bundled one
/// ([`crate::adapters::local::set_bundled_agentd`]), else the static build of this workspace next
/// to the running program (`target/x86_64-unknown-linux-gnu/release/agentd`).
pub fn static_agentd() -> Result<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("AGENTD_STATIC_BIN") {
        return Ok(path.into());
    }
    if let Some(path) = crate::adapters::local::bundled_agentd() {
        return Ok(path.to_owned());
    }
    let exe = std::env::current_exe()?;
    let found = exe
        .ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join("x86_64-unknown-linux-gnu/release/agentd"))
        .find(|p| p.is_file());
    found.ok_or_else(|| {
        SandboxError::Start(
            "no static agentd to inject: build it (see README) or set AGENTD_STATIC_BIN".to_owned(),
        )
    })
}

//! What every adapter that injects agentd into a sandbox needs: the static binary to copy in, and
//! the word for how agentd got in ([`AgentdSource`]).

use crate::error::{Result, SandboxError};

/// How agentd got into a sandbox a provider made or attached to
/// ([`BaseSandbox::agentd_source`](crate::BaseSandbox::agentd_source)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentdSource {
    /// The image had it (Docker: its entrypoint is agentd; Daytona, Modal: `agentd` on `PATH`).
    Baked,
    /// The static binary ([`static_agentd`]) was copied in.
    Injected,
}

impl AgentdSource {
    /// `baked` or `injected`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Baked => "baked",
            Self::Injected => "injected",
        }
    }
}

impl std::fmt::Display for AgentdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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

/// 32 random bytes in hex: tokens and unguessable names.
pub fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

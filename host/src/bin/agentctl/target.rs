//! The sandbox a command talks to ([`Target`]): `--sandbox KIND:SPEC`, `--url`, the `up` session
//! or a private local agentd, in that order; and `status`, what it is.

use agentd_host::provider::{self, Opened, SandboxSpec};
use agentd_host::{AgentdSandbox, BaseSandbox, LocalOptions, LocalSandbox, SandboxError};
use agentd_protocol::profile::{Enforcement, Level, Mode};
use std::process::ExitCode;

use crate::{Cli, session, shown};

/// The sandbox a command talks to; keeps a private agentd alive while needed.
pub enum Target {
    Remote(AgentdSandbox),
    Private(LocalSandbox),
    /// From `--sandbox KIND:SPEC`.
    Spec(Opened),
}

impl Target {
    pub fn sandbox(&self) -> &dyn BaseSandbox {
        match self {
            Self::Remote(sandbox) => sandbox,
            Self::Private(local) => local,
            Self::Spec(opened) => opened.sandbox.as_ref(),
        }
    }

    /// What this command created and must remove, as a person would look for it (`docker:ID`);
    /// `None` when it attached to a sandbox that outlives it.
    pub fn created(&self) -> Option<String> {
        match self {
            Self::Remote(_) => None,
            Self::Private(local) => Some(format!(
                "the local agentd (pid {}, workspace {})",
                local.pid(),
                shown(&local.workspace().display().to_string())
            )),
            Self::Spec(opened) if opened.created => {
                Some(format!("{}:{}", opened.kind(), shown(opened.sandbox.id())))
            }
            Self::Spec(_) => None,
        }
    }

    /// Releases what this command started: a sandbox it created is stopped and removed (a private
    /// local agentd is stopped and its workspace removed when dropped).
    pub async fn finish(self) -> Result<(), SandboxError> {
        match self {
            Self::Spec(opened) => opened.close().await,
            Self::Remote(_) | Self::Private(_) => Ok(()),
        }
    }
}

pub async fn target(cli: &Cli) -> Result<Target, Box<dyn std::error::Error>> {
    if let Some(spec) = &cli.sandbox {
        let spec: SandboxSpec = spec.parse()?;
        return Ok(Target::Spec(provider::open(&spec).await?));
    }
    if let Some(url) = &cli.url {
        let token = match &cli.token_file {
            Some(file) => Some(
                std::fs::read_to_string(file).map_err(|e| format!("--token-file {}: {e}", file.display()))?,
            ),
            None => std::env::var("AGENTD_TOKEN").ok(),
        };
        let token = token.as_deref().map(str::trim);
        return Ok(Target::Remote(AgentdSandbox::connect(url, token).await?));
    }
    if let Some(session) = session::read()? {
        let token = session.token()?;
        return Ok(Target::Remote(AgentdSandbox::connect(&session.url, Some(&token)).await?));
    }
    let options = LocalOptions {
        permissions: cli.permissions.clone(),
        env_allowlist: cli.pass_env.clone(),
        ..LocalOptions::default()
    };
    Ok(Target::Private(LocalSandbox::start_with(&options).await?))
}

pub async fn status(target: &Target) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let kind = match target {
        Target::Remote(_) => "attached",
        Target::Private(_) => "private (no `agentctl up` session)",
        Target::Spec(opened) => {
            opened.kind().row().and_then(|row| row.noun).unwrap_or_else(|| opened.kind().name())
        }
    };
    let sandbox = target.sandbox();
    // How a provider's sandbox got its agentd: `, baked` or `, injected`.
    let source = sandbox.agentd_source().map(|source| format!(", {source}")).unwrap_or_default();
    match sandbox.agentd() {
        Some(agentd) => {
            let hello = agentd.link().await?.hello().clone();
            println!(
                "{kind}: {} pid {} workspace {} (agentd {}{source})",
                shown(sandbox.id()),
                hello.pid,
                shown(&hello.workspace),
                shown(&hello.agentd_version)
            );
            if let Some(report) = &hello.profile {
                print!("{}", enforcement_text(report));
            }
        }
        None => println!("{kind}: {} (no agentd link: the contract through its exec)", shown(sandbox.id())),
    }
    Ok(ExitCode::SUCCESS)
}

/// What a profile's report says, for a person: the whole, each rule, then the notes (escaped: it
/// comes from the sandbox).
fn enforcement_text(report: &Enforcement) -> String {
    let level = |l: Level| match l {
        Level::Full => "full",
        Level::Partial => "partial",
        Level::NotEnforced => "not enforced",
        Level::NotRequested => "not requested",
    };
    let mode = match report.mode {
        Mode::Strict => "strict",
        Mode::BestEffort => "best effort",
    };
    let mut out = format!(
        "profile {}: {} ({mode}, landlock ABI {})\n",
        shown(&report.profile),
        level(report.level),
        report.landlock_abi
    );
    for (what, l) in [
        ("filesystem", report.filesystem),
        ("network", report.network),
        ("signals", report.signals),
        ("programs", report.programs),
        ("limits", report.limits),
        ("privileges", report.privileges),
    ] {
        if l != Level::NotRequested {
            out.push_str(&format!("  {what}: {}\n", level(l)));
        }
    }
    for rule in &report.permissions {
        out.push_str(&format!("  permission {}: {}\n", shown(&rule.rule), level(rule.level)));
        for note in &rule.notes {
            out.push_str(&format!("    {}\n", shown(note)));
        }
    }
    for note in &report.notes {
        out.push_str(&format!("  note: {}\n", shown(note)));
    }
    out
}

/// The sandbox's agentd link, which the process commands need.
pub fn linked(target: &Target) -> Result<&AgentdSandbox, Box<dyn std::error::Error>> {
    let sandbox = target.sandbox();
    sandbox
        .agentd()
        .ok_or_else(|| format!("{} has no agentd link: processes need one", shown(sandbox.id())).into())
}

//! `exec`: a command over the agentd link (live output, cwd, env, `--permission`, `--detach`), or
//! through the contract's `execute` when the sandbox has no link.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use agentd_host::contract::derived::shell_quote;
use agentd_host::{BaseSandbox, SandboxError};
use agentd_protocol::ExecRequest;
use agentd_protocol::profile::ProfileOverride;

use crate::target::Target;
use crate::{AGENTCTL_FAILED, Cli, ExecArgs, exit_status, processes};

pub async fn exec(
    cli: &Cli,
    args: &ExecArgs,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // The private sandbox has them in its own profile already.
    let permissions = match target {
        Target::Private(_) => Vec::new(),
        _ => cli.permissions.clone(),
    };
    let Some(agentd) = target.sandbox().agentd() else {
        if args.detach {
            return Err("--detach needs a sandbox with an agentd link".into());
        }
        if !permissions.is_empty() {
            return Err("--permission needs a sandbox with an agentd link".into());
        }
        return exec_contract(cli, args, target.sandbox()).await;
    };
    let request = ExecRequest {
        command: args.command.join(" "),
        cwd: args.cwd.clone(),
        env: args.env.iter().cloned().collect(),
        timeout: args.timeout,
        profile: (!permissions.is_empty())
            .then(|| Box::new(ProfileOverride { permissions, ..ProfileOverride::default() })),
        ..ExecRequest::default()
    };
    if args.detach {
        if let Some(created) = target.created() {
            return Err(format!(
                "--detach: {created} ends with this command, and its processes with it: start a                  session with `agentctl up`, or use --url or a KIND-attach:ID sandbox"
            )
            .into());
        }
        return processes::detach(agentd, request).await;
    }
    let mut stdout = std::io::stdout();
    let mut print = |data: &[u8]| {
        let _ = stdout.write_all(data);
        let _ = stdout.flush();
    };
    let live: Option<agentd_host::contract::link::OutputSink<'_>> =
        if cli.json { None } else { Some(&mut print) };
    let result = match agentd.exec(request, live).await {
        Ok(result) => result,
        Err(SandboxError::Refused { message, .. }) => return Err(message.into()),
        Err(err) => return Err(err.into()),
    };
    if cli.json {
        println!("{}", agentd_protocol::ServerMessage::ExecResult(result.clone()).to_json());
    } else if result.ending.timed_out {
        eprintln!("agentctl: timed out after {:.1}s; the process tree was killed", result.duration);
    } else if result.truncated {
        eprintln!("agentctl: output truncated: {} bytes in all", result.total_bytes);
    }
    Ok(exit_status(&result))
}

/// `exec` through the contract's `execute` (a sandbox without an agentd link): cwd and env become
/// shell text, the output comes at the end, and `--json` prints the contract's `ExecuteResponse`.
async fn exec_contract(
    cli: &Cli,
    args: &ExecArgs,
    sandbox: &dyn BaseSandbox,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let timeout = args.timeout.map(Duration::try_from_secs_f64).transpose()?;
    let response = sandbox.execute(&contract_command(args), timeout).await?;
    if cli.json {
        println!("{}", serde_json::to_string(&response)?);
    } else {
        print!("{}", response.output);
        std::io::stdout().flush()?;
        if response.truncated {
            eprintln!("agentctl: output truncated");
        }
    }
    Ok(ExitCode::from(response.exit_code.and_then(|code| u8::try_from(code).ok()).unwrap_or(AGENTCTL_FAILED)))
}

/// The `sh` text of an `exec` with its `--cwd` and `--env` for a sandbox that has only `execute`.
fn contract_command(args: &ExecArgs) -> String {
    let mut command = String::new();
    if let Some(cwd) = &args.cwd {
        command.push_str(&format!("cd {} || exit 1\n", shell_quote(cwd)));
    }
    for (key, value) in &args.env {
        command.push_str(&format!("export {}={}\n", shell_quote(key), shell_quote(value)));
    }
    command.push_str(&args.command.join(" "));
    command
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::Cmd;

    /// `--cwd` and `--env` survive as shell text, quotes and spaces included, and a missing cwd
    /// stops the command (as agentd refuses it on the native path).
    #[test]
    fn exec_options_become_shell_text_for_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let cli = Cli::parse_from([
            "agentctl",
            "exec",
            "--cwd",
            dir.path().to_str().unwrap(),
            "--env",
            "A=it's a b",
            "--env",
            "B=$HOME",
            "--",
            "printf '%s|%s|%s' \"$A\" \"$B\" \"$PWD\";",
            "exit 6",
        ]);
        let Cmd::Exec(args) = &cli.command else { panic!("not exec") };
        let out = std::process::Command::new("sh").arg("-c").arg(contract_command(args)).output().unwrap();
        assert_eq!(out.status.code(), Some(6));
        let expected = format!("it's a b|$HOME|{}", dir.path().display());
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);

        let cli = Cli::parse_from(["agentctl", "exec", "--cwd", "/no/such/dir", "--", "echo ran"]);
        let Cmd::Exec(args) = &cli.command else { panic!("not exec") };
        let out = std::process::Command::new("sh").arg("-c").arg(contract_command(args)).output().unwrap();
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(1), b"".as_slice()));
    }
}

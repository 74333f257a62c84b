//! The process commands: `exec --detach`, `ps`, `attach`, `kill` and `shell` (an interactive
//! terminal in the sandbox, like `docker exec -it`).

use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::process::ExitCode;

use agentd_host::AgentdSandbox;
use agentd_host::contract::link::ProcessEvent;
use agentd_protocol::{ExecRequest, ProcessInfo, ProcessState, TerminalSize};
use nix::sys::termios::{self, SetArg, Termios};

/// Grace of an interactive shell whose client vanished: it may reconnect within it.
const SHELL_KEEP_SECS: f64 = 30.0;

/// Starts `request` kept with no grace limit and prints its process id, only it, on stdout.
pub async fn detach(
    agentd: &AgentdSandbox,
    mut request: ExecRequest,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    request.keep = Some(0.0);
    let spawned = agentd.link().await?.spawn(request).await?;
    println!("{}", spawned.process);
    Ok(ExitCode::SUCCESS)
}

/// `ps`: a table, or with `json` one JSON array.
pub async fn ps(agentd: &AgentdSandbox, json: bool) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let processes = agentd.link().await?.processes().await?;
    if json {
        println!("{}", serde_json::to_string(&processes)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<14} {:<8} {:>7} {:>5} {:>12}  COMMAND", "PROCESS", "STATE", "PID", "EXIT", "BYTES");
    for process in &processes {
        println!("{}", row(process));
    }
    Ok(ExitCode::SUCCESS)
}

fn row(process: &ProcessInfo) -> String {
    let state = match (process.state, process.kept) {
        (ProcessState::Running, true) => "kept",
        (ProcessState::Running, false) => "running",
        (ProcessState::Exited, _) => "exited",
    };
    let exit = process.exit_code.map_or("-".to_owned(), |code| code.to_string());
    let flat = process.command.replace('\n', " ");
    let mut command = agentd_host::escape_controls(&flat).into_owned();
    if process.command_truncated {
        // agentd lists a long command's head only.
        command.push('…');
    }
    format!(
        "{:<14} {:<8} {:>7} {:>5} {:>12}  {command}",
        process.process, state, process.pid, exit, process.total_bytes
    )
}

/// `attach`: the output from byte `from`, then exits with the process's exit code, as `exec` would.
/// A link that drops meanwhile is healed: the output goes on from the last byte printed.
pub async fn attach(
    agentd: &AgentdSandbox,
    process: &str,
    from: u64,
    json: bool,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if json {
        let result = agentd.link().await?.attach(process, from, None, Some(0.0)).await?;
        println!("{}", agentd_protocol::ServerMessage::ExecResult(result.clone()).to_json());
        return Ok(super::exit_status(&result));
    }
    let mut followed = agentd.process(process, from);
    let mut stdout = std::io::stdout();
    while let Some(event) = followed.next().await? {
        match event {
            ProcessEvent::Output(data) => {
                stdout.write_all(&data)?;
                stdout.flush()?;
            }
            ProcessEvent::Gap(offset) => {
                eprintln!("agentctl: output past byte {offset} was not kept (the journal's cap)");
            }
            ProcessEvent::Ended(result) => return Ok(super::exit_status(&result)),
        }
    }
    Err(format!("process {process} ended without a result").into())
}

/// `kill`: the kill ladder, or one signal.
pub async fn kill(
    agentd: &AgentdSandbox,
    process: &str,
    signal: Option<&str>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let signalled = agentd.link().await?.kill(process, signal).await?;
    if signalled == 0 {
        eprintln!("agentctl: nothing of process {process} was running");
    }
    Ok(ExitCode::SUCCESS)
}

/// `shell`: a login shell under a terminal the size of this one, this terminal in raw mode until
/// it ends; its exit code is agentctl's.
pub async fn shell(
    agentd: &AgentdSandbox,
    command: Option<String>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let size = terminal_size().unwrap_or(TerminalSize { rows: 24, cols: 80 });
    let command = command.unwrap_or_else(|| {
        "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi".to_owned()
    });
    let request = ExecRequest {
        command,
        pty: Some(size),
        keep: Some(SHELL_KEEP_SECS),
        stream: true,
        timeout: Some(0.0),
        ..ExecRequest::default()
    };
    let link = agentd.link().await?;
    let mut spawned = link.spawn(request).await?;
    let process = spawned.process.clone();
    let _raw = RawMode::enter();
    // Keystrokes: read on a thread of their own (a blocking read), written in order.
    let (keys_tx, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let mut stdout = std::io::stdout();
    loop {
        tokio::select! {
            event = spawned.next() => match event? {
                Some(ProcessEvent::Output(data)) => {
                    stdout.write_all(&data)?;
                    stdout.flush()?;
                }
                Some(ProcessEvent::Gap(_)) => {}
                Some(ProcessEvent::Ended(result)) => return Ok(super::exit_status(&result)),
                None => return Ok(ExitCode::SUCCESS),
            },
            Some(key) = keys.recv() => link.write_stdin(&process, &key).await?,
            _ = winch.recv() => {
                if let Some(size) = terminal_size() {
                    link.resize(&process, size.rows, size.cols).await?;
                }
            }
        }
    }
}

/// The size of the terminal on stdout, if it is one.
fn terminal_size() -> Option<TerminalSize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize`, which lives across the call.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &raw mut size) };
    (rc == 0 && size.ws_row > 0 && size.ws_col > 0)
        .then_some(TerminalSize { rows: size.ws_row, cols: size.ws_col })
}

/// This terminal in raw mode (keys go to the sandbox's terminal as typed); restored when dropped.
struct RawMode(Option<Termios>);

impl RawMode {
    fn enter() -> Self {
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else { return Self(None) };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        if termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).is_err() {
            return Self(None);
        }
        Self(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, saved);
        }
    }
}

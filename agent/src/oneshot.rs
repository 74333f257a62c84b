//! The one-shot CLI: `agentd fs …` and `agentd exec …`, what the host's derived path runs through any
//! exec channel (a provider's API, `docker exec`). They call the same code as the server ([`crate::fs`],
//! [`crate::exec`]), so results are identical to the native ones.
//!
//! `agentd fs request` and `agentd exec` read their input on stdin, so the host can pass arbitrary
//! text inside a quoted heredoc with a random delimiter; nothing is ever interpolated into the shell.

use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use agentd_protocol::framing::unframe;
use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_protocol::limits::DEFAULT_MAX_CAPTURE_BYTES;
use agentd_protocol::meta::MetaLine;
use agentd_protocol::{ExecRequest, Offload};
use clap::Subcommand;

use crate::admission::{self, ServerPolicy};
use crate::cancel::Cancel;
use crate::exec::{ExecSpec, Executor, Watchers};
use crate::reaper::Reaper;
use crate::root::Workspace;
use crate::scratch::Scratch;

/// `agentd fs …`: one file verb (the same arguments as `agentctl`'s); prints its result as one line of
/// JSON (the protocol's `FsResponse`).
#[derive(Subcommand)]
pub enum FsCommand {
    #[command(flatten)]
    Verb(agentd_protocol::cli::FsCommand),
    /// Read one request as JSON on stdin (`{"verb":"read","path":…}`); for programs.
    Request,
}

/// `agentd fs …`: exit status 0 whenever a result was printed (failures are in its `error`).
pub fn fs(command: FsCommand) -> ExitCode {
    let request = match command {
        FsCommand::Verb(verb) => {
            // `write`'s content; the error is the message to print.
            let content = || match read_stdin() {
                Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "the content on stdin is not UTF-8")
                }),
                Err(err) => Err(std::io::Error::new(err.kind(), format!("cannot read stdin: {err}"))),
            };
            match verb.into_request(content) {
                Ok(request) => request,
                Err(err) => return usage(&err.to_string()),
            }
        }
        FsCommand::Request => {
            let parsed = read_stdin().map_err(|e| e.to_string()).and_then(|bytes| {
                serde_json::from_slice::<FsRequest>(unframe(&bytes)).map_err(|e| e.to_string())
            });
            match parsed {
                Ok(request) => request,
                Err(err) => return usage(&format!("bad request on stdin: {err}")),
            }
        }
    };
    let base = match std::env::current_dir() {
        Ok(dir) => dir,
        Err(err) => return usage(&format!("no usable working directory: {err}")),
    };
    // Nothing cancels a one-shot verb but a signal, which ends the process anyway.
    print_json(&crate::fs::run(request, &Workspace::open(base), &Cancel::default()))
}

fn print_json(response: &FsResponse) -> ExitCode {
    match serde_json::to_string(response) {
        Ok(text) => {
            // A reader that went away (`| head`) is not an error worth a panic.
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(err) => usage(&format!("cannot write the result: {err}")),
            }
        }
        Err(err) => usage(&format!("cannot encode the result: {err}")),
    }
}

/// `agentd exec`: the command comes on stdin.
#[derive(clap::Args)]
pub struct ExecArgs {
    /// Seconds before the command's process tree is killed (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    timeout: f64,
    /// Keep output above --inline-budget bytes in this file and print a preview.
    #[arg(long, requires = "inline_budget")]
    capture_path: Option<String>,
    /// With --capture-path: output of at most this many bytes is printed whole.
    #[arg(long)]
    inline_budget: Option<u64>,
    /// Bytes stored at most; the rest is counted and dropped.
    #[arg(long, default_value_t = DEFAULT_MAX_CAPTURE_BYTES)]
    max_capture_bytes: u64,
    /// Print `<SENTINEL> <exit> <offloaded> <capped> <omitted>` as the first line (`capped` is 1
    /// also when output was lost because the capture file could not be written).
    #[arg(long)]
    meta: Option<String>,
}

/// Runs the command from stdin with the server's capture rules; exits with its exit code.
pub fn exec(args: ExecArgs) -> ExitCode {
    let command = match read_stdin().map(|bytes| String::from_utf8(unframe(&bytes).to_vec())) {
        Ok(Ok(command)) => command,
        Ok(Err(_)) => return usage("the command on stdin is not UTF-8"),
        Err(err) => return usage(&format!("cannot read stdin: {err}")),
    };
    // The same admission as a request over the link: every number validated there.
    let request = ExecRequest {
        command,
        timeout: Some(args.timeout),
        max_capture_bytes: Some(args.max_capture_bytes),
        offload: match (args.capture_path, args.inline_budget) {
            (Some(capture_path), Some(inline_budget)) => Some(Offload { capture_path, inline_budget }),
            _ => None,
        },
        ..ExecRequest::default()
    };
    let policy = ServerPolicy { profile: None, default_timeout: None };
    let spec = match admission::admit(&policy, request) {
        Ok(admitted) => ExecSpec::new(admitted, None, None),
        Err(err) => return usage(&err.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(crate::reaper::keep_signals_off_this_thread)
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return usage(&format!("cannot start the runtime: {err}")),
    };
    let outcome = runtime.block_on(async {
        let workspace = std::env::current_dir()?;
        let scratch = Scratch::make(&[std::env::temp_dir()]).map_err(std::io::Error::other)?;
        let executor = Executor::new(
            Reaper::start()?,
            Workspace::open(workspace),
            &scratch,
            Duration::from_secs(1),
            Cancel::default(),
        );
        let result =
            executor.run(spec, &Cancel::default(), Watchers::default(), None).await.map(|(result, _)| result);
        drop(executor);
        scratch.remove();
        Ok::<_, std::io::Error>(result)
    });
    let result = match outcome {
        Ok(Ok(result)) => result,
        Ok(Err(err)) => return usage(&err.to_string()),
        Err(err) => return usage(&err.to_string()),
    };
    let output = match result.output_bytes() {
        Ok(bytes) => bytes,
        Err(err) => return usage(&err.to_string()),
    };
    let mut stdout = std::io::stdout().lock();
    if let Some(sentinel) = &args.meta {
        let meta = MetaLine {
            exit_code: result.exit_code,
            offloaded: result.offloaded,
            // The field the host reads as `truncated`: set for output lost to a capture file that
            // could not be written too, where the contract's `capped` would say 0.
            capped: (result.offloaded && result.capped) || result.capture_note().is_some(),
            omitted: result.omitted_lines,
        };
        let _ = stdout.write_all(meta.render(sentinel).as_bytes());
    }
    let _ = stdout.write_all(&output);
    if let Some(note) = result.capture_note() {
        if !output.is_empty() && !output.ends_with(b"\n") {
            let _ = stdout.write_all(b"\n");
        }
        let _ = stdout.write_all(note.as_bytes());
    }
    let _ = stdout.flush();
    ExitCode::from(u8::try_from(result.exit_code).unwrap_or(1))
}

fn read_stdin() -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// agentd's own failure (not the command's): a message and exit status 125.
fn usage(message: &str) -> ExitCode {
    eprintln!("agentd: {message}");
    ExitCode::from(125)
}

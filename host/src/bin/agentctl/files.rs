//! The file verbs (`ls`, `read`, `write`, `edit`, `glob`, `grep`, `delete`): one request through
//! the contract's `fs`, its result printed for a person or as JSON.

use std::process::ExitCode;

use agentd_protocol::{FsRequest, FsResponse};

use crate::target::Target;
use crate::{Cli, say, shown};

/// Runs a file verb; prints its result (the protocol's type with `--json`). Exit status 1 when the
/// result carries an error.
pub async fn verb(
    cli: &Cli,
    request: FsRequest,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let response = target.sandbox().fs(request).await?;
    if cli.json {
        println!("{}", serde_json::to_string(&response)?);
    }
    let error = match &response {
        FsResponse::Ls(r) => r.error.clone(),
        FsResponse::Read(r) => r.error.clone(),
        FsResponse::Write(r) => r.error.clone(),
        FsResponse::Edit(r) => r.error.clone(),
        FsResponse::Glob(r) => r.error.clone(),
        FsResponse::Grep(r) => r.error.clone(),
        FsResponse::Delete(r) => r.error.clone(),
    };
    if let Some(error) = error {
        if !cli.json {
            say(error);
        }
        return Ok(ExitCode::FAILURE);
    }
    if !cli.json {
        print_human(&response);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(response: &FsResponse) {
    match response {
        FsResponse::Ls(r) => {
            for entry in r.entries.iter().flatten() {
                println!("{}{}", shown(&entry.path), if entry.is_dir { "/" } else { "" });
            }
        }
        FsResponse::Read(r) => {
            if let Some(data) = &r.file_data {
                println!("{}", data.content);
            }
            if let (Some(next), Some(total)) = (r.next_offset, r.total_lines) {
                eprintln!("agentctl: more lines follow ({total} in all); continue with --offset {next}");
            } else if let Some(next) = r.next_offset {
                eprintln!("agentctl: more lines follow; continue with --offset {next}");
            }
        }
        FsResponse::Write(r) => println!("{}", shown(r.path.as_deref().unwrap_or_default())),
        FsResponse::Edit(r) => {
            let path = shown(r.path.as_deref().unwrap_or_default());
            println!("{path}: {} replaced", r.occurrences.unwrap_or(0))
        }
        FsResponse::Glob(r) => {
            for entry in r.matches.iter().flatten() {
                println!("{}", shown(&entry.path));
            }
            if r.truncated {
                eprintln!("agentctl: results truncated ({:?})", r.truncation_reason);
            }
        }
        FsResponse::Grep(r) => {
            for m in r.matches.iter().flatten() {
                // The path is a name from the sandbox; the line is the file's content, as `read` prints it.
                println!("{}:{}:{}", shown(&m.path), m.line, m.text);
            }
        }
        FsResponse::Delete(_) => {}
    }
}

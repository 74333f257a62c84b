//! The file verbs and the offload over nothing but `execute`: what every sandbox with an exec channel
//! (Docker, Modal, Daytona) gets for free. The request travels as JSON inside a quoted heredoc with a
//! random delimiter (`agentd fs request`), or the command itself does (`agentd exec`), so no byte of it
//! is ever interpreted by the shell; results are parsed with the protocol crate's types.

use std::time::Duration;

use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_protocol::limits::DEFAULT_MAX_CAPTURE_BYTES;
use agentd_protocol::{ExecuteOffloadResult, framing, meta};
use rand::RngCore;

use crate::contract::error::Result;
use crate::contract::{BaseSandbox, OffloadRequest};

/// Extra time the exec channel gets beyond agentd's own timeout, so agentd (which kills the whole
/// tree and still reports) fires first.
const CHANNEL_MARGIN: Duration = Duration::from_secs(5);

/// Runs `request` through `agentd fs request`. Output that is not a result becomes the verb's own
/// error value (the contract's catch-all), never an `Err`: transport failures are `execute`'s.
pub async fn fs<S: BaseSandbox + ?Sized>(sandbox: &S, request: FsRequest) -> FsResponse {
    let script = match fs_script(sandbox.agentd_command(), &request, &mut rand::rng()) {
        Ok(script) => script,
        Err(err) => return unexpected(&request, &err.to_string()),
    };
    let response = match sandbox.execute(&script, None).await {
        Ok(response) => response,
        Err(err) => return unexpected(&request, &err.to_string()),
    };
    let output = response.output.trim_end_matches('\n');
    match serde_json::from_str::<FsResponse>(output) {
        Ok(parsed) if parsed.verb() == request.verb() => parsed,
        _ => unexpected(&request, output),
    }
}

/// The script that runs `request`: the JSON in a quoted heredoc whose delimiter `rng` draws.
pub fn fs_script<R: RngCore + ?Sized>(
    agentd: &str,
    request: &FsRequest,
    rng: &mut R,
) -> serde_json::Result<String> {
    let json = serde_json::to_string(request)?;
    Ok(framing::frame(&format!("{agentd} fs request"), &json, rng))
}

/// `agentd exec` with a fresh random sentinel; the meta line is parsed by the contract's rules.
pub async fn execute_with_offload<S: BaseSandbox + ?Sized>(
    sandbox: &S,
    request: &OffloadRequest,
) -> Result<ExecuteOffloadResult> {
    let offload = OffloadScript::new(sandbox.agentd_command(), request, &mut rand::rng());
    offload.run(sandbox, request.timeout).await
}

/// A framed `agentd exec` call and the sentinel its result line must carry.
pub struct OffloadScript {
    pub sentinel: String,
    pub script: String,
}

impl OffloadScript {
    /// Draws the sentinel, then the heredoc delimiter, from `rng`.
    pub fn new<R: RngCore + ?Sized>(agentd: &str, request: &OffloadRequest, rng: &mut R) -> Self {
        let OffloadRequest { command, capture_path, inline_budget, max_capture_bytes, timeout } = request;
        let sentinel = meta::sentinel(rng);
        let max_capture_bytes = max_capture_bytes.unwrap_or(DEFAULT_MAX_CAPTURE_BYTES);
        let mut head = format!(
            "{agentd} exec --meta {sentinel} --capture-path {} --inline-budget {inline_budget} --max-capture-bytes {max_capture_bytes}",
            shell_quote(capture_path),
        );
        if let Some(timeout) = timeout.filter(|t| !t.is_zero()) {
            head.push_str(&format!(" --timeout {}", timeout.as_secs_f64()));
        }
        let script = framing::frame(&head, command, rng);
        Self { sentinel, script }
    }

    /// Runs the script through `execute` and parses its result line.
    pub async fn run<S: BaseSandbox + ?Sized>(
        self,
        sandbox: &S,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOffloadResult> {
        let channel_timeout = timeout.map(|t| if t.is_zero() { t } else { t + CHANNEL_MARGIN });
        let response = sandbox.execute(&self.script, channel_timeout).await?;
        Ok(meta::parse(response, &self.sentinel))
    }
}

/// Single-quotes `text` for `sh`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The contract's catch-all for output that is not a result: the verb's error prefix and at most
/// 200 characters of what came back.
fn unexpected(request: &FsRequest, raw: &str) -> FsResponse {
    let detail: String = raw.chars().take(200).collect();
    let detail = if detail.is_empty() { "(empty)".to_owned() } else { detail };
    let error = match request {
        FsRequest::Ls { path } => format!("Path '{path}': unexpected server response: {detail}"),
        FsRequest::Read { path, .. } => format!("File '{path}': unexpected server response: {detail}"),
        FsRequest::Write { path, .. } => {
            format!("Failed to write file '{path}': unexpected server response: {detail}")
        }
        FsRequest::Edit { path, .. } => {
            format!("Error editing file '{path}': unexpected server response: {detail}")
        }
        FsRequest::Glob { path, .. } => {
            let root = glob_root(path.as_deref());
            format!("Path '{root}': glob helper emitted unexpected output: {detail}")
        }
        FsRequest::Grep { path, .. } => format!("Path '{}': {detail}", path.as_deref().unwrap_or(".")),
        FsRequest::Delete { path } => format!("Error deleting file '{path}': {detail}"),
    };
    request.verb().failed(error)
}

/// The glob root as the contract prints it: `/` when missing or empty, a leading `/` added.
fn glob_root(path: Option<&str>) -> String {
    match path {
        None | Some("") => "/".to_owned(),
        Some(p) if p.starts_with('/') => p.to_owned(),
        Some(p) => format!("/{p}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(shell_quote("a b'c"), "'a b'\\''c'");
    }
}

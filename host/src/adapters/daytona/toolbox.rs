//! The sandbox's toolbox (provider facts §B2, §B4, §B5): the bulk file endpoints (the adapter's own
//! transfer channel) and the exec fallback. A bulk download is read part by part ([`BulkParts`]):
//! into memory for the contract's `download_files` (each file bounded), or streamed into a sink for
//! a download to a local path (any size, a chunk in memory); either way a part is held to the
//! `Content-Length` it announces.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use agentd_protocol::{ExecuteResponse, FileDownloadResponse, FileUploadResponse, TransferError};
use base64::Engine as _;
use futures_util::Stream;
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use super::api::{PROVIDER, error_chain, error_message, join, status_error};
use crate::adapters::capped::{EXEC_RESULT_MAX, JSON_BODY_MAX, read_capped};
use crate::contract::agentd::DOWNLOAD_FILES_MOST;
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::Downloaded;

use crate::contract::deadlines::DEFAULT_EXEC_TIMEOUT;
/// The HTTP call outlives the command's own timeout by this much, so the toolbox's 408 comes first.
const EXEC_MARGIN: Duration = Duration::from_secs(5);
/// Wrapped commands longer than this travel as an uploaded script: one `sh -c` argument is
/// limited to 128 KiB by Linux (MAX_ARG_STRLEN).
const INLINE_COMMAND_MAX: usize = 64 * 1024;

/// One sandbox's toolbox: base URL and the API key.
#[derive(Clone)]
pub struct Toolbox {
    http: reqwest::Client,
    /// `toolboxProxyUrl` + the sandbox id (as one segment).
    base: Url,
    key: String,
    sandbox: String,
}

/// A transfer's HTTP time: a minute plus a second per MiB (generous for a slow link, never endless).
fn transfer_timeout(bytes: usize) -> Duration {
    Duration::from_secs(60 + (bytes >> 20) as u64)
}

impl Toolbox {
    pub fn new(http: reqwest::Client, base: Url, key: String, sandbox: String) -> Self {
        Self { http, base, key, sandbox }
    }

    /// The toolbox endpoint `segments` (e.g. `["files", "bulk-upload"]`) of this sandbox.
    fn url(&self, segments: &[&str]) -> Result<Url> {
        join(&self.base, segments)
    }

    fn transport(&self, what: &str, err: &reqwest::Error) -> SandboxError {
        SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("{what} in sandbox {}: {}", self.sandbox, error_chain(err)),
        }
    }

    /// Runs `command` through `POST /process/execute`, wrapped in §B5's base64 `sh` form so it works
    /// on daemons with and without a shell; a 408 (the toolbox killed it) reads as exit code 124.
    pub async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        let timeout = timeout.unwrap_or(DEFAULT_EXEC_TIMEOUT);
        let mut wrapped = wrap(command);
        let mut script = None;
        if wrapped.len() > INLINE_COMMAND_MAX {
            let path = format!("/tmp/.agentd-cmd-{}.sh", super::random_suffix());
            let up = self.upload(&[(path.clone(), command.as_bytes().to_vec())]).await?;
            if let Some(error) = up.into_iter().find_map(|u| u.error) {
                return Err(SandboxError::Provider {
                    provider: PROVIDER,
                    status: None,
                    message: format!("cannot upload a long command to {path}: {error}"),
                });
            }
            wrapped = wrap(&format!("sh {path}; s=$?; rm -f {path}; exit $s"));
            script = Some(path);
        }
        let mut body = serde_json::json!({ "command": wrapped });
        let mut request = self.http.post(self.url(&["process", "execute"])?).bearer_auth(&self.key);
        if !timeout.is_zero() {
            // Whole seconds on the wire; never round a short timeout down to "none".
            body["timeout"] = serde_json::json!(crate::contract::deadlines::whole_secs(timeout));
            request = request.timeout(timeout + EXEC_MARGIN);
        }
        let what = "toolbox exec";
        let response = request.json(&body).send().await;
        let response = match response {
            Err(err) if err.is_timeout() => {
                return Err(SandboxError::Timeout {
                    what: format!("toolbox exec in Daytona sandbox {}", self.sandbox),
                    after: timeout + EXEC_MARGIN,
                });
            }
            other => other.map_err(|e| self.transport(what, &e))?,
        };
        let status = response.status();
        let what_here = format!("{what} in Daytona sandbox {}", self.sandbox);
        let body = read_capped(response, EXEC_RESULT_MAX, &what_here, |e| self.transport(what, e)).await?;
        let text = String::from_utf8_lossy(&body);
        if status == StatusCode::REQUEST_TIMEOUT {
            if let Some(path) = script {
                // The wrapper's own `rm` was killed with the command.
                let _ = Box::pin(self.execute(&format!("rm -f {path}"), Some(Duration::from_secs(30)))).await;
            }
            // The toolbox killed the process group and sends no output: say so as agentd does.
            return Ok(ExecuteResponse {
                output: crate::contract::agentd::timeout_note(timeout.as_secs_f64()),
                exit_code: Some(124),
                truncated: false,
            });
        }
        if !status.is_success() {
            return Err(status_error(status, &text, &format!("exec in sandbox {}", self.sandbox)));
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Executed {
            result: String,
            exit_code: Option<i32>,
            code: Option<i32>,
        }
        let executed: Executed = serde_json::from_str(&text).map_err(|e| {
            let shown: String = text.chars().take(200).collect();
            SandboxError::Protocol(format!("toolbox exec answered {e}: {shown}"))
        })?;
        // A missing exit code is an error, never a silent 0.
        let exit_code = executed
            .exit_code
            .or(executed.code)
            .ok_or_else(|| SandboxError::Protocol("toolbox exec answered without an exit code".to_owned()))?;
        Ok(ExecuteResponse { output: executed.result, exit_code: Some(exit_code), truncated: false })
    }

    /// Writes files through `POST /files/bulk-upload`; one response per input, in order.
    pub async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        let mut out: Vec<FileUploadResponse> = files
            .iter()
            .map(|(path, _)| FileUploadResponse {
                path: path.clone(),
                error: TransferError::check_path(path).err().map(|c| c.as_str().to_owned()),
            })
            .collect();
        let valid: Vec<usize> = (0..files.len()).filter(|&i| out[i].error.is_none()).collect();
        if valid.is_empty() {
            return Ok(out);
        }
        if let Err(error) = self.upload_batch(files, &valid).await? {
            if valid.len() == 1 {
                out[valid[0]].error = Some(error);
            } else {
                // The batch fails whole: find each file's own outcome (the batch may be partly written;
                // rewriting a file is harmless).
                for &i in &valid {
                    out[i].error = self.upload_batch(files, &[i]).await?.err();
                }
            }
        }
        Ok(out)
    }

    /// One bulk request with files `which`: `Ok(Err(code))` when the toolbox refused it.
    async fn upload_batch(
        &self,
        files: &[(String, Vec<u8>)],
        which: &[usize],
    ) -> Result<std::result::Result<(), String>> {
        let mut form = reqwest::multipart::Form::new();
        let mut size = 0;
        // §B4: each file's `.path` text field strictly before its `.file` part.
        for (n, &i) in which.iter().enumerate() {
            let (path, bytes) = &files[i];
            size += bytes.len();
            let part = reqwest::multipart::Part::bytes(bytes.clone())
                .file_name(path.clone())
                .mime_str("application/octet-stream")
                .map_err(|e| SandboxError::Protocol(e.to_string()))?;
            form = form.text(format!("files[{n}].path"), path.clone()).part(format!("files[{n}].file"), part);
        }
        let response = self
            .http
            .post(self.url(&["files", "bulk-upload"])?)
            .bearer_auth(&self.key)
            .timeout(transfer_timeout(size))
            .multipart(form)
            .send()
            .await
            .map_err(|e| self.transport("bulk upload", &e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(Ok(()));
        }
        let what = format!("bulk upload in Daytona sandbox {}", self.sandbox);
        let body = read_capped(response, JSON_BODY_MAX, &what, |e| self.transport("bulk upload", e)).await?;
        let text = String::from_utf8_lossy(&body);
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::NOT_FOUND {
            return Err(status_error(status, &text, &format!("sandbox {}", self.sandbox)));
        }
        Ok(Err(file_error(&text)))
    }

    /// Reads files through `POST /files/bulk-download`; one response per input, in order. Parts are
    /// matched by filename (`filename*` preferred); error parts become the contract's codes. A body
    /// that ends before its closing boundary is an `Err`: the transfer broke. Each file is held
    /// whole (the contract's type), so each has a bound ([`DOWNLOAD_FILES_MOST`]).
    pub async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        let invalid = |path: &str| TransferError::check_path(path).err().map(|c| c.as_str().to_owned());
        let wanted: Vec<&String> = paths.iter().filter(|p| invalid(p).is_none()).collect();
        let mut parts: HashMap<String, VecDeque<std::result::Result<Vec<u8>, String>>> = HashMap::new();
        if !wanted.is_empty() {
            let mut bulk = self.bulk_download(&wanted, DOWNLOAD_FILES_MOST).await?;
            while let Some(part) = bulk.next().await? {
                let (path, outcome) = match part {
                    Part::Error { path, error } => (path, Err(error)),
                    Part::File { path, field, announced } => {
                        let mut bytes = Vec::new();
                        let copied = bulk.copy(field, &path, announced, &mut bytes, &mut |_, _| {}).await?;
                        (path, copied.map(|_| bytes))
                    }
                };
                parts.entry(path).or_default().push_back(outcome);
            }
        }
        Ok(paths
            .iter()
            .map(|path| {
                let outcome = match invalid(path) {
                    Some(code) => Err(code),
                    None => parts
                        .get_mut(path.as_str())
                        .and_then(VecDeque::pop_front)
                        .unwrap_or_else(|| Err(NO_PART.to_owned())),
                };
                match outcome {
                    Ok(content) => {
                        FileDownloadResponse { path: path.clone(), content: Some(content), error: None }
                    }
                    Err(error) => {
                        FileDownloadResponse { path: path.clone(), content: None, error: Some(error) }
                    }
                }
            })
            .collect())
    }

    /// The bulk download of the one file `path`, its part streamed into `sink` as it comes (any
    /// size: memory holds a chunk, not the file), with (bytes so far, announced size or 0) said to
    /// `progress`. A part that announces its `Content-Length` must send exactly that: one byte more
    /// fails at once, fewer at its end. `Ok(Err(error))` is the contract's per-file error.
    pub async fn download_into(
        &self,
        path: &str,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<std::result::Result<Downloaded, String>> {
        if let Err(code) = TransferError::check_path(path) {
            return Ok(Err(code.as_str().to_owned()));
        }
        let wanted = path.to_owned();
        let mut bulk = self.bulk_download(&[&wanted], u64::MAX).await?;
        // The first part for the path is its answer; what may follow is not read.
        match bulk.next().await? {
            Some(Part::Error { error, .. }) => Ok(Err(error)),
            Some(Part::File { path, field, announced }) => {
                bulk.copy(field, &path, announced, sink, progress).await
            }
            None => Ok(Err(NO_PART.to_owned())),
        }
    }

    /// Sends the bulk download of `paths` and opens its multipart answer, each file part at most
    /// `most` bytes (the whole body at most that per path, plus room for headers and error parts).
    async fn bulk_download(&self, paths: &[&String], most: u64) -> Result<BulkParts> {
        let what = "bulk download";
        let response = self
            .http
            .post(self.url(&["files", "bulk-download"])?)
            .bearer_auth(&self.key)
            .json(&serde_json::json!({ "paths": paths }))
            // The size is unknown until the parts come: a generous bound for the whole transfer.
            .timeout(transfer_timeout(1 << 30))
            .send()
            .await
            .map_err(|e| self.transport(what, &e))?;
        let status = response.status();
        if !status.is_success() {
            let what = format!("{what} in sandbox {}", self.sandbox);
            let body = read_capped(response, JSON_BODY_MAX, &what, |e| self.transport(&what, e)).await?;
            return Err(status_error(status, &String::from_utf8_lossy(&body), &what));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let boundary = multer::parse_boundary(&content_type).map_err(|e| {
            SandboxError::Protocol(format!("{what} answered `{content_type}`, not multipart: {e}"))
        })?;
        Ok(BulkParts::new(response.bytes_stream(), boundary, paths, most, &self.sandbox))
    }
}

/// What the bulk download says of a path it sent no part for.
const NO_PART: &str = "the bulk download sent no part for this path";

/// A bulk download's answer, read part by part (§B4).
struct BulkParts {
    multipart: multer::Multipart<'static>,
    /// The paths asked for: parts for others are skipped.
    paths: Vec<String>,
    /// The most bytes of one file part.
    most: u64,
    sandbox: String,
}

/// One part for a path asked for.
enum Part {
    /// Its bytes, still to be read ([`BulkParts::copy`]), and the `Content-Length` it announced.
    File { path: String, field: Box<multer::Field<'static>>, announced: Option<u64> },
    /// Its error part, as the contract's code.
    Error { path: String, error: String },
}

impl BulkParts {
    const WHAT: &'static str = "bulk download";

    /// The parts of `body` (a multipart body with `boundary`) for `paths`, each file part at most
    /// `most` bytes.
    fn new<S, E>(body: S, boundary: String, paths: &[&String], most: u64, sandbox: &str) -> Self
    where
        S: Stream<Item = std::result::Result<bytes::Bytes, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        // Parts for paths not asked for are skipped, but still count against the whole body.
        let whole = most.saturating_mul(paths.len() as u64).saturating_add(JSON_BODY_MAX);
        let limits = multer::SizeLimit::new().whole_stream(whole).for_field("error", JSON_BODY_MAX);
        let constraints = multer::Constraints::new().size_limit(limits);
        let body = ChunkByChunk { body: Box::pin(body), paused: false };
        Self {
            multipart: multer::Multipart::with_constraints(body, boundary, constraints),
            paths: paths.iter().map(|p| (*p).clone()).collect(),
            most,
            sandbox: sandbox.to_owned(),
        }
    }

    /// The next part for a path asked for; `None` after the closing boundary.
    async fn next(&mut self) -> Result<Option<Part>> {
        while let Some(field) = self.multipart.next_field().await.map_err(|e| self.broken(e))? {
            let header = |name| field.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let disposition = header(reqwest::header::CONTENT_DISPOSITION).unwrap_or_default();
            let Some(path) = part_filename(&disposition) else {
                return Err(SandboxError::Protocol(format!(
                    "{}: a part without a filename: {disposition}",
                    Self::WHAT
                )));
            };
            if !self.paths.contains(&path) {
                tracing::debug!("{}: a part for a path not asked for, skipped", Self::WHAT);
                continue;
            }
            let announced = match header(reqwest::header::CONTENT_LENGTH) {
                None => None,
                Some(length) => Some(length.trim().parse::<u64>().map_err(|_| {
                    self.lied(format!("the part of {path} announces a length that is not one: {length:?}"))
                })?),
            };
            if field.name() == Some("error") {
                let body = field.bytes().await.map_err(|e| self.broken(e))?;
                return Ok(Some(Part::Error { path, error: file_error(&String::from_utf8_lossy(&body)) }));
            }
            return Ok(Some(Part::File { path, field: Box::new(field), announced }));
        }
        Ok(None)
    }

    /// Streams the file part `field` of `path` into `sink`, chunk by chunk: past [`Self::most`] it
    /// is [`SandboxError::TooLarge`] (at once when the part announces more), past its announced
    /// length a [`SandboxError::Protocol`] at once, and short of it one at its end.
    async fn copy(
        &self,
        mut field: Box<multer::Field<'static>>,
        path: &str,
        announced: Option<u64>,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<std::result::Result<Downloaded, String>> {
        let too_large = || SandboxError::TooLarge {
            what: format!("{} of {path} in Daytona sandbox {}", Self::WHAT, self.sandbox),
            limit: self.most,
        };
        if announced.is_some_and(|size| size > self.most) {
            return Err(too_large());
        }
        let mut hasher = Sha256::new();
        let mut received = 0u64;
        while let Some(chunk) = field.chunk().await.map_err(|e| self.broken(e))? {
            received += chunk.len() as u64;
            if received > self.most {
                return Err(too_large());
            }
            if let Some(size) = announced.filter(|size| received > *size) {
                return Err(
                    self.lied(format!("the part of {path} sent more than the {size} bytes it announced"))
                );
            }
            hasher.update(&chunk);
            sink.write_all(&chunk).await?;
            progress(received, announced.unwrap_or(0));
        }
        if let Some(size) = announced.filter(|size| received != *size) {
            return Err(self.lied(format!(
                "the part of {path} ended after {received} of the {size} bytes it announced"
            )));
        }
        sink.flush().await?;
        Ok(Ok(Downloaded { size: received, sha256: format!("{:x}", hasher.finalize()) }))
    }

    /// The toolbox's answer does not hold together: `message` says how.
    fn lied(&self, message: String) -> SandboxError {
        SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("{} in sandbox {}: {message}", Self::WHAT, self.sandbox),
        }
    }

    fn broken(&self, err: multer::Error) -> SandboxError {
        match err {
            multer::Error::FieldSizeExceeded { limit, .. } | multer::Error::StreamSizeExceeded { limit } => {
                SandboxError::TooLarge {
                    what: format!("{} in Daytona sandbox {}", Self::WHAT, self.sandbox),
                    limit,
                }
            }
            err => SandboxError::Provider {
                provider: PROVIDER,
                status: None,
                message: format!(
                    "{} in sandbox {} broke off: {}",
                    Self::WHAT,
                    self.sandbox,
                    error_chain(&err)
                ),
            },
        }
    }
}

/// A body handed on one chunk per poll. multer's buffer takes every chunk that is ready before it
/// yields field data, so a sender that keeps ahead of the reader would pile the body up in memory;
/// yielding after each chunk bounds it to a chunk or two.
struct ChunkByChunk<S> {
    body: Pin<Box<S>>,
    paused: bool,
}

impl<S: Stream> Stream for ChunkByChunk<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if std::mem::take(&mut self.paused) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = self.body.as_mut().poll_next(cx);
        self.paused = matches!(next, Poll::Ready(Some(_)));
        next
    }
}

/// The contract's code for a toolbox file error (§B4's codes), else the toolbox's message.
fn file_error(body: &str) -> String {
    #[derive(Deserialize)]
    struct FileError {
        code: Option<String>,
    }
    let message = error_message(body);
    let code = serde_json::from_str::<FileError>(body).ok().and_then(|e| e.code).unwrap_or_default();
    let lower = message.to_lowercase();
    let mapped = match code.as_str() {
        "FILE_NOT_FOUND" => Some(TransferError::FileNotFound),
        "FILE_ACCESS_DENIED" => Some(TransferError::PermissionDenied),
        // The toolbox says INVALID_FILE_PATH for directories too; its message tells them apart.
        "INVALID_FILE_PATH" if lower.contains("directory") && !lower.contains("not a directory") => {
            Some(TransferError::IsDirectory)
        }
        "INVALID_FILE_PATH" => Some(TransferError::InvalidPath),
        _ if lower.contains("is a directory") => Some(TransferError::IsDirectory),
        _ if lower.contains("not a directory") => Some(TransferError::InvalidPath),
        _ if lower.contains("permission denied") => Some(TransferError::PermissionDenied),
        _ if lower.contains("no such file") => Some(TransferError::FileNotFound),
        _ => None,
    };
    mapped.map_or(message, |code| code.as_str().to_owned())
}

/// §B5: `sh -c "echo '<b64>' | base64 -d | sh"`: no byte of the command meets a shell quote, and
/// daemons that split the command into argv (older ones) run it the same as those with a shell.
fn wrap(command: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(command);
    format!("sh -c \"echo '{encoded}' | base64 -d | sh\"")
}

/// The part's filename from its `Content-Disposition`: `filename*` (RFC 5987, percent-encoded) if
/// present, else `filename` with its backslash escapes undone.
fn part_filename(disposition: &str) -> Option<String> {
    let params = disposition_params(disposition);
    let extended = params.iter().find(|(k, _)| k.eq_ignore_ascii_case("filename*")).and_then(|(_, v)| {
        let (_charset, rest) = v.split_once('\'')?;
        let (_language, encoded) = rest.split_once('\'')?;
        percent_decode(encoded)
    });
    extended.or_else(|| params.into_iter().find(|(k, _)| k.eq_ignore_ascii_case("filename")).map(|(_, v)| v))
}

/// `key=value` parameters after the first `;`; quoted values may hold `;` and `\`-escapes.
fn disposition_params(header: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut chars = header.chars().peekable();
    // Skip the disposition type.
    for c in chars.by_ref() {
        if c == ';' {
            break;
        }
    }
    loop {
        let mut key = String::new();
        for c in chars.by_ref() {
            if c == '=' || c == ';' {
                break;
            }
            key.push(c);
        }
        let key = key.trim().to_owned();
        if key.is_empty() && chars.peek().is_none() {
            return params;
        }
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
            // Up to the next parameter.
            for c in chars.by_ref() {
                if c == ';' {
                    break;
                }
            }
        } else {
            for c in chars.by_ref() {
                if c == ';' {
                    break;
                }
                value.push(c);
            }
            value = value.trim().to_owned();
        }
        if !key.is_empty() {
            params.push((key, value));
        }
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_prefer_the_extended_form_and_undo_escapes() {
        let plain = r#"form-data; name="file"; filename="/tmp/a \"q\" \\ b""#;
        assert_eq!(part_filename(plain).as_deref(), Some(r#"/tmp/a "q" \ b"#));
        let both = r#"form-data; name="file"; filename="/tmp/_.txt"; filename*=utf-8''%2Ftmp%2F%C3%A9.txt"#;
        assert_eq!(part_filename(both).as_deref(), Some("/tmp/é.txt"));
        let semicolon = r#"form-data; name="error"; filename="/tmp/a;b""#;
        assert_eq!(part_filename(semicolon).as_deref(), Some("/tmp/a;b"));
        assert_eq!(part_filename("form-data; name=\"file\""), None);
    }

    #[test]
    fn file_errors_map_to_the_contract_codes() {
        let body = |code: &str, message: &str| {
            serde_json::json!({"statusCode": 400, "code": code, "message": message}).to_string()
        };
        assert_eq!(file_error(&body("FILE_NOT_FOUND", "file not found")), "file_not_found");
        assert_eq!(file_error(&body("FILE_ACCESS_DENIED", "denied")), "permission_denied");
        assert_eq!(file_error(&body("INVALID_FILE_PATH", "path is a directory")), "is_directory");
        assert_eq!(file_error(&body("INVALID_FILE_PATH", "not a directory: /a/b")), "invalid_path");
        assert_eq!(file_error(&body("FILE_READ_FAILED", "disk on fire")), "disk on fire");
    }

    /// The parts of a multipart body made of `parts` (name, filename, `Content-Length` header,
    /// bytes), sent in chunks of 7 bytes, for `paths`, each file part at most `most` bytes.
    fn bulk(parts: &[(&str, &str, Option<u64>, &[u8])], paths: &[&str], most: u64) -> BulkParts {
        let mut body = Vec::new();
        for (name, filename, length, bytes) in parts {
            let length = length.map(|n| format!("Content-Length: {n}\r\n")).unwrap_or_default();
            body.extend_from_slice(
                format!("--B\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n{length}\r\n")
                    .as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"--B--\r\n");
        let chunks: Vec<std::result::Result<bytes::Bytes, std::io::Error>> =
            body.chunks(7).map(|c| Ok(bytes::Bytes::copy_from_slice(c))).collect();
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        let paths: Vec<&String> = paths.iter().collect();
        BulkParts::new(futures_util::stream::iter(chunks), "B".to_owned(), &paths, most, "sb")
    }

    /// The next part, copied into memory when it is a file: (path, bytes or error).
    async fn next_copied(
        bulk: &mut BulkParts,
    ) -> Result<Option<(String, std::result::Result<Vec<u8>, String>)>> {
        Ok(match bulk.next().await? {
            None => None,
            Some(Part::Error { path, error }) => Some((path, Err(error))),
            Some(Part::File { path, field, announced }) => {
                let mut bytes = Vec::new();
                let copied = bulk.copy(field, &path, announced, &mut bytes, &mut |_, _| {}).await?;
                assert_eq!(copied.as_ref().map(|d| d.size), Ok(bytes.len() as u64));
                Some((path, copied.map(|_| bytes)))
            }
        })
    }

    #[tokio::test]
    async fn parts_are_read_in_order_skipping_paths_not_asked_for() {
        let error = r#"{"statusCode":404,"code":"FILE_NOT_FOUND","message":"gone"}"#.as_bytes();
        let parts: &[(&str, &str, Option<u64>, &[u8])] = &[
            ("file", "/a", Some(12), b"hello\r\nthere"),
            ("file", "/other", None, b"not asked for"),
            ("error", "/b", None, error),
            ("file", "/c", None, b""),
        ];
        let mut bulk = bulk(parts, &["/a", "/b", "/c"], 1 << 20);
        let mut read = Vec::new();
        while let Some(part) = next_copied(&mut bulk).await.unwrap() {
            read.push(part);
        }
        assert_eq!(
            read,
            [
                ("/a".to_owned(), Ok(b"hello\r\nthere".to_vec())),
                ("/b".to_owned(), Err("file_not_found".to_owned())),
                ("/c".to_owned(), Ok(Vec::new())),
            ]
        );
    }

    #[tokio::test]
    async fn a_part_is_held_to_its_announced_length_and_to_the_bound() {
        let more = bulk(&[("file", "/a", Some(4), b"12345")], &["/a"], 1 << 20);
        let err = next_copied(&mut { more }).await.unwrap_err().to_string();
        assert_eq!(
            err,
            "Daytona: bulk download in sandbox sb: the part of /a sent more than the 4 bytes it announced"
        );
        let fewer = bulk(&[("file", "/a", Some(6), b"12345")], &["/a"], 1 << 20);
        let err = next_copied(&mut { fewer }).await.unwrap_err().to_string();
        assert!(err.ends_with("the part of /a ended after 5 of the 6 bytes it announced"), "{err}");
        let announced = bulk(&[("file", "/a", Some(9), b"123456789")], &["/a"], 8);
        let err = next_copied(&mut { announced }).await.unwrap_err();
        assert!(matches!(err, SandboxError::TooLarge { limit: 8, .. }), "{err}");
        let unannounced = bulk(&[("file", "/a", None, b"123456789")], &["/a"], 8);
        let err = next_copied(&mut { unannounced }).await.unwrap_err();
        assert!(matches!(err, SandboxError::TooLarge { limit: 8, .. }), "{err}");
        let garbled = "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/a\"\r\nContent-Length: x\r\n\r\n1\r\n--B--\r\n";
        let chunks = vec![Ok::<_, std::io::Error>(bytes::Bytes::from(garbled))];
        let paths = ["/a".to_owned()];
        let mut garbled =
            BulkParts::new(futures_util::stream::iter(chunks), "B".to_owned(), &[&paths[0]], 8, "sb");
        let err = garbled.next().await.err().unwrap().to_string();
        assert!(err.contains("announces a length that is not one"), "{err}");
    }

    #[test]
    fn the_wrapper_holds_no_quote_of_the_command() {
        let wrapped = wrap("echo \"it's\" $HOME `x`");
        assert!(wrapped.starts_with("sh -c \"echo '") && wrapped.ends_with("' | base64 -d | sh\""));
        assert_eq!(wrapped.matches('\'').count(), 2);
    }
}

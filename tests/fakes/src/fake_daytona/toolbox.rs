//! The toolbox under `/toolbox/<sandboxId>`: files (bulk and single, both ways) and exec.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::Shared;
use super::docker::{self, ExecEnd, FileError};
use super::state::{error, error_body, now_rfc3339};

type Shd = State<Arc<Shared>>;

/// The boundary Daytona's bulk download uses.
pub const BOUNDARY: &str = "DAYTONA-FILE-BOUNDARY";

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/toolbox/{id}/files/bulk-upload", post(bulk_upload))
        .route("/toolbox/{id}/files/bulk-download", post(bulk_download))
        .route("/toolbox/{id}/files/upload", post(upload))
        .route("/toolbox/{id}/files/download", get(download))
        .route("/toolbox/{id}/process/execute", post(execute))
}

/// The container of a started sandbox, or the error response (returned at once by every caller,
/// so its size does not matter).
#[expect(clippy::result_large_err, reason = "the error response is returned at once by every caller")]
fn container(shared: &Shared, id: &str, uri: &Uri, method: &Method) -> Result<String, Response> {
    let sandboxes = shared.lock_sandboxes();
    let sandbox = sandboxes.get(id).or_else(|| sandboxes.values().find(|s| s.name == id));
    match sandbox {
        None => Err(error(404, "NOT_FOUND", &format!("Sandbox with ID or name {id} not found"), uri, method)),
        Some(s) => match (&s.container, s.state.as_str()) {
            (Some(container), "started") => Ok(container.clone()),
            (_, state) => {
                Err(error(409, "CONFLICT", &format!("Sandbox is not started (state: {state})"), uri, method))
            }
        },
    }
}

fn file_error(err: &FileError, path: &str, uri: &Uri, method: &Method) -> Response {
    let mut body =
        error_body(err.status, err.code, &format!("{path}: {}", err.message), uri.path(), method.as_str());
    if let Some(object) = body.as_object_mut() {
        object.insert("filePath".to_owned(), json!(path));
    }
    let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

fn bad_multipart(message: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"error": message.to_string()}))).into_response()
}

/// `files[<i>].path` / `files[<i>].file` → (i, "path" | "file").
fn field_of(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("files[")?;
    let (index, kind) = rest.split_once("].")?;
    Some((index.parse().ok()?, kind))
}

/// Parts in order: each `.file` needs its `.path` before it. Files are written as they arrive
/// (parent directories created, existing files replaced).
async fn bulk_upload(
    State(shared): Shd,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    mut multipart: Multipart,
) -> Response {
    let container = match container(&shared, &id, &uri, &method) {
        Ok(c) => c,
        Err(response) => return response,
    };
    let mut paths: HashMap<usize, String> = HashMap::new();
    let mut written = Vec::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(err) => return bad_multipart(err),
        };
        let name = field.name().unwrap_or("").to_owned();
        match field_of(&name) {
            Some((index, "path")) => match field.text().await {
                Ok(path) => {
                    paths.insert(index, path);
                }
                Err(err) => return bad_multipart(err),
            },
            Some((index, "file")) => {
                let Some(path) = paths.remove(&index) else {
                    let message = format!("part {name} comes before files[{index}].path");
                    return error(400, "BAD_REQUEST", &message, &uri, &method);
                };
                let bytes = match field.bytes().await {
                    Ok(bytes) => bytes,
                    Err(err) => return bad_multipart(err),
                };
                let size = bytes.len();
                if let Err(err) = docker::write_file(&container, &path, bytes.to_vec()).await {
                    return file_error(&err, &path, &uri, &method);
                }
                written.push(json!({"path": path, "bytes": size}));
            }
            // Other parts are not Daytona's: ignored, as a lenient server would.
            _ => {}
        }
    }
    axum::Json(json!({"files": written})).into_response()
}

#[derive(serde::Deserialize)]
struct PathQuery {
    path: Option<String>,
}

async fn upload(
    State(shared): Shd,
    Path(id): Path<String>,
    Query(query): Query<PathQuery>,
    method: Method,
    uri: Uri,
    mut multipart: Multipart,
) -> Response {
    let container = match container(&shared, &id, &uri, &method) {
        Ok(c) => c,
        Err(response) => return response,
    };
    let Some(path) = query.path.filter(|p| !p.is_empty()) else {
        return error(400, "BAD_REQUEST", "the query parameter path is required", &uri, &method);
    };
    loop {
        match multipart.next_field().await {
            Ok(Some(field)) if field.name() == Some("file") => {
                let bytes = match field.bytes().await {
                    Ok(bytes) => bytes,
                    Err(err) => return bad_multipart(err),
                };
                return match docker::write_file(&container, &path, bytes.to_vec()).await {
                    Ok(()) => StatusCode::OK.into_response(),
                    Err(err) => file_error(&err, &path, &uri, &method),
                };
            }
            Ok(Some(_)) => {}
            Ok(None) => return error(400, "BAD_REQUEST", "the part `file` is required", &uri, &method),
            Err(err) => return bad_multipart(err),
        }
    }
}

async fn download(
    State(shared): Shd,
    Path(id): Path<String>,
    Query(query): Query<PathQuery>,
    method: Method,
    uri: Uri,
) -> Response {
    let container = match container(&shared, &id, &uri, &method) {
        Ok(c) => c,
        Err(response) => return response,
    };
    let Some(path) = query.path.filter(|p| !p.is_empty()) else {
        return error(400, "BAD_REQUEST", "the query parameter path is required", &uri, &method);
    };
    match docker::read_file(&container, &path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(err) => file_error(&err, &path, &uri, &method),
    }
}

/// `filename="…"` with `\` and `"` escaped and CR/LF dropped.
fn quoted(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '\r' && *c != '\n')
        .flat_map(|c| match c {
            '\\' | '"' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}

/// RFC 5987 `utf-8''…` value.
fn pct(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "txt" | "md" | "log" => "text/plain; charset=utf-8",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        _ => "application/octet-stream",
    }
}

fn part(out: &mut Vec<u8>, name: &str, path: &str, content_type: &str, body: &[u8]) {
    out.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{}\"; filename*=utf-8''{}\r\n\
             Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            quoted(path),
            pct(path),
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// The `paths` of a bulk download's body, or the 400 answer.
#[expect(clippy::result_large_err, reason = "the error response is returned at once by the caller")]
fn requested_paths(body: &[u8]) -> Result<Vec<String>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => match value.get("paths").and_then(Value::as_array) {
            Some(paths) if !paths.is_empty() => {
                match paths.iter().map(|p| p.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>() {
                    Some(paths) => Ok(paths),
                    None => Err(bad_multipart("paths must be strings")),
                }
            }
            _ => Err(bad_multipart("paths is required and must not be empty")),
        },
        Err(err) => Err(bad_multipart(format!("invalid body: {err}"))),
    }
}

/// The bytes of a generated part of `len` bytes, chunk by chunk: byte `i` is `i % 251` (a prime,
/// so a part shifted or cut short does not hash the same), each chunk a whole number of periods.
pub fn generated_bytes(len: u64) -> impl Iterator<Item = Bytes> + Send + 'static {
    const PERIOD: u8 = 251;
    let block = Bytes::from((0..256).flat_map(|_| 0..PERIOD).collect::<Vec<u8>>());
    let mut left = len;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let n = usize::try_from(left).map_or(block.len(), |left| left.min(block.len()));
        left -= n as u64;
        Some(block.slice(..n))
    })
}

/// The answer of [`super::FakeDaytona::generated_file`] when every path asked for is generated.
fn generated_parts(shared: &Arc<Shared>, paths: &[String]) -> Option<Response> {
    let generated = shared.generated.lock().ok()?.clone();
    let files: Vec<super::Generated> = paths
        .iter()
        .map(|path| generated.iter().find(|g| &g.path == path).cloned())
        .collect::<Option<_>>()?;
    let shared = shared.clone();
    let body = futures_util::stream::iter(files).flat_map(move |file| {
        let length = file.announced.map(|n| format!("Content-Length: {n}\r\n")).unwrap_or_default();
        let head = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"; filename*=utf-8''{}\r\n\
             Content-Type: application/octet-stream\r\n{length}\r\n",
            quoted(&file.path),
            pct(&file.path),
        );
        let shared = shared.clone();
        let data = generated_bytes(file.bytes).inspect(move |chunk| {
            shared.generated_sent.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::SeqCst);
        });
        futures_util::stream::iter(
            std::iter::once(Bytes::from(head)).chain(data).chain(std::iter::once(Bytes::from_static(b"\r\n"))),
        )
    });
    let end = futures_util::stream::once(async { Bytes::from(format!("--{BOUNDARY}--\r\n")) });
    let body = body.chain(end).map(Ok::<_, std::convert::Infallible>);
    let mut response = axum::body::Body::from_stream(body).into_response();
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    response.headers_mut().insert(header::CONTENT_TYPE, content_type.parse().ok()?);
    Some(response)
}

/// One part per requested path, in request order: `file` with the bytes, or `error` with a JSON body.
async fn bulk_download(
    State(shared): Shd,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let generated = requested_paths(&body).ok().and_then(|paths| generated_parts(&shared, &paths));
    if let Some(response) = generated {
        return response;
    }
    let container = match container(&shared, &id, &uri, &method) {
        Ok(c) => c,
        Err(response) => return response,
    };
    let paths = match requested_paths(&body) {
        Ok(paths) => paths,
        Err(response) => return response,
    };
    let mut out = Vec::new();
    for path in &paths {
        match docker::read_file(&container, path).await {
            Ok(bytes) => part(&mut out, "file", path, content_type(path), &bytes),
            Err(err) => {
                let body = json!({
                    "statusCode": err.status,
                    "message": err.message,
                    "code": err.code,
                    "timestamp": now_rfc3339(),
                    "path": uri.path(),
                    "method": method.as_str(),
                });
                part(&mut out, "error", path, "application/json; charset=utf-8", body.to_string().as_bytes());
            }
        }
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    ([(header::CONTENT_TYPE, format!("multipart/form-data; boundary={BOUNDARY}"))], out).into_response()
}

#[derive(serde::Deserialize)]
struct ExecuteRequest {
    command: Option<String>,
    cwd: Option<String>,
    envs: Option<BTreeMap<String, String>>,
    timeout: Option<u64>,
}

async fn execute(
    State(shared): Shd,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let container = match container(&shared, &id, &uri, &method) {
        Ok(c) => c,
        Err(response) => return response,
    };
    let request: ExecuteRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => return error(400, "BAD_REQUEST", &format!("invalid body: {err}"), &uri, &method),
    };
    let Some(command) = request.command else {
        return error(400, "BAD_REQUEST", "command is required", &uri, &method);
    };
    // No timeout when omitted or 0 (the v0.190 daemon applies none).
    let timeout = request.timeout.filter(|t| *t > 0).map(Duration::from_secs);
    let envs = request.envs.unwrap_or_default();
    match docker::exec(&container, &command, request.cwd.as_deref(), &envs, timeout).await {
        Ok(ExecEnd::Exited { code, output }) => {
            axum::Json(json!({"exitCode": code, "result": String::from_utf8_lossy(&output)})).into_response()
        }
        Ok(ExecEnd::TimedOut) => error(408, "REQUEST_TIMEOUT", "command execution timeout", &uri, &method),
        Err(message) => error(400, "BAD_REQUEST", &message, &uri, &method),
    }
}

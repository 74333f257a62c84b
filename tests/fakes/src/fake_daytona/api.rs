//! The routes: auth and fault injection in front of everything, the sandbox API under `/api`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::state::{Sandbox, error, random_hex};
use super::{IMAGE_BUILD_FAILED, IMAGE_ERROR, OUTCOME_LABEL, Shared, docker, preview, toolbox};

type Shd = State<Arc<Shared>>;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/sandbox", get(list).post(create))
        .route("/api/sandbox/{id}", get(get_one).delete(delete))
        .route("/api/sandbox/{id}/start", post(start))
        .route("/api/sandbox/{id}/stop", post(stop))
        .route("/api/sandbox/{id}/ports/{port}/preview-url", get(preview_url))
        .route("/api/sandbox/{id}/toolbox-proxy-url", get(toolbox_proxy_url))
        .merge(toolbox::routes())
        .fallback(not_found)
        // Bulk uploads of 100 MiB and more: no body limit.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

/// Logs the request, answers an injected fault, and checks `Authorization: Bearer <key>`.
async fn guard(State(shared): Shd, request: Request, next: Next) -> Response {
    let (method, uri) = (request.method().clone(), request.uri().clone());
    if let Ok(mut log) = shared.requests.lock() {
        log.push(format!("{method} {uri}"));
    }
    let fault = shared.faults.lock().ok().and_then(|mut faults| {
        let hit = faults.iter_mut().find(|f| {
            f.remaining > 0
                && uri.path().starts_with(&f.path_prefix)
                && f.method.as_deref().is_none_or(|m| m == method.as_str())
        })?;
        hit.remaining -= 1;
        Some(hit.status)
    });
    if let Some(status) = fault {
        return error(status, "INJECTED_FAULT", "fault injected by the test", &uri, &method);
    }
    let expected = format!("Bearer {}", shared.key);
    let authorized = request.headers().get("authorization").and_then(|v| v.to_str().ok()) == Some(&expected);
    if !authorized {
        return (StatusCode::UNAUTHORIZED, axum::Json(json!({"statusCode": 401, "message": "Unauthorized"})))
            .into_response();
    }
    let huge = shared
        .huge
        .lock()
        .ok()
        .and_then(|huge| huge.iter().find(|h| uri.path().contains(&h.path_part)).map(|h| h.bytes));
    if let Some(bytes) = huge {
        return huge_json(bytes);
    }
    next.run(request).await
}

/// `{"exitCode":0,"result":"xxxx…` up to `bytes` bytes, made chunk by chunk as the client reads:
/// the fake's memory stays at one chunk however large the answer.
fn huge_json(bytes: u64) -> Response {
    const CHUNK: usize = 64 << 10;
    let head = Bytes::from_static(br#"{"exitCode":0,"result":""#);
    let filler = Bytes::from(vec![b'x'; CHUNK]);
    let start = (head.len() as u64).min(bytes);
    let first = head.slice(..usize::try_from(start).unwrap_or(0));
    let rest = futures_util::stream::unfold(bytes - start, move |left| {
        let filler = filler.clone();
        async move {
            if left == 0 {
                return None;
            }
            let n = usize::try_from(left).map_or(CHUNK, |left| left.min(CHUNK));
            Some((Ok::<_, std::convert::Infallible>(filler.slice(..n)), left - n as u64))
        }
    });
    let body = futures_util::stream::once(async move { Ok(first) }).chain(rest);
    let mut response = axum::body::Body::from_stream(body).into_response();
    response
        .headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    response
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(404, "NOT_FOUND", &format!("Cannot {method} {}", uri.path()), &uri, &method)
}

fn sandbox_not_found(id: &str, uri: &Uri, method: &Method) -> Response {
    error(404, "NOT_FOUND", &format!("Sandbox with ID or name {id} not found"), uri, method)
}

/// The key under which `id_or_name` is stored.
fn resolve(shared: &Shared, id_or_name: &str) -> Option<String> {
    let sandboxes = shared.lock_sandboxes();
    if sandboxes.contains_key(id_or_name) {
        return Some(id_or_name.to_owned());
    }
    sandboxes.values().find(|s| s.name == id_or_name).map(|s| s.id.clone())
}

/// The image named by the first `FROM` of a Dockerfile (flags such as `--platform` skipped).
fn from_image(dockerfile: &str) -> Option<String> {
    dockerfile.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if !words.next()?.eq_ignore_ascii_case("FROM") {
            return None;
        }
        words.find(|w| !w.starts_with("--")).map(str::to_owned)
    })
}

fn uuid() -> String {
    let hex = random_hex(16);
    format!("{}-{}-4{}-a{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

async fn create(State(shared): Shd, method: Method, uri: Uri, body: Bytes) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(value @ Value::Object(_)) => value,
        _ => return error(400, "BAD_REQUEST", "the body must be a CreateSandbox JSON object", &uri, &method),
    };
    let build = body.get("buildInfo").filter(|b| !b.is_null());
    let dockerfile = match build.map(|b| b.get("dockerfileContent").and_then(Value::as_str)) {
        Some(None) => {
            return error(400, "BAD_REQUEST", "buildInfo.dockerfileContent is required", &uri, &method);
        }
        Some(Some(content)) => Some(content),
        None => None,
    };
    let snapshot = body.get("snapshot").and_then(Value::as_str).filter(|s| !s.is_empty());
    let outcome = body.get("labels").and_then(|l| l.get(OUTCOME_LABEL)).and_then(Value::as_str);
    let default_image =
        shared.default_image.lock().map(|image| image.clone()).unwrap_or_else(|e| e.into_inner().clone());
    // (image, why it cannot be built when it cannot)
    let (image, missing) = match (dockerfile, snapshot) {
        (Some(dockerfile), _) => match from_image(dockerfile) {
            Some(image) => {
                let knob = image == IMAGE_BUILD_FAILED || image == IMAGE_ERROR;
                let missing = (!knob && !docker::image_exists(&image).await)
                    .then(|| format!("failed to build snapshot: image {image} not found"));
                (image, missing)
            }
            None => (String::new(), Some("failed to build snapshot: the Dockerfile has no FROM".to_owned())),
        },
        (None, Some(snapshot)) if snapshot == IMAGE_BUILD_FAILED || snapshot == IMAGE_ERROR => {
            (snapshot.to_owned(), None)
        }
        // A snapshot that names a local image is that image (e.g. a baked one); any other name
        // stands for the default snapshot.
        (None, Some(snapshot)) if docker::image_exists(snapshot).await => (snapshot.to_owned(), None),
        _ => (default_image, None),
    };
    let failure = if image == IMAGE_BUILD_FAILED || outcome == Some("build_failed") {
        Some(("build_failed", "failed to build snapshot: the build failed (fake knob)".to_owned()))
    } else if image == IMAGE_ERROR || outcome == Some("error") {
        Some(("error", "sandbox failed to start (fake knob)".to_owned()))
    } else {
        missing.map(|reason| ("build_failed", reason))
    };
    let id = uuid();
    let mut sandbox = if dockerfile.is_some() {
        let pending: &[&'static str] = match failure {
            Some(("build_failed", _)) => &["building_snapshot", "build_failed"],
            Some(_) => &["building_snapshot", "starting", "error"],
            None => &["building_snapshot", "starting", "started"],
        };
        Sandbox::new(id.clone(), &body, image, "pending_build", pending)
    } else {
        let pending: &[&'static str] = if failure.is_some() { &["error"] } else { &["started"] };
        Sandbox::new(id.clone(), &body, image, "creating", pending)
    };
    match failure {
        Some((_, reason)) => sandbox.pending_error = Some(reason),
        None => {
            match docker::run(&shared.instance, &id, &sandbox.image, &sandbox.env, &shared.mounts()).await {
                Ok(container) => {
                    sandbox.ip = docker::ip(&container).await;
                    sandbox.container = Some(container);
                }
                Err(message) => {
                    sandbox.pending = if dockerfile.is_some() {
                        ["building_snapshot", "starting", "error"].into()
                    } else {
                        ["error"].into()
                    };
                    sandbox.pending_error = Some(format!("failed to start the container: {message}"));
                }
            }
        }
    }
    let reply = sandbox.to_json(shared.port);
    shared.lock_sandboxes().insert(id, sandbox);
    axum::Json(reply).into_response()
}

async fn list(State(shared): Shd, Query(query): Query<Vec<(String, String)>>) -> Response {
    let wanted: serde_json::Map<String, Value> = query
        .iter()
        .find(|(k, _)| k == "labels")
        .and_then(|(_, v)| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let items: Vec<Value> = shared
        .lock_sandboxes()
        .values()
        .filter(|s| s.state != "destroyed")
        .filter(|s| wanted.iter().all(|(k, v)| s.labels.get(k).map(String::as_str) == v.as_str()))
        .map(|s| s.to_json(shared.port))
        .collect();
    // v0.190 answers an array; newer SDKs page with `cursor`/`limit` and read `{items, nextCursor}`.
    if query.iter().any(|(k, _)| k == "cursor" || k == "limit") {
        axum::Json(json!({"items": items, "nextCursor": null})).into_response()
    } else {
        axum::Json(Value::Array(items)).into_response()
    }
}

async fn get_one(State(shared): Shd, Path(id): Path<String>, method: Method, uri: Uri) -> Response {
    let Some(key) = resolve(&shared, &id) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    let mut sandboxes = shared.lock_sandboxes();
    let Some(sandbox) = sandboxes.get_mut(&key) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    // Reported `destroyed` once; after that it is gone.
    if sandbox.state == "destroyed" {
        sandboxes.remove(&key);
        return sandbox_not_found(&id, &uri, &method);
    }
    sandbox.advance();
    axum::Json(sandbox.to_json(shared.port)).into_response()
}

async fn start(State(shared): Shd, Path(id): Path<String>, method: Method, uri: Uri) -> Response {
    let Some(key) = resolve(&shared, &id) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    let (state, container) = match shared.lock_sandboxes().get(&key) {
        Some(s) => (s.state.clone(), s.container.clone()),
        None => return sandbox_not_found(&id, &uri, &method),
    };
    match (state.as_str(), container) {
        ("stopped" | "stopping", Some(container)) => {
            if let Err(message) = docker::start(&container).await {
                return error(500, "INTERNAL_SERVER_ERROR", &message, &uri, &method);
            }
            let ip = docker::ip(&container).await;
            let mut sandboxes = shared.lock_sandboxes();
            let Some(sandbox) = sandboxes.get_mut(&key) else {
                return sandbox_not_found(&id, &uri, &method);
            };
            sandbox.ip = ip;
            // Daytona resets the preview token whenever the sandbox restarts.
            sandbox.preview_token = random_hex(16);
            sandbox.set_state("starting");
            sandbox.pending = ["started"].into();
            axum::Json(sandbox.to_json(shared.port)).into_response()
        }
        ("started" | "starting" | "creating", _) => {
            let sandboxes = shared.lock_sandboxes();
            match sandboxes.get(&key) {
                Some(sandbox) => axum::Json(sandbox.to_json(shared.port)).into_response(),
                None => sandbox_not_found(&id, &uri, &method),
            }
        }
        (state, _) => error(400, "BAD_REQUEST", &format!("Sandbox is in state {state}"), &uri, &method),
    }
}

async fn stop(State(shared): Shd, Path(id): Path<String>, method: Method, uri: Uri) -> Response {
    let Some(key) = resolve(&shared, &id) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    let (state, container) = match shared.lock_sandboxes().get(&key) {
        Some(s) => {
            s.cut_previews();
            (s.state.clone(), s.container.clone())
        }
        None => return sandbox_not_found(&id, &uri, &method),
    };
    match (state.as_str(), container) {
        ("started" | "starting" | "creating", Some(container)) => {
            if let Err(message) = docker::stop(&container).await {
                return error(500, "INTERNAL_SERVER_ERROR", &message, &uri, &method);
            }
            let mut sandboxes = shared.lock_sandboxes();
            let Some(sandbox) = sandboxes.get_mut(&key) else {
                return sandbox_not_found(&id, &uri, &method);
            };
            sandbox.set_state("stopping");
            sandbox.pending = ["stopped"].into();
            axum::Json(sandbox.to_json(shared.port)).into_response()
        }
        ("stopped" | "stopping", _) => match shared.lock_sandboxes().get(&key) {
            Some(sandbox) => axum::Json(sandbox.to_json(shared.port)).into_response(),
            None => sandbox_not_found(&id, &uri, &method),
        },
        (state, _) => error(400, "BAD_REQUEST", &format!("Sandbox is in state {state}"), &uri, &method),
    }
}

async fn delete(State(shared): Shd, Path(id): Path<String>, method: Method, uri: Uri) -> Response {
    let Some(key) = resolve(&shared, &id) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    let container = match shared.lock_sandboxes().get_mut(&key) {
        Some(s) if matches!(s.state.as_str(), "destroying" | "destroyed") => {
            return sandbox_not_found(&id, &uri, &method);
        }
        Some(s) => {
            s.cut_previews();
            for task in s.preview_tasks.drain(..) {
                task.abort();
            }
            s.previews.clear();
            s.container.take()
        }
        None => return sandbox_not_found(&id, &uri, &method),
    };
    if let Some(container) = container {
        docker::remove(&container).await;
    }
    let mut sandboxes = shared.lock_sandboxes();
    let Some(sandbox) = sandboxes.get_mut(&key) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    sandbox.set_state("destroying");
    sandbox.pending = ["destroyed"].into();
    sandbox.ip = None;
    axum::Json(sandbox.to_json(shared.port)).into_response()
}

async fn preview_url(
    State(shared): Shd,
    Path((id, port)): Path<(String, String)>,
    method: Method,
    uri: Uri,
) -> Response {
    let Some(port) = port.parse::<u16>().ok().filter(|p| *p != 0) else {
        return error(400, "BAD_REQUEST", &format!("invalid port {port}"), &uri, &method);
    };
    let Some(key) = resolve(&shared, &id) else {
        return sandbox_not_found(&id, &uri, &method);
    };
    match preview::ensure_listener(&shared, &key, port) {
        Ok(Some((listen, token))) => axum::Json(json!({
            "sandboxId": key,
            "url": format!("http://127.0.0.1:{listen}"),
            "token": token,
        }))
        .into_response(),
        Ok(None) => sandbox_not_found(&id, &uri, &method),
        Err(err) => error(500, "INTERNAL_SERVER_ERROR", &err.to_string(), &uri, &method),
    }
}

async fn toolbox_proxy_url(State(shared): Shd, Path(id): Path<String>, method: Method, uri: Uri) -> Response {
    if resolve(&shared, &id).is_none() {
        return sandbox_not_found(&id, &uri, &method);
    }
    axum::Json(json!({"url": format!("http://127.0.0.1:{}/toolbox", shared.port)})).into_response()
}

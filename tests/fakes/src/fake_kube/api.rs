//! The HTTP side: bearer-token auth and the request log in front of everything, discovery
//! (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`), and the REST verbs of
//! every registered type (create, get, list, watch, replace, merge patch, `/status`, delete,
//! deletecollection) at the apiserver's paths. Pod `exec` goes to [`super::exec`], `log` to
//! [`super::pods`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};

use super::Shared;
use super::call::{Call, error_response, json_response, names};
use super::resource::{ResourceKey, ResourceType};
use super::selector::Selector;
use super::status::ApiError;
use super::store::EventType;

type Shd = State<Arc<Shared>>;

/// The apiserver's default request body limit.
const BODY_LIMIT: usize = 3 << 20;
/// A watch without `timeoutSeconds` ends after this long (the real server picks 30–60 minutes).
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .route("/api", get(core_versions))
        .route("/apis", get(group_list))
        .route("/api/{*rest}", any(core_path))
        .route("/apis/{*rest}", any(group_path))
        .fallback(page_not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

/// Logs the request and checks `Authorization: Bearer <token>`. Without any credentials a client
/// is anonymous, and may read what the real server shows `system:unauthenticated` (version,
/// health); a wrong token is refused everywhere.
async fn guard(State(shared): Shd, request: Request, next: Next) -> Response {
    let (method, uri) = (request.method().clone(), request.uri().clone());
    shared.log_request(format!("{method} {uri}"));
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let expected = format!("Bearer {}", shared.token);
    let public = matches!(uri.path(), "/version" | "/healthz" | "/livez" | "/readyz");
    match given {
        Some(given) if given == expected => next.run(request).await,
        None if public => next.run(request).await,
        _ => error_response(&ApiError::unauthorized()),
    }
}

async fn ok() -> &'static str {
    "ok"
}

/// What the real server answers for a path outside the API.
async fn page_not_found() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

async fn version() -> Response {
    json_response(
        200,
        &json!({
            "major": "1",
            "minor": "33",
            "gitVersion": "v1.33.0-fake-kube",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-04-23T00:00:00Z",
            "goVersion": "go1.24.2",
            "compiler": "gc",
            "platform": "linux/amd64"
        }),
    )
}

async fn core_versions(State(shared): Shd) -> Response {
    json_response(
        200,
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.address}],
        }),
    )
}

/// The registered groups and their versions (one served version per type; a group's types may
/// come in several versions).
fn groups(shared: &Shared) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for resource in shared.store.types().iter().filter(|t| !t.group.is_empty()) {
        let versions = groups.entry(resource.group.clone()).or_default();
        if !versions.contains(&resource.version) {
            versions.push(resource.version.clone());
        }
    }
    groups
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": versions, "preferredVersion": versions.first().cloned().unwrap_or(Value::Null)})
}

async fn group_list(State(shared): Shd) -> Response {
    let groups: Vec<Value> =
        groups(&shared).iter().map(|(name, versions)| group_json(name, versions)).collect();
    json_response(200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `APIResourceList` of one group version.
fn resource_list(shared: &Shared, group: &str, version: &str) -> Option<Value> {
    let types: Vec<Arc<ResourceType>> =
        shared.store.types().into_iter().filter(|t| t.group == group && t.version == version).collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in &types {
        let mut entry = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        });
        if !t.short_names.is_empty() {
            entry["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            entry["categories"] = json!(t.categories);
        }
        resources.push(entry);
        let mut subresources: Vec<(String, String, Vec<&str>)> = Vec::new();
        if t.status_subresource {
            subresources.push(("status".into(), t.kind.clone(), vec!["get", "patch", "update"]));
        }
        for sub in &t.other_subresources {
            let (kind, verbs) = match sub.as_str() {
                "exec" => ("PodExecOptions".to_owned(), vec!["create", "get"]),
                "attach" => ("PodAttachOptions".to_owned(), vec!["create", "get"]),
                _ => (t.kind.clone(), vec!["get"]),
            };
            subresources.push((sub.clone(), kind, verbs));
        }
        subresources.sort();
        for (sub, kind, verbs) in subresources {
            resources.push(json!({
                "name": format!("{}/{sub}", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": kind,
                "verbs": verbs,
            }));
        }
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// What a request names below a group version.
struct Target {
    resource: Arc<ResourceType>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    /// The legacy `/watch/` prefix.
    watch: bool,
}

async fn core_path(State(shared): Shd, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let segments: Vec<String> = split(&path, "/api/");
    match segments.as_slice() {
        [version] if version == "v1" => match resource_list(&shared, "", "v1") {
            Some(list) => json_response(200, &list),
            None => page_not_found().await,
        },
        [version, rest @ ..] if version == "v1" => serve(&shared, "", "v1", rest, request).await,
        _ => page_not_found().await,
    }
}

async fn group_path(State(shared): Shd, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let segments: Vec<String> = split(&path, "/apis/");
    match segments.as_slice() {
        [group] => match groups(&shared).get(group) {
            Some(versions) => {
                let mut body = group_json(group, versions);
                body["kind"] = json!("APIGroup");
                body["apiVersion"] = json!("v1");
                json_response(200, &body)
            }
            None => page_not_found().await,
        },
        [group, version] => match resource_list(&shared, group, version) {
            Some(list) => json_response(200, &list),
            None => page_not_found().await,
        },
        [group, version, rest @ ..] => serve(&shared, group, version, rest, request).await,
        _ => page_not_found().await,
    }
}

fn split(path: &str, prefix: &str) -> Vec<String> {
    path.strip_prefix(prefix)
        .unwrap_or_default()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect()
}

fn percent_decode(segment: &str) -> String {
    form_urlencoded::parse(format!("x={}", segment.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Resolves `rest` (below a group version) to a target.
fn target(shared: &Shared, group: &str, version: &str, rest: &[String]) -> Option<Target> {
    let (watch, rest) = match rest {
        [first, rest @ ..] if first == "watch" => (true, rest),
        rest => (false, rest),
    };
    let find = |plural: &str| shared.store.resource_at(group, version, plural);
    let namespaced = match rest {
        [namespaces, ns, plural, more @ ..] if namespaces == "namespaces" && more.len() <= 2 => {
            find(plural).filter(|t| t.namespaced).map(|t| (t, ns.clone(), more))
        }
        _ => None,
    };
    if let Some((resource, namespace, more)) = namespaced {
        return Some(Target {
            resource,
            namespace: Some(namespace),
            name: more.first().cloned(),
            subresource: more.get(1).cloned(),
            watch,
        });
    }
    match rest {
        [plural, more @ ..] if more.len() <= 2 => {
            let resource = find(plural)?;
            // A namespaced type without a namespace: only its list across namespaces.
            if resource.namespaced && !more.is_empty() {
                return None;
            }
            Some(Target {
                resource,
                namespace: None,
                name: more.first().cloned(),
                subresource: more.get(1).cloned(),
                watch,
            })
        }
        _ => None,
    }
}

async fn serve(
    shared: &Arc<Shared>,
    group: &str,
    version: &str,
    rest: &[String],
    request: Request,
) -> Response {
    let Some(target) = target(shared, group, version, rest) else {
        return error_response(&ApiError::not_found_resource(&ResourceKey::new(group, "")));
    };
    let query: Vec<(String, String)> = request
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let call = Call { method: request.method().clone(), headers: request.headers().clone(), query, request };
    match verb(shared, target, call).await {
        Ok(response) => response,
        Err(error) => error_response(&error),
    }
}

async fn body_json(request: Request) -> Result<Value, ApiError> {
    let bytes: Bytes = axum::body::to_bytes(request.into_body(), BODY_LIMIT).await.map_err(|e| {
        ApiError::new(413, "RequestEntityTooLarge", format!("the request body is too large: {e}"))
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body could not be decoded as JSON: {e} (fake-kube reads JSON only)"
        ))
    })
}

async fn verb(shared: &Arc<Shared>, target: Target, call: Call) -> Result<Response, ApiError> {
    let Target { resource, namespace, name, subresource, watch } = target;
    let key = resource.key();
    let ns = namespace.clone().unwrap_or_default();
    let store = &shared.store;
    match (name, subresource.as_deref()) {
        (None, None) => {
            let mut field_selector = call.param("fieldSelector").map(str::to_owned);
            let selector = Selector::parse(call.param("labelSelector"), field_selector.as_deref())?;
            match call.method {
                Method::GET if watch || call.flag("watch") => {
                    field_selector.take();
                    watch_response(shared, &resource, namespace.as_deref(), selector, &call)
                }
                Method::GET => {
                    let (items, revision) = store.list(&key, namespace.as_deref(), &selector)?;
                    if super::table::wanted(accept(&call)) {
                        return Ok(json_response(200, &super::table::render(&resource, &items, revision)));
                    }
                    Ok(json_response(200, &list_json(&resource, items, revision)))
                }
                Method::POST if resource.namespaced && namespace.is_none() => {
                    Err(ApiError::method_not_allowed())
                }
                Method::POST => {
                    let body = body_json(call.request).await?;
                    let created = store.create(&key, &ns, body)?;
                    Ok(json_response(201, &created))
                }
                Method::DELETE => {
                    let (items, _) = store.list(&key, namespace.as_deref(), &selector)?;
                    let mut deleted = Vec::new();
                    for item in items {
                        let (item_ns, item_name) = names(&item);
                        if let Ok(object) = store.delete(&key, &item_ns, &item_name, grace(&call)) {
                            deleted.push(object);
                        }
                    }
                    Ok(json_response(200, &list_json(&resource, deleted, store.resource_version())))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
        (Some(name), None) => match call.method {
            Method::GET if watch => {
                let selector =
                    Selector::parse(call.param("labelSelector"), Some(&format!("metadata.name={name}")))?;
                watch_response(shared, &resource, namespace.as_deref(), selector, &call)
            }
            Method::GET => {
                let object = store.get(&key, &ns, &name)?;
                if super::table::wanted(accept(&call)) {
                    let revision = store.resource_version();
                    return Ok(json_response(200, &super::table::render(&resource, &[object], revision)));
                }
                Ok(json_response(200, &object))
            }
            Method::PUT => {
                let body = body_json(call.request).await?;
                Ok(json_response(200, &store.replace(&key, &ns, &name, body)?))
            }
            Method::PATCH => {
                let apply = patch_type(&call)? == APPLY;
                if apply && call.param("fieldManager").is_none_or(str::is_empty) {
                    return Err(ApiError::bad_request(
                        "PATCH, application/apply-patch+yaml: fieldManager is required".into(),
                    ));
                }
                let mut body = body_json(call.request).await?;
                if apply && matches!(store.get(&key, &ns, &name), Err(ApiError { code: 404, .. })) {
                    // Server-side apply of an object that is not there creates it.
                    super::store::metadata_mut(&mut body).insert("name".into(), json!(name));
                    return Ok(json_response(201, &store.create(&key, &ns, body)?));
                }
                Ok(json_response(200, &store.merge_patch(&key, &ns, &name, &body, false)?))
            }
            Method::DELETE => {
                let grace = grace(&call).or(delete_options_grace(call.request).await);
                Ok(json_response(200, &store.delete(&key, &ns, &name, grace)?))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), Some("status")) if resource.status_subresource => match call.method {
            Method::GET => Ok(json_response(200, &store.get(&key, &ns, &name)?)),
            Method::PUT => {
                let body = body_json(call.request).await?;
                Ok(json_response(200, &store.replace_status(&key, &ns, &name, body)?))
            }
            Method::PATCH => {
                patch_type(&call)?;
                let body = body_json(call.request).await?;
                Ok(json_response(200, &store.merge_patch(&key, &ns, &name, &body, true)?))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), Some("exec")) if resource.key() == ResourceKey::core("pods") => {
            Ok(super::exec::serve(shared.clone(), &ns, &name, call).await)
        }
        (Some(name), Some("log")) if resource.key() == ResourceKey::core("pods") => {
            super::pods::log(shared, &ns, &name, call).await
        }
        _ => Err(ApiError::not_found_resource(&key)),
    }
}

/// Server-side apply's media type.
const APPLY: &str = "application/apply-patch+yaml";

/// The patch types the fake applies, all as a JSON merge patch: a strategic merge patch of maps and
/// scalars is one (of lists it differs: lists are replaced here, merged by key there); server-side
/// apply (a JSON body: kube-rs and the Python client send JSON) creates a missing object and
/// merges into an existing one, without field ownership (no conflicts, and fields dropped from the
/// applied configuration stay).
fn patch_type(call: &Call) -> Result<&str, ApiError> {
    let content_type = call.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" | APPLY => Ok(media),
        other => Err(ApiError::unsupported_patch(other)),
    }
}

fn accept(call: &Call) -> Option<&str> {
    call.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())
}

fn grace(call: &Call) -> Option<i64> {
    call.param("gracePeriodSeconds").and_then(|v| v.parse().ok())
}

/// `gracePeriodSeconds` of a DeleteOptions body, when one came.
async fn delete_options_grace(request: Request) -> Option<i64> {
    let bytes = axum::body::to_bytes(request.into_body(), BODY_LIMIT).await.ok()?;
    let options: Value = serde_json::from_slice(&bytes).ok()?;
    options.get("gracePeriodSeconds")?.as_i64()
}

fn list_json(resource: &ResourceType, items: Vec<Value>, revision: u64) -> Value {
    json!({
        "kind": resource.list_kind(),
        "apiVersion": resource.api_version(),
        "metadata": {"resourceVersion": revision.to_string()},
        "items": items,
    })
}

/// A watch: newline-delimited `{"type", "object"}` events over a chunked response. Without a
/// `resourceVersion` (or with `0`) it starts with an `ADDED` for each object there; with one, it
/// sends what came after it (`410 Expired` as an `ERROR` event when that is too old).
/// `sendInitialEvents=true` ends the initial events with a `BOOKMARK` annotated
/// `k8s.io/initial-events-end`, as the real server does.
fn watch_response(
    shared: &Arc<Shared>,
    resource: &Arc<ResourceType>,
    namespace: Option<&str>,
    selector: Selector,
    call: &Call,
) -> Result<Response, ApiError> {
    let key = resource.key();
    let from = call.param("resourceVersion").filter(|v| !v.is_empty() && *v != "0");
    let initial_events = call.flag("sendInitialEvents");
    let (initial, subscription) = match from {
        Some(version) if !initial_events => {
            let version: u64 = version
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {version:?}")))?;
            match shared.store.subscribe(Some(version)) {
                Ok(subscription) => (Vec::new(), Ok(subscription)),
                Err(expired) => (Vec::new(), Err(expired)),
            }
        }
        _ => {
            let (items, subscription) = shared.store.list_and_subscribe(&key, namespace, &selector)?;
            (items, Ok(subscription))
        }
    };
    let timeout =
        call.param("timeoutSeconds").and_then(|v| v.parse().ok()).map_or(DEFAULT_WATCH, Duration::from_secs);
    let mut queue: VecDeque<Value> =
        initial.into_iter().map(|object| json!({"type": "ADDED", "object": object})).collect();
    let mut subscription = match subscription {
        Ok(subscription) => Some(subscription),
        Err(expired) => {
            queue.push_back(json!({"type": "ERROR", "object": expired.body()}));
            None
        }
    };
    if initial_events && let Some(subscription) = &subscription {
        queue.push_back(json!({"type": "BOOKMARK", "object": {
            "kind": resource.kind,
            "apiVersion": resource.api_version(),
            "metadata": {
                "resourceVersion": subscription.cursor().to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }}));
    }
    let filter = WatchFilter { key, namespace: namespace.map(str::to_owned), selector };
    let deadline = tokio::time::Instant::now() + timeout;
    let stream = futures_util::stream::unfold(
        (queue, subscription.take(), filter),
        move |(mut queue, mut subscription, filter)| async move {
            loop {
                if let Some(event) = queue.pop_front() {
                    let mut line = event.to_string().into_bytes();
                    line.push(b'\n');
                    return Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from(line)),
                        (queue, subscription, filter),
                    ));
                }
                let current = subscription.as_mut()?;
                let next = tokio::time::timeout_at(deadline, current.next()).await.ok()?;
                match next {
                    Ok(event) => {
                        if let Some(event) = filter.view(&event) {
                            queue.push_back(event);
                        }
                    }
                    Err(expired) => {
                        queue.push_back(json!({"type": "ERROR", "object": expired.body()}));
                        subscription = None;
                    }
                }
            }
        },
    );
    let mut response = Body::from_stream(stream).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    Ok(response)
}

/// Which events a watch sees, and as what: an object that starts matching the selector is
/// `ADDED` to it, one that stops matching is `DELETED` from it (as the real watch cache does).
struct WatchFilter {
    key: ResourceKey,
    namespace: Option<String>,
    selector: Selector,
}

impl WatchFilter {
    fn view(&self, event: &super::store::Event) -> Option<Value> {
        if event.resource != self.key || self.namespace.as_ref().is_some_and(|ns| *ns != event.namespace) {
            return None;
        }
        let now = self.selector.matches(&event.object);
        let before = event.old.as_ref().is_some_and(|old| self.selector.matches(old));
        let kind = match event.kind {
            EventType::Added if now => "ADDED",
            EventType::Deleted if now => "DELETED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            _ => return None,
        };
        Some(json!({"type": kind, "object": event.object}))
    }
}

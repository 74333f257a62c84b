//! A fake sandbox's record: what `Sandbox` JSON reports, and the states still to walk through.

use std::collections::{BTreeMap, HashMap, VecDeque};

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse as _, Response};
use serde_json::{Value, json};

/// One sandbox as the fake keeps it.
pub struct Sandbox {
    pub id: String,
    pub name: String,
    pub user: String,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub public: bool,
    pub network_block_all: bool,
    pub target: String,
    pub cpu: i64,
    pub gpu: i64,
    pub memory: i64,
    pub disk: i64,
    pub auto_stop_interval: i64,
    pub snapshot: Option<String>,
    pub build_info: Option<Value>,
    /// The state reported now.
    pub state: String,
    /// The states later GETs advance through, one per GET (the last one stays).
    pub pending: VecDeque<&'static str>,
    /// Set when `pending` reaches a failed state.
    pub pending_error: Option<String>,
    pub error_reason: Option<String>,
    /// The Docker image and container (None when the sandbox never got one, or after delete).
    pub image: String,
    pub container: Option<String>,
    /// The container's address on the Docker bridge (looked up at each start).
    pub ip: Option<String>,
    /// The preview token; a new one at each restart.
    pub preview_token: String,
    /// Preview listeners: sandbox port → port of the listener on 127.0.0.1.
    pub previews: HashMap<u16, u16>,
    /// The preview listeners' accept loops, ended on delete.
    pub preview_tasks: Vec<tokio::task::AbortHandle>,
    /// Bumped to cut the proxied connections (stop, delete, or the test knob).
    pub cut: tokio::sync::watch::Sender<u64>,
    pub created_at: String,
    pub updated_at: String,
}

impl Sandbox {
    /// A new record in `state`, advancing through `pending`.
    pub fn new(id: String, body: &Value, image: String, state: &str, pending: &[&'static str]) -> Self {
        let strings = |key: &str| -> BTreeMap<String, String> {
            body.get(key)
                .and_then(Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
                .unwrap_or_default()
        };
        let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str, default: i64| body.get(key).and_then(Value::as_i64).unwrap_or(default);
        let now = now_rfc3339();
        Self {
            name: text("name").unwrap_or_else(|| id.clone()),
            id,
            // The container runs as root: say so rather than Daytona's usual `daytona`.
            user: text("user").unwrap_or_else(|| "root".to_owned()),
            env: strings("env"),
            labels: strings("labels"),
            public: body.get("public").and_then(Value::as_bool).unwrap_or(false),
            network_block_all: body.get("networkBlockAll").and_then(Value::as_bool).unwrap_or(false),
            target: text("target").unwrap_or_else(|| "local".to_owned()),
            cpu: number("cpu", 1),
            gpu: number("gpu", 0),
            memory: number("memory", 1),
            disk: number("disk", 3),
            auto_stop_interval: number("autoStopInterval", 15),
            snapshot: text("snapshot"),
            build_info: body.get("buildInfo").cloned(),
            state: state.to_owned(),
            pending: pending.iter().copied().collect(),
            pending_error: None,
            error_reason: None,
            image,
            container: None,
            ip: None,
            preview_token: random_hex(16),
            previews: HashMap::new(),
            preview_tasks: Vec::new(),
            cut: tokio::sync::watch::Sender::new(0),
            created_at: now.clone(),
            updated_at: now,
        }
    }

    /// Moves to the next pending state, if any (one step per GET, as a slow backend would).
    pub fn advance(&mut self) {
        if let Some(next) = self.pending.pop_front() {
            self.set_state(next);
            if matches!(next, "error" | "build_failed") {
                self.error_reason = self.pending_error.take();
            }
        }
    }

    pub fn set_state(&mut self, state: &str) {
        self.state = state.to_owned();
        self.updated_at = now_rfc3339();
    }

    /// Ends every proxied connection of this sandbox.
    pub fn cut_previews(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// The `Sandbox` JSON (every required field, and the optional ones the SDKs read).
    pub fn to_json(&self, port: u16) -> Value {
        let desired = match self.state.as_str() {
            "stopping" | "stopped" => "stopped",
            "destroying" | "destroyed" => "destroyed",
            _ => "started",
        };
        let mut value = json!({
            "id": self.id,
            "organizationId": "fake-organization",
            "name": self.name,
            "user": self.user,
            "env": self.env,
            "labels": self.labels,
            "public": self.public,
            "networkBlockAll": self.network_block_all,
            // Required by newer SDKs (0.226).
            "kvm": false,
            "target": self.target,
            "cpu": self.cpu,
            "gpu": self.gpu,
            "memory": self.memory,
            "disk": self.disk,
            "toolboxProxyUrl": format!("http://127.0.0.1:{port}/toolbox"),
            "state": self.state,
            "desiredState": desired,
            "recoverable": false,
            "autoStopInterval": self.auto_stop_interval,
            "autoArchiveInterval": 10080,
            "autoDeleteInterval": -1,
            "volumes": [],
            "daemonVersion": "fake-0.190.0",
            "runnerId": "fake-runner",
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        });
        if let Some(object) = value.as_object_mut() {
            if let Some(snapshot) = &self.snapshot {
                object.insert("snapshot".to_owned(), json!(snapshot));
            }
            if let Some(reason) = &self.error_reason {
                object.insert("errorReason".to_owned(), json!(reason));
            }
            if let Some(build) = &self.build_info {
                let dockerfile = build.get("dockerfileContent").cloned().unwrap_or(Value::Null);
                object.insert(
                    "buildInfo".to_owned(),
                    json!({
                        "dockerfileContent": dockerfile,
                        "contextHashes": build.get("contextHashes").cloned().unwrap_or(json!([])),
                        "snapshotRef": format!("fake-build-{}", self.id),
                        "createdAt": self.created_at,
                        "updatedAt": self.updated_at,
                    }),
                );
            }
        }
        value
    }
}

pub use crate::random_hex;

/// The current UTC time as RFC 3339 with milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// A JSON error response with Daytona's fields.
pub fn error(status: u16, code: &str, message: &str, uri: &Uri, method: &Method) -> Response {
    let status_code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status_code, axum::Json(error_body(status, code, message, uri.path(), method.as_str()))).into_response()
}

/// A Daytona-style JSON error body.
pub fn error_body(status: u16, code: &str, message: &str, path: &str, method: &str) -> Value {
    json!({
        "statusCode": status,
        "message": message,
        "code": code,
        "timestamp": now_rfc3339(),
        "path": path,
        "method": method,
    })
}

//! The one node's kubelet (stub while the store lands).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::response::Response;
use serde_json::{Value, json};

use super::api::Call;
use super::status::{ApiError, Cause};
use super::{CONTAINER_LABEL, NODE_NAME, Shared};

#[derive(Default)]
pub struct Kubelet {
    containers: Mutex<HashMap<(String, String, String), String>>,
}

impl Kubelet {
    pub fn container_of(&self, namespace: &str, pod: &str, container: &str) -> Option<String> {
        self.containers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(namespace.to_owned(), pod.to_owned(), container.to_owned()))
            .cloned()
    }
}

pub fn defaults(pod: &mut Value) {
    pod["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
}

pub fn validate(pod: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if pod.pointer("/spec/containers").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        causes.push(Cause::required("spec.containers", ""));
    }
    causes
}

pub fn node_object() -> Value {
    json!({"metadata": {"name": NODE_NAME, "labels": {
        "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

pub async fn run(_shared: Arc<Shared>) {}

pub async fn log(
    _shared: &Arc<Shared>,
    _namespace: &str,
    _name: &str,
    _call: Call,
) -> Result<Response, ApiError> {
    Err(ApiError::bad_request("log: not yet".into()))
}

pub fn remove_all_blocking(instance: &str) {
    crate::containers::remove_all_blocking(CONTAINER_LABEL, instance);
}

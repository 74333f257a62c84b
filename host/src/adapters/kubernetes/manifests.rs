//! The agent-sandbox manifests that put agentd beside any image without defeating a warm pool: a
//! `SandboxTemplate` whose Pod has an initContainer copying the static agentd (`agentd install`)
//! into an `emptyDir` that the sandbox container mounts at `/opt/agentd/bin` (where the adapter
//! looks for it: [`WELL_KNOWN`]), and a `SandboxWarmPool` of it. `agentctl sandbox kube-template`
//! prints them as YAML for `kubectl apply -f -`.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use super::Cluster;
use super::exec::kube_error;
use crate::adapters::linked::WELL_KNOWN;
use crate::contract::error::{Result, SandboxError};

/// The image the initContainer takes agentd from, unless told otherwise (any image with the static
/// agentd at `/usr/local/bin/agentd`: `images/build.sh` makes it).
pub const AGENTD_IMAGE: &str = "agentd-busybox:latest";

/// A `SandboxTemplate` named `name` for sandboxes of `image`, agentd from `agentd_image`.
pub fn sandbox_template(name: &str, image: &str, agentd_image: &str) -> Value {
    let dir = WELL_KNOWN.trim_end_matches("/agentd");
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": { "name": name },
        "spec": {
            "podTemplate": {
                "spec": {
                    "automountServiceAccountToken": false,
                    "initContainers": [{
                        "name": "agentd",
                        "image": agentd_image,
                        "command": ["/usr/local/bin/agentd", "install", dir],
                        "volumeMounts": [{ "name": "agentd", "mountPath": dir }],
                    }],
                    "containers": [{
                        "name": super::CONTAINER,
                        "image": image,
                        "command": ["sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"],
                        "volumeMounts": [{ "name": "agentd", "mountPath": dir, "readOnly": true }],
                    }],
                    "volumes": [{ "name": "agentd", "emptyDir": {} }],
                },
            },
        },
    })
}

/// A `SandboxWarmPool` named `name` keeping `replicas` ready Sandboxes of the template `template`.
pub fn warm_pool(name: &str, template: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": { "name": name },
        "spec": { "replicas": replicas, "sandboxTemplateRef": { "name": template } },
    })
}

/// Creates each of these documents (a [`sandbox_template`] or a [`warm_pool`]) in the cluster's
/// namespace, replacing one of the same name: what `agentctl sandbox kube-template --apply` does.
pub async fn apply(cluster: &Cluster, documents: &[Value]) -> Result<()> {
    for document in documents {
        let text = |key: &str| document[key].as_str().unwrap_or_default().to_owned();
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let plural = format!("{}s", kind.to_lowercase());
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &kind), &plural);
        let api: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &resource);
        let mut object: DynamicObject = serde_json::from_value(document.clone())
            .map_err(|e| SandboxError::Protocol(format!("a {kind} manifest: {e}")))?;
        let name = object.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let current = api.get(&name).await.map_err(|e| kube_error(e, &format!("{kind} {name}")))?;
                object.metadata.resource_version = current.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &object)
                    .await
                    .map_err(|e| kube_error(e, &format!("{kind} {name}")))?;
            }
            Err(err) => return Err(kube_error(err, &format!("{kind} {name} (is agent-sandbox installed?)"))),
        }
    }
    Ok(())
}

/// Documents as YAML (`---` between them): block style, every string JSON-quoted, which YAML reads
/// as the same string.
pub fn to_yaml(documents: &[Value]) -> String {
    let mut out = String::new();
    for (i, document) in documents.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        emit(document, 0, &mut out);
    }
    out
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) if map.is_empty() => Some("{}".to_owned()),
        Value::Array(items) if items.is_empty() => Some("[]".to_owned()),
        Value::Object(_) | Value::Array(_) => None,
        other => Some(other.to_string()),
    }
}

/// `value` (an object or array) at `indent`; what follows a `- ` or `key:` is laid out by it.
fn emit(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                match scalar(item) {
                    Some(text) => out.push_str(&format!("{pad}{key}: {text}\n")),
                    None => {
                        out.push_str(&format!("{pad}{key}:\n"));
                        emit(item, indent + 2, out);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match scalar(item) {
                    Some(text) => out.push_str(&format!("{pad}- {text}\n")),
                    None => {
                        // The item's first line goes after the dash, the rest indented under it.
                        let mut inner = String::new();
                        emit(item, indent + 2, &mut inner);
                        out.push_str(&format!("{pad}- {}", &inner[indent + 2..]));
                    }
                }
            }
        }
        other => out.push_str(&format!("{pad}{other}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_reads_back_as_the_json_it_came_from() {
        let docs = [sandbox_template("py", "python:3.12", AGENTD_IMAGE), warm_pool("py", "py", 2)];
        let text = to_yaml(&docs);
        assert!(text.contains("kind: \"SandboxTemplate\"\n"), "{text}");
        assert!(text.contains("\n---\n"));
        assert!(
            text.contains(
                "      initContainers:\n        - command:\n            - \"/usr/local/bin/agentd\"\n"
            ),
            "{text}"
        );
        assert!(text.contains("emptyDir: {}"), "{text}");
    }
}

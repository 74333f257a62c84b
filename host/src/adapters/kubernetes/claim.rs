//! agent-sandbox (kubernetes-sigs/agent-sandbox, API `v1beta1`): a `SandboxClaim` against a
//! `SandboxWarmPool` gets a `Sandbox` (adopted from the pool when one is ready, else made cold from
//! the pool's `SandboxTemplate`), whose controller makes its Pod. A claim's Ready condition follows
//! its Sandbox's; `status.sandbox.name` names the Sandbox, whose annotation
//! `agents.x-k8s.io/pod-name` (else its own name) names the Pod. Deleting the claim deletes both.
//! Suspend and resume are the Sandbox's `spec.operatingMode` (`Running`, `Suspended`).

use std::time::{Duration, Instant};

use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::Value;

use super::exec::kube_error;
use super::{Cluster, LABEL, PROVIDER, SOURCE_ANNOTATION, fresh_name, stuck};
use crate::contract::error::{Result, SandboxError};
use crate::contract::provider::SandboxInfo;

/// The tag `kube-claim:POOL` puts before POOL in the spec's source (the `Form::Create` tag of its row in the kinds table).
pub const SOURCE_TAG: &str = "claim=";
/// `spec.operatingMode` values.
pub const RUNNING: &str = "Running";
pub const SUSPENDED: &str = "Suspended";
/// The Sandbox annotation naming its Pod.
const POD_NAME: &str = "agents.x-k8s.io/pod-name";
/// Claim reasons that no waiting mends.
const TERMINAL: [&str; 10] = [
    "WarmPoolNotFound",
    "TemplateNotFound",
    "InvalidMetadata",
    "EnvVarsInjectionRejected",
    "VolumeClaimTemplatesError",
    "ClaimExpired",
    "SandboxExpired",
    "InvalidConfiguration",
    "PodFailed",
    "PodSucceeded",
];

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1beta1", kind), plural)
}

fn claims(cluster: &Cluster) -> kube::Api<DynamicObject> {
    let resource = resource("extensions.agents.x-k8s.io", "SandboxClaim", "sandboxclaims");
    kube::Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &resource)
}

fn sandboxes(cluster: &Cluster) -> kube::Api<DynamicObject> {
    let resource = resource("agents.x-k8s.io", "Sandbox", "sandboxes");
    kube::Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &resource)
}

/// The object `name`, or `None` when there is none (or agent-sandbox is not installed).
async fn get(api: &kube::Api<DynamicObject>, name: &str) -> Result<Option<DynamicObject>> {
    match api.get(name).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(err) => Err(kube_error(err, name)),
    }
}

/// The condition `type_` of an object's status: (status, reason, message).
fn condition(object: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let conditions = object.data.pointer("/status/conditions")?.as_array()?;
    let found = conditions.iter().find(|c| c["type"] == type_)?;
    let text = |key: &str| found[key].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

/// Creates a claim on the warm pool `pool`; its name.
pub async fn create(cluster: &Cluster, pool: &str) -> Result<String> {
    let name = fresh_name();
    let claim: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {
            "name": name,
            "labels": { LABEL: "1" },
            "annotations": { SOURCE_ANNOTATION: format!("kube-claim:{pool}") },
        },
        "spec": { "warmPoolRef": { "name": pool } },
    }))
    .map_err(|e| SandboxError::Protocol(format!("a SandboxClaim: {e}")))?;
    claims(cluster).create(&PostParams::default(), &claim).await.map_err(|e| {
        kube_error(e, &format!("SandboxClaim on warm pool {pool} (is agent-sandbox installed?)"))
    })?;
    Ok(name)
}

/// The Pod of the Sandbox `sandbox`.
async fn pod_of_sandbox(cluster: &Cluster, sandbox: &str) -> Result<String> {
    let found = get(&sandboxes(cluster), sandbox).await?;
    let annotated = found.as_ref().and_then(|s| s.metadata.annotations.as_ref()?.get(POD_NAME).cloned());
    Ok(annotated.unwrap_or_else(|| sandbox.to_owned()))
}

/// The Sandbox a claim got, once it has one.
fn sandbox_of(claim: &DynamicObject) -> Option<String> {
    claim.data.pointer("/status/sandbox/name")?.as_str().filter(|n| !n.is_empty()).map(str::to_owned)
}

/// Waits until the claim `name` is Ready; its Pod's name. A terminal reason of the claim, or a Pod
/// that cannot start, fails at once with the cluster's words.
pub async fn wait_ready(cluster: &Cluster, name: &str, timeout: Duration) -> Result<String> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    let failed = |message: String| SandboxError::Provider { provider: PROVIDER, status: None, message };
    loop {
        let claim = get(&claims(cluster), name)
            .await?
            .ok_or_else(|| failed(format!("SandboxClaim {name} is gone")))?;
        let ready = condition(&claim, "Ready");
        if let Some((status, reason, message)) = &ready {
            if status == "True"
                && let Some(sandbox) = sandbox_of(&claim)
            {
                return pod_of_sandbox(cluster, &sandbox).await;
            }
            if TERMINAL.contains(&reason.as_str()) {
                return Err(failed(format!("SandboxClaim {name}: {reason}: {message}")));
            }
        }
        // A Pod that cannot start is said as the kubelet says it (the claim only says "Pending").
        if let Some(sandbox) = sandbox_of(&claim) {
            let pod = pod_of_sandbox(cluster, &sandbox).await?;
            if let Ok(pod) = cluster.pods().get(&pod).await
                && let Some(why) = stuck(&pod)
            {
                return Err(failed(format!(
                    "SandboxClaim {name}: its Pod {pod:?} cannot start: {why}",
                    pod = pod.metadata.name.unwrap_or_default()
                )));
            }
        }
        if Instant::now() >= deadline {
            let last =
                ready.map_or("no Ready condition yet".to_owned(), |(s, r, m)| format!("Ready {s} {r}: {m}"));
            return Err(SandboxError::Timeout {
                what: format!("SandboxClaim {name} to be Ready ({last})"),
                after: timeout,
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}

/// The Pod of the claim `name`, if there is such a claim and it has a Sandbox.
pub async fn pod_of(cluster: &Cluster, name: &str) -> Result<Option<String>> {
    let Some(claim) = get(&claims(cluster), name).await? else { return Ok(None) };
    match sandbox_of(&claim) {
        Some(sandbox) => Ok(Some(pod_of_sandbox(cluster, &sandbox).await?)),
        None => Err(SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("SandboxClaim {name} has no Sandbox yet"),
        }),
    }
}

/// Whether a claim `name` exists.
pub async fn exists(cluster: &Cluster, name: &str) -> Result<bool> {
    Ok(get(&claims(cluster), name).await?.is_some())
}

/// Deletes the claim (its Sandbox and Pod go with it); one already gone is no error.
pub async fn delete(cluster: &Cluster, name: &str) -> Result<()> {
    match claims(cluster).delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(kube_error(err, &format!("SandboxClaim {name}"))),
    }
}

/// The claims agentd made, for `sandbox ls` (none when agent-sandbox is not installed).
pub async fn list(cluster: &Cluster) -> Result<Vec<SandboxInfo>> {
    let listed = match claims(cluster).list(&ListParams::default().labels(&format!("{LABEL}=1"))).await {
        Ok(listed) => listed,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Vec::new()),
        Err(err) => return Err(kube_error(err, "SandboxClaims")),
    };
    Ok(listed
        .items
        .into_iter()
        .map(|claim| {
            let state = match condition(&claim, "Ready") {
                Some((status, _, _)) if status == "True" => "ready".to_owned(),
                Some((_, reason, _)) if !reason.is_empty() => reason.to_lowercase(),
                _ => "pending".to_owned(),
            };
            let name = claim.metadata.name.clone().unwrap_or_default();
            let source = claim.metadata.annotations.as_ref().and_then(|a| a.get(SOURCE_ANNOTATION).cloned());
            SandboxInfo {
                kind: super::KIND,
                id: cluster.id(&name),
                source: source.unwrap_or_default(),
                state,
            }
        })
        .collect())
}

/// Sets the claimed Sandbox's `operatingMode` and waits until it took effect: suspended (its Pod
/// gone), or running and Ready again.
pub async fn set_operating_mode(cluster: &Cluster, name: &str, mode: &str, timeout: Duration) -> Result<()> {
    let Some(claim) = get(&claims(cluster), name).await? else {
        return Err(SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!(
                "{}/{name} is not an agent-sandbox claim: only claimed sandboxes (kube-claim:POOL) can be \
                 suspended and resumed; a plain Pod cannot",
                cluster.namespace
            ),
        });
    };
    let sandbox = sandbox_of(&claim).ok_or_else(|| SandboxError::Provider {
        provider: PROVIDER,
        status: None,
        message: format!("SandboxClaim {name} has no Sandbox yet"),
    })?;
    let patch: Value = serde_json::json!({ "spec": { "operatingMode": mode } });
    sandboxes(cluster)
        .patch(&sandbox, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| kube_error(e, &format!("Sandbox {sandbox}")))?;
    let deadline = Instant::now() + timeout;
    loop {
        let Some(current) = get(&sandboxes(cluster), &sandbox).await? else {
            return Err(SandboxError::Provider {
                provider: PROVIDER,
                status: None,
                message: format!("Sandbox {sandbox} is gone"),
            });
        };
        let done = match mode {
            SUSPENDED => condition(&current, "Suspended").is_some_and(|(s, _, _)| s == "True"),
            _ => condition(&current, "Ready").is_some_and(|(s, _, _)| s == "True"),
        };
        if done {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::Timeout {
                what: format!("Sandbox {sandbox} to be {mode}"),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! The SandboxClaim controller: binds each claim to one Sandbox, a ready member of the claim's
//! warm pool when there is one (adoption), else a new one named like the claim from the pool's
//! template (cold), and mirrors the Sandbox's `Ready` and pod IPs into the claim's status.

use std::time::Duration;

use serde_json::{Value, json};

use super::pool::{blueprint_of, members};
use super::{
    ANNOTATION_ASSIGNED_SANDBOX, ANNOTATION_POD_NAME, ANNOTATION_TEMPLATE_REF, Action, Clock, Kind,
    LABEL_CLAIM_UID, LABEL_CREATED_BY, LABEL_LAUNCH_TYPE, LABEL_POD_TEMPLATE_HASH, LABEL_TEMPLATE_HASH,
    LABEL_TEMPLATE_REF_HASH, LABEL_WARM_POOL, SANDBOX_GROUP, Snapshot, VERSION, condition, conditions_of,
    controller_ref, deleting, find_condition, is_controlled_by, is_ready, map_at, meta_entry, name_hash,
    name_of, named, namespace_of, remove_condition, set_condition, text,
};

/// How long a claim waits for pool members that have no pod IP yet before it starts cold (the
/// real controller's grace).
const WARM_CANDIDATE_GRACE: Duration = Duration::from_secs(2);

/// Why a claim has no Sandbox: the Ready condition's reason and message.
struct Failure {
    reason: &'static str,
    message: String,
}

/// `podTemplate.metadata` of a claimed Sandbox: the template's, the claim's identity, and the
/// claim's `additionalPodMetadata`.
fn claim_pod_metadata(sandbox: &mut Value, claim: &Value, template: &Value) {
    let mut meta =
        template.pointer("/spec/podTemplate/metadata").cloned().filter(Value::is_object).unwrap_or(json!({}));
    let labels = map_at(&mut meta, "labels");
    labels.insert(LABEL_CLAIM_UID.into(), json!(text(claim, "/metadata/uid")));
    labels.insert(LABEL_TEMPLATE_REF_HASH.into(), json!(name_hash(name_of(template))));
    match meta_entry(claim, "labels", LABEL_CREATED_BY) {
        Some(by) => labels.insert(LABEL_CREATED_BY.into(), json!(by)),
        None => labels.remove(LABEL_CREATED_BY),
    };
    for part in ["labels", "annotations"] {
        if let Some(extra) =
            claim.pointer(&format!("/spec/additionalPodMetadata/{part}")).and_then(Value::as_object)
        {
            let target = map_at(&mut meta, part);
            for (key, value) in extra {
                target.insert(key.clone(), value.clone());
            }
        }
    }
    sandbox["spec"]["podTemplate"]["metadata"] = meta;
}

/// The claim's labels on a Sandbox it holds.
fn claim_labels(sandbox: &mut Value, claim: &Value) {
    let labels = map_at(&mut sandbox["metadata"], "labels");
    labels.insert(LABEL_CLAIM_UID.into(), json!(text(claim, "/metadata/uid")));
    match meta_entry(claim, "labels", LABEL_CREATED_BY) {
        Some(by) => labels.insert(LABEL_CREATED_BY.into(), json!(by)),
        None => labels.remove(LABEL_CREATED_BY),
    };
}

/// `env` of the claim put into the template's containers (the first one unless `containerName`
/// says), as the template's `envVarsInjectionPolicy` allows.
fn inject_env(sandbox: &mut Value, claim: &Value, template: &Value) -> Result<(), Failure> {
    let Some(env) = claim.pointer("/spec/env").and_then(Value::as_array).filter(|e| !e.is_empty()) else {
        return Ok(());
    };
    let policy = text(template, "/spec/envVarsInjectionPolicy");
    if policy != "Allowed" && policy != "Overrides" {
        return Err(Failure {
            reason: "EnvVarsInjectionRejected",
            message:
                "environment variable injection rejected: environment variable injection is not allowed by \
                      the template policy"
                    .into(),
        });
    }
    let containers = sandbox.pointer_mut("/spec/podTemplate/spec/containers").and_then(Value::as_array_mut);
    let Some(containers) = containers else { return Ok(()) };
    for variable in env {
        let target = text(variable, "/containerName");
        let index = if target.is_empty() {
            Some(0)
        } else {
            containers.iter().position(|c| text(c, "/name") == target)
        };
        let Some(container) = index.and_then(|i| containers.get_mut(i)) else {
            return Err(Failure {
                reason: "ReconcilerError",
                message: format!(
                    "Error seen: target container {target:?} not found in template for environment variable {:?}",
                    text(variable, "/name")
                ),
            });
        };
        let name = text(variable, "/name");
        if !container["env"].is_array() {
            container["env"] = json!([]);
        }
        if let Some(list) = container["env"].as_array_mut() {
            let entry = json!({"name": name, "value": variable["value"]});
            match list.iter().position(|e| text(e, "/name") == name) {
                Some(i) if policy == "Overrides" => list[i] = entry,
                Some(_) => {
                    return Err(Failure {
                        reason: "EnvVarsInjectionRejected",
                        message: format!(
                            "environment variable injection rejected: environment variable {name:?} already exists \
                             in the template and the policy does not allow overrides"
                        ),
                    });
                }
                None => list.push(entry),
            }
        }
    }
    Ok(())
}

/// The Sandbox a claim gets when no pool member is ready: named like the claim, from the pool's
/// template, owned by the claim.
fn cold_sandbox(claim: &Value, template: &Value) -> Result<Value, Failure> {
    let template_name = name_of(template);
    let mut sandbox = json!({
        "apiVersion": format!("{SANDBOX_GROUP}/{VERSION}"),
        "kind": "Sandbox",
        "metadata": {
            "name": name_of(claim),
            "namespace": namespace_of(claim),
            "labels": {LABEL_LAUNCH_TYPE: "cold", LABEL_TEMPLATE_REF_HASH: name_hash(template_name)},
            "annotations": {ANNOTATION_TEMPLATE_REF: template_name},
            "ownerReferences": [controller_ref(claim)],
        },
        "spec": blueprint_of(template),
    });
    claim_labels(&mut sandbox, claim);
    claim_pod_metadata(&mut sandbox, claim, template);
    inject_env(&mut sandbox, claim, template)?;
    Ok(sandbox)
}

/// A pool member handed over to `claim`: out of the pool's labels, owned by the claim, the claim's
/// labels on it and on its pod template.
fn adopted(member: &Value, claim: &Value, template: Option<&Value>) -> Value {
    let mut sandbox = member.clone();
    let labels = map_at(&mut sandbox["metadata"], "labels");
    for key in [LABEL_WARM_POOL, LABEL_POD_TEMPLATE_HASH, LABEL_TEMPLATE_HASH] {
        labels.remove(key);
    }
    labels.insert(LABEL_LAUNCH_TYPE.into(), json!("warm"));
    claim_labels(&mut sandbox, claim);
    sandbox["metadata"]["ownerReferences"] = json!([controller_ref(claim)]);
    let name = json!(name_of(member));
    map_at(&mut sandbox["metadata"], "annotations").insert(ANNOTATION_POD_NAME.into(), name);
    if let Some(template) = template {
        claim_pod_metadata(&mut sandbox, claim, template);
    }
    sandbox
}

/// How soon a claim waiting for pool members to get a pod IP is looked at again.
const WARM_CANDIDATE_RETRY: Duration = Duration::from_millis(200);

/// The writes one claim needs now, and how soon it needs another look if nothing changes (pool
/// members coming up, its `shutdownTime`). `age` is how long the controller has known the claim.
pub(super) fn plan(
    claim: &Value,
    snapshot: &Snapshot,
    age: Duration,
    clock: &Clock,
) -> (Vec<Action>, Option<Duration>) {
    let mut actions = Vec::new();
    if deleting(claim) {
        return (actions, None);
    }
    let now = clock.text.as_str();
    let expires_in = clock.until(claim, "/spec/lifecycle/shutdownTime");
    if expires_in == Some(Duration::ZERO) {
        return (expired(claim, snapshot, now), None);
    }
    let claim_name = name_of(claim);
    let generation = claim.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let pool_name = text(claim, "/spec/warmPoolRef/name");
    let pool = named(&snapshot.pools, pool_name);
    let template_name = pool.map(|p| text(p, "/spec/sandboxTemplateRef/name")).unwrap_or("");
    let template = pool.and_then(|_| named(&snapshot.templates, template_name));
    let mut bound: Option<Value> = None;
    let mut failure: Option<Failure> = None;

    // 1. The Sandbox it already has: by status, by the adoption annotation, or by its own name.
    let assigned = meta_entry(claim, "annotations", ANNOTATION_ASSIGNED_SANDBOX).unwrap_or("");
    for name in [text(claim, "/status/sandbox/name"), assigned, claim_name] {
        if name.is_empty() || bound.is_some() || failure.is_some() {
            continue;
        }
        let Some(sandbox) = named(&snapshot.sandboxes, name) else { continue };
        if is_controlled_by(sandbox, claim) {
            bound = Some(sandbox.clone());
        } else if name == assigned && pool.is_some_and(|p| is_controlled_by(sandbox, p)) {
            // Annotated, but the hand-over did not happen yet: finish it.
            let sandbox = adopted(sandbox, claim, template);
            actions.push(Action::Replace(Kind::Sandbox, sandbox.clone()));
            bound = Some(sandbox);
        } else if name == claim_name {
            failure = Some(Failure {
                reason: "ReconcilerError",
                message: format!(
                    "Error seen: sandbox {claim_name:?} is not controlled by claim {claim_name:?}. Please use a \
                     different claim name or delete the sandbox manually"
                ),
            });
        }
    }

    // 2. A member of the pool (env or volumes ask for a cold start instead).
    let wants_cold = claim.pointer("/spec/env").and_then(Value::as_array).is_some_and(|e| !e.is_empty())
        || claim
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .is_some_and(|v| !v.is_empty());
    if bound.is_none()
        && failure.is_none()
        && !wants_cold
        && let Some(pool) = pool
    {
        let members = members(pool, snapshot);
        let networked: Vec<&Value> = members
            .iter()
            .copied()
            .filter(|s| {
                s.pointer("/status/podIPs").and_then(Value::as_array).is_some_and(|ips| !ips.is_empty())
            })
            .collect();
        // A ready one, else the first that has a pod IP at least (it becomes ready under the claim).
        if let Some(member) = networked.iter().find(|s| is_ready(s)).or(networked.first()) {
            let mut claim = claim.clone();
            map_at(&mut claim["metadata"], "annotations")
                .insert(ANNOTATION_ASSIGNED_SANDBOX.into(), json!(name_of(member)));
            // The claim names its pick first (a conflict there ends the plan before the hand-over);
            // the status follows on the next pass.
            let handed = adopted(member, &claim, template);
            actions.push(Action::Replace(Kind::Claim, claim));
            actions.push(Action::Replace(Kind::Sandbox, handed));
            return (actions, expires_in);
        }
        if !members.is_empty() && age < WARM_CANDIDATE_GRACE {
            return (actions, Some(WARM_CANDIDATE_RETRY));
        }
    }

    // 3. A new one.
    if bound.is_none() && failure.is_none() {
        match (pool, template) {
            (None, _) => {
                failure = Some(Failure {
                    reason: "WarmPoolNotFound",
                    message: format!("SandboxWarmPool {pool_name:?} not found"),
                });
            }
            (Some(_), None) => {
                failure = Some(Failure {
                    reason: "TemplateNotFound",
                    message: format!("SandboxTemplate {template_name:?} not found"),
                });
            }
            (Some(_), Some(template)) => match cold_sandbox(claim, template) {
                Ok(sandbox) => {
                    actions.push(Action::Create(Kind::Sandbox, sandbox.clone()));
                    bound = Some(sandbox);
                }
                Err(why) => failure = Some(why),
            },
        }
    }

    // The status: Ready forwarded from the Sandbox, and which Sandbox it is.
    let mut status = claim.get("status").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    let mut conditions = conditions_of(&status);
    let ready = match (&failure, &bound) {
        (Some(why), _) => condition("Ready", "False", why.reason, &why.message, generation),
        (None, None) => condition("Ready", "False", "SandboxMissing", "Sandbox does not exist", generation),
        (None, Some(sandbox)) => match find_condition(sandbox, "Ready") {
            Some(c) if c["reason"] == "SandboxExpired" => condition(
                "Ready",
                "False",
                "SandboxExpired",
                "Underlying Sandbox resource has expired independently of the Claim.",
                generation,
            ),
            Some(forwarded) => {
                let mut forwarded = forwarded.clone();
                forwarded["observedGeneration"] = json!(generation);
                forwarded
            }
            None => condition("Ready", "False", "SandboxNotReady", "Sandbox is not ready", generation),
        },
    };
    set_condition(&mut conditions, ready, now);
    match bound.as_ref().and_then(|s| find_condition(s, "Finished")) {
        Some(finished) => set_condition(&mut conditions, finished.clone(), now),
        None => remove_condition(&mut conditions, "Finished"),
    }
    status["conditions"] = json!(conditions);
    match &bound {
        Some(sandbox) => {
            let mut binding = json!({"name": name_of(sandbox)});
            if let Some(ips) =
                sandbox.pointer("/status/podIPs").filter(|ips| ips.as_array().is_some_and(|a| !a.is_empty()))
            {
                binding["podIPs"] = ips.clone();
            }
            status["sandbox"] = binding;
        }
        // A failure keeps what the status said (a passing error must not unbind the claim).
        None if failure.is_none() => {
            if let Some(fields) = status.as_object_mut() {
                fields.remove("sandbox");
            }
        }
        None => {}
    }
    if claim.get("status") != Some(&status) {
        let mut updated = claim.clone();
        updated["status"] = status;
        actions.push(Action::Status(Kind::Claim, updated));
    }
    (actions, expires_in)
}

/// A claim past its `shutdownTime`: `Delete` (and `DeleteForeground`) delete the claim, and its
/// Sandbox with it; `Retain` (the default) deletes the Sandbox and keeps the claim, marked expired.
fn expired(claim: &Value, snapshot: &Snapshot, now: &str) -> Vec<Action> {
    let namespace = namespace_of(claim).to_owned();
    match text(claim, "/spec/lifecycle/shutdownPolicy") {
        "Delete" | "DeleteForeground" => {
            return vec![Action::Delete(Kind::Claim, namespace, name_of(claim).to_owned())];
        }
        _ => {}
    }
    let mut actions = Vec::new();
    let held = [text(claim, "/status/sandbox/name"), name_of(claim)].into_iter().find(|name| {
        named(&snapshot.sandboxes, name).is_some_and(|s| is_controlled_by(s, claim) && !deleting(s))
    });
    if let Some(name) = held {
        actions.push(Action::Delete(Kind::Sandbox, namespace, name.to_owned()));
    }
    let generation = claim.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let mut status = claim.get("status").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    let mut conditions = conditions_of(&status);
    let ready =
        condition("Ready", "False", "ClaimExpired", "Claim expired. Sandbox cleanup initiated.", generation);
    set_condition(&mut conditions, ready, now);
    status["conditions"] = json!(conditions);
    if let Some(fields) = status.as_object_mut() {
        fields.remove("sandbox");
    }
    if claim.get("status") != Some(&status) {
        let mut updated = claim.clone();
        updated["status"] = status;
        actions.push(Action::Status(Kind::Claim, updated));
    }
    actions
}

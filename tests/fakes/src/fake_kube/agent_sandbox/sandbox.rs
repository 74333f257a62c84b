//! The Sandbox controller: a pod (and, when `spec.service` is true, a headless Service) per
//! Sandbox, and the Sandbox's status from them, with the real controller's conditions, reasons and
//! messages.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::super::resource::ResourceType;
use super::super::status::ApiError;

use super::{
    ANNOTATION_POD_NAME, ANNOTATION_PROPAGATED_LABELS, Action, CLUSTER_DOMAIN, Clock, EXTENSIONS_GROUP, Kind,
    LABEL_CLAIM_UID, LABEL_CREATED_BY, LABEL_SANDBOX_NAME_HASH, LABEL_TEMPLATE_REF_HASH, LABEL_WARM_POOL,
    Snapshot, condition, conditions_of, controller_of, controller_ref, deleting, is_controlled_by,
    meta_entry, name_hash, name_of, named, namespace_of, remove_condition, set_condition, text,
};

/// Labels and annotations under these prefixes are the system's: a pod template cannot set them.
fn is_system_key(key: &str) -> bool {
    key.starts_with("agents.x-k8s.io/") || key.starts_with("extensions.agents.x-k8s.io/")
}

/// The name of `sandbox`'s pod: the one its annotation names, else its own.
fn pod_name(sandbox: &Value) -> &str {
    match meta_entry(sandbox, "annotations", ANNOTATION_POD_NAME) {
        Some(name) if !name.is_empty() => name,
        _ => name_of(sandbox),
    }
}

/// The labels the controller keeps on `sandbox`'s pod, besides the template's.
fn system_labels(sandbox: &Value) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert(LABEL_SANDBOX_NAME_HASH.into(), json!(name_hash(name_of(sandbox))));
    // A claim's or a pool's Sandbox passes on which pool and template it came from.
    if let Some(owner) =
        controller_of(sandbox).filter(|r| text(r, "/apiVersion").starts_with(EXTENSIONS_GROUP))
    {
        if text(owner, "/kind") == "SandboxWarmPool"
            && let Some(pool) = meta_entry(sandbox, "labels", LABEL_WARM_POOL)
        {
            labels.insert(LABEL_WARM_POOL.into(), json!(pool));
        }
        if let Some(hash) = meta_entry(sandbox, "labels", LABEL_TEMPLATE_REF_HASH) {
            labels.insert(LABEL_TEMPLATE_REF_HASH.into(), json!(hash));
        }
    }
    if let Some(by) = meta_entry(sandbox, "labels", LABEL_CREATED_BY) {
        labels.insert(LABEL_CREATED_BY.into(), json!(by));
    }
    labels
}

/// The Pod the controller creates for a running `sandbox`: its template, named like it, owned by it.
fn pod_for(sandbox: &Value) -> Value {
    let template = &sandbox["spec"]["podTemplate"];
    let mut labels = Map::new();
    let mut propagated = Vec::new();
    for (key, value) in template.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten()
    {
        if !is_system_key(key) {
            labels.insert(key.clone(), value.clone());
            propagated.push(key.clone());
        }
    }
    labels.extend(system_labels(sandbox));
    let mut annotations = Map::new();
    for (key, value) in
        template.pointer("/metadata/annotations").and_then(Value::as_object).into_iter().flatten()
    {
        if !is_system_key(key) {
            annotations.insert(key.clone(), value.clone());
        }
    }
    propagated.sort();
    if !propagated.is_empty() {
        annotations.insert(ANNOTATION_PROPAGATED_LABELS.into(), json!(propagated.join(",")));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name_of(sandbox),
            "namespace": namespace_of(sandbox),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_ref(sandbox)],
        },
        "spec": template["spec"],
    })
}

/// Why the API server would refuse to create `pod` (its defaults and validation, as a create runs
/// them): the real controller reports that error in the Sandbox's Ready condition.
fn refused(pod: &Value, pods: &ResourceType) -> Option<String> {
    let mut pod = pod.clone();
    if let Some(defaulter) = pods.defaulter {
        defaulter(&mut pod);
    }
    let causes = pods.validator.map(|validate| validate(&pod)).unwrap_or_default();
    (!causes.is_empty()).then(|| ApiError::invalid(pods, name_of(&pod), causes).message)
}

/// The headless Service of a Sandbox with `spec.service: true`.
fn service_for(sandbox: &Value) -> Value {
    let hash = name_hash(name_of(sandbox));
    let mut ports = Vec::new();
    for container in
        sandbox.pointer("/spec/podTemplate/spec/containers").and_then(Value::as_array).into_iter().flatten()
    {
        for port in container.get("ports").and_then(Value::as_array).into_iter().flatten() {
            if let Some(number) = port.get("containerPort") {
                let protocol = port.get("protocol").cloned().unwrap_or(json!("TCP"));
                ports.push(json!({"port": number, "targetPort": number, "protocol": protocol}));
            }
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name_of(sandbox),
            "namespace": namespace_of(sandbox),
            "labels": {LABEL_SANDBOX_NAME_HASH: hash},
            "ownerReferences": [controller_ref(sandbox)],
        },
        "spec": {"clusterIP": "None", "selector": {LABEL_SANDBOX_NAME_HASH: hash}, "ports": ports},
    })
}

/// The pod's IPs (`status.podIPs`, else `status.podIP`).
fn pod_ips(pod: &Value) -> Vec<Value> {
    let listed: Vec<Value> = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("ip").and_then(Value::as_str))
        .map(|ip| json!(ip))
        .collect();
    if !listed.is_empty() {
        return listed;
    }
    match text(pod, "/status/podIP") {
        "" => Vec::new(),
        ip => vec![json!(ip)],
    }
}

/// The pod condition of `kind`.
fn pod_condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == kind)
}

/// A Sandbox past its `shutdownTime`: first marked (Ready False, `SandboxExpired`), then its pod
/// and Service deleted, then (policy `Delete`) itself, or (`Retain`, the default) kept with only
/// its conditions in the status.
fn expired(sandbox: &Value, snapshot: &Snapshot, now: &str) -> Vec<Action> {
    let namespace = namespace_of(sandbox).to_owned();
    let generation = sandbox.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let expiry = condition("Ready", "False", "SandboxExpired", "Sandbox has expired", generation);
    let mut conditions = conditions_of(sandbox.get("status").unwrap_or(&Value::Null));
    let mut actions = Vec::new();
    let marked = super::find_condition(sandbox, "Ready").is_some_and(|c| c["reason"] == "SandboxExpired");
    if marked {
        if let Some(pod) =
            named(&snapshot.pods, pod_name(sandbox)).filter(|p| is_controlled_by(p, sandbox) && !deleting(p))
        {
            actions.push(Action::Delete(Kind::Pod, namespace.clone(), name_of(pod).to_owned()));
        }
        let services = snapshot.services.as_deref().unwrap_or_default();
        if let Some(service) = named(services, name_of(sandbox)).filter(|s| is_controlled_by(s, sandbox)) {
            actions.push(Action::Delete(Kind::Service, namespace.clone(), name_of(service).to_owned()));
        }
        if text(sandbox, "/spec/shutdownPolicy") == "Delete" {
            actions.push(Action::Delete(Kind::Sandbox, namespace, name_of(sandbox).to_owned()));
            return actions;
        }
    } else {
        remove_condition(&mut conditions, "PodScheduled");
    }
    set_condition(&mut conditions, expiry, now);
    // Retained: the live fields go, the conditions stay.
    let status = if marked {
        json!({"conditions": conditions})
    } else {
        let mut status = sandbox.get("status").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
        status["conditions"] = json!(conditions);
        status
    };
    if sandbox.get("status") != Some(&status) {
        let mut updated = sandbox.clone();
        updated["status"] = status;
        actions.push(Action::Status(Kind::Sandbox, updated));
    }
    actions
}

/// The writes one Sandbox needs now, and how soon it needs another look if nothing changes (its
/// `shutdownTime`).
pub(super) fn plan(sandbox: &Value, snapshot: &Snapshot, clock: &Clock) -> (Vec<Action>, Option<Duration>) {
    let mut actions = Vec::new();
    if deleting(sandbox) {
        return (actions, None);
    }
    let now = clock.text.as_str();
    let expires_in = clock.until(sandbox, "/spec/shutdownTime");
    if expires_in == Some(Duration::ZERO) {
        return (expired(sandbox, snapshot, now), None);
    }
    let name = name_of(sandbox);
    let namespace = namespace_of(sandbox);
    let generation = sandbox.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let suspended = text(sandbox, "/spec/operatingMode") == "Suspended";
    let existing = named(&snapshot.pods, pod_name(sandbox));
    let owned = existing.is_some_and(|p| is_controlled_by(p, sandbox));
    let mut failure = None;
    let created;
    let mut pod = existing;

    if suspended {
        if let Some(p) = existing.filter(|p| owned && !deleting(p)) {
            actions.push(Action::Delete(Kind::Pod, namespace.to_owned(), name_of(p).to_owned()));
        }
    } else if existing.is_none() {
        created = pod_for(sandbox);
        match snapshot.pod_type.as_deref().and_then(|pods| refused(&created, pods)) {
            Some(why) => failure = Some(format!("Error seen: {why}")),
            None => {
                actions.push(Action::Create(Kind::Pod, created.clone()));
                pod = Some(&created);
            }
        }
    } else if !owned {
        failure = Some(format!(
            "Error seen: pod {:?} exists and is not owned by sandbox {name:?}",
            pod_name(sandbox)
        ));
    } else if let Some(p) = existing {
        // Keep the system labels in step (an adopted Sandbox's pod leaves the pool's selector).
        let wanted = system_labels(sandbox);
        let mut patch = Map::new();
        for (key, value) in &wanted {
            if p.pointer("/metadata/labels").and_then(|l| l.get(key)) != Some(value) {
                patch.insert(key.clone(), value.clone());
            }
        }
        for key in [LABEL_WARM_POOL, LABEL_TEMPLATE_REF_HASH, LABEL_CREATED_BY, LABEL_CLAIM_UID] {
            if !wanted.contains_key(key) && meta_entry(p, "labels", key).is_some() {
                patch.insert(key.into(), Value::Null);
            }
        }
        if !patch.is_empty() {
            actions.push(Action::Patch(
                Kind::Pod,
                namespace.to_owned(),
                name_of(p).to_owned(),
                json!({"metadata": {"labels": patch}}),
            ));
        }
    }
    let owned = pod.is_some_and(|p| is_controlled_by(p, sandbox));
    let own_pod = pod.filter(|_| owned);

    // The pod's name on the Sandbox while it has one (clients find the pod by it).
    let annotated = meta_entry(sandbox, "annotations", ANNOTATION_POD_NAME);
    let wanted_annotation = if suspended { None } else { own_pod.map(name_of) };
    if annotated.filter(|a| !a.is_empty()) != wanted_annotation
        && (wanted_annotation.is_some() || annotated.is_some())
    {
        actions.push(Action::Patch(
            Kind::Sandbox,
            namespace.to_owned(),
            name.to_owned(),
            json!({"metadata": {"annotations": {ANNOTATION_POD_NAME: wanted_annotation}}}),
        ));
    }

    // The headless Service, when asked for and the store serves Services.
    let wants_service = sandbox.pointer("/spec/service").and_then(Value::as_bool);
    let mut service = None;
    if let Some(services) = &snapshot.services {
        service = named(services, name).filter(|s| is_controlled_by(s, sandbox));
        match (wants_service, service) {
            (Some(true), None) if !suspended => {
                let made = service_for(sandbox);
                actions.push(Action::Create(Kind::Service, made));
            }
            (Some(false), Some(s)) => {
                actions.push(Action::Delete(Kind::Service, namespace.to_owned(), name_of(s).to_owned()));
                service = None;
            }
            _ => {}
        }
    }

    let mut status = sandbox.get("status").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    let mut conditions = conditions_of(&status);
    if pod.is_some() {
        status["selector"] = json!(format!("{LABEL_SANDBOX_NAME_HASH}={}", name_hash(name)));
    }
    let ips = own_pod.map(pod_ips).unwrap_or_default();
    if let Some(fields) = status.as_object_mut() {
        if ips.is_empty() {
            fields.remove("podIPs");
        } else {
            fields.insert("podIPs".into(), json!(ips));
        }
        match own_pod.map(|p| text(p, "/spec/nodeName")).filter(|n| !n.is_empty()) {
            Some(node) => fields.insert("nodeName".into(), json!(node)),
            None => fields.remove("nodeName"),
        };
        match service {
            Some(s) => {
                fields.insert("service".into(), json!(name_of(s)));
                fields.insert(
                    "serviceFQDN".into(),
                    json!(format!("{}.{}.svc.{CLUSTER_DOMAIN}", name_of(s), namespace)),
                );
            }
            None => {
                fields.remove("service");
                fields.remove("serviceFQDN");
            }
        }
    }

    let suspended_condition = match (suspended, pod) {
        (false, _) => condition("Suspended", "False", "NotSuspended", "Sandbox is not suspended", generation),
        (true, None) => condition(
            "Suspended",
            "True",
            "PodTerminated",
            "Pod has been terminated. Sandbox is suspended",
            generation,
        ),
        (true, Some(_)) if !owned => condition(
            "Suspended",
            "False",
            "PodNotOwned",
            "Refused to delete pod because it is not owned by this sandbox",
            generation,
        ),
        (true, Some(_)) => condition(
            "Suspended",
            "False",
            "PodTerminating",
            "Pod is terminating. Sandbox is suspending",
            generation,
        ),
    };
    set_condition(&mut conditions, suspended_condition, now);

    let phase = own_pod.map(|p| text(p, "/status/phase")).unwrap_or("");
    match phase {
        "Succeeded" => set_condition(
            &mut conditions,
            condition("Finished", "True", "PodSucceeded", "Pod completed successfully", generation),
            now,
        ),
        "Failed" => set_condition(
            &mut conditions,
            condition("Finished", "True", "PodFailed", "Pod failed", generation),
            now,
        ),
        _ => remove_condition(&mut conditions, "Finished"),
    }

    match own_pod {
        None => remove_condition(&mut conditions, "PodScheduled"),
        Some(p) => {
            let mirrored = match pod_condition(p, "PodScheduled") {
                Some(c) => {
                    let status = text(c, "/status");
                    let reason = match text(c, "/reason") {
                        "" if status == "True" => "PodScheduled",
                        "" => "PodSchedulingUnknown",
                        reason => reason,
                    };
                    condition("PodScheduled", status, reason, text(c, "/message"), generation)
                }
                None => condition(
                    "PodScheduled",
                    "Unknown",
                    "PodSchedulingUnknown",
                    "Pod has not reported a PodScheduled condition yet",
                    generation,
                ),
            };
            set_condition(&mut conditions, mirrored, now);
        }
    }

    let service_required = wants_service.unwrap_or(service.is_some()) && snapshot.services.is_some();
    let ready = if let Some(message) = &failure {
        condition("Ready", "False", "ReconcilerError", message, generation)
    } else if suspended {
        let message = if pod.is_some() { "Sandbox is suspending" } else { "Sandbox is suspended" };
        condition("Ready", "False", "SandboxSuspended", message, generation)
    } else if phase == "Succeeded" {
        condition("Ready", "False", "PodSucceeded", "Pod completed successfully", generation)
    } else if phase == "Failed" {
        condition("Ready", "False", "PodFailed", "Pod failed", generation)
    } else {
        let (mut message, mut up) = match own_pod {
            None => ("Pod does not exist".to_owned(), false),
            Some(p) if phase == "Running" => match pod_condition(p, "Ready") {
                Some(c) if c["status"] == "True" && ips.is_empty() => {
                    ("Pod is Ready but has no podIPs yet".to_owned(), false)
                }
                Some(c) if c["status"] == "True" => ("Pod is Ready".to_owned(), true),
                _ => ("Pod is Running but not Ready".to_owned(), false),
            },
            Some(_) => (format!("Pod exists with phase: {phase}"), false),
        };
        if service_required {
            if service.is_some() {
                message.push_str("; Service Exists");
            } else {
                message.push_str("; Service does not exist");
                up = false;
            }
        }
        if up {
            condition("Ready", "True", "DependenciesReady", &message, generation)
        } else {
            condition("Ready", "False", "DependenciesNotReady", &message, generation)
        }
    };
    set_condition(&mut conditions, ready, now);
    status["conditions"] = json!(conditions);

    if Some(&status) != sandbox.get("status") {
        let mut updated = sandbox.clone();
        updated["status"] = status;
        actions.push(Action::Status(Kind::Sandbox, updated));
    }
    (actions, expires_in)
}

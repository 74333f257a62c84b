//! The SandboxWarmPool controller: keeps `spec.replicas` Sandboxes of the pool's template, each
//! named `<pool>-xxxxx`, labelled with the pool and owned by it, and counts them in the status.

use serde_json::{Map, Value, json};

use super::{
    ANNOTATION_TEMPLATE_REF, Action, Kind, LABEL_CREATED_BY, LABEL_LAUNCH_TYPE, LABEL_POD_TEMPLATE_HASH,
    LABEL_TEMPLATE_HASH, LABEL_TEMPLATE_REF_HASH, LABEL_WARM_POOL, SANDBOX_GROUP, Snapshot, VERSION,
    controller_ref, deleting, is_controlled_by, is_ready, map_at, meta_entry, name_hash, name_of, named,
    namespace_of, text,
};

/// The most members a pool makes: each is a real container on the test machine, so a pool asking
/// for more gets this many (the real controller has no such cap).
pub(super) const MAX_MEMBERS: usize = 16;

/// The blueprint a template gives its Sandboxes (`podTemplate`, `volumeClaimTemplates`,
/// `service`), with the controller's secure default: no service account token unless the template
/// asks for one.
pub(super) fn blueprint_of(template: &Value) -> Map<String, Value> {
    let mut spec = Map::new();
    for key in ["podTemplate", "volumeClaimTemplates", "service"] {
        if let Some(value) = template.pointer(&format!("/spec/{key}")) {
            spec.insert(key.into(), value.clone());
        }
    }
    if let Some(pod_spec) =
        spec.get_mut("podTemplate").and_then(|t| t.get_mut("spec")).and_then(Value::as_object_mut)
    {
        pod_spec.entry("automountServiceAccountToken").or_insert(json!(false));
    }
    spec
}

/// The pool's live members: Sandboxes it controls that carry its label.
pub(super) fn members<'a>(pool: &Value, snapshot: &'a Snapshot) -> Vec<&'a Value> {
    let hash = name_hash(name_of(pool));
    let mut members: Vec<&Value> = snapshot
        .sandboxes
        .iter()
        .filter(|s| {
            is_controlled_by(s, pool)
                && meta_entry(s, "labels", LABEL_WARM_POOL) == Some(hash.as_str())
                && !deleting(s)
        })
        .collect();
    // Oldest first (names break ties), as a FIFO hands them out.
    members.sort_by_key(|s| (text(s, "/metadata/creationTimestamp").to_owned(), name_of(s).to_owned()));
    members
}

/// A new member of `pool` made from `template`.
fn member(pool: &Value, template: &Value) -> Value {
    let pool_hash = name_hash(name_of(pool));
    let template_name = name_of(template);
    let spec = blueprint_of(template);
    let blueprint_hash = name_hash(&Value::Object(spec.clone()).to_string());
    let mut sandbox = json!({
        "apiVersion": format!("{SANDBOX_GROUP}/{VERSION}"),
        "kind": "Sandbox",
        "metadata": {
            "generateName": format!("{}-", name_of(pool)),
            "namespace": namespace_of(pool),
            "labels": {
                LABEL_WARM_POOL: pool_hash,
                LABEL_TEMPLATE_REF_HASH: name_hash(template_name),
                LABEL_LAUNCH_TYPE: "warm",
                LABEL_POD_TEMPLATE_HASH: blueprint_hash,
                LABEL_TEMPLATE_HASH: blueprint_hash,
                LABEL_CREATED_BY: "controller",
            },
            "annotations": {ANNOTATION_TEMPLATE_REF: template_name},
            "ownerReferences": [controller_ref(pool)],
        },
        "spec": spec,
    });
    let pod_meta = map_at(&mut sandbox["spec"]["podTemplate"], "metadata");
    let labels = pod_meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    labels[LABEL_WARM_POOL] = json!(pool_hash);
    labels[LABEL_TEMPLATE_REF_HASH] = json!(name_hash(template_name));
    labels[LABEL_POD_TEMPLATE_HASH] = json!(blueprint_hash);
    labels[LABEL_TEMPLATE_HASH] = json!(blueprint_hash);
    sandbox
}

/// The writes one pool needs now: members made or deleted toward `spec.replicas`, and the status.
pub(super) fn plan(pool: &Value, snapshot: &Snapshot) -> Vec<Action> {
    let mut actions = Vec::new();
    if deleting(pool) {
        return actions;
    }
    let desired = pool.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(1);
    let desired = usize::try_from(desired).unwrap_or(usize::MAX).min(MAX_MEMBERS);
    let members = members(pool, snapshot);
    // Without its template the pool makes nothing (claims on it report TemplateNotFound).
    let template = named(&snapshot.templates, text(pool, "/spec/sandboxTemplateRef/name"));
    if let Some(template) = template {
        for _ in members.len()..desired {
            actions.push(Action::Create(Kind::Sandbox, member(pool, template)));
        }
    }
    if members.len() > desired {
        // Not-ready members go first.
        let mut order = members.clone();
        order.sort_by_key(|s| is_ready(s));
        order.truncate(members.len() - desired);
        for extra in order {
            actions.push(Action::Delete(
                Kind::Sandbox,
                namespace_of(extra).to_owned(),
                name_of(extra).to_owned(),
            ));
        }
    }
    let ready = members.iter().filter(|s| is_ready(s)).count();
    // Zero counts are left out, as the real status's `omitempty` fields are.
    let mut status = json!({"selector": format!("{LABEL_WARM_POOL}={}", name_hash(name_of(pool)))});
    if !members.is_empty() {
        status["replicas"] = json!(members.len());
    }
    if ready > 0 {
        status["readyReplicas"] = json!(ready);
    }
    if let Some(generation) = pool.pointer("/metadata/generation") {
        status["observedGeneration"] = generation.clone();
    }
    if pool.get("status") != Some(&status) {
        let mut updated = pool.clone();
        updated["status"] = status;
        actions.push(Action::Status(Kind::Pool, updated));
    }
    actions
}

//! kubernetes-sigs/agent-sandbox in the fake API server: its four custom resources served at their
//! real groups and version (`agents.x-k8s.io/v1beta1` Sandbox; `extensions.agents.x-k8s.io/v1beta1`
//! SandboxTemplate, SandboxClaim, SandboxWarmPool, with the CRDs' defaults and required fields,
//! also listed as `CustomResourceDefinition` objects), and a controller that does what the real
//! controllers do, as far as a client can observe it:
//!
//! - `sandbox`: a Sandbox gets a Pod named like it (a real container, through the pod
//!   controller), its status says what the pod does (`Ready`, `PodScheduled`, `Suspended`,
//!   `Finished`, `podIPs`, `selector`); `spec.operatingMode: Suspended` deletes the pod (its
//!   filesystem with it, as in the real one) and `Running` makes a new one.
//! - `pool`: a SandboxWarmPool keeps `spec.replicas` Sandboxes of its template (`<pool>-xxxxx`;
//!   at most `pool::MAX_MEMBERS`, as each is a real container).
//! - `claim`: a SandboxClaim takes a pool's ready Sandbox (adoption: the Sandbox leaves the pool
//!   and is owned by the claim; the pool makes a new one), else creates one named like the claim
//!   from the pool's template; its status forwards the Sandbox's `Ready` and names it.
//!
//! Deleting a claim or a Sandbox takes its Sandbox and pod with it through `ownerReferences` (the
//! store's garbage collector; the real controllers use no finalizers either).
//!
//! - `shutdownTime` on a claim or a Sandbox: at that time the claim is deleted (policy `Delete`)
//!   or keeps `Ready: False, ClaimExpired` without its Sandbox (`Retain`); a Sandbox loses its pod
//!   and is deleted (`Delete`) or kept as `Ready: False, SandboxExpired` (`Retain`).
//!
//! Not done: `volumeClaimTemplates` (no PersistentVolumeClaims), NetworkPolicies,
//! `ttlSecondsAfterFinished`, the pool's `updateStrategy` (stale members are not replaced), the
//! `scale` subresource, the router, the deprecated `v1alpha1` versions and their conversion.
//!
//! Like the real add-on it is not part of a bare cluster: [`install`] puts it into a
//! [`FakeKube`](super::FakeKube) (`fake-kube --agent-sandbox` for the binary).
//!
//! The controller is one task: on every change of these resources or of pods it reads everything
//! and makes the writes that are due, each against the `resourceVersion` it read (a conflict means
//! someone wrote first; the change that caused it starts the next pass).

mod claim;
mod pool;
mod sandbox;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::resource::{Cause, ResourceKey, ResourceType};
use super::selector::Selector;
use super::status::ApiError;
use super::store::{Store, now_rfc3339};

/// Group of `Sandbox`.
pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// Group of `SandboxTemplate`, `SandboxClaim`, `SandboxWarmPool`.
pub const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
/// The version served (the real one's storage version; `v1alpha1` is deprecated there).
pub const VERSION: &str = "v1beta1";

/// Pod (and Service) label: [`name_hash`] of the Sandbox's name; `status.selector` selects it.
pub const LABEL_SANDBOX_NAME_HASH: &str = "agents.x-k8s.io/sandbox-name-hash";
/// A pool member's label: [`name_hash`] of the pool's name (removed on adoption).
pub const LABEL_WARM_POOL: &str = "agents.x-k8s.io/warm-pool-sandbox";
/// [`name_hash`] of the template a Sandbox was made from.
pub const LABEL_TEMPLATE_REF_HASH: &str = "agents.x-k8s.io/sandbox-template-ref-hash";
/// `cold` (made for a claim) or `warm` (made by a pool).
pub const LABEL_LAUNCH_TYPE: &str = "agents.x-k8s.io/launch-type";
/// The uid of the claim that holds a Sandbox (on it and on its pod).
pub const LABEL_CLAIM_UID: &str = "agents.x-k8s.io/claim-uid";
/// Who made it: the claim's value (`python-client`), `controller` for pool members.
pub const LABEL_CREATED_BY: &str = "agents.x-k8s.io/created-by";
/// A hash of the template's blueprint on pool members (not the real one's hash function).
pub const LABEL_TEMPLATE_HASH: &str = "agents.x-k8s.io/sandbox-template-hash";
const LABEL_POD_TEMPLATE_HASH: &str = "agents.x-k8s.io/sandbox-pod-template-hash";
/// On a Sandbox: the name of its pod.
pub const ANNOTATION_POD_NAME: &str = "agents.x-k8s.io/pod-name";
/// On a Sandbox: the template it was made from.
pub const ANNOTATION_TEMPLATE_REF: &str = "agents.x-k8s.io/sandbox-template-ref";
/// On a claim: the Sandbox it adopted.
pub const ANNOTATION_ASSIGNED_SANDBOX: &str = "agents.x-k8s.io/sandbox-name";
const ANNOTATION_PROPAGATED_LABELS: &str = "agents.x-k8s.io/propagated-labels";
/// The cluster domain of `status.serviceFQDN` (the real controller's default).
const CLUSTER_DOMAIN: &str = "cluster.local";

/// The resources the controller reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Sandbox,
    Claim,
    Template,
    Pool,
    Pod,
    Service,
}

impl Kind {
    fn key(self) -> ResourceKey {
        match self {
            Self::Sandbox => ResourceKey::new(SANDBOX_GROUP, "sandboxes"),
            Self::Claim => ResourceKey::new(EXTENSIONS_GROUP, "sandboxclaims"),
            Self::Template => ResourceKey::new(EXTENSIONS_GROUP, "sandboxtemplates"),
            Self::Pool => ResourceKey::new(EXTENSIONS_GROUP, "sandboxwarmpools"),
            Self::Pod => ResourceKey::core("pods"),
            Self::Service => ResourceKey::core("services"),
        }
    }
}

/// The four types as the CRDs define them (v1beta1).
fn resource_types() -> [ResourceType; 4] {
    let mut sandbox = ResourceType::new(SANDBOX_GROUP, VERSION, "sandboxes", "Sandbox", true)
        .with_status()
        .with_short_names(&["sandbox"]);
    sandbox.defaulter = Some(default_sandbox);
    sandbox.validator = Some(validate_sandbox);
    let mut template =
        ResourceType::new(EXTENSIONS_GROUP, VERSION, "sandboxtemplates", "SandboxTemplate", true)
            .with_short_names(&["sandboxtemplate"]);
    template.defaulter = Some(default_template);
    template.validator = Some(validate_template);
    let mut claim = ResourceType::new(EXTENSIONS_GROUP, VERSION, "sandboxclaims", "SandboxClaim", true)
        .with_status()
        .with_short_names(&["sandboxclaim"]);
    claim.validator = Some(validate_claim);
    let mut pool = ResourceType::new(EXTENSIONS_GROUP, VERSION, "sandboxwarmpools", "SandboxWarmPool", true)
        .with_status()
        .with_short_names(&["swp"]);
    pool.defaulter = Some(default_pool);
    pool.validator = Some(validate_pool);
    [sandbox, template, claim, pool]
}

/// Installs agent-sandbox into `fake` (as `kubectl apply` of its release manifests would): the
/// types, their CRD objects, the controller on the fake's runtime. A second call does nothing.
pub fn install(fake: &super::FakeKube) {
    if fake.store().resource(&Kind::Sandbox.key()).is_some() {
        return;
    }
    register(fake.store());
    fake.spawn(run(fake.store().clone()));
}

/// Serves the four types, and their `CustomResourceDefinition` objects at
/// `apiextensions.k8s.io/v1` (registering that type when the store does not serve it yet).
pub fn register(store: &Store) {
    let crds = ResourceKey::new("apiextensions.k8s.io", "customresourcedefinitions");
    if store.resource(&crds).is_none() {
        store.register(
            ResourceType::new(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
            )
            .with_status()
            .with_short_names(&["crd", "crds"]),
        );
    }
    for resource in resource_types() {
        let definition = crd(&resource);
        store.register(resource);
        // The status is the apiserver's to write (and a create drops it).
        let name = name_of(&definition).to_owned();
        let status = definition["status"].clone();
        if store.create(&crds, "", definition).is_ok() {
            let _ = store.update(&crds, "", &name, |object| {
                object["status"] = status;
                Ok(())
            });
        }
    }
}

/// The `CustomResourceDefinition` of `resource` (names, scope, the one version, subresources;
/// no schema).
fn crd(resource: &ResourceType) -> Value {
    let mut subresources = json!({});
    if resource.status_subresource {
        subresources["status"] = json!({});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.qualified()},
        "spec": {
            "group": resource.group,
            "names": {
                "kind": resource.kind,
                "listKind": resource.list_kind(),
                "plural": resource.plural,
                "singular": resource.singular,
                "shortNames": resource.short_names,
            },
            "scope": "Namespaced",
            "versions": [{
                "name": resource.version,
                "served": true,
                "storage": true,
                "subresources": subresources,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
        "status": {
            "acceptedNames": {"kind": resource.kind, "plural": resource.plural},
            "storedVersions": [resource.version],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
            ],
        },
    })
}

/// Sets `pointer`'s field `key` to `value` when absent (a CRD schema default).
fn default_at(object: &mut Value, pointer: &str, key: &str, value: Value) {
    if let Some(Value::Object(fields)) = object.pointer_mut(pointer) {
        fields.entry(key).or_insert(value);
    }
}

fn default_sandbox(object: &mut Value) {
    default_at(object, "/spec", "operatingMode", json!("Running"));
    default_at(object, "/spec", "shutdownPolicy", json!("Retain"));
}

fn default_template(object: &mut Value) {
    default_at(object, "/spec", "envVarsInjectionPolicy", json!("Disallowed"));
    default_at(object, "/spec", "networkPolicyManagement", json!("Managed"));
    default_at(object, "/spec", "volumeClaimTemplatesPolicy", json!("Disallowed"));
}

fn default_pool(object: &mut Value) {
    default_at(object, "/spec", "replicas", json!(1));
    default_at(object, "/spec/updateStrategy", "type", json!("OnReplenish"));
}

/// A required field missing (`spec.podTemplate: Required value`).
fn required(object: &Value, pointer: &str, causes: &mut Vec<Cause>) {
    if object.pointer(pointer).is_none_or(Value::is_null) {
        causes.push(Cause::required(&pointer.trim_start_matches('/').replace('/', "."), ""));
    }
}

/// A value outside the schema's enum (`Unsupported value: "X": supported values: "A", "B"`).
fn one_of(object: &Value, pointer: &str, allowed: &[&str], causes: &mut Vec<Cause>) {
    let Some(value) = object.pointer(pointer) else { return };
    if value.as_str().is_some_and(|v| allowed.contains(&v)) {
        return;
    }
    let supported: Vec<String> = allowed.iter().map(|a| json!(a).to_string()).collect();
    causes.push(Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!("Unsupported value: {value}: supported values: {}", supported.join(", ")),
        field: pointer.trim_start_matches('/').replace('/', "."),
    });
}

fn validate_sandbox(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    required(object, "/spec", &mut causes);
    required(object, "/spec/podTemplate", &mut causes);
    required(object, "/spec/podTemplate/spec", &mut causes);
    one_of(object, "/spec/operatingMode", &["Running", "Suspended"], &mut causes);
    one_of(object, "/spec/shutdownPolicy", &["Delete", "Retain"], &mut causes);
    causes
}

fn validate_template(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    required(object, "/spec", &mut causes);
    required(object, "/spec/podTemplate", &mut causes);
    required(object, "/spec/podTemplate/spec", &mut causes);
    one_of(object, "/spec/envVarsInjectionPolicy", &["Allowed", "Overrides", "Disallowed"], &mut causes);
    one_of(object, "/spec/networkPolicyManagement", &["Managed", "Unmanaged"], &mut causes);
    one_of(object, "/spec/volumeClaimTemplatesPolicy", &["Disallowed", "Allowed", "Overrides"], &mut causes);
    causes
}

fn validate_claim(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    required(object, "/spec", &mut causes);
    required(object, "/spec/warmPoolRef", &mut causes);
    required(object, "/spec/warmPoolRef/name", &mut causes);
    one_of(object, "/spec/lifecycle/shutdownPolicy", &["Delete", "DeleteForeground", "Retain"], &mut causes);
    causes
}

fn validate_pool(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    required(object, "/spec", &mut causes);
    required(object, "/spec/sandboxTemplateRef", &mut causes);
    required(object, "/spec/sandboxTemplateRef/name", &mut causes);
    if object.pointer("/spec/replicas").and_then(Value::as_i64).is_some_and(|r| r < 0) {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {}: spec.replicas in body should be greater than or equal to 0",
                object.pointer("/spec/replicas").cloned().unwrap_or_default()
            ),
            field: "spec.replicas".into(),
        });
    }
    one_of(object, "/spec/updateStrategy/type", &["Recreate", "OnReplenish"], &mut causes);
    causes
}

/// FNV-1a (32 bit) of `name` as 8 lowercase hex digits: the value of the controllers' hash labels.
pub fn name_hash(name: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

/// The string at `pointer`, `""` when absent.
fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn name_of(object: &Value) -> &str {
    text(object, "/metadata/name")
}

fn namespace_of(object: &Value) -> &str {
    text(object, "/metadata/namespace")
}

fn deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// A label or annotation of `object`.
fn meta_entry<'a>(object: &'a Value, part: &str, key: &str) -> Option<&'a str> {
    object.get("metadata")?.get(part)?.get(key)?.as_str()
}

/// The map at `object[key]`, made (replacing anything else) when it is not one.
fn map_at<'a>(object: &'a mut Value, key: &str) -> &'a mut serde_json::Map<String, Value> {
    if !object.is_object() {
        *object = json!({});
    }
    let field = &mut object[key];
    if !field.is_object() {
        *field = json!({});
    }
    match field {
        Value::Object(map) => map,
        _ => unreachable!("made a map above"),
    }
}

/// An ownerReference that makes `owner` the controller of a dependent.
fn controller_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The controller entry of `object`'s ownerReferences.
fn controller_of(object: &Value) -> Option<&Value> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    let uid = text(owner, "/metadata/uid");
    !uid.is_empty() && controller_of(object).is_some_and(|r| text(r, "/uid") == uid)
}

/// A `metav1.Condition` (its lastTransitionTime is set by [`set_condition`]).
fn condition(kind: &str, status: &str, reason: &str, message: &str, generation: i64) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message, "observedGeneration": generation})
}

/// Puts `new` into `conditions` as apimachinery's `meta.SetStatusCondition` does:
/// lastTransitionTime moves only when the status changes.
fn set_condition(conditions: &mut Vec<Value>, mut new: Value, now: &str) {
    let kind = new["type"].clone();
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(old) => {
            if old["status"] == new["status"] {
                new["lastTransitionTime"] = old["lastTransitionTime"].clone();
            } else if new["lastTransitionTime"].is_null() {
                new["lastTransitionTime"] = json!(now);
            }
            *old = new;
        }
        None => {
            if new["lastTransitionTime"].is_null() {
                new["lastTransitionTime"] = json!(now);
            }
            conditions.push(new);
        }
    }
}

fn remove_condition(conditions: &mut Vec<Value>, kind: &str) {
    conditions.retain(|c| c["type"] != kind);
}

fn find_condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == kind)
}

fn is_ready(object: &Value) -> bool {
    find_condition(object, "Ready").is_some_and(|c| c["status"] == "True")
}

/// The status's conditions, to change and put back.
fn conditions_of(status: &Value) -> Vec<Value> {
    status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// One write of a pass.
#[derive(Debug)]
enum Action {
    Create(Kind, Value),
    /// The whole object with the resourceVersion it was read at.
    Replace(Kind, Value),
    /// The object with its new status, through `/status`.
    Status(Kind, Value),
    /// A JSON merge patch of the main resource.
    Patch(Kind, String, String, Value),
    Delete(Kind, String, String),
}

/// Everything in one namespace, read at the start of a phase.
#[derive(Default)]
struct Snapshot {
    sandboxes: Vec<Value>,
    claims: Vec<Value>,
    templates: Vec<Value>,
    pools: Vec<Value>,
    pods: Vec<Value>,
    /// `None` when the store does not serve Services.
    services: Option<Vec<Value>>,
    /// The Pod type, to tell beforehand why a pod would be refused.
    pod_type: Option<Arc<ResourceType>>,
}

impl Snapshot {
    fn read(store: &Store, namespace: &str) -> Result<Self, ApiError> {
        let all = Selector::default();
        let list = |kind: Kind| store.list(&kind.key(), Some(namespace), &all).map(|(items, _)| items);
        Ok(Self {
            sandboxes: list(Kind::Sandbox)?,
            claims: list(Kind::Claim)?,
            templates: list(Kind::Template)?,
            pools: list(Kind::Pool)?,
            pods: list(Kind::Pod)?,
            services: store.resource(&Kind::Service.key()).map(|_| list(Kind::Service)).transpose()?,
            pod_type: store.resource(&Kind::Pod.key()),
        })
    }
}

fn named<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|o| name_of(o) == name)
}

/// Makes `actions` in order; the first that fails ends the plan (its writes build on each other).
/// Conflicts, names taken and objects gone are races the next pass sorts out.
fn apply(store: &Store, actions: Vec<Action>) {
    for action in actions {
        let result = match action {
            Action::Create(kind, object) => {
                let namespace = namespace_of(&object).to_owned();
                store.create(&kind.key(), &namespace, object).map(drop)
            }
            Action::Replace(kind, object) => {
                store.replace(&kind.key(), namespace_of(&object), name_of(&object), object.clone()).map(drop)
            }
            Action::Status(kind, object) => store
                .replace_status(&kind.key(), namespace_of(&object), name_of(&object), object.clone())
                .map(drop),
            Action::Patch(kind, namespace, name, patch) => {
                store.merge_patch(&kind.key(), &namespace, &name, &patch, false).map(drop)
            }
            Action::Delete(kind, namespace, name) => {
                store.delete(&kind.key(), &namespace, &name, None).map(drop)
            }
        };
        if let Err(error) = result {
            if !matches!(error.code, 404 | 409) {
                eprintln!("fake-kube agent-sandbox controller: {error}");
            }
            return;
        }
    }
}

/// What the controller remembers between passes.
#[derive(Default)]
struct Controller {
    /// When this controller first saw each claim (by uid): a claim waits a short while for pool
    /// members that have no pod IP yet before it starts cold, as the real one does.
    first_seen: HashMap<String, Instant>,
}

impl Controller {
    /// One pass over every namespace; how soon the next one is due when nothing changes (a claim
    /// waiting for pool members, a `shutdownTime` to come), if at all.
    fn pass(&mut self, store: &Store) -> Option<Duration> {
        let all = Selector::default();
        let mut namespaces = BTreeSet::new();
        for kind in [Kind::Sandbox, Kind::Claim, Kind::Pool] {
            if let Ok((items, _)) = store.list(&kind.key(), None, &all) {
                namespaces.extend(items.iter().map(|o| namespace_of(o).to_owned()));
            }
        }
        let mut wake: Option<Duration> = None;
        let mut soon = |after: Option<Duration>| {
            if let Some(after) = after {
                wake = Some(wake.map_or(after, |w| w.min(after)));
            }
        };
        let mut seen = BTreeSet::new();
        for namespace in namespaces {
            // Claims first (they take pool members), then pools (they refill), then Sandboxes
            // (pods and status), each from a fresh read.
            if let Ok(snapshot) = Snapshot::read(store, &namespace) {
                for item in &snapshot.claims {
                    let uid = text(item, "/metadata/uid").to_owned();
                    let age = self.first_seen.entry(uid.clone()).or_insert_with(Instant::now).elapsed();
                    seen.insert(uid);
                    let (actions, after) = claim::plan(item, &snapshot, age, &Clock::now());
                    soon(after);
                    apply(store, actions);
                }
            }
            if let Ok(snapshot) = Snapshot::read(store, &namespace) {
                for item in &snapshot.pools {
                    apply(store, pool::plan(item, &snapshot));
                }
            }
            if let Ok(snapshot) = Snapshot::read(store, &namespace) {
                for item in &snapshot.sandboxes {
                    let (actions, after) = sandbox::plan(item, &snapshot, &Clock::now());
                    soon(after);
                    apply(store, actions);
                }
            }
        }
        self.first_seen.retain(|uid, _| seen.contains(uid));
        wake
    }
}

/// The time of a pass: for timestamps it writes, and to compare `shutdownTime`s with.
struct Clock {
    /// RFC 3339, as written into conditions.
    text: String,
    /// Seconds since the epoch.
    seconds: f64,
}

impl Clock {
    fn now() -> Self {
        let now = std::time::SystemTime::now();
        let seconds = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        Self { text: now_rfc3339(), seconds }
    }

    /// How long until the RFC 3339 time at `pointer` in `object`: `None` when there is none (or it
    /// does not parse), zero when it has passed.
    fn until(&self, object: &Value, pointer: &str) -> Option<Duration> {
        let at = unix_seconds(object.pointer(pointer)?.as_str()?)?;
        Some(Duration::from_secs_f64((at - self.seconds).max(0.0)))
    }
}

/// Seconds since the epoch of an RFC 3339 time (`2026-01-02T03:04:05.5Z`, `…+02:00`).
fn unix_seconds(text: &str) -> Option<f64> {
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let rest = text.get(19..)?;
    let zone_at = rest.find(['Z', 'z', '+', '-'])?;
    let fraction = match &rest[..zone_at] {
        "" => 0.0,
        digits => format!("0{digits}").parse::<f64>().ok()?,
    };
    let offset = match &rest[zone_at..] {
        "Z" | "z" => 0,
        zone => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let hours = zone.get(1..3)?.parse::<i64>().ok()?;
            let minutes = zone.get(4..6)?.parse::<i64>().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    // Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(seconds as f64 + fraction)
}

/// Whether an event of `resource` can change what the controller does.
fn relevant(resource: &ResourceKey) -> bool {
    [Kind::Sandbox, Kind::Claim, Kind::Template, Kind::Pool, Kind::Pod, Kind::Service]
        .iter()
        .any(|kind| kind.key() == *resource)
}

/// Runs the controller until the store goes away (spawn it on the fake's runtime).
pub async fn run(store: Arc<Store>) {
    let mut controller = Controller::default();
    loop {
        // Subscribed before the pass, so a change made during it starts the next one.
        let mut changes = match store.subscribe(None) {
            Ok(changes) => changes,
            Err(error) => {
                eprintln!("fake-kube agent-sandbox controller: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Besides changes, what is due at a time (a waiting claim, a shutdownTime) wakes it.
        let idle = controller.pass(&store).unwrap_or(Duration::from_secs(10));
        let deadline = tokio::time::Instant::now() + idle;
        loop {
            match tokio::time::timeout_at(deadline, changes.next()).await {
                Ok(Ok(event)) if !relevant(&event.resource) => {}
                Ok(_) | Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The controller's passes over a store with no kubelet: pods are made Running and Ready by
    //! hand, so what is checked is the controller's own bookkeeping.

    use super::*;

    fn key(group: &str, plural: &str) -> ResourceKey {
        ResourceKey::new(group, plural)
    }

    fn store() -> Store {
        let store = Store::new();
        store.register(ResourceType::new("", "v1", "namespaces", "Namespace", false));
        store.create(&ResourceKey::core("namespaces"), "", json!({"metadata": {"name": "default"}})).unwrap();
        store.register(ResourceType::new("", "v1", "pods", "Pod", true).with_status());
        register(&store);
        store
    }

    /// What the kubelet would report once the pods run.
    fn pods_up(store: &Store) {
        let (pods, _) = store.list(&Kind::Pod.key(), Some("default"), &Selector::default()).unwrap();
        for pod in pods {
            store
                .update(&Kind::Pod.key(), "default", name_of(&pod), |p| {
                    if p.pointer("/status/phase").is_none() {
                        p["status"] = json!({
                            "phase": "Running",
                            "podIP": "10.0.0.9",
                            "podIPs": [{"ip": "10.0.0.9"}],
                            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                        });
                    }
                    Ok(())
                })
                .unwrap();
        }
    }

    fn passes(controller: &mut Controller, store: &Store, n: usize) {
        for _ in 0..n {
            controller.pass(store);
        }
    }

    fn get(store: &Store, kind: Kind, name: &str) -> Option<Value> {
        store.get(&kind.key(), "default", name).ok()
    }

    #[test]
    fn rfc3339_times_parse_to_epoch_seconds() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(unix_seconds("2026-12-04T15:16:40Z"), Some(1_796_397_400.0));
        assert_eq!(unix_seconds("2026-12-04T15:16:40.25Z"), Some(1_796_397_400.25));
        assert_eq!(unix_seconds("2026-12-04T17:16:40+02:00"), Some(1_796_397_400.0));
        assert_eq!(unix_seconds("2000-02-29T00:00:00Z"), Some(951_782_400.0));
        assert_eq!(unix_seconds("yesterday"), None);
    }

    #[test]
    fn name_hash_is_fnv1a_32_in_hex() {
        // FNV-1a test vectors: "" is the offset basis, "a" is 0xe40c292c.
        assert_eq!(name_hash(""), "811c9dc5");
        assert_eq!(name_hash("a"), "e40c292c");
        assert_eq!(name_hash("foobar"), "bf9cf968");
    }

    #[test]
    fn a_claim_adopts_a_pool_member_which_is_suspended_resumed_and_collected() {
        let store = store();
        let mut controller = Controller::default();
        let templates = key(EXTENSIONS_GROUP, "sandboxtemplates");
        let template = json!({"metadata": {"name": "tpl"}, "spec": {"podTemplate": {
            "metadata": {"labels": {"app": "x", "agents.x-k8s.io/sandbox-name-hash": "forged"}},
            "spec": {"containers": [{"name": "c", "image": "img"}]},
        }}});
        store.create(&templates, "default", template).unwrap();
        let pool = json!({"metadata": {"name": "pool"}, "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}}});
        store.create(&Kind::Pool.key(), "default", pool).unwrap();
        passes(&mut controller, &store, 2);
        pods_up(&store);
        passes(&mut controller, &store, 2);
        let pool = get(&store, Kind::Pool, "pool").unwrap();
        assert_eq!(pool["status"]["readyReplicas"], 1, "{pool:#}");
        let (members, _) = store.list(&Kind::Sandbox.key(), Some("default"), &Selector::default()).unwrap();
        let member = name_of(&members[0]).to_owned();
        let pod = get(&store, Kind::Pod, &member).unwrap();
        // The template cannot forge the system's labels.
        assert_eq!(pod["metadata"]["labels"][LABEL_SANDBOX_NAME_HASH], name_hash(&member));
        assert_eq!(pod["metadata"]["labels"][LABEL_WARM_POOL], name_hash("pool"));

        let claim = json!({"metadata": {"name": "cl", "labels": {LABEL_CREATED_BY: "python-client"}}, "spec": {"warmPoolRef": {"name": "pool"}}});
        store.create(&Kind::Claim.key(), "default", claim).unwrap();
        passes(&mut controller, &store, 3);
        let claim = get(&store, Kind::Claim, "cl").unwrap();
        assert_eq!(claim["status"]["sandbox"], json!({"name": member, "podIPs": ["10.0.0.9"]}), "{claim:#}");
        assert_eq!(find_condition(&claim, "Ready").unwrap()["reason"], "DependenciesReady");
        let pod = get(&store, Kind::Pod, &member).unwrap();
        assert!(pod["metadata"]["labels"][LABEL_WARM_POOL].is_null(), "{pod:#}");
        assert_eq!(pod["metadata"]["labels"][LABEL_CREATED_BY], "python-client");
        // The pool made a replacement.
        let (members, _) = store.list(&Kind::Sandbox.key(), Some("default"), &Selector::default()).unwrap();
        assert_eq!(members.len(), 2);

        // Settled: another pass writes nothing (no write feeds the next pass for ever).
        let settled = store.resource_version();
        passes(&mut controller, &store, 2);
        assert_eq!(store.resource_version(), settled);

        let suspend = json!({"spec": {"operatingMode": "Suspended"}});
        store.merge_patch(&Kind::Sandbox.key(), "default", &member, &suspend, false).unwrap();
        passes(&mut controller, &store, 2);
        assert!(get(&store, Kind::Pod, &member).is_none());
        let sandbox = get(&store, Kind::Sandbox, &member).unwrap();
        assert_eq!(find_condition(&sandbox, "Suspended").unwrap()["reason"], "PodTerminated");
        assert_eq!(find_condition(&sandbox, "Ready").unwrap()["reason"], "SandboxSuspended");
        assert!(sandbox["status"]["podIPs"].is_null());
        let resume = json!({"spec": {"operatingMode": "Running"}});
        store.merge_patch(&Kind::Sandbox.key(), "default", &member, &resume, false).unwrap();
        passes(&mut controller, &store, 1);
        assert!(get(&store, Kind::Pod, &member).is_some());

        store.delete(&Kind::Claim.key(), "default", "cl", None).unwrap();
        assert!(get(&store, Kind::Sandbox, &member).is_none());
        assert!(get(&store, Kind::Pod, &member).is_none());
    }

    #[test]
    fn a_claim_without_its_pool_or_template_says_why() {
        let store = store();
        let mut controller = Controller::default();
        let claim = json!({"metadata": {"name": "lost"}, "spec": {"warmPoolRef": {"name": "nope"}}});
        store.create(&Kind::Claim.key(), "default", claim).unwrap();
        passes(&mut controller, &store, 1);
        let claim = get(&store, Kind::Claim, "lost").unwrap();
        let ready = find_condition(&claim, "Ready").unwrap();
        assert_eq!(
            (&ready["reason"], &ready["message"]),
            (&json!("WarmPoolNotFound"), &json!("SandboxWarmPool \"nope\" not found"))
        );
        let pool = json!({"metadata": {"name": "nope"}, "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "gone"}}});
        store.create(&Kind::Pool.key(), "default", pool).unwrap();
        passes(&mut controller, &store, 1);
        let claim = get(&store, Kind::Claim, "lost").unwrap();
        let ready = find_condition(&claim, "Ready").unwrap();
        assert_eq!(
            (&ready["reason"], &ready["message"]),
            (&json!("TemplateNotFound"), &json!("SandboxTemplate \"gone\" not found"))
        );
    }
}

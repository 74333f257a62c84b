//! The fake API server's object store, generic over resource types: every object (Pods, Namespaces,
//! the Node, later custom resources) is a JSON value kept under one cluster-wide `resourceVersion`
//! counter (as etcd's revision is), and every change is an [`Event`] in a bounded history that
//! watches and controllers read from any past version still held.
//!
//! What the real apiserver does on each write is done here, for every type alike: `uid`,
//! `resourceVersion`, `creationTimestamp`, `generation` (bumped when anything outside `metadata`
//! and `status` changes), `generateName`, name validation, optimistic concurrency on replace, the
//! `/status` split (main writes keep `status`, status writes change only `status`), finalizers
//! (deletion sets `deletionTimestamp` and waits for them), graceful deletion for the types that
//! have it (Pods: an owner, the pod controller, calls [`Store::remove`] once the containers are
//! gone) and the garbage collector's background cascade through `ownerReferences`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Map, Value, json};

use super::resource::{Cause, ResourceKey, ResourceType};
use super::selector::Selector;
use super::status::ApiError;

/// How many events the history keeps: a watch that falls further behind gets `410 Expired` (as the
/// real watch cache answers), so memory stays bounded whatever the watchers do.
const HISTORY: usize = 10_000;

/// What happened to an object, as a watch names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change: the object after it (for `Deleted`, its last state) and before it.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventType,
    pub resource: ResourceKey,
    pub namespace: String,
    pub name: String,
    pub object: Value,
    pub old: Option<Value>,
    pub resource_version: u64,
}

type ObjectKey = (ResourceKey, String, String);

struct State {
    types: BTreeMap<ResourceKey, Arc<ResourceType>>,
    objects: BTreeMap<ObjectKey, Value>,
    revision: u64,
    history: VecDeque<Arc<Event>>,
}

/// The store; share it as `Arc<Store>`.
pub struct Store {
    state: Mutex<State>,
    /// The newest revision, so subscribers wake up on every change.
    revision: tokio::sync::watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                types: BTreeMap::new(),
                objects: BTreeMap::new(),
                revision: 1,
                history: VecDeque::new(),
            }),
            revision: tokio::sync::watch::Sender::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `resource` from now on (discovery, the REST paths, watches); registering the same
    /// (group, plural) again replaces its definition and keeps its objects.
    pub fn register(&self, resource: ResourceType) -> ResourceKey {
        let key = resource.key();
        self.lock().types.insert(key.clone(), Arc::new(resource));
        key
    }

    /// Every registered type, core group first, then by group.
    pub fn types(&self) -> Vec<Arc<ResourceType>> {
        self.lock().types.values().cloned().collect()
    }

    pub fn resource(&self, key: &ResourceKey) -> Option<Arc<ResourceType>> {
        self.lock().types.get(key).cloned()
    }

    /// The type served at `group/version` under `plural`.
    pub fn resource_at(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.lock().types.get(&ResourceKey::new(group, plural)).filter(|t| t.version == version).cloned()
    }

    /// The newest revision (a list's `metadata.resourceVersion`).
    pub fn resource_version(&self) -> u64 {
        self.lock().revision
    }

    fn type_of(state: &State, key: &ResourceKey) -> Result<Arc<ResourceType>, ApiError> {
        state.types.get(key).cloned().ok_or_else(|| ApiError::not_found_resource(key))
    }

    /// Creates `object` (a `Map` with `metadata.name` or `metadata.generateName`) in `namespace`
    /// (ignored for cluster-scoped types): the stored object, with `uid`, `resourceVersion`,
    /// `creationTimestamp`, `generation` set. `AlreadyExists` for a taken name, `Invalid` for a
    /// bad one, `NotFound` for a namespace that does not exist.
    pub fn create(&self, key: &ResourceKey, namespace: &str, mut object: Value) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let resource = Self::type_of(&state, key)?;
        let Some(fields) = object.as_object_mut() else {
            return Err(ApiError::bad_request(format!(
                "the body of a {} must be a JSON object",
                resource.kind
            )));
        };
        fields.insert("apiVersion".into(), json!(resource.api_version()));
        fields.insert("kind".into(), json!(resource.kind));
        let namespace = if resource.namespaced { namespace } else { "" };
        let meta = metadata_mut(&mut object);
        let body_namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or_default();
        if resource.namespaced && !body_namespace.is_empty() && body_namespace != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            ));
        }
        let mut name = meta.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        if name.is_empty()
            && let Some(prefix) = meta.get("generateName").and_then(Value::as_str).filter(|p| !p.is_empty())
        {
            // The apiserver's suffix: 5 characters from an alphabet without vowels and look-alikes.
            const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
            let suffix: String =
                (0..5).map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char).collect();
            let cut = prefix.len().min(63 - 5);
            name = format!("{}{suffix}", &prefix[..cut]);
        }
        if name.is_empty() {
            return Err(ApiError::invalid(
                &resource,
                "",
                vec![Cause::required("metadata.name", "name or generateName is required")],
            ));
        }
        if let Some(cause) = name_error(&name) {
            return Err(ApiError::invalid(&resource, &name, vec![cause]));
        }
        if resource.namespaced {
            let ns_key = (ResourceKey::core("namespaces"), String::new(), namespace.to_owned());
            if !state.objects.contains_key(&ns_key) {
                return Err(ApiError::not_found_named("namespaces", namespace));
            }
        }
        let object_key = (key.clone(), namespace.to_owned(), name.clone());
        if state.objects.contains_key(&object_key) {
            return Err(ApiError::already_exists(&resource, &name));
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), json!(name));
        if resource.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(uuid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("generation".into(), json!(1));
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"] {
            meta.remove(field);
        }
        if resource.status_subresource
            && let Some(fields) = object.as_object_mut()
        {
            // Status is the controllers' to write (the status strategy drops it on create).
            fields.remove("status");
        }
        if let Some(defaulter) = resource.defaulter {
            defaulter(&mut object);
        }
        if let Some(validator) = resource.validator {
            let causes = validator(&object);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&resource, &name, causes));
            }
        }
        Ok(self.commit(&mut state, EventType::Added, object_key, object, None))
    }

    /// Stores `object` under a new revision and records the event; the stored object.
    fn commit(
        &self,
        state: &mut State,
        kind: EventType,
        (resource, namespace, name): ObjectKey,
        mut object: Value,
        old: Option<Value>,
    ) -> Value {
        state.revision += 1;
        let revision = state.revision;
        metadata_mut(&mut object).insert("resourceVersion".into(), json!(revision.to_string()));
        let key = (resource.clone(), namespace.clone(), name.clone());
        match kind {
            EventType::Deleted => {
                state.objects.remove(&key);
            }
            EventType::Added | EventType::Modified => {
                state.objects.insert(key, object.clone());
            }
        }
        if state.history.len() >= HISTORY {
            state.history.pop_front();
        }
        state.history.push_back(Arc::new(Event {
            kind,
            resource,
            namespace,
            name,
            object: object.clone(),
            old,
            resource_version: revision,
        }));
        self.revision.send_replace(revision);
        object
    }

    /// The object, or `NotFound` (`pods "x" not found`).
    pub fn get(&self, key: &ResourceKey, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let state = self.lock();
        let resource = Self::type_of(&state, key)?;
        let namespace = if resource.namespaced { namespace } else { "" };
        state
            .objects
            .get(&(key.clone(), namespace.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&resource, name))
    }

    /// The objects of a type in `namespace` (every namespace when `None`) that `selector` matches,
    /// sorted by namespace and name, with the revision they were read at.
    pub fn list(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Result<(Vec<Value>, u64), ApiError> {
        let state = self.lock();
        Self::type_of(&state, key)?;
        let items = state
            .objects
            .iter()
            .filter(|((k, ns, _), object)| {
                k == key && namespace.is_none_or(|want| want == ns) && selector.matches(object)
            })
            .map(|(_, object)| object.clone())
            .collect();
        Ok((items, state.revision))
    }

    /// PUT of the main resource: `object` replaces the stored one, except `status` (kept when the
    /// type has a status subresource) and the fields the server owns. A `metadata.resourceVersion`
    /// that is set and not the current one is a `Conflict`.
    pub fn replace(
        &self,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.write(key, namespace, name, object, Part::Main)
    }

    /// PUT of `/status`: only `status` is taken from `object` (same concurrency rule).
    pub fn replace_status(
        &self,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.write(key, namespace, name, object, Part::Status)
    }

    /// A JSON merge patch (RFC 7386) of the main resource or of `/status`; a `resourceVersion` in
    /// the patch is a precondition, as on the real server.
    pub fn merge_patch(
        &self,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        if !patch.is_object() {
            return Err(ApiError::bad_request("the patch must be a JSON object".into()));
        }
        let mut object = self.get(key, namespace, name)?;
        let precondition = patch.pointer("/metadata/resourceVersion").cloned();
        merge(&mut object, patch);
        match precondition {
            Some(rv) => metadata_mut(&mut object).insert("resourceVersion".into(), rv),
            // Read and write are two steps: no precondition, so no conflict between them.
            None => metadata_mut(&mut object).remove("resourceVersion"),
        };
        self.write(key, namespace, name, object, if status { Part::Status } else { Part::Main })
    }

    /// For controllers: changes the stored object in place with `change` (status included, no
    /// resourceVersion check: the change runs under the store's lock). Nothing is written and no
    /// event is sent when `change` leaves the object as it was. Clearing the last finalizer of an
    /// object being deleted removes it.
    pub fn update(
        &self,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value) -> Result<(), ApiError>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let resource = Self::type_of(&state, key)?;
        let namespace = if resource.namespaced { namespace } else { "" };
        let object_key = (key.clone(), namespace.to_owned(), name.to_owned());
        let old =
            state.objects.get(&object_key).cloned().ok_or_else(|| ApiError::not_found(&resource, name))?;
        let mut object = old.clone();
        change(&mut object)?;
        restore_identity(&mut object, &old, &resource);
        if object == old {
            return Ok(old);
        }
        if spec_changed(&old, &object) {
            bump_generation(&mut object, &old);
        }
        Ok(self.finish_write(&mut state, &resource, object_key, object, old))
    }

    fn write(
        &self,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        mut object: Value,
        part: Part,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let resource = Self::type_of(&state, key)?;
        let namespace = if resource.namespaced { namespace } else { "" };
        let object_key = (key.clone(), namespace.to_owned(), name.to_owned());
        let old =
            state.objects.get(&object_key).cloned().ok_or_else(|| ApiError::not_found(&resource, name))?;
        if !object.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} must be a JSON object",
                resource.kind
            )));
        }
        let body_name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(name);
        if body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL".into(),
            ));
        }
        let wanted = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
        let current = old.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
        if !wanted.is_empty() && wanted != current {
            return Err(ApiError::conflict(&resource, name));
        }
        match part {
            Part::Status => {
                let status = object.get("status").cloned();
                object = old.clone();
                if let Some(fields) = object.as_object_mut() {
                    match status {
                        Some(status) => fields.insert("status".into(), status),
                        None => fields.remove("status"),
                    };
                }
            }
            Part::Main => {
                if resource.status_subresource
                    && let Some(fields) = object.as_object_mut()
                {
                    match old.get("status") {
                        Some(status) => fields.insert("status".into(), status.clone()),
                        None => fields.remove("status"),
                    };
                }
            }
        }
        restore_identity(&mut object, &old, &resource);
        if let Some(validator) = resource.validator {
            let causes = validator(&object);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&resource, name, causes));
            }
        }
        if matches!(part, Part::Main) && spec_changed(&old, &object) {
            bump_generation(&mut object, &old);
        }
        if object == old {
            // A write that changes nothing keeps the revision (the real server skips it too).
            return Ok(old);
        }
        Ok(self.finish_write(&mut state, &resource, object_key, object, old))
    }

    /// Commits a modification; an object being deleted whose last finalizer went (and that no one
    /// else finishes, see [`ResourceType::graceful_deletion`]) is removed instead.
    fn finish_write(
        &self,
        state: &mut State,
        resource: &ResourceType,
        object_key: ObjectKey,
        object: Value,
        old: Value,
    ) -> Value {
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        if deleting && !resource.graceful_deletion && finalizers(&object).is_empty() {
            let uid = uid_of(&object);
            let gone = self.commit(state, EventType::Deleted, object_key, object, Some(old));
            self.collect_dependents(state, &uid);
            return gone;
        }
        self.commit(state, EventType::Modified, object_key, object, Some(old))
    }

    /// DELETE: an object with finalizers, or of a type with graceful deletion, is marked
    /// (`deletionTimestamp`, and for graceful types `deletionGracePeriodSeconds` =
    /// `grace_seconds`) and stays until they are done; anything else goes now. Either way, its
    /// state after the call (what the real server answers with).
    pub fn delete(
        &self,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        grace_seconds: Option<i64>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        self.delete_locked(&mut state, key, namespace, name, grace_seconds)
    }

    fn delete_locked(
        &self,
        state: &mut State,
        key: &ResourceKey,
        namespace: &str,
        name: &str,
        grace_seconds: Option<i64>,
    ) -> Result<Value, ApiError> {
        let resource = Self::type_of(state, key)?;
        let namespace = if resource.namespaced { namespace } else { "" };
        let object_key = (key.clone(), namespace.to_owned(), name.to_owned());
        let old =
            state.objects.get(&object_key).cloned().ok_or_else(|| ApiError::not_found(&resource, name))?;
        if resource.graceful_deletion || !finalizers(&old).is_empty() {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(old);
            }
            let mut object = old.clone();
            let meta = metadata_mut(&mut object);
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            if resource.graceful_deletion {
                meta.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds.unwrap_or(30)));
            }
            return Ok(self.commit(state, EventType::Modified, object_key, object, Some(old)));
        }
        let uid = uid_of(&old);
        let gone = self.commit(state, EventType::Deleted, object_key, old.clone(), Some(old));
        self.collect_dependents(state, &uid);
        Ok(gone)
    }

    /// Removes an object now, whatever its finalizers (how the pod controller finishes a graceful
    /// deletion); its last state, or `None` when it was not there. Its dependents are collected.
    pub fn remove(&self, key: &ResourceKey, namespace: &str, name: &str) -> Option<Value> {
        let mut state = self.lock();
        let object_key = (key.clone(), namespace.to_owned(), name.to_owned());
        let old = state.objects.get(&object_key).cloned()?;
        let uid = uid_of(&old);
        let gone = self.commit(&mut state, EventType::Deleted, object_key, old.clone(), Some(old));
        self.collect_dependents(&mut state, &uid);
        Some(gone)
    }

    /// The garbage collector's background propagation: every object whose `ownerReferences` name
    /// `uid` is deleted (and so on down).
    fn collect_dependents(&self, state: &mut State, uid: &str) {
        if uid.is_empty() {
            return;
        }
        let dependents: Vec<ObjectKey> = state
            .objects
            .iter()
            .filter(|(_, object)| {
                object.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
                    refs.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
                })
            })
            .map(|(key, _)| key.clone())
            .collect();
        for (resource, namespace, name) in dependents {
            let _ = self.delete_locked(state, &resource, &namespace, &name, None);
        }
    }

    /// The events after revision `after` (from now on when `None`), in order. `Expired` (410) when
    /// that revision is older than the history holds.
    pub fn subscribe(self: &Arc<Self>, after: Option<u64>) -> Result<Subscription, ApiError> {
        let state = self.lock();
        let cursor = after.unwrap_or(state.revision);
        if let Some(oldest) = state.history.front()
            && cursor + 1 < oldest.resource_version
        {
            return Err(ApiError::expired(cursor, oldest.resource_version));
        }
        Ok(Subscription {
            store: self.clone(),
            cursor,
            wake: self.revision.subscribe(),
            pending: VecDeque::new(),
        })
    }

    /// The objects of a type now and a subscription to what follows them, taken at one revision
    /// (a watch without `resourceVersion` starts this way: `ADDED` for each, then the changes).
    pub fn list_and_subscribe(
        self: &Arc<Self>,
        key: &ResourceKey,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Result<(Vec<Value>, Subscription), ApiError> {
        let state = self.lock();
        Self::type_of(&state, key)?;
        let items = state
            .objects
            .iter()
            .filter(|((k, ns, _), object)| {
                k == key && namespace.is_none_or(|want| want == ns) && selector.matches(object)
            })
            .map(|(_, object)| object.clone())
            .collect();
        let subscription = Subscription {
            store: self.clone(),
            cursor: state.revision,
            wake: self.revision.subscribe(),
            pending: VecDeque::new(),
        };
        Ok((items, subscription))
    }

    fn events_after(&self, cursor: u64) -> Result<Vec<Arc<Event>>, ApiError> {
        let state = self.lock();
        let Some(oldest) = state.history.front() else {
            return Ok(Vec::new());
        };
        if cursor + 1 < oldest.resource_version {
            return Err(ApiError::expired(cursor, oldest.resource_version));
        }
        // Revisions are dense in the history (one per event), so the start is an index.
        let start = usize::try_from(cursor + 1 - oldest.resource_version).unwrap_or(usize::MAX);
        Ok(state.history.iter().skip(start).take(256).cloned().collect())
    }
}

/// Which part of an object a write changes.
#[derive(Clone, Copy)]
enum Part {
    Main,
    Status,
}

/// A reader of the store's events, in revision order (see [`Store::subscribe`]).
pub struct Subscription {
    store: Arc<Store>,
    cursor: u64,
    wake: tokio::sync::watch::Receiver<u64>,
    /// Events read from the history but not handed out yet.
    pending: VecDeque<Arc<Event>>,
}

impl Subscription {
    /// The next event (waits for one). `Expired` when the history moved past this reader.
    pub async fn next(&mut self) -> Result<Arc<Event>, ApiError> {
        loop {
            if self.pending.is_empty() {
                self.pending = self.store.events_after(self.cursor)?.into();
            }
            if let Some(event) = self.pending.pop_front() {
                self.cursor = event.resource_version;
                return Ok(event);
            }
            if self.wake.changed().await.is_err() {
                // The store is gone: nothing more will come.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The revision of the last event handed out (or the starting point).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }
}

/// `metadata` as a map, made when missing (and the object made a map when it is not one).
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    if let Value::Object(fields) = object {
        let meta = fields.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(meta) = meta {
            return meta;
        }
    }
    unreachable!("made a map above")
}

/// Keeps what a write may not change: identity, creation, deletion marks, kind.
fn restore_identity(object: &mut Value, old: &Value, resource: &ResourceType) {
    if let Some(fields) = object.as_object_mut() {
        fields.insert("apiVersion".into(), json!(resource.api_version()));
        fields.insert("kind".into(), json!(resource.kind));
    }
    let kept: Vec<(&str, Option<Value>)> = [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ]
    .into_iter()
    .map(|field| (field, old.pointer(&format!("/metadata/{field}")).cloned()))
    .collect();
    let meta = metadata_mut(object);
    for (field, value) in kept {
        match value {
            Some(value) => meta.insert(field.into(), value),
            None => meta.remove(field),
        };
    }
}

/// Whether anything outside `metadata` and `status` changed (what bumps `generation`).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(fields) = v.as_object_mut() {
            fields.remove("metadata");
            fields.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

fn bump_generation(object: &mut Value, old: &Value) {
    let generation = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
    metadata_mut(object).insert("generation".into(), json!(generation + 1));
}

fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

fn uid_of(object: &Value) -> String {
    object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// RFC 7386 JSON merge patch: objects merge key by key, `null` removes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, value) in patch_fields {
            if value.is_null() {
                fields.remove(key);
            } else {
                merge(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Why `name` is not a DNS-1123 subdomain (what the apiserver requires of most names).
pub fn name_error(name: &str) -> Option<Cause> {
    const MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
        characters, '-' or '.', and must start and end with an alphanumeric character (e.g. \
        'example.com', regex used for validation is \
        '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    if name.len() > 253 {
        return Some(Cause::invalid("metadata.name", name, "must be no more than 253 characters"));
    }
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        !bytes.is_empty()
            && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            && bytes[0] != b'-'
            && bytes[bytes.len() - 1] != b'-'
    };
    (!name.split('.').all(label_ok)).then(|| Cause::invalid("metadata.name", name, MESSAGE))
}

/// A random version-4 UUID.
pub fn uuid() -> String {
    let hex = crate::random_hex(16);
    format!("{}-{}-4{}-a{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

/// Now as RFC 3339 in UTC with seconds (`2026-01-02T03:04:05Z`), the API's timestamp form.
pub fn now_rfc3339() -> String {
    rfc3339(std::time::SystemTime::now())
}

pub fn rfc3339(time: std::time::SystemTime) -> String {
    let at = jiff::Timestamp::try_from(time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

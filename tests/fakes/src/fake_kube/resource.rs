//! What the store serves, described: a resource type as discovery lists it ([`ResourceType`]), its
//! key ([`ResourceKey`]), and the field errors ([`Cause`]) a type's validation gives.

use serde_json::{Value, json};

/// One field error of an `Invalid` answer (`details.causes[]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, …
    pub reason: String,
    /// `Invalid value: "X": why` / `Required value: why`.
    pub message: String,
    /// `metadata.name`, `spec.containers[0].image`.
    pub field: String,
}

impl Cause {
    pub fn invalid(field: &str, value: &str, why: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {why}", json!(value)),
            field: field.into(),
        }
    }

    pub fn required(field: &str, why: &str) -> Self {
        let message = if why.is_empty() { "Required value".into() } else { format!("Required value: {why}") };
        Self { reason: "FieldValueRequired".into(), message, field: field.into() }
    }
}

/// Defaults a type's objects get on create (the apiserver's defaulting), before validation.
pub type Defaulter = fn(&mut Value);
/// A type's own validation on create and update (the name is checked for every type): the field
/// errors, empty when valid.
pub type Validator = fn(&Value) -> Vec<Cause>;

/// One resource type as discovery lists it and the store serves it.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group (`""` for the core group).
    pub group: String,
    pub version: String,
    /// Lowercase plural, the URL segment (`pods`, `sandboxes`).
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has the `/status` subresource.
    pub status_subresource: bool,
    /// Other subresources named in discovery (`exec`, `log` for pods), served elsewhere.
    pub other_subresources: Vec<String>,
    /// Deletion only marks the object terminating (`deletionTimestamp`,
    /// `deletionGracePeriodSeconds`); whoever runs it calls [`Store::remove`](super::store::Store::remove) when it is gone.
    pub graceful_deletion: bool,
    pub defaulter: Option<Defaulter>,
    pub validator: Option<Validator>,
}

impl ResourceType {
    /// A type with the usual verbs and no subresource; `singular` is the lowercased kind.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.to_owned(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
            other_subresources: Vec::new(),
            graceful_deletion: false,
            defaulter: None,
            validator: None,
        }
    }

    /// Adds the `/status` subresource.
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    pub fn with_categories(mut self, names: &[&str]) -> Self {
        self.categories = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn key(&self) -> ResourceKey {
        ResourceKey { group: self.group.clone(), plural: self.plural.clone() }
    }

    /// `pods` or `sandboxes.agents.x-k8s.io`: how messages name the resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }
}

/// Names a registered type: (group, plural).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub group: String,
    pub plural: String,
}

impl ResourceKey {
    pub fn new(group: &str, plural: &str) -> Self {
        Self { group: group.to_owned(), plural: plural.to_owned() }
    }

    /// The core group's `plural`.
    pub fn core(plural: &str) -> Self {
        Self::new("", plural)
    }
}

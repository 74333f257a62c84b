//! The apiserver's errors as `Status` objects (`kind: Status`, `status: Failure`, `reason`,
//! `message`, `details`, `code`), worded as the real server words them (`pods "x" not found`,
//! `Operation cannot be fulfilled on …`, `Pod "X" is invalid: metadata.name: …`).

use serde_json::{Value, json};

use super::resource::{Cause, ResourceKey, ResourceType};

/// An error answer; [`ApiError::body`] is its `Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `details` naming an object: `{name, group?, kind}` (kind is the resource, e.g. `pods`).
fn details(group: &str, kind: &str, name: &str) -> Value {
    let mut details = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    details
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: String) -> Self {
        Self { code, reason: reason.into(), message, details: None }
    }

    /// The `Status` body.
    pub fn body(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }

    /// `pods "x" not found`.
    pub fn not_found(resource: &ResourceType, name: &str) -> Self {
        Self {
            details: Some(details(&resource.group, &resource.plural, name)),
            ..Self::new(404, "NotFound", format!("{} {} not found", resource.qualified(), json!(name)))
        }
    }

    /// A core-group object that is not there (`namespaces "x" not found`).
    pub fn not_found_named(plural: &str, name: &str) -> Self {
        Self {
            details: Some(details("", plural, name)),
            ..Self::new(404, "NotFound", format!("{plural} {} not found", json!(name)))
        }
    }

    /// A path the server does not serve.
    pub fn not_found_resource(_key: &ResourceKey) -> Self {
        Self {
            details: Some(json!({})),
            ..Self::new(404, "NotFound", "the server could not find the requested resource".into())
        }
    }

    pub fn already_exists(resource: &ResourceType, name: &str) -> Self {
        Self {
            details: Some(details(&resource.group, &resource.plural, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} {} already exists", resource.qualified(), json!(name)),
            )
        }
    }

    pub fn conflict(resource: &ResourceType, name: &str) -> Self {
        Self {
            details: Some(details(&resource.group, &resource.plural, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {}: the object has been modified; please apply \
                     your changes to the latest version and try again",
                    resource.qualified(),
                    json!(name)
                ),
            )
        }
    }

    /// 422 `Pod "x" is invalid: field: message` (several causes in brackets, comma-separated).
    pub fn invalid(resource: &ResourceType, name: &str, causes: Vec<Cause>) -> Self {
        let kind = if resource.group.is_empty() {
            resource.kind.clone()
        } else {
            format!("{}.{}", resource.kind, resource.group)
        };
        let parts: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let summary = match parts.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut details = json!({
            "name": name,
            "kind": resource.kind,
            "causes": causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect::<Vec<_>>(),
        });
        details["group"] = json!(resource.group);
        Self {
            details: Some(details),
            ..Self::new(422, "Invalid", format!("{kind} {} is invalid: {summary}", json!(name)))
        }
    }

    pub fn bad_request(message: String) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into())
    }

    pub fn method_not_allowed() -> Self {
        Self {
            details: Some(json!({})),
            ..Self::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource".into(),
            )
        }
    }

    /// 410: a watch from a revision the history no longer holds.
    pub fn expired(asked: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {asked} ({oldest})"))
    }

    pub fn unsupported_patch(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/merge-patch+json, application/strategic-merge-patch+json (got {content_type})"
            ),
        )
    }

    pub fn internal(message: String) -> Self {
        Self {
            details: Some(json!({})),
            ..Self::new(500, "InternalError", format!("Internal error occurred: {message}"))
        }
    }
}

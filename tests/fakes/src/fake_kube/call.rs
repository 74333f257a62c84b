//! What a verb of the API is handed and how it answers: the request's parts ([`Call`]), JSON
//! answers and `Status` errors, an object's namespace and name.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use serde_json::Value;

use super::status::ApiError;

/// Everything a verb needs from the request.
pub struct Call {
    pub method: Method,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub request: Request,
}

impl Call {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn params(&self, key: &str) -> Vec<String> {
        self.query.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone()).collect()
    }

    pub fn flag(&self, key: &str) -> bool {
        self.param(key).is_some_and(|v| matches!(v, "true" | "1" | "True"))
    }
}

/// A JSON answer.
pub fn json_response(status: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

/// An error as its `Status` body.
pub fn error_response(error: &ApiError) -> Response {
    json_response(error.code, &error.body())
}

/// The namespace and name in an object's `metadata`.
pub fn names(object: &Value) -> (String, String) {
    let get = |field: &str| {
        object.pointer(&format!("/metadata/{field}")).and_then(Value::as_str).unwrap_or_default().to_owned()
    };
    (get("namespace"), get("name"))
}

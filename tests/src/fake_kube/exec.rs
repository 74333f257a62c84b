//! `pods/exec` (stub while the store lands).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::Response;

use super::Shared;
use super::api::Call;

#[derive(Default)]
pub struct Streams {
    open: AtomicUsize,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Streams {
    pub fn cut(&self) -> usize {
        self.cut.send_modify(|n| *n += 1);
        self.open.load(Ordering::SeqCst)
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

pub async fn serve(_shared: Arc<Shared>, _namespace: &str, _name: &str, _call: Call) -> Response {
    super::api::error_response(&super::status::ApiError::bad_request("exec: not yet".into()))
}

//! [`CompositeSandbox`]: path prefixes routed to other sandboxes, with deepagents'
//! `CompositeBackend` semantics (0.7.32), so a Rust agent gets the shape a Python one gets: a
//! default sandbox for commands and most paths, and routes such as `/memories/` or `/scratch/`
//! to others.
//!
//! - The longest route prefix that a path starts with (or equals, without its trailing `/`) wins;
//!   the routed sandbox sees the path with the prefix replaced by `/`, and paths in its results get
//!   the prefix back.
//! - `ls /` lists the default's `/` and each route as a directory; `glob` and `grep` from `/` (or
//!   from no path) search the default and every route and merge (glob sorted by path; grep in
//!   route order); a pattern anchored at `/` that names no route skips the routes.
//! - `execute` (and `execute_with_offload`) go to the default; uploads and downloads are routed
//!   file by file, one batch per sandbox, answered in input order with the paths as given.
//!
//! A routed sandbox sees paths from its own `/`: an agentd serving `--root DIR` (whose `/` is DIR)
//! fits, as does a [`StateSandbox`](crate::StateSandbox) (files in memory); the embedded default,
//! whose `/` is the machine's, does not.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentd_host::{AgentdSandbox, BaseSandbox, CompositeSandbox, LocalSandbox};
//!
//! # async fn demo() -> agentd_host::Result<()> {
//! let workspace = Arc::new(LocalSandbox::start().await?);
//! // An agentd started with `agentd serve --root /srv/scratch --listen 127.0.0.1:7701`.
//! let scratch = Arc::new(AgentdSandbox::connect("ws://127.0.0.1:7701", Some("token")).await?);
//! let sandbox = CompositeSandbox::new(workspace, [("/scratch/", scratch as Arc<dyn BaseSandbox>)]);
//! sandbox.write("/scratch/notes.md", "kept apart").await?; // /srv/scratch/notes.md
//! assert!(sandbox.ls("/").await?.entries.unwrap().iter().any(|e| e.path == "/scratch/"));
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use agentd_protocol::fs::{
    FileInfo, FsRequest, FsResponse, GlobResult, GrepResult, LsResult, TruncationReason,
};
use agentd_protocol::{ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;

use crate::contract::error::{Result, SandboxError};
use crate::contract::{BaseSandbox, OffloadRequest};

/// A default sandbox and routes (see the module doc).
pub struct CompositeSandbox {
    default: Arc<dyn BaseSandbox>,
    /// Longest prefix first.
    routes: Vec<(String, Arc<dyn BaseSandbox>)>,
}

impl CompositeSandbox {
    /// `routes`: prefixes (starting with `/`, conventionally ending with `/`) and their sandboxes.
    pub fn new<I, P>(default: Arc<dyn BaseSandbox>, routes: I) -> Self
    where
        I: IntoIterator<Item = (P, Arc<dyn BaseSandbox>)>,
        P: Into<String>,
    {
        let mut routes: Vec<(String, Arc<dyn BaseSandbox>)> =
            routes.into_iter().map(|(prefix, sandbox)| (prefix.into(), sandbox)).collect();
        // Stable: equal lengths keep the order given, as Python's `sorted` does.
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Self { default, routes }
    }

    /// The sandbox `path` goes to, the path it sees there, and the route's prefix (`None`: the
    /// default, with the path as given).
    fn route<'a>(&'a self, path: &str) -> (&'a Arc<dyn BaseSandbox>, String, Option<&'a str>) {
        for (prefix, sandbox) in &self.routes {
            if path == prefix.trim_end_matches('/') {
                return (sandbox, "/".to_owned(), Some(prefix));
            }
            let with_slash = if prefix.ends_with('/') { prefix.clone() } else { format!("{prefix}/") };
            if let Some(rest) = path.strip_prefix(&with_slash) {
                return (sandbox, format!("/{rest}"), Some(prefix));
            }
        }
        (&self.default, path.to_owned(), None)
    }

    async fn ls(&self, path: String) -> Result<LsResult> {
        let (sandbox, inner, prefix) = self.route(&path);
        if let Some(prefix) = prefix {
            let result = sandbox.ls(&inner).await?;
            if result.error.is_some() {
                return Ok(result);
            }
            let entries = result.entries.unwrap_or_default().into_iter().map(|e| under(prefix, e)).collect();
            return Ok(LsResult { error: None, entries: Some(entries) });
        }
        let result = self.default.ls(&path).await?;
        if path != "/" || result.error.is_some() {
            return Ok(result);
        }
        let mut entries = result.entries.unwrap_or_default();
        entries.extend(self.routes.iter().map(|(prefix, _)| FileInfo {
            size: Some(0),
            modified_at: Some(String::new()),
            ..FileInfo::new(prefix.clone(), true)
        }));
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(LsResult { error: None, entries: Some(entries) })
    }

    async fn glob(&self, pattern: String, path: Option<String>) -> Result<GlobResult> {
        if let Some(path) = &path {
            let (sandbox, inner, prefix) = self.route(path);
            if let Some(prefix) = prefix {
                let result = sandbox.glob(&pattern, Some(&inner)).await?;
                if result.error.is_some() {
                    return Ok(result);
                }
                let matches =
                    result.matches.unwrap_or_default().into_iter().map(|m| under(prefix, m)).collect();
                return Ok(GlobResult { matches: Some(matches), ..result });
            }
        }
        let everywhere = path.as_deref().is_none_or(|p| p == "/");
        let default = self.default.glob(&pattern, path.as_deref()).await?;
        if !everywhere || default.error.is_some() {
            return Ok(default);
        }
        let mut matches = default.matches.unwrap_or_default();
        let (mut truncated, mut reason) = (default.truncated, default.truncation_reason);
        for (prefix, sandbox) in &self.routes {
            let Some(routed) = route_pattern(&pattern, prefix) else { continue };
            let result = sandbox.glob(&routed, Some("/")).await?;
            if result.error.is_some() {
                return Ok(result);
            }
            matches.extend(result.matches.unwrap_or_default().into_iter().map(|m| under(prefix, m)));
            truncated |= result.truncated;
            reason = merge_reason(reason, result.truncation_reason);
        }
        matches.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(GlobResult { error: None, matches: Some(matches), truncated, truncation_reason: reason })
    }

    async fn grep(
        &self,
        pattern: String,
        path: Option<String>,
        glob: Option<String>,
        max_count: Option<i64>,
    ) -> Result<GrepResult> {
        if let Some(path) = &path {
            let (sandbox, inner, prefix) = self.route(path);
            if let Some(prefix) = prefix {
                let result = sandbox.grep(&pattern, Some(&inner), glob.as_deref(), max_count).await?;
                if result.error.is_some() {
                    return Ok(result);
                }
                let matches = result
                    .matches
                    .unwrap_or_default()
                    .into_iter()
                    .map(|mut m| {
                        m.path = format!("{}{}", prefix.trim_end_matches('/'), m.path);
                        m
                    })
                    .collect();
                return Ok(GrepResult { error: None, matches: Some(matches), truncated: result.truncated });
            }
        }
        let default = self.default.grep(&pattern, path.as_deref(), glob.as_deref(), max_count).await?;
        if path.as_deref().is_some_and(|p| p != "/") || default.error.is_some() {
            return Ok(default);
        }
        let mut matches = default.matches.unwrap_or_default();
        let mut truncated = default.truncated;
        // The cap is over all routes: each gets what is left, and none once it is spent.
        let cap = max_count.map(|m| m.max(0));
        for (prefix, sandbox) in &self.routes {
            let left = cap.map(|c| (c - i64::try_from(matches.len()).unwrap_or(i64::MAX)).max(0));
            if left == Some(0) {
                truncated = true;
                break;
            }
            let result = sandbox.grep(&pattern, Some("/"), glob.as_deref(), left).await?;
            if result.error.is_some() {
                return Ok(result);
            }
            matches.extend(result.matches.unwrap_or_default().into_iter().map(|mut m| {
                m.path = format!("{}{}", prefix.trim_end_matches('/'), m.path);
                m
            }));
            truncated |= result.truncated;
        }
        Ok(GrepResult { error: None, matches: Some(matches), truncated })
    }
}

/// `info` with the route's prefix put back before its path.
fn under(prefix: &str, mut info: FileInfo) -> FileInfo {
    info.path = format!("{}{}", prefix.trim_end_matches('/'), info.path);
    info
}

/// The pattern for a route when globbing from `/`: one that names the route loses that part
/// (keeping a leading `/`); one anchored at `/` that does not name it cannot match there (`None`);
/// any other is passed as it is.
fn route_pattern(pattern: &str, prefix: &str) -> Option<String> {
    let bare = pattern.trim_start_matches('/');
    let route = format!("{}/", prefix.trim_matches('/'));
    match bare.strip_prefix(&route) {
        Some(rest) => Some(format!("/{rest}")),
        None if pattern.starts_with('/') => None,
        None => Some(pattern.to_owned()),
    }
}

/// `unreadable` wins: narrowing the search cannot fix it.
fn merge_reason(a: Option<TruncationReason>, b: Option<TruncationReason>) -> Option<TruncationReason> {
    if a == Some(TruncationReason::Unreadable) || b == Some(TruncationReason::Unreadable) {
        return Some(TruncationReason::Unreadable);
    }
    a.or(b)
}

#[async_trait]
impl BaseSandbox for CompositeSandbox {
    fn id(&self) -> &str {
        self.default.id()
    }

    async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        self.default.execute(command, timeout).await
    }

    async fn execute_with_offload(&self, request: &OffloadRequest) -> Result<ExecuteOffloadResult> {
        self.default.execute_with_offload(request).await
    }

    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        let mut out: Vec<Option<FileUploadResponse>> = vec![None; files.len()];
        for (sandbox, batch) in self.batches(files.iter().map(|(path, _)| path.as_str())) {
            let inner: Vec<(String, Vec<u8>)> =
                batch.iter().map(|(at, inner)| (inner.clone(), files[*at].1.clone())).collect();
            let answers = sandbox.upload_files(&inner).await?;
            for (i, (at, _)) in batch.iter().enumerate() {
                let error = answers.get(i).and_then(|a| a.error.clone());
                out[*at] = Some(FileUploadResponse { path: files[*at].0.clone(), error });
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        let mut out: Vec<Option<FileDownloadResponse>> = vec![None; paths.len()];
        for (sandbox, batch) in self.batches(paths.iter().map(String::as_str)) {
            let inner: Vec<String> = batch.iter().map(|(_, inner)| inner.clone()).collect();
            let answers = sandbox.download_files(&inner).await?;
            for (i, (at, _)) in batch.iter().enumerate() {
                let answer = answers.get(i).cloned().ok_or_else(|| {
                    SandboxError::Protocol(format!("{} answered fewer downloads than asked", sandbox.id()))
                })?;
                out[*at] = Some(FileDownloadResponse { path: paths[*at].clone(), ..answer });
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        Ok(match request {
            FsRequest::Ls { path } => FsResponse::Ls(self.ls(path).await?),
            FsRequest::Glob { pattern, path } => FsResponse::Glob(self.glob(pattern, path).await?),
            FsRequest::Grep { pattern, path, glob, max_count } => {
                FsResponse::Grep(self.grep(pattern, path, glob, max_count).await?)
            }
            FsRequest::Read { path, offset, limit } => {
                let (sandbox, inner, _) = self.route(&path);
                FsResponse::Read(sandbox.read(&inner, offset, limit).await?)
            }
            FsRequest::Write { path, content } => {
                let (sandbox, inner, _) = self.route(&path);
                let mut result = sandbox.write(&inner, &content).await?;
                if result.path.is_some() {
                    result.path = Some(path);
                }
                FsResponse::Write(result)
            }
            FsRequest::Edit { path, old, new, replace_all } => {
                let (sandbox, inner, _) = self.route(&path);
                let mut result = sandbox.edit(&inner, &old, &new, replace_all).await?;
                if result.path.is_some() {
                    result.path = Some(path);
                }
                FsResponse::Edit(result)
            }
            FsRequest::Delete { path } => {
                let (sandbox, inner, _) = self.route(&path);
                let mut result = sandbox.delete(&inner).await?;
                if result.path.is_some() {
                    result.path = Some(path);
                }
                FsResponse::Delete(result)
            }
        })
    }
}

/// The paths of one call that go to one sandbox: each with its place in the input and the path
/// it sees there.
type Batch = (Arc<dyn BaseSandbox>, Vec<(usize, String)>);

impl CompositeSandbox {
    /// `paths` grouped by the sandbox they go to (in order of first use), each with its place in
    /// the input and the path it sees there.
    fn batches<'a>(&self, paths: impl Iterator<Item = &'a str>) -> Vec<Batch> {
        let mut batches: Vec<Batch> = Vec::new();
        for (at, path) in paths.enumerate() {
            let (sandbox, inner, _) = self.route(path);
            match batches.iter_mut().find(|(s, _)| Arc::ptr_eq(s, sandbox)) {
                Some((_, batch)) => batch.push((at, inner)),
                None => batches.push((Arc::clone(sandbox), vec![(at, inner)])),
            }
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_for_routes_follow_deepagents() {
        assert_eq!(route_pattern("/memories/**/*.md", "/memories/").as_deref(), Some("/**/*.md"));
        assert_eq!(route_pattern("memories/a.md", "/memories/").as_deref(), Some("/a.md"));
        assert_eq!(route_pattern("/*.py", "/memories/"), None, "anchored elsewhere");
        assert_eq!(route_pattern("**/*.py", "/memories/").as_deref(), Some("**/*.py"));
        assert_eq!(
            merge_reason(Some(TruncationReason::Budget), Some(TruncationReason::Unreadable)),
            Some(TruncationReason::Unreadable)
        );
    }
}

//! The harness every case runs in: a [`Target`] (what a factory makes: a sandbox and its derived
//! twin over one workspace) becomes a [`Suite`], which runs each call on both sides, compares them,
//! and collects failures until [`Suite::finish`] reports them together; plus the file-system helpers
//! the cases build fixtures with and the snapshot mutating calls are compared by.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentd_host::BaseSandbox;
use agentd_protocol::fs::{
    DeleteResult, EditResult, FsRequest, FsResponse, GlobResult, GrepResult, LsResult, ReadResult,
    WriteResult,
};

#[derive(Clone, Copy, Debug)]
enum Side {
    Native,
    Derived,
}

/// What a factory makes: a sandbox and its derived twin over one workspace.
pub struct Target {
    /// The sandbox as it is: verbs and offload take its native path.
    pub native: Arc<dyn BaseSandbox>,
    /// The same sandbox (or an exec channel into the same files) seen only through `execute` and the
    /// transfers, so verbs and offload take the derived path (`agentd fs request`, `agentd exec`).
    pub derived: Box<dyn BaseSandbox>,
    /// The workspace, the working directory of both, at the same path on this host and in the
    /// sandbox (a bind mount for containers): the cases build fixtures and compare file-system
    /// states here.
    pub ws: PathBuf,
    /// What keeps the sandboxes alive (a local agentd, a container and its workspace), dropped last.
    pub keep: Box<dyn std::any::Any + Send + Sync>,
}

/// One native and one derived sandbox over the same workspace, and the failures seen so far.
pub struct Suite {
    pub native: Arc<dyn BaseSandbox>,
    pub derived: Box<dyn BaseSandbox>,
    ws: PathBuf,
    failures: Mutex<Vec<String>>,
    /// Checks made (passed or not), printed at the end: the suite's size on this sandbox.
    checks: AtomicUsize,
    finished: bool,
    /// Declared last: dropped after the sandboxes it keeps alive.
    _keep: Box<dyn std::any::Any + Send + Sync>,
}

impl Suite {
    pub fn new(target: Target) -> Self {
        let Target { native, derived, ws, keep } = target;
        Self {
            native,
            derived,
            ws,
            failures: Mutex::new(Vec::new()),
            checks: AtomicUsize::new(0),
            finished: false,
            _keep: keep,
        }
    }

    pub fn ws(&self) -> &Path {
        &self.ws
    }

    /// A fresh, empty directory `name` inside the workspace: its path and its path as text.
    pub fn fixture(&self, name: &str) -> (PathBuf, String) {
        let dir = self.ws().join(name);
        reset(&dir);
        let text = dir.to_str().expect("UTF-8 workspace").to_owned();
        (dir, text)
    }

    pub fn fail(&self, message: String) {
        eprintln!("FAILURE: {message}\n");
        self.failures.lock().unwrap().push(message);
    }

    /// Records a failure unless `got == want`.
    pub fn check<T: PartialEq + Debug>(&self, what: impl Display, got: &T, want: &T) -> bool {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if got == want {
            return true;
        }
        self.fail(format!("{what}\n{}", diff(&format!("{got:?}"), &format!("{want:?}"), "got", "want")));
        false
    }

    /// Records a failure unless `condition` holds.
    pub fn ensure(&self, what: impl Display, condition: bool, detail: impl Debug) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if !condition {
            self.fail(format!("{what}\n  detail: {}", clip(&format!("{detail:?}"), 2000)));
        }
    }

    /// Panics with every recorded failure.
    pub fn finish(mut self) {
        self.finished = true;
        let failures = std::mem::take(&mut *self.failures.lock().unwrap());
        eprintln!("{} checks, {} failed", self.checks.load(Ordering::Relaxed), failures.len());
        if !failures.is_empty() {
            panic!("{} check(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
        }
    }

    async fn run_on(&self, side: Side, request: FsRequest) -> FsResponse {
        let result = match side {
            Side::Native => self.native.fs(request).await,
            Side::Derived => self.derived.fs(request).await,
        };
        result.unwrap_or_else(|err| panic!("{side:?} transport failed: {err}"))
    }

    /// Runs `request` on both sandboxes; returns (native, derived) unchecked.
    async fn pair(&self, request: &FsRequest) -> (FsResponse, FsResponse) {
        let native = self.run_on(Side::Native, request.clone()).await;
        let derived = self.run_on(Side::Derived, request.clone()).await;
        (native, derived)
    }

    /// Runs `request` on both sandboxes, requires identical results and returns the native one.
    pub async fn both(&self, request: FsRequest) -> FsResponse {
        let (native, derived) = self.pair(&request).await;
        self.check(format!("native vs derived differ for {}", show(&request)), &native, &derived);
        native
    }

    /// For mutating verbs: for each side, rebuilds `dir` with `setup` and runs `requests` in order, then
    /// snapshots the whole workspace. Responses and final states must be identical on both sides.
    /// Returns the native responses; the workspace is left as the derived run left it.
    pub async fn mutate(&self, dir: &Path, setup: impl Fn(&Path), requests: &[FsRequest]) -> Vec<FsResponse> {
        let mut runs = Vec::new();
        for side in [Side::Native, Side::Derived] {
            reset(dir);
            setup(dir);
            let mut responses = Vec::new();
            for request in requests {
                responses.push(self.run_on(side, request.clone()).await);
            }
            runs.push((responses, snapshot(self.ws())));
        }
        let (derived, derived_state) = runs.pop().unwrap();
        let (native, native_state) = runs.pop().unwrap();
        for (i, request) in requests.iter().enumerate() {
            self.check(
                format!("native vs derived differ for step {i} {}", show(request)),
                &native[i],
                &derived[i],
            );
        }
        self.check(
            format!(
                "native vs derived left different files after {}",
                requests.iter().map(show).collect::<Vec<_>>().join("; ")
            ),
            &native_state,
            &derived_state,
        );
        native
    }

    pub async fn ls(&self, path: &str) -> LsResult {
        match self.both(FsRequest::Ls { path: path.to_owned() }).await {
            FsResponse::Ls(r) => r,
            other => panic!("ls answered {other:?}"),
        }
    }

    pub async fn read(&self, path: &str, offset: i64, limit: i64) -> ReadResult {
        match self.both(FsRequest::Read { path: path.to_owned(), offset, limit }).await {
            FsResponse::Read(r) => r,
            other => panic!("read answered {other:?}"),
        }
    }

    pub async fn glob(&self, pattern: &str, path: Option<&str>) -> GlobResult {
        match self.both(FsRequest::Glob { pattern: pattern.to_owned(), path: path.map(str::to_owned) }).await
        {
            FsResponse::Glob(r) => r,
            other => panic!("glob answered {other:?}"),
        }
    }

    /// Route A (no glob, or a glob without `/`): match order across files is unspecified, so both
    /// results are compared, and returned, with their matches sorted.
    pub async fn grep_a(
        &self,
        pattern: &str,
        path: Option<&str>,
        glob: Option<&str>,
        max: Option<i64>,
    ) -> GrepResult {
        let request = grep_request(pattern, path, glob, max);
        let (native, derived) = self.pair(&request).await;
        let (native, derived) = (sorted(as_grep(native)), sorted(as_grep(derived)));
        self.check(
            format!("native vs derived differ (matches sorted) for {}", show(&request)),
            &native,
            &derived,
        );
        native
    }

    /// Route B (a glob with `/`) and file roots: the order is specified, results compared as they are.
    pub async fn grep_b(
        &self,
        pattern: &str,
        path: Option<&str>,
        glob: Option<&str>,
        max: Option<i64>,
    ) -> GrepResult {
        as_grep(self.both(grep_request(pattern, path, glob, max)).await)
    }
}

impl Drop for Suite {
    fn drop(&mut self) {
        if !self.finished && !std::thread::panicking() {
            let failures = self.failures.lock().unwrap();
            assert!(failures.is_empty(), "unreported failures (missing finish()): {failures:#?}");
        }
    }
}

fn grep_request(pattern: &str, path: Option<&str>, glob: Option<&str>, max_count: Option<i64>) -> FsRequest {
    FsRequest::Grep {
        pattern: pattern.to_owned(),
        path: path.map(str::to_owned),
        glob: glob.map(str::to_owned),
        max_count,
    }
}

fn as_grep(response: FsResponse) -> GrepResult {
    match response {
        FsResponse::Grep(r) => r,
        other => panic!("grep answered {other:?}"),
    }
}

pub fn as_write(response: &FsResponse) -> WriteResult {
    match response {
        FsResponse::Write(r) => r.clone(),
        other => panic!("write answered {other:?}"),
    }
}

pub fn as_edit(response: &FsResponse) -> EditResult {
    match response {
        FsResponse::Edit(r) => r.clone(),
        other => panic!("edit answered {other:?}"),
    }
}

pub fn as_delete(response: &FsResponse) -> DeleteResult {
    match response {
        FsResponse::Delete(r) => r.clone(),
        other => panic!("delete answered {other:?}"),
    }
}

pub fn sorted(mut result: GrepResult) -> GrepResult {
    if let Some(matches) = result.matches.as_mut() {
        matches.sort();
    }
    result
}

/// A request for messages, with long strings clipped.
fn show(request: &FsRequest) -> String {
    clip(&format!("{request:?}"), 300)
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}… ({} chars in all)", text.chars().count())
}

/// Where two Debug renderings first differ, with context, so large values stay readable.
fn diff(a: &str, b: &str, a_name: &str, b_name: &str) -> String {
    let (a_chars, b_chars): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a_chars.len() <= 1500 && b_chars.len() <= 1500 {
        return format!("  {a_name}:  {a}\n  {b_name}: {b}");
    }
    let first =
        a_chars.iter().zip(&b_chars).position(|(x, y)| x != y).unwrap_or(a_chars.len().min(b_chars.len()));
    let window = |chars: &[char]| -> String {
        let start = first.saturating_sub(300);
        let end = (first + 300).min(chars.len());
        chars[start..end].iter().collect()
    };
    format!(
        "  (Debug texts of {} and {} chars first differ at char {first})\n  {a_name}:  …{}…\n  {b_name}: …{}…",
        a_chars.len(),
        b_chars.len(),
        window(&a_chars),
        window(&b_chars)
    )
}

/// Removes `dir` (whatever it is) and creates it empty.
pub fn reset(dir: &Path) {
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if meta.is_dir() {
            make_writable(dir);
            std::fs::remove_dir_all(dir).unwrap();
        } else {
            std::fs::remove_file(dir).unwrap();
        }
    }
    std::fs::create_dir_all(dir).unwrap();
}

/// Gives every directory below `dir` mode 755, so a non-root user can remove it.
pub fn make_writable(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                make_writable(&entry.path());
            }
        }
    }
}

/// What a path holds, for comparing the file-system state after the two runs.
#[derive(Debug, PartialEq)]
enum Node {
    Dir { mode: u32 },
    File { mode: u32, bytes: Bytes },
    Link(Bytes),
    Other,
}

/// Bytes shown as a lossy string (with the length) in failure messages.
#[derive(PartialEq)]
struct Bytes(Vec<u8>);

impl Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({} B)", clip(&String::from_utf8_lossy(&self.0), 400), self.0.len())
    }
}

/// Every path below `root` (relative, as bytes shown lossily) with what it holds.
fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap();
            let key = format!("{:?}", rel.as_os_str());
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let node = if meta.file_type().is_symlink() {
                Node::Link(Bytes(std::fs::read_link(&path).unwrap().as_os_str().as_bytes().to_vec()))
            } else if meta.is_dir() {
                walk(root, &path, out);
                Node::Dir { mode }
            } else if meta.is_file() {
                Node::File { mode, bytes: Bytes(std::fs::read(&path).unwrap_or_default()) }
            } else {
                Node::Other
            };
            out.insert(key, node);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

pub fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) {
    let path = path.as_ref();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

pub fn set_mode(path: impl AsRef<Path>, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

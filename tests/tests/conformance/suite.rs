//! Conformance of the seven file verbs (the contract's rules and its golden cases 5–53) and of
//! the derived offload framing (§4, golden case 55): the cases, each an `async fn(Suite)`, and the
//! [`Suite`] they run in. Which sandboxes they run on is `conformance.rs`'s list of factories.
//!
//! Every call runs twice: natively (a real agentd over a real websocket) and on the derived path
//! (`agentd fs request` through nothing but `execute`), on the same files. The two results must be
//! identical, and each must be the contract's value.
//! Mutating calls rebuild their fixture before each run and compare the whole workspace afterwards.
//!
//! Failures are collected per case and reported together at its end, so one run shows every
//! difference (expected vs got, native vs derived) rather than only the first.
//!
//! The tests run as root in CI: cases 34 and 53 assert the root behaviour there (see their comments).

// Test helpers outside #[test] functions: a failed setup step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::{Debug, Display};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentd_host::{BaseSandbox, ExecuteOffloadResult, ExecuteResponse};
use agentd_protocol::fs::{
    DeleteResult, EditResult, Encoding, FileData, FileInfo, FsRequest, FsResponse, GlobResult, GrepMatch,
    GrepResult, LsResult, ReadResult, TruncationReason, WriteResult,
};
use base64::Engine as _;

/// `TRUNCATION_MSG` of the contract (§3.2 step 7), 194 bytes.
const M: &str = "\n\n[Output was truncated due to size limits. This paginated read result exceeded the sandbox stdout limit. Continue reading with a larger offset or smaller limit to inspect the rest of the file.]";
const EMPTY_REMINDER: &str = "System reminder: File exists but has empty contents";

// ---------------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------------

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
    native: Arc<dyn BaseSandbox>,
    derived: Box<dyn BaseSandbox>,
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

    fn ws(&self) -> &Path {
        &self.ws
    }

    /// A fresh, empty directory `name` inside the workspace: its path and its path as text.
    fn fixture(&self, name: &str) -> (PathBuf, String) {
        let dir = self.ws().join(name);
        reset(&dir);
        let text = dir.to_str().expect("UTF-8 workspace").to_owned();
        (dir, text)
    }

    fn fail(&self, message: String) {
        eprintln!("FAILURE: {message}\n");
        self.failures.lock().unwrap().push(message);
    }

    /// Records a failure unless `got == want`.
    fn check<T: PartialEq + Debug>(&self, what: impl Display, got: &T, want: &T) -> bool {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if got == want {
            return true;
        }
        self.fail(format!("{what}\n{}", diff(&format!("{got:?}"), &format!("{want:?}"), "got", "want")));
        false
    }

    /// Records a failure unless `condition` holds.
    fn ensure(&self, what: impl Display, condition: bool, detail: impl Debug) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if !condition {
            self.fail(format!("{what}\n  detail: {}", clip(&format!("{detail:?}"), 2000)));
        }
    }

    /// Panics with every recorded failure.
    fn finish(mut self) {
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
    async fn both(&self, request: FsRequest) -> FsResponse {
        let (native, derived) = self.pair(&request).await;
        self.check(format!("native vs derived differ for {}", show(&request)), &native, &derived);
        native
    }

    /// For mutating verbs: for each side, rebuilds `dir` with `setup` and runs `requests` in order, then
    /// snapshots the whole workspace. Responses and final states must be identical on both sides.
    /// Returns the native responses; the workspace is left as the derived run left it.
    async fn mutate(&self, dir: &Path, setup: impl Fn(&Path), requests: &[FsRequest]) -> Vec<FsResponse> {
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

    async fn ls(&self, path: &str) -> LsResult {
        match self.both(FsRequest::Ls { path: path.to_owned() }).await {
            FsResponse::Ls(r) => r,
            other => panic!("ls answered {other:?}"),
        }
    }

    async fn read(&self, path: &str, offset: i64, limit: i64) -> ReadResult {
        match self.both(FsRequest::Read { path: path.to_owned(), offset, limit }).await {
            FsResponse::Read(r) => r,
            other => panic!("read answered {other:?}"),
        }
    }

    async fn glob(&self, pattern: &str, path: Option<&str>) -> GlobResult {
        match self.both(FsRequest::Glob { pattern: pattern.to_owned(), path: path.map(str::to_owned) }).await
        {
            FsResponse::Glob(r) => r,
            other => panic!("glob answered {other:?}"),
        }
    }

    /// Route A (no glob, or a glob without `/`): match order across files is unspecified, so both
    /// results are compared, and returned, with their matches sorted.
    async fn grep_a(
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
    async fn grep_b(
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

fn as_write(response: &FsResponse) -> WriteResult {
    match response {
        FsResponse::Write(r) => r.clone(),
        other => panic!("write answered {other:?}"),
    }
}

fn as_edit(response: &FsResponse) -> EditResult {
    match response {
        FsResponse::Edit(r) => r.clone(),
        other => panic!("edit answered {other:?}"),
    }
}

fn as_delete(response: &FsResponse) -> DeleteResult {
    match response {
        FsResponse::Delete(r) => r.clone(),
        other => panic!("delete answered {other:?}"),
    }
}

fn sorted(mut result: GrepResult) -> GrepResult {
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
fn reset(dir: &Path) {
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
fn make_writable(dir: &Path) {
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

fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) {
    let path = path.as_ref();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

fn set_mode(path: impl AsRef<Path>, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

// ---------------------------------------------------------------------------------------------------
// Expected values
// ---------------------------------------------------------------------------------------------------

/// A page: `W = total/start/end/next` of the golden tables.
fn page(content: &str, total: Option<u64>, start: u64, end: u64, next: Option<u64>) -> ReadResult {
    ReadResult {
        error: None,
        file_data: Some(FileData { content: content.to_owned(), encoding: Encoding::Utf8 }),
        total_lines: total,
        start_line: Some(start),
        end_line: Some(end),
        next_offset: next,
        no_lines_requested: false,
    }
}

/// The whole file, no window.
fn whole(content: &str, encoding: Encoding) -> ReadResult {
    ReadResult {
        file_data: Some(FileData { content: content.to_owned(), encoding }),
        ..ReadResult::default()
    }
}

fn b64(bytes: &[u8]) -> ReadResult {
    whole(&base64::engine::general_purpose::STANDARD.encode(bytes), Encoding::Base64)
}

fn no_lines() -> ReadResult {
    ReadResult { no_lines_requested: true, ..whole("", Encoding::Utf8) }
}

fn read_error(message: String) -> ReadResult {
    ReadResult::error(message)
}

fn ls_ok(mut entries: Vec<(String, bool)>) -> LsResult {
    entries.sort();
    LsResult { error: None, entries: Some(entries.into_iter().map(|(p, d)| FileInfo::new(p, d)).collect()) }
}

fn ls_error(message: String) -> LsResult {
    LsResult { error: Some(message), entries: None }
}

/// `ls` entries sorted by path ("any order").
fn ls_sorted(mut result: LsResult) -> LsResult {
    if let Some(entries) = result.entries.as_mut() {
        entries.sort_by(|a, b| a.path.cmp(&b.path));
    }
    result
}

fn written(path: &str) -> WriteResult {
    WriteResult { error: None, path: Some(path.to_owned()) }
}

fn write_error(message: String) -> WriteResult {
    WriteResult { error: Some(message), path: None }
}

fn edited(path: &str, occurrences: u64) -> EditResult {
    EditResult { error: None, path: Some(path.to_owned()), occurrences: Some(occurrences) }
}

fn edit_error(message: String) -> EditResult {
    EditResult { error: Some(message), ..EditResult::default() }
}

fn deleted(path: &str) -> DeleteResult {
    DeleteResult { error: None, path: Some(path.to_owned()) }
}

fn delete_error(message: String) -> DeleteResult {
    DeleteResult { error: Some(message), path: None }
}

fn gm(path: impl Into<String>, line: u64, text: &str) -> GrepMatch {
    GrepMatch { path: path.into(), line, text: text.to_owned() }
}

fn hits(matches: Vec<GrepMatch>, truncated: bool) -> GrepResult {
    GrepResult { error: None, matches: Some(matches), truncated }
}

fn grep_error(message: String) -> GrepResult {
    GrepResult { error: Some(message), matches: None, truncated: false }
}

/// Glob matches `root/rel` for the space-separated `rels`, not truncated.
fn found(root: &str, rels: &str) -> GlobResult {
    GlobResult {
        error: None,
        matches: Some(
            rels.split_whitespace().map(|rel| FileInfo::new(format!("{root}/{rel}"), false)).collect(),
        ),
        truncated: false,
        truncation_reason: None,
    }
}

fn glob_error(message: String) -> GlobResult {
    GlobResult { error: Some(message), matches: None, truncated: false, truncation_reason: None }
}

fn write_req(path: &str, content: &str) -> FsRequest {
    FsRequest::Write { path: path.to_owned(), content: content.to_owned() }
}

fn edit_req(path: &str, old: &str, new: &str, replace_all: bool) -> FsRequest {
    FsRequest::Edit { path: path.to_owned(), old: old.to_owned(), new: new.to_owned(), replace_all }
}

fn delete_req(path: &str) -> FsRequest {
    FsRequest::Delete { path: path.to_owned() }
}

// ---------------------------------------------------------------------------------------------------
// Fixture trees
// ---------------------------------------------------------------------------------------------------

/// Golden cases 5 and 6: `a`, `.hid`, `sub/deep/`, `ln → sub`, `bad → nowhere`.
fn build_t_ls(t: &Path) {
    write_file(t.join("a"), "a");
    write_file(t.join(".hid"), "h");
    std::fs::create_dir_all(t.join("sub/deep")).unwrap();
    symlink(t.join("sub"), t.join("ln")).unwrap();
    symlink("nowhere", t.join("bad")).unwrap();
}

/// The grep tree `G` of §5.
fn build_g(g: &Path) {
    for (rel, content) in [
        ("a.py", "needle one\nno\nneedle two\n"),
        ("sub/b.py", "xx needle\n"),
        ("sub/c.txt", "needle txt\n"),
        (".hidden.py", "needle hidden\n"),
        (".hdir/d.py", "needle in hidden dir\n"),
        (".git/config", "needle in git\n"),
        ("sub/.git/x", "needle in nested git\n"),
        ("we:ird.py", "needle colon\n"),
        ("crlf.py", "needle crlf\r\nother\r\n"),
        ("cr.py", "first\rneedle cr\rlast"),
        ("src/app/main.py", "needle main\n"),
        ("src/top.py", "needle top\n"),
    ] {
        write_file(g.join(rel), content);
    }
}

/// Golden case 35's eleven matches under the root text `g`.
fn g35(g: &str) -> Vec<GrepMatch> {
    let mut all = vec![
        gm(format!("{g}/.hdir/d.py"), 1, "needle in hidden dir"),
        gm(format!("{g}/.hidden.py"), 1, "needle hidden"),
        gm(format!("{g}/a.py"), 1, "needle one"),
        gm(format!("{g}/a.py"), 3, "needle two"),
        gm(format!("{g}/cr.py"), 1, "first\rneedle cr\rlast"),
        gm(format!("{g}/crlf.py"), 1, "needle crlf\r"),
        gm(format!("{g}/src/app/main.py"), 1, "needle main"),
        gm(format!("{g}/src/top.py"), 1, "needle top"),
        gm(format!("{g}/sub/b.py"), 1, "xx needle"),
        gm(format!("{g}/sub/c.txt"), 1, "needle txt"),
        gm(format!("{g}/we:ird.py"), 1, "needle colon"),
    ];
    all.sort();
    all
}

/// The glob tree `F` of §5.
fn build_f(f: &Path) {
    for rel in [
        "a.py",
        "b.py",
        "c.txt",
        ".env",
        ".hidden.py",
        "A.PY",
        "x.yml",
        "file1.txt",
        "file2.txt",
        "file10.txt",
        "fileA.txt",
        "src/main.py",
        "src/app/util.py",
        "src/.secret/key.py",
        "src/.env",
        ".github/workflows/ci.yml",
        "docs/readme.md",
    ] {
        write_file(f.join(rel), rel);
    }
    std::fs::create_dir_all(f.join("dir.py")).unwrap();
    symlink("a.py", f.join("link_in.py")).unwrap();
    symlink("/etc/hostname", f.join("link_out.py")).unwrap();
    symlink("missing", f.join("broken.py")).unwrap();
    symlink("src/", f.join("srclink")).unwrap();
}

// ---------------------------------------------------------------------------------------------------
// ls
// ---------------------------------------------------------------------------------------------------

pub async fn golden_05_06_ls_one_level_links_and_errors(s: Suite) {
    let (dir, t) = s.fixture("t");
    build_t_ls(&dir);

    // 5: dot-files included, links never directories, any order.
    let got = s.ls(&format!("{t}/")).await;
    let want = ls_ok(vec![
        (format!("{t}/a"), false),
        (format!("{t}/.hid"), false),
        (format!("{t}/sub"), true),
        (format!("{t}/ln"), false),
        (format!("{t}/bad"), false),
    ]);
    s.check("5 ls(T/)", &ls_sorted(got), &want);
    // Without the trailing slash the prefix gains one `/`.
    let got = s.ls(&t).await;
    let want = ls_ok(vec![
        (format!("{t}/a"), false),
        (format!("{t}/.hid"), false),
        (format!("{t}/sub"), true),
        (format!("{t}/ln"), false),
        (format!("{t}/bad"), false),
    ]);
    s.check("5 ls(T)", &ls_sorted(got), &want);

    // 6: the prefix is verbatim; errors.
    s.check(
        "6 ls(T//sub)",
        &s.ls(&format!("{t}//sub")).await,
        &ls_ok(vec![(format!("{t}//sub/deep"), true)]),
    );
    s.check("6 ls(T/a)", &s.ls(&format!("{t}/a")).await, &ls_error(format!("Path '{t}/a': not_a_directory")));
    s.check("6 ls(\"\")", &s.ls("").await, &ls_error("Path '': path_not_found".to_owned()));
    s.check(
        "ls(missing)",
        &s.ls(&format!("{t}/missing")).await,
        &ls_error(format!("Path '{t}/missing': path_not_found")),
    );
    // A relative path resolves against the working directory and is echoed verbatim.
    s.check("ls(relative)", &s.ls("t/sub").await, &ls_ok(vec![("t/sub/deep".to_owned(), true)]));
    s.check("ls(relative/)", &s.ls("t//sub/").await, &ls_ok(vec![("t//sub/deep".to_owned(), true)]));
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// read
// ---------------------------------------------------------------------------------------------------

pub async fn golden_07_to_10_read_line_endings_and_windows(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 7: CRLF.
    write_file(dir.join("crlf.txt"), b"a\r\nb\r\nc\r\n");
    let p = format!("{t}/crlf.txt");
    s.check("7 read()", &s.read(&p, 0, 2000).await, &page("a\nb\nc", Some(3), 1, 3, None));
    s.check("7 read(1,1)", &s.read(&p, 1, 1).await, &page("b", Some(3), 2, 2, Some(2)));

    // 8: lone CR, and files of bare terminators.
    write_file(dir.join("cr.txt"), b"a\r\rb");
    write_file(dir.join("lf1.txt"), b"\n");
    write_file(dir.join("lf3.txt"), b"\n\n\n");
    s.check(
        "8 a\\r\\rb",
        &s.read(&format!("{t}/cr.txt"), 0, 2000).await,
        &page("a\n\nb", Some(3), 1, 3, None),
    );
    s.check("8 \\n", &s.read(&format!("{t}/lf1.txt"), 0, 2000).await, &page("", Some(1), 1, 1, None));
    s.check(
        "8 \\n\\n\\n",
        &s.read(&format!("{t}/lf3.txt"), 0, 2000).await,
        &page("\n\n", Some(3), 1, 3, None),
    );

    // 9 and 10, with and without the final LF.
    for (name, bytes) in [("l3.txt", &b"L1\nL2\nL3"[..]), ("l3lf.txt", &b"L1\nL2\nL3\n"[..])] {
        write_file(dir.join(name), bytes);
        let p = format!("{t}/{name}");
        s.check(
            format!("9 {name} read(3,2000)"),
            &s.read(&p, 3, 2000).await,
            &read_error(format!("File '{p}': Line offset 3 exceeds file length (3 lines)")),
        );
        s.check(
            format!("9 {name} read(100,10)"),
            &s.read(&p, 100, 10).await,
            &read_error(format!("File '{p}': Line offset 100 exceeds file length (3 lines)")),
        );
        s.check(
            format!("9 {name} read(2,2000)"),
            &s.read(&p, 2, 2000).await,
            &page("L3", Some(3), 3, 3, None),
        );
        s.check(format!("10 {name} read(0,0)"), &s.read(&p, 0, 0).await, &no_lines());
        s.check(format!("10 {name} read(0,-1)"), &s.read(&p, 0, -1).await, &no_lines());
        s.check(
            format!("10 {name} read(-5,1)"),
            &s.read(&p, -5, 1).await,
            &page("L1", Some(3), 1, 1, Some(1)),
        );
        // limit 0 wins over an offset past the end (step 5 precedes step 8).
        s.check(format!("10 {name} read(100,0)"), &s.read(&p, 100, 0).await, &no_lines());
        s.check(format!("{name} read(-1,-1)"), &s.read(&p, -1, -1).await, &no_lines());
    }
    s.finish();
}

pub async fn golden_11_to_13_read_empty_paging_and_the_utf8_sniff(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 11: empty files, any offset, limit or extension.
    for name in ["x.txt", "x.png"] {
        write_file(dir.join(name), b"");
        let p = format!("{t}/{name}");
        for (offset, limit) in [(0, 2000), (0, 0), (7, 3), (-1, -1), (1_000_000, 1)] {
            s.check(
                format!("11 {name} read({offset},{limit})"),
                &s.read(&p, offset, limit).await,
                &whole(EMPTY_REMINDER, Encoding::Utf8),
            );
        }
    }

    // 12: 2500 lines, two pages.
    let lines: Vec<String> = (0..2500).map(|i| i.to_string()).collect();
    write_file(dir.join("n.txt"), lines.iter().map(|l| format!("{l}\n")).collect::<String>());
    let p = format!("{t}/n.txt");
    s.check(
        "12 read()",
        &s.read(&p, 0, 2000).await,
        &page(&lines[..2000].join("\n"), Some(2500), 1, 2000, Some(2000)),
    );
    s.check(
        "12 read(2000,2000)",
        &s.read(&p, 2000, 2000).await,
        &page(&lines[2000..].join("\n"), Some(2500), 2001, 2500, None),
    );
    s.check(
        "12 read(2499,5) (last line)",
        &s.read(&p, 2499, 5).await,
        &page("2499", Some(2500), 2500, 2500, None),
    );
    s.check(
        "12 read(2500,5) (offset == line count)",
        &s.read(&p, 2500, 5).await,
        &read_error(format!("File '{p}': Line offset 2500 exceeds file length (2500 lines)")),
    );

    // 13: a character straddling byte 8192 is fine; an invalid byte inside the window is binary.
    let mut straddle = vec![b'a'; 8191];
    straddle.extend_from_slice("é\nrest".as_bytes());
    write_file(dir.join("straddle.txt"), &straddle);
    s.check(
        "13 é straddles 8192",
        &s.read(&format!("{t}/straddle.txt"), 0, 2000).await,
        &page(&format!("{}é\nrest", "a".repeat(8191)), Some(2), 1, 2, None),
    );
    // A 4-byte character starting at byte 8190 (two of its bytes inside the window).
    let mut straddle4 = vec![b'a'; 8190];
    straddle4.extend_from_slice("😀\n".as_bytes());
    write_file(dir.join("straddle4.txt"), &straddle4);
    s.check(
        "13 😀 straddles 8192",
        &s.read(&format!("{t}/straddle4.txt"), 0, 2000).await,
        &page(&format!("{}😀", "a".repeat(8190)), Some(1), 1, 1, None),
    );
    // A sequence cut at the window's end passes the sniff, but decoding the page then fails (step 10).
    let mut cut = vec![b'a'; 8191];
    cut.extend_from_slice(b"\xf0\x9fx\n");
    write_file(dir.join("cut.txt"), &cut);
    let p = format!("{t}/cut.txt");
    let got = s.read(&p, 0, 2000).await;
    let prefix = format!("File '{p}': unexpected server response: ");
    s.ensure(
        format!("13 a broken sequence across 8192: an error starting {prefix:?}"),
        got.error.as_deref().is_some_and(|e| e.starts_with(&prefix))
            && got == ReadResult::error(got.error.clone().unwrap_or_default()),
        &got,
    );
    let mut bad = vec![b'a'; 8191];
    bad.extend_from_slice(b"\xffabc");
    write_file(dir.join("bad8191.txt"), &bad);
    s.check("13 \\xff at byte 8191", &s.read(&format!("{t}/bad8191.txt"), 0, 2000).await, &b64(&bad));
    // The sniff decides before `limit == 0` (step 4 precedes step 5).
    s.check("13 \\xff at byte 8191, limit 0", &s.read(&format!("{t}/bad8191.txt"), 0, 0).await, &b64(&bad));
    s.finish();
}

pub async fn golden_14_15_read_invalid_utf8_after_the_sniff(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 14: an incomplete tail, and a bad byte just past the sniff window, inside the page.
    write_file(dir.join("tail.txt"), b"abc\xe4");
    let mut past = vec![b'a'; 8192];
    past.extend_from_slice(b"\xffabc");
    write_file(dir.join("past.txt"), &past);
    for name in ["tail.txt", "past.txt"] {
        let p = format!("{t}/{name}");
        let got = s.read(&p, 0, 2000).await;
        let prefix = format!("File '{p}': unexpected server response: ");
        s.ensure(
            format!("14 {name}: an error starting {prefix:?} and nothing else"),
            got.error.as_deref().is_some_and(|e| e.starts_with(&prefix))
                && got == ReadResult::error(got.error.clone().unwrap_or_default()),
            &got,
        );
    }

    // 15: a bad byte well past the page does no harm; the recount is lenient.
    let mut ok = b"ok\n".repeat(10_000);
    ok.extend_from_slice(b"\xff\n");
    write_file(dir.join("ok.txt"), &ok);
    s.check(
        "15 read(0,1)",
        &s.read(&format!("{t}/ok.txt"), 0, 1).await,
        &page("ok", Some(10_001), 1, 1, Some(1)),
    );
    s.finish();
}

pub async fn golden_16_17_read_binary_extensions_and_content(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 16.
    write_file(dir.join("x.PNG"), b"\x89PNG\r\n");
    write_file(dir.join(".png"), b"hi");
    write_file(dir.join("a.tar.PDF"), b"hi");
    write_file(dir.join("a.mkv"), b"x");
    write_file(dir.join("a.svg"), b"<svg/>\n");
    let want_png = whole("iVBORw0K", Encoding::Base64);
    s.check("16 x.PNG", &s.read(&format!("{t}/x.PNG"), 0, 2000).await, &want_png);
    s.check("16 x.PNG limit 0", &s.read(&format!("{t}/x.PNG"), 0, 0).await, &want_png);
    s.check("16 x.PNG offset past the end", &s.read(&format!("{t}/x.PNG"), 50, 1).await, &want_png);
    s.check(
        "16 .png is text",
        &s.read(&format!("{t}/.png"), 0, 2000).await,
        &page("hi", Some(1), 1, 1, None),
    );
    s.check(
        "16 a.tar.PDF",
        &s.read(&format!("{t}/a.tar.PDF"), 0, 2000).await,
        &whole("aGk=", Encoding::Base64),
    );
    s.check("16 a.mkv", &s.read(&format!("{t}/a.mkv"), 0, 2000).await, &whole("eA==", Encoding::Base64));
    s.check(
        "16 a.svg is text",
        &s.read(&format!("{t}/a.svg"), 0, 2000).await,
        &page("<svg/>", Some(1), 1, 1, None),
    );

    // Binary by extension with text content, and by content with a text extension.
    write_file(dir.join("notes.pdf"), b"hello\n");
    s.check(
        "notes.pdf",
        &s.read(&format!("{t}/notes.pdf"), 0, 2000).await,
        &whole("aGVsbG8K", Encoding::Base64),
    );
    let png_bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    write_file(dir.join("image.txt"), &png_bytes);
    s.check("PNG bytes in image.txt", &s.read(&format!("{t}/image.txt"), 0, 2000).await, &b64(&png_bytes));
    s.check(
        "PNG bytes in image.txt, limit 0",
        &s.read(&format!("{t}/image.txt"), 3, 0).await,
        &b64(&png_bytes),
    );
    // NUL and control bytes are valid UTF-8: text.
    write_file(dir.join("ctl.bin"), b"\x00\x01\x02\n");
    s.check(
        "ctl.bin",
        &s.read(&format!("{t}/ctl.bin"), 0, 2000).await,
        &page("\0\u{1}\u{2}", Some(1), 1, 1, None),
    );
    // Binary by content has no size cap (quirk of step 4).
    let big: Vec<u8> = (0..600_000u32).map(|i| if i % 7 == 0 { 0xff } else { b'b' }).collect();
    write_file(dir.join("big.dat"), &big);
    s.check("600000 B of invalid UTF-8, no cap", &s.read(&format!("{t}/big.dat"), 0, 2000).await, &b64(&big));

    // 17: the preview cap of binary extensions.
    let bytes: Vec<u8> = (0..512_001u32).map(|i| (i % 251) as u8).collect();
    write_file(dir.join("t.png"), &bytes[..512_000]);
    write_file(dir.join("big.png"), &bytes);
    s.check("17 512000 B .png", &s.read(&format!("{t}/t.png"), 0, 2000).await, &b64(&bytes[..512_000]));
    s.check(
        "17 512001 B .png",
        &s.read(&format!("{t}/big.png"), 0, 2000).await,
        &read_error(format!("File '{t}/big.png': Binary file exceeds maximum preview size of 512000 bytes")),
    );
    s.finish();
}

pub async fn golden_18_to_20_read_byte_cap_and_total_lines(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 18: one huge line, ASCII and 4-byte characters.
    write_file(dir.join("x.txt"), "x".repeat(600_000));
    let want = format!("{}{M}", "x".repeat(511_806));
    assert_eq!(want.len(), 512_000);
    s.check("18 x×600000", &s.read(&format!("{t}/x.txt"), 0, 2000).await, &page(&want, Some(1), 1, 1, None));
    write_file(dir.join("emoji.txt"), "😀".repeat(200_000));
    let want = format!("{}{M}", "😀".repeat(127_951));
    assert_eq!(want.len(), 511_998);
    s.check(
        "18 😀×200000",
        &s.read(&format!("{t}/emoji.txt"), 0, 2000).await,
        &page(&want, Some(1), 1, 1, None),
    );

    // 19: many long lines; the cut line does not count.
    let line = "y".repeat(999);
    write_file(dir.join("y.txt"), format!("{line}\n").repeat(600));
    let want = format!("{}\n{}{M}", [line.as_str(); 511].join("\n"), "y".repeat(806));
    assert_eq!(want.len(), 512_000);
    s.check(
        "19 600 lines of 999",
        &s.read(&format!("{t}/y.txt"), 0, 2000).await,
        &page(&want, Some(600), 1, 511, Some(511)),
    );

    // 20: total_lines only up to 1048576 bytes unless the page reached the end.
    let z = "z".repeat(99);
    write_file(dir.join("z.txt"), format!("{z}\n").repeat(20_000));
    let ten_z = [z.as_str(); 10].join("\n");
    let p = format!("{t}/z.txt");
    s.check("20 2000000 B read(0,10)", &s.read(&p, 0, 10).await, &page(&ten_z, None, 1, 10, Some(10)));
    s.check(
        "20 2000000 B read(19990,10)",
        &s.read(&p, 19_990, 10).await,
        &page(&ten_z, Some(20_000), 19_991, 20_000, None),
    );
    let q = "q".repeat(1023);
    let exact = format!("{q}\n").repeat(1024);
    assert_eq!(exact.len(), 1_048_576);
    let ten_q = [q.as_str(); 10].join("\n");
    write_file(dir.join("q.txt"), &exact);
    write_file(dir.join("q-1.txt"), &exact[..exact.len() - 1]);
    write_file(dir.join("q+1.txt"), format!("{exact}q"));
    s.check(
        "20 1048576 B read(0,10)",
        &s.read(&format!("{t}/q.txt"), 0, 10).await,
        &page(&ten_q, Some(1024), 1, 10, Some(10)),
    );
    s.check(
        "20 1048575 B read(0,10)",
        &s.read(&format!("{t}/q-1.txt"), 0, 10).await,
        &page(&ten_q, Some(1024), 1, 10, Some(10)),
    );
    s.check(
        "20 1048577 B read(0,10)",
        &s.read(&format!("{t}/q+1.txt"), 0, 10).await,
        &page(&ten_q, None, 1, 10, Some(10)),
    );
    s.finish();
}

pub async fn golden_21_22_read_odd_bytes_and_non_files(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 21: NUL kept, BOM kept, FF / VT / U+2028 do not end lines.
    write_file(dir.join("nul.txt"), b"a\0b\nc");
    write_file(dir.join("bom.txt"), b"\xef\xbb\xbfhi\n");
    write_file(dir.join("ff.txt"), b"a\x0cb\x0bc\xe2\x80\xa8d");
    s.check(
        "21 NUL",
        &s.read(&format!("{t}/nul.txt"), 0, 2000).await,
        &page("a\u{0}b\nc", Some(2), 1, 2, None),
    );
    s.check(
        "21 BOM",
        &s.read(&format!("{t}/bom.txt"), 0, 2000).await,
        &page("\u{feff}hi", Some(1), 1, 1, None),
    );
    s.check(
        "21 FF VT U+2028",
        &s.read(&format!("{t}/ff.txt"), 0, 2000).await,
        &page("a\u{c}b\u{b}c\u{2028}d", Some(1), 1, 1, None),
    );

    // 22: directory, FIFO, dangling link; and a missing file.
    std::fs::create_dir(dir.join("d")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    symlink("nowhere", dir.join("dangling")).unwrap();
    for (name, what) in [
        ("d", "not_a_file"),
        ("fifo", "not_a_file"),
        ("dangling", "file_not_found"),
        ("missing", "file_not_found"),
    ] {
        let p = format!("{t}/{name}");
        s.check(format!("22 {name}"), &s.read(&p, 0, 2000).await, &read_error(format!("File '{p}': {what}")));
    }
    // A link to a file is followed.
    symlink("nul.txt", dir.join("ln")).unwrap();
    s.check(
        "read through a link",
        &s.read(&format!("{t}/ln"), 0, 2000).await,
        &page("a\u{0}b\nc", Some(2), 1, 2, None),
    );
    s.finish();
}

pub async fn edge_read_long_lines_crlf_offsets_and_relative_paths(s: Suite) {
    let (dir, t) = s.fixture("t");

    // Lines far longer than 5000 characters come back whole.
    let long = format!("{}\n{}", "a".repeat(6000), "b".repeat(7000));
    write_file(dir.join("long.txt"), &long);
    s.check(
        "long lines",
        &s.read(&format!("{t}/long.txt"), 0, 2000).await,
        &page(&long, Some(2), 1, 2, None),
    );
    s.check(
        "long lines read(1,1)",
        &s.read(&format!("{t}/long.txt"), 1, 1).await,
        &page(&"b".repeat(7000), Some(2), 2, 2, None),
    );

    // Mixed terminators, each counted once.
    for (name, bytes, content, total) in [
        ("mix.txt", &b"a\r\n\r\nb\rc\nd"[..], "a\n\nb\nc\nd", 5),
        ("cr_end.txt", b"a\r", "a", 1),
        ("crlf_only.txt", b"\r\n", "", 1),
        ("cr_cr.txt", b"\r\r", "\n", 2),
        ("lf_cr.txt", b"\n\r", "\n", 2),
    ] {
        write_file(dir.join(name), bytes);
        s.check(
            name,
            &s.read(&format!("{t}/{name}"), 0, 2000).await,
            &page(content, Some(total), 1, total, None),
        );
    }

    // Offsets at and past the end of a CRLF file.
    write_file(dir.join("two.txt"), b"a\r\nb\r\n");
    let p = format!("{t}/two.txt");
    s.check("two read(0,1)", &s.read(&p, 0, 1).await, &page("a", Some(2), 1, 1, Some(1)));
    s.check("two read(1,5)", &s.read(&p, 1, 5).await, &page("b", Some(2), 2, 2, None));
    s.check(
        "two read(2,1)",
        &s.read(&p, 2, 1).await,
        &read_error(format!("File '{p}': Line offset 2 exceeds file length (2 lines)")),
    );
    s.check(
        "two read(i64::MAX,1)",
        &s.read(&p, i64::MAX, 1).await,
        &read_error(format!("File '{p}': Line offset {} exceeds file length (2 lines)", i64::MAX)),
    );
    s.check(
        "two read(i64::MIN,i64::MAX)",
        &s.read(&p, i64::MIN, i64::MAX).await,
        &page("a\nb", Some(2), 1, 2, None),
    );

    // Relative paths resolve against the working directory; messages echo them verbatim.
    s.check("relative read", &s.read("t/two.txt", 0, 1).await, &page("a", Some(2), 1, 1, Some(1)));
    s.check("relative read ./", &s.read("./t//two.txt", 1, 1).await, &page("b", Some(2), 2, 2, None));
    s.check(
        "relative missing",
        &s.read("nope.txt", 0, 1).await,
        &read_error("File 'nope.txt': file_not_found".to_owned()),
    );
    s.finish();
}

/// `""` names nothing: `stat("")` is ENOENT, which is what the reference's helpers see (its `ls("")`
/// is golden case 6). It must not resolve to the working directory.
pub async fn edge_empty_path_names_nothing(s: Suite) {
    let (dir, _) = s.fixture("t");
    write_file(dir.join("keep"), b"k");
    s.check("ls(\"\")", &s.ls("").await, &ls_error("Path '': path_not_found".to_owned()));
    s.check("read(\"\")", &s.read("", 0, 1).await, &read_error("File '': file_not_found".to_owned()));
    let got =
        s.mutate(&dir, |d: &Path| write_file(d.join("keep"), b"k"), &[edit_req("", "a", "b", false)]).await;
    s.check("edit(\"\")", &as_edit(&got[0]), &edit_error("Error: File '' not found".to_owned()));
    // `write` uploads to "", which does not start with `/`.
    let got = s.mutate(&dir, |d: &Path| write_file(d.join("keep"), b"k"), &[write_req("", "x")]).await;
    s.check(
        "write(\"\")",
        &as_write(&got[0]),
        &write_error("Failed to write file '': invalid_path".to_owned()),
    );
    let got = s.mutate(&dir, |d: &Path| write_file(d.join("keep"), b"k"), &[delete_req("")]).await;
    s.check("delete(\"\")", &as_delete(&got[0]), &delete_error("Error: '' not found".to_owned()));
    s.ensure("workspace intact", dir.join("keep").exists(), "T/keep gone");
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// write
// ---------------------------------------------------------------------------------------------------

pub async fn golden_23_write_creates_overwrites_and_fails_as_values(s: Suite) {
    let (dir, t) = s.fixture("t");
    let setup = |d: &Path| write_file(d.join("afile"), b"");

    let target = format!("{t}/w/x/y.txt");
    let got = s.mutate(&dir, setup, &[write_req(&target, "hi"), write_req(&target, "second")]).await;
    s.check("23 write new", &as_write(&got[0]), &written(&target));
    s.check("23 write again", &as_write(&got[1]), &written(&target));
    s.check("23 file holds `second`", &std::fs::read(dir.join("w/x/y.txt")).ok(), &Some(b"second".to_vec()));

    let got = s.mutate(&dir, setup, &[write_req("rel.txt", "x")]).await;
    s.check(
        "23 relative",
        &as_write(&got[0]),
        &write_error("Failed to write file 'rel.txt': invalid_path".to_owned()),
    );
    s.ensure("23 relative write created nothing", !s.ws().join("rel.txt").exists(), "rel.txt exists");

    let got = s.mutate(&dir, setup, &[write_req(&t, "x")]).await;
    s.check(
        "23 onto a directory",
        &as_write(&got[0]),
        &write_error(format!("Failed to write file '{t}': is_directory")),
    );

    let got = as_write(&s.mutate(&dir, setup, &[write_req(&format!("{t}/afile/c"), "x")]).await[0]);
    s.ensure("23 parent is a file: an error and no path", got.error.is_some() && got.path.is_none(), &got);

    // Exact bytes: no newline translation, multibyte, NUL, empty content, overwrite with shorter text.
    let body = "l1\r\nl2\rl3\n\0é😀";
    let got = s.mutate(&dir, setup, &[write_req(&format!("{t}/bytes.txt"), body)]).await;
    s.check("write exact bytes", &as_write(&got[0]), &written(&format!("{t}/bytes.txt")));
    s.check(
        "write exact bytes: content",
        &std::fs::read(dir.join("bytes.txt")).ok(),
        &Some(body.as_bytes().to_vec()),
    );
    let got = s.mutate(&dir, setup, &[write_req(&format!("{t}/afile"), "")]).await;
    s.check("write empty", &as_write(&got[0]), &written(&format!("{t}/afile")));
    let got = s
        .mutate(
            &dir,
            |d: &Path| write_file(d.join("long.txt"), "0123456789"),
            &[write_req(&format!("{t}/long.txt"), "ab")],
        )
        .await;
    s.check("overwrite shorter", &as_write(&got[0]), &written(&format!("{t}/long.txt")));
    s.check("overwrite shorter: content", &std::fs::read(dir.join("long.txt")).ok(), &Some(b"ab".to_vec()));
    // Relative and doubled slashes are echoed verbatim.
    let got = s.mutate(&dir, setup, &[write_req(&format!("{t}//deep//z.txt"), "z")]).await;
    s.check("write with //", &as_write(&got[0]), &written(&format!("{t}//deep//z.txt")));
    s.check("write with //: content", &std::fs::read(dir.join("deep/z.txt")).ok(), &Some(b"z".to_vec()));
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// edit
// ---------------------------------------------------------------------------------------------------

/// Runs one edit on a fresh file `f` holding `initial` (on both sides); returns the native result and
/// the file's bytes afterwards.
async fn edit_once(
    s: &Suite,
    dir: &Path,
    initial: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> (EditResult, Vec<u8>) {
    let path = format!("{}/f", dir.to_str().unwrap());
    let setup = |d: &Path| write_file(d.join("f"), initial);
    let got = s.mutate(dir, setup, &[edit_req(&path, old, new, replace_all)]).await;
    (as_edit(&got[0]), std::fs::read(dir.join("f")).unwrap())
}

pub async fn golden_24_to_29_edit_matching_forms_and_counts(s: Suite) {
    let (dir, t) = s.fixture("t");
    let f = format!("{t}/f");
    let ok = |n| edited(&f, n);

    // 24.
    let got = edit_once(&s, &dir, b"a\r\nb\r\nc\r\n", "b\nc", "X\nY", false).await;
    s.check("24 LF old on CRLF file", &got, &(ok(1), b"a\r\nX\r\nY\r\n".to_vec()));
    let got = edit_once(&s, &dir, b"a\r\nb\r\nc\r\n", "b\r\nc", "X\nY", false).await;
    s.check("24 exact CRLF old", &got, &(ok(1), b"a\r\nX\nY\r\n".to_vec()));
    // 25.
    let got = edit_once(&s, &dir, b"a\nb\nc\n", "a\r\nb", "P\r\nQ", false).await;
    s.check("25 CRLF old on LF file", &got, &(ok(1), b"P\nQ\nc\n".to_vec()));
    // 26.
    let got = edit_once(&s, &dir, b"x\r\ny\nx\ny\r\nx\r\ny", "x\ny", "Z", true).await;
    s.check("26 replace_all, first matching style only", &got, &(ok(1), b"x\r\ny\nZ\r\nx\r\ny".to_vec()));
    // 27.
    let got = edit_once(&s, &dir, b"a\nb", "b\n", "c\n", false).await;
    s.check(
        "27 not found",
        &got,
        &(edit_error("Error: String not found in file: 'b\n'".to_owned()), b"a\nb".to_vec()),
    );
    // 28.
    let fruit = b"apple\nbanana\napple\n";
    let got = edit_once(&s, &dir, fruit, "apple", "pear", false).await;
    s.check(
        "28 many without replace_all",
        &got,
        &(
            edit_error(
                "Error: String 'apple' appears multiple times. Use replace_all=True to replace all occurrences.".to_owned(),
            ),
            fruit.to_vec(),
        ),
    );
    let got = edit_once(&s, &dir, fruit, "apple", "pear", true).await;
    s.check("28 replace_all", &got, &(ok(2), b"pear\nbanana\npear\n".to_vec()));
    // 29.
    s.check("29 aaa", &edit_once(&s, &dir, b"aaa", "aa", "X", false).await, &(ok(1), b"Xa".to_vec()));
    s.check(
        "29 aaaa replace_all",
        &edit_once(&s, &dir, b"aaaa", "aa", "X", true).await,
        &(ok(2), b"XX".to_vec()),
    );
    s.check(
        "29 old == new",
        &edit_once(&s, &dir, b"hello", "hello", "hello", false).await,
        &(ok(1), b"hello".to_vec()),
    );
    s.finish();
}

pub async fn edge_edit_occurrences_crlf_and_lone_cr(s: Suite) {
    let (dir, t) = s.fixture("t");
    let f = format!("{t}/f");
    let ok = |n| edited(&f, n);
    let not_found = |old: &str| edit_error(format!("Error: String not found in file: '{old}'"));
    let many = |old: &str| {
        edit_error(format!(
            "Error: String '{old}' appears multiple times. Use replace_all=True to replace all occurrences."
        ))
    };

    // 0, 1 and many occurrences, with and without replace_all.
    let text = b"one two two three three three\n";
    s.check(
        "0 occurrences",
        &edit_once(&s, &dir, text, "four", "4", false).await,
        &(not_found("four"), text.to_vec()),
    );
    s.check(
        "0 occurrences, replace_all",
        &edit_once(&s, &dir, text, "four", "4", true).await,
        &(not_found("four"), text.to_vec()),
    );
    s.check(
        "1 occurrence",
        &edit_once(&s, &dir, text, "one", "1", false).await,
        &(ok(1), b"1 two two three three three\n".to_vec()),
    );
    s.check(
        "1 occurrence, replace_all",
        &edit_once(&s, &dir, text, "one", "1", true).await,
        &(ok(1), b"1 two two three three three\n".to_vec()),
    );
    s.check(
        "3 occurrences",
        &edit_once(&s, &dir, text, "three", "3", false).await,
        &(many("three"), text.to_vec()),
    );
    s.check(
        "3 occurrences, replace_all",
        &edit_once(&s, &dir, text, "three", "3", true).await,
        &(ok(3), b"one two two 3 3 3\n".to_vec()),
    );
    // The message quotes `old` verbatim, raw newlines and quotes included.
    let quoted = b"it's\r\nit's\r\n";
    s.check(
        "many, message quotes old verbatim",
        &edit_once(&s, &dir, quoted, "it's\n", "x", false).await,
        &(many("it's\n"), quoted.to_vec()),
    );
    s.check(
        "not found, message quotes old verbatim",
        &edit_once(&s, &dir, quoted, "it's\nnot\n", "x", false).await,
        &(not_found("it's\nnot\n"), quoted.to_vec()),
    );

    // CRLF files: the CRLF form of old and new; replace_all on it.
    let kv = b"k\r\nv\r\nk\r\nv\r\n";
    s.check(
        "CRLF form, replace_all",
        &edit_once(&s, &dir, kv, "k\nv", "K\nV", true).await,
        &(ok(2), b"K\r\nV\r\nK\r\nV\r\n".to_vec()),
    );
    s.check(
        "CRLF form, many",
        &edit_once(&s, &dir, kv, "k\nv", "K\nV", false).await,
        &(many("k\nv"), kv.to_vec()),
    );
    s.check(
        "CRLF form, new with CRLF",
        &edit_once(&s, &dir, b"a\r\nb\r\n", "a\nb", "1\r\n2", false).await,
        &(ok(1), b"1\r\n2\r\n".to_vec()),
    );
    // An exact match inserts new verbatim, even a CRLF into an LF file.
    s.check(
        "exact match, new verbatim",
        &edit_once(&s, &dir, b"a\nb\n", "a", "x\r\ny", false).await,
        &(ok(1), b"x\r\ny\nb\n".to_vec()),
    );
    // Lone CRs are never touched.
    s.check(
        "lone CR, LF old",
        &edit_once(&s, &dir, b"a\rb\r\n", "a\nb", "X", false).await,
        &(not_found("a\nb"), b"a\rb\r\n".to_vec()),
    );
    s.check(
        "lone CR, exact old",
        &edit_once(&s, &dir, b"p\rq", "p\rq", "Z", false).await,
        &(ok(1), b"Z".to_vec()),
    );
    // Multibyte text and deletion (empty new).
    s.check(
        "multibyte",
        &edit_once(&s, &dir, "é😀é".as_bytes(), "😀", "", false).await,
        &(ok(1), "éé".as_bytes().to_vec()),
    );

    // Mode is kept (rewritten in place).
    let got = s
        .mutate(
            &dir,
            |d: &Path| {
                write_file(d.join("f"), b"abc");
                set_mode(d.join("f"), 0o640);
            },
            &[edit_req(&f, "b", "B", false)],
        )
        .await;
    s.check("mode kept: result", &as_edit(&got[0]), &ok(1));
    s.check(
        "mode kept: mode",
        &(std::fs::metadata(dir.join("f")).unwrap().permissions().mode() & 0o7777),
        &0o640,
    );

    // Relative path.
    let got =
        s.mutate(&dir, |d: &Path| write_file(d.join("f"), b"abc"), &[edit_req("t/f", "a", "Z", false)]).await;
    s.check("relative edit", &as_edit(&got[0]), &edited("t/f", 1));
    s.check("relative edit: content", &std::fs::read(dir.join("f")).unwrap(), &b"Zbc".to_vec());
    s.finish();
}

pub async fn golden_30_to_32_edit_errors_links_and_large_payloads(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 30.
    let missing = format!("{t}/missing");
    let got = s
        .mutate(
            &dir,
            |_: &Path| {},
            &[edit_req(&missing, "", "y", false), edit_req(&missing, "a", "b", false)],
        )
        .await;
    s.check(
        "30 empty old on a missing file",
        &as_edit(&got[0]),
        &edit_error("Error: old_string cannot be empty. Provide the exact text to replace.".to_owned()),
    );
    s.check("30 missing", &as_edit(&got[1]), &edit_error(format!("Error: File '{missing}' not found")));
    let got = edit_once(&s, &dir, b"ab\xffcd", "ab", "y", false).await;
    s.check(
        "30 not UTF-8",
        &got,
        &(edit_error(format!("Error: File '{t}/f' is not a text file")), b"ab\xffcd".to_vec()),
    );
    // The extension is irrelevant.
    let got = s
        .mutate(
            &dir,
            |d: &Path| write_file(d.join("x.png"), b"abc"),
            &[edit_req(&format!("{t}/x.png"), "b", "B", false)],
        )
        .await;
    s.check("edit a .png holding text", &as_edit(&got[0]), &edited(&format!("{t}/x.png"), 1));
    let got = s
        .mutate(
            &dir,
            |d: &Path| std::fs::create_dir(d.join("d")).unwrap(),
            &[edit_req(&format!("{t}/d"), "ab", "y", false)],
        )
        .await;
    s.check("30 directory", &as_edit(&got[0]), &edit_error(format!("Error: '{t}/d' is not a regular file")));
    // Empty old wins even on a directory.
    let got = s
        .mutate(
            &dir,
            |d: &Path| std::fs::create_dir(d.join("d")).unwrap(),
            &[edit_req(&format!("{t}/d"), "", "y", false)],
        )
        .await;
    s.check(
        "30 empty old on a directory",
        &as_edit(&got[0]),
        &edit_error("Error: old_string cannot be empty. Provide the exact text to replace.".to_owned()),
    );
    let got = s
        .mutate(
            &dir,
            |d: &Path| {
                nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
            },
            &[edit_req(&format!("{t}/fifo"), "ab", "y", false)],
        )
        .await;
    s.check("FIFO", &as_edit(&got[0]), &edit_error(format!("Error: '{t}/fifo' is not a regular file")));
    let got = s
        .mutate(
            &dir,
            |d: &Path| symlink("nowhere", d.join("dangling")).unwrap(),
            &[edit_req(&format!("{t}/dangling"), "a", "b", false)],
        )
        .await;
    s.check("dangling link", &as_edit(&got[0]), &edit_error(format!("Error: File '{t}/dangling' not found")));

    // 31: the edit writes through the link.
    let got = s
        .mutate(
            &dir,
            |d: &Path| {
                write_file(d.join("f"), b"abc");
                symlink("f", d.join("ln")).unwrap();
            },
            &[edit_req(&format!("{t}/ln"), "a", "Z", false)],
        )
        .await;
    s.check("31 through a link", &as_edit(&got[0]), &edited(&format!("{t}/ln"), 1));
    s.check("31 target edited", &std::fs::read(dir.join("f")).unwrap(), &b"Zbc".to_vec());
    s.ensure(
        "31 link still a link",
        std::fs::symlink_metadata(dir.join("ln")).map(|m| m.file_type().is_symlink()).unwrap_or(false),
        "ln is not a symlink",
    );

    // 32: payload over 50000 bytes; nothing left in /tmp.
    let tmp_leftovers = || -> Vec<String> {
        std::fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".deepagents_edit_"))
            .collect()
    };
    let before = tmp_leftovers();
    let mut initial = b"HEAD\n".to_vec();
    initial.extend_from_slice("m".repeat(30_000).as_bytes());
    initial.extend_from_slice(b"\nTAIL\n");
    let got = edit_once(&s, &dir, &initial, &"m".repeat(30_000), &"n".repeat(30_000), false).await;
    let want = format!("HEAD\n{}\nTAIL\n", "n".repeat(30_000)).into_bytes();
    s.check("32 large payload", &got, &(edited(&format!("{t}/f"), 1), want));
    s.check("32 no temp files left", &tmp_leftovers(), &before);
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// delete
// ---------------------------------------------------------------------------------------------------

pub async fn golden_33_34_delete_links_and_permissions(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 33.
    let setup = |d: &Path| {
        write_file(d.join("f"), b"x");
        write_file(d.join("sub/keep"), b"k");
        symlink(d.join("sub/"), d.join("ln")).unwrap();
        symlink("nowhere", d.join("bad")).unwrap();
    };
    let (f, ln, bad) = (format!("{t}/f"), format!("{t}/ln"), format!("{t}/bad"));
    let got =
        s.mutate(&dir, setup, &[delete_req(&f), delete_req(&f), delete_req(&ln), delete_req(&bad)]).await;
    s.check("33 delete(f)", &as_delete(&got[0]), &deleted(&f));
    s.check("33 delete(f) again", &as_delete(&got[1]), &delete_error(format!("Error: '{f}' not found")));
    s.check("33 delete(ln)", &as_delete(&got[2]), &deleted(&ln));
    s.check("33 delete(bad)", &as_delete(&got[3]), &deleted(&bad));
    s.ensure(
        "33 links removed",
        std::fs::symlink_metadata(&ln).is_err() && std::fs::symlink_metadata(&bad).is_err(),
        "a link survived",
    );
    s.check("33 T/sub intact", &std::fs::read(dir.join("sub/keep")).ok(), &Some(b"k".to_vec()));

    // 34: `T/ro/` mode 555 holding `f`; `T/locked/` mode 000.
    let setup = |d: &Path| {
        write_file(d.join("ro/f"), b"x");
        set_mode(d.join("ro"), 0o555);
        std::fs::create_dir(d.join("locked")).unwrap();
        set_mode(d.join("locked"), 0o000);
    };
    let (ro_f, inner) = (format!("{t}/ro/f"), format!("{t}/locked/inner"));
    let got = s.mutate(&dir, setup, &[delete_req(&ro_f), delete_req(&inner)]).await;
    if is_root() {
        // As root, permissions do not stop the removal (the reference's row is for non-root).
        s.check("34 (root) delete(T/ro/f)", &as_delete(&got[0]), &deleted(&ro_f));
        s.ensure("34 (root) T/ro/f removed", !dir.join("ro/f").exists(), "still there");
    } else {
        s.check(
            "34 delete(T/ro/f)",
            &as_delete(&got[0]),
            &delete_error(format!(
                "Error deleting file '{ro_f}': rm: cannot remove '{ro_f}': Permission denied"
            )),
        );
    }
    // `inner` does not exist; non-root cannot even tell (quirk): "not found" either way.
    s.check(
        "34 delete(T/locked/inner)",
        &as_delete(&got[1]),
        &delete_error(format!("Error: '{inner}' not found")),
    );
    make_writable(&dir);
    s.finish();
}

pub async fn edge_delete_trees_links_refusals_and_relative_paths(s: Suite) {
    let (dir, t) = s.fixture("t");

    // A tree holding a link to a file outside it: the tree goes, the target stays.
    let setup = |d: &Path| {
        write_file(d.join("outside.txt"), b"o");
        write_file(d.join("tree/a/b/c.txt"), b"c");
        write_file(d.join("tree/.hidden"), b"h");
        symlink("../outside.txt", d.join("tree/out")).unwrap();
        symlink(d.join("outside.txt"), d.join("tree/a/abs")).unwrap();
    };
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/tree"))]).await;
    s.check("delete a tree", &as_delete(&got[0]), &deleted(&format!("{t}/tree")));
    s.ensure("tree gone", !dir.join("tree").exists(), "tree exists");
    s.check("link target intact", &std::fs::read(dir.join("outside.txt")).ok(), &Some(b"o".to_vec()));

    // A link loop is a link: removed, its partner kept.
    let setup = |d: &Path| {
        symlink("loop2", d.join("loop1")).unwrap();
        symlink("loop1", d.join("loop2")).unwrap();
    };
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/loop1"))]).await;
    s.check("delete a link loop", &as_delete(&got[0]), &deleted(&format!("{t}/loop1")));
    s.ensure("loop2 kept", std::fs::symlink_metadata(dir.join("loop2")).is_ok(), "loop2 gone");

    // Relative paths and `.` / `..` refusals.
    let setup = |d: &Path| write_file(d.join("r.txt"), b"r");
    let got = s.mutate(&dir, setup, &[delete_req("t/r.txt"), delete_req("t/r.txt")]).await;
    s.check("relative delete", &as_delete(&got[0]), &deleted("t/r.txt"));
    s.check(
        "relative delete again",
        &as_delete(&got[1]),
        &delete_error("Error: 't/r.txt' not found".to_owned()),
    );
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/.")), delete_req(&format!("{t}/.."))]).await;
    s.check(
        "delete T/.",
        &as_delete(&got[0]),
        &delete_error(format!(
            "Error deleting file '{t}/.': rm: refusing to remove '.' or '..' directory: skipping '{t}/.'"
        )),
    );
    s.check(
        "delete T/..",
        &as_delete(&got[1]),
        &delete_error(format!(
            "Error deleting file '{t}/..': rm: refusing to remove '.' or '..' directory: skipping '{t}/..'"
        )),
    );
    s.ensure("T survives", dir.join("r.txt").exists(), "T/r.txt gone");
    let got = s.mutate(&dir, setup, &[delete_req("")]).await;
    s.check("delete \"\"", &as_delete(&got[0]), &delete_error("Error: '' not found".to_owned()));
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// grep
// ---------------------------------------------------------------------------------------------------

pub async fn golden_35_36_grep_route_a_walk_and_basename_filter(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let all = g35(&g);

    // 35: everything except `.git`, at any depth.
    s.check("35 grep(needle, G)", &s.grep_a("needle", Some(&g), None, None).await, &hits(all.clone(), false));
    // 36: the basename filter; `*` matches a leading dot.
    let py: Vec<GrepMatch> = all.iter().filter(|m| !m.path.ends_with("sub/c.txt")).cloned().collect();
    s.check(
        "36 grep(needle, G, *.py)",
        &s.grep_a("needle", Some(&g), Some("*.py"), None).await,
        &hits(py, false),
    );

    // No root: `.`, paths start with `./`.
    let dot: Vec<GrepMatch> = g35("./g");
    s.check("grep(needle) with no root", &s.grep_a("needle", None, None, None).await, &hits(dot, false));
    // A relative root is echoed.
    s.check("grep(needle, g)", &s.grep_a("needle", Some("g"), None, None).await, &hits(g35("g"), false));
    // A root ending in `/` gives no doubled slash.
    s.check(
        "grep(needle, G/)",
        &s.grep_a("needle", Some(&format!("{g}/")), None, None).await,
        &hits(all.clone(), false),
    );
    // Literal, case-sensitive, never a regex.
    s.check("grep(NEEDLE)", &s.grep_a("NEEDLE", Some(&g), None, None).await, &hits(vec![], false));
    s.check("grep(n.edle) is literal", &s.grep_a("n.edle", Some(&g), None, None).await, &hits(vec![], false));
    s.finish();
}

pub async fn golden_37_38_grep_route_b_paths(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let at = |rel: &str, line, text: &str| gm(format!("{g}/{rel}"), line, text);

    // 37: exact order, universal newlines, no dot-names.
    let want = vec![
        at("a.py", 1, "needle one"),
        at("a.py", 3, "needle two"),
        at("cr.py", 2, "needle cr"),
        at("crlf.py", 1, "needle crlf"),
        at("src/app/main.py", 1, "needle main"),
        at("src/top.py", 1, "needle top"),
        at("sub/b.py", 1, "xx needle"),
        at("we:ird.py", 1, "needle colon"),
    ];
    s.check(
        "37 grep(needle, G, **/*.py)",
        &s.grep_b("needle", Some(&g), Some("**/*.py"), None).await,
        &hits(want, false),
    );

    // 38.
    let want = vec![
        at("a.py", 1, "needle one"),
        at("a.py", 3, "needle two"),
        at("cr.py", 2, "needle cr"),
        at("crlf.py", 1, "needle crlf"),
        at("we:ird.py", 1, "needle colon"),
    ];
    s.check(
        "38 grep(…, /*.py)",
        &s.grep_b("needle", Some(&g), Some("/*.py"), None).await,
        &hits(want, false),
    );
    let want = vec![at("src/app/main.py", 1, "needle main"), at("src/top.py", 1, "needle top")];
    s.check(
        "38 grep(…, src/**/*.py)",
        &s.grep_b("needle", Some(&g), Some("src/**/*.py"), None).await,
        &hits(want, false),
    );
    s.check(
        "38 grep(needle, G/.git)",
        &s.grep_a("needle", Some(&format!("{g}/.git")), None, None).await,
        &hits(vec![at(".git/config", 1, "needle in git")], false),
    );
    s.check(
        "38 grep(…, *.{py,txt})",
        &s.grep_a("needle", Some(&g), Some("*.{py,txt}"), None).await,
        &hits(vec![], false),
    );
    s.finish();
}

pub async fn golden_39_to_43_grep_errors_max_count_crlf_and_file_roots(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let at = |rel: &str, line, text: &str| gm(format!("{g}/{rel}"), line, text);
    let all = g35(&g);

    // 39.
    s.check(
        "39 grep(…, ../*.py)",
        &s.grep_b("needle", Some(&g), Some("../*.py"), None).await,
        &grep_error(format!("Path '{g}': exit code 2")),
    );
    s.check(
        "39 grep(…, sub/../*.py)",
        &s.grep_b("needle", Some(&g), Some("sub/../*.py"), None).await,
        &grep_error(format!("Path '{g}': exit code 2")),
    );
    s.check(
        "39 grep(x, G/missing)",
        &s.grep_a("x", Some(&format!("{g}/missing")), None, None).await,
        &hits(vec![], false),
    );

    // 40: max_count.
    let two = s.grep_a("needle", Some(&g), None, Some(2)).await;
    s.ensure(
        "40 max_count 2: two of the #35 matches, truncated, no error",
        two.error.is_none()
            && two.truncated
            && two.matches.as_ref().is_some_and(|m| m.len() == 2 && m.iter().all(|x| all.contains(x))),
        &two,
    );
    s.check(
        "40 max_count 11",
        &s.grep_a("needle", Some(&g), None, Some(11)).await,
        &hits(all.clone(), false),
    );
    s.check("40 max_count 0", &s.grep_a("needle", Some(&g), None, Some(0)).await, &hits(vec![], true));
    s.check("max_count 12", &s.grep_a("needle", Some(&g), None, Some(12)).await, &hits(all.clone(), false));
    // Route B keeps the first n in its (specified) order.
    s.check(
        "max_count 3, route B",
        &s.grep_b("needle", Some(&g), Some("**/*.py"), Some(3)).await,
        &hits(
            vec![at("a.py", 1, "needle one"), at("a.py", 3, "needle two"), at("cr.py", 2, "needle cr")],
            true,
        ),
    );
    s.check(
        "max_count 0 without a match",
        &s.grep_a("zzz", Some(&g), None, Some(0)).await,
        &hits(vec![], false),
    );

    // 41: CR stays on route A, not on route B.
    s.check(
        "41 grep(other, G/crlf.py)",
        &s.grep_b("other", Some(&format!("{g}/crlf.py")), None, None).await,
        &hits(vec![at("crlf.py", 2, "other\r")], false),
    );
    s.check(
        "41 grep(other, G, /crlf.py)",
        &s.grep_b("other", Some(&g), Some("/crlf.py"), None).await,
        &hits(vec![at("crlf.py", 2, "other")], false),
    );

    // 42: a file root is filtered on route A; route B ignores the glob.
    let a_py = format!("{g}/a.py");
    s.check(
        "42 grep(needle, G/a.py, *.txt)",
        &s.grep_b("needle", Some(&a_py), Some("*.txt"), None).await,
        &hits(vec![], false),
    );
    s.check(
        "42 grep(needle, G/a.py, zzz/*.txt)",
        &s.grep_b("needle", Some(&a_py), Some("zzz/*.txt"), None).await,
        &hits(vec![at("a.py", 1, "needle one"), at("a.py", 3, "needle two")], false),
    );
    s.check(
        "file root matching its filter",
        &s.grep_b("needle", Some(&a_py), Some("*.py"), None).await,
        &hits(vec![at("a.py", 1, "needle one"), at("a.py", 3, "needle two")], false),
    );

    // 43: a pattern with LF.
    let (d43, d) = s.fixture("g43");
    write_file(d43.join("f.txt"), b"abc\nxyz\nb\n");
    let f = |line, text: &str| gm(format!("{d}/f.txt"), line, text);
    s.check(
        "43 grep(b\\n, dir)",
        &s.grep_a("b\n", Some(&d), None, None).await,
        &hits(vec![f(1, "abc"), f(2, "xyz"), f(3, "b")], false),
    );
    s.check(
        "43 grep(b\\n, dir, /*.txt)",
        &s.grep_b("b\n", Some(&d), Some("/*.txt"), None).await,
        &hits(vec![f(3, "b")], false),
    );
    s.check(
        "empty pattern matches every line",
        &s.grep_a("", Some(&d), None, None).await,
        &hits(vec![f(1, "abc"), f(2, "xyz"), f(3, "b")], false),
    );
    s.finish();
}

pub async fn edge_grep_glob_hidden_files_git_and_classes(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let at = |rel: &str, line, text: &str| gm(format!("{g}/{rel}"), line, text);
    let all = g35(&g);

    // Route A: `*` includes dot-files; `.*` only them; classes on the basename.
    s.check("grep glob *", &s.grep_a("needle", Some(&g), Some("*"), None).await, &hits(all.clone(), false));
    s.check(
        "grep glob .*",
        &s.grep_a("needle", Some(&g), Some(".*"), None).await,
        &hits(vec![at(".hidden.py", 1, "needle hidden")], false),
    );
    let mut classes = vec![
        at("a.py", 1, "needle one"),
        at("a.py", 3, "needle two"),
        at("cr.py", 1, "first\rneedle cr\rlast"),
        at("crlf.py", 1, "needle crlf\r"),
        at("sub/b.py", 1, "xx needle"),
    ];
    classes.sort();
    s.check(
        "grep glob [a-c]*.py",
        &s.grep_a("needle", Some(&g), Some("[a-c]*.py"), None).await,
        &hits(classes, false),
    );
    s.check(
        "grep glob [!a-z]*",
        &s.grep_a("needle", Some(&g), Some("[!a-z]*"), None).await,
        &hits(vec![at(".hidden.py", 1, "needle hidden")], false),
    );
    s.check(
        "grep glob ?.py",
        &s.grep_a("needle", Some(&g), Some("?.py"), None).await,
        &hits(
            vec![
                at(".hdir/d.py", 1, "needle in hidden dir"),
                at("a.py", 1, "needle one"),
                at("a.py", 3, "needle two"),
                at("sub/b.py", 1, "xx needle"),
            ],
            false,
        ),
    );
    // A dot-dir root is searched; a nested `.git` under it is still excluded.
    s.check(
        "grep root G/.hdir",
        &s.grep_a("needle", Some(&format!("{g}/.hdir")), None, None).await,
        &hits(vec![at(".hdir/d.py", 1, "needle in hidden dir")], false),
    );
    s.check(
        "grep root G/sub: sub/.git excluded",
        &s.grep_a("needle", Some(&format!("{g}/sub")), None, None).await,
        &hits(vec![at("sub/b.py", 1, "xx needle"), at("sub/c.txt", 1, "needle txt")], false),
    );
    // Route B: hits under an excluded name are skipped; dot-names need a dot segment.
    s.check(
        "grep glob .git/*",
        &s.grep_b("needle", Some(&g), Some(".git/*"), None).await,
        &hits(vec![], false),
    );
    s.check(
        "grep glob .hdir/*.py",
        &s.grep_b("needle", Some(&g), Some(".hdir/*.py"), None).await,
        &hits(vec![at(".hdir/d.py", 1, "needle in hidden dir")], false),
    );
    s.check(
        "grep glob /.*.py",
        &s.grep_b("needle", Some(&g), Some("/.*.py"), None).await,
        &hits(vec![at(".hidden.py", 1, "needle hidden")], false),
    );

    // Glob: dot-dirs are walked (no exclude list), `**` never crosses a dot-component.
    s.check("glob config", &s.glob("config", Some(&g)).await, &found(&g, ".git/config"));
    s.check("glob .git/*", &s.glob(".git/*", Some(&g)).await, &found(&g, ".git/config"));
    s.check("glob **/config", &s.glob("**/config", Some(&g)).await, &found(&g, ""));
    s.check("glob x", &s.glob("x", Some(&g)).await, &found(&g, "sub/.git/x"));
    s.check("glob sub/**", &s.glob("sub/**", Some(&g)).await, &found(&g, "sub/b.py sub/c.txt"));
    s.check("glob **/.git/*", &s.glob("**/.git/*", Some(&g)).await, &found(&g, ".git/config sub/.git/x"));
    s.finish();
}

pub async fn edge_long_lines_in_grep(s: Suite) {
    let (dir, d) = s.fixture("long");
    let (a, b) = ("a".repeat(6000), format!("{}needle{}", "b".repeat(5000), "c".repeat(3000)));
    write_file(dir.join("l.txt"), format!("{a}\n{b}\n"));
    let want = hits(vec![gm(format!("{d}/l.txt"), 2, &b)], false);
    s.check("long line, route A", &s.grep_a("needle", Some(&d), None, None).await, &want);
    s.check("long line, route B", &s.grep_b("needle", Some(&d), Some("/l.txt"), None).await, &want);
    s.check(
        "long line, file root",
        &s.grep_b("needle", Some(&format!("{d}/l.txt")), None, None).await,
        &want,
    );
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// glob
// ---------------------------------------------------------------------------------------------------

pub async fn golden_44_to_47_glob_basename_and_path_rules(s: Suite) {
    let (dir, f) = s.fixture("f");
    build_f(&dir);
    let root = Some(f.as_str());

    // 44.
    s.check(
        "44 *.py",
        &s.glob("*.py", root).await,
        &found(&f, "a.py b.py link_in.py src/.secret/key.py src/app/util.py src/main.py"),
    );
    s.check(
        "44 **/*.py",
        &s.glob("**/*.py", root).await,
        &found(&f, "a.py b.py link_in.py src/app/util.py src/main.py"),
    );
    s.check("44 /*.py", &s.glob("/*.py", root).await, &found(&f, "a.py b.py link_in.py"));
    // 45.
    s.check("45 src/**", &s.glob("src/**", root).await, &found(&f, "src/app/util.py src/main.py"));
    s.check("45 src/", &s.glob("src/", root).await, &found(&f, ""));
    s.check("45 src//main.py", &s.glob("src//main.py", root).await, &found(&f, "src/main.py"));
    // 46.
    let star = ".github/workflows/ci.yml A.PY a.py b.py c.txt docs/readme.md file1.txt file10.txt file2.txt \
                fileA.txt link_in.py src/.secret/key.py src/app/util.py src/main.py x.yml";
    s.check("46 *", &s.glob("*", root).await, &found(&f, star));
    s.check("46 **", &s.glob("**", root).await, &found(&f, star));
    let star_slash = "A.PY a.py b.py c.txt docs/readme.md file1.txt file10.txt file2.txt fileA.txt link_in.py \
                      src/app/util.py src/main.py x.yml";
    s.check("46 **/", &s.glob("**/", root).await, &found(&f, star_slash));
    // 47.
    s.check("47 .*", &s.glob(".*", root).await, &found(&f, ".env .hidden.py src/.env"));
    s.check("47 .env", &s.glob(".env", root).await, &found(&f, ".env src/.env"));
    s.check("47 *.yml", &s.glob("*.yml", root).await, &found(&f, ".github/workflows/ci.yml x.yml"));
    s.check("47 **/*.yml", &s.glob("**/*.yml", root).await, &found(&f, "x.yml"));
    s.check(
        "47 .github/**/*.yml",
        &s.glob(".github/**/*.yml", root).await,
        &found(&f, ".github/workflows/ci.yml"),
    );
    s.finish();
}

pub async fn golden_48_to_50_glob_braces_classes_and_pattern_checks(s: Suite) {
    let (dir, f) = s.fixture("f");
    build_f(&dir);
    let root = Some(f.as_str());

    // 48.
    s.check("48 {a,b}.py", &s.glob("{a,b}.py", root).await, &found(&f, "a.py b.py"));
    s.check("48 {a,{b,c}}.*", &s.glob("{a,{b,c}}.*", root).await, &found(&f, "a.py b.py c.txt"));
    s.check("48 {a,b.py", &s.glob("{a,b.py", root).await, &found(&f, ""));
    s.check("48 file[1-2].txt", &s.glob("file[1-2].txt", root).await, &found(&f, "file1.txt file2.txt"));
    s.check("48 file?.txt", &s.glob("file?.txt", root).await, &found(&f, "file1.txt file2.txt fileA.txt"));
    s.check("48 [^a].py", &s.glob("[^a].py", root).await, &found(&f, "b.py"));
    s.check("48 [!a].py", &s.glob("[!a].py", root).await, &found(&f, "b.py"));
    s.check("48 *.PY", &s.glob("*.PY", root).await, &found(&f, "A.PY"));
    // More brace and class forms (§3.7).
    s.check("{a} stays literal", &s.glob("{a}.py", root).await, &found(&f, ""));
    s.check("{,a}.py (empty alternative)", &s.glob("{,a}.py", root).await, &found(&f, "a.py"));
    s.check("file{1,10}.txt", &s.glob("file{1,10}.txt", root).await, &found(&f, "file1.txt file10.txt"));
    s.check("unclosed [ is literal", &s.glob("file[1.txt", root).await, &found(&f, ""));
    s.check("[A-Z].PY", &s.glob("[A-Z].PY", root).await, &found(&f, "A.PY"));
    s.check("file[!0-9].txt", &s.glob("file[!0-9].txt", root).await, &found(&f, "fileA.txt"));
    s.check(
        "src/{main,app/util}.py",
        &s.glob("src/{main,app/util}.py", root).await,
        &found(&f, "src/app/util.py src/main.py"),
    );
    // 49.
    s.check(
        "49 *.{py,md}",
        &s.glob("*.{py,md}", root).await,
        &found(&f, "a.py b.py docs/readme.md link_in.py src/.secret/key.py src/app/util.py src/main.py"),
    );
    s.check("49 {src/*.py,*.md}", &s.glob("{src/*.py,*.md}", root).await, &found(&f, "src/main.py"));
    // 50.
    s.check(
        "50 ../*.py",
        &s.glob("../*.py", root).await,
        &glob_error(format!("Path '{f}': invalid_pattern")),
    );
    s.check(
        "50 x\\..\\y",
        &s.glob("x\\..\\y", root).await,
        &glob_error(format!("Path '{f}': invalid_pattern")),
    );
    s.check(
        "src/../a.py",
        &s.glob("src/../a.py", root).await,
        &glob_error(format!("Path '{f}': invalid_pattern")),
    );
    let alternatives =
        |n: usize| format!("a{{{}}}.py", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    s.check("50 1000 alternatives", &s.glob(&alternatives(1000), root).await, &found(&f, ""));
    s.check(
        "50 1001 alternatives",
        &s.glob(&alternatives(1001), root).await,
        &glob_error(format!("Path '{f}': pattern_too_broad")),
    );
    // The checks run in order: a missing root wins over a bad pattern.
    s.check(
        "root checked before the pattern",
        &s.glob("../*.py", Some(&format!("{f}/missing"))).await,
        &glob_error(format!("Path '{f}/missing': path_not_found")),
    );
    s.finish();
}

pub async fn golden_51_glob_roots(s: Suite) {
    let (dir, f) = s.fixture("f");
    build_f(&dir);

    s.check(
        "51 *.py under F/srclink",
        &s.glob("*.py", Some(&format!("{f}/srclink"))).await,
        &found(&format!("{f}/srclink"), ".secret/key.py app/util.py main.py"),
    );
    s.check(
        "51 F/missing",
        &s.glob("*.py", Some(&format!("{f}/missing"))).await,
        &glob_error(format!("Path '{f}/missing': path_not_found")),
    );
    s.check(
        "51 F/a.py",
        &s.glob("*.py", Some(&format!("{f}/a.py"))).await,
        &glob_error(format!("Path '{f}/a.py': not_a_directory")),
    );
    // 51 `srv/case/src` is searched as `/srv/case/src`: here, F without its leading `/`.
    let relative = f.trim_start_matches('/');
    s.check(
        "51 a root without a leading / gets one",
        &s.glob("*.py", Some(relative)).await,
        &found(&f, "a.py b.py link_in.py src/.secret/key.py src/app/util.py src/main.py"),
    );
    s.check(
        "51 a root without a leading /, missing",
        &s.glob("*.py", Some("srv/case/src-agentd-missing")).await,
        &glob_error("Path '/srv/case/src-agentd-missing': path_not_found".to_owned()),
    );
    // A trailing `/` on the root is trimmed from result paths, not from messages.
    s.check(
        "root with trailing /",
        &s.glob("/*.py", Some(&format!("{f}/"))).await,
        &found(&f, "a.py b.py link_in.py"),
    );
    s.finish();
}

pub async fn golden_52_glob_match_budget(s: Suite) {
    let (only, only_text) = s.fixture("g52a");
    let (plus, plus_text) = s.fixture("g52b");
    for i in 0..10_000 {
        let name = format!("m/f{i:05}.py");
        write_file(only.join(&name), b"");
        write_file(plus.join(&name), b"");
    }
    write_file(plus.join("n/z.txt"), b"");
    let rels: String = (0..10_000).map(|i| format!("m/f{i:05}.py ")).collect();

    s.check("52 10000 files only", &s.glob("*.py", Some(&only_text)).await, &found(&only_text, &rels));
    // Exactly 10000 matches followed by any other file still reports truncation (quirk). This
    // presumes the walk meets `m/` before `n/`, as the reference did.
    let got = s.glob("*.py", Some(&plus_text)).await;
    let want = GlobResult {
        truncated: true,
        truncation_reason: Some(TruncationReason::Budget),
        ..found(&plus_text, &rels)
    };
    s.check("52 10000 files plus n/z.txt", &got, &want);
    s.finish();
}

pub async fn golden_53_glob_unreadable_subtrees_as_root(s: Suite) {
    let (dir, t) = s.fixture("t");
    write_file(dir.join("open/a.py"), b"");
    std::fs::create_dir(dir.join("locked")).unwrap();
    write_file(dir.join("locked/b.py"), b"");
    set_mode(dir.join("locked"), 0o000);

    let got = s.glob("*.py", Some(&t)).await;
    let locked = s.glob("*.py", Some(&format!("{t}/locked"))).await;
    if is_root() {
        // Root reads mode-000 directories: nothing is unreadable (the reference's row is for non-root).
        s.check("53 (root) T", &got, &found(&t, "locked/b.py open/a.py"));
        s.check("53 (root) T/locked", &locked, &found(&format!("{t}/locked"), "b.py"));
    } else {
        let want = GlobResult {
            truncated: true,
            truncation_reason: Some(TruncationReason::Unreadable),
            ..found(&t, "open/a.py")
        };
        s.check("53 T", &got, &want);
        s.check("53 T/locked", &locked, &glob_error(format!("Path '{t}/locked': permission_denied")));
    }
    make_writable(&dir);
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// Odd paths: names with spaces, `:`, newlines and non-UTF-8 bytes; NUL in a path; symlinks
// ---------------------------------------------------------------------------------------------------

pub async fn edge_odd_file_names_through_every_verb(s: Suite) {
    let (dir, t) = s.fixture("names");
    let names = ["a b.txt", "c:d.txt", "e\nf.txt"];
    let setup = |d: &Path| {
        for (i, name) in names.iter().enumerate() {
            write_file(d.join(name), format!("needle {i}\n"));
        }
        write_file(d.join(OsStr::from_bytes(b"g\xffh.txt")), "needle 3\n");
    };
    setup(&dir);

    // ls: the UTF-8 names exactly; the non-UTF-8 one is implementation-defined (both must agree).
    let listed = s.ls(&t).await;
    let paths: Vec<String> = listed.entries.iter().flatten().map(|e| e.path.clone()).collect();
    s.ensure(
        "ls names: four entries, the UTF-8 ones verbatim",
        listed.error.is_none()
            && paths.len() == 4
            && names.iter().all(|n| paths.contains(&format!("{t}/{n}")))
            && listed.entries.iter().flatten().all(|e| !e.is_dir),
        &listed,
    );

    // read.
    for (i, name) in names.iter().enumerate() {
        let p = format!("{t}/{name}");
        s.check(
            format!("read {name:?}"),
            &s.read(&p, 0, 2000).await,
            &page(&format!("needle {i}"), Some(1), 1, 1, None),
        );
    }

    // grep, route A and B; glob.
    let got = s.grep_a("needle", Some(&t), None, None).await;
    let matches = got.matches.clone().unwrap_or_default();
    s.ensure(
        "grep names: the UTF-8 names verbatim, four matches",
        got.error.is_none()
            && matches.len() == 4
            && names
                .iter()
                .enumerate()
                .all(|(i, n)| matches.contains(&gm(format!("{t}/{n}"), 1, &format!("needle {i}")))),
        &got,
    );
    let got = s.grep_b("needle", Some(&t), Some("/*.txt"), None).await;
    let matches = got.matches.clone().unwrap_or_default();
    s.ensure(
        "grep names route B: the UTF-8 names verbatim, in order",
        got.error.is_none()
            && matches.len() >= 3
            && matches[..3]
                == names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| gm(format!("{t}/{n}"), 1, &format!("needle {i}")))
                    .collect::<Vec<_>>()[..],
        &got,
    );
    let got = s.glob("*.txt", Some(&t)).await;
    let matches: Vec<String> = got.matches.iter().flatten().map(|m| m.path.clone()).collect();
    s.ensure(
        "glob names: the UTF-8 names verbatim, sorted first",
        got.error.is_none()
            && !got.truncated
            && matches.len() >= 3
            && matches[..3] == names.iter().map(|n| format!("{t}/{n}")).collect::<Vec<_>>()[..],
        &got,
    );
    let got = s.glob("*:*", Some(&t)).await;
    s.check("glob *:*", &got, &found(&t, "c:d.txt"));

    // write, edit, delete.
    let new = format!("{t}/new file: x\ny.txt");
    let got = s.mutate(&dir, setup, &[write_req(&new, "w\n")]).await;
    s.check("write an odd name", &as_write(&got[0]), &written(&new));
    s.check(
        "write an odd name: content",
        &std::fs::read(dir.join("new file: x\ny.txt")).ok(),
        &Some(b"w\n".to_vec()),
    );
    for name in names {
        let p = format!("{t}/{name}");
        let got = s.mutate(&dir, setup, &[edit_req(&p, "needle", "pin", false), delete_req(&p)]).await;
        s.check(format!("edit {name:?}"), &as_edit(&got[0]), &edited(&p, 1));
        s.check(format!("delete {name:?}"), &as_delete(&got[1]), &deleted(&p));
        s.ensure(format!("{name:?} gone"), !dir.join(name).exists(), "still there");
    }
    // A directory holding a non-UTF-8 name is removed whole.
    let got = s.mutate(&dir, setup, &[delete_req(&t)]).await;
    s.check("delete a tree with a non-UTF-8 name", &as_delete(&got[0]), &deleted(&t));
    s.ensure("tree gone", !dir.exists(), "still there");
    std::fs::create_dir_all(&dir).unwrap();
    s.finish();
}

pub async fn edge_nul_in_a_path(s: Suite) {
    let (dir, t) = s.fixture("t");
    write_file(dir.join("a"), b"a");
    let p = format!("{t}/a\0b");

    // Each verb must refuse (an `invalid_path` error, or its own "not found") and touch nothing.
    let acceptable = |error: &Option<String>, not_found: &str| {
        error.as_deref().is_some_and(|e| e.contains("invalid_path") || e == not_found)
    };
    let got = s.ls(&p).await;
    s.ensure(
        "ls NUL",
        got.entries.is_none() && acceptable(&got.error, &format!("Path '{p}': path_not_found")),
        &got,
    );
    let got = s.read(&p, 0, 2000).await;
    s.ensure(
        "read NUL",
        got == ReadResult::error(got.error.clone().unwrap_or_default())
            && acceptable(&got.error, &format!("File '{p}': file_not_found")),
        &got,
    );
    let got =
        as_write(&s.mutate(&dir, |d: &Path| write_file(d.join("a"), b"a"), &[write_req(&p, "x")]).await[0]);
    s.ensure("write NUL", got.path.is_none() && acceptable(&got.error, "-"), &got);
    let got = as_edit(
        &s.mutate(&dir, |d: &Path| write_file(d.join("a"), b"a"), &[edit_req(&p, "a", "b", false)]).await[0],
    );
    s.ensure(
        "edit NUL",
        got.path.is_none() && acceptable(&got.error, &format!("Error: File '{p}' not found")),
        &got,
    );
    let got =
        as_delete(&s.mutate(&dir, |d: &Path| write_file(d.join("a"), b"a"), &[delete_req(&p)]).await[0]);
    s.ensure(
        "delete NUL",
        got.path.is_none() && acceptable(&got.error, &format!("Error: '{p}' not found")),
        &got,
    );
    s.ensure("T/a untouched", std::fs::read(dir.join("a")).ok() == Some(b"a".to_vec()), "changed");
    // grep swallows a missing root (`[]`, no error); an `invalid_path` error is also acceptable.
    let got = s.grep_a("a", Some(&p), None, None).await;
    s.ensure(
        "grep NUL root",
        got == hits(vec![], false) || (got.matches.is_none() && acceptable(&got.error, "-")),
        &got,
    );
    let got = s.glob("*", Some(&p)).await;
    s.ensure(
        "glob NUL root",
        got.matches.is_none() && acceptable(&got.error, &format!("Path '{p}': path_not_found")),
        &got,
    );
    s.finish();
}

pub async fn edge_symlinks_in_ls_and_delete(s: Suite) {
    let (dir, t) = s.fixture("t");
    write_file(dir.join("sub/x"), b"x");
    std::fs::create_dir(dir.join("sub/inner")).unwrap();
    write_file(dir.join("file"), b"f");
    symlink("sub", dir.join("ln")).unwrap();
    symlink("file", dir.join("lnf")).unwrap();
    symlink("nowhere", dir.join("bad")).unwrap();
    symlink(dir.join("ln"), dir.join("ln2")).unwrap();

    // A link given as the path is followed (through two links too); below it links stay links.
    let want = ls_ok(vec![(format!("{t}/ln/x"), false), (format!("{t}/ln/inner"), true)]);
    s.check("ls(link to dir)", &ls_sorted(s.ls(&format!("{t}/ln")).await), &want);
    let want = ls_ok(vec![(format!("{t}/ln2/x"), false), (format!("{t}/ln2/inner"), true)]);
    s.check("ls(link to link to dir)", &ls_sorted(s.ls(&format!("{t}/ln2")).await), &want);
    s.check(
        "ls(link to file)",
        &s.ls(&format!("{t}/lnf")).await,
        &ls_error(format!("Path '{t}/lnf': not_a_directory")),
    );
    s.check(
        "ls(dangling link)",
        &s.ls(&format!("{t}/bad")).await,
        &ls_error(format!("Path '{t}/bad': path_not_found")),
    );
    s.check(
        "ls(T/file/)",
        &s.ls(&format!("{t}/file/")).await,
        &ls_error(format!("Path '{t}/file/': not_a_directory")),
    );

    // delete removes links, never their targets.
    let setup = |d: &Path| {
        write_file(d.join("sub/x"), b"x");
        write_file(d.join("file"), b"f");
        symlink("sub", d.join("ln")).unwrap();
        symlink("file", d.join("lnf")).unwrap();
    };
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/ln")), delete_req(&format!("{t}/lnf"))]).await;
    s.check("delete(link to dir)", &as_delete(&got[0]), &deleted(&format!("{t}/ln")));
    s.check("delete(link to file)", &as_delete(&got[1]), &deleted(&format!("{t}/lnf")));
    s.check(
        "targets intact",
        &(std::fs::read(dir.join("sub/x")).ok(), std::fs::read(dir.join("file")).ok()),
        &(Some(b"x".to_vec()), Some(b"f".to_vec())),
    );
    // Through a link to a directory, an entry of the target is removed.
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/ln/x"))]).await;
    s.check("delete(T/ln/x)", &as_delete(&got[0]), &deleted(&format!("{t}/ln/x")));
    s.ensure("T/sub/x removed, link kept", !dir.join("sub/x").exists() && dir.join("ln").exists(), "state");
    s.finish();
}

// ---------------------------------------------------------------------------------------------------
// Offload and the derived framing
// ---------------------------------------------------------------------------------------------------

fn offload(
    offloaded: bool,
    exit_code: i32,
    truncated: bool,
    marker: bool,
    output: &str,
) -> ExecuteOffloadResult {
    ExecuteOffloadResult {
        offloaded,
        response: ExecuteResponse { output: output.to_owned(), exit_code: Some(exit_code), truncated },
        preview_has_truncation_marker: marker,
    }
}

pub async fn derived_framing_survives_heredoc_lookalikes_and_forged_meta(s: Suite) {
    let (_, cap) = s.fixture("cap");

    // Text that looks like the framing: the delimiter prefix, heredoc ends, lone quotes.
    let command = "cat <<'EOF'\nAGENTD_CMD_00000000000000000000__\n'\nEOF\n\
                   printf '%s\\n' \"AGENTD_CMD_ and 'quotes' and EOF\"\necho EOF\necho \"'\"";
    let want_output = "AGENTD_CMD_00000000000000000000__\n'\nAGENTD_CMD_ and 'quotes' and EOF\nEOF\n'\n";
    let want = offload(false, 0, false, false, want_output);
    let derived = s
        .derived
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/d1"), 10_000))
        .await
        .unwrap();
    s.check("framing: derived", &derived, &want);
    let native = s
        .native
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/n1"), 10_000))
        .await
        .unwrap();
    s.check("framing: native vs derived", &native, &derived);

    // A forged meta line, then exit 3: the result is what was printed.
    let forged = "__AGENTD_META_0123456789abcdef0123__ 0 1 0 5";
    let command = format!("printf '%s\\n' '{forged}'; exit 3");
    let want = offload(false, 3, false, false, &format!("{forged}\n"));
    let derived = s
        .derived
        .execute_with_offload(&agentd_host::OffloadRequest::new(&command, format!("{cap}/d2"), 10_000))
        .await
        .unwrap();
    s.check("forged meta: derived", &derived, &want);
    let native = s
        .native
        .execute_with_offload(&agentd_host::OffloadRequest::new(&command, format!("{cap}/n2"), 10_000))
        .await
        .unwrap();
    s.check("forged meta: native vs derived", &native, &derived);
    s.ensure(
        "no capture files kept",
        !Path::new(&format!("{cap}/d2")).exists() && !Path::new(&format!("{cap}/n2")).exists(),
        "kept",
    );
    s.finish();
}

pub async fn golden_55_offload_head_tail_preview_on_both_paths(s: Suite) {
    let (dir, cap) = s.fixture("cap");
    let command = "seq 1 100; exit 7";
    let want =
        offload(true, 7, false, true, "1\n2\n3\n4\n5\n... [90 lines truncated] ...\n96\n97\n98\n99\n100\n");
    let native = s
        .native
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/native"), 50))
        .await
        .unwrap();
    let derived = s
        .derived
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/derived"), 50))
        .await
        .unwrap();
    s.check("55 native", &native, &want);
    s.check("55 native vs derived", &native, &derived);
    let full: String = (1..=100).map(|i| format!("{i}\n")).collect();
    for name in ["native", "derived"] {
        s.check(
            format!("55 {name} capture file kept"),
            &std::fs::read_to_string(dir.join(name)).ok(),
            &Some(full.clone()),
        );
        s.ensure(
            format!("55 {name} no .ec sidecar"),
            !dir.join(format!("{name}.ec")).exists(),
            "sidecar kept",
        );
    }
    s.finish();
}

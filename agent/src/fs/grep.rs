//! `grep` (contract §3.6): lines holding a literal, case-sensitive pattern under a root.
//!
//! - Route A (no glob, or one without `/`): a parallel walk of everything but `.git` directories and
//!   symlinks, basename filter, LF-only lines ([`literal`]). Order across files is unspecified by the
//!   contract; results are sorted by path and line so they are reproducible.
//! - Route B (a glob with `/`): Python-glob hits under the root ([`pyglob`]), searched in sorted order
//!   with universal newlines ([`universal`]), files in parallel but reported in order.
//!
//! File-system failures are swallowed (the contract's quirk): unreadable files and roots give nothing.
//!
//! The result is bounded by the reply's byte budget (`MAX_REPLY_BYTES`): each match is charged its
//! JSON size, and the first that does not fit ends the search with `truncated`, as `max_count` does.
//! A line too long to fit is never held: the searchers only find out whether it matches (then the
//! result is truncated too), so memory does not grow with line length.

mod literal;
mod pyglob;
mod universal;

use std::cell::Cell;
use std::ffi::{CStr, CString, OsStr};
use std::num::NonZero;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

use agentd_protocol::fs::{GrepMatch, GrepResult};
use agentd_protocol::permission::Operation;
use nix::fcntl::OFlag;

use agentd_protocol::limits::json_escaped_len;

use crate::cancel::Cancel;
use crate::fs::budget::{Budget, LIST_BUDGET, digits};
use crate::fs::glob::fnmatch::{GREP_FILTER, Pattern};
use crate::guard;

use crate::root::{self, Kind, Node, ResolveError, Workspace};

/// What a match adds to the reply besides its path, line number and text.
const RECORD: &str = r#"{"path":"","line":,"text":""},"#;

/// Matches found in one file (shown as `path`) are charged to the reply's budget at their JSON size.
pub(super) struct Account<'a> {
    budget: &'a Budget,
    path: &'a str,
    path_cost: usize,
}

impl<'a> Account<'a> {
    fn new(budget: &'a Budget, path: &'a str) -> Self {
        Self { budget, path, path_cost: json_escaped_len(path) }
    }

    /// Adds the match `text` on `line` to `found` if it fits; `false` when it does not (the
    /// result is truncated).
    pub(super) fn push(&self, found: &mut Vec<GrepMatch>, line: u64, text: String) -> bool {
        let fits = self.take(line, &text);
        if fits {
            found.push(GrepMatch { path: self.path.to_owned(), line, text });
        }
        fits
    }

    fn fixed(&self, line: u64) -> usize {
        RECORD.len() + self.path_cost + digits(line)
    }

    /// Charges the match `text` on `line`; `false` when it does not fit (the result is truncated).
    fn take(&self, line: u64, text: &str) -> bool {
        self.budget.take(self.fixed(line) + json_escaped_len(text))
    }

    /// Longest text a match on `line` could still have.
    pub(super) fn text_room(&self, line: u64) -> usize {
        self.budget.left().saturating_sub(self.fixed(line))
    }

    /// A match that cannot be shown was found: the result is truncated.
    pub(super) fn refuse(&self) {
        self.budget.refuse();
    }

    pub(super) fn spent(&self) -> bool {
        self.budget.spent()
    }
}

/// One search: the reply's budget, whether it may (and then did) run on several threads, and the
/// request's token, which every thread of the search polls.
struct Pass<'a> {
    budget: Budget,
    parallel: Cell<bool>,
    cancel: &'a Cancel,
}

/// Directory names route A never enters and route B never reports from (below the root).
const EXCLUDED: &str = ".git";

/// Lines containing the literal `pattern` under `path` (default `.`), resolved through the workspace.
pub fn grep(
    pattern: &str,
    path: Option<&str>,
    glob: Option<&str>,
    max_count: Option<i64>,
    ws: &Workspace,
    cancel: &Cancel,
) -> GrepResult {
    grep_within(pattern, path, glob, max_count, ws, LIST_BUDGET, cancel)
}

/// [`grep`] with `bytes` for the matches' JSON records.
fn grep_within(
    pattern: &str,
    path: Option<&str>,
    glob: Option<&str>,
    max_count: Option<i64>,
    ws: &Workspace,
    bytes: usize,
    cancel: &Cancel,
) -> GrepResult {
    // Python's `path or "."`: an empty path is the default too.
    let root = path.filter(|p| !p.is_empty()).unwrap_or(".");
    // The root is followed; a missing or unreadable one gives nothing.
    let fs_root = match ws.node(root, true) {
        Ok(node) => node,
        Err(ResolveError::Escape) => {
            return GrepResult {
                error: Some(format!("Path '{root}': invalid_path")),
                matches: None,
                truncated: false,
            };
        }
        Err(ResolveError::Io(_)) => None,
    };
    let refusal = fs_root.as_ref().and_then(|n| guard::refusal_of(ws, Operation::Read, root, n));
    if let Some(refusal) = refusal {
        return GrepResult { error: Some(refusal), matches: None, truncated: false };
    }
    // A negative count is unspecified; it is read as 0, like `read`'s negative limit.
    let limit = max_count.map(|n| usize::try_from(n).unwrap_or(0));
    // Matches stop at the reply's budget. Both routes search files in parallel; when the budget ran
    // out, which files got in first depended on thread timing, so the search is redone by one
    // thread in result order: the kept matches are then the first that fit, run after run.
    let mut parallel = true;
    let (mut matches, spent) = loop {
        let pass = Pass { budget: Budget::new(bytes), parallel: Cell::new(parallel), cancel };
        let matches = match glob.filter(|g| !g.is_empty()) {
            Some(glob) if glob.contains('/') => {
                match route_b(pattern, root, fs_root.as_ref(), glob, limit, ws, &pass) {
                    Ok(matches) => matches,
                    Err(error) => return GrepResult { error: Some(error), matches: None, truncated: false },
                }
            }
            filter => route_a(pattern, root, fs_root.as_ref(), filter, limit, ws, &pass),
        };
        if !pass.budget.spent() || !pass.parallel.get() || cancel.is_cancelled() {
            break (matches, pass.budget.spent());
        }
        parallel = false;
    };
    let truncated = spent || limit.is_some_and(|limit| matches.len() > limit);
    if let Some(limit) = limit {
        matches.truncate(limit);
    }
    GrepResult { error: None, matches: Some(matches), truncated }
}

/// `root` + `/` + `rel`, without doubling a trailing `/` of the root.
fn shown(root: &str, rel: &str) -> String {
    if root.ends_with('/') { format!("{root}{rel}") } else { format!("{root}/{rel}") }
}

fn workers() -> usize {
    thread::available_parallelism().map_or(2, NonZero::get).clamp(2, 4)
}

/// Runs `work` on `n` threads, the calling one among them. Each is a worker loop that takes what is
/// left, so a thread the system refuses (agentd's cgroup or the machine out of tasks, a fork bomb
/// beside it) leaves its share to the others: never a panic, as `Scope::spawn` would.
fn on_threads(n: usize, work: impl Fn() + Sync) {
    thread::scope(|scope| {
        for _ in 1..n {
            if thread::Builder::new().spawn_scoped(scope, &work).is_err() {
                break;
            }
        }
        work();
    });
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn route_a(
    pattern: &str,
    root: &str,
    fs_root: Option<&Node>,
    filter: Option<&str>,
    limit: Option<usize>,
    ws: &Workspace,
    pass: &Pass<'_>,
) -> Vec<GrepMatch> {
    let (budget, parallel, cancel) = (&pass.budget, &pass.parallel, pass.cancel);
    let matcher = literal::LineMatcher::new(pattern);
    let filter = filter.map(|glob| Pattern::new(glob, GREP_FILTER));
    // Set again below when the walk does run on more than one thread.
    let allowed = parallel.replace(false);
    let Some(fs_root) = fs_root else { return Vec::new() };
    if fs_root.is_file() {
        let name = Path::new(root).file_name().map_or_else(|| root.into(), OsStr::to_string_lossy);
        if filter.as_ref().is_some_and(|f| !f.is_match(&name)) {
            return Vec::new();
        }
        let Ok(file) = fs_root.open(OFlag::O_RDONLY) else { return Vec::new() };
        return matcher.search_file(file, &Account::new(budget, root), cancel).unwrap_or_default();
    }
    if !fs_root.is_dir() {
        return Vec::new();
    }
    let Ok(top) = fs_root.open_dir() else { return Vec::new() };
    let walker = Walker {
        matcher: &matcher,
        filter: filter.as_ref(),
        root,
        limit,
        budget,
        cancel,
        below: guard::Below::new(ws, fs_root.location()),
        queue: Mutex::new(Queue {
            items: vec![Item::Dir(Arc::new(top), c".".to_owned(), String::new())],
            busy: 0,
        }),
        ready: Condvar::new(),
        found: Mutex::new(Vec::new()),
        held: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    };
    // With a limit, one walker in sorted order: which matches are "the first n" must not depend on
    // thread timing (the native and derived paths must agree, run after run).
    let workers = if limit.is_some() || !allowed { 1 } else { workers() };
    parallel.set(workers > 1);
    on_threads(workers, || walker.work());
    let mut found = walker.found.into_inner().unwrap_or_else(PoisonError::into_inner);
    found.sort_unstable();
    found
}

/// Work for route A's walkers: directories to list and files to search, each as its parent
/// directory's fd and its name there, with its path relative to the root. Everything is opened from
/// the parent's fd without following links: a component swapped for a link mid-walk is skipped.
enum Item {
    Dir(Arc<OwnedFd>, CString, String),
    File(Arc<OwnedFd>, CString, String),
}

impl Item {
    fn sort_key(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Item::Dir(_, _, rel) => format!("{rel}/").into(),
            Item::File(_, _, rel) => rel.as_str().into(),
        }
    }
}

struct Queue {
    items: Vec<Item>,
    /// Items taken and not finished: the walk is over when none are queued and none are busy.
    busy: usize,
}

struct Walker<'a> {
    matcher: &'a literal::LineMatcher,
    filter: Option<&'a Pattern>,
    root: &'a str,
    limit: Option<usize>,
    budget: &'a Budget,
    /// The request's token, shared by every walker thread.
    cancel: &'a Cancel,
    /// What the permission rules hide below the root.
    below: guard::Below<'a>,
    queue: Mutex<Queue>,
    ready: Condvar,
    found: Mutex<Vec<GrepMatch>>,
    held: AtomicUsize,
    /// Set once more than `limit` matches are held or the budget is spent: the rest of the walk
    /// cannot change the result's size or truncation.
    stop: AtomicBool,
}

impl Walker<'_> {
    fn work(&self) {
        while let Some(item) = self.next() {
            match item {
                Item::Dir(parent, name, rel) => self.list(&parent, &name, &rel),
                Item::File(parent, name, rel) => self.search(&parent, &name, &rel),
            }
            let mut queue = lock(&self.queue);
            queue.busy -= 1;
            if queue.busy == 0 && queue.items.is_empty() {
                self.ready.notify_all();
            }
        }
    }

    fn next(&self) -> Option<Item> {
        let mut queue = lock(&self.queue);
        loop {
            if self.stop.load(Ordering::Relaxed) || self.cancel.is_cancelled() {
                return None;
            }
            if let Some(item) = queue.items.pop() {
                queue.busy += 1;
                return Some(item);
            }
            if queue.busy == 0 {
                return None;
            }
            queue = self.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Queues the subdirectories (but `.git`) and the regular files (that pass the filter) of the
    /// directory `name` in `parent`; symlinks are not followed, so they are neither.
    fn list(&self, parent: &OwnedFd, name: &CStr, rel: &str) {
        let Ok(dir) = root::open_child_dir(parent.as_fd(), name) else { return };
        let Ok(children) = root::list(&dir) else { return };
        let dir = Arc::new(dir);
        let mut items = Vec::new();
        for child in children {
            let name = child.name_lossy();
            let child_rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            match child.kind {
                Some(Kind::Dir) if name != EXCLUDED => {
                    items.push(Item::Dir(Arc::clone(&dir), child.name, child_rel));
                }
                Some(Kind::File) if self.filter.is_none_or(|f| f.is_match(&name)) => {
                    items.push(Item::File(Arc::clone(&dir), child.name, child_rel));
                }
                _ => {}
            }
        }
        if !items.is_empty() {
            // The queue is a stack: push in descending order so the smallest path comes off first,
            // making a single walker visit files in the order the results are sorted in (a
            // directory sorts as its name plus `/`, as its files' paths do).
            items.sort_unstable_by(|a, b| b.sort_key().cmp(&a.sort_key()));
            lock(&self.queue).items.extend(items);
            self.ready.notify_all();
        }
    }

    fn search(&self, parent: &OwnedFd, name: &CStr, rel: &str) {
        let path = shown(self.root, rel);
        if self.below.hides(rel, &path, None) {
            return;
        }
        let Ok(file) = root::open_child_file(parent.as_fd(), name) else { return };
        if nix::sys::stat::fstat(&file).is_ok_and(|stat| self.below.hides_linked(&stat, rel)) {
            return;
        }
        let Some(lines) = self.matcher.search_file(file, &Account::new(self.budget, &path), self.cancel)
        else {
            return;
        };
        let count = lines.len();
        if count > 0 {
            lock(&self.found).extend(lines);
        }
        let held = self.held.fetch_add(count, Ordering::Relaxed) + count;
        if self.limit.is_some_and(|limit| held > limit) || self.budget.spent() {
            self.stop.store(true, Ordering::Relaxed);
            // Under the lock, so no worker is between its check of `stop` and its wait.
            let _queue = lock(&self.queue);
            self.ready.notify_all();
        }
    }
}

fn route_b(
    pattern: &str,
    root: &str,
    fs_root: Option<&Node>,
    glob: &str,
    limit: Option<usize>,
    ws: &Workspace,
    pass: &Pass<'_>,
) -> Result<Vec<GrepMatch>, String> {
    let (budget, parallel, cancel) = (&pass.budget, &pass.parallel, pass.cancel);
    let matcher = universal::LineMatcher::new(pattern);
    // Set again by the search when it does run on more than one thread.
    let allowed = parallel.replace(false);
    let Some(fs_root) = fs_root else { return Ok(Vec::new()) };
    if !fs_root.is_dir() {
        // A file is searched alone, the glob ignored; anything else gives nothing.
        if !fs_root.is_file() {
            return Ok(Vec::new());
        }
        let Ok(file) = fs_root.open(OFlag::O_RDONLY) else { return Ok(Vec::new()) };
        return Ok(matcher.search_file(file, &Account::new(budget, root), cancel).unwrap_or_default());
    }
    let glob = glob.trim_start_matches('/');
    if glob.split(['/', '\\']).any(|segment| segment == "..") {
        // What the reference's helper reports when it refuses such a glob.
        return Err(format!("Path '{root}': exit code 2"));
    }
    // The expansion looks through the workspace's resolver from the root's fd, and every hit is
    // resolved again the same way: what is read is always inside the workspace and below the root.
    let mut hits = pyglob::expand(ws, fs_root, glob, cancel);
    let below = guard::Below::new(ws, fs_root.location());
    hits.sort_unstable();
    let files: Vec<(Vec<u8>, String)> = hits
        .iter()
        .filter(|hit| {
            let mut dirs = hit.split(|&b| b == b'/');
            dirs.next_back();
            !dirs.any(|dir| dir == EXCLUDED.as_bytes())
        })
        .filter_map(|hit| {
            let node = ws.node_in(fs_root, hit, true).ok()??;
            let rel = node.location().strip_prefix(fs_root.location()).ok()?;
            let shown = shown(root, &rel.to_string_lossy());
            let hidden = below.hides(&rel.to_string_lossy(), &shown, Some(node.location()));
            (!rel.as_os_str().is_empty() && node.is_file() && !hidden)
                .then(|| (rel.as_os_str().as_bytes().to_vec(), shown))
        })
        .collect();
    parallel.set(allowed);
    Ok(search_in_order(&files, &matcher, limit, ws, fs_root, &below, pass))
}

/// Searches `files` (path below `root`, resolved again through the workspace; shown path) in
/// parallel and returns their matches in the order of `files`, stopping once the finished prefix
/// holds more than `limit` matches, or once the budget is spent.
fn search_in_order(
    files: &[(Vec<u8>, String)],
    matcher: &universal::LineMatcher,
    limit: Option<usize>,
    ws: &Workspace,
    root: &Node,
    below: &guard::Below<'_>,
    pass: &Pass<'_>,
) -> Vec<GrepMatch> {
    let (budget, parallel, cancel) = (&pass.budget, &pass.parallel, pass.cancel);
    struct Slots {
        done: Vec<Option<Vec<GrepMatch>>>,
        /// `done[..prefix]` are all finished and hold `held` matches.
        prefix: usize,
        held: usize,
    }
    let slots = Mutex::new(Slots { done: vec![None; files.len()], prefix: 0, held: 0 });
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let work = || {
        while !stop.load(Ordering::Relaxed) && !cancel.is_cancelled() {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((rel, shown)) = files.get(i) else { break };
            // Resolved again (links followed): what is read is checked again.
            let node = ws.node_in(root, rel, true).ok().flatten().filter(|n| {
                let rel = String::from_utf8_lossy(rel);
                n.is_file()
                    && !below.hides(&rel, shown, Some(n.location()))
                    && !below.hides_linked(n.stat(), &rel)
            });
            let file = node.and_then(|n| n.open(OFlag::O_RDONLY).ok());
            let account = Account::new(budget, shown);
            let found = file.and_then(|f| matcher.search_file(f, &account, cancel)).unwrap_or_default();
            let mut slots = lock(&slots);
            slots.done[i] = Some(found);
            while let Some(Some(found)) = slots.done.get(slots.prefix) {
                slots.held += found.len();
                slots.prefix += 1;
            }
            if limit.is_some_and(|limit| slots.held > limit) || budget.spent() {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    let threads = if parallel.get() { workers().min(files.len()) } else { 1 };
    parallel.set(threads > 1);
    if threads <= 1 {
        work();
    } else {
        on_threads(threads, work);
    }
    let slots = slots.into_inner().unwrap_or_else(PoisonError::into_inner);
    slots.done.into_iter().take(slots.prefix).flatten().flatten().collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    /// The grep tree `G` of §5.
    fn tree_g() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let files: [(&str, &[u8]); 12] = [
            ("a.py", b"needle one\nno\nneedle two\n"),
            ("sub/b.py", b"xx needle\n"),
            ("sub/c.txt", b"needle txt\n"),
            (".hidden.py", b"needle hidden\n"),
            (".hdir/d.py", b"needle in hidden dir\n"),
            (".git/config", b"needle in git\n"),
            ("sub/.git/x", b"needle in nested git\n"),
            ("we:ird.py", b"needle colon\n"),
            ("crlf.py", b"needle crlf\r\nother\r\n"),
            ("cr.py", b"first\rneedle cr\rlast"),
            ("src/app/main.py", b"needle main\n"),
            ("src/top.py", b"needle top\n"),
        ];
        for (name, content) in files {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
        dir
    }

    fn root_of(dir: &tempfile::TempDir) -> String {
        dir.path().to_str().unwrap().to_owned()
    }

    /// (path relative to `root/`, line, text) in result order.
    fn rel(root: &str, result: GrepResult) -> Vec<(String, u64, String)> {
        assert_eq!(result.error, None);
        let prefix = format!("{root}/");
        result
            .matches
            .unwrap()
            .into_iter()
            .map(|m| (m.path.strip_prefix(&prefix).unwrap().to_owned(), m.line, m.text))
            .collect()
    }

    fn set(root: &str, result: GrepResult) -> BTreeSet<(String, u64, String)> {
        rel(root, result).into_iter().collect()
    }

    fn expect(rows: &[(&str, u64, &str)]) -> Vec<(String, u64, String)> {
        rows.iter().map(|&(p, l, t)| (p.to_owned(), l, t.to_owned())).collect()
    }

    const CASE_35: [(&str, u64, &str); 11] = [
        (".hdir/d.py", 1, "needle in hidden dir"),
        (".hidden.py", 1, "needle hidden"),
        ("a.py", 1, "needle one"),
        ("a.py", 3, "needle two"),
        ("cr.py", 1, "first\rneedle cr\rlast"),
        ("crlf.py", 1, "needle crlf\r"),
        ("src/app/main.py", 1, "needle main"),
        ("src/top.py", 1, "needle top"),
        ("sub/b.py", 1, "xx needle"),
        ("sub/c.txt", 1, "needle txt"),
        ("we:ird.py", 1, "needle colon"),
    ];

    fn grep_at(pattern: &str, root: &str, glob: Option<&str>) -> GrepResult {
        grep(pattern, Some(root), glob, None, &Workspace::open("/".into()), &Cancel::default())
    }

    #[test]
    fn case_35_walks_everything_but_git() {
        let g = tree_g();
        let root = root_of(&g);
        let result = grep_at("needle", &root, None);
        assert!(!result.truncated);
        assert_eq!(set(&root, result), expect(&CASE_35).into_iter().collect());
    }

    #[test]
    fn case_35_default_root_is_dot_of_base() {
        let g = tree_g();
        let result =
            grep("needle two", None, None, None, &Workspace::open(g.path().into()), &Cancel::default());
        assert_eq!(
            result.matches.unwrap(),
            vec![GrepMatch { path: "./a.py".into(), line: 3, text: "needle two".into() }]
        );
        let result =
            grep("needle two", Some(""), None, None, &Workspace::open(g.path().into()), &Cancel::default());
        assert_eq!(result.matches.unwrap()[0].path, "./a.py");
        let result =
            grep("xx", Some("sub"), None, None, &Workspace::open(g.path().into()), &Cancel::default());
        assert_eq!(result.matches.unwrap()[0].path, "sub/b.py");
        let result =
            grep("xx", Some("sub/"), None, None, &Workspace::open(g.path().into()), &Cancel::default());
        assert_eq!(result.matches.unwrap()[0].path, "sub/b.py");
    }

    #[test]
    fn case_36_basename_glob_includes_dot_files() {
        let g = tree_g();
        let root = root_of(&g);
        let expected = CASE_35.iter().filter(|r| r.0 != "sub/c.txt").copied().collect::<Vec<_>>();
        assert_eq!(
            set(&root, grep_at("needle", &root, Some("*.py"))),
            expect(&expected).into_iter().collect()
        );
    }

    #[test]
    fn case_37_path_glob_is_ordered_python_glob() {
        let g = tree_g();
        let root = root_of(&g);
        let result = grep_at("needle", &root, Some("**/*.py"));
        assert!(!result.truncated);
        assert_eq!(
            rel(&root, result),
            expect(&[
                ("a.py", 1, "needle one"),
                ("a.py", 3, "needle two"),
                ("cr.py", 2, "needle cr"),
                ("crlf.py", 1, "needle crlf"),
                ("src/app/main.py", 1, "needle main"),
                ("src/top.py", 1, "needle top"),
                ("sub/b.py", 1, "xx needle"),
                ("we:ird.py", 1, "needle colon"),
            ])
        );
    }

    #[test]
    fn case_38_anchored_globs_git_root_and_literal_braces() {
        let g = tree_g();
        let root = root_of(&g);
        let lines = |r: GrepResult| rel(&root, r).into_iter().map(|(p, l, _)| (p, l)).collect::<Vec<_>>();
        let pl = |rows: &[(&str, u64)]| rows.iter().map(|&(p, l)| (p.to_owned(), l)).collect::<Vec<_>>();
        assert_eq!(
            lines(grep_at("needle", &root, Some("/*.py"))),
            pl(&[("a.py", 1), ("a.py", 3), ("cr.py", 2), ("crlf.py", 1), ("we:ird.py", 1)])
        );
        assert_eq!(
            lines(grep_at("needle", &root, Some("src/**/*.py"))),
            pl(&[("src/app/main.py", 1), ("src/top.py", 1)])
        );
        let git = format!("{root}/.git");
        let result = grep_at("needle", &git, None);
        assert_eq!(
            result.matches.unwrap(),
            vec![GrepMatch { path: format!("{git}/config"), line: 1, text: "needle in git".into() }]
        );
        let result = grep_at("needle", &root, Some("*.{py,txt}"));
        assert_eq!((result.error, result.matches, result.truncated), (None, Some(Vec::new()), false));
    }

    #[test]
    fn case_39_parent_glob_and_missing_root() {
        let g = tree_g();
        let root = root_of(&g);
        let result = grep_at("needle", &root, Some("../*.py"));
        assert_eq!(result.error, Some(format!("Path '{root}': exit code 2")));
        assert_eq!(result.matches, None);
        let result = grep(
            "needle",
            None,
            Some("a\\..\\b/x"),
            None,
            &Workspace::open(g.path().into()),
            &Cancel::default(),
        );
        assert_eq!(result.error.as_deref(), Some("Path '.': exit code 2"));
        let result = grep_at("x", &format!("{root}/missing"), None);
        assert_eq!((result.error, result.matches, result.truncated), (None, Some(Vec::new()), false));
        let result = grep_at("x", &format!("{root}/missing"), Some("**/*.py"));
        assert_eq!((result.error, result.matches), (None, Some(Vec::new())));
    }

    #[test]
    fn case_40_max_count() {
        let g = tree_g();
        let root = root_of(&g);
        let all: BTreeSet<_> = expect(&CASE_35).into_iter().collect();
        let run = |n: i64| {
            grep("needle", Some(&root), None, Some(n), &Workspace::open("/".into()), &Cancel::default())
        };
        let two = run(2);
        assert!(two.truncated);
        let two = set(&root, two);
        assert_eq!(two.len(), 2);
        assert!(two.is_subset(&all));
        let eleven = run(11);
        assert!(!eleven.truncated);
        assert_eq!(set(&root, eleven), all);
        let twelve = run(12);
        assert!(!twelve.truncated);
        let zero = run(0);
        assert!(zero.truncated);
        assert_eq!(zero.matches, Some(Vec::new()));
        let negative = run(-3);
        assert!(negative.truncated);
        assert_eq!(negative.matches, Some(Vec::new()));
        // Route B keeps the first n in its order.
        let b = grep(
            "needle",
            Some(&root),
            Some("**/*.py"),
            Some(3),
            &Workspace::open("/".into()),
            &Cancel::default(),
        );
        assert!(b.truncated);
        assert_eq!(
            rel(&root, b),
            expect(&[("a.py", 1, "needle one"), ("a.py", 3, "needle two"), ("cr.py", 2, "needle cr")])
        );
        let b = grep(
            "needle",
            Some(&root),
            Some("**/*.py"),
            Some(8),
            &Workspace::open("/".into()),
            &Cancel::default(),
        );
        assert!(!b.truncated);
        assert_eq!(b.matches.unwrap().len(), 8);
        let none =
            grep("absent", Some(&root), None, Some(0), &Workspace::open("/".into()), &Cancel::default());
        assert!(!none.truncated);
    }

    #[test]
    fn case_41_crlf_by_route() {
        let g = tree_g();
        let root = root_of(&g);
        let file = format!("{root}/crlf.py");
        let result = grep_at("other", &file, None);
        assert_eq!(
            result.matches.unwrap(),
            vec![GrepMatch { path: file.clone(), line: 2, text: "other\r".into() }]
        );
        let result = grep_at("other", &root, Some("/crlf.py"));
        assert_eq!(result.matches.unwrap(), vec![GrepMatch { path: file, line: 2, text: "other".into() }]);
    }

    #[test]
    fn case_42_file_roots_and_globs() {
        let g = tree_g();
        let root = root_of(&g);
        let file = format!("{root}/a.py");
        let result = grep_at("needle", &file, Some("*.txt"));
        assert_eq!(result.matches, Some(Vec::new()));
        let result = grep_at("needle", &file, Some("*.py"));
        assert_eq!(result.matches.unwrap().len(), 2);
        let result = grep_at("needle", &file, Some("zzz/*.txt"));
        assert_eq!(
            result.matches.unwrap(),
            vec![
                GrepMatch { path: file.clone(), line: 1, text: "needle one".into() },
                GrepMatch { path: file.clone(), line: 3, text: "needle two".into() },
            ]
        );
        // The glob is ignored for a file root even when it would be refused for a directory.
        assert_eq!(grep_at("needle", &file, Some("../*")).matches.unwrap().len(), 2);
    }

    #[test]
    fn case_43_pattern_ending_in_lf() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        fs::write(dir.path().join("f.txt"), b"abc\nxyz\nb\n").unwrap();
        let result = grep_at("b\n", &root, None);
        assert_eq!(
            set(&root, result),
            expect(&[("f.txt", 1, "abc"), ("f.txt", 2, "xyz"), ("f.txt", 3, "b")]).into_iter().collect()
        );
        let result = grep_at("b\n", &root, Some("/*.txt"));
        assert_eq!(rel(&root, result), expect(&[("f.txt", 3, "b")]));
    }

    #[test]
    fn symlinks_binary_and_root_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        let d = dir.path();
        fs::create_dir(d.join("real")).unwrap();
        fs::write(d.join("real/f.txt"), "hit\n").unwrap();
        fs::write(d.join("bin.dat"), b"hit\n\0").unwrap();
        symlink("real", d.join("dirlink")).unwrap();
        symlink("real/f.txt", d.join("filelink")).unwrap();
        // Links met in the walk are not followed.
        assert_eq!(rel(&root, grep_at("hit", &root, None)), expect(&[("real/f.txt", 1, "hit")]));
        // A linked root is.
        let linked = format!("{root}/dirlink");
        assert_eq!(grep_at("hit", &linked, None).matches.unwrap()[0].path, format!("{linked}/f.txt"));
        let file_link = format!("{root}/filelink");
        assert_eq!(grep_at("hit", &file_link, None).matches.unwrap()[0].path, file_link);
        // Route B follows links and reports the resolved path.
        assert_eq!(
            rel(&root, grep_at("hit", &root, Some("*/f.txt"))),
            expect(&[("real/f.txt", 1, "hit"), ("real/f.txt", 1, "hit")])
        );
        assert_eq!(
            rel(&root, grep_at("hit", &root, Some("./filelink"))),
            expect(&[("real/f.txt", 1, "hit")])
        );
        // Route B treats NUL as text and skips hits under `.git` or outside the root.
        assert_eq!(rel(&root, grep_at("hit", &root, Some("/bin.dat"))), expect(&[("bin.dat", 1, "hit")]));
        fs::create_dir(d.join(".git")).unwrap();
        fs::write(d.join(".git/h"), "hit\n").unwrap();
        assert_eq!(grep_at("hit", &root, Some(".git/*")).matches, Some(Vec::new()));
        symlink("/etc/hostname", d.join("out")).unwrap();
        assert_eq!(grep_at("", &root, Some("/out")).matches, Some(Vec::new()));
    }

    #[test]
    fn confined_walks_and_globs_stay_in_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::write(outside.path().join("f.txt"), "needle outside\n").unwrap();
        fs::create_dir(root.join("in")).unwrap();
        fs::write(root.join("in/f.txt"), "needle inside\n").unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        symlink(outside.path().join("f.txt"), root.join("in/file_out.txt")).unwrap();
        symlink(root.join("in"), root.join("abs_in")).unwrap();
        let ws = Workspace::confined(root).unwrap();
        let texts =
            |r: GrepResult| r.matches.unwrap().into_iter().map(|m| (m.path, m.text)).collect::<Vec<_>>();
        let inside = || vec![("/in/f.txt".to_owned(), "needle inside".to_owned())];
        assert_eq!(texts(grep("needle", Some("/"), None, None, &ws, &Cancel::default())), inside());
        // Route B follows links, but only where the resolver does: inside the root.
        for glob in ["**/*.txt", "*/f.txt", "out/*", "in/file_out.txt"] {
            let found = texts(grep("needle", Some("/"), Some(glob), None, &ws, &Cancel::default()));
            assert!(found.iter().all(|(_, text)| text == "needle inside"), "{glob}: {found:?}");
        }
        assert_eq!(
            texts(grep("needle", Some("/"), Some("**/*.txt"), None, &ws, &Cancel::default())),
            [inside(), inside()].concat(),
            "abs_in/f.txt is reported as its resolved path"
        );
        assert_eq!(
            grep("needle", Some("/out"), None, None, &ws, &Cancel::default()).error.as_deref(),
            Some("Path '/out': invalid_path")
        );
    }

    #[test]
    fn big_tree_in_parallel() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        let mut expected = BTreeSet::new();
        for d in 0..20 {
            let sub = dir.path().join(format!("d{d}/e"));
            fs::create_dir_all(&sub).unwrap();
            for f in 0..50 {
                let text = format!("line\nneedle {d} {f}\n");
                fs::write(sub.join(format!("f{f}.txt")), text.as_bytes()).unwrap();
                expected.insert((format!("d{d}/e/f{f}.txt"), 2, format!("needle {d} {f}")));
            }
        }
        let result = grep_at("needle", &root, None);
        assert_eq!(set(&root, result.clone()), expected);
        let listed = rel(&root, result);
        assert!(listed.windows(2).all(|w| w[0] <= w[1]), "route A output is sorted");
        let limited =
            grep("needle", Some(&root), None, Some(10), &Workspace::open("/".into()), &Cancel::default());
        assert!(limited.truncated);
        assert_eq!(limited.matches.unwrap().len(), 10);
        let ordered = grep(
            "needle",
            Some(&root),
            Some("d1*/e/*.txt"),
            Some(5),
            &Workspace::open("/".into()),
            &Cancel::default(),
        );
        let first: Vec<_> = rel(&root, ordered).into_iter().map(|r| r.0).collect();
        assert_eq!(first, ["d1/e/f0.txt", "d1/e/f1.txt", "d1/e/f10.txt", "d1/e/f11.txt", "d1/e/f12.txt"]);
    }

    /// What `matches` add to the reply: each JSON record and a comma.
    fn cost(matches: &[GrepMatch]) -> usize {
        matches.iter().map(|m| serde_json::to_string(m).unwrap().len() + 1).sum()
    }

    #[test]
    fn the_budget_keeps_the_first_matches_that_fit_on_both_routes() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        for d in 0..12 {
            let sub = dir.path().join(format!("d{d}/e"));
            fs::create_dir_all(&sub).unwrap();
            for f in 0..30 {
                fs::write(sub.join(format!("f{f}.txt")), format!("line\nneedle {d} {f}\nneedle \"{f}\"\n"))
                    .unwrap();
            }
        }
        let ws = Workspace::open("/".into());
        for glob in [None, Some("d*/e/*.txt")] {
            let run = |max: Option<i64>, bytes| {
                grep_within("needle", Some(&root), glob, max, &ws, bytes, &Cancel::default())
            };
            let all = run(None, usize::MAX);
            assert!(!all.truncated);
            let all = all.matches.unwrap();
            assert_eq!(all.len(), 720);
            let total = cost(&all);
            let exact = run(None, total);
            assert_eq!((exact.truncated, exact.matches.as_ref()), (false, Some(&all)), "{glob:?}");
            let short = run(None, total - 1);
            assert!(short.truncated, "{glob:?}");
            assert_eq!(short.matches.unwrap(), all[..719], "{glob:?}");
            // Parallel walks that run out are redone in order: the same first matches every time.
            let budget = cost(&all[..100]);
            for _ in 0..3 {
                let cut = run(None, budget);
                assert!(cut.truncated, "{glob:?}");
                assert_eq!(cut.matches.unwrap(), all[..100], "{glob:?}");
            }
            // `max_count` keeps its meaning: one more existed, so truncated either way.
            let counted = run(Some(100), budget);
            assert!(counted.truncated);
            assert_eq!(counted.matches.unwrap(), all[..100]);
            let counted = run(Some(100), cost(&all[..101]));
            assert!(counted.truncated);
            assert_eq!(counted.matches.unwrap(), all[..100]);
            let counted = run(Some(720), total);
            assert!(!counted.truncated);
        }
        // A file root on route A, the budget one byte short of the first match.
        let file = format!("{root}/d0/e/f0.txt");
        let first = grep_within("needle", Some(&file), None, None, &ws, usize::MAX, &Cancel::default())
            .matches
            .unwrap();
        let one = grep_within("needle", Some(&file), None, None, &ws, cost(&first[..1]), &Cancel::default());
        assert_eq!((one.truncated, one.matches.unwrap()), (true, first[..1].to_vec()));
        let none =
            grep_within("needle", Some(&file), None, None, &ws, cost(&first[..1]) - 1, &Cancel::default());
        assert_eq!((none.truncated, none.matches.unwrap()), (true, Vec::new()));
    }
}

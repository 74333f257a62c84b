//! [`StateSandbox`]: files kept in memory, with deepagents' `StateBackend` semantics (0.7.32), so a
//! route such as `/state/` of a `CompositeSandbox` behaves for a Rust
//! agent as `CompositeBackend(routes={"/state/": StateBackend()})` does for a Python one: scratch
//! files that live as long as the sandbox value.
//!
//! What follows from the reference, and differs from a sandbox with a filesystem:
//! - Paths are keys. There are no directories: `ls` shows a directory for any key beneath it, and
//!   `delete` removes a key and every key beneath it. Nothing is validated (`write("rel", …)` stores
//!   the key `rel`).
//! - `grep` is a literal search of text files (binary ones are skipped), lines split on `\n` only,
//!   in the order the files were first written; `glob` answers most recently modified first.
//!   Include globs follow [`IncludeGlob`].
//! - `read` pages lines (`offset` 0-based) and turns CR and CRLF into LF in the page; files with an
//!   image, audio, video or document extension come back whole.
//! - `upload_files` stores bytes that are not UTF-8 as base64 (encoding `base64`), which `edit`
//!   refuses, `grep` skips and `download_files` decodes; uploads never fail, and a download fails
//!   only with `file_not_found` (a "directory" is not a key).
//! - There is no shell: `execute` and `execute_with_offload` fail with
//!   [`SandboxError::NotSupported`], as deepagents' `CompositeBackend.execute` raises when its
//!   default has none. Behind a composite route that is never reached: commands go to the default.
//!
//! Timestamps are Python's `datetime.now(UTC).isoformat()`, made strictly increasing within one
//! sandbox so that "most recent first" has one answer.
//!
//! The reference is checked, not only read: `tests/tests/state.rs` runs random scripts of every
//! verb on this and on deepagents' own `StateBackend` and compares each result.
//!
//! ```
//! use std::sync::Arc;
//! use agentd_host::{BaseSandbox, CompositeSandbox, StateSandbox};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agentd_host::Result<()> {
//! // Any sandbox can be the default; here another in-memory one, so the example needs no agentd.
//! let default = Arc::new(StateSandbox::new());
//! let state: Arc<dyn BaseSandbox> = Arc::new(StateSandbox::new());
//! let sandbox = CompositeSandbox::new(default, [("/state/", state.clone())]);
//!
//! sandbox.write("/state/notes.md", "first\nsecond\n").await?;
//! let page = sandbox.read("/state/notes.md", 1, 10).await?;
//! assert_eq!(page.file_data.map(|d| d.content).as_deref(), Some("second\n"));
//! // The route's sandbox sees the path from its own `/`.
//! assert_eq!(state.ls("/").await?.entries.unwrap()[0].path, "/notes.md");
//! assert!(state.execute("ls", None).await.is_err(), "no shell");
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use agentd_protocol::fs::{
    DeleteResult, EditResult, Encoding, FileData, FileInfo, FsRequest, FsResponse, GlobResult, GrepMatch,
    GrepResult, LsResult, ReadResult, WriteResult, has_binary_suffix,
};
use agentd_protocol::glob::IncludeGlob;
use agentd_protocol::{
    ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse, TransferError,
};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::contract::error::{Result, SandboxError};
use crate::contract::random::random_hex;
use crate::contract::{BaseSandbox, OffloadRequest};

/// deepagents' `EMPTY_OLD_STRING_ERROR`.
const EMPTY_OLD_STRING_ERROR: &str = "Error: old_string cannot be empty. Provide the exact text to replace.";

/// Files in memory (see the module doc).
pub struct StateSandbox {
    id: String,
    /// Held only inside one verb, never across an `.await`: every verb is synchronous on the map.
    files: Mutex<Files>,
}

/// One stored file: deepagents' `FileData` (content, encoding, ISO 8601 timestamps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    pub data: FileData,
    pub created_at: String,
    pub modified_at: String,
}

#[derive(Default)]
struct Files {
    /// Path → (insertion rank, file). The rank is the place the path took in the reference's dict
    /// when first written (kept on overwrite), which orders `grep`'s matches.
    map: BTreeMap<String, (u64, StateFile)>,
    next_rank: u64,
    /// The last timestamp given, as time since the epoch.
    last_stamp: Duration,
}

impl Default for StateSandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl StateSandbox {
    /// An empty store with a fresh id (`state-` and 16 random hex digits).
    pub fn new() -> Self {
        let hex = random_hex();
        Self { id: format!("state-{}", &hex[..16]), files: Mutex::new(Files::default()) }
    }

    /// A copy of the file stored at `path`, timestamps included.
    pub fn file(&self, path: &str) -> Option<StateFile> {
        self.lock().map.get(path).map(|(_, file)| file.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Files> {
        // A panic while holding the lock leaves the map whole (each verb changes it in one step).
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Files {
    /// Now, as Python's `datetime.now(UTC).isoformat()`, later than any stamp given before.
    fn stamp(&mut self) -> String {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let now = Duration::from_micros(u64::try_from(now.as_micros()).unwrap_or(u64::MAX));
        self.last_stamp = now.max(self.last_stamp + Duration::from_micros(1));
        isoformat(self.last_stamp)
    }

    /// Stores `file` at `path`, keeping the path's rank when it exists.
    fn put(&mut self, path: &str, file: StateFile) {
        let rank = match self.map.get(path) {
            Some((rank, _)) => *rank,
            None => {
                self.next_rank += 1;
                self.next_rank
            }
        };
        self.map.insert(path.to_owned(), (rank, file));
    }

    /// The files in the order the reference's dict holds them.
    fn in_order(&self) -> Vec<(&String, &StateFile)> {
        let mut all: Vec<(&String, &(u64, StateFile))> = self.map.iter().collect();
        all.sort_by_key(|(_, (rank, _))| *rank);
        all.into_iter().map(|(path, (_, file))| (path, file)).collect()
    }

    fn ls(&self, path: &str) -> LsResult {
        let dir = if path.ends_with('/') { path.to_owned() } else { format!("{path}/") };
        let mut entries = Vec::new();
        let mut subdirs: Vec<String> = Vec::new();
        for (key, file) in self.in_order() {
            let Some(relative) = key.strip_prefix(&dir) else { continue };
            match relative.split_once('/') {
                Some((name, _)) => subdirs.push(format!("{dir}{name}/")),
                None => entries.push(info(key, file)),
            }
        }
        subdirs.sort();
        subdirs.dedup();
        entries.extend(subdirs.into_iter().map(|path| FileInfo {
            size: Some(0),
            modified_at: Some(String::new()),
            ..FileInfo::new(path, true)
        }));
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        LsResult { error: None, entries: Some(entries) }
    }

    fn read(&self, path: &str, offset: i64, limit: i64) -> ReadResult {
        let Some((_, file)) = self.map.get(path) else {
            return ReadResult::error(format!("File '{path}' not found"));
        };
        if has_binary_suffix(path) {
            return ReadResult { file_data: Some(file.data.clone()), ..ReadResult::default() };
        }
        page(&file.data, offset, limit)
    }

    fn write(&mut self, path: &str, content: String) -> WriteResult {
        let modified_at = self.stamp();
        let created_at = match self.map.get(path) {
            Some((_, old)) => old.created_at.clone(),
            None => modified_at.clone(),
        };
        let data = FileData { content, encoding: Encoding::Utf8 };
        self.put(path, StateFile { data, created_at, modified_at });
        WriteResult { error: None, path: Some(path.to_owned()) }
    }

    fn edit(&mut self, path: &str, old: &str, new: &str, replace_all: bool) -> EditResult {
        let fail = |message: String| EditResult { error: Some(message), ..EditResult::default() };
        let Some((_, file)) = self.map.get(path) else {
            return fail(format!("Error: File '{path}' not found"));
        };
        if file.data.encoding == Encoding::Base64 {
            return fail("Error: Cannot edit binary files with text replacements.".to_owned());
        }
        let (content, occurrences) = match replace(&file.data.content, old, new, replace_all) {
            Ok(done) => done,
            Err(message) => return fail(message),
        };
        let created_at = file.created_at.clone();
        let data = FileData { content, encoding: file.data.encoding };
        let modified_at = self.stamp();
        self.put(path, StateFile { data, created_at, modified_at });
        EditResult { error: None, path: Some(path.to_owned()), occurrences: Some(occurrences) }
    }

    fn delete(&mut self, path: &str) -> DeleteResult {
        let base = path.trim_end_matches('/');
        let beneath = format!("{base}/");
        let doomed: Vec<String> =
            self.map.keys().filter(|k| *k == base || k.starts_with(&beneath)).cloned().collect();
        if doomed.is_empty() {
            return DeleteResult { error: Some(format!("Error: File '{path}' not found")), path: None };
        }
        for key in doomed {
            self.map.remove(&key);
        }
        DeleteResult { error: None, path: Some(path.to_owned()) }
    }

    fn grep(
        &self,
        pattern: &str,
        path: Option<&str>,
        glob: Option<&str>,
        max_count: Option<i64>,
    ) -> GrepResult {
        let Some(root) = normalize(path) else {
            return GrepResult { matches: Some(Vec::new()), ..GrepResult::default() };
        };
        let include = match glob.filter(|g| !g.is_empty()).map(IncludeGlob::new).transpose() {
            Ok(include) => include,
            Err(message) => return GrepResult { error: Some(message), ..GrepResult::default() },
        };
        let mut matches = Vec::new();
        for (key, file) in self.under(&root) {
            if include.as_ref().is_some_and(|g| !g.is_match(relative(key, &root))) {
                continue;
            }
            if file.data.encoding == Encoding::Base64 {
                continue;
            }
            for (at, line) in file.data.content.split('\n').enumerate() {
                if !line.contains(pattern) {
                    continue;
                }
                // A match beyond the cap proves there are more: exactly `max_count` is complete.
                if max_count.is_some_and(|max| i64::try_from(matches.len()).unwrap_or(i64::MAX) >= max) {
                    return GrepResult { error: None, matches: Some(matches), truncated: true };
                }
                matches.push(GrepMatch { path: key.clone(), line: count(at + 1), text: line.to_owned() });
            }
        }
        GrepResult { error: None, matches: Some(matches), truncated: false }
    }

    fn glob(&self, pattern: &str, path: Option<&str>) -> GlobResult {
        let Some(root) = normalize(path) else {
            return GlobResult { matches: Some(Vec::new()), ..GlobResult::default() };
        };
        let include = match IncludeGlob::new(pattern) {
            Ok(include) => include,
            Err(message) => return GlobResult { error: Some(message), ..GlobResult::default() },
        };
        let mut found: Vec<(&String, &StateFile)> =
            self.under(&root).into_iter().filter(|(key, _)| include.is_match(relative(key, &root))).collect();
        // Stable, as Python's `sort(reverse=True)`: equal times keep the dict's order.
        found.sort_by(|(_, a), (_, b)| b.modified_at.cmp(&a.modified_at));
        let matches = found.into_iter().map(|(key, file)| info(key, file)).collect();
        GlobResult { error: None, matches: Some(matches), truncated: false, truncation_reason: None }
    }

    /// deepagents' `_filter_files_by_path`: the file at `root`, or every file beneath it.
    fn under(&self, root: &str) -> Vec<(&String, &StateFile)> {
        if let Some((key, (_, file))) = self.map.get_key_value(root) {
            return vec![(key, file)];
        }
        let beneath = if root == "/" { "/".to_owned() } else { format!("{root}/") };
        self.in_order().into_iter().filter(|(key, _)| key.starts_with(&beneath)).collect()
    }

    fn upload(&mut self, files: &[(String, Vec<u8>)]) -> Vec<FileUploadResponse> {
        // Creation times are those from before the batch, as the reference reads the state once.
        let first_new = self.next_rank + 1;
        files
            .iter()
            .map(|(path, bytes)| {
                let data = match std::str::from_utf8(bytes) {
                    Ok(text) => FileData { content: text.to_owned(), encoding: Encoding::Utf8 },
                    Err(_) => FileData { content: STANDARD.encode(bytes), encoding: Encoding::Base64 },
                };
                let modified_at = self.stamp();
                let created_at = match self.map.get(path) {
                    Some((rank, old)) if *rank < first_new => old.created_at.clone(),
                    _ => modified_at.clone(),
                };
                self.put(path, StateFile { data, created_at, modified_at });
                FileUploadResponse { path: path.clone(), error: None }
            })
            .collect()
    }

    fn download(&self, paths: &[String]) -> Vec<FileDownloadResponse> {
        paths
            .iter()
            .map(|path| {
                let failed = |error: String| FileDownloadResponse {
                    path: path.clone(),
                    content: None,
                    error: Some(error),
                };
                let Some((_, file)) = self.map.get(path) else {
                    return failed(TransferError::FileNotFound.to_string());
                };
                match file.data.encoding {
                    Encoding::Utf8 => FileDownloadResponse {
                        path: path.clone(),
                        content: Some(file.data.content.clone().into_bytes()),
                        error: None,
                    },
                    // Only `upload_files` stores base64, and it encodes what it stores.
                    Encoding::Base64 => match STANDARD.decode(&file.data.content) {
                        Ok(bytes) => {
                            FileDownloadResponse { path: path.clone(), content: Some(bytes), error: None }
                        }
                        Err(err) => failed(format!("stored base64 does not decode: {err}")),
                    },
                }
            })
            .collect()
    }
}

/// A file's listing entry: its size is that of its stored text (base64 for binary files).
fn info(path: &str, file: &StateFile) -> FileInfo {
    FileInfo {
        size: Some(count(file.data.content.len())),
        modified_at: Some(file.modified_at.clone()),
        ..FileInfo::new(path.to_owned(), false)
    }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// deepagents' `_normalize_path`: `None` or empty is `/`, a leading `/` added, trailing ones
/// dropped; `None` for a blank path (the reference's `ValueError`, answered with no matches).
fn normalize(path: Option<&str>) -> Option<String> {
    let path = path.filter(|p| !p.is_empty()).unwrap_or("/");
    if is_blank(path) {
        return None;
    }
    let absolute = if path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
    if absolute != "/" && absolute.ends_with('/') {
        return Some(absolute.trim_end_matches('/').to_owned());
    }
    Some(absolute)
}

/// deepagents' `_relative_to_root`: what an include glob is matched against.
fn relative<'a>(path: &'a str, root: &str) -> &'a str {
    if root == "/" {
        return path.get(1..).unwrap_or_default();
    }
    if path == root {
        return path.rsplit('/').next().unwrap_or(path);
    }
    path.get(root.len() + 1..).unwrap_or_default()
}

/// Python's `str.strip() == ""`: only whitespace (Python's, which adds `\x1c`–`\x1f` to Rust's).
fn is_blank(text: &str) -> bool {
    text.chars().all(|c| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

/// deepagents' `slice_read_response`: a page of `limit` lines from line `offset` (both floored at 0).
fn page(data: &FileData, offset: i64, limit: i64) -> ReadResult {
    let whole = |content: String| ReadResult {
        file_data: Some(FileData { content, encoding: data.encoding }),
        ..ReadResult::default()
    };
    let offset = usize::try_from(offset).unwrap_or(0);
    let limit = usize::try_from(limit).unwrap_or(0);
    if is_blank(&data.content) {
        return whole(data.content.clone());
    }
    if limit == 0 {
        return ReadResult { no_lines_requested: true, ..whole(String::new()) };
    }
    let lines = split_lines_keeping_ends(&data.content);
    let total = lines.len();
    if offset >= total {
        return ReadResult::error(format!("Line offset {offset} exceeds file length ({total} lines)"));
    }
    let end = offset.saturating_add(limit).min(total);
    let text = lines[offset..end].concat().replace("\r\n", "\n").replace('\r', "\n");
    ReadResult {
        total_lines: Some(count(total)),
        start_line: Some(count(offset + 1)),
        end_line: Some(count(end)),
        next_offset: (end < total).then(|| count(end)),
        ..whole(text)
    }
}

/// Python's `str.splitlines(keepends=True)`: LF, CR, CRLF, VT, FF, FS, GS, RS, NEL, LS and PS end
/// a line.
fn split_lines_keeping_ends(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = match c {
            '\r' if chars.peek().is_some_and(|(_, next)| *next == '\n') => {
                chars.next();
                at + 2
            }
            '\n' | '\r' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}' => {
                at + c.len_utf8()
            }
            _ => continue,
        };
        lines.push(&text[start..end]);
        start = end;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// deepagents' `perform_string_replacement`: the new content and the number of occurrences, or
/// the model-facing error.
fn replace(content: &str, old: &str, new: &str, replace_all: bool) -> Result<(String, u64), String> {
    if old.is_empty() {
        return Err(EMPTY_OLD_STRING_ERROR.to_owned());
    }
    let occurrences = content.matches(old).count();
    if occurrences == 0 {
        // A trailing newline the file lacks at its end: say so instead of "not found".
        if let Some(stripped) = old.strip_suffix('\n')
            && !stripped.is_empty()
            && content.ends_with(stripped)
        {
            let times = content.matches(stripped).count();
            if times == 1 {
                return Err(
                    "Error: old_string ends with a newline, but the file does not end with a newline. \
                    Retry with the trailing newline removed from old_string (and from new_string if it also \
                    ends with a newline)."
                        .to_owned(),
                );
            }
            return Err(format!(
                "Error: old_string ends with a newline, but the file does not end with a newline. With the \
                 trailing newline removed, old_string would appear {times} times in the file. Retry with the \
                 trailing newline removed and add surrounding context so the match is unique."
            ));
        }
        return Err(format!("Error: String not found in file: '{old}'"));
    }
    if occurrences > 1 && !replace_all {
        return Err(format!(
            "Error: String '{old}' appears {occurrences} times in file. Use replace_all=True to replace all \
             instances, or provide a more specific string with surrounding context."
        ));
    }
    Ok((content.replace(old, new), count(occurrences)))
}

/// `since_epoch` as Python's `datetime.isoformat()` of a UTC time: microseconds unless zero.
fn isoformat(since_epoch: Duration) -> String {
    let micros = i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX);
    let at = jiff::Timestamp::from_microsecond(micros).unwrap_or(jiff::Timestamp::MAX);
    let t = at.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    let fraction = match t.subsec_nanosecond() / 1000 {
        0 => String::new(),
        micros => format!(".{micros:06}"),
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}+00:00",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[async_trait]
impl BaseSandbox for StateSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// No shell: [`SandboxError::NotSupported`].
    async fn execute(&self, _command: &str, _timeout: Option<Duration>) -> Result<ExecuteResponse> {
        Err(no_shell())
    }

    /// No shell: [`SandboxError::NotSupported`].
    async fn execute_with_offload(&self, _request: &OffloadRequest) -> Result<ExecuteOffloadResult> {
        Err(no_shell())
    }

    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        Ok(self.lock().upload(files))
    }

    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        Ok(self.lock().download(paths))
    }

    async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        let mut files = self.lock();
        Ok(match request {
            FsRequest::Ls { path } => FsResponse::Ls(files.ls(&path)),
            FsRequest::Read { path, offset, limit } => FsResponse::Read(files.read(&path, offset, limit)),
            FsRequest::Write { path, content } => FsResponse::Write(files.write(&path, content)),
            FsRequest::Edit { path, old, new, replace_all } => {
                FsResponse::Edit(files.edit(&path, &old, &new, replace_all))
            }
            FsRequest::Glob { pattern, path } => FsResponse::Glob(files.glob(&pattern, path.as_deref())),
            FsRequest::Grep { pattern, path, glob, max_count } => {
                FsResponse::Grep(files.grep(&pattern, path.as_deref(), glob.as_deref(), max_count))
            }
            FsRequest::Delete { path } => FsResponse::Delete(files.delete(&path)),
        })
    }
}

fn no_shell() -> SandboxError {
    SandboxError::NotSupported { kind: "state", operation: "run commands" }
}

#[cfg(test)]
mod tests {
    //! Expected values come from deepagents 0.7.32's own `StateBackend`, run on the same calls
    //! (its `_read_files`/`_send_files_update` over a dict with the `files` channel's reducer).

    use super::*;

    /// The store the reference was run on: these writes, in this order.
    async fn seeded() -> StateSandbox {
        let s = StateSandbox::new();
        for (path, content) in [
            ("/a.txt", "hello\nworld\n"),
            ("/dir/b.py", "x = 1\nneedle\n"),
            ("/dir/sub/c.py", "needle\r\nneedle two"),
            ("/.hidden/d.py", "needle"),
            ("/dir/.e.py", "needle"),
            ("/empty.txt", ""),
            ("/blank.txt", "  \n"),
            ("/img.png", "abc\ndef"),
            ("/crlf.txt", "one\r\ntwo\rthree\x0bfour\nfive"),
            ("/eof.txt", "a\nb"),
            ("/eof2.txt", "b\na\nb"),
        ] {
            assert_eq!(s.write(path, content).await.unwrap().path.as_deref(), Some(path));
        }
        s
    }

    /// A download's path, content and error.
    type Download<'a> = (&'a str, Option<&'a [u8]>, Option<&'a str>);

    fn paths(infos: &[FileInfo]) -> Vec<(&str, bool, u64)> {
        infos.iter().map(|i| (i.path.as_str(), i.is_dir, i.size.unwrap())).collect()
    }

    fn lines(result: &GrepResult) -> Vec<(&str, u64, &str)> {
        let matches = result.matches.as_deref().unwrap();
        matches.iter().map(|m| (m.path.as_str(), m.line, m.text.as_str())).collect()
    }

    fn text(result: &ReadResult) -> (&str, Option<u64>, Option<u64>, Option<u64>, Option<u64>) {
        let content = result.file_data.as_ref().map_or("", |d| d.content.as_str());
        (content, result.total_lines, result.start_line, result.end_line, result.next_offset)
    }

    #[tokio::test]
    async fn ls_lists_one_level_with_directories_from_keys() {
        let s = seeded().await;
        let top = [
            ("/.hidden/", true, 0),
            ("/a.txt", false, 12),
            ("/blank.txt", false, 3),
            ("/crlf.txt", false, 24),
            ("/dir/", true, 0),
            ("/empty.txt", false, 0),
            ("/eof.txt", false, 3),
            ("/eof2.txt", false, 5),
            ("/img.png", false, 7),
        ];
        for path in ["/", ""] {
            assert_eq!(paths(&s.ls(path).await.unwrap().entries.unwrap()), top);
        }
        let dir = [("/dir/.e.py", false, 6), ("/dir/b.py", false, 13), ("/dir/sub/", true, 0)];
        for path in ["/dir", "/dir/"] {
            assert_eq!(paths(&s.ls(path).await.unwrap().entries.unwrap()), dir);
        }
        assert_eq!(s.ls("/nope").await.unwrap(), LsResult { error: None, entries: Some(vec![]) });
        let listed = s.ls("/dir").await.unwrap().entries.unwrap();
        assert_eq!(listed[1].modified_at, s.file("/dir/b.py").map(|f| f.modified_at));
        assert_eq!(listed[2].modified_at.as_deref(), Some(""));
    }

    #[tokio::test]
    async fn read_pages_lines_as_the_reference() {
        let s = seeded().await;
        let r = |path: &'static str, offset, limit| {
            let s = &s;
            async move { s.read(path, offset, limit).await.unwrap() }
        };
        assert_eq!(text(&r("/a.txt", 0, 2000).await), ("hello\nworld\n", Some(2), Some(1), Some(2), None));
        assert_eq!(text(&r("/a.txt", 1, 1).await), ("world\n", Some(2), Some(2), Some(2), None));
        assert_eq!(text(&r("/a.txt", -3, 1).await), ("hello\n", Some(2), Some(1), Some(1), Some(1)));
        for offset in [2, 5] {
            let error = format!("Line offset {offset} exceeds file length (2 lines)");
            assert_eq!(r("/a.txt", offset, 10).await, ReadResult::error(error));
        }
        for limit in [0, -1] {
            let none = r("/a.txt", 0, limit).await;
            assert!(none.no_lines_requested);
            assert_eq!(text(&none), ("", None, None, None, None));
        }
        assert_eq!(r("/missing", 0, 10).await, ReadResult::error("File '/missing' not found".to_owned()));
        assert_eq!(
            text(&r("/dir/sub/c.py", 0, 2000).await),
            ("needle\nneedle two", Some(2), Some(1), Some(2), None)
        );
        assert_eq!(text(&r("/empty.txt", 0, 2000).await), ("", None, None, None, None));
        let blank = r("/blank.txt", 0, 0).await;
        assert_eq!((text(&blank), blank.no_lines_requested), (("  \n", None, None, None, None), false));
        assert_eq!(text(&r("/img.png", 1, 1).await), ("abc\ndef", None, None, None, None), "returned whole");
        let crlf = "one\ntwo\nthree\x0bfour\nfive";
        assert_eq!(text(&r("/crlf.txt", 0, 2000).await), (crlf, Some(5), Some(1), Some(5), None));
        assert_eq!(text(&r("/crlf.txt", 1, 2).await), ("two\nthree\x0b", Some(5), Some(2), Some(3), Some(3)));
    }

    #[tokio::test]
    async fn edit_replaces_and_explains_refusals() {
        let s = seeded().await;
        let error = |e: EditResult| e.error.unwrap();
        assert_eq!(
            error(s.edit("/missing", "a", "b", false).await.unwrap()),
            "Error: File '/missing' not found"
        );
        assert_eq!(
            error(s.edit("/a.txt", "zzz", "b", false).await.unwrap()),
            "Error: String not found in file: 'zzz'"
        );
        assert_eq!(
            error(s.edit("/dir/b.py", "e", "E", false).await.unwrap()),
            "Error: String 'e' appears 3 times in file. Use replace_all=True to replace all instances, or provide \
             a more specific string with surrounding context."
        );
        assert_eq!(error(s.edit("/a.txt", "", "x", false).await.unwrap()), EMPTY_OLD_STRING_ERROR);
        assert_eq!(
            error(s.edit("/eof.txt", "b\n", "c", false).await.unwrap()),
            "Error: old_string ends with a newline, but the file does not end with a newline. Retry with the \
             trailing newline removed from old_string (and from new_string if it also ends with a newline)."
        );
        s.write("/amb.txt", "b b").await.unwrap();
        assert_eq!(
            error(s.edit("/amb.txt", "b\n", "c", false).await.unwrap()),
            "Error: old_string ends with a newline, but the file does not end with a newline. With the trailing \
             newline removed, old_string would appear 2 times in the file. Retry with the trailing newline \
             removed and add surrounding context so the match is unique."
        );
        let before = s.file("/a.txt").unwrap();
        assert_eq!(before.data.content, "hello\nworld\n", "refusals change nothing");
        let done = s.edit("/eof2.txt", "b\n", "c", false).await.unwrap();
        assert_eq!(done, EditResult { error: None, path: Some("/eof2.txt".into()), occurrences: Some(1) });
        assert_eq!(s.file("/eof2.txt").unwrap().data.content, "ca\nb");
        let all = s.edit("/a.txt", "l", "L", true).await.unwrap();
        assert_eq!(all.occurrences, Some(3));
        let after = s.file("/a.txt").unwrap();
        assert_eq!(after.data.content, "heLLo\nworLd\n");
        assert_eq!(after.created_at, before.created_at);
        assert!(after.modified_at > before.modified_at);
    }

    #[tokio::test]
    async fn grep_searches_literally_in_write_order() {
        let s = seeded().await;
        let g = |pattern: &'static str,
                 path: Option<&'static str>,
                 glob: Option<&'static str>,
                 max: Option<i64>| {
            let s = &s;
            async move { s.grep(pattern, path, glob, max).await.unwrap() }
        };
        let b = ("/dir/b.py", 2, "needle");
        let (c1, c2) = (("/dir/sub/c.py", 1, "needle\r"), ("/dir/sub/c.py", 2, "needle two"));
        let (d, e) = (("/.hidden/d.py", 1, "needle"), ("/dir/.e.py", 1, "needle"));
        assert_eq!(lines(&g("needle", None, None, None).await), [b, c1, c2, d, e]);
        assert_eq!(lines(&g("needle", Some("/dir"), None, None).await), [b, c1, c2, e]);
        assert_eq!(lines(&g("needle", Some("dir"), None, None).await), [b, c1, c2, e]);
        assert_eq!(
            lines(&g("needle", None, Some("*.py"), None).await),
            [b, c1, c2, d],
            "basename, not `.e.py`"
        );
        assert_eq!(
            lines(&g("needle", None, Some("**/*.py"), None).await),
            [b, c1, c2],
            "`**` skips dot dirs"
        );
        assert_eq!(lines(&g("needle", Some("/dir"), Some("sub/*.py"), None).await), [c1, c2]);
        assert_eq!(
            lines(&g("o", None, Some("/*.txt"), None).await),
            [
                ("/a.txt", 1, "hello"),
                ("/a.txt", 2, "world"),
                ("/crlf.txt", 1, "one\r"),
                ("/crlf.txt", 2, "two\rthree\x0bfour")
            ]
        );
        assert_eq!(lines(&g("needle", Some("/dir/b.py"), None, None).await), [b], "a file root");
        assert_eq!(lines(&g("needle", Some("/dir/b.py"), Some("*.txt"), None).await), []);
        assert_eq!(
            lines(&g("", Some("/dir"), None, None).await),
            [("/dir/b.py", 1, "x = 1"), ("/dir/b.py", 2, "needle"), ("/dir/b.py", 3, ""), c1, c2, e]
        );
        assert_eq!(lines(&g("needle", Some("   "), None, None).await), []);
        assert_eq!(lines(&g("two\n", None, None, None).await), []);
        let one = g("needle", None, None, Some(1)).await;
        assert_eq!((lines(&one), one.truncated), (vec![b], true));
        let zero = g("needle", None, None, Some(0)).await;
        assert_eq!((lines(&zero), zero.truncated), (vec![], true));
        let exact = g("needle", Some("/dir"), None, Some(4)).await;
        assert_eq!((lines(&exact).len(), exact.truncated), (4, false), "exactly the cap is complete");
        assert_eq!(
            g("needle", None, Some("../x"), None).await,
            GrepResult {
                error: Some("Path traversal not allowed in glob pattern '../x'".into()),
                matches: None,
                truncated: false
            }
        );
    }

    #[tokio::test]
    async fn glob_answers_most_recent_first() {
        let s = seeded().await;
        let g = |pattern: &'static str, path: Option<&'static str>| {
            let s = &s;
            async move { s.glob(pattern, path).await.unwrap() }
        };
        let found = |r: GlobResult| {
            r.matches.unwrap().into_iter().map(|m| (m.path, m.size.unwrap())).collect::<Vec<_>>()
        };
        let owned = |v: &[(&str, u64)]| v.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect::<Vec<_>>();
        let (b, c, d) = (("/dir/b.py", 13), ("/dir/sub/c.py", 18), ("/.hidden/d.py", 6));
        assert_eq!(found(g("*.py", None).await), owned(&[d, c, b]));
        assert_eq!(found(g("**/*.py", None).await), owned(&[c, b]));
        assert_eq!(
            found(g("/*.txt", None).await),
            owned(&[
                ("/eof2.txt", 5),
                ("/eof.txt", 3),
                ("/crlf.txt", 24),
                ("/blank.txt", 3),
                ("/empty.txt", 0),
                ("/a.txt", 12)
            ])
        );
        assert_eq!(found(g("*.py", Some("/dir")).await), owned(&[c, b]));
        assert_eq!(found(g("*.py", Some("/dir/b.py")).await), owned(&[b]));
        assert_eq!(found(g("sub/*", Some("/dir/")).await), owned(&[c]));
        assert_eq!(found(g("{a,img}.*", None).await), owned(&[("/img.png", 7), ("/a.txt", 12)]));
        assert_eq!(found(g("*.rs", None).await), []);
        assert_eq!(found(g("*.py", Some("   ")).await), []);
        let refused = g("../*", None).await;
        assert_eq!(refused.error.as_deref(), Some("Path traversal not allowed in glob pattern '../*'"));
        assert_eq!(refused.matches, None);
        // A later write moves a file to the front.
        s.write("/a.txt", "again").await.unwrap();
        assert_eq!(found(g("/*.txt", None).await)[0], ("/a.txt".to_owned(), 5));
    }

    #[tokio::test]
    async fn delete_removes_a_key_and_everything_beneath() {
        let s = seeded().await;
        let missing = s.delete("/missing").await.unwrap();
        assert_eq!(missing.error.as_deref(), Some("Error: File '/missing' not found"));
        assert_eq!(s.delete("/a.txt").await.unwrap().path.as_deref(), Some("/a.txt"));
        assert!(s.file("/a.txt").is_none());
        assert_eq!(s.delete("/dir/").await.unwrap().path.as_deref(), Some("/dir/"));
        assert!(s.ls("/dir").await.unwrap().entries.unwrap().is_empty());
        assert_eq!(s.delete("/dir").await.unwrap().error.as_deref(), Some("Error: File '/dir' not found"));
        assert_eq!(s.delete("/").await.unwrap().path.as_deref(), Some("/"));
        assert!(s.ls("/").await.unwrap().entries.unwrap().is_empty());
    }

    #[tokio::test]
    async fn transfers_keep_binary_as_base64() {
        let s = seeded().await;
        let created = s.file("/a.txt").unwrap().created_at;
        let up = s
            .upload_files(&[
                ("/up/t.txt".into(), b"text\n".to_vec()),
                ("/up/bin.txt".into(), b"\xff\x00ab".to_vec()),
                ("/a.txt".into(), b"new".to_vec()),
            ])
            .await
            .unwrap();
        assert!(up.iter().all(|u| u.error.is_none()));
        assert_eq!(
            up.iter().map(|u| u.path.as_str()).collect::<Vec<_>>(),
            ["/up/t.txt", "/up/bin.txt", "/a.txt"]
        );
        let bin = s.file("/up/bin.txt").unwrap().data;
        assert_eq!(bin, FileData { content: "/wBhYg==".into(), encoding: Encoding::Base64 });
        assert_eq!(s.file("/a.txt").unwrap().created_at, created, "an upload keeps the creation time");
        assert_eq!(
            paths(&s.ls("/up").await.unwrap().entries.unwrap()),
            [("/up/bin.txt", false, 8), ("/up/t.txt", false, 5)]
        );
        assert_eq!(lines(&s.grep("ab", Some("/up"), None, None).await.unwrap()), [], "binary is skipped");
        let read = s.read("/up/bin.txt", 0, 2000).await.unwrap();
        assert_eq!((read.file_data, read.total_lines), (Some(bin), Some(1)));
        let edit = s.edit("/up/bin.txt", "a", "b", false).await.unwrap();
        assert_eq!(edit.error.as_deref(), Some("Error: Cannot edit binary files with text replacements."));

        let asked = ["/up/t.txt", "/up/bin.txt", "/missing", "/up"].map(String::from);
        let down = s.download_files(&asked).await.unwrap();
        let got: Vec<Download<'_>> =
            down.iter().map(|d| (d.path.as_str(), d.content.as_deref(), d.error.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("/up/t.txt", Some(&b"text\n"[..]), None),
                ("/up/bin.txt", Some(&b"\xff\x00ab"[..]), None),
                ("/missing", None, Some("file_not_found")),
                ("/up", None, Some("file_not_found")),
            ]
        );
        s.write("/up/bin.txt", "now text").await.unwrap();
        assert_eq!(s.file("/up/bin.txt").unwrap().data.encoding, Encoding::Utf8);
    }

    #[tokio::test]
    async fn no_shell_and_a_fresh_id() {
        let s = StateSandbox::new();
        let err = s.execute("true", None).await.unwrap_err();
        assert_eq!(err.to_string(), "state sandboxes cannot run commands");
        assert!(s.execute_with_offload(&OffloadRequest::new("true", "/c", 10)).await.is_err());
        assert!(s.id().starts_with("state-") && s.id().len() == 22);
        assert_ne!(s.id(), StateSandbox::new().id());
    }

    #[test]
    fn timestamps_are_python_isoformat() {
        assert_eq!(
            isoformat(Duration::from_micros(1_796_419_269_123_456)),
            "2026-12-04T21:21:09.123456+00:00"
        );
        assert_eq!(isoformat(Duration::from_secs(951_782_400)), "2000-02-29T00:00:00+00:00");
        let mut files = Files::default();
        let (a, b) = (files.stamp(), files.stamp());
        assert!(b > a, "{a} then {b}");
    }

    #[test]
    fn lines_split_as_python_splitlines() {
        assert_eq!(
            split_lines_keeping_ends("a\r\nb\rc\x0cd\u{2028}e\n\nf"),
            ["a\r\n", "b\r", "c\x0c", "d\u{2028}", "e\n", "\n", "f"]
        );
        assert!(is_blank(" \x1c\t\n") && !is_blank(" x"));
    }
}

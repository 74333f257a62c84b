//! The seven file verbs: their requests and their model-facing results (the contract: deepagents' `BaseSandbox`, as
//! `agentd_host::sandbox` states it).
//!
//! One [`FsRequest`] travels either natively (the `fs` message) or as the JSON that `agentd fs --stdin`
//! reads on the derived path; one [`FsResponse`] comes back either way, so both paths share these
//! types and give identical results. Failures are values: an `error` string, never an `Err`.

use serde::{Deserialize, Serialize};

/// Default `limit` of `read`.
pub const DEFAULT_READ_LIMIT: i64 = 2000;

/// Extensions (lowercased, with the dot) that `read` returns whole, not as lines: the images,
/// audio, video and documents of deepagents' `_get_backend_read_file_type`.
pub const BINARY_SUFFIXES: [&str; 26] = [
    ".png", ".jpeg", ".jpg", ".webp", ".gif", ".heic", ".heif", ".mp4", ".mpeg", ".mov", ".avi", ".flv",
    ".mpg", ".webm", ".wmv", ".3gpp", ".wav", ".mp3", ".aiff", ".aac", ".ogg", ".flac", ".pdf", ".ppt",
    ".pptx", ".mkv",
];

/// The last suffix of the final component, Python's `PurePath.suffix` (`.png` alone has none),
/// lower-cased, is one of the binary ones.
pub fn has_binary_suffix(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rfind('.') {
        Some(dot) if dot > 0 && dot + 1 < name.len() => {
            BINARY_SUFFIXES.contains(&name[dot..].to_ascii_lowercase().as_str())
        }
        _ => false,
    }
}

/// A file verb with its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case")]
pub enum FsRequest {
    /// List one directory level.
    Ls { path: String },
    /// Read a page of lines (`offset` 0-based; negative values clamp to 0).
    Read {
        path: String,
        #[serde(default)]
        offset: i64,
        #[serde(default = "default_limit")]
        limit: i64,
    },
    /// Create or overwrite a file, creating parent directories.
    Write { path: String, content: String },
    /// Replace `old` by `new` (first occurrence, or all with `replace_all`).
    Edit {
        path: String,
        old: String,
        new: String,
        #[serde(default)]
        replace_all: bool,
    },
    /// Files matching `pattern` under `path` (default `/`).
    Glob {
        pattern: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    /// Lines containing the literal `pattern` under `path` (default `.`), optionally filtered by `glob`.
    Grep {
        pattern: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        glob: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_count: Option<i64>,
    },
    /// Remove a file, a link or a directory tree (links are never followed).
    Delete { path: String },
}

fn default_limit() -> i64 {
    DEFAULT_READ_LIMIT
}

/// Which verb, without its arguments: the one descriptor every layer matches on, so that a new
/// verb is a compile error at each place that must handle it (no catch-all arms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Ls,
    Read,
    Write,
    Edit,
    Glob,
    Grep,
    Delete,
}

impl Verb {
    /// Every verb, in the contract's order.
    pub const ALL: [Verb; 7] =
        [Verb::Ls, Verb::Read, Verb::Write, Verb::Edit, Verb::Glob, Verb::Grep, Verb::Delete];

    /// The verb's name on the wire (`"ls"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Verb::Ls => "ls",
            Verb::Read => "read",
            Verb::Write => "write",
            Verb::Edit => "edit",
            Verb::Glob => "glob",
            Verb::Grep => "grep",
            Verb::Delete => "delete",
        }
    }

    /// The verb changes files: once begun it runs to its end (a cancel cannot take back what it
    /// did), so its own result is the answer.
    pub fn writes(self) -> bool {
        match self {
            Verb::Ls | Verb::Read | Verb::Glob | Verb::Grep => false,
            Verb::Write | Verb::Edit | Verb::Delete => true,
        }
    }

    /// This verb's result carrying only `error` (every other field empty).
    pub fn failed(self, error: String) -> FsResponse {
        let error = Some(error);
        match self {
            Verb::Ls => FsResponse::Ls(LsResult { error, entries: None }),
            Verb::Read => FsResponse::Read(ReadResult { error, ..ReadResult::default() }),
            Verb::Write => FsResponse::Write(WriteResult { error, path: None }),
            Verb::Edit => FsResponse::Edit(EditResult { error, ..EditResult::default() }),
            Verb::Glob => FsResponse::Glob(GlobResult { error, ..GlobResult::default() }),
            Verb::Grep => FsResponse::Grep(GrepResult { error, ..GrepResult::default() }),
            Verb::Delete => FsResponse::Delete(DeleteResult { error, path: None }),
        }
    }
}

impl FsRequest {
    pub fn verb(&self) -> Verb {
        match self {
            FsRequest::Ls { .. } => Verb::Ls,
            FsRequest::Read { .. } => Verb::Read,
            FsRequest::Write { .. } => Verb::Write,
            FsRequest::Edit { .. } => Verb::Edit,
            FsRequest::Glob { .. } => Verb::Glob,
            FsRequest::Grep { .. } => Verb::Grep,
            FsRequest::Delete { .. } => Verb::Delete,
        }
    }
}

impl FsResponse {
    pub fn verb(&self) -> Verb {
        match self {
            FsResponse::Ls(_) => Verb::Ls,
            FsResponse::Read(_) => Verb::Read,
            FsResponse::Write(_) => Verb::Write,
            FsResponse::Edit(_) => Verb::Edit,
            FsResponse::Glob(_) => Verb::Glob,
            FsResponse::Grep(_) => Verb::Grep,
            FsResponse::Delete(_) => Verb::Delete,
        }
    }
}

/// The result of one verb, keyed by the verb's name: `{"read": {…ReadResult…}}`. (Externally tagged,
/// so a large result is parsed in one pass, with no buffering to find its tag.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsResponse {
    Ls(LsResult),
    Read(ReadResult),
    Write(WriteResult),
    Edit(EditResult),
    Glob(GlobResult),
    Grep(GrepResult),
    Delete(DeleteResult),
}

/// One directory entry or glob match. `ls` and `glob` fill only `path` and `is_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileInfo {
    pub path: String,
    pub is_dir: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_at: Option<String>,
}

impl FileInfo {
    pub fn new(path: String, is_dir: bool) -> Self {
        Self { path, is_dir, size: None, modified_at: None }
    }
}

/// `entries` is `None` iff `error` is set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LsResult {
    pub error: Option<String>,
    pub entries: Option<Vec<FileInfo>>,
}

/// How `FileData::content` is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    #[serde(rename = "utf-8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileData {
    pub content: String,
    pub encoding: Encoding,
}

/// A page of a file; see the window rules of the contract (§1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReadResult {
    pub error: Option<String>,
    pub file_data: Option<FileData>,
    pub total_lines: Option<u64>,
    pub start_line: Option<u64>,
    pub end_line: Option<u64>,
    pub next_offset: Option<u64>,
    pub no_lines_requested: bool,
}

impl ReadResult {
    pub fn error(message: String) -> Self {
        Self { error: Some(message), ..Self::default() }
    }
}

/// `path` is set iff the call succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WriteResult {
    pub error: Option<String>,
    pub path: Option<String>,
}

/// `path` and `occurrences` are set iff the call succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EditResult {
    pub error: Option<String>,
    pub path: Option<String>,
    pub occurrences: Option<u64>,
}

/// `path` is set iff the call succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeleteResult {
    pub error: Option<String>,
    pub path: Option<String>,
}

/// One matching line (1-based).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GrepMatch {
    pub path: String,
    pub line: u64,
    pub text: String,
}

/// `matches` is `None` only on a hard error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GrepResult {
    pub error: Option<String>,
    pub matches: Option<Vec<GrepMatch>>,
    pub truncated: bool,
}

/// Why a glob stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationReason {
    /// The time or match budget ran out.
    Budget,
    /// A subtree could not be read and was skipped.
    Unreadable,
    /// The transport dropped output.
    Transport,
}

/// `matches` is `None` only on a hard error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GlobResult {
    pub error: Option<String>,
    pub matches: Option<Vec<FileInfo>>,
    pub truncated: bool,
    pub truncation_reason: Option<TruncationReason>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_use_the_verb_tag_and_defaults() {
        let read: FsRequest = serde_json::from_str(r#"{"verb":"read","path":"/a"}"#).unwrap();
        assert_eq!(read, FsRequest::Read { path: "/a".into(), offset: 0, limit: 2000 });
        let text = serde_json::to_string(&FsRequest::Glob { pattern: "*.py".into(), path: None }).unwrap();
        assert_eq!(text, r#"{"verb":"glob","pattern":"*.py"}"#);
    }

    #[test]
    fn each_verb_names_its_wire_tag_and_its_failed_result() {
        for verb in Verb::ALL {
            let failed = verb.failed("boom".into());
            assert_eq!(failed.verb(), verb);
            let json = serde_json::to_value(&failed).unwrap();
            assert_eq!(json[verb.name()]["error"], "boom", "{json}");
        }
        let request: FsRequest = serde_json::from_str(r#"{"verb":"delete","path":"/a"}"#).unwrap();
        assert_eq!(request.verb(), Verb::Delete);
        let writes: Vec<&str> = Verb::ALL.iter().filter(|v| v.writes()).map(|v| v.name()).collect();
        assert_eq!(writes, ["write", "edit", "delete"]);
    }

    #[test]
    fn responses_round_trip() {
        let response = FsResponse::Read(ReadResult {
            file_data: Some(FileData { content: "aGk=".into(), encoding: Encoding::Base64 }),
            ..ReadResult::default()
        });
        let text = serde_json::to_string(&response).unwrap();
        assert!(text.contains(r#""encoding":"base64""#), "{text}");
        assert_eq!(serde_json::from_str::<FsResponse>(&text).unwrap(), response);
    }
}

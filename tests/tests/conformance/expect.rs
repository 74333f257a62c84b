//! The contract's values, as the cases expect them (a page of `read`, `ls` entries, grep matches,
//! glob matches, the verbs' errors), and the requests of the mutating verbs.

use agentd_protocol::fs::{
    DeleteResult, EditResult, Encoding, FileData, FileInfo, FsRequest, GlobResult, GrepMatch, GrepResult,
    LsResult, ReadResult, WriteResult,
};
use base64::Engine as _;

/// A page: `W = total/start/end/next` of the golden tables.
pub fn page(content: &str, total: Option<u64>, start: u64, end: u64, next: Option<u64>) -> ReadResult {
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
pub fn whole(content: &str, encoding: Encoding) -> ReadResult {
    ReadResult {
        file_data: Some(FileData { content: content.to_owned(), encoding }),
        ..ReadResult::default()
    }
}

pub fn b64(bytes: &[u8]) -> ReadResult {
    whole(&base64::engine::general_purpose::STANDARD.encode(bytes), Encoding::Base64)
}

pub fn no_lines() -> ReadResult {
    ReadResult { no_lines_requested: true, ..whole("", Encoding::Utf8) }
}

pub fn read_error(message: String) -> ReadResult {
    ReadResult::error(message)
}

pub fn ls_ok(mut entries: Vec<(String, bool)>) -> LsResult {
    entries.sort();
    LsResult { error: None, entries: Some(entries.into_iter().map(|(p, d)| FileInfo::new(p, d)).collect()) }
}

pub fn ls_error(message: String) -> LsResult {
    LsResult { error: Some(message), entries: None }
}

/// `ls` entries sorted by path ("any order").
pub fn ls_sorted(mut result: LsResult) -> LsResult {
    if let Some(entries) = result.entries.as_mut() {
        entries.sort_by(|a, b| a.path.cmp(&b.path));
    }
    result
}

pub fn written(path: &str) -> WriteResult {
    WriteResult { error: None, path: Some(path.to_owned()) }
}

pub fn write_error(message: String) -> WriteResult {
    WriteResult { error: Some(message), path: None }
}

pub fn edited(path: &str, occurrences: u64) -> EditResult {
    EditResult { error: None, path: Some(path.to_owned()), occurrences: Some(occurrences) }
}

pub fn edit_error(message: String) -> EditResult {
    EditResult { error: Some(message), ..EditResult::default() }
}

pub fn deleted(path: &str) -> DeleteResult {
    DeleteResult { error: None, path: Some(path.to_owned()) }
}

pub fn delete_error(message: String) -> DeleteResult {
    DeleteResult { error: Some(message), path: None }
}

pub fn gm(path: impl Into<String>, line: u64, text: &str) -> GrepMatch {
    GrepMatch { path: path.into(), line, text: text.to_owned() }
}

pub fn hits(matches: Vec<GrepMatch>, truncated: bool) -> GrepResult {
    GrepResult { error: None, matches: Some(matches), truncated }
}

pub fn grep_error(message: String) -> GrepResult {
    GrepResult { error: Some(message), matches: None, truncated: false }
}

/// Glob matches `root/rel` for the space-separated `rels`, not truncated.
pub fn found(root: &str, rels: &str) -> GlobResult {
    GlobResult {
        error: None,
        matches: Some(
            rels.split_whitespace().map(|rel| FileInfo::new(format!("{root}/{rel}"), false)).collect(),
        ),
        truncated: false,
        truncation_reason: None,
    }
}

pub fn glob_error(message: String) -> GlobResult {
    GlobResult { error: Some(message), matches: None, truncated: false, truncation_reason: None }
}

pub fn write_req(path: &str, content: &str) -> FsRequest {
    FsRequest::Write { path: path.to_owned(), content: content.to_owned() }
}

pub fn edit_req(path: &str, old: &str, new: &str, replace_all: bool) -> FsRequest {
    FsRequest::Edit { path: path.to_owned(), old: old.to_owned(), new: new.to_owned(), replace_all }
}

pub fn delete_req(path: &str) -> FsRequest {
    FsRequest::Delete { path: path.to_owned() }
}

//! The seven file verbs, implemented once (the contract: deepagents 0.7.32's `BaseSandbox`). The server calls
//! [`run`] for native `fs` requests; `agentd fs …` calls it for the one-shot CLI that the host's derived
//! path runs through any exec channel. Both therefore give identical results, byte for byte.
//!
//! Every verb returns its result type with failures as values (`error` strings the contract fixes);
//! nothing here returns `Err` or panics on file-system conditions. Paths resolve through the
//! [`Workspace`] (relative ones against it; with `--root`, all of them under it, escapes refused as
//! `invalid_path`) into opened file descriptors, and the verbs work on those (`*at` calls, reads and
//! writes on the opened file, walks from directory fds that never follow a link), so a path swapped
//! meanwhile cannot redirect them; the path strings in results and messages are the caller's, verbatim.
//!
//! - [`ls`], [`read`], [`write`](mod@write), [`edit`], [`delete`]: one file or directory.
//! - [`glob`], [`grep`]: tree walks with the contract's matching rules.

pub mod budget;
pub mod delete;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod ls;
pub mod read;
pub mod write;

use std::io;

use agentd_protocol::fs::{FsRequest, FsResponse};

use crate::root::Workspace;

/// Runs one verb. Blocking: call it off the async runtime.
pub fn run(request: FsRequest, base: &Workspace) -> FsResponse {
    match request {
        FsRequest::Ls { path } => FsResponse::Ls(ls::ls(&path, base)),
        FsRequest::Read { path, offset, limit } => FsResponse::Read(read::read(&path, offset, limit, base)),
        FsRequest::Write { path, content } => FsResponse::Write(write::write(&path, &content, base)),
        FsRequest::Edit { path, old, new, replace_all } => {
            FsResponse::Edit(edit::edit(&path, &old, &new, replace_all, base))
        }
        FsRequest::Glob { pattern, path } => FsResponse::Glob(glob::glob(&pattern, path.as_deref(), base)),
        FsRequest::Grep { pattern, path, glob, max_count } => {
            FsResponse::Grep(grep::grep(&pattern, path.as_deref(), glob.as_deref(), max_count, base))
        }
        FsRequest::Delete { path } => FsResponse::Delete(delete::delete(&path, base)),
    }
}

/// The errno of an IO error, when it has one.
pub fn errno(err: &io::Error) -> Option<nix::errno::Errno> {
    err.raw_os_error().map(nix::errno::Errno::from_raw)
}

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
//! - [`budget`]: the byte budget of a reply that `glob` and `grep` fill.
//!
//! The profile's permission rules on every verb (and transfer) are [`crate::guard`]'s.

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

use crate::cancel::Cancel;
use crate::guard;
use crate::root::Workspace;

/// Runs one verb, held to the workspace's permission rules ([`guard`]). Blocking: call it off the
/// async runtime. The verbs that walk or read poll
/// `cancel` at each step; `write` and `delete` are short and never interrupted once started.
pub fn run(request: FsRequest, base: &Workspace, cancel: &Cancel) -> FsResponse {
    if let Some(refused) = guard::refuse(&request, base) {
        return refused;
    }
    match request {
        FsRequest::Ls { path } => FsResponse::Ls(ls::ls(&path, base, cancel)),
        FsRequest::Read { path, offset, limit } => {
            FsResponse::Read(read::read(&path, offset, limit, base, cancel))
        }
        FsRequest::Write { path, content } => FsResponse::Write(write::write(&path, &content, base)),
        FsRequest::Edit { path, old, new, replace_all } => {
            FsResponse::Edit(edit::edit(&path, &old, &new, replace_all, base, cancel))
        }
        FsRequest::Glob { pattern, path } => {
            FsResponse::Glob(glob::glob(&pattern, path.as_deref(), base, cancel))
        }
        FsRequest::Grep { pattern, path, glob, max_count } => {
            FsResponse::Grep(grep::grep(&pattern, path.as_deref(), glob.as_deref(), max_count, base, cancel))
        }
        FsRequest::Delete { path } => FsResponse::Delete(delete::delete(&path, base)),
    }
}

/// The errno of an IO error, when it has one.
pub fn errno(err: &io::Error) -> Option<nix::errno::Errno> {
    err.raw_os_error().map(nix::errno::Errno::from_raw)
}

#[cfg(test)]
mod tests {
    use agentd_protocol::fs::{GrepResult, ReadResult};

    use super::*;

    /// A token cancelled before the verb runs stops it at its first step: nothing is listed, matched
    /// or read, on every thread and route.
    #[test]
    fn a_cancelled_token_stops_the_walks_and_reads_at_their_first_step() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.txt", "sub/b.txt", "sub/deep/c.txt"] {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "needle\n").unwrap();
        }
        let ws = Workspace::open(dir.path().into());
        let cancel = Cancel::default();
        cancel.cancel();
        let run = |request| run(request, &ws, &cancel);
        let FsResponse::Ls(listed) = run(FsRequest::Ls { path: ".".into() }) else { panic!() };
        assert_eq!(listed.entries, Some(Vec::new()));
        let root = dir.path().to_str().map(str::to_owned);
        let FsResponse::Glob(globbed) = run(FsRequest::Glob { pattern: "**/*.txt".into(), path: root })
        else {
            panic!()
        };
        assert_eq!(globbed.matches, Some(Vec::new()));
        for glob in [None, Some("*.txt"), Some("**/*.txt")] {
            let request = FsRequest::Grep {
                pattern: "needle".into(),
                path: None,
                glob: glob.map(Into::into),
                max_count: None,
            };
            let FsResponse::Grep(GrepResult { matches, .. }) = run(request) else { panic!() };
            assert_eq!(matches, Some(Vec::new()), "{glob:?}");
        }
        let FsResponse::Read(ReadResult { error, .. }) =
            run(FsRequest::Read { path: "a.txt".into(), offset: 0, limit: 10 })
        else {
            panic!()
        };
        assert!(error.is_some_and(|e| e.ends_with("cancelled")));
    }
}

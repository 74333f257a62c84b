//! The file verbs as command-line arguments (feature `cli`), defined once for every tool that offers
//! them (`agentd fs …`, `agentctl …`), so their names, flags and defaults cannot drift apart.
//!
//! Parsing does no IO: the one argument that is not on the command line, `write`'s content, comes
//! from the caller's `content` function in [`FsCommand::into_request`] (both tools read stdin).

use std::io;

use crate::fs::{DEFAULT_READ_LIMIT, FsRequest};

/// One file verb with its arguments (the subcommands of a clap parser).
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum FsCommand {
    /// List one directory level.
    Ls { path: String },
    /// Read a page of lines of a file.
    Read {
        path: String,
        /// 0-based line to start at (negative: 0).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        offset: i64,
        /// Lines to return at most (0 or negative: none).
        #[arg(long, default_value_t = DEFAULT_READ_LIMIT, allow_negative_numbers = true)]
        limit: i64,
    },
    /// Create or overwrite a file with the text on stdin (UTF-8), creating parent directories.
    Write { path: String },
    /// Replace OLD by NEW in a file (OLD must occur exactly once unless --replace-all).
    Edit {
        path: String,
        old: String,
        new: String,
        /// Replace every occurrence.
        #[arg(long)]
        replace_all: bool,
    },
    /// Files matching a glob pattern under PATH (default /).
    Glob { pattern: String, path: Option<String> },
    /// Lines containing a literal string under PATH (default `.`: the workspace).
    Grep {
        pattern: String,
        path: Option<String>,
        /// Only files matching this glob.
        #[arg(long)]
        glob: Option<String>,
        /// Stop after this many matches.
        #[arg(long, allow_negative_numbers = true)]
        max_count: Option<i64>,
    },
    /// Remove a file, a link or a directory tree (links are not followed).
    #[command(visible_alias = "rm")]
    Delete { path: String },
}

impl FsCommand {
    /// The request this command stands for. `content` is called only for `write`, to fetch the text
    /// to write (its error is returned as is).
    pub fn into_request(self, content: impl FnOnce() -> io::Result<String>) -> io::Result<FsRequest> {
        Ok(match self {
            Self::Ls { path } => FsRequest::Ls { path },
            Self::Read { path, offset, limit } => FsRequest::Read { path, offset, limit },
            Self::Write { path } => FsRequest::Write { path, content: content()? },
            Self::Edit { path, old, new, replace_all } => FsRequest::Edit { path, old, new, replace_all },
            Self::Glob { pattern, path } => FsRequest::Glob { pattern, path },
            Self::Grep { pattern, path, glob, max_count } => {
                FsRequest::Grep { pattern, path, glob, max_count }
            }
            Self::Delete { path } => FsRequest::Delete { path },
        })
    }
}

#[cfg(test)]
mod tests {

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        verb: FsCommand,
    }

    fn parse(args: &[&str]) -> Result<FsRequest, String> {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.verb.into_request(|| Ok("stdin text".to_owned())).map_err(|e| e.to_string())
    }

    #[test]
    fn every_verb_becomes_its_request() {
        assert_eq!(parse(&["ls", "d"]), Ok(FsRequest::Ls { path: "d".into() }));
        assert_eq!(
            parse(&["read", "f"]),
            Ok(FsRequest::Read { path: "f".into(), offset: 0, limit: DEFAULT_READ_LIMIT })
        );
        assert_eq!(
            parse(&["read", "f", "--offset", "-5", "--limit", "-1"]),
            Ok(FsRequest::Read { path: "f".into(), offset: -5, limit: -1 })
        );
        assert_eq!(
            parse(&["write", "f"]),
            Ok(FsRequest::Write { path: "f".into(), content: "stdin text".into() })
        );
        assert_eq!(
            parse(&["edit", "f", "a", "b", "--replace-all"]),
            Ok(FsRequest::Edit { path: "f".into(), old: "a".into(), new: "b".into(), replace_all: true })
        );
        assert_eq!(
            parse(&["edit", "f", "--", "-a", "-b"]),
            Ok(FsRequest::Edit { path: "f".into(), old: "-a".into(), new: "-b".into(), replace_all: false })
        );
        assert_eq!(parse(&["glob", "*.rs"]), Ok(FsRequest::Glob { pattern: "*.rs".into(), path: None }));
        assert_eq!(
            parse(&["grep", "x", "src", "--glob", "*.rs", "--max-count", "-1"]),
            Ok(FsRequest::Grep {
                pattern: "x".into(),
                path: Some("src".into()),
                glob: Some("*.rs".into()),
                max_count: Some(-1),
            })
        );
        assert_eq!(parse(&["delete", "f"]), Ok(FsRequest::Delete { path: "f".into() }));
        assert_eq!(parse(&["rm", "f"]), Ok(FsRequest::Delete { path: "f".into() }));
    }

    #[test]
    fn only_write_asks_for_content_and_its_error_is_returned() {
        let failing = || Err(io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"));
        let err = FsCommand::Write { path: "f".into() }.into_request(failing).unwrap_err();
        assert_eq!(err.to_string(), "not UTF-8");
        assert!(FsCommand::Ls { path: "f".into() }.into_request(failing).is_ok());
    }

    #[test]
    fn missing_arguments_are_usage_errors() {
        assert!(parse(&["edit", "f", "a"]).is_err());
        assert!(parse(&["read"]).is_err());
        assert!(parse(&["grep", "x", "--max-count", "many"]).is_err());
    }
}

//! `grep` (contract §3.6). Placeholder until implemented.

use std::path::Path;

use agentd_protocol::fs::GrepResult;

/// Lines containing the literal `pattern` under `path` (default `.`), relative paths resolved
/// against `base`.
pub fn grep(
    pattern: &str,
    path: Option<&str>,
    glob: Option<&str>,
    max_count: Option<i64>,
    base: &Path,
) -> GrepResult {
    let _ = (pattern, path, glob, max_count, base);
    GrepResult { error: Some("grep: not implemented".into()), ..GrepResult::default() }
}

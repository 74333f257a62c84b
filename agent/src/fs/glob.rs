//! `glob` (contract §3.7). Placeholder until implemented.

use std::path::Path;

use agentd_protocol::fs::GlobResult;

/// Files matching `pattern` under `path` (default `/`); `base` resolves nothing here (glob roots are
/// made absolute), it is passed for symmetry with the other verbs.
pub fn glob(pattern: &str, path: Option<&str>, base: &Path) -> GlobResult {
    let _ = (pattern, path, base);
    GlobResult { error: Some("glob: not implemented".into()), ..GlobResult::default() }
}

//! agentd's scratch directories (`agentd-<pid>.<16 hex>`, see agent/src/scratch.rs): finding them,
//! and removing what an agentd killed before its cleanup left.

use std::path::PathBuf;

/// The scratch directories of agentd `pid` in `parent`: `agentd-<pid>.<16 hex>`.
pub fn scratch_dirs_in(parent: &std::path::Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("agentd-{pid}.");
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(|name| name.strip_prefix(&prefix))
                .is_some_and(|random| random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .map(|entry| entry.path())
        .collect()
}

/// The scratch directory of agentd `pid`, wherever agentd may have made it (`$TMPDIR`, `/run`,
/// `/var/tmp`, `/tmp`; see agent/src/scratch.rs).
pub fn scratch_dir(pid: u32) -> Option<PathBuf> {
    let parents = [std::env::temp_dir(), "/run".into(), "/var/tmp".into(), "/tmp".into()];
    parents.iter().flat_map(|parent| scratch_dirs_in(parent, pid)).next()
}

/// Removes the scratch directory of an agentd that could not remove it itself (killed with SIGKILL,
/// or by a test's pids cap). Call it only once that agentd is gone.
pub fn remove_scratch(pid: u32) {
    while let Some(dir) = scratch_dir(pid) {
        if std::fs::remove_dir_all(&dir).is_err() {
            break;
        }
    }
}

//! What an agentd killed with SIGKILL (or crashed) leaves behind: its directories (the scratch
//! directory `agentd-<pid>.<random>`, [`crate::scratch`]; the per-command cgroups' parent
//! `agentd-<pid>`), which the next agentd that makes one beside them sweeps. Each agentd holds an exclusive `flock` on its own directories
//! for its whole life; the kernel drops it however agentd dies, so a directory is taken for dead
//! only when its pid is not alive here (an agentd of an older version holds no lock) and its lock
//! is free (an agentd of another pid namespace may share the pid of a dead one here).

use std::fs::File;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::unistd::Pid;

/// An exclusive `flock` on the directory `dir`, or `None` when another process holds one, or `dir`
/// is not a directory (a link is not followed: opening what it names could block, on a FIFO).
pub fn lock_dir(dir: &Path) -> Option<Flock<File>> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir)
        .ok()?;
    Flock::lock(opened, FlockArg::LockExclusiveNonblock).ok()
}

/// The pid in a directory name `agentd-<pid>` or `agentd-<pid>.<16 hex>` of another agentd than
/// `own`. Pure.
fn other_agentds_pid(name: &str, own: u32) -> Option<Pid> {
    let rest = name.strip_prefix("agentd-")?;
    let pid = match rest.split_once('.') {
        Some((pid, random)) if random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()) => pid,
        Some(_) => return None,
        None => rest,
    };
    let pid: u32 = pid.parse().ok()?;
    if pid == own {
        return None;
    }
    crate::pid::from_wire(pid)
}

/// Runs `remove` on each `agentd-<pid>` directory in `parent` of an agentd that is gone (see the
/// module doc), while holding its lock, so that no agentd starting meanwhile can take it.
pub fn sweep_dead_agentds(parent: &Path, own: u32, remove: impl Fn(&Path)) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| other_agentds_pid(name, own)) else {
            continue;
        };
        let dead = nix::sys::signal::kill(pid, None) == Err(Errno::ESRCH);
        let dir = entry.path();
        if dead && let Some(_held) = lock_dir(&dir) {
            tracing::debug!("removing {}, left by an agentd that is gone", dir.display());
            remove(&dir);
        }
    }
}

/// Removes a dead agentd's scratch directory `dir`, only if it is a directory of agentd's own user:
/// the temp dir is shared, and another user may have made `agentd-<pid>` (or a link by that name).
/// Nothing below it is followed either: `remove_dir_all` removes links, never what they name.
pub fn remove_scratch(dir: &Path) {
    let ours = std::fs::symlink_metadata(dir)
        .is_ok_and(|meta| meta.is_dir() && meta.uid() == nix::unistd::geteuid().as_raw());
    if ours && let Err(err) = std::fs::remove_dir_all(dir) {
        tracing::warn!("cannot remove {}: {err}", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_agentds_directories_are_swept() {
        assert_eq!(other_agentds_pid("agentd-4656", 7), Some(Pid::from_raw(4656)));
        assert_eq!(other_agentds_pid("agentd-4656.0123456789abcdef", 7), Some(Pid::from_raw(4656)));
        for name in [
            "agentd-7",
            "agentd-7.0123456789abcdef",
            "agentd-0",
            "agentd-",
            "agentd-x1",
            "agentd--3",
            "agentd-99999999999",
            "docker",
            "agentd-4656.sock",
            "agentd-4656.0123456789abcdeg",
            "agentd-.0123456789abcdef",
        ] {
            assert_eq!(other_agentds_pid(name, 7), None, "{name}");
        }
    }
}

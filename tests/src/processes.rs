//! Processes as `/proc` shows them, to check that nothing is left running and what a process
//! holds (threads, memory, CPU time, descriptors); stopping one; and [`eventually`], the poll the
//! tests wait with.

use std::time::Duration;

/// `pid` as nix takes it (a pid always fits an i32: `pid_max` is at most 2^22).
pub fn nix_pid(pid: u32) -> nix::unistd::Pid {
    nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid fits an i32"))
}

/// Sends SIGTERM to `child` and waits up to `within` for it to exit (a failure past that).
pub async fn sigterm_and_wait(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    nix::sys::signal::kill(nix_pid(child.id()), nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "{} ignored SIGTERM", child.id());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Live processes below `pid` (by parent pid), as (pid, cmdline with spaces).
pub fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(p) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid: u32 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        if state != "Z" {
            parent_of.push((p, ppid));
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(current) = queue.pop() {
        for &(child, parent) in &parent_of {
            if parent == current {
                queue.push(child);
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                found.push((child, String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_owned()));
            }
        }
    }
    found
}

/// Live processes anywhere whose command line is exactly `cmdline` (words joined by spaces).
pub fn processes_named(cmdline: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&raw).replace('\0', " ").trim() == cmdline
        })
        .collect()
}

/// A `/proc/<pid>/status` field in kB (`VmRSS`, `VmHWM`).
pub fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok()
        })
        .expect("field")
}

/// A plain-number `/proc/<pid>/status` field (`Threads`).
pub fn status_count(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok())
        .expect("field")
}

/// CPU time (user + system) `pid` has used, in clock ticks, from `/proc/<pid>/stat`.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces) start at `state`, field 3.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Waits up to `within` for `check` to hold.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}
